#!/usr/bin/env python3
"""Instructions per operation of each allocator, counted with callgrind.

Runs bench_random_mixed ITERS WS SEED at ws 400 and 40000 under
`valgrind --tool=callgrind --cache-sim=no` for each allocator (the same
LD_PRELOAD set-up as scripts/bench.py), plus bench_random_mixed_trivial: the
same loop compiled against the benchmark's own trivial allocator (free list
per 16-byte class over a bump region), i.e. the cost of the loop itself.

Ir/op is the inclusive instruction count of the timed loop (bench_loop, with
every malloc/free it calls) divided by ITERS; start-up, the final clean-up and
valgrind's own work are excluded.  The whole-program count per op is kept too.
allocator share = Ir/op - Ir/op of the trivial binary, and the last columns
give each allocator's share relative to mimalloc's.

Callgrind, unlike memcheck, does not replace malloc, so the preloaded
allocator's code is what runs; the script checks that the allocator's library
shows up in the profile and warns if it does not.

  python3 scripts/bench_instr.py --build build [--iters N] [--ws 400,40000]
      [--variant NAME=LIB[,VAR=VALUE...]]...   (e.g. an option's cost)

--programs tiny,shbench,larson instead counts whole programs (PROGRAMS below:
`make bench`'s workloads, shorter, shbench on one thread): Ir/op is the
whole run's count over the program's `ops:`, loop and start-up included, and
the ratio is hakmem's to the lowest other allocator's.  (larson runs for a
fixed time, so its operation count differs from allocator to allocator.)
"""

import argparse
import concurrent.futures
import csv
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (allocator discovery shared with the runner)

REPO = bench.REPO
BASELINE = "mimalloc"
TRIVIAL = "trivial"
# The library each allocator's code must come from in a profile.
EXPECT_OBJECT = {"glibc": "libc.so", "hakmem": "libhakmem", "hakmem-libc": "libhakmem",
                 "mimalloc": "libmimalloc", "jemalloc": "libjemalloc", "tcmalloc": "libtcmalloc",
                 "mimalloc-v2": "libmimalloc", "mimalloc-v3": "libmimalloc", "snmalloc": "libsnmallocshim"}


# --programs: name -> (binary in BUILD/bench, arguments)
PROGRAMS = {"tiny": ("bench_tiny", ["400"]),
            "shbench": ("bench_shbench", ["1", "20000", "64", "42"]),
            "larson": ("larson", ["2", "16", "1024", "1.0", "1000", "100", "42"]),
            "random_mixed_ws8192": ("bench_random_mixed", ["2000000", "8192", "42"])}


def log(msg=""):
    print(msg, flush=True)


def callgrind(binary, args, env_add, cache_sim, timeout):
    """Run one profile; return dict(loop_ir, total_ir, ops, objects, error)."""
    valgrind = shutil.which("valgrind")
    with tempfile.TemporaryDirectory(prefix="bench-instr-") as tmp:
        outf = os.path.join(tmp, "callgrind.out")
        cmd = [valgrind, "--tool=callgrind", "--cache-sim=" + ("yes" if cache_sim else "no"),
               "--callgrind-out-file=" + outf, binary] + args
        env = bench.base_env()
        env.update(env_add)
        try:
            r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": "timeout after %ds" % timeout}
        out = r.stdout.decode(errors="replace")
        err = r.stderr.decode(errors="replace")
        if r.returncode != 0:
            if "Failed to initialise snmalloc" in err:
                return {"error": "snmalloc does not start under valgrind (it reserves its page map's address "
                                 "space at start-up, and valgrind refuses the mapping)"}
            return {"error": "exit status %d: %s" % (r.returncode, err.strip()[-400:])}
        m = re.search(r"^ops:\s*(\d+)", out, re.M)
        if not m:
            return {"error": "no 'ops:' line in the benchmark output"}
        ops = int(m.group(1))
        try:
            ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", outf],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
            text = ann.stdout.decode(errors="replace")
        except (OSError, subprocess.TimeoutExpired) as e:
            return {"error": "callgrind_annotate failed: %s" % e}
    total = loop = None
    objects = set()
    for line in text.splitlines():
        mt = re.match(r"^\s*([\d,]+)\s+\(.*\)\s+PROGRAM TOTALS", line)
        if mt:
            total = int(mt.group(1).replace(",", ""))
        ml = re.match(r"^\s*([\d,]+)\s.*:bench_loop\b", line)
        if ml:
            v = int(ml.group(1).replace(",", ""))
            loop = v if loop is None else max(loop, v)
        mo = re.search(r"\[([^\]]+\.so[^\]]*)\]\s*$", line)
        if mo:
            objects.add(os.path.basename(mo.group(1)))
    if total is None:
        m = re.search(r"Collected\s*:\s*(\d+)", err)
        total = int(m.group(1)) if m else None
    if total is None:
        return {"error": "could not read the instruction total"}
    res = {"ops": ops, "total_ir": total, "loop_ir": loop, "objects": sorted(objects)}
    if loop is None:
        res["note"] = "bench_loop not found in the profile; using the whole-program total"
    return res


def programs_main(args, bindir, allocs):
    """--programs: whole-program Ir/op of each program under each allocator."""
    progs = [p.strip() for p in args.programs.split(",") if p.strip()]
    for p in progs:
        if p not in PROGRAMS:
            sys.exit("unknown program %s (known: %s)" % (p, ", ".join(PROGRAMS)))
    jobs = [(p, name, os.path.join(bindir, PROGRAMS[p][0]), PROGRAMS[p][1], env)
            for p in progs for name, env, _ in allocs]
    log("callgrind: %s under %d allocators, %d profiles, %d at a time"
        % (", ".join(progs), len(allocs), len(jobs), args.jobs))
    res = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        futs = {ex.submit(callgrind, b, a, e, args.cache_sim, args.timeout): (p, n) for p, n, b, a, e in jobs}
        for f in concurrent.futures.as_completed(futs):
            p, n = futs[f]
            r = f.result()
            res[(p, n)] = None if "error" in r else r["total_ir"] / r["ops"]
            log("%-20s %-12s %s" % (p, n, r["error"] if "error" in r else "%.1f Ir/op" % res[(p, n)]))
    names = [a[0] for a in allocs]
    hdr = ["program"] + names + ["hakmem / lowest other"]
    lines = ["| " + " | ".join(hdr) + " |", "|---|" + "---:|" * (len(hdr) - 1)]
    for p in progs:
        others = [res[(p, n)] for n in names if n != "hakmem" and res.get((p, n)) is not None]
        hk = res.get((p, "hakmem"))
        ratio = "%.2fx" % (hk / min(others)) if hk is not None and others else "-"
        lines.append("| " + " | ".join([p] + ["-" if res.get((p, n)) is None else "%.1f" % res[(p, n)]
                                              for n in names] + [ratio]) + " |")
    log("")
    log("Whole-program instructions per operation (callgrind; lower is better)")
    for ln in lines:
        log(ln)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "instr_programs.md"), "w") as fh:
        fh.write("callgrind, whole programs, commit %s, %s.\n\n" % (bench.git_commit(),
                 datetime.datetime.now().isoformat(timespec="seconds")))
        fh.write("\n".join(lines) + "\n")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--iters", type=int, default=2000000, help="ITERS per profile (default 2000000)")
    ap.add_argument("--ws", default="400,40000", help="working-set sizes (default 400,40000)")
    ap.add_argument("--seed", default="42")
    ap.add_argument("--allocators", default="", help="comma list (default: all available)")
    ap.add_argument("--cache-sim", action="store_true", help="turn on callgrind's cache simulation")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="profiles run in parallel")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--out", default=os.path.join(REPO, "results"))
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=LIB[,VAR=VALUE...]",
                    help="one more row: LIB preloaded with these variables (e.g. "
                         "on=build/libhakmem.so,HAKMEM_PROFILE=/tmp/p.pb.gz); repeatable")
    ap.add_argument("--programs", default="", help="comma list of PROGRAMS to count whole instead (e.g. tiny,shbench)")
    args = ap.parse_args()

    if not shutil.which("valgrind") or not shutil.which("callgrind_annotate"):
        sys.exit("valgrind (with callgrind_annotate) is needed: apt-get install valgrind")
    build = os.path.abspath(args.build)
    if not os.path.isdir(build) and os.path.isdir(os.path.join(REPO, args.build)):
        build = os.path.join(REPO, args.build)
    bindir = os.path.join(build, "bench")
    main_bin = os.path.join(bindir, "bench_random_mixed")
    triv_bin = os.path.join(bindir, "bench_random_mixed_trivial")
    for b in (main_bin, triv_bin):
        if not os.access(b, os.X_OK):
            sys.exit("%s is missing (run `make` first)" % b)
    wss = [int(w) for w in args.ws.split(",") if w.strip()]
    wanted = [a.strip() for a in args.allocators.split(",") if a.strip()] or list(bench.ALLOCATOR_ORDER)
    allocs, notes = bench.discover_allocators(build, wanted)
    for n in notes:
        log("note: " + n)
    for v in args.variant:
        name, _, rest = v.partition("=")
        lib, *kvs = rest.split(",")
        env = {"LD_PRELOAD": os.path.abspath(lib)}
        env.update(kv.split("=", 1) for kv in kvs)
        allocs.append((name, env, None))
    if args.programs:
        return programs_main(args, bindir, allocs)
    names = [TRIVIAL] + [a[0] for a in allocs]

    jobs = []
    for ws in wss:
        a_args = [str(args.iters), str(ws), args.seed]
        jobs.append((TRIVIAL, ws, triv_bin, a_args, {}))
        for name, env, _ in allocs:
            jobs.append((name, ws, main_bin, a_args, env))
    log("callgrind: bench_random_mixed %d WS %s at ws %s, %d profiles, %d at a time"
        % (args.iters, args.seed, ", ".join(map(str, wss)), len(jobs), args.jobs))

    results = {n: {} for n in names}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        futs = {ex.submit(callgrind, b, a, e, args.cache_sim, args.timeout): (n, ws) for n, ws, b, a, e in jobs}
        done = 0
        for f in concurrent.futures.as_completed(futs):
            n, ws = futs[f]
            r = f.result()
            done += 1
            results[n][ws] = r
            if "error" in r:
                log("[%2d/%d] %-12s ws %-6d FAIL: %s" % (done, len(jobs), n, ws, r["error"]))
            else:
                ir = r["loop_ir"] if r["loop_ir"] is not None else r["total_ir"]
                log("[%2d/%d] %-12s ws %-6d %.1f Ir/op" % (done, len(jobs), n, ws, ir / r["ops"]))

    # Check that the intended allocator's code was the one measured.
    expect = EXPECT_OBJECT
    warnings = []
    for n in names:
        for ws, r in results[n].items():
            if "error" in r:
                continue
            if n in expect and not any(o.startswith(expect[n]) for o in r["objects"]):
                warnings.append("%s ws %d: %s* does not appear in the profile" % (n, ws, expect[n]))
            if r.get("note"):
                warnings.append("%s ws %d: %s" % (n, ws, r["note"]))

    def per_op(n, ws, key="loop_ir"):
        r = results.get(n, {}).get(ws)
        if not r or "error" in r:
            return None
        v = r[key] if r.get(key) is not None else r["total_ir"]
        return v / r["ops"]

    table = []
    for n in names:
        row = {"allocator": n}
        for ws in wss:
            ir = per_op(n, ws)
            triv = per_op(TRIVIAL, ws)
            row["ir_op_%d" % ws] = ir
            row["total_ir_op_%d" % ws] = per_op(n, ws, "total_ir")
            share = ir - triv if ir is not None and triv is not None and n != TRIVIAL else None
            row["share_%d" % ws] = share
            base = per_op(BASELINE, ws)
            base_share = base - triv if base is not None and triv is not None else None
            row["share_vs_%s_%d" % (BASELINE, ws)] = (share / base_share) if share is not None and base_share else None
        row["errors"] = {ws: results[n][ws]["error"] for ws in wss if "error" in results[n].get(ws, {})}
        table.append(row)

    def f(v, fmt="%.1f"):
        return "-" if v is None else fmt % v

    hdr = ["allocator"] + ["Ir/op ws%d" % w for w in wss] + ["share ws%d" % w for w in wss] + \
          ["share/%s ws%d" % (BASELINE, w) for w in wss] + ["total Ir/op ws%d" % w for w in wss]
    rows = []
    for row in table:
        cells = [row["allocator"]]
        for w in wss:
            cells.append("FAIL" if w in row["errors"] else f(row["ir_op_%d" % w]))
        for w in wss:
            cells.append("FAIL" if w in row["errors"] else f(row["share_%d" % w]))
        for w in wss:
            cells.append("FAIL" if w in row["errors"] else f(row["share_vs_%s_%d" % (BASELINE, w)], "%.2fx"))
        for w in wss:
            cells.append("FAIL" if w in row["errors"] else f(row["total_ir_op_%d" % w]))
        rows.append(cells)
    widths = [max(len(str(x)) for x in col) for col in zip(hdr, *rows)]
    log("")
    log("Instructions per operation (callgrind, bench_random_mixed %d iters, seed %s; lower is better)"
        % (args.iters, args.seed))
    log("Ir/op: the timed loop incl. the allocator calls; share: Ir/op minus the trivial allocator's loop")
    line = "  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(hdr, widths)))
    log(line)
    log("-" * len(line))
    for cells in rows:
        log("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))))
    for w in warnings:
        log("WARNING: " + w)
    for row in table:
        for ws, e in row["errors"].items():
            log("FAIL %s ws %d: %s" % (row["allocator"], ws, e))

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "instr.csv"), "w", newline="") as fh:
        wr = csv.writer(fh)
        keys = [k for k in table[0].keys() if k != "errors"]
        wr.writerow(keys)
        for row in table:
            wr.writerow(["" if row[k] is None else (("%.3f" % row[k]) if isinstance(row[k], float) else row[k])
                         for k in keys])
    with open(os.path.join(args.out, "instr.json"), "w") as fh:
        json.dump({"date": datetime.datetime.now().isoformat(timespec="seconds"), "iters": args.iters,
                   "seed": args.seed, "ws": wss, "cache_sim": args.cache_sim, "git_commit": bench.git_commit(),
                   "table": table, "profiles": {n: {str(k): v for k, v in d.items()} for n, d in results.items()},
                   "warnings": warnings, "notes": notes}, fh, indent=1)
    with open(os.path.join(args.out, "instr.md"), "w") as fh:
        fh.write("callgrind, `bench_random_mixed %d WS %s`, cache simulation %s, commit %s, %s.\n\n"
                 % (args.iters, args.seed, "on" if args.cache_sim else "off", bench.git_commit(),
                    datetime.datetime.now().isoformat(timespec="seconds")))
        fh.write("| " + " | ".join(hdr) + " |\n|---|" + "---:|" * (len(hdr) - 1) + "\n")
        for cells in rows:
            fh.write("| " + " | ".join(cells) + " |\n")
        for w in warnings:
            fh.write("\n- warning: %s" % w)
    log("wrote %s, %s and %s" % (os.path.relpath(os.path.join(args.out, "instr.csv")),
                                 os.path.relpath(os.path.join(args.out, "instr.json")),
                                 os.path.relpath(os.path.join(args.out, "instr.md"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
