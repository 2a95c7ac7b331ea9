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
//! - RSS per series (`VmRSS` of /proc/self/status after the appends minus before, over the series count; the
//!   label strings the bench itself holds are subtracted);
//! - WAL bytes per sample, with compression on (the head) and off (a second, smaller head);
//! - restart time: open after a graceful close with a chunk snapshot, and open after a crash (WAL replay).

use std::time::Instant;

use heddle_model::{LabelRef, Sample};
use heddle_tsdb::{AppendSeries, Head, HeadOptions};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn dir_bytes(path: &std::path::Path) -> u64 {
    std::fs::read_dir(path).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .map(|e| {
                let p = e.path();
                if p.is_dir() {
                    dir_bytes(&p)
                } else {
                    e.metadata().map_or(0, |m| m.len())
                }
            })
            .sum()
    })
}

/// The label values of series `i`: (name, job, namespace, pod, instance, container, zone, env).
fn series_values(i: usize) -> [String; 8] {
    [
        format!("app_metric_{}_total", i % 200),
        format!("job-{}", i % 50),
        format!("namespace-{}", i % 20),
        format!("pod-{}-{:x}", i / 200, (i / 200).wrapping_mul(2_654_435_761) % 0xfffff),
        format!("10.{}.{}.{}:9100", (i >> 16) & 255, (i >> 8) & 255, i & 255),
        format!("container-{}", i % 7),
        format!("zone-{}", i % 3),
        "production".to_owned(),
    ]
}

const NAMES: [&str; 8] = [
    "__name__",
    "container",
    "env",
    "instance",
    "job",
    "namespace",
    "pod",
    "zone",
];

fn labels_of(v: &[String; 8]) -> [LabelRef<'_>; 8] {
    // Sorted by name: __name__, container, env, instance, job, namespace, pod, zone.
    let order = [0, 5, 7, 4, 1, 2, 3, 6];
    std::array::from_fn(|k| LabelRef {
        name: NAMES[k],
        value: &v[order[k]],
    })
}

fn value(i: usize, round: i64) -> f64 {
    let x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (round as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    if i.is_multiple_of(3) {
        // Gauge with two decimals.
        ((x % 100_000) as f64) / 100.0
    } else {
        // Counter growing by a varying step.
        (round as f64) * 10.0 + (x % 17) as f64
    }
}

fn append_rounds(head: &Head, values: &[[String; 8]], rounds: std::ops::Range<i64>) -> u64 {
    let mut samples = 0;
    for round in rounds {
        for (start, chunk) in values.chunks(5_000).enumerate().map(|(k, c)| (k * 5_000, c)) {
            let labels: Vec<[LabelRef<'_>; 8]> = chunk.iter().map(labels_of).collect();
            let s: Vec<[Sample; 1]> = (0..chunk.len())
                .map(|j| [Sample::new(1_700_000_400_000 + round * 15_000, value(start + j, round))])
                .collect();
            let batch: Vec<AppendSeries<'_>> = labels
                .iter()
                .zip(&s)
                .map(|(l, s)| AppendSeries { labels: l, samples: s })
                .collect();
            let out = head.append(&batch).expect("append");
            samples += out.samples_appended;
        }
    }
    samples
}

fn main() {
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
    let samples = append_rounds(&head, &values, 0..rounds);
    let append_s = started.elapsed().as_secs_f64();
    head.sync().expect("sync");
    let rss_after = rss_bytes();
    let wal = dir_bytes(&dir.path().join("wal"));
    println!("series={series} labels=8 rounds={rounds} samples={samples}");
    println!(
        "append: {append_s:.2} s, {:.0} samples/s",
        samples as f64 / append_s.max(1e-9)
    );
    println!(
        "rss: before={} MiB after={} MiB => {:.0} bytes/series (head only: the bench's own label strings, {} MiB, are held before)",
        rss_before >> 20,
        rss_after >> 20,
        (rss_after.saturating_sub(rss_before)) as f64 / series as f64,
        label_bytes >> 20
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
    let started = Instant::now();
    let (head, stats) = Head::open(dir.path(), HeadOptions::default()).expect("reopen");
    let from_snapshot = started.elapsed().as_secs_f64();
    assert_eq!(stats.snapshot_series as usize, series);
    // Crash: drop without close (the loaded snapshot was deleted at open).
    drop(head);
    let started = Instant::now();
    let (head, stats) = Head::open(dir.path(), HeadOptions::default()).expect("reopen");
    let from_wal = started.elapsed().as_secs_f64();
    assert_eq!(stats.snapshot, None);
    println!(
        "restart: snapshot write {snapshot_s:.2} s; open from snapshot {from_snapshot:.2} s; open from wal replay \
         {from_wal:.2} s ({} records); ratio {:.1}x",
        stats.wal_records,
        from_wal / from_snapshot.max(1e-9)
    );
    drop(head);

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
