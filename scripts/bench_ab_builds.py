#!/usr/bin/env python3
"""A/B timing of builds of hakmem: bench_random_mixed under each library.

Runs are interleaved (A B C A B C ...), so that load from other processes
hits every build alike; the table gives the median ops/s per build and
working set, and each build's time per op relative to the first (+3.0% =
3% slower). Used to measure what the hardening checks and secure mode cost
(docs/SECURITY.md):

  python3 scripts/bench_ab_builds.py build-nochecks/libhakmem.so build/libhakmem.so \\
      build-secure/libhakmem.so [--ws 400,8192,40000] [--runs 11] [--iters 20000000]
"""

import argparse
import os
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(binary, lib, iters, ws, seed):
    """(ops/s of the timed loop by the wall clock, CPU seconds of the whole run)"""
    env = dict(os.environ)
    env.pop("HAKMEM_FORCE_LIBC_ALLOC", None)
    env["LD_PRELOAD"] = os.path.abspath(lib)
    p = subprocess.Popen([binary, str(iters), str(ws), seed], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    out = p.stdout.read().decode()
    p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit("%s under %s failed (%d):\n%s" % (binary, lib, p.returncode, out))
    for line in out.splitlines():
        if line.startswith("ops/s:"):
            return float(line.split()[1]), ru.ru_utime + ru.ru_stime
    sys.exit("no ops/s line from %s under %s:\n%s" % (binary, lib, out))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("libs", nargs="+", help="libhakmem.so of each build; the first is the reference")
    ap.add_argument("--bench", default=os.path.join(REPO, "build", "bench", "bench_random_mixed"))
    ap.add_argument("--ws", default="400,8192,40000")
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--iters", type=int, default=20000000)
    ap.add_argument("--seed", default="42")
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="median, or min: the best run (load from other processes only ever adds time)")
    args = ap.parse_args()
    for lib in args.libs:
        if not os.path.exists(lib):
            sys.exit("%s not found" % lib)
    ws_list = [int(w) for w in args.ws.split(",")]
    res = {(lib, ws): [] for lib in args.libs for ws in ws_list}
    for r in range(args.runs):
        for ws in ws_list:
            for lib in args.libs:
                res[(lib, ws)].append(run(args.bench, lib, args.iters, ws, args.seed))
        print("run %d/%d done" % (r + 1, args.runs), file=sys.stderr, flush=True)
    print("bench_random_mixed %d iters, seed %s, %d interleaved runs; vs %s:"
          % (args.iters, args.seed, args.runs, args.libs[0]))
    print("%s Mops/s of the timed loop (wall clock) and %s CPU seconds of the whole run;"
          % (("median", "median") if args.stat == "median" else ("best", "least")))
    print("(+x%) = x% more time than the reference")
    print("%-32s" % "library" + "".join("%36s" % ("ws %d: Mops/s, CPU s" % ws) for ws in ws_list))
    if args.stat == "median":
        med = {k: (statistics.median(v[0] for v in vs), statistics.median(v[1] for v in vs)) for k, vs in res.items()}
    else:
        med = {k: (max(v[0] for v in vs), min(v[1] for v in vs)) for k, vs in res.items()}
    for lib in args.libs:
        cells = []
        for ws in ws_list:
            ops, cpu = med[(lib, ws)]
            rops, rcpu = med[(args.libs[0], ws)]
            cells.append("%7.2f (%+5.1f%%) %6.3f (%+5.1f%%)" % (ops / 1e6, (rops / ops - 1) * 100, cpu,
                                                               (cpu / rcpu - 1) * 100))
        print("%-32s" % lib + "".join("%36s" % c for c in cells))
    # Paired: each round ran every build back to back, so the ratio within a
    # round cancels slow changes in the machine's load.
    print("\nCPU time relative to %s, per round (paired): median [quartiles]" % args.libs[0])
    for lib in args.libs[1:]:
        cells = []
        for ws in ws_list:
            q = statistics.quantiles([a[1] / b[1] for a, b in zip(res[(lib, ws)], res[(args.libs[0], ws)])], n=4)
            cells.append("%+5.1f%% [%+5.1f%%, %+5.1f%%]" % ((q[1] - 1) * 100, (q[0] - 1) * 100, (q[2] - 1) * 100))
        print("%-32s" % lib + "".join("%36s" % c for c in cells))


if __name__ == "__main__":
    main()
