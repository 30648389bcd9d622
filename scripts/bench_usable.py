#!/usr/bin/env python3
"""What malloc_usable_size costs each allocator, in instructions (callgrind).

bench_usable ITERS 1 frees and allocates a block per iteration and calls
malloc_usable_size on the block it frees and on the new one, as redis's
memory accounting does; bench_usable ITERS 0 is the same loop without the
two calls.  Each runs under `valgrind --tool=callgrind` with each allocator
preloaded (the set-up of scripts/bench.py; profiles as in
scripts/bench_instr.py: the inclusive count of bench_loop over ITERS).
Reported per allocator: instructions per iteration with and without the
calls, and per call = (with - without) / 2.  Exact and independent of the
machine's load.

  python3 scripts/bench_usable.py --build build [--iters N] [--allocators a,b]
"""

import argparse
import concurrent.futures
import datetime
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import bench_instr  # noqa: E402


def log(msg=""):
    print(msg, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--iters", type=int, default=1000000, help="ITERS per profile (default 1000000)")
    ap.add_argument("--allocators", default="", help="comma list (default: all available)")
    ap.add_argument("--no-peer-build", action="store_true")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="profiles run in parallel")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--out", default=os.path.join(bench.REPO, "results"))
    args = ap.parse_args()

    if not shutil.which("valgrind") or not shutil.which("callgrind_annotate"):
        sys.exit("valgrind (with callgrind_annotate) is needed: apt-get install valgrind")
    build = os.path.abspath(args.build)
    binary = os.path.join(build, "bench", "bench_usable")
    if not os.access(binary, os.X_OK):
        sys.exit("%s is missing (run `make` first)" % binary)
    wanted = [a.strip() for a in args.allocators.split(",") if a.strip()] or list(bench.ALLOCATOR_ORDER)
    allocs, notes = bench.discover_allocators(build, wanted, not args.no_peer_build)
    for n in notes:
        log("note: " + n)
    jobs = [(name, calls, env) for name, env, _ in allocs for calls in (1, 0)]
    log("callgrind: bench_usable %d {1,0}, %d profiles, %d at a time" % (args.iters, len(jobs), args.jobs))
    prof = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        futs = {ex.submit(bench_instr.callgrind, binary, [str(args.iters), str(calls)], env, False, args.timeout):
                (name, calls) for name, calls, env in jobs}
        for f in concurrent.futures.as_completed(futs):
            name, calls = futs[f]
            r = f.result()
            prof[(name, calls)] = r
            if "error" in r:
                log("%-12s calls=%d FAIL: %s" % (name, calls, r["error"]))
            else:
                log("%-12s calls=%d %.1f Ir/iteration" % (name, calls, (r["loop_ir"] or r["total_ir"]) / r["ops"]))

    warnings, table = [], []
    for name, _, desc in allocs:
        row = {"allocator": name, "lib": desc}
        for calls in (1, 0):
            r = prof.get((name, calls), {})
            if "error" in r or not r:
                row["error"] = r.get("error", "no profile")
                continue
            exp = bench_instr.EXPECT_OBJECT.get(name)
            if exp and not any(o.startswith(exp) for o in r["objects"]):
                warnings.append("%s: %s* does not appear in the profile" % (name, exp))
            if r.get("note"):
                warnings.append("%s: %s" % (name, r["note"]))
            row["with" if calls else "without"] = (r["loop_ir"] or r["total_ir"]) / r["ops"]
        if "with" in row and "without" in row:
            row["per_call"] = (row["with"] - row["without"]) / 2
        table.append(row)

    hdr = ["allocator", "Ir/iter with", "Ir/iter without", "Ir per malloc_usable_size"]
    rows = [[t["allocator"]] + (["%.1f" % t["with"], "%.1f" % t["without"], "%.1f" % t["per_call"]]
                                if "per_call" in t else ["FAIL", "-", "-"]) for t in table]
    widths = [max(len(x) for x in col) for col in zip(hdr, *rows)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)  # noqa: E731
                                  for i, (c, w) in enumerate(zip(cells, widths)))
    log("")
    log("malloc_usable_size under callgrind (bench_usable %d; one iteration = free + malloc "
        "[+ 2 malloc_usable_size]; lower is better)" % args.iters)
    log(fmt(hdr))
    log("-" * len(fmt(hdr)))
    for r in rows:
        log(fmt(r))
    for w in warnings:
        log("WARNING: " + w)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "usable.json"), "w") as f:
        json.dump({"date": datetime.datetime.now().isoformat(timespec="seconds"), "iters": args.iters,
                   "git_commit": bench.git_commit(), "table": table, "warnings": warnings, "notes": notes}, f,
                  indent=1)
    with open(os.path.join(args.out, "usable.md"), "w") as f:
        f.write("callgrind, `bench_usable %d 1` and `... 0`, commit %s, %s.\n\n"
                % (args.iters, bench.git_commit(), datetime.datetime.now().isoformat(timespec="seconds")))
        f.write("| " + " | ".join(hdr) + " |\n|---|" + "---:|" * (len(hdr) - 1) + "\n")
        for r in rows:
            f.write("| " + " | ".join(r) + " |\n")
    log("wrote %s and %s" % (os.path.relpath(os.path.join(args.out, "usable.json")),
                             os.path.relpath(os.path.join(args.out, "usable.md"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
