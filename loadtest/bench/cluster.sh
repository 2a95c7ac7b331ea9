#!/usr/bin/env bash
# Ingest figures of an RF=3 cluster on this machine: 3 ingesters, 2 distributors and 1 querier joined by gossip,
# all on 127.0.0.1. Two `heddle-loadtest push` runs go through the two distributors at once (half the series
# each, `CONCURRENCY` requests in flight each), then `verify` reads everything back through the querier.
# Prints samples/s (acknowledged samples over the wall time of both pushes) and the CPU seconds of all six
# heddle processes per million acknowledged samples (each sample is stored three times). Everything is stopped
# at exit. Run loadtest/bench/single-process.sh with the same SERIES and ROUNDS right after it to compare.
#
#   cargo build --release -p heddle -p heddle-loadtest -p heddlectl
#   SERIES=40000 ROUNDS=10 loadtest/bench/cluster.sh
#
# BIN (default target/release, or $CARGO_TARGET_DIR/release) must hold heddle and heddle-loadtest; with
# heddlectl there too, the script waits until both distributors see 3 ACTIVE ingesters (else it waits 3 s).
set -euo pipefail
SERIES=${SERIES:-40000}
ROUNDS=${ROUNDS:-10}
BATCH=${BATCH:-2000}
# Per pusher; two pushers run at once, so the default matches single-process.sh's 4 requests in flight.
CONCURRENCY=${CONCURRENCY:-2}
BIN=${BIN:-${CARGO_TARGET_DIR:-target}/release}
# The per-tenant ingestion rate limit (Mimir's default 10k samples/s) would measure the limiter, not heddle.
LIMITS=${LIMITS:---distributor.ingestion-rate-limit=100000000 --distributor.ingestion-burst-size=100000000}
HZ=$(getconf CLK_TCK)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
free_udp_port() {
    python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
cpu_s() { awk -v hz="$HZ" '{printf "%.3f", ($14+$15)/hz}' "/proc/$1/stat"; }
sum_cpu() { local t=0; for p in "$@"; do t=$(python3 -c "print($t + $(cpu_s "$p"))"); done; echo "$t"; }

dir=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$dir"
}
trap cleanup EXIT

join_port=$(free_udp_port)
common=(--memberlist.bind-addr=127.0.0.1 "--memberlist.join=127.0.0.1:$join_port"
    --ingester.ring.replication-factor=3 --ingester.ring.heartbeat-period=1s --ingester.ring.heartbeat-timeout=10s
    "--blocks-storage.filesystem.dir=$dir/bucket" --log.level=warn $LIMITS)
declare -A http grpc
# start NAME TARGET GOSSIP_PORT [ARGS...]: one heddle in $dir/NAME.
start() {
    local name=$1 target=$2 gossip=$3
    shift 3
    http[$name]=$(free_port)
    grpc[$name]=$(free_port)
    mkdir -p "$dir/$name"
    "$BIN/heddle" "--target=$target" --server.http-listen-address=127.0.0.1 "--server.http-listen-port=${http[$name]}" \
        --server.grpc-listen-address=127.0.0.1 "--server.grpc-listen-port=${grpc[$name]}" \
        "--memberlist.bind-port=$gossip" "--blocks-storage.bucket-store.sync-dir=$dir/$name/tsdb-sync" \
        "${common[@]}" "$@" 2>"$dir/$name/heddle.log" &
    pids+=($!)
}
for i in 0 1 2; do
    gossip=$join_port
    [ "$i" = 0 ] || gossip=$(free_udp_port)
    start "ingester-$i" ingester "$gossip" "--blocks-storage.tsdb.dir=$dir/ingester-$i/tsdb" \
        "--ingester.ring.instance-id=ingester-$i" --ingester.ring.instance-addr=127.0.0.1 \
        "--ingester.ring.tokens-file-path=$dir/ingester-$i/tokens.json"
done
ingester_pids=("${pids[@]}")
start distributor-0 distributor "$(free_udp_port)"
start distributor-1 distributor "$(free_udp_port)"
start querier querier "$(free_udp_port)"

for name in "${!http[@]}"; do
    ok=0
    for _ in $(seq 300); do
        if curl -sf "http://127.0.0.1:${http[$name]}/ready" >/dev/null; then ok=1; break; fi
        sleep 0.1
    done
    [ "$ok" = 1 ] || { echo "$name not ready; log:" >&2; tail -20 "$dir/$name/heddle.log" >&2; exit 1; }
done
if [ -x "$BIN/heddlectl" ]; then
    for d in distributor-0 distributor-1; do
        for _ in $(seq 100); do
            n=$("$BIN/heddlectl" "--addr=127.0.0.1:${grpc[$d]}" ring | grep -c ' ACTIVE ' || true)
            [ "$n" = 3 ] && break
            sleep 0.1
        done
        [ "$n" = 3 ] || { echo "$d sees $n ACTIVE ingesters, want 3" >&2; exit 1; }
    done
else
    sleep 3
fi
sleep 1

half=$((SERIES / 2))
cpu0=$(sum_cpu "${pids[@]}")
ing0=$(sum_cpu "${ingester_pids[@]}")
t0=$(date +%s.%N)
for d in 0 1; do
    "$BIN/heddle-loadtest" push --url "http://127.0.0.1:${http[distributor-$d]}/api/v1/push" --series "$half" \
        --rounds "$ROUNDS" --job "node-$d" --batch-size "$BATCH" --concurrency "$CONCURRENCY" --progress-s 0 \
        >"$dir/push-$d.json" &
    pushers[$d]=$!
done
wait "${pushers[0]}" "${pushers[1]}"
t1=$(date +%s.%N)
cpu1=$(sum_cpu "${pids[@]}")
ing1=$(sum_cpu "${ingester_pids[@]}")
for d in 0 1; do
    start_ms=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["start_ms"])' "$dir/push-$d.json")
    "$BIN/heddle-loadtest" verify --read-url "http://127.0.0.1:${http[querier]}/prometheus" --series "$half" \
        --rounds "$ROUNDS" --job "node-$d" --start-ms "$start_ms" >"$dir/verify-$d.json"
done
python3 - "$dir" "$SERIES" "$t0" "$t1" "$cpu0" "$cpu1" "$ing0" "$ing1" <<'PY'
import json, sys
d = sys.argv[1]
series = int(sys.argv[2])
t0, t1, cpu0, cpu1, ing0, ing1 = map(float, sys.argv[3:9])
push = [json.load(open(f"{d}/push-{i}.json")) for i in (0, 1)]
verify = [json.load(open(f"{d}/verify-{i}.json")) for i in (0, 1)]
samples = sum(p["samples_acknowledged"] for p in push)
wall = t1 - t0
cpu = cpu1 - cpu0
print(json.dumps({
    "topology": "3 ingesters (RF 3), 2 distributors, 1 querier",
    "series": series,
    "samples_acknowledged": samples,
    "errors": sum(p["errors"] for p in push),
    "retries": sum(p["retries"] for p in push),
    "wall_s": round(wall, 3),
    "samples_per_second": round(samples / wall),
    "push_latency_ms": {f"distributor-{i}": p["latency_ms"] for i, p in enumerate(push)},
    "heddle_cpu_seconds": round(cpu, 3),
    "ingesters_cpu_seconds": round(ing1 - ing0, 3),
    "cpu_seconds_per_million_samples": round(cpu / samples * 1e6, 3),
    "verified": all(v["verified"] for v in verify),
}, indent=2))
PY
