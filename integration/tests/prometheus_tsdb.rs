//! Heddle reads a TSDB directory written by Prometheus itself. Prometheus 2.42 receives a deterministic workload
//! over remote write and is stopped; its `wal/` and `chunks_head/` become tenant directories of heddle, which
//! must replay them and serve every sample bit for bit, then keep appending after them and survive a crash.
//!
//! Cases cover both WAL compression settings of Prometheus and two run lengths: fewer than 120 samples per series
//! (everything still in the WAL and the open head chunk) and 400 samples per series (Prometheus has memory-mapped
//! full chunks into `chunks_head/`; the WAL still holds every sample because nothing was compacted). Two cases
//! also carry the chunk snapshot Prometheus writes on shutdown with `memory-snapshot-on-shutdown`.
//!
//! Needs `/usr/bin/prometheus` (Debian package `prometheus`; `PROMETHEUS_BIN` overrides the path). Without it the
//! test is skipped with a message, unless `CI` is set, in which case a missing Prometheus fails the test.

use heddle_testkit::{
    DEFAULT_STOP_TIMEOUT, HeddleOptions, HeddleProcess, ManagedProcess, copy_dir, free_port, prometheus_tool,
    run_loadtest,
};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const SERIES: usize = 200;
const METRICS: usize = 10;
const INTERVAL_MS: i64 = 15_000;
/// Rounds heddle appends to each Prometheus-written tenant after replaying it.
const EXTRA_ROUNDS: u32 = 40;
/// Chunk ranges of Prometheus' head: a chunk never crosses a multiple of it.
const BLOCK_RANGE_MS: i64 = 2 * 60 * 60 * 1000;
const RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// WAL page size and record header size (type, length, CRC32C).
const WAL_PAGE: usize = 32 * 1024;
const WAL_RECORD_HEADER: usize = 7;

/// One Prometheus data directory fixture, served by heddle as tenant `tenant`.
#[derive(Debug, Clone, Copy)]
struct Case {
    tenant: &'static str,
    /// `--storage.tsdb.wal-compression` (snappy) on or off.
    compression: bool,
    /// Samples per series pushed to Prometheus.
    rounds: u32,
    /// `--enable-feature=memory-snapshot-on-shutdown`: Prometheus leaves a `chunk_snapshot.*` directory.
    snapshot: bool,
    seed: u64,
}

const CASES: [Case; 4] = [
    Case {
        tenant: "prom-wal-snappy",
        compression: true,
        rounds: 100,
        snapshot: false,
        seed: 11,
    },
    Case {
        tenant: "prom-wal-plain",
        compression: false,
        rounds: 100,
        snapshot: true,
        seed: 12,
    },
    Case {
        tenant: "prom-mmap-snappy",
        compression: true,
        rounds: 400,
        snapshot: true,
        seed: 13,
    },
    Case {
        tenant: "prom-mmap-plain",
        compression: false,
        rounds: 400,
        snapshot: false,
        seed: 14,
    },
];

/// The generation flags of a dataset: `rounds` rounds from `start_ms`, labelled `job=<tenant>`.
fn gen_flags(case: &Case, start_ms: i64, rounds: u32) -> Vec<String> {
    vec![
        format!("--series={SERIES}"),
        format!("--metrics={METRICS}"),
        format!("--rounds={rounds}"),
        format!("--interval-ms={INTERVAL_MS}"),
        format!("--start-ms={start_ms}"),
        format!("--seed={}", case.seed),
        format!("--job={}", case.tenant),
    ]
}

/// Pushes a dataset with `heddle-loadtest push` and asserts that every sample was acknowledged.
fn push(url: &str, tenant: Option<&str>, flags: &[String], what: &str, logs: &dyn Fn() -> String) {
    let mut args = vec!["push".to_owned(), format!("--url={url}")];
    args.extend(flags.iter().cloned());
    args.extend(tenant.map(|t| format!("--tenant={t}")));
    args.extend(["--batch-size=500", "--concurrency=1", "--progress-s=0"].map(String::from));
    let out = run_loadtest(&args, RUN_TIMEOUT).unwrap_or_else(|e| panic!("{what}: heddle-loadtest push: {e}"));
    let summary: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{what}: push printed no JSON ({e}): {}\n{}", out.stdout, out.stderr));
    assert!(
        out.status.success() && summary["errors"] == 0,
        "{what}: push failed: {summary}\n{}\n{}",
        out.stderr,
        logs()
    );
}

/// Runs `heddle-loadtest verify` against heddle and asserts that it found exactly the dataset.
fn verify(h: &HeddleProcess, tenant: &str, flags: &[String], rounds: u32, mode: &str, what: &str) {
    let mut args = vec![
        "verify".to_owned(),
        format!("--read-url={}", h.prometheus_url()),
        format!("--tenant={tenant}"),
        format!("--mode={mode}"),
    ];
    args.extend(flags.iter().cloned());
    let out = run_loadtest(&args, RUN_TIMEOUT).unwrap_or_else(|e| panic!("{what}: heddle-loadtest verify: {e}"));
    let report: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{what}: verify printed no JSON ({e}): {}\n{}", out.stdout, out.stderr));
    let want = SERIES as u64 * u64::from(rounds);
    assert!(
        report["verified"] == true && report["samples_found"].as_u64() == Some(want),
        "{what}, tenant {tenant}, mode {mode}: expected {want} samples: {report}\n{}",
        h.log_tail(30)
    );
}

/// Counts the WAL record fragments in `segment`, and those carrying the snappy flag (bit 3 of the type byte).
fn wal_fragments(segment: &[u8]) -> (usize, usize) {
    let (mut all, mut snappy) = (0, 0);
    for page in segment.chunks(WAL_PAGE) {
        let mut at = 0;
        while at + WAL_RECORD_HEADER <= page.len() {
            let kind = page[at];
            // Type 0 is page padding: the rest of the page is unused.
            if kind & 0x07 == 0 {
                break;
            }
            let len = usize::from(u16::from_be_bytes([page[at + 1], page[at + 2]]));
            all += 1;
            snappy += usize::from(kind & 0x08 != 0);
            at += WAL_RECORD_HEADER + len;
        }
    }
    (all, snappy)
}

/// Bytes of chunk data in Prometheus' `chunks_head/` files (each file starts with an 8-byte header).
fn mmapped_chunk_bytes(chunks_head: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(chunks_head) else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len().saturating_sub(8))
        .sum()
}

/// The head's parts of a Prometheus data directory: `wal/`, `chunks_head/` and `chunk_snapshot.*/` (not the
/// lock file or the query log).
fn head_parts(data: &Path) -> Vec<String> {
    let mut parts: Vec<String> = std::fs::read_dir(data)
        .expect("prometheus data dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n == "wal" || n == "chunks_head" || n.starts_with("chunk_snapshot."))
        .collect();
    parts.sort();
    parts
}

/// Runs Prometheus with the remote-write receiver, pushes `case`'s workload from `start_ms` into it, stops it
/// gracefully and returns its data directory.
fn prometheus_fixture(bin: &Path, root: &Path, case: &Case, start_ms: i64) -> PathBuf {
    let dir = root.join(case.tenant);
    let data = dir.join("data");
    std::fs::create_dir_all(&dir).expect("fixture dir");
    let config = dir.join("prometheus.yml");
    std::fs::write(&config, "global:\n  scrape_interval: 1m\n").expect("write prometheus config");
    let port = free_port().expect("port");
    let mut cmd = Command::new(bin);
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", data.display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--web.enable-remote-write-receiver")
        .arg(if case.compression {
            "--storage.tsdb.wal-compression"
        } else {
            "--no-storage.tsdb.wal-compression"
        });
    if case.snapshot {
        cmd.arg("--enable-feature=memory-snapshot-on-shutdown");
    }
    let mut prometheus = ManagedProcess::spawn("prometheus", cmd, &dir).expect("spawn prometheus");
    prometheus
        .wait_http_ok(([127, 0, 0, 1], port).into(), "/-/ready", Duration::from_secs(60))
        .expect("prometheus ready");
    let url = format!("http://127.0.0.1:{port}/api/v1/write");
    let flags = gen_flags(case, start_ms, case.rounds);
    push(&url, None, &flags, case.tenant, &|| prometheus.log_tail(30));
    let status = prometheus
        .sigterm_and_wait(DEFAULT_STOP_TIMEOUT)
        .expect("stop prometheus");
    assert!(
        status.success(),
        "{}: prometheus exited with {status}\n{}",
        case.tenant,
        prometheus.log_tail(30)
    );
    data
}

#[test]
fn heddle_serves_a_tsdb_written_by_prometheus() {
    let Some(bin) = prometheus_tool("PROMETHEUS_BIN", "prometheus", "prometheus tsdb compatibility test") else {
        return;
    };
    let t0 = std::time::Instant::now();
    let root = tempfile::Builder::new()
        .prefix("heddle-prom-tsdb-")
        .tempdir()
        .expect("tempdir");
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    // Start on a block-range boundary so no dataset crosses one: Prometheus then cuts chunks only by sample count
    // and the short runs leave nothing in `chunks_head/`. The longest run plus heddle's extra rounds spans less
    // than one range, and everything is in the past.
    let longest = CASES.iter().map(|c| c.rounds).max().unwrap_or(0) + EXTRA_ROUNDS;
    let span_ms = i64::from(longest + 1) * INTERVAL_MS;
    assert!(span_ms < BLOCK_RANGE_MS);
    let start_ms = (now_ms - span_ms).div_euclid(BLOCK_RANGE_MS) * BLOCK_RANGE_MS;

    // The four Prometheus runs are independent: build the fixtures side by side.
    let fixtures: Vec<PathBuf> = std::thread::scope(|s| {
        let runs: Vec<_> = CASES
            .iter()
            .map(|case| {
                let (bin, root) = (&bin, root.path());
                s.spawn(move || prometheus_fixture(bin, root, case, start_ms))
            })
            .collect();
        runs.into_iter()
            .map(|r| r.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });

    // The fixtures are what the cases claim to be.
    for (case, data) in CASES.iter().zip(&fixtures) {
        let segment = std::fs::read(data.join("wal").join("00000000")).expect("prometheus wal segment 0");
        let (fragments, snappy) = wal_fragments(&segment);
        assert!(fragments > 0, "{}: empty prometheus wal", case.tenant);
        assert_eq!(
            snappy > 0,
            case.compression,
            "{}: {snappy} of {fragments} wal fragments are snappy-compressed",
            case.tenant
        );
        let snapshots = head_parts(data)
            .iter()
            .filter(|p| p.starts_with("chunk_snapshot."))
            .count();
        assert_eq!(
            snapshots,
            usize::from(case.snapshot),
            "{}: chunk snapshots in {:?}",
            case.tenant,
            head_parts(data)
        );
        let mmapped = mmapped_chunk_bytes(&data.join("chunks_head"));
        assert_eq!(
            mmapped > 0,
            case.rounds >= 120,
            "{}: {mmapped} bytes of mmapped chunks after {} samples per series",
            case.tenant,
            case.rounds
        );
    }

    let mut h = HeddleProcess::start(HeddleOptions {
        multitenancy: true,
        args: vec![
            "--distributor.ingestion-rate-limit=10000000".into(),
            "--distributor.ingestion-burst-size=10000000".into(),
            // The datasets start at the block-range boundary before their first sample, up to two block ranges
            // back: a backfill into each fresh tenant's empty head.
            "--blocks-storage.tsdb.empty-head-sample-age-limit=6h".into(),
        ],
        ..HeddleOptions::default()
    })
    .expect("start heddle");
    let status = h.sigterm_and_wait().expect("stop heddle");
    assert!(status.success(), "heddle exited with {status}\n{}", h.log_tail(30));
    for (case, data) in CASES.iter().zip(&fixtures) {
        let tenant_dir = h.data_dir().join(case.tenant);
        for part in head_parts(data) {
            copy_dir(&data.join(&part), &tenant_dir.join(&part)).expect("copy prometheus data");
        }
    }
    h.restart().expect("heddle starts on prometheus' directories");

    let extra_start = |case: &Case| start_ms + i64::from(case.rounds) * INTERVAL_MS;
    for case in &CASES {
        let flags = gen_flags(case, start_ms, case.rounds);
        for mode in ["samples", "chunks"] {
            verify(&h, case.tenant, &flags, case.rounds, mode, "replayed from prometheus");
        }
        // The same series continue in heddle, after Prometheus' last sample.
        let extra = gen_flags(case, extra_start(case), EXTRA_ROUNDS);
        push(&h.push_url(), Some(case.tenant), &extra, case.tenant, &|| {
            h.log_tail(30)
        });
    }

    // A crash after appending: heddle replays Prometheus' records and its own, in one WAL.
    h.kill9().expect("kill -9");
    h.restart().expect("restart after kill -9");
    for case in &CASES {
        let flags = gen_flags(case, start_ms, case.rounds);
        let extra = gen_flags(case, extra_start(case), EXTRA_ROUNDS);
        for mode in ["samples", "chunks"] {
            verify(
                &h,
                case.tenant,
                &flags,
                case.rounds,
                mode,
                "prometheus' data after kill -9",
            );
            verify(
                &h,
                case.tenant,
                &extra,
                EXTRA_ROUNDS,
                mode,
                "heddle's data after kill -9",
            );
        }
    }
    eprintln!(
        "heddle served {} prometheus-written samples ({} tenants, wal compression on and off) and its own {} \
         after a crash, in {:?}",
        CASES.iter().map(|c| SERIES as u64 * u64::from(c.rounds)).sum::<u64>(),
        CASES.len(),
        CASES.len() as u64 * SERIES as u64 * u64::from(EXTRA_ROUNDS),
        t0.elapsed()
    );
}

#[test]
fn wal_fragment_counter_reads_flags_and_skips_padding() {
    let mut page = vec![0u8; WAL_PAGE];
    // A full record (type 1), then the first (2) and last (4) fragments of a snappy record, then padding.
    let mut at = 0;
    for (kind, len) in [(1u8, 3usize), (2 | 0x08, 5), (4 | 0x08, 2)] {
        page[at] = kind;
        page[at + 1..at + 3].copy_from_slice(&(len as u16).to_be_bytes());
        at += WAL_RECORD_HEADER + len;
    }
    let mut segment = page.clone();
    segment.extend_from_slice(&page);
    assert_eq!(wal_fragments(&segment), (6, 4));
    assert_eq!(wal_fragments(&[]), (0, 0));
}
