# Sourced by the Rust crate's tests: CARGO (default: the one on PATH) and
# CARGO_SOURCE_ARGS, the options every cargo command of theirs takes.
# Cargo older than 1.68 (Debian 12's is 1.65) can reach crates.io only
# through its git index; for those the pinned cc crate comes from Debian's
# librust-cc-dev package (a directory source), offline. Exits 77 (skip)
# without cargo.
#   hak_cargo_env CRATE_DIR
hak_cargo_env() {
  local crate=$1 debian=/usr/share/cargo/registry ver minor cc_ver
  CARGO=${CARGO:-cargo}
  CARGO_SOURCE_ARGS=()
  CARGO_OLD=0
  if ! command -v "$CARGO" >/dev/null 2>&1; then
    echo "SKIP: $CARGO not found (apt-get install cargo librust-cc-dev)"
    exit 77
  fi
  ver=$("$CARGO" --version | awk '{print $2}')
  echo "$("$CARGO" --version), $("${RUSTC:-rustc}" --version 2>/dev/null || echo "rustc ?")"
  minor=$(printf '%s' "$ver" | cut -d. -f2)
  if [ "$(printf '%s' "$ver" | cut -d. -f1)" = 1 ] && [ "$minor" -lt 68 ]; then
    cc_ver=$(sed -n 's/^cc = "=\(.*\)"$/\1/p' "$crate/Cargo.toml")
    if [ ! -d "$debian/cc-$cc_ver" ]; then
      echo "FAIL: cargo $ver cannot fetch crates from crates.io; install librust-cc-dev (cc $cc_ver) or a newer cargo" >&2
      exit 1
    fi
    CARGO_OLD=1
    CARGO_SOURCE_ARGS=(--config 'source.crates-io.replace-with="debian"'
                       --config "source.debian.directory=\"$debian\"" --offline)
  fi
  # The crate's tests must not inherit options meant for the test suite.
  for v in $(env | sed -n 's/^\(HAKMEM_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
}
