//! Native histogram ingest beside float ingest, in one run (no criterion, prints figures):
//!
//! ```text
//! cargo bench -p heddle-tsdb --bench histograms
//! HEDDLE_BENCH_SERIES=2000 HEDDLE_BENCH_ROUNDS=480 cargo bench -p heddle-tsdb --bench histograms
//! ```
//!
//! Each workload gets a fresh head: `SERIES` series (8 labels, as the memory bench's) appended `ROUNDS` rounds
//! at a 15 s interval (240 rounds: one hour), one sample per series per round, in batches of 500 series. The
//! workloads: float counters, then integer counter histograms at schema 3 with 10, 40 and 160 populated
//! buckets (in two spans, every bucket growing at its own rate), then float histograms of 40 buckets. Each is
//! run twice, in the order A B C D E E D C B A, and the figures of both runs are printed. Reports per sample:
//! - CPU nanoseconds to append (the process' user + system time over the appends);
//! - bytes in chunks (every chunk of every series, `chunks_head/` and open ones);
//! - WAL bytes (compressed, as the head writes them);
//!
//! and per series the RSS the head holds after the appends (allocator settled), which for histogram series is
//! mostly the open chunk and its appender. Each run is a child process (this bench again), so that no run
//! inherits another's heap.

use heddle_model::{CounterResetHint, FloatHistogram, Histogram, HistogramSample, HistogramValue, Sample, Span};
use heddle_tsdb::{AppendSeries, Head, HeadOptions};

#[path = "support/workload.rs"]
mod workload;
use workload::{cpu_seconds, env, labels_of, rss_bytes, series_values};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const BATCH: usize = 500;
const INTERVAL_MS: i64 = 15_000;
/// How long to wait after the appends before reading RSS (jemalloc's dirty decay is 10 s).
const SETTLE: std::time::Duration = std::time::Duration::from_secs(11);

/// Set in the child process that runs one workload (by its index in `WORKLOADS`) and prints its figures.
const RUN_ENV: &str = "HEDDLE_BENCH_WORKLOAD";

const WORKLOADS: [Workload; 5] = [
    Workload::Floats,
    Workload::Histograms(10),
    Workload::Histograms(40),
    Workload::Histograms(160),
    Workload::FloatHistograms(40),
];

#[derive(Debug, Clone, Copy)]
enum Workload {
    Floats,
    Histograms(u32),
    FloatHistograms(u32),
}

impl Workload {
    fn name(self) -> String {
        match self {
            Workload::Floats => "floats".to_owned(),
            Workload::Histograms(n) => format!("histograms, {n} buckets"),
            Workload::FloatHistograms(n) => format!("float histograms, {n} buckets"),
        }
    }
}

/// Series `i`'s counter histogram at `round`: `buckets` buckets in two spans (a gap of 3 between them), each
/// growing by its own step, plus the zero bucket.
fn histogram(i: usize, round: i64, buckets: u32) -> Histogram {
    let r = round as u64 + 1;
    let counts: Vec<i64> = (0..buckets as u64)
        .map(|b| (r * ((b * 7 + i as u64) % 13 + 1) + b) as i64)
        .collect();
    let zero_count = r * (i as u64 % 3);
    let count = counts.iter().sum::<i64>() as u64 + zero_count;
    let first = buckets / 2;
    Histogram {
        counter_reset_hint: CounterResetHint::Unknown,
        schema: 3,
        zero_threshold: 2.938735877055719e-39,
        zero_count,
        count,
        sum: count as f64 * 0.37 + i as f64,
        positive_spans: vec![Span::new(-5, first), Span::new(3, buckets - first)],
        positive_buckets: heddle_model::histogram::deltas_from_absolute(&counts),
        ..Histogram::default()
    }
}

struct Figures {
    samples: u64,
    cpu_ns_per_sample: f64,
    chunk_bytes_per_sample: f64,
    wal_bytes_per_sample: f64,
    rss_per_series: f64,
}

fn run(workload: Workload, series: usize, rounds: i64) -> Figures {
    let dir = tempfile::tempdir().expect("temp dir");
    let values: Vec<[String; 8]> = (0..series).map(series_values).collect();
    let labels: Vec<_> = values.iter().map(labels_of).collect();
    let rss_before = rss_bytes();
    let (head, _) = Head::open(dir.path(), HeadOptions::default()).expect("open head");
    let (mut cpu, mut wal_bytes, mut samples) = (0.0, 0u64, 0u64);
    for round in 0..rounds {
        let t = round * INTERVAL_MS;
        // Built before the clock starts: the bench measures the head, not making its input.
        let floats: Vec<[Sample; 1]> = (0..series)
            .map(|i| [Sample::new(t, (round as usize * 3 + i) as f64)])
            .collect();
        let histograms: Vec<[HistogramSample; 1]> = match workload {
            Workload::Floats => Vec::new(),
            Workload::Histograms(n) => (0..series)
                .map(|i| {
                    [HistogramSample {
                        t,
                        value: HistogramValue::Int(histogram(i, round, n)),
                    }]
                })
                .collect(),
            Workload::FloatHistograms(n) => (0..series)
                .map(|i| {
                    [HistogramSample {
                        t,
                        value: HistogramValue::Float(float_histogram(i, round, n)),
                    }]
                })
                .collect(),
        };
        for start in (0..series).step_by(BATCH) {
            let end = (start + BATCH).min(series);
            let batch: Vec<AppendSeries<'_>> = (start..end)
                .map(|i| AppendSeries {
                    labels: &labels[i],
                    samples: if histograms.is_empty() { &floats[i] } else { &[] },
                    created: None,
                    histograms: histograms.get(i).map_or(&[][..], |h| &h[..]),
                })
                .collect();
            let before = cpu_seconds();
            let out = head.append(&batch).expect("append");
            cpu += cpu_seconds() - before;
            assert!(out.errors.is_empty(), "{:?}", out.errors.first());
            wal_bytes += out.wal_bytes;
            samples += out.samples_appended + out.histograms_appended;
        }
    }
    head.sync().expect("sync");
    std::thread::sleep(SETTLE);
    let rss = rss_bytes().saturating_sub(rss_before) as f64;
    // After the RSS: a select copies every chunk.
    let chunk_bytes: usize = head
        .select(i64::MIN, i64::MAX, &[])
        .iter()
        .flat_map(|s| &s.chunks)
        .map(|c| c.data.len())
        .sum();
    drop(head);
    Figures {
        samples,
        cpu_ns_per_sample: cpu * 1e9 / samples as f64,
        chunk_bytes_per_sample: chunk_bytes as f64 / samples as f64,
        wal_bytes_per_sample: wal_bytes as f64 / samples as f64,
        rss_per_series: rss / series as f64,
    }
}

fn float_histogram(i: usize, round: i64, buckets: u32) -> FloatHistogram {
    let mut h = histogram(i, round, buckets).to_float();
    // Rule output is rarely integral.
    h.sum /= 3.0;
    h
}

fn main() {
    let series = env("HEDDLE_BENCH_SERIES", 10_000);
    let rounds = env("HEDDLE_BENCH_ROUNDS", 240) as i64;
    if let Ok(i) = std::env::var(RUN_ENV) {
        let w = WORKLOADS[i.parse::<usize>().expect("workload index")];
        let f = run(w, series, rounds);
        println!(
            "figures {} {} {} {} {}",
            f.samples, f.cpu_ns_per_sample, f.chunk_bytes_per_sample, f.wal_bytes_per_sample, f.rss_per_series
        );
        return;
    }
    println!("{series} series x {rounds} rounds, batches of {BATCH} series; each workload run twice (ABCDE EDCBA)");
    let order: Vec<usize> = (0..WORKLOADS.len()).chain((0..WORKLOADS.len()).rev()).collect();
    let mut results: Vec<(usize, Figures)> = Vec::new();
    for i in order {
        let f = run_in_child(i);
        println!(
            "{:<32} {:>9} samples  cpu {:>8.0} ns/sample  chunks {:>7.2} B/sample  wal {:>7.2} B/sample  rss {:>8.0} B/series",
            WORKLOADS[i].name(),
            f.samples,
            f.cpu_ns_per_sample,
            f.chunk_bytes_per_sample,
            f.wal_bytes_per_sample,
            f.rss_per_series
        );
        results.push((i, f));
    }
    println!("\nmean of the two runs, CPU relative to floats:");
    let mean = |w: usize, f: fn(&Figures) -> f64| -> f64 {
        let v: Vec<f64> = results.iter().filter(|(i, _)| *i == w).map(|(_, x)| f(x)).collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    let float_cpu = mean(0, |f| f.cpu_ns_per_sample);
    for (i, w) in WORKLOADS.iter().enumerate() {
        let cpu = mean(i, |f| f.cpu_ns_per_sample);
        println!(
            "{:<32} cpu {:>8.0} ns/sample ({:>5.1}x floats)  chunks {:>7.2} B/sample  wal {:>7.2} B/sample  rss {:>8.0} B/series",
            w.name(),
            cpu,
            cpu / float_cpu,
            mean(i, |f| f.chunk_bytes_per_sample),
            mean(i, |f| f.wal_bytes_per_sample),
            mean(i, |f| f.rss_per_series)
        );
    }
}

/// Runs workload `i` in a child process (this bench again) and reads its figures.
fn run_in_child(i: usize) -> Figures {
    let exe = std::env::current_exe().expect("bench executable");
    let out = std::process::Command::new(exe)
        .env(RUN_ENV, i.to_string())
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run the bench as a child");
    assert!(out.status.success(), "child failed: {}", out.status);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("figures "))
        .expect("child report");
    let f: Vec<f64> = line.split_whitespace().filter_map(|v| v.parse().ok()).collect();
    assert_eq!(f.len(), 5, "child report {line:?}");
    Figures {
        samples: f[0] as u64,
        cpu_ns_per_sample: f[1],
        chunk_bytes_per_sample: f[2],
        wal_bytes_per_sample: f[3],
        rss_per_series: f[4],
    }
}
