#!/usr/bin/env bash
# Ingest figures of a single-process heddle on this machine: samples/s, heddle CPU seconds per million
# samples, RSS per active series, and the idle baseline. Everything runs on 127.0.0.1 and is stopped at exit.
#
#   cargo build --release -p heddle -p heddle-loadtest
#   SERIES=100000 ROUNDS=10 loadtest/bench/single-process.sh
#   PROTOCOL=rw2 SERIES=100000 ROUNDS=10 loadtest/bench/single-process.sh    # remote write 2.0 instead of 1.0
#   PROTOCOL=otlp SERIES=100000 ROUNDS=10 loadtest/bench/single-process.sh   # OTLP/HTTP protobuf, gzip
#   HEDDLE_CPUS=1 LOADTEST_CPUS=0 ...    # pin each to its own CPUs (taskset -c), so the load generator's own
#                                        # work (which differs by protocol) does not share heddle's CPU
#
# BIN (default target/release, or $CARGO_TARGET_DIR/release) must hold both binaries.
set -euo pipefail
SERIES=${SERIES:-100000}
ROUNDS=${ROUNDS:-10}
BATCH=${BATCH:-2000}
CONCURRENCY=${CONCURRENCY:-4}
PROTOCOL=${PROTOCOL:-rw1}
HEDDLE_CPUS=${HEDDLE_CPUS:-}
LOADTEST_CPUS=${LOADTEST_CPUS:-}
BIN=${BIN:-${CARGO_TARGET_DIR:-target}/release}
# The per-tenant ingestion rate limit (Mimir's default 10k samples/s) would measure the limiter, not heddle.
LIMITS=${LIMITS:---distributor.ingestion-rate-limit=100000000 --distributor.ingestion-burst-size=100000000}
HZ=$(getconf CLK_TCK)

# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cpu_s() { awk -v hz="$HZ" '{printf "%.3f", ($14+$15)/hz}' "/proc/$1/stat"; }
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
start_heddle "$dir"
[ -n "$HEDDLE_CPUS" ] && taskset -a -p -c "$HEDDLE_CPUS" "$pid" >/dev/null
loadtest=("$BIN/heddle-loadtest")
[ -n "$LOADTEST_CPUS" ] && loadtest=(taskset -c "$LOADTEST_CPUS" "$BIN/heddle-loadtest")
sleep 1
idle_rss=$(rss_kib "$pid")
cpu0=$(cpu_s "$pid")
path=/api/v1/push
[ "$PROTOCOL" = otlp ] && path=/otlp/v1/metrics
"${loadtest[@]}" push --url "http://127.0.0.1:$hp$path" --series "$SERIES" --rounds "$ROUNDS" \
    --batch-size "$BATCH" --concurrency "$CONCURRENCY" --protocol "$PROTOCOL" --progress-s 0 >"$dir/push.json"
cpu1=$(cpu_s "$pid")
loaded_rss=$(rss_kib "$pid")
start_ms=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["start_ms"])' "$dir/push.json")
"$BIN/heddle-loadtest" verify --read-url "http://127.0.0.1:$hp/prometheus" --series "$SERIES" --rounds "$ROUNDS" \
    --start-ms "$start_ms" >"$dir/verify.json"
wal_bytes=$(du -sb "$dir/tsdb" | cut -f1)
python3 - "$dir/push.json" "$dir/verify.json" "$idle_rss" "$loaded_rss" "$cpu0" "$cpu1" "$SERIES" "$wal_bytes" "$PROTOCOL" <<'PY'
import json, sys
push, verify = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
idle, loaded, cpu0, cpu1, series, wal = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8])
samples = push["samples_acknowledged"]
print(json.dumps({
    "protocol": sys.argv[9],
    "series": series,
    "samples_acknowledged": samples,
    "samples_per_second": round(push["samples_per_second"]),
    "wire_bytes_per_sample": round(push["wire_bytes_per_sample"], 2),
    "push_latency_ms": push["latency_ms"],
    "heddle_cpu_seconds": round(cpu1 - cpu0, 3),
    "cpu_seconds_per_million_samples": round((cpu1 - cpu0) / samples * 1e6, 3),
    "idle_rss_mib": round(idle / 1024, 1),
    "loaded_rss_mib": round(loaded / 1024, 1),
    "rss_bytes_per_active_series": round((loaded - idle) * 1024 / series),
    "tsdb_dir_bytes_per_sample": round(wal / samples, 2),
    "verified": verify["verified"],
}, indent=2))
PY
