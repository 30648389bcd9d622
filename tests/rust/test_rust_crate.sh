#!/usr/bin/env bash
# `cargo test` for the Rust crate (bindings/rust): it compiles hakmem's C
# sources itself and its tests run programs that use hakmem as their
# #[global_allocator].
#
#   test_rust_crate.sh CRATE_DIR TARGET_DIR
#
# CARGO picks the cargo to use (default: the one on PATH). Cargo older than
# 1.68 (Debian 12's is 1.65) can reach crates.io only through its git index;
# for those the pinned cc crate comes from Debian's librust-cc-dev package
# (a directory source), offline.
set -euo pipefail

CRATE=${1:?usage: $0 CRATE_DIR TARGET_DIR}
TARGET=${2:?usage: $0 CRATE_DIR TARGET_DIR}
CARGO=${CARGO:-cargo}
DEBIAN_REGISTRY=/usr/share/cargo/registry

if ! command -v "$CARGO" >/dev/null 2>&1; then
  echo "SKIP: $CARGO not found (apt-get install cargo librust-cc-dev)"
  exit 77
fi
ver=$("$CARGO" --version | awk '{print $2}')
echo "$("$CARGO" --version), $("${RUSTC:-rustc}" --version 2>/dev/null || echo "rustc ?")"

args=(test --locked --manifest-path "$CRATE/Cargo.toml" --target-dir "$TARGET")
minor=$(printf '%s' "$ver" | cut -d. -f2)
if [ "$(printf '%s' "$ver" | cut -d. -f1)" = 1 ] && [ "$minor" -lt 68 ]; then
  cc_ver=$(sed -n 's/^cc = "=\(.*\)"$/\1/p' "$CRATE/Cargo.toml")
  if [ ! -d "$DEBIAN_REGISTRY/cc-$cc_ver" ]; then
    echo "FAIL: cargo $ver cannot fetch crates from crates.io; install librust-cc-dev (cc $cc_ver) or a newer cargo" >&2
    exit 1
  fi
  args=(--config 'source.crates-io.replace-with="debian"'
        --config "source.debian.directory=\"$DEBIAN_REGISTRY\"" "${args[@]}" --offline)
fi
# The crate's tests must not inherit options meant for the test suite.
for v in $(env | sed -n 's/^\(HAKMEM_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
exec "$CARGO" "${args[@]}"
