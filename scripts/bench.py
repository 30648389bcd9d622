#!/usr/bin/env python3
"""Run the hakmem benchmarks under several allocators and compare them.

Each benchmark binary (built by `make` into BUILD/bench/) is run unchanged
under each allocator, selected with LD_PRELOAD:

  hakmem       LD_PRELOAD=BUILD/libhakmem.so
  hakmem-libc  the same, with HAKMEM_FORCE_LIBC_ALLOC=1 (hakmem forwarding to glibc)
  glibc        no preload
  mimalloc     /usr/lib/x86_64-linux-gnu/libmimalloc.so.2    (libmimalloc2.0)
  jemalloc     /usr/lib/x86_64-linux-gnu/libjemalloc.so.2    (libjemalloc2)
  tcmalloc     /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 (libtcmalloc-minimal4)
  mimalloc-v2  BUILD/peers/mimalloc-v2/libmimalloc.so  (newest mimalloc 2.x, from crates.io)
  mimalloc-v3  BUILD/peers/mimalloc-v3/libmimalloc.so  (newest mimalloc 3.x, from crates.io)
  snmalloc     BUILD/peers/snmalloc/libsnmallocshim.so (snmalloc, from crates.io)

The last three are built by scripts/build_peers.py, which this script runs
when BUILD/peers/peers.json does not list them all (--no-peer-build: don't);
a peer that cannot be built is left out with a note.  Their exact versions,
and the Debian packages' versions, are recorded in the results.

Runs are interleaved (A B C ... A B C ...) RUNS times.  Reports median, min,
max and coefficient of variation of ops/s, the ratio to mimalloc, hakmem's
ratio to the best other allocator, peak RSS and minor page faults
(ru_maxrss, ru_minflt from wait4) and, from one extra `strace -f -c` run per
allocator, the mmap/munmap/madvise/mremap/brk/process_madvise counts.  Writes results/latest.csv,
results/latest.json and results/bench.png (copied to docs/bench.png after a
full, non-quick run over all benchmarks).

Standard library only; matplotlib is used for the chart if this python has
it, else the chart is drawn by /usr/bin/python3 (Debian's python3-matplotlib),
else skipped with a note.  The chart never fails the run.

  python3 scripts/bench.py --build build [--bench NAME[,NAME]] [--runs N] [--quick]
"""

import argparse
import csv
import datetime
import json
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBDIR = "/usr/lib/x86_64-linux-gnu"

# name -> (candidate .so names, Debian package)
SYSTEM_ALLOCATORS = {
    "mimalloc": (["libmimalloc.so.2", "libmimalloc.so.2.0", "libmimalloc.so"], "libmimalloc2.0"),
    "jemalloc": (["libjemalloc.so.2", "libjemalloc.so"], "libjemalloc2"),
    "tcmalloc": (["libtcmalloc_minimal.so.4", "libtcmalloc_minimal.so"], "libtcmalloc-minimal4"),
}
PEERS = ["mimalloc-v2", "mimalloc-v3", "snmalloc"]  # built by scripts/build_peers.py
ALLOCATOR_ORDER = ["hakmem", "hakmem-libc", "glibc", "mimalloc", "jemalloc", "tcmalloc"] + PEERS
# The allocators hakmem is ranked against ("best peer"): every one but hakmem itself.
NOT_PEERS = ("hakmem", "hakmem-libc")
BASELINE = "mimalloc"
STRACE_SYSCALLS = ["mmap", "munmap", "madvise", "mremap", "brk", "process_madvise"]

# Benchmarks: row name, binary, full arguments, quick arguments, and whether the
# checksum it prints must be identical under every allocator (single-threaded
# or otherwise deterministic workloads).  Full arguments are chosen so that a
# run takes roughly 0.3-2 s on a 2-core machine; quick ones roughly 0.1-0.3 s.
BENCHMARKS = [
    ("random_mixed_ws400", "bench_random_mixed", ["30000000", "400", "42"], ["4000000", "400", "42"], True),
    ("random_mixed_ws8192", "bench_random_mixed", ["30000000", "8192", "42"], ["4000000", "8192", "42"], True),
    ("random_mixed_ws40000", "bench_random_mixed", ["30000000", "40000", "42"], ["4000000", "40000", "42"], True),
    ("tiny", "bench_tiny", ["6000"], ["800"], True),
    ("larson", "larson", ["2", "16", "1024", "1.0", "1000", "100", "42"],
     ["2", "16", "1024", "0.25", "1000", "100", "42"], False),
    ("xthread", "bench_xthread", ["2", "8000000", "64", "16", "1024", "42"],
     ["2", "1500000", "64", "16", "1024", "42"], True),
    ("mid_large", "bench_mid_large", ["120000", "64", "42"], ["25000", "64", "42"], True),
    ("soak", "bench_soak", ["4", "2", "10000", "42", "1"], ["1.2", "2", "10000", "42", "0.4"], False),
    ("frag", "bench_frag", ["256", "42"], ["64", "42"], True),
    # The workload shapes of issue 19.
    ("large_churn", "bench_large_churn", ["2000"], ["300"], True),
    ("prodcons", "bench_prodcons", ["5"], ["1"], False),
    ("thread_ws", "bench_thread_ws", ["2"], ["0.5"], False),
    ("shbench", "bench_shbench", ["2", "60000", "64", "42"], ["2", "20000", "64", "42"], True),
]

# bench_idle (issue 18): a burst of small blocks freed, then the program
# sleeps / blocks in read(2) / calls malloc/free every 10 ms / the threads
# that freed it exit; RSS one second after the frees. Arguments: MiB, seconds.
IDLE_MODES = ["sleep", "io", "lowrate", "exit"]
IDLE_ARGS = (["400", "3"], ["256", "2"])  # full, quick
OS_CALLS = ["mmap", "munmap", "madvise", "mremap", "process_madvise"]  # the "calls per second" of the issue-18 budget

# Rough seconds per run (full, quick), only used to estimate the time left.
EXPECTED_SECS = {"bench_random_mixed": (0.6, 0.08), "bench_tiny": (0.8, 0.12), "larson": (1.05, 0.3),
                 "bench_xthread": (0.8, 0.15), "bench_mid_large": (1.2, 0.25), "bench_soak": (4.1, 1.25), "bench_frag": (1.5, 0.4),
                 "bench_large_churn": (5.0, 0.8), "bench_prodcons": (5.0, 1.0), "bench_thread_ws": (2.0, 0.5),
                 "bench_shbench": (0.6, 0.15)}
STRACE_FACTOR = 1.3  # a strace run is a little slower
# Benchmarks whose slowest allocators need more than --timeout (a multiple of it).
TIMEOUT_SCALE = {"large_churn": 4}

# Extra figures some benchmarks print, kept in the JSON (median over runs).
EXTRA_KEYS = ["rss_drift_pct", "ops_drift_pct", "rss_live_ratio", "floor_ratio", "rss_live_ratio_mean",
              "rss_end_mb", "live_end_mb", "rss_after_free_mb", "peak_live_bytes",
              "thread_generations"]


def log(msg=""):
    print(msg, flush=True)


def fmt_secs(s):
    s = max(0, int(round(s)))
    return "%dm%02ds" % (s // 60, s % 60) if s >= 60 else "%ds" % s


def fmt_ops(v):
    if v is None:
        return "-"
    if v >= 1e6:
        return "%.1fM" % (v / 1e6)
    if v >= 1e3:
        return "%.1fk" % (v / 1e3)
    return "%.0f" % v


# ---------------------------------------------------------------- allocators

def find_system_lib(names):
    for d in (LIBDIR, "/usr/lib", "/usr/local/lib", "/lib/x86_64-linux-gnu"):
        for n in names:
            p = os.path.join(d, n)
            if os.path.exists(p):
                return p
    return None


def try_apt_install(packages):
    """apt-get install the packages if we are root and apt works; never raises."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return False
    log("note: trying `apt-get install -y %s`" % " ".join(packages))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        r = subprocess.run(["apt-get", "install", "-y", "-q"] + packages, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)
        if r.returncode != 0:
            log("note: apt-get install failed: %s" % r.stderr.decode(errors="replace").strip()[-300:])
        return r.returncode == 0
    except Exception as e:  # noqa: BLE001 - any failure just means "not available"
        log("note: apt-get install failed: %s" % e)
        return False


def deb_version(pkg):
    """The installed Debian package's version, or None."""
    try:
        r = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", pkg], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, timeout=20)
        return r.stdout.decode().strip() or None if r.returncode == 0 else None
    except Exception:  # noqa: BLE001
        return None


def load_peers(build, build_missing=True):
    """BUILD/peers/peers.json (running scripts/build_peers.py first if it lacks a peer); ({}, notes) on failure."""
    manifest = os.path.join(build, "peers", "peers.json")

    def read():
        try:
            with open(manifest) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None
    data = read()
    complete = data is not None and all(os.path.exists(data.get("peers", {}).get(p, {}).get("lib", ""))
                                        for p in PEERS)
    if not complete and build_missing:
        log("note: building the peer allocators (scripts/build_peers.py; a few minutes the first time)")
        try:
            subprocess.run([sys.executable, os.path.join(REPO, "scripts", "build_peers.py"), "--build", build],
                           timeout=3600)
        except Exception as e:  # noqa: BLE001 - a peer that cannot be built is only a missing column
            log("note: scripts/build_peers.py failed: %s" % e)
        data = read()
    if data is None:
        return {}, ["peers: %s not found (scripts/build_peers.py)" % manifest]
    return data.get("peers", {}), list(data.get("notes", []))


def discover_allocators(build, wanted, build_peers=True):
    """Return [(name, env-additions dict, description)] and a list of notes."""
    allocs, notes = [], []
    found = {}
    peers = {}
    if any(p in wanted for p in PEERS):
        peers, pnotes = load_peers(build, build_peers)
        notes += ["peers: " + n for n in pnotes]
    missing = []
    for name, (sonames, pkg) in SYSTEM_ALLOCATORS.items():
        if name not in wanted:
            continue
        p = find_system_lib(sonames)
        if p:
            found[name] = p
        else:
            missing.append(name)
    if missing:
        if try_apt_install([SYSTEM_ALLOCATORS[n][1] for n in missing]):
            for n in missing:
                p = find_system_lib(SYSTEM_ALLOCATORS[n][0])
                if p:
                    found[n] = p
    hakmem_so = os.path.join(build, "libhakmem.so")
    for name in ALLOCATOR_ORDER:
        if name not in wanted:
            continue
        if name in ("hakmem", "hakmem-libc"):
            if not os.path.exists(hakmem_so):
                notes.append("%s: %s not found (build it with `make`); column left out" % (name, hakmem_so))
                continue
            env = {"LD_PRELOAD": hakmem_so}
            if name == "hakmem-libc":
                env["HAKMEM_FORCE_LIBC_ALLOC"] = "1"
            allocs.append((name, env, hakmem_so + (" HAKMEM_FORCE_LIBC_ALLOC=1" if name == "hakmem-libc" else "")))
        elif name == "glibc":
            allocs.append((name, {}, "system malloc (no preload)"))
        elif name in found:
            v = deb_version(SYSTEM_ALLOCATORS[name][1])
            allocs.append((name, {"LD_PRELOAD": found[name]},
                           found[name] + (" (Debian %s %s)" % (SYSTEM_ALLOCATORS[name][1], v) if v else "")))
        elif name in PEERS:
            p = peers.get(name)
            if p and os.path.exists(p.get("lib", "")):
                allocs.append((name, {"LD_PRELOAD": p["lib"]}, "%s (crate %s): %s" % (p.get("version", "?"),
                                                                                   p.get("crate", "?"), p["lib"])))
            else:
                notes.append("%s: not built (scripts/build_peers.py); column left out" % name)
        else:
            notes.append("%s: no %s under %s (package %s) and it could not be installed; column left out"
                         % (name, SYSTEM_ALLOCATORS[name][0][0], LIBDIR, SYSTEM_ALLOCATORS[name][1]))
    return allocs, notes


def base_env():
    env = dict(os.environ)
    for k in ("LD_PRELOAD", "HAKMEM_FORCE_LIBC_ALLOC"):
        env.pop(k, None)
    return env


# ---------------------------------------------------------------- running

def parse_output(text):
    """Pull `key: value` numbers out of a benchmark's stdout."""
    vals = {}
    ops = None
    for line in text.splitlines():
        m = re.match(r"^ops/s:\s*([0-9.eE+]+)\s*$", line)
        if m:
            ops = float(m.group(1))
        for k in EXTRA_KEYS + ["checksum"]:
            m = re.search(r"(?:^|\s)%s:\s*(-?[0-9.eE+]+)" % re.escape(k), line)
            if m:
                try:
                    vals[k] = float(m.group(1)) if k != "checksum" else int(m.group(1))
                except ValueError:
                    pass
    return ops, vals


_SUBREAPER = None


def subreaper():
    """Make this process a child subreaper (Linux prctl), once; True if it worked.

    ru_maxrss of a process counts the peak RSS of everything it was before
    exec, i.e. a fork of this ~20 MB python.  So a benchmark is started by a
    small /bin/sh that backgrounds it and exits at once; the orphan is
    re-parented to us, and os.wait4 on it then reports the benchmark's own
    peak (plus the ~1 MB of the shell it was forked from)."""
    global _SUBREAPER
    if _SUBREAPER is None:
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            _SUBREAPER = libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
        except Exception:  # noqa: BLE001
            _SUBREAPER = False
        if not _SUBREAPER:
            log("note: cannot become a child subreaper; peak RSS includes the forked python")
    return _SUBREAPER


def run_once(cmd, env_add, timeout):
    """Run cmd with the allocator's environment; return a result dict.

    The allocator's variables (LD_PRELOAD, ...) are given to the benchmark
    only (through env(1)), not to the shell or to this script."""
    env = base_env()
    full = ["/usr/bin/env"] + ["%s=%s" % kv for kv in env_add.items()] + list(cmd)
    with tempfile.NamedTemporaryFile(prefix="bench-out-") as out, \
            tempfile.NamedTemporaryFile(prefix="bench-err-") as err:
        t0 = time.monotonic()
        try:
            if subreaper():
                sh = subprocess.Popen(["/bin/sh", "-c", 'o=$1; e=$2; shift 2; "$@" >"$o" 2>"$e" </dev/null & echo $!',
                                       "sh", out.name, err.name] + full,
                                      stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env,
                                      start_new_session=True)
                text = sh.communicate()[0].decode().strip()
                pid = int(text)
                pgid = sh.pid
            else:
                proc = subprocess.Popen(full, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                        start_new_session=True)
                pid = pgid = proc.pid
                proc.returncode = 0  # reaped by wait4 below
        except (OSError, ValueError) as e:
            return {"ok": False, "error": "cannot start: %s" % e, "wall": 0.0}
        status, rusage, timed_out = None, None, False
        while True:
            wpid, st, ru = os.wait4(pid, os.WNOHANG)
            if wpid == pid:
                status, rusage = st, ru
                break
            if time.monotonic() - t0 > timeout:
                timed_out = True
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except OSError:
                    pass
                _, status, rusage = os.wait4(pid, 0)
                break
            time.sleep(0.005)
        wall = time.monotonic() - t0
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    res = {"wall": wall, "maxrss_kb": rusage.ru_maxrss if rusage else None,
           "minflt": rusage.ru_minflt if rusage else None,
           "stdout_tail": stdout[-2000:], "stderr_tail": stderr[-1000:]}
    if timed_out:
        res.update(ok=False, error="timeout after %gs" % timeout)
        return res
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            signame = signal.Signals(sig).name
        except ValueError:
            signame = str(sig)
        res.update(ok=False, error="killed by %s" % signame)
        return res
    code = os.WEXITSTATUS(status)
    if code != 0:
        res.update(ok=False, error="exit status %d: %s" % (code, stderr.strip()[-200:]))
        return res
    if "cannot be preloaded" in stderr:
        res.update(ok=False, error="LD_PRELOAD failed: %s" % stderr.strip()[-200:])
        return res
    ops, vals = parse_output(stdout)
    if ops is None:
        res.update(ok=False, error="no 'ops/s:' line in output")
        return res
    res.update(ok=True, ops=ops, values=vals)
    return res


def strace_counts(cmd, env_add, timeout):
    """Syscall counts from `strace -f -c`; None if strace is unavailable/failed."""
    strace = shutil.which("strace")
    if not strace:
        return None, "strace not found"
    with tempfile.NamedTemporaryFile(suffix=".strace", delete=False) as tf:
        path = tf.name
    # The allocator's variables go to the traced program only (-E), so strace
    # itself runs on the system allocator.
    scmd = [strace, "-f", "-c", "-o", path, "-e", "trace=" + ",".join(STRACE_SYSCALLS)]
    if seccomp_ok(strace):
        scmd.append("--seccomp-bpf")
    for k, v in env_add.items():
        scmd += ["-E", "%s=%s" % (k, v)]
    res = run_once(scmd + cmd, {}, timeout)
    counts = {k: 0 for k in STRACE_SYSCALLS}
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        text = ""
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    if not res["ok"]:
        return None, res.get("error")
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[-1] in counts and re.match(r"^[0-9.]+$", parts[0]):
            try:
                counts[parts[-1]] = int(parts[3])
            except ValueError:
                pass
    return counts, None


_SECCOMP = {}


def seccomp_ok(strace):
    if strace not in _SECCOMP:
        try:
            r = subprocess.run([strace, "-f", "--seccomp-bpf", "-e", "trace=brk", "-c", "-o", "/dev/null", "true"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=20)
            _SECCOMP[strace] = r.returncode == 0
        except Exception:  # noqa: BLE001
            _SECCOMP[strace] = False
    return _SECCOMP[strace]


# ---------------------------------------------------------------- statistics

def summarize(runs):
    oks = [r["ops"] for r in runs if r.get("ok")]
    s = {"runs": len(runs), "ok_runs": len(oks)}
    failed = [r for r in runs if not r.get("ok")]
    s["status"] = "ok" if oks and not failed else "FAIL"
    s["errors"] = sorted(set(r.get("error", "?") for r in failed))
    if oks:
        s["median"] = statistics.median(oks)
        s["min"] = min(oks)
        s["max"] = max(oks)
        mean = statistics.fmean(oks)
        s["cv_pct"] = (statistics.stdev(oks) / mean * 100.0) if len(oks) > 1 and mean > 0 else 0.0
    walls = [r["wall"] for r in runs if r.get("ok") and r.get("wall")]
    if walls:
        s["median_wall"] = statistics.median(walls)
    rss = [r["maxrss_kb"] for r in runs if r.get("maxrss_kb")]
    if rss:
        s["peak_rss_mb"] = max(rss) / 1024.0
        s["median_rss_mb"] = statistics.median(rss) / 1024.0
    flt = [r["minflt"] for r in runs if r.get("ok") and r.get("minflt") is not None]
    if flt:
        s["minflt"] = statistics.median(flt)  # page faults: exact where time is noisy
    extras = {}
    for k in EXTRA_KEYS:
        v = [r["values"][k] for r in runs if r.get("ok") and k in r.get("values", {})]
        if v:
            extras[k] = statistics.median(v)
    if extras:
        s["extra"] = extras
    sums = sorted(set(r["values"].get("checksum") for r in runs if r.get("ok") and "checksum" in r.get("values", {})))
    s["checksums"] = sums
    return s


# ---------------------------------------------------------------- reporting

def idle_cell(r):
    if not r:
        return "FAIL"
    t = "never" if r["t10_ms"] < 0 else "%.0f ms" % r["t10_ms"]
    return "%.1f (%s)" % (r["rss_1s_mib"], t)


def print_idle(idle, alloc_names):
    if not idle:
        return
    rows = [[m] + [idle_cell(idle[m].get(a)) for a in alloc_names] for m in IDLE_MODES if m in idle]
    peak = max((r["peak_mib"] for m in idle.values() for r in m.values() if r), default=0)
    log("")
    log("idle: RSS in MiB one second after a freed burst (peak about %.0f MiB), and in parentheses the time until "
        "RSS is at most 10%% of the peak; then the program sleeps / blocks in read / calls malloc(100)+free every "
        "10 ms / the threads that freed exit" % peak)
    widths = [max(len(str(x)) for x in col) for col in zip(["mode"] + alloc_names, *rows)]
    log("  ".join(str(h).ljust(w) for h, w in zip(["mode"] + alloc_names, widths)))
    for row in rows:
        log("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))


def run_idle(bindir, allocs, quick, timeout):
    binary = os.path.join(bindir, "bench_idle")
    mib, secs = IDLE_ARGS[1] if quick else IDLE_ARGS[0]
    out = {}
    for mode in IDLE_MODES:
        out[mode] = {}
        for name, env, _ in allocs:
            full = ["/usr/bin/env"] + ["%s=%s" % kv for kv in env.items()] + [binary, mode, mib, secs]
            r = None
            try:
                p = subprocess.run(full, capture_output=True, text=True, timeout=timeout + float(secs) + 30,
                                   env=base_env())
                m = re.search(r"peak_mib=([0-9.]+) rss_1s_mib=([0-9.]+) t10_ms=(-?[0-9.]+) end_mib=([0-9.]+)", p.stdout)
                if m:
                    r = {"peak_mib": float(m.group(1)), "rss_1s_mib": float(m.group(2)), "t10_ms": float(m.group(3)),
                         "end_mib": float(m.group(4))}
            except subprocess.TimeoutExpired:
                pass
            out[mode][name] = r
            log("idle %s %s: %s" % (mode, name, idle_cell(r)))
    return out


def best_peer(results, bench_names, alloc_names):
    """{bench: {"best": name, "best_median": x, "hakmem": y, "ratio": y / x}}: hakmem's median
    ops/s over the best peer's (every allocator but hakmem and hakmem-libc)."""
    out = {}
    for b in bench_names:
        res = results.get(b, {})
        peers = [(res[a]["median"], a) for a in alloc_names
                 if a not in NOT_PEERS and res.get(a) and res[a]["status"] == "ok" and res[a].get("median")]
        h = res.get("hakmem")
        if not peers or not h or h["status"] != "ok" or not h.get("median"):
            continue
        m, a = max(peers)
        out[b] = {"best": a, "best_median": m, "hakmem": h["median"], "ratio": h["median"] / m}
    return out


def print_tables(results, bench_names, alloc_names):
    def cell_ops(b, a):
        s = results.get(b, {}).get(a)
        if not s:
            return "-"
        if s["status"] != "ok":
            return "FAIL"
        r = s.get("ratio")
        return "%s (%s)" % (fmt_ops(s["median"]), "%.2fx" % r if r is not None else "-")

    def table(header, rows):
        widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
        line = "  ".join(str(h).ljust(w) if i == 0 else str(h).rjust(w) for i, (h, w) in enumerate(zip(header, widths)))
        log(line)
        log("-" * len(line))
        for row in rows:
            log("  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(row, widths))))

    log("")
    log("Median ops/s (ratio to %s median in parentheses; higher is better)" % BASELINE)
    table(["benchmark"] + alloc_names, [[b] + [cell_ops(b, a) for a in alloc_names] for b in bench_names])

    vs = best_peer(results, bench_names, alloc_names)
    if vs:
        log("")
        log("hakmem against the best peer on each benchmark (median ops/s; >= 1.00x: hakmem first)")
        table(["benchmark", "hakmem", "best peer", "its median", "hakmem/best"],
              [[b, fmt_ops(v["hakmem"]), v["best"], fmt_ops(v["best_median"]), "%.2fx" % v["ratio"]]
               for b, v in vs.items()])

    log("")
    log("Details per benchmark and allocator")
    hdr = ["benchmark", "allocator", "median", "min", "max", "cv%", "x" + BASELINE, "peakRSS_MB",
           "minflt"] + STRACE_SYSCALLS + ["calls/s"]
    rows = []
    for b in bench_names:
        for a in alloc_names:
            s = results.get(b, {}).get(a)
            if not s:
                continue
            sc = s.get("syscalls") or {}
            if s["status"] != "ok" and "median" not in s:
                row = [b, a, "FAIL", "-", "-", "-", "-", "%.1f" % s["peak_rss_mb"] if "peak_rss_mb" in s else "-",
                       "-"]
            else:
                row = [b, a, ("FAIL " if s["status"] != "ok" else "") + fmt_ops(s["median"]), fmt_ops(s["min"]),
                       fmt_ops(s["max"]), "%.1f" % s["cv_pct"],
                       "%.2f" % s["ratio"] if s.get("ratio") is not None else "-",
                       "%.1f" % s["peak_rss_mb"] if "peak_rss_mb" in s else "-",
                       "%.0f" % s["minflt"] if s.get("minflt") is not None else "-"]
            row += [str(sc[k]) if k in sc else "-" for k in STRACE_SYSCALLS]
            row.append("%.1f" % s["calls_per_s"] if s.get("calls_per_s") is not None else "-")
            rows.append(row)
    table(hdr, rows)
    log("(calls/s: mmap+munmap+madvise+mremap+process_madvise of the strace run over the median wall time of the timed runs, "
        "start-up included)")

    soak = results.get("soak")
    if soak:
        rows = []
        for a in alloc_names:
            s = soak.get(a)
            if not s or "extra" not in s:
                continue
            e = s["extra"]
            rows.append([a, "%+.1f" % e.get("rss_drift_pct", float("nan")),
                         "%+.1f" % e.get("ops_drift_pct", float("nan")),
                         "%.2f" % e.get("rss_live_ratio", float("nan")),
                         "%.1f" % e.get("rss_end_mb", float("nan")),
                         "%.1f" % e.get("live_end_mb", float("nan")),
                         "%.1f" % e.get("rss_after_free_mb", float("nan"))])
        if rows:
            log("")
            log("soak: drift from 20% into the run to the end, and RSS / live bytes")
            table(["allocator", "rss_drift%", "ops_drift%", "rss/live", "rss_end_MB", "live_end_MB",
                   "rss_after_free_MB"], rows)

    frag = results.get("frag")
    if frag:
        rows = [[a, "%.2f" % frag[a]["extra"]["rss_live_ratio"],
                 "%.2f" % frag[a]["extra"].get("floor_ratio", float("nan"))] for a in alloc_names
                if frag.get(a) and "rss_live_ratio" in frag[a].get("extra", {})]
        if rows:
            log("")
            log("frag: RSS / live bytes after half of a heap of small blocks is freed at random and mid-size "
                "blocks are allocated; floor: the pages the live small blocks cover plus the live mid bytes, "
                "over the live bytes (what no allocator that keeps blocks in place can go below)")
            table(["allocator", "rss/live", "floor"], rows)

    failures = [(b, a, s) for b in bench_names for a, s in results.get(b, {}).items() if s["status"] != "ok"]
    if failures:
        log("")
        log("Failures:")
        for b, a, s in failures:
            log("  %s / %s: %d of %d runs failed: %s" % (b, a, s["runs"] - s["ok_runs"], s["runs"],
                                                      "; ".join(s["errors"])))
            if s.get("cmd"):
                log("    reproduce: %s" % s["cmd"])


def write_csv(path, results, bench_names, alloc_names):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["benchmark", "allocator", "status", "runs", "ok_runs", "median_ops_s", "min_ops_s",
                    "max_ops_s", "cv_pct", "ratio_vs_" + BASELINE, "peak_rss_mb"] + STRACE_SYSCALLS +
                   ["rss_drift_pct", "ops_drift_pct", "rss_live_ratio"])
        for b in bench_names:
            for a in alloc_names:
                s = results.get(b, {}).get(a)
                if not s:
                    continue
                sc = s.get("syscalls") or {}
                e = s.get("extra", {})

                def g(k, fmt="%.0f"):
                    return fmt % s[k] if s.get(k) is not None else ""
                w.writerow([b, a, s["status"], s["runs"], s["ok_runs"], g("median"), g("min"), g("max"),
                            g("cv_pct", "%.2f"), g("ratio", "%.4f"), g("peak_rss_mb", "%.1f")] +
                           [sc.get(k, "") for k in STRACE_SYSCALLS] +
                           ["%.2f" % e[k] if k in e else "" for k in ("rss_drift_pct", "ops_drift_pct",
                                                                     "rss_live_ratio")])


def write_markdown(path, data):
    """The results as Markdown tables (for docs/BENCHMARKS.md)."""
    results, benches, allocs = data["results"], data["benchmarks"], data["allocators"]
    m = data.get("machine", {})
    out = []
    out.append("Run: %s, %s mode, %s runs per allocator (interleaved), commit %s, %s, %s cores, Linux %s, "
               "1-min load average %s at the start and %s at the end."
               % (data.get("date", "?"), data.get("mode", "?"), data.get("runs", "?"), data.get("git_commit", "?"),
                  m.get("cpu", "?"), m.get("nproc", "?"), m.get("kernel", "?"),
                  m.get("loadavg_1min_start", "?"), m.get("loadavg_1min_end", "?")))
    libs = data.get("allocator_libs") or {}
    if libs:
        out.append("Allocators: " + "; ".join("%s = %s" % (a, libs[a]) for a in allocs if a in libs) + ".")
        out.append("")
    def table(title, cell):
        """One row per benchmark, one column per allocator; cell(stats or None)."""
        out.extend([title, "", "| benchmark | " + " | ".join(allocs) + " |", "|---|" + "---:|" * len(allocs)])
        for b in benches:
            out.append("| %s | %s |" % (b, " | ".join(cell(results.get(b, {}).get(a)) for a in allocs)))

    def median_cell(s):
        if not s:
            return "-"
        if s["status"] != "ok":
            return "FAIL"
        r = s.get("ratio")
        return "%s (%s)" % (fmt_ops(s["median"]), "%.2fx" % r if r is not None else "-")

    def number_cell(key):
        return lambda s: "%.1f" % s[key] if s and s.get(key) is not None else "-"

    def syscall_cell(s):
        sc = (s or {}).get("syscalls")
        return " / ".join(str(sc.get(k, "-")) for k in STRACE_SYSCALLS) if sc else "-"

    table("Median ops/s, k = thousand, M = million (ratio to %s's median; higher is better). "
          "FAIL = crashed or timed out." % BASELINE, median_cell)
    out.append("")
    vs = best_peer(results, benches, allocs)
    if vs:
        out.extend(["hakmem against the best peer (every allocator but hakmem and hakmem-libc), median ops/s:", "",
                    "| benchmark | hakmem | best peer | its median | hakmem / best |", "|---|---:|---|---:|---:|"])
        for b, v in vs.items():
            out.append("| %s | %s | %s | %s | %.2fx |" % (b, fmt_ops(v["hakmem"]), v["best"], fmt_ops(v["best_median"]),
                                                        v["ratio"]))
        out.append("")
    table("Coefficient of variation of ops/s over the runs (%):", number_cell("cv_pct"))
    out.append("")
    table("Peak RSS in MiB (ru_maxrss, largest over the runs):", number_cell("peak_rss_mb"))
    out.append("")
    table("Minor page faults (ru_minflt, median over the runs):",
          lambda s: "%.0f" % s["minflt"] if s and s.get("minflt") is not None else "-")
    out.append("")
    table("System calls in one `strace -f -c` run (mmap / munmap / madvise / mremap / brk / process_madvise):", syscall_cell)
    out.append("")
    table("mmap+munmap+madvise+mremap+process_madvise per second of run time (the strace run's counts over the median wall "
          "time of the timed runs, start-up included):",
          lambda s: "%.1f" % s["calls_per_s"] if s and s.get("calls_per_s") is not None else "-")
    idle = data.get("idle")
    if idle:
        out.append("")
        out.append("idle (bench_idle %s): RSS in MiB one second after a freed burst, and the time until RSS is at "
                   "most 10%% of the peak:" % " ".join(data.get("idle_args", [])))
        out.append("")
        out.append("| mode | " + " | ".join(allocs) + " |")
        out.append("|---|" + "---:|" * len(allocs))
        for m in IDLE_MODES:
            if m in idle:
                out.append("| %s | %s |" % (m, " | ".join(idle_cell(idle[m].get(a)) for a in allocs)))
    soak = results.get("soak")
    if soak:
        out.append("")
        out.append("soak (medians over the runs): drift from 20% into the run to the end, RSS / live bytes at the end:")
        out.append("")
        out.append("| allocator | RSS drift % | ops/s drift % | RSS/live | RSS end MiB | live end MiB |")
        out.append("|---|---:|---:|---:|---:|---:|")
        for a in allocs:
            e = (soak.get(a) or {}).get("extra")
            if not e:
                continue
            out.append("| %s | %+.1f | %+.1f | %.2f | %.1f | %.1f |" % (
                a, e.get("rss_drift_pct", float("nan")), e.get("ops_drift_pct", float("nan")),
                e.get("rss_live_ratio", float("nan")), e.get("rss_end_mb", float("nan")),
                e.get("live_end_mb", float("nan"))))
    frag = results.get("frag")
    if frag:
        out.append("")
        out.append("frag (median over the runs): RSS / live bytes after half of a heap of small blocks is freed at "
                   "random and mid-size blocks are allocated:")
        out.append("")
        out.append("| allocator | RSS/live | floor |")
        out.append("|---|---:|---:|")
        for a in allocs:
            e = (frag.get(a) or {}).get("extra")
            if e and "rss_live_ratio" in e:
                out.append("| %s | %.2f | %.2f |" % (a, e["rss_live_ratio"], e.get("floor_ratio", float("nan"))))
    if data.get("notes"):
        out.append("")
        for n in data["notes"]:
            out.append("- note: " + n)
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


# ---------------------------------------------------------------- chart

def draw_chart(data, png):
    """Draw the chart from the JSON data; needs matplotlib (raises ImportError)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    benches = data["benchmarks"]
    allocs = data["allocators"]
    res = data["results"]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(max(10, 1.5 * len(benches) + 3), 9))
    n = len(allocs)
    width = 0.8 / max(n, 1)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    ratios = [s["ratio"] for b in benches for s in res.get(b, {}).values()
              if s.get("ratio") is not None and s["status"] == "ok"]
    lo = min(ratios + [1.0]) / 1.4
    hi = max(ratios + [1.0]) * 1.4
    fails = []
    for i, a in enumerate(allocs):
        xs, ys, rs, rx = [], [], [], []
        for j, b in enumerate(benches):
            s = res.get(b, {}).get(a)
            if not s:
                continue
            x = j - 0.4 + width * (i + 0.5)
            if s.get("ratio") is not None and s["status"] == "ok":
                xs.append(x)
                ys.append(s["ratio"])
            elif s["status"] != "ok":
                fails.append(x)
            if s.get("peak_rss_mb") is not None:
                rx.append(x)
                rs.append(s["peak_rss_mb"])
        c = colors[i % len(colors)]
        # Bars start at 1.0 (= mimalloc) on a log axis: up is faster, down slower.
        ax1.bar(xs, [y - 1.0 for y in ys], width, bottom=1.0, label=a, color=c)
        ax2.bar(rx, rs, width, label=a, color=c)
    for x in fails:
        ax1.text(x, lo * 1.05, "FAIL", rotation=90, ha="center", va="bottom", fontsize=7, color="red")
    ax1.set_yscale("log")
    ax1.set_ylim(lo, hi)
    ticks = [t for t in (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1, 2, 4, 8, 16) if lo <= t <= hi]
    ax1.set_yticks(ticks)
    ax1.set_yticklabels(["%gx" % t if t >= 1 else "1/%gx" % (1 / t) for t in ticks])
    ax1.minorticks_off()
    ax1.axhline(1.0, color="black", linewidth=0.8)
    ax1.set_ylabel("median ops/s relative to %s (log)" % BASELINE)
    ax1.set_xticks(range(len(benches)))
    ax1.set_xticklabels(benches, rotation=20, ha="right", fontsize=8)
    ax1.legend(fontsize=8, ncol=min(n, 6))
    ax1.set_title("hakmem benchmarks (%s, %s runs each, %s)" % (data.get("mode", "?"), data.get("runs", "?"),
                                                             data.get("date", "")[:16]))
    ax2.set_ylabel("peak RSS (MiB, log scale)")
    ax2.set_yscale("log")
    ax2.set_xticks(range(len(benches)))
    ax2.set_xticklabels(benches, rotation=20, ha="right", fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def make_chart(json_path, png):
    """Draw with this python's matplotlib, else /usr/bin/python3; return a note."""
    try:
        with open(json_path) as f:
            data = json.load(f)
        draw_chart(data, png)
        return None
    except ImportError:
        pass
    except Exception as e:  # noqa: BLE001 - the chart must never fail the run
        return "chart skipped: %s" % e
    alt = "/usr/bin/python3"
    if os.path.realpath(alt) != os.path.realpath(sys.executable) and os.path.exists(alt):
        try:
            r = subprocess.run([alt, os.path.abspath(__file__), "--chart-only", json_path, "--chart-out", png],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
            if r.returncode == 0 and os.path.exists(png):
                return None
            return "chart skipped: %s failed: %s" % (alt, r.stdout.decode(errors="replace").strip()[-300:])
        except Exception as e:  # noqa: BLE001
            return "chart skipped: %s" % e
    return "chart skipped: matplotlib is not installed (apt-get install python3-matplotlib)"


# ---------------------------------------------------------------- main

def select_benchmarks(spec):
    if not spec:
        return list(BENCHMARKS)
    chosen = []
    for want in [w.strip() for w in spec.split(",") if w.strip()]:
        key = want[len("bench_"):] if want.startswith("bench_") else want
        hits = [b for b in BENCHMARKS if b[0] == key or b[1] == want or b[1] == "bench_" + key
                or b[0].startswith(key + "_")]
        if not hits:
            sys.exit("unknown benchmark '%s'; known: %s" % (want, ", ".join(b[0] for b in BENCHMARKS)))
        for h in hits:
            if h not in chosen:
                chosen.append(h)
    return chosen


def git_commit():
    try:
        return subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, timeout=10).stdout.decode().strip()
    except Exception:  # noqa: BLE001
        return ""


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build directory (default: build)")
    ap.add_argument("--bench", default="", help="comma list of benchmarks (e.g. random_mixed,larson)")
    ap.add_argument("--runs", type=int, default=None, help="runs per allocator (default 5, quick 1)")
    ap.add_argument("--quick", action="store_true", help="short runs, one each (about a minute)")
    ap.add_argument("--allocators", default="", help="comma list (default: %s)" % ",".join(ALLOCATOR_ORDER))
    ap.add_argument("--no-strace", action="store_true", help="skip the strace syscall-count runs")
    ap.add_argument("--no-peer-build", action="store_true",
                    help="do not run scripts/build_peers.py for missing peers (their columns are left out)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per run before FAIL (default 30, quick 10)")
    ap.add_argument("--out", default=os.path.join(REPO, "results"), help="output directory (default results/)")
    ap.add_argument("--no-chart", action="store_true")
    ap.add_argument("--from-json", metavar="JSON", help="no runs: print the tables of an earlier latest.json "
                    "and rewrite latest.md next to it")
    ap.add_argument("--chart-only", metavar="JSON", help=argparse.SUPPRESS)
    ap.add_argument("--chart-out", metavar="PNG", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.chart_only:
        with open(args.chart_only) as f:
            draw_chart(json.load(f), args.chart_out)
        return 0

    if args.from_json:
        with open(args.from_json) as f:
            data = json.load(f)
        print_tables(data["results"], data["benchmarks"], data["allocators"])
        print_idle(data.get("idle"), data["allocators"])
        md = os.path.join(os.path.dirname(os.path.abspath(args.from_json)), "latest.md")
        write_markdown(md, data)
        log("wrote %s" % os.path.relpath(md))
        return 0

    build = args.build if os.path.isabs(args.build) else os.path.abspath(args.build)
    if not os.path.isdir(build) and os.path.isdir(os.path.join(REPO, args.build)):
        build = os.path.join(REPO, args.build)
    bindir = os.path.join(build, "bench")
    runs = args.runs if args.runs is not None else (1 if args.quick else 5)
    if runs < 1:
        sys.exit("--runs must be >= 1")
    timeout = args.timeout if args.timeout else (10.0 if args.quick else 30.0)
    bench_spec = [w.strip() for w in args.bench.split(",") if w.strip()]
    do_idle = not bench_spec or "idle" in bench_spec
    bench_spec = [w for w in bench_spec if w != "idle"]
    benches = select_benchmarks(",".join(bench_spec)) if bench_spec or not args.bench else []
    wanted = [a.strip() for a in args.allocators.split(",") if a.strip()] or list(ALLOCATOR_ORDER)
    for a in wanted:
        if a not in ALLOCATOR_ORDER:
            sys.exit("unknown allocator '%s'; known: %s" % (a, ", ".join(ALLOCATOR_ORDER)))

    allocs, notes = discover_allocators(build, wanted, not args.no_peer_build)
    for n in notes:
        log("note: " + n)
    if not allocs:
        sys.exit("no allocators to run")
    alloc_names = [a[0] for a in allocs]
    if BASELINE not in alloc_names:
        log("note: %s is not available, so ratios are left out" % BASELINE)

    missing = [b[1] for b in benches if not os.access(os.path.join(bindir, b[1]), os.X_OK)]
    if missing:
        sys.exit("benchmark binaries missing in %s: %s (run `make` first)" % (bindir, ", ".join(sorted(set(missing)))))

    do_strace = not args.no_strace and shutil.which("strace") is not None
    if not args.no_strace and not do_strace:
        log("note: strace not found; syscall counts left out")

    mode = "quick" if args.quick else "full"
    log("hakmem benchmarks: %s mode, %d run(s) per allocator, %d benchmark(s), allocators: %s"
        % (mode, runs, len(benches), ", ".join(alloc_names)))
    for name, env, desc in allocs:
        log("  %-12s %s" % (name, desc))

    load_start = os.getloadavg()[0]
    total_units = len(benches) * len(allocs) * (runs + (1 if do_strace else 0))
    done_units = 0

    def expect(binary, strace=False):
        e = EXPECTED_SECS.get(binary, (1.0, 0.2))[1 if args.quick else 0]
        return e * (STRACE_FACTOR if strace else 1.0)

    exp_total = sum(len(allocs) * (runs * expect(b[1]) + (expect(b[1], True) if do_strace else 0)) for b in benches)
    exp_done = [0.0]
    t_start = time.monotonic()
    results = {}
    raw = {}
    bench_names = [b[0] for b in benches]
    notes_out = list(notes)

    def progress(label):
        elapsed = time.monotonic() - t_start
        # Scale the rough per-benchmark guesses by how fast things went so far.
        eta = elapsed / exp_done[0] * max(0.0, exp_total - exp_done[0]) if exp_done[0] > 0 else exp_total
        log("[%3d/%d] %-44s elapsed %s, about %s left" % (done_units, total_units, label, fmt_secs(elapsed),
                                                         fmt_secs(eta)))

    for bname, binary, full_args, quick_args, deterministic in benches:
        cmd = [os.path.join(bindir, binary)] + (quick_args if args.quick else full_args)
        b_timeout = timeout * TIMEOUT_SCALE.get(bname, 1)
        raw[bname] = {a: [] for a in alloc_names}
        gave_up = set()
        for i in range(runs):
            for name, env, _ in allocs:
                if name in gave_up:
                    raw[bname][name].append({"ok": False, "error": "skipped after timeout", "wall": 0.0})
                    done_units += 1
                    exp_done[0] += expect(binary)
                    continue
                r = run_once(cmd, env, b_timeout)
                raw[bname][name].append(r)
                done_units += 1
                exp_done[0] += expect(binary)
                if r["ok"]:
                    what = "%s ops/s, %.2fs" % (fmt_ops(r["ops"]), r["wall"])
                else:
                    what = "FAIL (%s)" % r["error"]
                    if r["error"].startswith("timeout"):
                        gave_up.add(name)
                progress("%s %s run %d/%d: %s" % (bname, name, i + 1, runs, what))
        res_b = {}
        for name, env, _ in allocs:
            s = summarize(raw[bname][name])
            s["cmd"] = " ".join(["%s=%s" % kv for kv in env.items()] + cmd)
            res_b[name] = s
        if do_strace:
            for name, env, _ in allocs:
                if name in gave_up:
                    done_units += 1
                    exp_done[0] += expect(binary, True)
                    continue
                counts, err = strace_counts(cmd, env, b_timeout * 3)
                done_units += 1
                exp_done[0] += expect(binary, True)
                res_b[name]["syscalls"] = counts
                if counts and res_b[name].get("median_wall"):
                    res_b[name]["calls_per_s"] = sum(counts.get(k, 0) for k in OS_CALLS) / res_b[name]["median_wall"]
                if err:
                    res_b[name]["strace_error"] = err
                progress("%s %s strace: %s" % (bname, name, "ok" if counts else "failed (%s)" % err))
        base = res_b.get(BASELINE)
        for name in alloc_names:
            s = res_b[name]
            if base and base.get("median") and s.get("median") is not None:
                s["ratio"] = s["median"] / base["median"]
        if deterministic:
            sums = {n: res_b[n]["checksums"] for n in alloc_names if res_b[n]["checksums"]}
            distinct = set(c for v in sums.values() for c in v)
            if len(distinct) > 1:
                msg = "%s: checksums differ between allocators/runs (%s): a block's contents were not preserved" % (
                    bname, ", ".join("%s=%s" % (n, v) for n, v in sums.items()))
                log("WARNING: " + msg)
                notes_out.append(msg)
        results[bname] = res_b

    idle = run_idle(bindir, allocs, args.quick, timeout) if do_idle else None
    total = time.monotonic() - t_start
    print_tables(results, bench_names, alloc_names)
    print_idle(idle, alloc_names)
    log("")
    log("total time %s; 1-min load average %.2f at the start, %.2f at the end (>%d means other work competed "
        "for the CPUs)" % (fmt_secs(total), load_start, os.getloadavg()[0], os.cpu_count() or 1))

    os.makedirs(args.out, exist_ok=True)
    csv_path = os.path.join(args.out, "latest.csv")
    json_path = os.path.join(args.out, "latest.json")
    png_path = os.path.join(args.out, "bench.png")
    write_csv(csv_path, results, bench_names, alloc_names)
    data = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "mode": mode,
        "runs": runs,
        "git_commit": git_commit(),
        "machine": {"cpu": cpu_model(), "nproc": os.cpu_count(), "kernel": platform.release(),
                    "python": sys.version.split()[0],
                    "loadavg_1min_start": round(load_start, 2), "loadavg_1min_end": round(os.getloadavg()[0], 2)},
        "baseline": BASELINE,
        "allocators": alloc_names,
        "allocator_libs": {n: d for n, _, d in allocs},
        "benchmarks": bench_names,
        "commands": {b[0]: [b[1]] + (b[3] if args.quick else b[2]) for b in benches},
        "results": results,
        "idle": idle,
        "idle_args": (IDLE_ARGS[1] if args.quick else IDLE_ARGS[0]) if idle else [],
        "vs_best_peer": best_peer(results, bench_names, alloc_names),
        "raw_runs": {b: {a: [{k: v for k, v in r.items() if k not in ("stdout_tail",)} for r in rs]
                         for a, rs in d.items()} for b, d in raw.items()},
        "notes": notes_out,
        "total_seconds": total,
    }
    with open(json_path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=False)
    md_path = os.path.join(args.out, "latest.md")
    write_markdown(md_path, data)
    log("wrote %s, %s and %s" % (os.path.relpath(csv_path), os.path.relpath(json_path), os.path.relpath(md_path)))

    if not args.no_chart:
        note = make_chart(json_path, png_path)
        if note:
            log("note: " + note)
        else:
            log("wrote %s" % os.path.relpath(png_path))
            full_set = not args.bench and not args.quick and set(alloc_names) == set(ALLOCATOR_ORDER)
            if full_set:
                docs_png = os.path.join(REPO, "docs", "bench.png")
                try:
                    os.makedirs(os.path.dirname(docs_png), exist_ok=True)
                    shutil.copyfile(png_path, docs_png)
                    log("copied the chart to %s" % os.path.relpath(docs_png))
                except OSError as e:
                    log("note: could not copy the chart to docs/: %s" % e)
            else:
                log("note: docs/bench.png is only replaced by a full run (all benchmarks and allocators, not --quick)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
