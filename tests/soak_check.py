#!/usr/bin/env python3
"""Long-run stability check: run bench_soak under hakmem and assert the
seeds' bounds between 20% into the run and its end.

  soak_check.py BENCH_SOAK LIBHAKMEM SECONDS [WS] [MAX_RSS_DRIFT_PCT] [MAX_OPS_DROP_PCT]

Robust measures, because the machine is shared (2 cores, other tests and
programs running): bench_soak samples once a second, and the figures
compared are medians over a window from 20% to 35% of the run against the
last 15% of it. Throughput is taken per second of process CPU time
(cpu_ops/s): wall-clock ops/s swings by tens of percent when other
processes take the CPUs, CPU time charged to the benchmark far less. The
wall-clock drift is printed too.
"""
import os
import re
import subprocess
import sys


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    bench, lib, secs = sys.argv[1], sys.argv[2], sys.argv[3]
    ws = sys.argv[4] if len(sys.argv) > 4 else "10000"
    max_rss = float(sys.argv[5]) if len(sys.argv) > 5 else 5.0
    max_drop = float(sys.argv[6]) if len(sys.argv) > 6 else 5.0
    env = dict(os.environ, LD_PRELOAD=lib)
    p = subprocess.run([bench, secs, "2", ws, "42", "1"], env=env, capture_output=True, text=True)
    out = p.stdout
    if p.returncode != 0:
        print(out[-2000:], p.stderr[-2000:])
        sys.exit("bench_soak failed with status %d" % p.returncode)

    def val(key):
        m = re.search(r"^%s:\s*(-?[0-9.]+)" % re.escape(key), out, re.M)
        if not m:
            sys.exit("no '%s' in bench_soak's output" % key)
        return float(m.group(1))

    for line in out.splitlines():
        if line.startswith(("median_windows", "rss_median_mb", "rss_live_ratio_mean", "ops/s")):
            print(line)
    rss = val("rss_drift_median_pct")
    cpu = val("cpu_ops_drift_median_pct")
    wall = val("ops_drift_median_pct")
    print("rss drift %+.1f%% (bound +%.0f%%), ops per CPU-second %+.1f%% (bound -%.0f%%), wall ops/s %+.1f%% "
          "(not asserted)" % (rss, max_rss, cpu, max_drop, wall))
    bad = []
    if rss > max_rss:
        bad.append("RSS grew %.1f%%" % rss)
    if cpu < -max_drop:
        bad.append("ops per CPU-second fell %.1f%%" % -cpu)
    if bad:
        sys.exit("soak: " + "; ".join(bad))
    print("soak: ok")


if __name__ == "__main__":
    main()
