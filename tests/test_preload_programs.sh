#!/usr/bin/env bash
# Real programs under LD_PRELOAD=libhakmem.so must give byte-identical
# stdout, stderr and exit status to plain runs.
#
#   test_preload_programs.sh LIBHAKMEM PROGRAM [CXX_WORKLOAD]
# PROGRAM: python | python_json | perl | sort | gzip | git | cxx | cxx_force_libc
# Exit 77 (ctest SKIP_RETURN_CODE) only when the program is not installed.
set -euo pipefail

LIB=${1:?usage: $0 LIBHAKMEM PROGRAM [CXX_WORKLOAD]}
PROG=${2:?usage: $0 LIBHAKMEM PROGRAM [CXX_WORKLOAD]}
CXXW=${3:-}

fail() { echo "FAIL [preload $PROG]: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || { echo "SKIP: $1 is not installed"; exit 77; }; }

case "$LIB" in /*) ;; *) LIB="$PWD/$LIB" ;; esac
[ -f "$LIB" ] || fail "library $LIB does not exist"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/hakmem_preload_${PROG}_XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export LC_ALL=C TZ=UTC HOME="$WORK/home" PYTHONHASHSEED=0
mkdir -p "$HOME"
# deterministic git
export GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=Test GIT_AUTHOR_EMAIL=test@example.com \
  GIT_COMMITTER_NAME=Test GIT_COMMITTER_EMAIL=test@example.com \
  GIT_AUTHOR_DATE='2024-01-01T00:00:00Z' GIT_COMMITTER_DATE='2024-01-01T00:00:00Z'
export WORK CXXW

# ---------------------------------------------------------------- workloads
wl_python() {
  cat > "$WORK/py_workload.py" <<'EOF'
import json, hashlib, threading, collections, re
N = 60000
d = {str(i): [i] * (i % 9) for i in range(N)}
s = json.dumps(d, sort_keys=True)
back = json.loads(s)
assert back == d
print("json", len(s), hashlib.sha256(s.encode()).hexdigest())
rows = [{"id": i, "name": "n%07d" % ((i * 7919) % N), "tags": [str(j) for j in range(i % 5)]} for i in range(N)]
rows.sort(key=lambda r: (r["name"], -r["id"]))
print("sorted", rows[0]["id"], rows[-1]["id"], sum(len(r["tags"]) for r in rows))
words = collections.Counter(re.findall(r"[a-z]+", " ".join("w%s x%s" % (chr(97 + i % 26), chr(97 + i % 7)) for i in range(N))))
print("counter", len(words), words.most_common(3))
results = [None] * 4
def work(k):
    acc = {}
    for i in range(30000):
        acc[(k, i % 5000)] = "v" * (i % 100)
        if i % 3 == 0:
            acc.pop((k, (i * 7) % 5000), None)
    results[k] = sum(len(v) for v in acc.values())
ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
[t.start() for t in ts]
[t.join() for t in ts]
print("threads", results)
big = bytearray(8 << 20)
big[-1] = 7
print("big", len(big), big[-1], len(bytes(big).replace(b"\0", b"")))
EOF
  python3 "$WORK/py_workload.py"
}
wl_python_json() {
  python3 -c 'import json;d={str(i):[i]*(i%9) for i in range(60000)};print(len(json.dumps(d)))'
}
wl_perl() {
  perl -e '
    use strict; use warnings;
    my %h; my @a;
    for my $i (0 .. 199999) {
      my $k = sprintf("key%06d", ($i * 7919) % 200000);
      $h{$k} .= chr(97 + $i % 26);
      push @a, $k if $i % 3 == 0;
      delete $h{sprintf("key%06d", ($i * 31) % 200000)} if $i % 11 == 0;
    }
    my @sorted = sort { $h{$a} cmp $h{$b} or $a cmp $b } keys %h;
    my $text = join " ", map { "$_=$h{$_}" } @sorted[0 .. 4999];
    my @m = ($text =~ /key(\d+)=([a-z]+)/g);
    (my $t2 = $text) =~ s/(\d)(\d)/$2$1/g;
    my %count; $count{length $_}++ for values %h;
    print scalar(keys %h), " ", scalar(@a), " ", scalar(@m), " ", length($t2), "\n";
    print join(",", map { "$_:$count{$_}" } sort { $a <=> $b } keys %count), "\n";
    print "$sorted[0] $sorted[-1]\n";
    my $s = "x" x 5_000_000; $s =~ s/x{1000}/y/g; print length($s), "\n";
  '
}
gen_data() { # deterministic multi-MB text file, generated without the preload
  awk 'BEGIN { x = 12345; for (i = 0; i < 300000; i++) { x = (x * 1103515245 + 12345) % 2147483648;
       printf "%d %s line%d %x\n", x % 1000003, substr("abcdefghijklmnopqrstuvwxyz", x % 26 + 1, 5), i, x } }' \
    > "$WORK/data.txt"
}
wl_sort() {
  local f="$WORK/data.txt"
  sort "$f" | sha256sum
  sort -n -k1,1 -k3,3 "$f" | sha256sum
  sort -S 1M -T "$WORK" "$f" | sha256sum          # small buffer: temporary files and merges
  sort --parallel=2 -S 64M -k2,2 -k1,1n "$f" | sha256sum
  sort -u -k2,2 "$f" | wc -l
  sort -r -o "$WORK/rev.txt" "$f"
  head -3 "$WORK/rev.txt"
  rm -f "$WORK/rev.txt"
}
wl_gzip() {
  local f="$WORK/data.txt"
  sha256sum < "$f"
  gzip -n -c "$f" | sha256sum
  gzip -n -9 -c "$f" > "$WORK/d.gz"
  sha256sum < "$WORK/d.gz"
  gzip -dc "$WORK/d.gz" | sha256sum
  gzip -n -1 -c "$f" | gzip -dc | cmp - "$f" && echo roundtrip-ok
  gzip -t "$WORK/d.gz" && echo test-ok
  rm -f "$WORK/d.gz"
}
wl_git() {
  local r="$WORK/run/repo"
  git init -q -b main "$r"
  cd "$r"
  git config gc.auto 0
  git config pack.threads 1
  for c in 1 2 3 4 5; do
    for i in $(seq 1 60); do
      printf 'file %d commit %d\n%s\n' "$i" "$c" "$(seq "$i" $((i * c + 50)) | tr '\n' ' ')" > "f$i.txt"
    done
    mkdir -p "dir$c" && seq 1 $((c * 2000)) > "dir$c/numbers.txt"
    git add -A
    git commit -q -m "commit $c"
  done
  git log --stat --format='%H %s' | sha256sum
  git log --oneline | wc -l
  git diff HEAD~3 HEAD --stat | tail -1
  git -c pack.threads=1 gc -q
  git count-objects -v | grep -E '^(count|in-pack|packs):'
  git fsck --no-progress 2>&1 | sort
  git rev-list --all --objects | wc -l
  git cat-file -p HEAD^{tree} | sha256sum
  git blame -s f7.txt | sha256sum
}
wl_cxx() { "$CXXW" 40; }
export -f wl_python wl_python_json wl_perl wl_sort wl_gzip wl_git wl_cxx

# ---------------------------------------------------------------- runner
# run_once LABEL FUNCTION [ENV...]: runs in a fresh $WORK/run (same path in
# both modes so that paths in the output agree).
run_once() {
  local label=$1 fn=$2
  shift 2
  rm -rf "$WORK/run"
  mkdir -p "$WORK/run"
  local rc=0
  (cd "$WORK/run" && env "$@" bash -c "set -eo pipefail; $fn") >"$WORK/$label.out" 2>"$WORK/$label.err" || rc=$?
  echo "$rc" >"$WORK/$label.rc"
}

compare() {
  local fn=$1
  shift
  run_once plain "$fn"
  [ "$(cat "$WORK/plain.rc")" = 0 ] || {
    cat "$WORK/plain.err" >&2
    fail "$fn fails even without the preload (status $(cat "$WORK/plain.rc")): broken test environment"
  }
  run_once preload "$fn" LD_PRELOAD="$LIB" "$@"
  local ok=1
  if [ "$(cat "$WORK/plain.rc")" != "$(cat "$WORK/preload.rc")" ]; then
    echo "exit status: plain $(cat "$WORK/plain.rc"), preloaded $(cat "$WORK/preload.rc")" >&2
    ok=0
  fi
  if ! cmp -s "$WORK/plain.out" "$WORK/preload.out"; then
    echo "stdout differs (plain vs LD_PRELOAD):" >&2
    diff "$WORK/plain.out" "$WORK/preload.out" | head -40 >&2 || true
    ok=0
  fi
  if ! cmp -s "$WORK/plain.err" "$WORK/preload.err"; then
    echo "stderr differs (plain vs LD_PRELOAD):" >&2
    diff "$WORK/plain.err" "$WORK/preload.err" | head -40 >&2 || true
    ok=0
  fi
  [ $ok = 1 ] || fail "$fn under LD_PRELOAD=$LIB $* differs from the plain run"
  echo "preload $PROG ($fn $*): identical output ($(wc -c <"$WORK/plain.out") bytes stdout), status $(cat "$WORK/plain.rc")"
  head -5 "$WORK/plain.out"
}

# The preload must really be in effect: malloc(100) has hakmem's class size
# (112), or glibc's (as in a plain run) with HAKMEM_FORCE_LIBC_ALLOC=1.
USABLE_PY='
import ctypes
l = ctypes.CDLL(None)
l.malloc.restype = ctypes.c_void_p
l.malloc.argtypes = [ctypes.c_size_t]
l.malloc_usable_size.restype = ctypes.c_size_t
l.malloc_usable_size.argtypes = [ctypes.c_void_p]
print(l.malloc_usable_size(l.malloc(100)))'
check_effective() {
  [ "${HAKMEM_TEST_SHIM:-0}" = 1 ] && return 0
  command -v python3 >/dev/null 2>&1 || return 0
  local got want=112
  if [ "${1:-}" = HAKMEM_FORCE_LIBC_ALLOC=1 ]; then
    want=$(python3 -c "$USABLE_PY") || fail "python3 failed"
    [ "$want" != 112 ] || fail "glibc's usable size for malloc(100) is 112 too: cannot tell the allocators apart"
  fi
  got=$(env LD_PRELOAD="$LIB" "$@" python3 -c "$USABLE_PY") || fail "python3 under LD_PRELOAD failed"
  [ "$got" = "$want" ] || fail "under LD_PRELOAD=$LIB $* malloc_usable_size(malloc(100)) = $got, expected $want"
}
case "$PROG" in
  python) need python3; check_effective; compare wl_python ;;
  python_json) need python3; compare wl_python_json ;;
  perl) need perl; compare wl_perl ;;
  sort) need sort; need awk; need sha256sum; gen_data; compare wl_sort ;;
  gzip) need gzip; need awk; need sha256sum; gen_data; compare wl_gzip ;;
  git) need git; need sha256sum; compare wl_git ;;
  cxx)
    [ -x "$CXXW" ] || fail "cxx_workload binary missing: '$CXXW'"
    check_effective
    compare wl_cxx ;;
  cxx_force_libc)
    [ -x "$CXXW" ] || fail "cxx_workload binary missing: '$CXXW'"
    check_effective HAKMEM_FORCE_LIBC_ALLOC=1
    compare wl_cxx HAKMEM_FORCE_LIBC_ALLOC=1 ;;
  *) fail "unknown program '$PROG'" ;;
esac
