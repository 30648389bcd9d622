#!/usr/bin/env python3
"""The heap profiler's tests (HAKMEM_PROFILE, HAKMEM_LEAK_REPORT): runs
prof_workload (and perl) with libhakmem.so preloaded and reads the profiles
with a profile.proto decoder of its own (CI has no Go); where `go` is
installed, `go tool pprof -top` must read them too.

  test_prof.py LIBHAKMEM PROF_WORKLOAD MODE [LAUNCHER]
MODE: sites | leak | fork | threads | trade | signal | dump | perl | labels | kept | launcher | svg
Estimates are checked against the amounts allocated within a tolerance of
30% (at HAKMEM_PROFILE_RATE=16384, about five standard deviations: over
60 runs of `dump` the estimates spread by 4-6%).
Exit 77: skipped (perl not installed; launcher: go not installed, after
checking the launcher's error without it; svg: go or inferno-flamegraph not
installed)."""

import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

RATE = 16384
TOL = 0.30


def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    sys.exit(1)


# ---- profile.proto ------------------------------------------------------------
def varint(b, i):
    v = s = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return v, i


def fields(b):
    """(field, wire type, value) of a message; value: int or bytes."""
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(b, i)
        elif wt == 2:
            n, i = varint(b, i)
            v = b[i:i + n]
            i += n
        elif wt == 1:
            v = int.from_bytes(b[i:i + 8], "little")
            i += 8
        elif wt == 5:
            v = int.from_bytes(b[i:i + 4], "little")
            i += 4
        else:
            fail("bad wire type %d" % wt)
        yield f, wt, v


def packed(v, wt):
    if wt == 0:
        return [v]
    out, i = [], 0
    while i < len(v):
        x, i = varint(v, i)
        out.append(x)
    return out


def decode(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] != b"\x1f\x8b":
        fail("%s is not gzip" % path)
    data = gzip.decompress(raw)  # checks the CRC and length too
    prof = {"types": [], "samples": [], "locations": {}, "functions": {}, "mappings": {}, "strings": [], "labels": []}
    for f, wt, v in fields(data):
        if f == 1:
            t = dict((ff, vv) for ff, _, vv in fields(v))
            prof["types"].append((t.get(1, 0), t.get(2, 0)))
        elif f == 2:
            locs, vals, labels = [], [], []
            for ff, w, vv in fields(v):
                if ff == 1:
                    locs += packed(vv, w)
                elif ff == 2:
                    vals += packed(vv, w)
                elif ff == 3:  # Label: key, str, num, num_unit (string ids)
                    labels.append(dict((a, b) for a, _, b in fields(vv)))
            prof["samples"].append((locs, vals))
            prof["labels"].append(labels)
        elif f in (9, 10):  # time_nanos, duration_nanos
            prof[f] = v
        elif f == 3:
            m = dict((ff, vv) for ff, _, vv in fields(v))
            prof["mappings"][m[1]] = m
        elif f == 4:
            loc = {"lines": []}
            for ff, _, vv in fields(v):
                if ff == 4:
                    loc["lines"].append(dict((a, b) for a, _, b in fields(vv)))
                else:
                    loc[ff] = vv
            prof["locations"][loc[1]] = loc
        elif f == 5:
            fn = dict((ff, vv) for ff, _, vv in fields(v))
            prof["functions"][fn[1]] = fn
        elif f == 6:
            prof["strings"].append(v.decode())
    s = prof["strings"]
    names = [(s[a], s[b]) for a, b in prof["types"]]
    if names != [("alloc_objects", "count"), ("alloc_space", "bytes"), ("inuse_objects", "count"),
                 ("inuse_space", "bytes")]:
        fail("%s: sample types %s" % (path, names))
    for m in prof["mappings"].values():
        if not s[m.get(5, 0)].startswith("/"):
            fail("%s: a mapping without a file name" % path)
    return prof


_nm = {}


def nm_name(prof, loc):
    """A frame the profile does not name (a dump from the signal handler
    names none): the exported symbol of its file holding it (nm -D)."""
    m = prof["mappings"].get(loc.get(2))
    if m is None or shutil.which("nm") is None:
        return None
    path = prof["strings"][m[5]]
    if path not in _nm:
        r = subprocess.run(["nm", "-D", "-S", "--defined-only", path], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL)
        syms = []
        for line in r.stdout.decode(errors="replace").splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[2] in "tTwW":
                syms.append((int(parts[0], 16), int(parts[1], 16), parts[3]))
        _nm[path] = syms
    # file offset = vaddr in the usual layout of an executable segment
    off = loc[3] - m[2] + m.get(4, 0)
    for start, size, name in _nm[path]:
        if start <= off < start + size:
            return name
    return None


def frame_names(prof, loc_id):
    loc = prof["locations"][loc_id]
    names = [prof["strings"][prof["functions"][l[1]][2]] for l in loc["lines"] if l.get(1) in prof["functions"]]
    if not names:
        n = nm_name(prof, loc)
        names = [n] if n else []
    return names


def by_site(prof):
    """Values summed per leaf function name (the malloc call's caller)."""
    sums = {}
    for locs, vals in prof["samples"]:
        leaf = frame_names(prof, locs[0]) if locs else []
        name = leaf[0] if leaf else "?"
        acc = sums.setdefault(name, [0, 0, 0, 0])
        for k in range(4):
            acc[k] += vals[k]
    return sums


def close(est, want, what):
    if want == 0:
        if est != 0:
            fail("%s: estimated %d, expected 0" % (what, est))
        return
    if abs(est - want) > TOL * want:
        fail("%s: estimated %d, expected %d (more than %d%% off)" % (what, est, want, TOL * 100))
    print("ok %s: estimated %d, true %d (%+.1f%%)" % (what, est, want, 100.0 * (est - want) / want))


def check_expect(prof, out):
    sums = by_site(prof)
    n = 0
    for m in re.finditer(r"^expect (\S+) (\d+) (\d+)$", out, re.M):
        site, alloc, inuse = m.group(1), int(m.group(2)), int(m.group(3))
        got = sums.get(site)
        if got is None:
            fail("no sample at %s (sites: %s)" % (site, sorted(sums)))
        close(got[1], alloc, site + " alloc_space")
        close(got[3], inuse, site + " inuse_space")
        n += 1
    if n == 0:
        fail("the workload printed no expectation")


def num_labels(prof, i):
    """Sample i's numeric labels: {key: (num, unit)}."""
    s = prof["strings"]
    return dict((s[l.get(1, 0)], (l.get(3, 0), s[l.get(4, 0)])) for l in prof["labels"][i])


def check_labels(prof, path):
    """prof_workload labels: two_sizes_site's alloc samples carry its two
    sizes as `bytes`, each estimated; early_site's live samples have
    alloc_time_ms before late_site's (300 ms apart)."""
    alloc, times = {}, {}
    for i, (locs, vals) in enumerate(prof["samples"]):
        lab = num_labels(prof, i)
        if lab.get("bytes", (0, ""))[1] != "bytes":
            fail("sample %d without a bytes label: %s" % (i, lab))
        leaf = (frame_names(prof, locs[0]) if locs else []) or ["?"]
        if vals[0] > 0:
            a = alloc.setdefault(leaf[0], {})
            a[lab["bytes"][0]] = a.get(lab["bytes"][0], 0) + vals[1]
        if vals[2] > 0:
            if lab.get("alloc_time_ms", (0, ""))[1] != "ms":
                fail("in-use sample %d without alloc_time_ms: %s" % (i, lab))
            times.setdefault(leaf[0], []).append(lab["alloc_time_ms"][0])
    sizes = alloc.get("two_sizes_site", {})
    if sorted(sizes) != [1000, 5000]:
        fail("two_sizes_site's bytes labels: %s, expected 1000 and 5000" % sorted(sizes))
    for n, count in ((1000, 9000), (5000, 3000)):
        close(sizes[n], count * n, "two_sizes_site alloc_space of bytes=%d" % n)
    early, late = times.get("early_site"), times.get("late_site")
    if not early or not late or max(early) + 250 > min(late):
        fail("alloc_time_ms: early_site %s, late_site %s: not 300 ms apart" % (
            early and (min(early), max(early)), late and (min(late), max(late))))
    print("ok alloc_time_ms: early_site %d-%d, late_site %d-%d" % (min(early), max(early), min(late), max(late)))
    dur, at = prof.get(10, 0), prof.get(9, 0)
    if dur < 300e6 or dur > 300e9 or abs(at / 1e9 - time.time()) > 300:
        fail("duration_nanos %d, time_nanos %d (now %d)" % (dur, at, time.time() * 1e9))
    if shutil.which("go") is None:
        print("(go not installed: go tool pprof -raw not run)")
        return
    r = subprocess.run(["go", "tool", "pprof", "-raw", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=300)
    out = r.stdout.decode(errors="replace")
    for want in ("bytes:[1000 bytes]", "bytes:[5000 bytes]", "alloc_time_ms:["):
        if r.returncode != 0 or want not in out:
            fail("go tool pprof -raw: no %s\n%s" % (want, out))
    print("ok go tool pprof -raw: the labels bytes and alloc_time_ms")


def go_top(path, want_top):
    """go tool pprof -top reads the file; its first row is want_top."""
    if shutil.which("go") is None:
        print("(go not installed: go tool pprof not run)")
        return
    r = subprocess.run(["go", "tool", "pprof", "-top", "-sample_index=alloc_space", path],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    out = r.stdout.decode(errors="replace")
    rows = [l for l in out.splitlines() if re.match(r"^\s*[\d.]+[kMG]?B\s", l)]  # (the widest figure has no padding)
    if r.returncode != 0 or not rows:
        fail("go tool pprof -top failed:\n" + out)
    if want_top not in rows[0]:
        fail("go tool pprof -top: first row %r, expected %s\n%s" % (rows[0], want_top, out))
    print("ok go tool pprof -top: " + rows[0].strip())


def run(cmd, env_add, tmp):
    env = dict(os.environ)
    env.update({"HAKMEM_PROFILE_RATE": str(RATE)})
    env.update(env_add)
    r = subprocess.run(cmd, env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    out, err = r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")
    if r.returncode != 0:
        fail("%s exited with %d\n%s%s" % (cmd, r.returncode, out, err))
    return out, err


def main():
    lib, workload, mode = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), sys.argv[3]
    tmp = tempfile.mkdtemp(prefix="hakmem_prof_")
    try:
        pattern = os.path.join(tmp, "heap.%p.pb.gz")
        env = {"LD_PRELOAD": lib, "HAKMEM_PROFILE": pattern}

        def profile_of(pid):
            return os.path.join(tmp, "heap.%d.pb.gz" % pid)

        if mode in ("sites", "threads", "trade"):
            out, _ = run([workload, mode], env, tmp)
            files = [f for f in os.listdir(tmp) if f.startswith("heap.")]
            if len(files) != 1:
                fail("expected one profile, found %s" % files)
            path = os.path.join(tmp, files[0])
            check_expect(decode(path), out)
            go_top(path, {"sites": "site_big", "threads": "thread_site", "trade": "trade_site"}[mode])
        elif mode == "labels":
            out, _ = run([workload, mode], {"LD_PRELOAD": lib, "HAKMEM_PROFILE": os.path.join(tmp, "l.pb.gz")}, tmp)
            path = os.path.join(tmp, "l.pb.gz")
            prof = decode(path)
            check_expect(prof, out)
            check_labels(prof, path)
        elif mode == "leak":
            out, err = run([workload, "leak"], {"LD_PRELOAD": lib, "HAKMEM_LEAK_REPORT": "1"}, tmp)
            m = re.search(r"^hakmem: leak: (\d+) bytes in (\d+) blocks .*\n(hakmem:   #0 .*)$", err, re.M)
            if m is None:
                fail("no leak report on stderr:\n" + err)
            if "leak_site" not in m.group(3):
                fail("the largest leak is not named leak_site:\n" + err)
            close(int(m.group(1)), 5000000, "leak report bytes")
            close(int(m.group(2)), 5000, "leak report blocks")
            if "site_small" in err:
                fail("freed blocks reported as leaks:\n" + err)
            # the workload sleeps 300 ms after its leaks, before exit
            age = re.search(r"^hakmem: leak: .*, the oldest (\d+) ms old\) allocated at:$", err, re.M)
            if age is None or not 250 <= int(age.group(1)) < 60000:
                fail("no age of the oldest leak (300 ms before exit):\n" + err)
            print("ok the oldest leak: %s ms old" % age.group(1))
        elif mode == "fork":
            out, _ = run([workload, "fork"], env, tmp)
            child = int(re.search(r"^child (\d+)$", out, re.M).group(1))
            parent = int(re.search(r"^parent (\d+)$", out, re.M).group(1))
            pp, cp = decode(profile_of(parent)), decode(profile_of(child))
            check_expect(pp, out)
            if "child_site" in by_site(pp):
                fail("the parent's profile has the child's allocations")
            close(by_site(cp).get("child_site", [0] * 4)[3], 6000000, "child_site inuse_space (child's profile)")
        elif mode == "signal":
            path = os.path.join(tmp, "sig.pb.gz")
            out, _ = run([workload, "signal", path], {"LD_PRELOAD": lib, "HAKMEM_PROFILE": path,
                                                       "HAKMEM_PROFILE_SIGNAL": "1"}, tmp)
            check_expect(decode(path + ".sig"), out)
        elif mode == "dump":
            path = os.path.join(tmp, "dump.pb.gz")
            out, _ = run([workload, "dump", path], {"LD_PRELOAD": lib, "HAKMEM_LEAK_REPORT": "1"}, tmp)
            check_expect(decode(path), out)
        elif mode == "kept":
            # a sampled block freed twice (kept by the profiler after its
            # first free): reported; in warn mode no block is handed out twice
            for how, warn in ((h, w) for h in ("free", "realloc") for w in (False, True)):
                e = dict(os.environ, LD_PRELOAD=lib, HAKMEM_PROFILE=os.path.join(tmp, "k.pb.gz"),
                         HAKMEM_PROFILE_RATE="1")
                if warn:
                    e["HAKMEM_ON_ERROR"] = "warn"
                r = subprocess.run([workload, "kept", how], env=e, cwd=tmp, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, timeout=300)
                out, err = r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")
                m = re.search(r"^PTR (0x[0-9a-f]+)$", out, re.M)
                want = "hakmem: error: double free of %s (%slarge block already freed)\n" % (
                    m.group(1) if m else "?", "realloc: " if how == "realloc" else "")
                tag = "kept %s (%s)" % (how, "warn" if warn else "abort")
                if m is None or err != want:
                    fail("%s: stderr %r, expected %r; stdout %r" % (tag, err, want, out))
                if warn and (r.returncode != 0 or "CONTINUED" not in out):
                    fail("%s: exit %d, stdout %r" % (tag, r.returncode, out))
                if not warn and r.returncode != -6:
                    fail("%s: expected SIGABRT, exit %d" % (tag, r.returncode))
            print("ok a kept sampled block's second free or realloc reported")
        elif mode == "perl":
            if shutil.which("perl") is None:
                print("SKIP: perl is not installed")
                sys.exit(77)
            # 400 strings of 250,000 bytes: Perl_sv_grow -> Perl_safesysmalloc -> malloc
            out, _ = run(["perl", "-e", 'my @a; push @a, "x" x 250000 for 1..400; print scalar(@a), "\\n";'],
                         env, tmp)
            files = [f for f in os.listdir(tmp) if f.startswith("heap.")]
            if len(files) != 1:
                fail("expected one profile, found %s" % files)
            path = os.path.join(tmp, files[0])
            prof = decode(path)
            sums = by_site(prof)
            top = max(sums, key=lambda k: sums[k][1])
            if top != "Perl_safesysmalloc":
                fail("top allocation site %s, expected Perl_safesysmalloc (%s)" % (top, sums))
            callers = set()
            for locs, vals in prof["samples"]:
                if locs and frame_names(prof, locs[0])[:1] == [top]:
                    for l in locs[1:3]:
                        callers.update(frame_names(prof, l))
            if "Perl_sv_grow" not in callers:
                fail("Perl_sv_grow is not among the top site's callers: %s" % callers)
            close(sums[top][1], 400 * 250000, "perl's strings, alloc_space")
            go_top(path, "Perl_safesysmalloc")
        elif mode in ("launcher", "svg"):
            # `hakmem profile`: pprof's top list (launcher), inferno's flame
            # graph (svg), and a clear error when either tool is missing
            launcher = os.path.abspath(sys.argv[4])
            out, _ = run([workload, "sites"], env, tmp)
            path = [os.path.join(tmp, f) for f in os.listdir(tmp) if f.startswith("heap.")][0]
            go, inferno = shutil.which("go"), shutil.which("inferno-flamegraph")
            sh = shutil.which("sh")
            if mode == "launcher":
                # a PATH with the launcher's own tools only: no go
                tools = os.path.join(tmp, "tools")
                os.mkdir(tools)
                for t in ("basename", "dirname", "readlink", "awk"):
                    if shutil.which(t):
                        os.symlink(shutil.which(t), os.path.join(tools, t))
                r = subprocess.run([sh, launcher, "profile", path], env=dict(os.environ, PATH=tools),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
                if r.returncode != 1 or b"needs 'go tool pprof'" not in r.stderr:
                    fail("without go: exit %d, %r" % (r.returncode, r.stderr))
                print("ok without go: " + r.stderr.decode().strip())
                if go is None:
                    print("SKIP: go is not installed (Debian: golang-go): the top list was not made")
                    sys.exit(77)
                # (the workload has more sites: the list is cut at two rows)
                r = subprocess.run([sh, launcher, "profile", path, "--top", "2"], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, timeout=300)
                top = r.stdout.decode(errors="replace")
                lines = top.splitlines()
                head = next((i for i, l in enumerate(lines) if l.split()[:2] == ["flat", "flat%"]), len(lines))
                rows = [l for l in lines[head + 1:] if l.strip()]
                if r.returncode != 0 or len(rows) != 2 or "site_big" not in rows[0]:
                    fail("hakmem profile --top 2: not two rows, site_big first:\n%s%s" % (top, r.stderr.decode()))
                print("ok hakmem profile --top 2: " + rows[0].strip())
                os.symlink(go, os.path.join(tools, "go"))
                r = subprocess.run([sh, launcher, "profile", path, "--svg", os.path.join(tmp, "f.svg")],
                                   env=dict(os.environ, PATH=tools), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   timeout=300)
                if r.returncode != 1 or b"needs inferno-flamegraph" not in r.stderr:
                    fail("without inferno: exit %d, %r" % (r.returncode, r.stderr))
                print("ok without inferno: " + r.stderr.decode().strip())
            else:
                if go is None or inferno is None:
                    print("SKIP: %s not installed: no flame graph drawn" % " and ".join(
                        n for n, t in (("go", go), ("inferno-flamegraph (cargo install inferno)", inferno)) if t is None))
                    sys.exit(77)
                svg = os.path.join(tmp, "flame.svg")
                r = subprocess.run([sh, launcher, "profile", path, "--top", "1", "--svg", svg],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
                with open(svg) as f:
                    text = f.read()
                # inferno's frames: <title>name (N bytes, P%)</title>
                m = re.search(r"<title>site_big \(([\d,]+) bytes, ([\d.]+)%\)</title>", text)
                if r.returncode != 0 or "<svg" not in text or m is None or float(m.group(2)) < 30:
                    fail("hakmem profile --svg: no flame graph with site_big's frame: %s" % r.stderr.decode())
                print("ok hakmem profile --svg: site_big %s bytes, %s%%" % m.groups())
        else:
            fail("unknown mode " + mode)
        print("PASS", mode)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
