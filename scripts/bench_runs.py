#!/usr/bin/env python3
"""Interleaved runs of one benchmark under several preloads, waited for
without polling (bench.py polls every 5 ms: on a loaded 2-core machine a
third runnable thread, which stalls bench_xthread's ring whenever it takes a
ring thread's core).

  python3 scripts/bench_runs.py ROUNDS 'BINARY ARGS...' NAME=LIB [VAR=VALUE...] | tcmalloc | mimalloc | jemalloc ...

Prints per variant the median ops/s over all runs, the median over the runs
with fewer than YIELDS (environment, default 20000) idle yields (bench_xthread
prints them: runs where neither thread lost its core for long), the best run,
and the median peak RSS (/usr/bin/time -f %M).
"""
import os
import statistics
import subprocess
import sys
import tempfile

LIBS = {"tcmalloc": "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
        "mimalloc": "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2",
        "jemalloc": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"}


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    rounds, cmd = int(sys.argv[1]), sys.argv[2].split()
    variants = []
    for v in sys.argv[3:]:
        name, _, rest = v.partition("=")
        parts = rest.split() if rest else [LIBS[name]]
        env = dict(os.environ, LD_PRELOAD=parts[0])
        env.update(kv.split("=", 1) for kv in parts[1:])
        variants.append((name, env))
    lim = int(os.environ.get("YIELDS", "20000"))
    res = {name: [] for name, _ in variants}
    with tempfile.NamedTemporaryFile(prefix="bench-rss-") as rss:
        for _ in range(rounds):
            for name, env in variants:
                out = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss.name] + cmd, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True).stdout
                d = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
                with open(rss.name) as f:
                    kib = int(f.read().split()[-1])
                res[name].append((float(d["ops/s"]), int(d.get("idle_yields", 0)), kib / 1024))
    print("| variant | median ops/s | median, runs with < %d idle yields (runs) | best | peak RSS MiB (median) |" % lim)
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, _ in variants:
        xs = res[name]
        ok = [x[0] for x in xs if x[1] < lim]
        print("| %s | %.1fM | %s (%d) | %.1fM | %.1f |" % (
            name, statistics.median(x[0] for x in xs) / 1e6,
            "%.1fM" % (statistics.median(ok) / 1e6) if ok else "-", len(ok),
            max(x[0] for x in xs) / 1e6, statistics.median(x[2] for x in xs)))


if __name__ == "__main__":
    main()
