#!/usr/bin/env bash
# PromQL query cost of a single-process heddle beside Prometheus 2.42 holding the same data, in one run.
#
# Both get the same remote-write pushes: RANGE_SERIES series (job "range") over the last 1 h 58 min at 15 s, and
# INSTANT_SERIES series (job "instant") over 10 minutes. Then each query runs REPEAT times against each, turn
# about, and the script prints per query and server the median wall time and the peak RSS growth while the
# query ran (RSS sampled every 10 ms, over the RSS just before it). Everything runs on 127.0.0.1 and is
# stopped at exit.
#
#   cargo build --release -p heddle -p heddle-loadtest
#   loadtest/bench/promql.sh                      # 10k x 2 h range, 100k-series instant
#
# BIN (default target/release, or $CARGO_TARGET_DIR/release) must hold both binaries; PROMETHEUS the
# Prometheus binary (default /usr/bin/prometheus).
set -euo pipefail
RANGE_SERIES=${RANGE_SERIES:-10000}
INSTANT_SERIES=${INSTANT_SERIES:-100000}
REPEAT=${REPEAT:-3}
BIN=${BIN:-${CARGO_TARGET_DIR:-target}/release}
PROMETHEUS=${PROMETHEUS:-/usr/bin/prometheus}
LIMITS=${LIMITS:---distributor.ingestion-rate-limit=100000000 --distributor.ingestion-burst-size=100000000}

# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

dir=$(mktemp -d)
pid=
ppid_=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; [ -n "$ppid_" ] && kill "$ppid_" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT

start_heddle "$dir"
pp=$(free_port)
"$PROMETHEUS" --config.file=/dev/null --storage.tsdb.path="$dir/prom" --web.listen-address="127.0.0.1:$pp" \
    --web.enable-remote-write-receiver --query.max-samples=100000000 --log.level=warn 2>"$dir/prom.log" &
ppid_=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$pp/-/ready" >/dev/null && break; sleep 0.1; done

now_ms=$(( $(date +%s) * 1000 ))
# An empty head takes samples up to one block range (2 h) old: the range data starts just inside it.
range_start=$(( (now_ms - 118 * 60 * 1000) / 15000 * 15000 ))
instant_start=$(( (now_ms - 10 * 60 * 1000) / 15000 * 15000 ))
push() { # url series rounds start job
    "$BIN/heddle-loadtest" push --url "$1" --series "$2" --metrics 1 --rounds "$3" --start-ms "$4" --job "$5" \
        --batch-size 2000 --concurrency 4 --progress-s 0 >/dev/null
}
for url in "http://127.0.0.1:$hp/api/v1/push" "http://127.0.0.1:$pp/api/v1/write"; do
    push "$url" "$RANGE_SERIES" 472 "$range_start" range
    push "$url" "$INSTANT_SERIES" 40 "$instant_start" instant
done

python3 - "$hp" "$pid" "$pp" "$ppid_" "$range_start" "$((instant_start + 39 * 15000))" "$REPEAT" <<'PY'
import json, statistics, sys, threading, time, urllib.parse, urllib.request
hp, hpid, pp, ppid, range_start, instant_t, repeat = sys.argv[1:8]
range_start, instant_t, repeat = int(range_start) / 1000, int(instant_t) / 1000, int(repeat)
servers = [("heddle", f"http://127.0.0.1:{hp}/prometheus", hpid), ("prometheus", f"http://127.0.0.1:{pp}", ppid)]
queries = [
    ("range: rate over 10k series x 2 h, step 15 s", "query_range",
     {"query": 'rate(node_cpu_seconds_total{job="range"}[5m])', "start": range_start,
      "end": range_start + 7200, "step": 15}),
    ("range: sum by (mode) over 10k series x 2 h, step 15 s", "query_range",
     {"query": 'sum by (mode) (rate(node_cpu_seconds_total{job="range"}[5m]))', "start": range_start,
      "end": range_start + 7200, "step": 15}),
    ("instant: sum by (job) (rate(x[5m])) over 100k series", "query",
     {"query": 'sum by (job) (rate(node_cpu_seconds_total{job="instant"}[5m]))', "time": instant_t}),
]

def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) * 1024
    return 0

def run(base, pid, endpoint, params):
    before, peak, done = rss(pid), 0, threading.Event()
    def sample():
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss(pid))
            time.sleep(0.01)
    t = threading.Thread(target=sample); t.start()
    started = time.monotonic()
    body = urllib.request.urlopen(f"{base}/api/v1/{endpoint}", urllib.parse.urlencode(params).encode(), timeout=600).read()
    elapsed = time.monotonic() - started
    done.set(); t.join()
    data = json.loads(body)
    assert data["status"] == "success", data
    points = sum(len(s.get("values", [1])) for s in data["data"]["result"])
    return elapsed, max(peak - before, 0), len(data["data"]["result"]), points

report = []
for name, endpoint, params in queries:
    results = {s[0]: [] for s in servers}
    shape = {}
    for _ in range(repeat):
        for server, base, pid in servers:
            elapsed, grew, series, points = run(base, pid, endpoint, params)
            results[server].append((elapsed, grew))
            shape[server] = (series, points)
    assert shape["heddle"] == shape["prometheus"], (name, shape)
    row = {"query": name, "series": shape["heddle"][0], "points": shape["heddle"][1]}
    for server in results:
        row[f"{server}_seconds"] = round(statistics.median(e for e, _ in results[server]), 3)
        row[f"{server}_rss_growth_mib"] = round(max(g for _, g in results[server]) / 2**20, 1)
    row["time_ratio_heddle_to_prometheus"] = round(row["heddle_seconds"] / row["prometheus_seconds"], 2)
    report.append(row)
print(json.dumps(report, indent=2))
PY
