#!/usr/bin/env python3
"""A/B runs: several hakmem builds or settings beside other allocators, on
workloads given on the command line (a benchmark binary and its arguments).

Used to choose build constants and option defaults by measurement (the
pool limit, HAKMEM_LARGE_CACHE_MB; docs/PERFORMANCE.md records the tables). Runs are
interleaved RUNS times; prints the median ops/s and the median peak RSS per
variant and workload, and the OS call counts of one `strace -f -c` run.
Uses scripts/bench.py for running and measuring.

  python3 scripts/bench_ab.py --runs 5 \\
      --variant p256=build/libhakmem.so --variant p1m=/tmp/p20/libhakmem.so \\
      --variant 'hakmem-max16=build/libhakmem.so HAKMEM_LARGE_CACHE_MB=16' \\
      --variant mimalloc --variant glibc \\
      --workload 'mid_large=build/bench/bench_mid_large 120000 64 42'

A variant is NAME=LIB [VAR=VALUE...] (LIB preloaded, variables set) or the
name of a system allocator that bench.py knows (glibc, mimalloc, jemalloc,
tcmalloc).
"""

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def parse_variant(text):
    if "=" not in text.split()[0]:
        name = text.strip()
        if name == "glibc":
            return name, {}
        libs, _ = bench.discover_allocators("", {name})
        if not libs:
            sys.exit("unknown allocator %s" % name)
        return name, libs[0][1]
    name, rest = text.split("=", 1)
    words = rest.split()
    env = {"LD_PRELOAD": os.path.abspath(words[0])}
    for w in words[1:]:
        k, v = w.split("=", 1)
        env[k] = v
    return name, env


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", action="append", required=True)
    ap.add_argument("--workload", action="append", required=True, help="NAME=BINARY ARGS...")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--no-strace", action="store_true")
    args = ap.parse_args()
    variants = [parse_variant(v) for v in args.variant]
    workloads = []
    for w in args.workload:
        name, cmd = w.split("=", 1)
        workloads.append((name, cmd.split()))
    res = {(w, v): [] for w, _ in workloads for v, _ in variants}
    for r in range(args.runs):
        for wname, cmd in workloads:
            for vname, env in variants:
                out = bench.run_once(cmd, env, args.timeout)
                if not out["ok"]:
                    sys.exit("%s under %s failed: %s" % (wname, vname, out.get("error")))
                res[(wname, vname)].append((out["ops"], out["maxrss_kb"]))
        print("run %d/%d done" % (r + 1, args.runs), file=sys.stderr, flush=True)
    calls = {}
    if not args.no_strace:
        for wname, cmd in workloads:
            for vname, env in variants:
                c, _ = bench.strace_counts(cmd, env, args.timeout)
                calls[(wname, vname)] = c
    print("| workload | variant | ops/s (median) | peak RSS MiB (median) | mmap | munmap | madvise | mremap |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for wname, _ in workloads:
        for vname, _ in variants:
            runs = res[(wname, vname)]
            ops = statistics.median(o for o, _ in runs)
            rss = statistics.median(m for _, m in runs) / 1024
            c = calls.get((wname, vname)) or {}
            print("| %s | %s | %s | %.1f | %s | %s | %s | %s |" % (
                wname, vname, bench.fmt_ops(ops), rss,
                *(c.get(k, "-") for k in ("mmap", "munmap", "madvise", "mremap"))))


if __name__ == "__main__":
    main()
