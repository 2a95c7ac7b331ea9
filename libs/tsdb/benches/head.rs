//! Criterion-free micro benchmark of the head: `cargo bench -p heddle-tsdb --bench head`.
//!
//! Appends 120 samples to each of 10,000 series in batches of 1,000 series (one sample each, the shape of
//! remote-write traffic), then selects everything and reopens the head (WAL replay). Prints rates; asserts
//! nothing about speed.

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
        let samples: Vec<[Sample; 1]> = (0..SERIES)
            .map(|i| [Sample::new(round * 15_000, (round as usize + i) as f64)])
            .collect();
        for start in (0..SERIES).step_by(BATCH) {
            let batch: Vec<AppendSeries<'_>> = (start..start + BATCH)
                .map(|i| AppendSeries {
                    labels: &labels[i],
                    samples: &samples[i],
                })
                .collect();
            let out = head.append(&batch).expect("append");
            assert!(out.errors.is_empty());
        }
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
}
