#!/usr/bin/env bash
# A CPU profile of a single-process heddle under the push workload of single-process.sh: `perf record`
# (cpu-clock, DWARF call graphs) attached for the whole push, then a flat top list and, when inferno is
# installed (`cargo install inferno`), a flame graph SVG. Everything runs on 127.0.0.1 and is stopped at exit.
#
#   cargo build --release -p heddle -p heddle-loadtest
#   SERIES=100000 ROUNDS=20 OUT=out/profile loadtest/bench/profile.sh
#   PROTOCOL=rw2 ...   # or otlp: the protocol heddle-loadtest push sends (default rw1)
#
# OUT receives perf.data, top.txt (self time per symbol) and, with inferno, flame.svg.
set -euo pipefail
SERIES=${SERIES:-100000}
ROUNDS=${ROUNDS:-20}
BATCH=${BATCH:-2000}
CONCURRENCY=${CONCURRENCY:-4}
PROTOCOL=${PROTOCOL:-rw1}
FREQ=${FREQ:-499}
OUT=${OUT:-out/profile}
BIN=${BIN:-${CARGO_TARGET_DIR:-target}/release}
LIMITS=${LIMITS:---distributor.ingestion-rate-limit=100000000 --distributor.ingestion-burst-size=100000000}

# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

mkdir -p "$OUT"
dir=$(mktemp -d)
perf_pid=
pid=
cleanup() {
    [ -n "$perf_pid" ] && kill -INT "$perf_pid" 2>/dev/null && wait "$perf_pid" 2>/dev/null
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
start_heddle "$dir"
sleep 1
perf record -q -e cpu-clock -F "$FREQ" ${CALL_GRAPH---call-graph dwarf,32768} -p "$pid" -o "$OUT/perf.data" 2>"$OUT/perf-record.log" &
perf_pid=$!
sleep 1
path=/api/v1/push
[ "$PROTOCOL" = otlp ] && path=/otlp/v1/metrics
"$BIN/heddle-loadtest" push --url "http://127.0.0.1:$hp$path" --series "$SERIES" --rounds "$ROUNDS" \
    --batch-size "$BATCH" --concurrency "$CONCURRENCY" --protocol "$PROTOCOL" --progress-s 0 >"$OUT/push.json"
kill -INT "$perf_pid"; wait "$perf_pid" || true; perf_pid=
perf report -i "$OUT/perf.data" --no-children --sort symbol --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' \
    | grep -E '^ +[0-9]' | head -60 >"$OUT/top.txt" || true  # head closes the pipe early
if command -v inferno-collapse-perf >/dev/null; then
    perf script -i "$OUT/perf.data" 2>/dev/null | inferno-collapse-perf >"$OUT/folded.txt"
    inferno-flamegraph --minwidth 2 --title "heddle single process, $SERIES series x $ROUNDS rounds" <"$OUT/folded.txt" >"$OUT/flame.svg"
fi
cat "$OUT/top.txt" | head -40
