#!/usr/bin/env python3
"""A/B of hakmem's purge settings: how HAKMEM_PURGE / HAKMEM_PURGE_DELAY_MS
trade system calls against resident memory.

Each benchmark runs under each setting, interleaved (A B C ... A B C ...),
RUNS times. Reported per setting: median ops/s, median madvise calls (from
hakmem's own [SS_OS_STATS] line), median peak RSS (ru_maxrss) and, for
bench_soak, the mean RSS/live ratio after 20% of the run.

  python3 scripts/purge_ab.py --build build [--runs 3] [--settings off,eager,0,10,100,1000]

A setting is `off`, `eager`, or a delay in ms (lazy).
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

BENCHES = [
    ("random_mixed_ws400", ["bench_random_mixed", "30000000", "400", "42"]),
    ("random_mixed_ws40000", ["bench_random_mixed", "30000000", "40000", "42"]),
    ("random_mixed_mid_ws400", ["bench_random_mixed", "10000000", "400", "42", "16", "262144"]),
    ("larson", ["larson", "2", "16", "1024", "1.0", "1000", "100", "42"]),
    ("soak", ["bench_soak", "4", "2", "10000", "42", "1"]),
]


def env_for(setting, lib):
    env = dict(os.environ, LD_PRELOAD=lib, HAKMEM_SS_OS_STATS="1")
    for k in ("HAKMEM_PURGE", "HAKMEM_PURGE_DELAY_MS", "HAKMEM_NO_MADVISE"):
        env.pop(k, None)
    if setting in ("off", "eager"):
        env["HAKMEM_PURGE"] = setting
    else:
        env["HAKMEM_PURGE_DELAY_MS"] = setting
    return env


def run_rss(cmd, env):
    """Run through wait4 to get this child's own peak RSS (KiB)."""
    pid = os.fork()
    if pid == 0:
        fd = os.open(os.devnull, os.O_WRONLY)
        out = os.open("/tmp/purge_ab.out.%d" % os.getpid(), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        err = os.open("/tmp/purge_ab.err.%d" % os.getpid(), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        try:
            os.execve(cmd[0], cmd, env)
        finally:
            os._exit(127)
    _, status, ru = os.wait4(pid, 0)
    outp, errp = "/tmp/purge_ab.out.%d" % pid, "/tmp/purge_ab.err.%d" % pid
    with open(outp) as f:
        stdout = f.read()
    with open(errp) as f:
        stderr = f.read()
    os.unlink(outp)
    os.unlink(errp)
    if status != 0:
        sys.exit("%s failed (status %d): %s" % (" ".join(cmd), status, stderr[-300:]))
    ops = float(re.search(r"^ops/s:\s*([0-9.]+)", stdout, re.M).group(1))
    m = re.search(r"madvise=(\d+)", stderr)
    ratio = re.search(r"rss_live_ratio_mean:\s*([0-9.]+)", stdout)
    return {"ops": ops, "madvise": int(m.group(1)) if m else -1, "rss_mb": ru.ru_maxrss / 1024.0,
            "ratio": float(ratio.group(1)) if ratio else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--settings", default="off,eager,0,10,100,1000")
    ap.add_argument("--bench", default="", help="comma-separated row names (default: all)")
    args = ap.parse_args()
    lib = os.path.abspath(os.path.join(args.build, "libhakmem.so"))
    bindir = os.path.abspath(os.path.join(args.build, "bench"))
    settings = args.settings.split(",")
    benches = [b for b in BENCHES if not args.bench or b[0] in args.bench.split(",")]
    print("| benchmark | setting | ops/s (median) | madvise calls | peak RSS MiB | RSS/live (soak) |")
    print("|---|---|---:|---:|---:|---:|")
    for name, cmd in benches:
        full = [os.path.join(bindir, cmd[0])] + cmd[1:]
        res = {s: [] for s in settings}
        for _ in range(args.runs):
            for s in settings:
                res[s].append(run_rss(full, env_for(s, lib)))
        for s in settings:
            r = res[s]
            ratios = [x["ratio"] for x in r if x["ratio"] is not None]
            print("| %s | %s | %.1fM | %d | %.1f | %s |" % (
                name, s if s in ("off", "eager") else "lazy %s ms" % s,
                statistics.median(x["ops"] for x in r) / 1e6,
                statistics.median(x["madvise"] for x in r),
                statistics.median(x["rss_mb"] for x in r),
                "%.2f" % statistics.median(ratios) if ratios else "-"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
