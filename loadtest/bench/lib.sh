# Shared by the bench scripts (sourced): free ports, and a single-process heddle on 127.0.0.1.

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Starts "$BIN/heddle" with its data in directory $1 and the flags in $LIMITS, logging to $1/heddle.log; sets
# `pid` and `hp` (its HTTP port) and returns once it is ready. The caller stops it.
start_heddle() {
    local dir=$1 gp
    hp=$(free_port); gp=$(free_port)
    # shellcheck disable=SC2086 # LIMITS is a list of flags
    "$BIN/heddle" --server.http-listen-address=127.0.0.1 --server.http-listen-port="$hp" \
        --server.grpc-listen-address=127.0.0.1 --server.grpc-listen-port="$gp" \
        --blocks-storage.tsdb.dir="$dir/tsdb" --blocks-storage.filesystem.dir="$dir/blocks" \
        --blocks-storage.bucket-store.sync-dir="$dir/tsdb-sync" --log.level=warn \
        $LIMITS 2>"$dir/heddle.log" &
    pid=$!
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$hp/ready" >/dev/null && break; sleep 0.1; done
}
