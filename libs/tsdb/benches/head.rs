//! Criterion-free micro benchmark of the head: `cargo bench -p heddle-tsdb --bench head`.
//!
//! Appends 120 samples to each of 10,000 series in batches of 1,000 series (one sample each, the shape of
//! remote-write traffic), then selects everything and reopens the head (WAL replay). Then the ingest shape of
//! the loadtest's steady scenario: 100,000 node-exporter-like series of 7 labels (a head far bigger than the
//! CPU caches), batches of 2,000 series of one sample each; the first round creates the series, the next 20
//! append to them. Prints rates and nanoseconds per sample; asserts nothing about speed.

use std::time::Instant;

use heddle_model::{LabelRef, Matcher, Sample};
use heddle_tsdb::{AppendSeries, Head, HeadOptions};

const SERIES: usize = 10_000;
const BATCH: usize = 1_000;
const ROUNDS: i64 = 120;

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let values: Vec<String> = (0..SERIES).map(|i| format!("instance-{i:06}")).collect();
    let labels: Vec<[LabelRef<'_>; 3]> = values
        .iter()
        .map(|v| {
            [
                LabelRef {
                    name: "__name__",
                    value: "bench_metric",
                },
                LabelRef {
                    name: "instance",
                    value: v,
                },
                LabelRef {
                    name: "job",
                    value: "bench",
                },
            ]
        })
        .collect();

    let (head, _) = Head::open(dir.path(), HeadOptions::default()).expect("open head");
    let started = Instant::now();
    for round in 0..ROUNDS {
        append_round(&head, &labels, BATCH, round * 15_000, |i| (round as usize + i) as f64);
    }
    let total = SERIES as f64 * ROUNDS as f64;
    let secs = started.elapsed().as_secs_f64();
    println!("append: {total} samples in {secs:.2}s = {:.0} samples/s", total / secs);

    let started = Instant::now();
    let selected = head.select(i64::MIN, i64::MAX, &[Matcher::equal("job", "bench")]);
    let chunks: usize = selected.iter().map(|s| s.chunks.len()).sum();
    println!(
        "select: {} series, {chunks} chunks in {:.3}s",
        selected.len(),
        started.elapsed().as_secs_f64()
    );
    drop(head);

    let started = Instant::now();
    let (_, stats) = Head::open(dir.path(), HeadOptions::default()).expect("reopen head");
    let secs = started.elapsed().as_secs_f64();
    println!(
        "replay: {} series, {} samples, {} wal bytes in {secs:.2}s = {:.0} samples/s",
        stats.series,
        stats.samples,
        stats.wal_bytes,
        stats.samples as f64 / secs
    );

    steady();
}

/// Appends one sample at `t` to every series of `labels` (value `value(i)` for series `i`), in batches of
/// `batch` series, and checks that none was refused.
fn append_round<'a, L: AsRef<[LabelRef<'a>]>>(
    head: &Head,
    labels: &'a [L],
    batch: usize,
    t: i64,
    value: impl Fn(usize) -> f64,
) {
    let samples: Vec<[Sample; 1]> = (0..labels.len()).map(|i| [Sample::new(t, value(i))]).collect();
    for start in (0..labels.len()).step_by(batch) {
        let end = (start + batch).min(labels.len());
        let batch: Vec<AppendSeries<'_>> = (start..end)
            .map(|i| AppendSeries {
                labels: labels[i].as_ref(),
                samples: &samples[i],
                created: None,
                histograms: &[],
            })
            .collect();
        let out = head.append(&batch).expect("append");
        assert!(out.errors.is_empty());
    }
}

/// The loadtest's steady shape: series creation, then appends to 100,000 existing series.
fn steady() {
    const SERIES: usize = 100_000;
    const BATCH: usize = 2_000;
    const ROUNDS: i64 = 20;
    const MODES: [&str; 8] = ["idle", "user", "system", "iowait", "irq", "softirq", "steal", "nice"];
    let dir = tempfile::tempdir().expect("temp dir");
    let strings: Vec<[String; 3]> = (0..SERIES)
        .map(|i| {
            [
                format!("node_cpu_seconds_total_{}", i % 100),
                format!("{}", (i / 100) % 16),
                format!("host-{:05}.example.internal:9100", i / 1_600),
            ]
        })
        .collect();
    let labels: Vec<[LabelRef<'_>; 7]> = strings
        .iter()
        .enumerate()
        .map(|(i, [name, cpu, instance])| {
            [
                LabelRef {
                    name: "__name__",
                    value: name,
                },
                LabelRef {
                    name: "cpu",
                    value: cpu,
                },
                LabelRef {
                    name: "env",
                    value: "production",
                },
                LabelRef {
                    name: "instance",
                    value: instance,
                },
                LabelRef {
                    name: "job",
                    value: "node",
                },
                LabelRef {
                    name: "mode",
                    value: MODES[i % MODES.len()],
                },
                LabelRef {
                    name: "region",
                    value: "eu-west-1",
                },
            ]
        })
        .collect();
    let (head, _) = Head::open(dir.path(), HeadOptions::default()).expect("open head");
    let mut round_secs = Vec::new();
    for round in 0..=ROUNDS {
        let started = Instant::now();
        append_round(&head, &labels, BATCH, round * 15_000, |i| {
            (round as usize * 7 + i) as f64 * 0.25
        });
        round_secs.push(started.elapsed().as_secs_f64());
    }
    let create = round_secs[0];
    let steady: f64 = round_secs[1..].iter().sum();
    println!(
        "steady create: {SERIES} series of 7 labels in {create:.3}s = {:.0} ns/series",
        create * 1e9 / SERIES as f64
    );
    println!(
        "steady append: {} samples to {SERIES} series in {steady:.3}s = {:.0} ns/sample",
        SERIES as i64 * ROUNDS,
        steady * 1e9 / (SERIES as f64 * ROUNDS as f64)
    );
}
