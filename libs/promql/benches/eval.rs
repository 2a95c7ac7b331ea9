//! Criterion-free micro benchmark of PromQL evaluation, without I/O: `cargo bench -p heddle-promql --bench eval`.
//!
//! The series are in memory (as the querier hands them over after fetching), so this measures the engine
//! alone: a range query over 10,000 counters x 2 h at 15 s steps (480 steps), the same aggregated, and an
//! instant `sum by (job) (rate(x[5m]))` over 100,000 counters. Prints the fastest of a few runs and the
//! engine's peak samples; asserts nothing about speed.

use heddle_model::{Labels, Sample};
use heddle_promql::{Query, QueryOptions, QueryTime, Series, Value};
use std::hint::black_box;
use std::time::{Duration, Instant};

const STEP: i64 = 15_000;
const RUNS: usize = 5;

/// `n` counters of node-exporter shape, one sample every 15 s over `[start, end]`.
fn counters(n: usize, start: i64, end: i64) -> Vec<Series> {
    const MODES: [&str; 8] = ["idle", "iowait", "irq", "nice", "softirq", "steal", "system", "user"];
    let mut out: Vec<Series> = (0..n)
        .map(|i| {
            let cpu = (i / MODES.len() % 64).to_string();
            let instance = format!("10.0.{}.{}:9100", i / 512 / 256, i / 512 % 256);
            let labels = Labels::from_unsorted([
                ("__name__", "node_cpu_seconds_total"),
                ("cpu", cpu.as_str()),
                ("instance", instance.as_str()),
                ("job", "node"),
                ("mode", MODES[i % MODES.len()]),
            ])
            .expect("valid labels");
            let rate = (i % 97) as f64 * 0.25 + 0.5;
            let samples = (0..)
                .map(|k| start + k * STEP + (i as i64 % 7))
                .take_while(|&t| t <= end)
                .enumerate()
                .map(|(k, t)| Sample::new(t, k as f64 * rate))
                .collect();
            Series::floats(labels, samples)
        })
        .collect();
    out.sort_by(|a, b| a.labels.cmp(&b.labels));
    out
}

fn run(name: &str, text: &str, time: QueryTime, data: &[Series]) {
    let opts = QueryOptions::default();
    let mut best = Duration::MAX;
    let mut shape = (0, 0, 0);
    for _ in 0..RUNS {
        let query = Query::new(text, time, &opts).expect("query parses");
        let fetched: Vec<Vec<Series>> = query.selections().iter().map(|_| data.to_vec()).collect();
        let started = Instant::now();
        let (value, stats) = query.evaluate(black_box(fetched), &opts).expect("query evaluates");
        best = best.min(started.elapsed());
        let (series, points) = match &value {
            Value::Matrix(m) => (m.len(), m.iter().map(|s| s.samples.len()).sum()),
            Value::Vector(v) => (v.len(), v.len()),
            _ => (1, 1),
        };
        shape = (series, points, stats.peak_samples);
        drop(black_box(value));
    }
    println!(
        "{name:<52} {:>9.1} ms  {:>6} series {:>9} points  peak {:>9} samples",
        best.as_secs_f64() * 1e3,
        shape.0,
        shape.1,
        shape.2
    );
}

fn main() {
    let end: i64 = 1_700_000_000_000;
    let start = end - 2 * 3600 * 1000;
    let range = QueryTime::Range { start, end, step: STEP };
    let small = counters(10_000, start - 5 * 60 * 1000, end);
    run(
        "range: rate(x[5m]), 10k series x 481 steps",
        "rate(node_cpu_seconds_total[5m])",
        range,
        &small,
    );
    run(
        "range: sum by (mode) (rate(x[5m])), 10k series",
        "sum by (mode) (rate(node_cpu_seconds_total[5m]))",
        range,
        &small,
    );
    run(
        "range: x, 10k series x 481 steps",
        "node_cpu_seconds_total",
        range,
        &small,
    );
    drop(small);
    let big = counters(100_000, end - 10 * 60 * 1000, end);
    run(
        "instant: sum by (job) (rate(x[5m])), 100k series",
        "sum by (job) (rate(node_cpu_seconds_total[5m]))",
        QueryTime::Instant(end),
        &big,
    );
}
