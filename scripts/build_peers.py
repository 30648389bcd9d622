#!/usr/bin/env python3
"""Build the newest peer allocators as LD_PRELOAD libraries in the build tree.

The sources come from crates.io, through cargo (nothing of theirs is kept in
this repository):

  libmimalloc-sys  c_src/mimalloc/v2  ->  mimalloc 2.x  (src/static.c, MI_MALLOC_OVERRIDE)
                   c_src/mimalloc/v3  ->  mimalloc 3.x
  snmalloc-sys     upstream/          ->  snmalloc      (its CMake, libsnmallocshim.so)

A throwaway cargo package in BUILD/peers/fetch depends on the two crates at
the exact versions below; `cargo vendor` unpacks them into BUILD/peers/vendor,
and each peer is built into BUILD/peers/<name>/.  The crate ships mimalloc
without the cmake/ helpers its CMakeLists.txt includes, so mimalloc is built
as the crate's own build.rs does with its `override` feature (the single
translation unit src/static.c with MI_MALLOC_OVERRIDE), with the flags of
mimalloc's CMake release build (-O3, -fvisibility=hidden,
-ftls-model=initial-exec, -fno-builtin-malloc), as a shared library.  The
result is BUILD/peers/peers.json: name -> {"lib": path, "version": ...},
which scripts/bench.py reads.  A peer that cannot be fetched or built is left
out with a note (in peers.json's "notes"); the script then still exits 0,
so that `make bench` runs with the columns it has.

  python3 scripts/build_peers.py --build build [--force] [--jobs N]
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

# Exact crate versions (bump deliberately: the results record them).
CRATES = {"libmimalloc-sys": "0.1.49", "snmalloc-sys": "0.7.6"}

# name -> (crate, source dir inside the crate, how: "mimalloc" or CMake (options, target), library file)
PEERS = {
    "mimalloc-v2": ("libmimalloc-sys", "c_src/mimalloc/v2", "mimalloc", "libmimalloc.so"),
    "mimalloc-v3": ("libmimalloc-sys", "c_src/mimalloc/v3", "mimalloc", "libmimalloc.so"),
    "snmalloc": ("snmalloc-sys", "upstream", (["-DSNMALLOC_BUILD_TESTING=OFF"], "snmallocshim"),
                 "libsnmallocshim.so"),
}
PEER_ORDER = ["mimalloc-v2", "mimalloc-v3", "snmalloc"]


def log(msg):
    print("build_peers: " + msg, flush=True)


def run(cmd, cwd=None, timeout=1800):
    r = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    return r.returncode, r.stdout.decode(errors="replace")


def fetch(root):
    """cargo vendor the crates into root/vendor; return {crate: dir} or raise RuntimeError."""
    cargo = shutil.which("cargo")
    if not cargo:
        raise RuntimeError("cargo not found (the peers' sources come from crates.io)")
    pkg = os.path.join(root, "fetch")
    os.makedirs(os.path.join(pkg, "src"), exist_ok=True)
    with open(os.path.join(pkg, "Cargo.toml"), "w") as f:
        f.write('[package]\nname = "hakmem-peers-fetch"\nversion = "0.0.0"\nedition = "2021"\npublish = false\n\n'
                "[workspace]\n\n[dependencies]\n")
        for c, v in CRATES.items():
            f.write('%s = "=%s"\n' % (c, v))
    with open(os.path.join(pkg, "src", "lib.rs"), "w") as f:
        f.write("// only a carrier for `cargo vendor` (scripts/build_peers.py)\n")
    vendor = os.path.join(root, "vendor")
    code, out = run([cargo, "vendor", "--versioned-dirs", "--manifest-path", os.path.join(pkg, "Cargo.toml"),
                     vendor], timeout=900)
    if code != 0:
        raise RuntimeError("cargo vendor failed: " + out.strip()[-600:])
    dirs = {c: os.path.join(vendor, "%s-%s" % (c, v)) for c, v in CRATES.items()}
    for c, d in dirs.items():
        if not os.path.isdir(d):
            raise RuntimeError("cargo vendor did not unpack %s (%s)" % (c, d))
    return dirs


def peer_version(name, src):
    """The peer's own version, read from its sources."""
    if name.startswith("mimalloc"):
        try:
            with open(os.path.join(src, "include", "mimalloc.h")) as f:
                m = re.search(r"#define\s+MI_MALLOC_VERSION\s+(\d+)", f.read())
            if m:
                v = int(m.group(1))
                return "mimalloc %d.%d.%d" % (v // 10000, v // 100 % 100, v % 100)
        except OSError:
            pass
        return "mimalloc (version unknown)"
    # snmalloc states no version in its sources: name the crate and the
    # snmalloc-rs commit it was packaged from (its upstream/ is a submodule there).
    sha = ""
    try:
        with open(os.path.join(src, "..", ".cargo_vcs_info.json")) as f:
            sha = json.load(f).get("git", {}).get("sha1", "")[:12]
    except (OSError, ValueError):
        pass
    return "snmalloc of snmalloc-sys %s%s" % (CRATES["snmalloc-sys"], " (snmalloc-rs %s)" % sha if sha else "")


def build_peer(name, crate_dir, root, jobs):
    crate, sub, how, libname = PEERS[name]
    src = os.path.join(crate_dir, sub)
    bdir = os.path.join(root, name)
    os.makedirs(bdir, exist_ok=True)
    lib = os.path.join(bdir, libname)
    if how == "mimalloc":
        cc = os.environ.get("CC") or shutil.which("cc") or "gcc"
        code, out = run([cc, "-shared", "-fPIC", "-O3", "-DNDEBUG", "-DMI_BUILD_RELEASE", "-DMI_MALLOC_OVERRIDE",
                         "-fvisibility=hidden", "-ftls-model=initial-exec", "-fno-builtin-malloc",
                         "-I", os.path.join(src, "include"), "-I", os.path.join(src, "src"),
                         os.path.join(src, "src", "static.c"), "-o", lib, "-lpthread", "-lrt"])
        if code != 0:
            raise RuntimeError("compile failed: " + out.strip()[-600:])
    else:
        opts, target = how
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        code, out = run(["cmake", "-S", src, "-B", bdir] + gen + ["-DCMAKE_BUILD_TYPE=Release"] + opts)
        if code != 0:
            raise RuntimeError("cmake configure failed: " + out.strip()[-600:])
        code, out = run(["cmake", "--build", bdir, "--target", target, "-j", str(jobs)])
        if code != 0:
            raise RuntimeError("build failed: " + out.strip()[-600:])
    if not os.path.exists(lib):
        raise RuntimeError("%s was not produced" % lib)
    # The library must really replace malloc when preloaded.
    code, out = run(["nm", "-D", "--defined-only", lib])
    if code == 0 and not re.search(r"\sT\s+malloc$", out, re.M):
        raise RuntimeError("%s does not export malloc" % lib)
    return {"lib": lib, "version": peer_version(name, src), "crate": "%s %s" % (crate, CRATES[crate]),
            "source": os.path.relpath(src, root)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build directory (default: build)")
    ap.add_argument("--force", action="store_true", help="rebuild even if peers.json lists every peer")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    args = ap.parse_args()
    root = os.path.join(os.path.abspath(args.build), "peers")
    os.makedirs(root, exist_ok=True)
    manifest = os.path.join(root, "peers.json")
    if not args.force and os.path.exists(manifest):
        try:
            with open(manifest) as f:
                old = json.load(f)
            if all(os.path.exists(old.get("peers", {}).get(p, {}).get("lib", "")) for p in PEER_ORDER):
                log("all peers present (%s); --force rebuilds" % os.path.relpath(manifest))
                return 0
        except (OSError, ValueError):
            pass
    peers, notes = {}, []
    try:
        dirs = fetch(root)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        dirs = None
        notes.append("sources not fetched: %s" % e)
    for name in PEER_ORDER if dirs else []:
        log("building %s ..." % name)
        try:
            peers[name] = build_peer(name, dirs[PEERS[name][0]], root, args.jobs)
            log("%s: %s (%s)" % (name, os.path.relpath(peers[name]["lib"]), peers[name]["version"]))
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
            notes.append("%s not built: %s" % (name, e))
    for n in notes:
        log("note: " + n)
    with open(manifest, "w") as f:
        json.dump({"crates": CRATES, "peers": peers, "notes": notes}, f, indent=1)
    log("wrote %s" % os.path.relpath(manifest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
