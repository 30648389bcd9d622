#!/usr/bin/env python3
"""Operations per CPU-second of one benchmark under several allocators.

On the shared 2-core machine a run's wall time is mostly the scheduler's
(docs/PERFORMANCE.md, "Method"): a two-thread benchmark that gets one core
spends its time waiting. Its CPU time (user + sys, from wait4) is less
sensitive, so this prints the operations per CPU-second: runs interleaved
(A B C ... A B C ...), the median and every run, with the median CPU and
system seconds and minor faults (no peak RSS: a child's counts the
forked Python's before the exec; scripts/bench.py has it).

  python3 scripts/bench_cpu.py RUNS NAME=LIB[,VAR=VALUE...] ... -- PROGRAM ARGS...

LIB is preloaded ("" for none). Operations: the program's `ops:` line, else
`ops/s:` times `seconds:`.
"""
import os
import re
import statistics
import subprocess
import sys


def main():
    argv = sys.argv[1:]
    if "--" not in argv or len(argv) < 4:
        sys.exit(__doc__)
    sep = argv.index("--")
    runs = int(argv[0])
    allocs = [a.split("=", 1) for a in argv[1:sep]]
    cmd = argv[sep + 1:]
    res = {n: [] for n, _ in allocs}
    for _ in range(runs):
        for n, spec in allocs:
            env = dict(os.environ)
            lib, *kv = spec.split(",")
            for x in kv:
                k, v = x.split("=", 1)
                env[k] = v
            if lib:
                env["LD_PRELOAD"] = lib
            p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            out = p.stdout.read().decode()
            _, _, ru = os.wait4(p.pid, 0)
            m = re.search(r"^ops:\s*(\d+)", out, re.M)
            if m:
                ops = int(m.group(1))
            else:
                a = re.search(r"^ops/s:\s*([\d.]+)", out, re.M)
                b = re.search(r"^seconds:\s*([\d.]+)", out, re.M)
                ops = float(a.group(1)) * float(b.group(1)) if a and b else float("nan")
            cpu = ru.ru_utime + ru.ru_stime
            res[n].append((ops / cpu if cpu else float("nan"), cpu, ru.ru_stime, ru.ru_minflt))
    print("load at the end: %.1f" % os.getloadavg()[0])
    for n, _ in allocs:
        v = res[n]
        print("%-12s ops/CPU-s median %8.1fM  [%s]  CPU s %.2f  sys s %.2f  minflt %d" % (
            n, statistics.median(x[0] for x in v) / 1e6, " ".join("%.1f" % (x[0] / 1e6) for x in v),
            statistics.median(x[1] for x in v), statistics.median(x[2] for x in v),
            statistics.median(x[3] for x in v)))


if __name__ == "__main__":
    main()
