#!/usr/bin/env python3
"""A/B table of hakmem option values on the benchmark suite.

Runs each benchmark of scripts/bench.py (its quick arguments unless --full)
with hakmem preloaded under each setting of one option, interleaved
(A B C A B C ...) RUNS times, and prints a Markdown table: median and mean
ops/s, the mean's ratio to the first setting (the default), and peak RSS.

  python3 scripts/ab_options.py --build build --option HAKMEM_FOREIGN_CACHE_KB \
      --values 64,0,16,256 [--bench xthread,larson] [--runs 10]

The first value should be the current default: every other row is compared
with it.  A change is worth adopting when its mean beats the default's by
more than the threshold (+1.0% for an option, as in the seeds).
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--build", default="build")
    ap.add_argument("--option", required=True, help="e.g. HAKMEM_CARVE_BYTES")
    ap.add_argument("--values", required=True, help="comma list; the first is the baseline")
    ap.add_argument("--bench", default="random_mixed_ws400,random_mixed_ws40000,larson,xthread")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--full", action="store_true", help="the full-length arguments, not the quick ones")
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()
    lib = os.path.abspath(os.path.join(a.build, "libhakmem.so"))
    if not os.path.exists(lib):
        sys.exit("no %s: run make first" % lib)
    values = a.values.split(",")
    wanted = a.bench.split(",")
    rows = []
    for name, binary, full_args, quick_args, *_ in bench.BENCHMARKS:
        if name not in wanted:
            continue
        cmd = [os.path.join(a.build, "bench", binary)] + (full_args if a.full else quick_args)
        ops = {v: [] for v in values}
        rss = {v: [] for v in values}
        for r in range(a.runs):
            for v in values:
                res = bench.run_once(cmd, {"LD_PRELOAD": lib, a.option: v}, a.timeout)
                if not res.get("ok"):
                    sys.exit("%s %s=%s failed: %s" % (name, a.option, v, res.get("error")))
                ops[v].append(res["ops"])
                rss[v].append(res["maxrss_kb"] / 1024.0)
            print("%s: run %d/%d done" % (name, r + 1, a.runs), file=sys.stderr, flush=True)
        base = statistics.mean(ops[values[0]])
        for v in values:
            m = statistics.mean(ops[v])
            rows.append((name, v, statistics.median(ops[v]), m, m / base,
                         100 * statistics.pstdev(ops[v]) / m, statistics.median(rss[v])))
    print("| benchmark | %s | median ops/s | mean ops/s | mean vs first | CV %% | peak RSS MiB |" % a.option)
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, v, med, mean, ratio, cv, r in rows:
        print("| %s | %s | %.1fM | %.1fM | %+.1f%% | %.1f | %.1f |" % (name, v, med / 1e6, mean / 1e6,
                                                                      100 * (ratio - 1), cv, r))


if __name__ == "__main__":
    main()
