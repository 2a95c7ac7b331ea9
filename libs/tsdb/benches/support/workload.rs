//! The workload the head benchmarks share: 8-label series shaped like a Kubernetes scrape, realistic values,
//! remote-write-sized batches, and readings of the process' memory and of directory sizes.

#![allow(dead_code)] // each bench uses its own subset

use heddle_model::{LabelRef, Sample};
use heddle_tsdb::{AppendSeries, Head};

/// Time of round 0: a multiple of 2 h, so block ranges start at round 0.
pub const T0: i64 = 1_700_006_400_000;

pub fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

pub fn rss_bytes() -> u64 {
    status_bytes("VmRSS:")
}

/// A `kB` field of /proc/self/status (`VmRSS:`, `VmHWM:`, `RssAnon:`), in bytes; 0 if absent.
pub fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// CPU seconds (user + system) this process has used, all threads, from /proc/self/stat (100 ticks a second).
pub fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15 of the line.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    f.iter().sum::<u64>() as f64 / 100.0
}

pub fn dir_bytes(path: &std::path::Path) -> u64 {
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
pub fn series_values(i: usize) -> [String; 8] {
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

pub fn labels_of(v: &[String; 8]) -> [LabelRef<'_>; 8] {
    // Sorted by name: __name__, container, env, instance, job, namespace, pod, zone.
    let order = [0, 5, 7, 4, 1, 2, 3, 6];
    std::array::from_fn(|k| LabelRef {
        name: NAMES[k],
        value: &v[order[k]],
    })
}

/// Whether `HEDDLE_BENCH_VALUES=steady` asks for [`steady_value`] instead of [`value`]'s default mix.
fn steady_values() -> bool {
    static STEADY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *STEADY.get_or_init(|| std::env::var("HEDDLE_BENCH_VALUES").is_ok_and(|v| v == "steady"))
}

/// Values closer to a real scrape, where much is constant or counts at a steady rate: a quarter constant gauges
/// (`up`, info and config metrics), a quarter counters at a constant rate, a quarter counters with jittered
/// increments, a quarter random two-decimal gauges (the default mix has a third of those).
pub fn steady_value(i: usize, round: i64) -> f64 {
    let x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (round as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    match i % 4 {
        0 => (i % 10) as f64,
        1 => (round * (i as i64 % 7 + 1)) as f64,
        2 => (round * 100) as f64 + (x % 3) as f64,
        _ => ((x % 100_000) as f64) / 100.0,
    }
}

/// Value of series `i` at `round`: [`steady_value`] with `HEDDLE_BENCH_VALUES=steady`, else a third two-decimal
/// random gauges and two thirds counters growing by a varying step.
pub fn value(i: usize, round: i64) -> f64 {
    if steady_values() {
        return steady_value(i, round);
    }
    let x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (round as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    if i.is_multiple_of(3) {
        // Gauge with two decimals.
        ((x % 100_000) as f64) / 100.0
    } else {
        // Counter growing by a varying step.
        (round as f64) * 10.0 + (x % 17) as f64
    }
}

/// Appends rounds `rounds` of every series (round r at `T0 + r * interval_ms`) in batches of 5,000 series.
pub fn append_rounds_at(head: &Head, values: &[[String; 8]], rounds: std::ops::Range<i64>, interval_ms: i64) -> u64 {
    let mut samples = 0;
    for round in rounds {
        for (k, chunk) in values.chunks(BATCH).enumerate() {
            samples += append_batch(head, chunk, k * BATCH, round, interval_ms);
        }
    }
    samples
}

/// Series per append batch, as remote write sends them.
pub const BATCH: usize = 5_000;

/// Appends round `round` of the series `chunk` (the first being series `first`) as one batch; returns the samples
/// stored.
pub fn append_batch(head: &Head, chunk: &[[String; 8]], first: usize, round: i64, interval_ms: i64) -> u64 {
    let labels: Vec<[LabelRef<'_>; 8]> = chunk.iter().map(labels_of).collect();
    let s: Vec<[Sample; 1]> = (0..chunk.len())
        .map(|j| [Sample::new(T0 + round * interval_ms, value(first + j, round))])
        .collect();
    let batch: Vec<AppendSeries<'_>> = labels
        .iter()
        .zip(&s)
        .map(|(l, s)| AppendSeries {
            labels: l,
            samples: s,
            created: None,
            histograms: &[],
        })
        .collect();
    head.append(&batch).expect("append").samples_appended
}

/// [`append_rounds_at`] at the 15 s scrape interval.
pub fn append_rounds(head: &Head, values: &[[String; 8]], rounds: std::ops::Range<i64>) -> u64 {
    append_rounds_at(head, values, rounds, 15_000)
}

/// Runs this bench again as a child process with `env` set (the child sees it and does one part of the work),
/// and returns the numbers of the stdout line starting with `prefix` and a space; exactly `count` of them.
pub fn child_figures(env: (&str, &std::ffi::OsStr), prefix: &str, count: usize) -> Vec<f64> {
    let exe = std::env::current_exe().expect("bench executable");
    let out = std::process::Command::new(exe)
        .env(env.0, env.1)
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run the bench as a child");
    assert!(out.status.success(), "child failed: {}", out.status);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(prefix).and_then(|l| l.strip_prefix(' ')))
        .expect("child report");
    let f: Vec<f64> = line.split_whitespace().filter_map(|v| v.parse().ok()).collect();
    assert_eq!(f.len(), count, "child report {line:?}");
    f
}
