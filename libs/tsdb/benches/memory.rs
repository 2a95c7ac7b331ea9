//! Head memory, WAL size and restart time on a remote-write-like workload (no criterion, prints figures):
//!
//! ```text
//! cargo bench -p heddle-tsdb --bench memory                               # 1M series, 8 labels, 4 rounds
//! HEDDLE_BENCH_SERIES=200000 HEDDLE_BENCH_ROUNDS=150 cargo bench -p heddle-tsdb --bench memory
//! ```
//!
//! Every series has 8 labels (`__name__` from 200 metric names, `job`, `namespace`, `pod` unique-ish,
//! `instance` unique, `container`, `zone`, `env`) and gets one sample per round at a 15 s interval, in batches
//! of 5,000 series as remote write sends them. Values are realistic: counters growing by varying steps and
//! gauges with two decimals. Reports:
//! - RSS per series (`VmRSS` of /proc/self/status 12 s after the appends, once the allocator has returned the
//!   pages the last chunk cut freed, minus before, over the series count; the label strings the bench itself
//!   holds are subtracted);
//! - WAL bytes per sample, with compression on (the head) and off (a second, smaller head);
//! - restart time: open after a graceful close with a chunk snapshot, and open after a crash (WAL replay),
//!   each in a fresh process (the bench runs itself as a child), with the CPU seconds it took;
//! - CPU seconds per million samples appended.

use std::time::Instant;

use heddle_tsdb::{Head, HeadOptions};

#[path = "support/workload.rs"]
mod workload;
use workload::{append_rounds, child_figures, cpu_seconds, dir_bytes, env, rss_bytes, series_values, status_bytes};

/// The allocator the `heddle` binary ships with: RSS and restart times depend on it.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// How long the bench waits after the appends before reading RSS (jemalloc's dirty decay is 10 s).
const SETTLE: std::time::Duration = std::time::Duration::from_secs(12);

/// Set in the child process that opens the head in this directory and reports how long it took.
const OPEN_DIR_ENV: &str = "HEDDLE_BENCH_OPEN_DIR";

/// Opens the head in `dir` in a child process (this bench again); returns its open time and CPU seconds, the
/// series it loaded from a snapshot and the WAL records it replayed.
fn open_in_child(dir: &std::path::Path) -> (f64, f64, u64, u64) {
    let f = child_figures((OPEN_DIR_ENV, dir.as_os_str()), "opened", 4);
    (f[0], f[1], f[2] as u64, f[3] as u64)
}

/// The child: open, report, and exit without closing (a crash as far as the head can tell).
fn open_and_report(dir: &str) -> ! {
    let (started, cpu) = (Instant::now(), cpu_seconds());
    let (head, stats) = Head::open(std::path::Path::new(dir), HeadOptions::default()).expect("reopen");
    let (elapsed, cpu) = (started.elapsed().as_secs_f64(), cpu_seconds() - cpu);
    println!("opened {elapsed} {cpu} {} {}", stats.snapshot_series, stats.wal_records);
    std::mem::forget(head);
    std::process::exit(0)
}

fn main() {
    if let Ok(dir) = std::env::var(OPEN_DIR_ENV) {
        open_and_report(&dir);
    }
    let series = env("HEDDLE_BENCH_SERIES", 1_000_000);
    let rounds = env("HEDDLE_BENCH_ROUNDS", 4) as i64;
    let dir = tempfile::tempdir().expect("temp dir");
    let values: Vec<[String; 8]> = (0..series).map(series_values).collect();
    let label_bytes: usize = values
        .iter()
        .map(|v| v.iter().map(|s| s.capacity() + 24).sum::<usize>())
        .sum();

    let rss_before = rss_bytes();
    let (head, _) = Head::open(dir.path(), HeadOptions::default()).expect("open head");
    let started = Instant::now();
    let cpu = cpu_seconds();
    let samples = append_rounds(&head, &values, 0..rounds);
    let append_s = started.elapsed().as_secs_f64();
    let append_cpu = cpu_seconds() - cpu;
    head.sync().expect("sync");
    // What a running head settles to: the last chunk cut freed every series' previous chunk buffer, and
    // jemalloc's background thread returns such pages over its 10 s dirty decay.
    std::thread::sleep(SETTLE);
    let rss_after = rss_bytes();
    let wal = dir_bytes(&dir.path().join("wal"));
    println!("series={series} labels=8 rounds={rounds} samples={samples}");
    println!(
        "append: {append_s:.2} s, {:.0} samples/s; {append_cpu:.2} cpu s, {:.2} cpu s per million samples",
        samples as f64 / append_s.max(1e-9),
        append_cpu * 1e6 / samples as f64
    );
    println!(
        "rss: before={} MiB after={} MiB => {:.0} bytes/series (head only: the bench's own label strings, {} MiB, are held before); \
         of it mapped files (chunks_head/ pages in memory) {} MiB",
        rss_before >> 20,
        rss_after >> 20,
        (rss_after.saturating_sub(rss_before)) as f64 / series as f64,
        label_bytes >> 20,
        status_bytes("RssFile:") >> 20
    );
    println!(
        "wal (compressed): {wal} bytes, {:.2} bytes/sample incl. series records",
        wal as f64 / samples as f64
    );

    // Restart: graceful (snapshot) vs crash (WAL replay).
    let started = Instant::now();
    head.close_with_snapshot().expect("snapshot").expect("written");
    let snapshot_s = started.elapsed().as_secs_f64();
    drop(head);
    // Each restart runs in a fresh process, as a real one does: reopening in this process would also time the
    // allocator consolidating the million series just freed. This process lives on, so it first lets its
    // allocator return their pages (jemalloc's background thread does, over its 10 s decay) instead of
    // competing with the child for the cores as the old process, gone in a real restart, would not.
    std::thread::sleep(SETTLE);
    let (from_snapshot, snapshot_cpu, snapshot_series, _) = open_in_child(dir.path());
    assert_eq!(snapshot_series as usize, series);
    // Crash: the child exits without closing (the loaded snapshot was deleted at open).
    let (from_wal, wal_cpu, snapshot_series, wal_records) = open_in_child(dir.path());
    assert_eq!(snapshot_series, 0);
    println!(
        "restart (fresh process): snapshot write {snapshot_s:.2} s; open from snapshot {from_snapshot:.2} s \
         ({snapshot_cpu:.2} cpu s); open from wal replay {from_wal:.2} s ({wal_cpu:.2} cpu s, {wal_records} records); \
         ratio {:.1}x",
        from_wal / from_snapshot.max(1e-9)
    );

    // WAL size without compression, on a tenth of the series (bytes per sample do not depend on the count).
    let small = (series / 10).max(1);
    let plain_dir = tempfile::tempdir().expect("temp dir");
    let opts = HeadOptions {
        wal_compression: false,
        ..HeadOptions::default()
    };
    let (plain, _) = Head::open(plain_dir.path(), opts).expect("open head");
    let plain_samples = append_rounds(&plain, &values[..small], 0..rounds);
    plain.close().expect("close");
    let cdir = tempfile::tempdir().expect("temp dir");
    let (comp, _) = Head::open(cdir.path(), HeadOptions::default()).expect("open head");
    let comp_samples = append_rounds(&comp, &values[..small], 0..rounds);
    comp.close().expect("close");
    let (p, c) = (
        dir_bytes(&plain_dir.path().join("wal")),
        dir_bytes(&cdir.path().join("wal")),
    );
    println!(
        "wal on {small} series: uncompressed {:.2} bytes/sample, compressed {:.2} bytes/sample ({:.2}x smaller)",
        p as f64 / plain_samples as f64,
        c as f64 / comp_samples as f64,
        p as f64 / c.max(1) as f64
    );
}
