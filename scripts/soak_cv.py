#!/usr/bin/env python3
"""Run-to-run variation of bench_soak: RUNS short runs under one allocator,
the coefficient of variation of their throughput.

  python3 scripts/soak_cv.py --build build [--runs 10] [--seconds 5] [--lib PATH]

Per run: overall ops/s (wall clock) and the median of the per-second ops
per CPU-second samples (less sensitive to other programs on the machine).
The seeds' target is a CV of at most 2%.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--seconds", default="5")
    ap.add_argument("--lib", default=None, help="allocator to preload (default: BUILD/libhakmem.so)")
    args = ap.parse_args()
    lib = args.lib or os.path.abspath(os.path.join(args.build, "libhakmem.so"))
    bench = os.path.join(args.build, "bench", "bench_soak")
    wall, cpu = [], []
    for i in range(args.runs):
        p = subprocess.run([bench, args.seconds, "2", "10000", "42", "1"], env=dict(os.environ, LD_PRELOAD=lib),
                           capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit("bench_soak failed: %s" % p.stderr[-300:])
        wall.append(float(re.search(r"^ops/s:\s*([0-9.]+)", p.stdout, re.M).group(1)))
        samples = [float(x) for x in re.findall(r"cpu_ops/s:\s*([0-9.]+)", p.stdout)]
        cpu.append(statistics.median(samples[1:] or samples))  # the first second is warm-up
        print("run %2d: ops/s %.0f, median ops per CPU-second %.0f" % (i + 1, wall[-1], cpu[-1]), flush=True)

    def cv(v):
        return statistics.stdev(v) / statistics.fmean(v) * 100.0 if len(v) > 1 else 0.0

    print("%s, %d runs of %s s: CV of ops/s %.1f%%, CV of ops per CPU-second %.1f%% (target <= 2%%); "
          "1-min load average %.1f" % (os.path.basename(lib), args.runs, args.seconds, cv(wall), cv(cpu),
                                       os.getloadavg()[0]))


if __name__ == "__main__":
    main()
