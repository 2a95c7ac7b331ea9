#!/usr/bin/env bash
# Peak RSS of a single-process heddle under a flood of maximum-size degenerate pushes (series of empty
# labels), for one or more heddle binaries side by side. See loadtest/src/bin/push-flood.rs.
#
#   cargo build --release -p heddle -p heddle-loadtest
#   BEFORE=/path/to/older/heddle loadtest/bench/push-flood.sh
#
# BIN (default target/release, or $CARGO_TARGET_DIR/release) must hold both binaries of this tree.
set -euo pipefail
BIN=${BIN:-${CARGO_TARGET_DIR:-target}/release}
CLIENTS=${CLIENTS:-8}
SECS=${SECS:-30}
COMPRESSED_MIB=${COMPRESSED_MIB:-1.9}
MAX_RSS_MIB=${MAX_RSS_MIB:-8192}
set -- --heddle "current=$BIN/heddle"
if [ -n "${BEFORE:-}" ]; then set -- --heddle "before=$BEFORE" "$@"; fi
exec "$BIN/push-flood" "$@" --clients "$CLIENTS" --secs "$SECS" --compressed-mib "$COMPRESSED_MIB" \
    --max-rss-mib "$MAX_RSS_MIB"
