#!/usr/bin/env bash
# The Rust crate as it is published: a copy of bindings/rust with hakmem's C
# sources vendored into c_src/, on which cargo runs the command given.
#   scripts/rust_crate.sh package [cargo args]   # the .crate in $STAGE/target/package/
#   scripts/rust_crate.sh publish [--dry-run]
# The copy ($STAGE, default bindings/rust/target/publish, git-ignored) is
# made afresh on every run from the whole src/ and include/ directories, so
# it follows files added, renamed or removed there; build.rs compiles every
# c_src/src/*.c but override.c. CARGO picks the cargo to run.
set -euo pipefail

[ $# -ge 1 ] || { sed -n '2,9s/^# \{0,1\}//p' "$0" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
crate=$root/bindings/rust
stage=${STAGE:-$crate/target/publish}
case "$stage" in /*) ;; *) stage=$PWD/$stage ;; esac

rm -rf "$stage"
mkdir -p "$stage/c_src"
tar -C "$crate" --exclude=./target --exclude=./c_src -cf - . | tar -C "$stage" -xf -
cp -R "$root/src" "$root/include" "$stage/c_src/"
cmd=$1
shift
"${CARGO:-cargo}" "$cmd" --manifest-path "$stage/Cargo.toml" "$@"
