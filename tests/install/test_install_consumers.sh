#!/usr/bin/env bash
# Install the built tree into a temporary prefix, then use it the way an
# outside project would:
#   - a C program built with `pkg-config --cflags --libs hakmem`;
#   - the same program built with CMake find_package(hakmem), once against
#     hakmem::hakmem (shared) and once against hakmem::hakmem_static;
#   - the installed `hakmem run` launcher preloading the library into a
#     program built without hakmem; `hakmem run --stats`; `hakmem options`.
# consumer.c checks usable_size(malloc(100)) == 112 (hakmem's class size).
#
#   test_install_consumers.sh BUILD_DIR SOURCE_DIR(tests/install) [CC]
set -euo pipefail

BUILD=${1:?usage: $0 BUILD_DIR SOURCE_DIR [CC]}
SRC=${2:?usage: $0 BUILD_DIR SOURCE_DIR [CC]}
CC=${3:-${CC:-cc}}

fail() { echo "FAIL [install_consumers]: $*" >&2; exit 1; }
step() { echo "== $*"; }

command -v pkg-config >/dev/null 2>&1 || fail "pkg-config is not installed (apt-get install pkg-config)"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/hakmem_install_XXXXXX")
trap 'rm -rf "$WORK"' EXIT
PREFIX="$WORK/prefix"
unset LD_PRELOAD HAKMEM_FORCE_LIBC_ALLOC || true

step "cmake --install $BUILD --prefix $PREFIX"
cmake --install "$BUILD" --prefix "$PREFIX" >"$WORK/install.log" 2>&1 \
  || { cat "$WORK/install.log" >&2; fail "cmake --install failed"; }
for f in include/hakmem.h lib/libhakmem.so lib/libhakmem.so.0 lib/libhakmem.a \
         lib/pkgconfig/hakmem.pc lib/cmake/hakmem/hakmemConfig.cmake \
         lib/cmake/hakmem/hakmemConfigVersion.cmake bin/hakmem libexec/hakmem/hakmem-options; do
  [ -e "$PREFIX/$f" ] || fail "$f was not installed"
done
[ -L "$PREFIX/lib/libhakmem.so" ] || fail "lib/libhakmem.so is not a symlink"
[ -x "$PREFIX/bin/hakmem" ] || fail "bin/hakmem is not executable"
if grep -q hakmem_obj "$PREFIX"/lib/cmake/hakmem/*.cmake; then
  fail "hakmem_obj leaked into the CMake export"
fi

# ---------------------------------------------------------------- pkg-config
step "pkg-config"
export PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig"
flags=$(pkg-config --cflags --libs hakmem) || fail "pkg-config --cflags --libs hakmem failed"
echo "pkg-config --cflags --libs hakmem: $flags"
case " $flags " in *" -I$PREFIX/include "*) ;; *) fail "Cflags lack -I$PREFIX/include: $flags" ;; esac
case " $flags " in *" -L$PREFIX/lib "*) ;; *) fail "Libs lack -L$PREFIX/lib: $flags" ;; esac
static_flags=$(pkg-config --static --libs hakmem)
case " $static_flags " in *" -lpthread "*) ;; *) fail "Libs.private lack -lpthread: $static_flags" ;; esac
[ "$(pkg-config --modversion hakmem)" = "$(sed -n 's/^Version: //p' "$PREFIX/lib/pkgconfig/hakmem.pc")" ] \
  || fail "pkg-config --modversion disagrees with hakmem.pc"
# shellcheck disable=SC2086
"$CC" -O2 -fno-builtin-malloc -fno-builtin-free -o "$WORK/consumer_pc" "$SRC/consumer.c" $flags \
  || fail "building consumer.c with pkg-config flags failed"
out=$(LD_LIBRARY_PATH="$PREFIX/lib" "$WORK/consumer_pc") || fail "consumer_pc failed: $out"
[ "$out" = OK ] || fail "consumer_pc printed '$out'"
ldd_out=$(LD_LIBRARY_PATH="$PREFIX/lib" ldd "$WORK/consumer_pc")
case "$ldd_out" in *"$PREFIX/lib/libhakmem.so.0"*) ;; *) fail "consumer_pc does not load the installed libhakmem.so.0: $ldd_out" ;; esac
unset PKG_CONFIG_PATH

# ---------------------------------------------------------------- CMake
step "CMake find_package(hakmem)"
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
cmake -S "$SRC/consumer_cmake" -B "$WORK/cmake_build" "${gen[@]}" \
  -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_C_COMPILER="$CC" -DCMAKE_BUILD_TYPE=Release \
  >"$WORK/cmake.log" 2>&1 || { cat "$WORK/cmake.log" >&2; fail "configuring the CMake consumer failed"; }
cmake --build "$WORK/cmake_build" >>"$WORK/cmake.log" 2>&1 \
  || { cat "$WORK/cmake.log" >&2; fail "building the CMake consumer failed"; }
# The shared one must find the installed library through its RUNPATH
# (CMake sets it for imported targets), without LD_LIBRARY_PATH.
out=$("$WORK/cmake_build/consumer_shared") || fail "consumer_shared failed: $out"
[ "$out" = OK ] || fail "consumer_shared printed '$out'"
# ldd's output is captured first: `ldd | grep -q` under pipefail fails
# whenever grep exits before ldd has written everything (SIGPIPE).
ldd_out=$(ldd "$WORK/cmake_build/consumer_shared")
case "$ldd_out" in *"$PREFIX/lib/libhakmem.so.0"*) ;; *) fail "consumer_shared does not load the installed libhakmem.so.0: $ldd_out" ;; esac
out=$("$WORK/cmake_build/consumer_static") || fail "consumer_static failed: $out"
[ "$out" = OK ] || fail "consumer_static printed '$out'"
ldd_out=$(ldd "$WORK/cmake_build/consumer_static" 2>&1 || true)
case "$ldd_out" in *libhakmem*) fail "consumer_static links libhakmem.so dynamically: $ldd_out" ;; esac

# ---------------------------------------------------------------- launcher
step "hakmem launcher"
HK="$PREFIX/bin/hakmem"
"$CC" -O2 -o "$WORK/usable_size" "$SRC/usable_size.c" || fail "building usable_size.c failed"
plain=$("$WORK/usable_size")
[ "$plain" != 112 ] || fail "usable_size already prints 112 without hakmem; the check proves nothing"
under=$("$HK" run -- "$WORK/usable_size") || fail "hakmem run failed"
[ "$under" = 112 ] || fail "under 'hakmem run' malloc_usable_size(malloc(100)) = $under, expected 112"
# without "--" too
under=$("$HK" run "$WORK/usable_size") || fail "hakmem run (no --) failed"
[ "$under" = 112 ] || fail "hakmem run without --: got $under"

# LD_PRELOAD: prepended to an existing value, which is kept.
got=$(LD_PRELOAD=libfoo_nonexistent.so "$HK" run -- sh -c 'printf %s "$LD_PRELOAD"' 2>/dev/null)
case "$got" in
  */libhakmem.so*:libfoo_nonexistent.so) ;;
  *) fail "LD_PRELOAD under hakmem run is '$got', expected <libhakmem>:libfoo_nonexistent.so" ;;
esac

# --option NAME=VALUE sets the variable; values may contain '=' and spaces.
got=$("$HK" run --option HAKMEM_TEST_A=1 --option 'HAKMEM_TEST_B=x=y z' -- \
      sh -c 'printf "%s|%s" "$HAKMEM_TEST_A" "$HAKMEM_TEST_B"')
[ "$got" = "1|x=y z" ] || fail "--option values not passed: '$got'"
# ...and the library sees it: HAKMEM_FORCE_LIBC_ALLOC=1 forwards to glibc.
got=$("$HK" run --option HAKMEM_FORCE_LIBC_ALLOC=1 -- "$WORK/usable_size")
[ "$got" = "$plain" ] || fail "HAKMEM_FORCE_LIBC_ALLOC=1 via --option: got $got, expected glibc's $plain"

# Names not starting with HAKMEM_ are rejected with exit 2 and a message.
set +e
err=$("$HK" run --option PATH=/nowhere -- true 2>&1); rc=$?
set -e
[ $rc -eq 2 ] || fail "--option PATH=... exited $rc, expected 2"
case "$err" in *HAKMEM_*) ;; *) fail "--option PATH=... gave no clear error: '$err'" ;; esac

# --stats: HAKMEM_STATS=1 for the program, whose report comes at exit.
got=$("$HK" run --stats -- sh -c 'printf %s "$HAKMEM_STATS"' 2>/dev/null)
[ "$got" = 1 ] || fail "hakmem run --stats: HAKMEM_STATS='$got', expected 1"
"$HK" run --stats -- "$WORK/usable_size" >/dev/null 2>"$WORK/stats.err" || fail "hakmem run --stats failed"
grep -q '^hakmem statistics (pid ' "$WORK/stats.err" || fail "no report at exit under --stats: $(cat "$WORK/stats.err")"
grep -q '^direct (<=1 KiB) ' "$WORK/stats.err" || fail "the report has no direct lane line: $(cat "$WORK/stats.err")"

# options: one line per row of src/options.def, from the library itself.
DEF="$SRC/../../src/options.def"
names=$(sed -n 's/^HM_OPTION(\([A-Z0-9_]*\),.*/HAKMEM_\1/p' "$DEF")
[ -n "$names" ] || fail "no HM_OPTION rows found in $DEF"
"$HK" options >"$WORK/opt.out" 2>"$WORK/opt.err" || fail "'hakmem options' failed: $(cat "$WORK/opt.err")"
[ ! -s "$WORK/opt.err" ] || fail "'hakmem options' wrote to stderr: $(cat "$WORK/opt.err")"
head -n1 "$WORK/opt.out" | grep -q '^OPTION  *DEFAULT  *CURRENT  *MEANING$' \
  || fail "'hakmem options' header: $(head -n1 "$WORK/opt.out")"
[ "$(wc -l <"$WORK/opt.out")" -eq $(( $(printf '%s\n' "$names" | wc -l) + 1 )) ] \
  || fail "'hakmem options' printed $(wc -l <"$WORK/opt.out") lines for $(printf '%s\n' "$names" | wc -l) options"
for n in $names; do
  grep -q "^$n " "$WORK/opt.out" || fail "'hakmem options' lacks $n"
done
# --tsv: NAME, default, current, meaning; the current value follows the environment.
"$HK" options --tsv >"$WORK/opt.tsv" || fail "'hakmem options --tsv' failed"
line=$(grep '^HAKMEM_STATS	' "$WORK/opt.tsv") || fail "--tsv lacks HAKMEM_STATS"
[ "$(printf '%s' "$line" | cut -f2,3)" = "0	0" ] || fail "HAKMEM_STATS default/current: '$line'"
line=$(HAKMEM_STATS=1 "$HK" options --tsv 2>/dev/null | grep '^HAKMEM_STATS	')
[ "$(printf '%s' "$line" | cut -f2,3)" = "0	1" ] || fail "with HAKMEM_STATS=1 set: '$line'"
# A bad value: the library's one warning line, and the default stays.
line=$(HAKMEM_VERBOSE=maybe "$HK" options --tsv 2>"$WORK/bad.err" | grep '^HAKMEM_VERBOSE	')
[ "$(printf '%s' "$line" | cut -f3)" = 0 ] || fail "HAKMEM_VERBOSE=maybe: current is not the default: '$line'"
[ "$(cat "$WORK/bad.err")" = "hakmem: warning: ignoring HAKMEM_VERBOSE=maybe (must be 0 or 1); using the default" ] \
  || fail "HAKMEM_VERBOSE=maybe: stderr was '$(cat "$WORK/bad.err")'"

help_out=$("$HK" --help)
case "$help_out" in *"hakmem run"*) ;; *) false ;; esac || fail "hakmem --help does not describe 'run'"
ver=$("$HK" version)
want=$(sed -n 's/^Version: //p' "$PREFIX/lib/pkgconfig/hakmem.pc")
[ "$ver" = "hakmem $want" ] || fail "hakmem version printed '$ver', expected 'hakmem $want'"

echo "install_consumers: OK"
