//! Compiles hakmem's C sources into a static library with the flags the
//! CMake build uses. The sources are c_src/ when present (the packaged
//! crate: scripts/rust_crate.sh copies src/ and include/ there), else the
//! repository around the crate (../../src, ../../include). Only the hak_* API
//! is needed: src/override.c (the malloc/free symbols) and src/new_delete.cc
//! (C++ operators) are left out, so linking this crate never replaces the C
//! allocator of the process.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

/// The directory holding src/ and include/: the vendored copy, else the
/// repository.
fn c_root(manifest: &Path) -> PathBuf {
    let vendored = manifest.join("c_src");
    if vendored.join("src").is_dir() {
        return vendored;
    }
    let repo = manifest.join("..").join("..");
    if repo.join("include").join("hakmem.h").is_file() {
        return repo;
    }
    panic!(
        "hakmem's C sources are neither in {} (the packaged crate) nor in {} (a checkout)",
        vendored.display(),
        repo.display()
    );
}

/// Every src/*.c but override.c: the library's sources, as CMake's
/// HAKMEM_SOURCES lists them, without a list to keep in step here.
fn library_sources(root: &Path) -> Vec<PathBuf> {
    let dir = root.join("src");
    let mut sources: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {}", dir.display(), e))
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().map_or(false, |x| x == "c")
                && p.file_name().map_or(false, |n| n != "override.c")
        })
        .collect();
    sources.sort();
    assert!(!sources.is_empty(), "no C sources in {}", dir.display());
    sources
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = c_root(&manifest);
    let sources = library_sources(&root);

    let mut build = cc::Build::new();
    build
        .files(&sources)
        .include(root.join("include"))
        .include(root.join("src"))
        .define("_GNU_SOURCE", None)
        .define("HAKMEM_BUILDING", None)
        .flag("-std=gnu11")
        .flag("-ftls-model=initial-exec")
        .flag("-fvisibility=hidden")
        .flag("-fno-builtin-malloc")
        .opt_level(2)
        .warnings(true)
        .extra_warnings(true);
    if env::var_os("CARGO_FEATURE_STATS").is_some() {
        build.define("HAKMEM_FAST_COUNTERS", "1");
    }
    build.compile("hakmem");
    // dlsym (HAKMEM_FORCE_LIBC_ALLOC) and the thread-exit key
    println!("cargo:rustc-link-lib=dylib=dl");
    println!("cargo:rustc-link-lib=dylib=pthread");

    println!("cargo:rerun-if-changed={}", root.join("include").display());
    println!("cargo:rerun-if-changed={}", root.join("src").display());
    for f in fs::read_dir(root.join("src")).unwrap() {
        println!("cargo:rerun-if-changed={}", f.unwrap().path().display());
    }
}
