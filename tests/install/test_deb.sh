#!/usr/bin/env bash
# `make deb`, then the package the way a user of Debian 12 takes it:
#   apt-get install ./hakmem_<version>_<arch>.deb, the files dpkg lists (all
#   under /usr, the library in the multiarch libdir with its soname known to
#   ldconfig), `hakmem run -- true` and a program preloaded by it, a C program
#   built with pkg-config and with CMake find_package(hakmem) from the system
#   paths alone, then `apt-get purge hakmem`, which must leave none of it
#   (a plain remove would leave dpkg's record of the maintainer scripts).
#
#   test_deb.sh SOURCE_DIR(top) WORK_DIR [CC]
#
# Installing into /usr needs root and dpkg/apt-get: without them the test is
# skipped (exit 77). It is skipped too when hakmem's files are already on the
# system (a package or `make install PREFIX=/usr`): it does not replace them.
# One run at a time per machine (flock), whichever tree it comes from; the
# package is purged on every exit, and a run killed before that (a ctest
# timeout) is cleaned up by the next one (MARKER).
set -euo pipefail

SRC=${1:?usage: $0 SOURCE_DIR WORK_DIR [CC]}
WORK=${2:?usage: $0 SOURCE_DIR WORK_DIR [CC]}
CC=${3:-${CC:-cc}}
PKG=hakmem
MARKER=/var/tmp/hakmem-deb-test.installed

fail() { echo "FAIL [deb]: $*" >&2; exit 1; }
skip() { echo "SKIP [deb]: $*"; exit 77; }
step() { echo "== $*"; }

[ "$(id -u)" = 0 ] || skip "not root: installing a package into /usr needs root"
for t in dpkg dpkg-deb dpkg-query apt-get flock; do
  command -v "$t" >/dev/null 2>&1 || skip "$t not found: not a Debian-like system"
done
command -v cpack >/dev/null 2>&1 || skip "cpack not found (it comes with cmake)"

unset LD_PRELOAD LD_LIBRARY_PATH PKG_CONFIG_PATH CMAKE_PREFIX_PATH \
      HAKMEM_FORCE_LIBC_ALLOC MAKEFLAGS MFLAGS MAKELEVEL || true
export DEBIAN_FRONTEND=noninteractive
APT=(apt-get -y -q -o DPkg::Lock::Timeout=300)

lockdir=/run/lock
[ -d "$lockdir" ] && [ -w "$lockdir" ] || lockdir=/tmp
exec 9>"$lockdir/hakmem-deb-test.lock"
flock -w 600 9 || fail "another run of this test held $lockdir/hakmem-deb-test.lock for 10 minutes"

state() { dpkg-query -W -f='${db:Status-Status}' "$PKG" 2>/dev/null || true; }
installed() { [ "$(state)" = installed ]; }
known() { case "$(state)" in ""|not-installed) return 1 ;; esac; }

if installed; then
  if [ -e "$MARKER" ]; then
    echo "purging the $PKG package an earlier run of this test left installed"
    dpkg --purge "$PKG" >/dev/null || fail "cannot purge the $PKG package left by an earlier run"
    rm -f "$MARKER"
  else
    skip "a $PKG package is already installed on this system; not replacing it"
  fi
fi
if known; then
  # half-installed, config-files, ...: purged only if this test left it
  [ -e "$MARKER" ] || skip "a $PKG package is in dpkg state '$(state)'; not touching it"
  dpkg --purge "$PKG" >/dev/null || fail "cannot purge $PKG (state '$(state)')"
  rm -f "$MARKER"
fi

MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || "$CC" -print-multiarch)
ARCH=$(dpkg --print-architecture)
LIBDIR=/usr/lib/$MULTIARCH
FILES=(/usr/include/hakmem.h "$LIBDIR/libhakmem.so" "$LIBDIR/libhakmem.so.0" "$LIBDIR/libhakmem.a"
       "$LIBDIR/pkgconfig/hakmem.pc" "$LIBDIR/cmake/hakmem/hakmemConfig.cmake"
       "$LIBDIR/cmake/hakmem/hakmemConfigVersion.cmake" "$LIBDIR/cmake/hakmem/hakmemTargets.cmake"
       /usr/bin/hakmem /usr/libexec/hakmem/hakmem-options)
for f in "${FILES[@]}"; do
  [ ! -e "$f" ] || skip "$f is already on this system (not from this test); not replacing it"
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/hakmem_deb_XXXXXX")
cleanup() {
  rc=$?
  if known; then
    echo "purging the $PKG package (exit status $rc)"
    "${APT[@]}" purge "$PKG" >/dev/null 2>&1 || dpkg --purge "$PKG" >/dev/null 2>&1 || true
  fi
  known || rm -f "$MARKER"
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# ---------------------------------------------------------------- build
step "make deb DEB_BUILD=$WORK"
rm -rf "$WORK"
make -C "$SRC" deb DEB_BUILD="$WORK" JOBS=2 >"$TMP/make.log" 2>&1 \
  || { cat "$TMP/make.log" >&2; fail "make deb failed"; }
debs=("$WORK"/hakmem_*.deb)
[ ${#debs[@]} = 1 ] && [ -f "${debs[0]}" ] || fail "make deb made no single $WORK/hakmem_*.deb: ${debs[*]}"
DEB=${debs[0]}
ver=$(sed -n 's/^project(hakmem VERSION \([0-9.]*\).*/\1/p' "$SRC/CMakeLists.txt")
[ "$(basename "$DEB")" = "hakmem_${ver}_${ARCH}.deb" ] || fail "package file name $(basename "$DEB"), expected hakmem_${ver}_${ARCH}.deb"
field() { dpkg-deb -f "$DEB" "$1"; }
[ "$(field Package)" = hakmem ] || fail "Package: $(field Package)"
[ "$(field Version)" = "$ver" ] || fail "Version: $(field Version), expected $ver"
[ "$(field Architecture)" = "$ARCH" ] || fail "Architecture: $(field Architecture), expected $ARCH"
[ "$(field Section)" = libs ] || fail "Section: $(field Section)"
case "$(field Depends)" in libc6*) ;; *) fail "Depends: '$(field Depends)', expected libc6 (...)" ;; esac
[ -n "$(field Maintainer)" ] && [ -n "$(field Description)" ] || fail "no Maintainer or Description"
dpkg-deb -c "$DEB" | awk '{print $6}' >"$TMP/contents"
if grep -v '^\./usr/' "$TMP/contents" | grep -v '^\./$' >"$TMP/outside"; then
  fail "files outside /usr in the package: $(cat "$TMP/outside")"
fi

# ---------------------------------------------------------------- install
step "apt-get install ./$(basename "$DEB")"
touch "$MARKER"
(cd "$(dirname "$DEB")" && "${APT[@]}" install "./$(basename "$DEB")") >"$TMP/install.log" 2>&1 \
  || { cat "$TMP/install.log" >&2; fail "apt-get install ./$(basename "$DEB") failed"; }
installed || fail "dpkg does not list $PKG as installed after apt-get install"

for f in "${FILES[@]}"; do
  [ -e "$f" ] || fail "$f was not installed"
done
[ -L "$LIBDIR/libhakmem.so" ] || fail "$LIBDIR/libhakmem.so is not a symlink"
soname=$(readelf -d "$LIBDIR/libhakmem.so.0" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = libhakmem.so.0 ] || fail "SONAME of the installed library is '$soname'"
# (outputs are captured before grep: under pipefail a grep -q that stops
# reading early fails the pipeline through the writer's SIGPIPE)
cache=$(ldconfig -p)
grep -q "libhakmem.so.0 .*=> .*$MULTIARCH/libhakmem.so.0" <<<"$cache" \
  || fail "ldconfig's cache does not know libhakmem.so.0"
dpkg -L "$PKG" >"$TMP/listed"
if grep -v '^/usr' "$TMP/listed" | grep -v '^/\.$' >"$TMP/outside"; then
  fail "dpkg -L $PKG lists paths outside /usr: $(cat "$TMP/outside")"
fi

# ---------------------------------------------------------------- launcher
step "hakmem run"
[ "$(command -v hakmem)" = /usr/bin/hakmem ] || fail "hakmem on PATH is '$(command -v hakmem || true)'"
hakmem run -- true || fail "hakmem run -- true failed"
[ "$(hakmem version)" = "hakmem $ver" ] || fail "hakmem version printed '$(hakmem version)'"
"$CC" -O2 -o "$TMP/usable_size" "$SRC/tests/install/usable_size.c" || fail "building usable_size.c failed"
plain=$("$TMP/usable_size")
[ "$plain" != 112 ] || fail "usable_size prints 112 without hakmem; the check proves nothing"
got=$(hakmem run -- "$TMP/usable_size") || fail "hakmem run -- usable_size failed"
[ "$got" = 112 ] || fail "under hakmem run malloc_usable_size(malloc(100)) = $got, expected 112"
case "$(hakmem run -- sh -c 'printf %s "$LD_PRELOAD"')" in
  "$LIBDIR/libhakmem.so.0") ;; *) fail "hakmem run does not preload $LIBDIR/libhakmem.so.0" ;; esac
opts=$(hakmem options) || fail "'hakmem options' failed"
grep -q '^HAKMEM_STATS ' <<<"$opts" || fail "'hakmem options' does not list HAKMEM_STATS"

# ---------------------------------------------------------------- consumers
step "pkg-config consumer"
flags=$(pkg-config --cflags --libs hakmem) || fail "pkg-config --cflags --libs hakmem failed"
[ "$(pkg-config --variable=libdir hakmem)" = "$LIBDIR" ] || fail "pkg-config libdir: $(pkg-config --variable=libdir hakmem)"
# shellcheck disable=SC2086
"$CC" -O2 -fno-builtin-malloc -fno-builtin-free -o "$TMP/consumer_pc" \
  "$SRC/tests/install/consumer.c" $flags || fail "building consumer.c with '$flags' failed"
out=$("$TMP/consumer_pc") || fail "consumer_pc failed: $out"
[ "$out" = OK ] || fail "consumer_pc printed '$out'"
ldd_out=$(ldd "$TMP/consumer_pc")
case "$ldd_out" in *"libhakmem.so.0 => "*"$MULTIARCH/libhakmem.so.0"*) ;;
  *) fail "consumer_pc does not load the system's libhakmem.so.0: $ldd_out" ;; esac

step "CMake find_package(hakmem) consumer"
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
cmake -S "$SRC/tests/install/consumer_cmake" -B "$TMP/cmake_build" "${gen[@]}" \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_BUILD_TYPE=Release >"$TMP/cmake.log" 2>&1 \
  && cmake --build "$TMP/cmake_build" >>"$TMP/cmake.log" 2>&1 \
  || { cat "$TMP/cmake.log" >&2; fail "the CMake consumer did not build against the package"; }
grep -q "^hakmem_DIR:PATH=$LIBDIR/cmake/hakmem$" "$TMP/cmake_build/CMakeCache.txt" \
  || fail "find_package(hakmem) found $(grep '^hakmem_DIR' "$TMP/cmake_build/CMakeCache.txt")"
for c in consumer_shared consumer_static; do
  out=$("$TMP/cmake_build/$c") || fail "$c failed: $out"
  [ "$out" = OK ] || fail "$c printed '$out'"
done

# ---------------------------------------------------------------- purge
step "apt-get purge $PKG"
"${APT[@]}" purge "$PKG" >"$TMP/remove.log" 2>&1 \
  || { cat "$TMP/remove.log" >&2; fail "apt-get purge $PKG failed"; }
! known || fail "dpkg still knows $PKG after apt-get purge (state '$(state)')"
rm -f "$MARKER"
for f in "${FILES[@]}"; do
  [ ! -e "$f" ] && [ ! -L "$f" ] || fail "$f is still there after apt-get purge"
done
cache=$(ldconfig -p)
case "$cache" in *libhakmem.so.0*) fail "ldconfig's cache still has libhakmem.so.0 after removal" ;; esac
echo "deb: OK ($(basename "$DEB"), $(wc -l <"$TMP/listed") paths)"
