#!/usr/bin/env bash
# The Rust crate as published: scripts/rust_crate.sh package makes the .crate
# (the C sources vendored into c_src/), which must hold the current src/ and
# include/ and no `publish = false`; unpacked into a temporary directory far
# from the repository, it is the path dependency of a consumer program built
# offline, which runs with hakmem as its global allocator.
#
#   test_rust_package.sh SOURCE_DIR(top) WORK_DIR
#
# CARGO picks the cargo to use (tests/rust/cargo_env.sh).
set -euo pipefail

SRC=${1:?usage: $0 SOURCE_DIR WORK_DIR}
WORK=${2:?usage: $0 SOURCE_DIR WORK_DIR}
CRATE=$SRC/bindings/rust
# shellcheck source=cargo_env.sh
. "$(dirname "$0")/cargo_env.sh"
hak_cargo_env "$CRATE"

fail() { echo "FAIL [rust_package]: $*" >&2; exit 1; }
step() { echo "== $*"; }

rm -rf "$WORK"
mkdir -p "$WORK"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/hakmem_rustpkg_XXXXXX")
trap 'rm -rf "$TMP"' EXIT
# build.rs compiles every src/*.c but override.c: the list CMake compiles.
sed -n '/^set(HAKMEM_SOURCES/,/)/p' "$SRC/CMakeLists.txt" | grep -o 'src/[A-Za-z0-9_]*\.c' | sort >"$TMP/cmake-list" || true
(cd "$SRC" && ls src/*.c | grep -v '^src/override\.c$' | sort) >"$TMP/glob-list"
diff "$TMP/cmake-list" "$TMP/glob-list" >"$TMP/diff" \
  || fail "src/*.c (but override.c), which build.rs compiles, differs from CMake's HAKMEM_SOURCES: $(cat "$TMP/diff")"
if [ "$CARGO_OLD" = 0 ]; then
  # a newer cargo builds offline from its own cache: fill it (a no-op when
  # cc is there already)
  "$CARGO" fetch --locked --manifest-path "$CRATE/Cargo.toml" >"$TMP/fetch.log" 2>&1 \
    || { cat "$TMP/fetch.log" >&2; fail "cargo fetch failed"; }
fi

step "scripts/rust_crate.sh package"
# --no-verify: building the packaged crate is what the consumer below does
STAGE="$WORK/stage" CARGO="$CARGO" "$SRC/scripts/rust_crate.sh" package --locked --offline \
  --no-verify --target-dir "$WORK/target" "${CARGO_SOURCE_ARGS[@]}" >"$TMP/package.log" 2>&1 \
  || { cat "$TMP/package.log" >&2; fail "scripts/rust_crate.sh package failed"; }
ver=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$CRATE/Cargo.toml" | head -n1)
CRATEFILE=$WORK/target/package/hakmem-$ver.crate
[ -f "$CRATEFILE" ] || fail "no $CRATEFILE"
echo "$CRATEFILE: $(wc -c <"$CRATEFILE") bytes"

# Everything in src/ and include/ is in c_src/, byte for byte.
mkdir "$TMP/unpacked"
tar -C "$TMP/unpacked" -xzf "$CRATEFILE" || fail "cannot unpack $CRATEFILE"
PKG=$TMP/unpacked/hakmem-$ver
[ -d "$PKG" ] || fail "$CRATEFILE has no hakmem-$ver/"
for d in src include; do
  (cd "$SRC/$d" && find . -type f | sort) >"$TMP/want"
  (cd "$PKG/c_src/$d" 2>/dev/null && find . -type f | sort) >"$TMP/got" || true
  diff "$TMP/want" "$TMP/got" >"$TMP/diff" || fail "c_src/$d differs from $d/ in its files: $(cat "$TMP/diff")"
  diff -r "$SRC/$d" "$PKG/c_src/$d" >/dev/null || fail "c_src/$d is not a copy of $d/"
done
! grep -q '^publish *= *false' "$PKG/Cargo.toml" || fail "the packaged Cargo.toml says publish = false"
[ ! -e "$PKG/../../include/hakmem.h" ] || fail "$PKG/../../include/hakmem.h exists: the build could use it"

step "consumer with the unpacked crate as its path dependency, offline"
mkdir -p "$TMP/consumer/src"
cat >"$TMP/consumer/Cargo.toml" <<EOF
[package]
name = "hakmem-consumer"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
hakmem = { path = "$PKG" }

[workspace]
EOF
cat >"$TMP/consumer/src/main.rs" <<'EOF'
use std::collections::HashMap;

#[global_allocator]
static GLOBAL: hakmem::HakMem = hakmem::HakMem;

fn main() {
    let b = Box::new([7u8; 100]);
    // 112 is hakmem's class for 100 bytes; usable_size aborts on a pointer
    // hakmem did not allocate.
    let us = unsafe { hakmem::usable_size(b.as_ptr()) };
    let m: HashMap<u32, String> = (0..10_000).map(|i| (i, i.to_string())).collect();
    assert_eq!(m[&9_999], "9999");
    println!("usable_size={}", us);
}
EOF
"$CARGO" "${CARGO_SOURCE_ARGS[@]}" build --offline --release \
  --manifest-path "$TMP/consumer/Cargo.toml" --target-dir "$TMP/consumer-target" >"$TMP/build.log" 2>&1 \
  || { cat "$TMP/build.log" >&2; fail "the consumer did not build against the packaged crate"; }
grep -q "Compiling hakmem v$ver ($PKG)" "$TMP/build.log" || fail "hakmem was not built from $PKG: $(cat "$TMP/build.log")"
out=$("$TMP/consumer-target/release/hakmem-consumer") || fail "the consumer failed: $out"
[ "$out" = "usable_size=112" ] || fail "the consumer printed '$out', expected usable_size=112"
echo "rust_package: OK"
