#!/usr/bin/env python3
"""redis-server under each allocator: the server's CPU time for a fixed load.

For each allocator (the same LD_PRELOAD set-up as scripts/bench.py, peers
included), Debian's redis-server is started with the allocator preloaded,
bound to 127.0.0.1 on a free port, without persistence (--save '' and
--appendonly no), and loaded with

  redis-benchmark -n N -P 16 -q -t set,get,lpush,lpop,sadd,hset -d 100 -r 100000

(N = 1,000,000; --quick: 200,000).  The figure is the CPU time the server
spent during that load (utime + stime from /proc/<pid>/stat, read just
before and just after; lower is better), with the server's peak RSS
(VmHWM) and redis-benchmark's requests per second beside it.  Runs are
interleaved (A B C ... A B C ...), RUNS times (default 3); medians are
reported, and each allocator's CPU time over the best peer's (every
allocator but hakmem, hakmem-libc and --extra columns): the medians' ratio,
and the median over rounds of each run's ratio to that round's best peer
(paired: on a shared machine the load drifts between rounds).  Each
server is checked to have the allocator's library mapped, and is shut down
(SIGKILL if it does not stop) before the next starts.

Debian's redis-server is linked with libjemalloc, which supplies malloc when
nothing is preloaded; so the glibc column preloads libc.so.6 itself (which
puts glibc's malloc first), and before the runs each allocator's set-up is
checked with the dynamic linker (LD_DEBUG=bindings) to bind the server's
malloc and malloc_usable_size to the intended library.

Skips with a note (exit 0) when redis-server or redis-benchmark is missing
(Debian: apt-get install redis-server redis-tools).

  python3 scripts/bench_redis.py --build build [--runs N] [--quick] [--allocators a,b] [--extra NAME=LIB[,VAR=VALUE...]]
"""

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (allocator discovery shared with the runner)

TESTS = "set,get,lpush,lpop,sadd,hset"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg=""):
    print(msg, flush=True)


def malloc_binding(server, env_add):
    """The library the server's malloc and malloc_usable_size bind to (dynamic linker's own report)."""
    with tempfile.TemporaryDirectory(prefix="bench-redis-ld-") as tmp:
        env = bench.base_env()
        env.update(env_add)
        env.update(LD_BIND_NOW="1", LD_DEBUG="bindings", LD_DEBUG_OUTPUT=os.path.join(tmp, "ld"))
        subprocess.run([server, "--version"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=30)
        libs = set()
        for fn in os.listdir(tmp):
            with open(os.path.join(tmp, fn), errors="replace") as f:
                for line in f:
                    m = re.search(r"binding file \S*redis-server \[0\] to (\S+) \[0\]: normal symbol "
                                  r"`(malloc|malloc_usable_size)'", line)
                    if m:
                        libs.add(os.path.realpath(m.group(1)))
        return libs


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        text = f.read()
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)


def vm_hwm_mb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            m = re.search(r"^VmHWM:\s*(\d+)\s*kB", f.read(), re.M)
        return int(m.group(1)) / 1024.0 if m else None
    except OSError:
        return None


def mapped(pid, lib):
    try:
        with open("/proc/%d/maps" % pid) as f:
            return os.path.realpath(lib) in f.read()
    except OSError:
        return False


def ping(cli, port):
    try:
        r = subprocess.run([cli, "-h", "127.0.0.1", "-p", str(port), "ping"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, timeout=5)
        return r.stdout.strip() == b"PONG"
    except subprocess.TimeoutExpired:
        return False


def stop(proc, cli, port):
    """Shut the server down; SIGKILL if it has not gone within 10 s."""
    if proc.poll() is not None:
        return
    try:
        subprocess.run([cli, "-h", "127.0.0.1", "-p", str(port), "shutdown", "nosave"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=10)
    except subprocess.TimeoutExpired:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_once(server, cli, benchmark, env_add, requests, timeout):
    port = free_port()
    env = bench.base_env()
    env.update(env_add)
    with tempfile.TemporaryDirectory(prefix="bench-redis-") as tmp:
        log_path = os.path.join(tmp, "redis.log")
        proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                 "no", "--daemonize", "no", "--dir", tmp, "--logfile", log_path],
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        try:
            t0 = time.monotonic()
            while not ping(cli, port):
                if proc.poll() is not None or time.monotonic() - t0 > 20:
                    err = proc.stderr.read().decode(errors="replace") if proc.poll() is not None else ""
                    return {"ok": False, "error": "server did not start: %s" % err.strip()[-300:]}
                time.sleep(0.05)
            lib = env_add.get("LD_PRELOAD")
            if lib and not mapped(proc.pid, lib):
                return {"ok": False, "error": "%s is not mapped in the server" % lib}
            cpu0 = cpu_seconds(proc.pid)
            w0 = time.monotonic()
            r = subprocess.run([benchmark, "-h", "127.0.0.1", "-p", str(port), "-n", str(requests), "-P", "16",
                                "-q", "-t", TESTS, "-d", "100", "-r", "100000"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=timeout, env=bench.base_env())
            wall = time.monotonic() - w0
            if proc.poll() is not None:
                return {"ok": False, "error": "server died during the load (status %s)" % proc.returncode}
            cpu = cpu_seconds(proc.pid) - cpu0
            hwm = vm_hwm_mb(proc.pid)
            out = r.stdout.decode(errors="replace")
            if r.returncode != 0:
                return {"ok": False, "error": "redis-benchmark exit %d: %s" % (r.returncode, out.strip()[-300:])}
            rps = {}
            for line in out.replace("\r", "\n").splitlines():
                m = re.match(r"^\s*([A-Z]+)(?:\s*\(.*\))?:\s*([0-9.]+)\s+requests per second", line)
                if m:
                    rps[m.group(1).lower()] = float(m.group(2))
            return {"ok": True, "cpu": cpu, "wall": wall, "peak_rss_mb": hwm, "rps": rps}
        except subprocess.TimeoutExpired:
            return {"ok": False, "error": "redis-benchmark timed out after %ds" % timeout}
        finally:
            stop(proc, cli, port)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=3, help="interleaved runs per allocator (default 3)")
    ap.add_argument("--requests", type=int, default=None, help="redis-benchmark -n (default 1000000, quick 200000)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--allocators", default="",
                    help="comma list (default: all but hakmem-libc: %s)"
                    % ",".join(a for a in bench.ALLOCATOR_ORDER if a != "hakmem-libc"))
    ap.add_argument("--no-peer-build", action="store_true")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per redis-benchmark run")
    ap.add_argument("--out", default=os.path.join(bench.REPO, "results"))
    ap.add_argument("--extra", action="append", default=[], metavar="NAME=LIB[,VAR=VALUE...]",
                    help="one more column preloading LIB with these environment variables (an A/B of two hakmem"
                         " builds: hakmem-base=old/libhakmem.so; of an option: thp=build/libhakmem.so,HAKMEM_THP_MIN_MB=1);"
                         " not a peer; repeatable")
    args = ap.parse_args()

    server, cli, benchmark = (shutil.which(p) for p in ("redis-server", "redis-cli", "redis-benchmark"))
    if not (server and cli and benchmark):
        log("note: redis-server, redis-cli or redis-benchmark not found (Debian: apt-get install redis-server "
            "redis-tools); the redis benchmark is skipped")
        return 0
    requests = args.requests or (200000 if args.quick else 1000000)
    build = os.path.abspath(args.build)
    wanted = [a.strip() for a in args.allocators.split(",") if a.strip()] or \
        [a for a in bench.ALLOCATOR_ORDER if a != "hakmem-libc"]
    allocs, notes = bench.discover_allocators(build, wanted, not args.no_peer_build)
    extra = set()
    for e in args.extra:
        name, _, spec = e.partition("=")
        lib, *assigns = spec.split(",")
        env = {"LD_PRELOAD": os.path.abspath(lib)}
        for a in assigns:
            var, eq, value = a.partition("=")
            if not var or not eq:
                ap.error("--extra %s: VAR=VALUE expected after the library, got %r" % (e, a))
            env[var] = value
        if not name or not os.path.exists(lib):
            ap.error("--extra %s: NAME=LIB[,VAR=VALUE...], LIB an existing library" % e)
        allocs.append((name, env, os.path.abspath(lib) + "".join(" " + a for a in assigns) + " (--extra)"))
        extra.add(name)
    libc = bench.find_system_lib(["libc.so.6"])
    checked = []
    for name, env, desc in allocs:
        if name == "glibc":
            if not libc:
                notes.append("glibc: libc.so.6 not found; column left out")
                continue
            env, desc = {"LD_PRELOAD": libc}, "LD_PRELOAD=%s (redis-server is linked with libjemalloc)" % libc
        want = os.path.realpath(env["LD_PRELOAD"]) if env.get("LD_PRELOAD") else None
        got = malloc_binding(server, env)
        if not want or got != {want}:
            notes.append("%s: the server's malloc binds to %s, not %s; column left out"
                         % (name, ", ".join(sorted(got)) or "?", want))
            continue
        checked.append((name, env, desc))
    allocs = checked
    for n in notes:
        log("note: " + n)
    version = subprocess.run([server, "--version"], stdout=subprocess.PIPE).stdout.decode().strip()
    log("redis: %s; redis-benchmark -n %d -P 16 -t %s -d 100 -r 100000; %d interleaved run(s) of %s"
        % (version, requests, TESTS, args.runs, ", ".join(a[0] for a in allocs)))
    load0 = os.getloadavg()[0]
    raw = {a[0]: [] for a in allocs}
    interrupted = []

    def on_signal(signum, frame):  # let the finally clauses stop the server
        interrupted.append(signum)
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal)
    try:
        for i in range(args.runs):
            for name, env, _ in allocs:
                r = run_once(server, cli, benchmark, env, requests, args.timeout)
                raw[name].append(r)
                log("run %d/%d %-12s %s" % (i + 1, args.runs, name,
                                            "server CPU %.2f s, wall %.2f s, peak RSS %.1f MB"
                                            % (r["cpu"], r["wall"], r["peak_rss_mb"] or 0)
                                            if r["ok"] else "FAIL: " + r["error"]))
    except KeyboardInterrupt:
        log("interrupted; every server started has been stopped")
        return 1

    summary = {}
    for name, runs in raw.items():
        ok = [r for r in runs if r["ok"]]
        if not ok:
            summary[name] = {"status": "fail", "errors": [r["error"] for r in runs]}
            continue
        cpus = [r["cpu"] for r in ok]
        tests = sorted({t for r in ok for t in r["rps"]})
        summary[name] = {"status": "ok" if len(ok) == len(runs) else "partial", "runs": len(runs),
                         "cpu_median": statistics.median(cpus), "cpu_min": min(cpus), "cpu_max": max(cpus),
                         "wall_median": statistics.median(r["wall"] for r in ok),
                         "peak_rss_mb": max((r["peak_rss_mb"] or 0) for r in ok),
                         "rps_median": {t: statistics.median(r["rps"][t] for r in ok if t in r["rps"])
                                        for t in tests},
                         "errors": [r["error"] for r in runs if not r["ok"]]}
    peers = [(s["cpu_median"], n) for n, s in summary.items() if n not in bench.NOT_PEERS and n not in extra
             and "cpu_median" in s]
    best = min(peers) if peers else None
    # Paired: each run over the best peer's in the same round (the load drifts
    # between rounds on a shared machine; within one it hits all alike).
    peer_names = [n for _, n in peers]
    round_best = [min((raw[n][i]["cpu"] for n in peer_names if raw[n][i]["ok"]), default=None)
                  for i in range(args.runs)]
    rows = []
    for name, _, _ in allocs:
        s = summary[name]
        if "cpu_median" not in s:
            rows.append([name, "FAIL", "-", "-", "-", "-", "-", "-"])
            continue
        if best:
            s["x_best_peer"] = s["cpu_median"] / best[0]
        paired = [r["cpu"] / b for r, b in zip(raw[name], round_best) if r["ok"] and b]
        if paired:
            s["x_round_best_peer_median"] = statistics.median(paired)
        rows.append([name, "%.2f" % s["cpu_median"], "%.2f" % s["cpu_min"], "%.2f" % s["cpu_max"],
                     "%.2fx" % s["x_best_peer"] if best else "-",
                     "%.2fx" % s["x_round_best_peer_median"] if paired else "-", "%.1f" % s["peak_rss_mb"],
                     " ".join("%s %.0fk" % (t, v / 1e3) for t, v in s["rps_median"].items())])
    hdr = ["allocator", "server CPU s", "min", "max", "x best peer", "x round's best", "peak RSS MB",
           "requests/s (median)"]
    widths = [max(len(str(x)) for x in col) for col in zip(hdr, *rows)]
    log("")
    log("redis-server CPU seconds under the load (median of %d; lower is better; best peer: %s)"
        % (args.runs, best[1] if best else "-"))
    fmt = lambda cells: "  ".join(c.ljust(w) if i in (0, 7) else c.rjust(w)  # noqa: E731
                                  for i, (c, w) in enumerate(zip(cells, widths)))
    log(fmt(hdr))
    log("-" * len(fmt(hdr)))
    for r in rows:
        log(fmt(r))
    load1 = os.getloadavg()[0]
    log("1-min load average %.2f at the start, %.2f at the end (>%d: other work competed for the CPUs)"
        % (load0, load1, os.cpu_count() or 1))
    os.makedirs(args.out, exist_ok=True)
    data = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "redis": version,
            "command": "redis-benchmark -n %d -P 16 -q -t %s -d 100 -r 100000" % (requests, TESTS),
            "runs": args.runs, "git_commit": bench.git_commit(), "loadavg_1min": [round(load0, 2), round(load1, 2)],
            "allocator_libs": {n: d for n, _, d in allocs}, "best_peer": best[1] if best else None,
            "summary": summary, "raw": raw, "notes": notes}
    with open(os.path.join(args.out, "redis.json"), "w") as f:
        json.dump(data, f, indent=1)
    with open(os.path.join(args.out, "redis.md"), "w") as f:
        f.write("%s, `%s`, %d interleaved runs, commit %s, %s, 1-min load average %.2f to %.2f.\n\n"
                % (version, data["command"], args.runs, data["git_commit"], data["date"], load0, load1))
        f.write("| " + " | ".join(hdr) + " |\n|---|" + "---:|" * (len(hdr) - 2) + "---|\n")
        for r in rows:
            f.write("| " + " | ".join(r) + " |\n")
    log("wrote %s and %s" % (os.path.relpath(os.path.join(args.out, "redis.json")),
                             os.path.relpath(os.path.join(args.out, "redis.md"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
