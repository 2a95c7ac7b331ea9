#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (default 60 s each), starting from the checked-in seed corpus.
# Needs a nightly toolchain and cargo-fuzz: `rustup toolchain install nightly && cargo install cargo-fuzz`.
# Usage: fuzz/run.sh [seconds-per-target] [target...]
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo +nightly fuzz list)
fi
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  # A copy of the seeds: libFuzzer adds what it finds to the first corpus directory.
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  echo "== $t for ${secs}s"
  cargo +nightly fuzz run -O "$t" "$work" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536
  rm -rf "$work"
done
