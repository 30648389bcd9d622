//! Compiles hakmem's C sources (../../src) into a static library with the
//! flags the CMake build uses. Only the hak_* API is needed: src/override.c
//! (the malloc/free symbols) and src/new_delete.cc (C++ operators) are left
//! out, so linking this crate never replaces the C allocator of the process.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

/// The library's sources: the `set(HAKMEM_SOURCES ...)` list of the top
/// CMakeLists.txt, so both builds compile the same files.
fn library_sources(root: &Path) -> Vec<PathBuf> {
    let cmake = root.join("CMakeLists.txt");
    let text = fs::read_to_string(&cmake)
        .unwrap_or_else(|e| panic!("cannot read {}: {}", cmake.display(), e));
    let start = text
        .find("set(HAKMEM_SOURCES")
        .expect("no set(HAKMEM_SOURCES ...) in CMakeLists.txt");
    let body = &text[start + "set(HAKMEM_SOURCES".len()..];
    let end = body.find(')').expect("unterminated set(HAKMEM_SOURCES");
    let sources: Vec<PathBuf> = body[..end]
        .split_whitespace()
        .filter(|f| f.ends_with(".c") && !f.ends_with("/override.c"))
        .map(|f| root.join(f))
        .collect();
    assert!(
        sources.iter().any(|f| f.ends_with("alloc.c")),
        "HAKMEM_SOURCES has no src/alloc.c: {:?}",
        sources
    );
    sources
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.join("..").join("..");
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

    println!("cargo:rerun-if-changed={}", root.join("CMakeLists.txt").display());
    println!("cargo:rerun-if-changed={}", root.join("include").display());
    println!("cargo:rerun-if-changed={}", root.join("src").display());
    for f in fs::read_dir(root.join("src")).unwrap() {
        println!("cargo:rerun-if-changed={}", f.unwrap().path().display());
    }
}
