#!/usr/bin/env python3
"""Check that src/ is layered (docs/DESIGN.md, "Layers and files").

Reads the objects of the library (build/CMakeFiles/hakmem_obj.dir/src/*.o)
with nm: every hm_* or hak_* symbol a file uses must be defined in a file of
its own layer or a lower one. The exceptions are the ones DESIGN.md lists:
start-up on first use (hm_init_slow, hm_init_state) and hak_debug_build.

  python3 scripts/check_layers.py [--build build]
"""

import argparse
import os
import subprocess
import sys

LAYERS = [
    ("base", ["line", "lock", "error", "options", "cgroup", "random", "registry", "sizeclass", "stack"]),
    ("OS", ["os"]),
    ("blocks", ["secure"]),
    ("policy", ["policy", "counters", "sample"]),
    ("SuperSlabs", ["slabpurge", "backend"]),
    ("lanes", ["heap", "big", "pack", "large"]),
    ("services", ["misuse", "purge", "stats", "prof", "explain", "stats_json"]),
    ("API", ["alloc", "override", "new_delete", "fork", "init"]),
]
ALLOWED_UP = {"hm_init_slow", "hm_init_state", "hak_debug_build"}


def symbols(obj):
    out = subprocess.run(["nm", obj], check=True, capture_output=True, text=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        kind, name = parts[-2], parts[-1]
        if not (name.startswith("hm_") or name.startswith("hak_")):
            continue
        (used if kind == "U" else defined).add(name)
    return defined, used


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    args = ap.parse_args()
    objdir = os.path.join(args.build, "CMakeFiles", "hakmem_obj.dir", "src")
    layer_of, owner = {}, {}
    files = {}
    for i, (_, names) in enumerate(LAYERS):
        for n in names:
            layer_of[n] = i
            ext = ".cc.o" if n == "new_delete" else ".c.o"
            path = os.path.join(objdir, n + ext)
            if not os.path.exists(path):
                sys.exit("check_layers: no %s (build first)" % path)
            files[n] = symbols(path)
            for sym in files[n][0]:
                owner[sym] = n
    bad = 0
    for n, (_, used) in files.items():
        for sym in sorted(used):
            o = owner.get(sym)
            if o is None or sym in ALLOWED_UP:
                continue
            if layer_of[o] > layer_of[n]:
                print("%s.c (%s) calls up into %s.c (%s): %s" % (n, LAYERS[layer_of[n]][0], o, LAYERS[layer_of[o]][0], sym))
                bad += 1
    if bad:
        sys.exit("check_layers: %d upward references" % bad)
    print("check_layers: %d files, no upward references" % len(files))


if __name__ == "__main__":
    main()
