#!/usr/bin/env bash
# `cargo test` for the Rust crate (bindings/rust): it compiles hakmem's C
# sources itself and its tests run programs that use hakmem as their
# #[global_allocator].
#
#   test_rust_crate.sh CRATE_DIR TARGET_DIR
#
# CARGO picks the cargo to use (tests/rust/cargo_env.sh).
set -euo pipefail

CRATE=${1:?usage: $0 CRATE_DIR TARGET_DIR}
TARGET=${2:?usage: $0 CRATE_DIR TARGET_DIR}
# shellcheck source=cargo_env.sh
. "$(dirname "$0")/cargo_env.sh"
hak_cargo_env "$CRATE"
exec "$CARGO" "${CARGO_SOURCE_ARGS[@]}" test --locked --manifest-path "$CRATE/Cargo.toml" --target-dir "$TARGET"
