//! The data the PromQL oracle writes to both servers: about 200 series over 100 minutes of 15 s scrapes ending
//! a minute before now, every value a pure function of the series and the scrape index (no randomness, no
//! clock other than where the window ends).
//!
//! The families are chosen for what they exercise in PromQL: counters with resets (rate, increase, resets),
//! float counters with distinct rates (topk, sort without ties), gauges that cross zero and go negative,
//! classic histograms (histogram_quantile), series that go stale with a staleness marker and come back, series
//! with a gap longer than the 5 minute lookback, series that appear late, NaN and ±Inf values, series with
//! identical values (count_values, group, equality) and info-style series for group_left joins.

use heddle_model::STALE_NAN_BITS;
use heddle_proto::prometheus::WriteRequest;
use heddle_testkit::{splitmix64, timeseries};

/// Scrape interval of every series.
pub const SCRAPE_MS: i64 = 15_000;
/// Scrapes per series: 100 minutes.
pub const POINTS: usize = 400;
/// Scrapes per remote-write request: each request holds 10 minutes of every series, oldest request first,
/// because Prometheus' receiver refuses samples much older than the newest it holds.
const POINTS_PER_REQUEST: usize = 40;

/// One series: its label pairs (sorted by name) and a value or nothing per scrape.
struct Series {
    labels: Vec<(String, String)>,
    /// Scrape time offset from the grid, as real targets are scraped at different phases.
    offset_ms: i64,
    values: Vec<Option<f64>>,
}

/// Everything written, in the order it is sent.
pub struct Dataset {
    /// Timestamp of scrape 0 (before each series' offset), a whole minute.
    pub start_ms: i64,
    /// Timestamp of the last scrape on the grid (`start_ms + (POINTS - 1) * SCRAPE_MS`).
    pub end_ms: i64,
    pub requests: Vec<WriteRequest>,
    pub series: usize,
    pub samples: usize,
}

impl Dataset {
    /// The data for a window whose last whole minute is at least a minute before `now_ms`.
    pub fn generate(now_ms: i64) -> Dataset {
        let last_minute = now_ms.div_euclid(60_000) * 60_000 - 60_000;
        let start_ms = last_minute - POINTS as i64 * SCRAPE_MS;
        let series = all_series();
        let samples = series.iter().map(|s| s.values.iter().flatten().count()).sum();
        let requests = (0..POINTS)
            .step_by(POINTS_PER_REQUEST)
            .map(|first| request(&series, start_ms, first..(first + POINTS_PER_REQUEST).min(POINTS)))
            .collect();
        Dataset {
            start_ms,
            end_ms: start_ms + (POINTS as i64 - 1) * SCRAPE_MS,
            requests,
            series: series.len(),
            samples,
        }
    }
}

fn request(series: &[Series], start_ms: i64, scrapes: std::ops::Range<usize>) -> WriteRequest {
    let timeseries = series
        .iter()
        .filter_map(|s| {
            let samples: Vec<(i64, f64)> = scrapes
                .clone()
                .filter_map(|k| s.values[k].map(|v| (start_ms + k as i64 * SCRAPE_MS + s.offset_ms, v)))
                .collect();
            let labels: Vec<(&str, &str)> = s.labels.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
            (!samples.is_empty()).then(|| timeseries(&labels, &samples))
        })
        .collect();
    WriteRequest {
        timeseries,
        ..WriteRequest::default()
    }
}

/// A value in `[0, 1)` from a hash.
fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

fn hash(parts: &[u64]) -> u64 {
    parts.iter().fold(0x5eed, |acc, p| splitmix64(acc ^ p))
}

fn series(name: &str, labels: &[(&str, &str)], offset_ms: i64, values: Vec<Option<f64>>) -> Series {
    let mut labels: Vec<(String, String)> = std::iter::once(("__name__", name))
        .chain(labels.iter().copied())
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
        .collect();
    labels.sort();
    Series {
        labels,
        offset_ms,
        values,
    }
}

/// A counter whose increments come from `step(k)`; at `reset_at` it restarts from that scrape's increment, as
/// a restarted process does.
fn counter(start: f64, reset_at: Option<usize>, step: impl Fn(usize) -> f64) -> Vec<Option<f64>> {
    let mut v = start;
    (0..POINTS)
        .map(|k| {
            v = if Some(k) == reset_at { step(k) } else { v + step(k) };
            Some(v)
        })
        .collect()
}

fn all_series() -> Vec<Series> {
    let mut out = Vec::new();
    http_requests(&mut out);
    node_cpu(&mut out);
    gauges(&mut out);
    histograms(&mut out);
    irregular(&mut out);
    out
}

const JOBS: [&str; 3] = ["api", "web", "batch"];
const HOSTS: [&str; 3] = ["host-a:9100", "host-b:9100", "host-c:9100"];

/// `http_requests_total` (integer counters, every fourth resets once), `up` and `app_info`.
fn http_requests(out: &mut Vec<Series>) {
    let mut i = 0u64;
    for (j, job) in JOBS.iter().enumerate() {
        for (h, host) in HOSTS.iter().enumerate() {
            let offset = (hash(&[1, i]) % 15_000) as i64;
            for method in ["GET", "POST"] {
                for code in ["200", "500"] {
                    // Bases 3 apart and noise below 3: no two series share a rate over any window.
                    let base = 3.0 * (i + 1) as f64;
                    let reset = i.is_multiple_of(4).then_some(100 + 7 * i as usize);
                    let values = counter((i * 11) as f64, reset, |k| base + (hash(&[2, i, k as u64]) % 3) as f64);
                    let labels = [("job", *job), ("instance", *host), ("method", method), ("code", code)];
                    out.push(series("http_requests_total", &labels, offset, values));
                    i += 1;
                }
            }
            // The `batch` job on host-c is down for the middle third.
            let up = (0..POINTS)
                .map(|k| {
                    Some(if j == 2 && h == 2 && (130..260).contains(&k) {
                        0.0
                    } else {
                        1.0
                    })
                })
                .collect();
            out.push(series("up", &[("job", job), ("instance", host)], offset, up));
            let version = if h == 0 { "1.2.0" } else { "1.3.1" };
            let info = vec![Some(1.0); POINTS];
            let labels = [("job", *job), ("instance", *host), ("version", version)];
            out.push(series("app_info", &labels, offset, info));
        }
    }
}

/// `node_cpu_seconds_total`: float counters, each with its own rate, one with a reset.
fn node_cpu(out: &mut Vec<Series>) {
    let mut i = 0u64;
    for host in ["node-1", "node-2", "node-3", "node-4"] {
        let offset = (hash(&[3, i]) % 15_000) as i64;
        for cpu in ["0", "1"] {
            for mode in ["idle", "iowait", "system", "user"] {
                let rate = 0.05 + unit(hash(&[4, i])) * 0.9;
                let reset = (i == 5).then_some(250);
                let values = counter(1000.0 * unit(hash(&[5, i])), reset, |k| {
                    15.0 * rate * (1.0 + 0.3 * (k as f64 / 17.0 + i as f64).sin())
                });
                let labels = [("job", "node"), ("instance", host), ("cpu", cpu), ("mode", mode)];
                out.push(series("node_cpu_seconds_total", &labels, offset, values));
                i += 1;
            }
        }
    }
}

/// Gauges: temperatures that cross zero (distinct per series), integer queue depths and balances with zeros and
/// negatives, and three copies of one pattern.
fn gauges(out: &mut Vec<Series>) {
    let mut i = 0u64;
    for sensor in ["s1", "s2", "s3", "s4", "s5"] {
        for room in ["a", "b", "c", "d"] {
            let base = -10.0 + 40.0 * unit(hash(&[6, i]));
            let phase = 6.0 * unit(hash(&[7, i]));
            let values = (0..POINTS)
                .map(|k| Some(base + 12.0 * (k as f64 / 40.0 + phase).sin() + i as f64 * 1e-3))
                .collect();
            let labels = [("job", "sensors"), ("instance", sensor), ("room", room)];
            out.push(series(
                "temperature_celsius",
                &labels,
                (i * 613) as i64 % SCRAPE_MS,
                values,
            ));
            i += 1;
        }
    }
    for host in ["worker-1", "worker-2", "worker-3"] {
        for queue in ["high", "low", "bulk"] {
            let values = (0..POINTS)
                .map(|k| Some((hash(&[8, i, k as u64 / 10]) % 6) as f64 * if queue == "bulk" { 10.0 } else { 1.0 }))
                .collect();
            let labels = [("job", "worker"), ("instance", host), ("queue", queue)];
            out.push(series("queue_depth", &labels, 2_000, values));
            i += 1;
        }
    }
    for (a, account) in ["w", "x", "y", "z"].into_iter().enumerate() {
        let values = (0..POINTS)
            .map(|k| Some(((k as i64 / 20 + a as i64 * 3) % 9 - 4) as f64 * 25.0))
            .collect();
        out.push(series("balance", &[("account", account)], 5_000, values));
    }
    for copy in ["a", "b", "c"] {
        let values = (0..POINTS).map(|k| Some(((k / 25) % 4) as f64)).collect();
        out.push(series("same_pattern", &[("copy", copy)], 1_000, values));
    }
}

const BUCKETS: [(&str, f64); 8] = [
    ("0.05", 0.05),
    ("0.1", 0.1),
    ("0.25", 0.25),
    ("0.5", 0.5),
    ("1", 1.0),
    ("2.5", 2.5),
    ("5", 5.0),
    ("+Inf", f64::INFINITY),
];

/// Classic histograms `request_duration_seconds_{bucket,sum,count}`; the web job on host-b restarts once.
fn histograms(out: &mut Vec<Series>) {
    let mut i = 0u64;
    for job in ["api", "web"] {
        for host in HOSTS {
            let offset = (hash(&[9, i]) % 15_000) as i64;
            let reset = (job == "web" && host == HOSTS[1]).then_some(200);
            // Per scrape: how many observations land in each bucket (not cumulative), and their sum.
            let per_bucket = |k: usize| -> Vec<f64> {
                (0..BUCKETS.len())
                    .map(|b| (hash(&[10, i, k as u64, b as u64]) % (8 - b as u64 + 2 * i)) as f64)
                    .collect()
            };
            let mut cumulative = vec![vec![None; POINTS]; BUCKETS.len()];
            let mut sums = vec![None; POINTS];
            let mut totals = vec![0.0; BUCKETS.len()];
            let mut sum = 0.0;
            for k in 0..POINTS {
                if Some(k) == reset {
                    totals.iter_mut().for_each(|t| *t = 0.0);
                    sum = 0.0;
                }
                let counts = per_bucket(k);
                let mut running = 0.0;
                for (b, n) in counts.iter().enumerate() {
                    running += n;
                    totals[b] += running;
                    cumulative[b][k] = Some(totals[b]);
                    let upper = BUCKETS[b].1.min(10.0);
                    let lower = if b == 0 { 0.0 } else { BUCKETS[b - 1].1 };
                    sum += n * (lower + upper) / 2.0;
                }
                sums[k] = Some(sum);
            }
            let base = [("job", job), ("instance", host)];
            for ((le, _), values) in BUCKETS.iter().zip(cumulative) {
                let labels = [base[0], base[1], ("le", *le)];
                if *le == "+Inf" {
                    out.push(series("request_duration_seconds_count", &base, offset, values.clone()));
                }
                out.push(series("request_duration_seconds_bucket", &labels, offset, values));
            }
            out.push(series("request_duration_seconds_sum", &base, offset, sums));
            i += 1;
        }
    }
}

fn stale() -> Option<f64> {
    Some(f64::from_bits(STALE_NAN_BITS))
}

/// gap_metric's scrapes: silent from scrape 150 to 199, 3 s after the grid.
const GAP: std::ops::Range<usize> = 150..200;
const GAP_OFFSET_MS: i64 = 3_000;

/// The time of gap_metric's last sample before its gap.
pub fn gap_start_ms(data: &Dataset) -> i64 {
    data.start_ms + (GAP.start as i64 - 1) * SCRAPE_MS + GAP_OFFSET_MS
}

/// Series that are not there all the time, and NaN and infinite values.
fn irregular(out: &mut Vec<Series>) {
    // flaky_gauge: f1 and f3 go stale (marker) at 120 and return at 200; f2 goes stale for good at 300.
    for (f, instance) in ["f1", "f2", "f3"].into_iter().enumerate() {
        let values = (0..POINTS)
            .map(|k| match (instance, k) {
                ("f2", 300) | ("f1" | "f3", 120) => stale(),
                ("f2", 301..) | ("f1" | "f3", 121..200) => None,
                _ => Some((k % 50) as f64 * 1.5 + f as f64 * 100.0),
            })
            .collect();
        out.push(series(
            "flaky_gauge",
            &[("job", "flaky"), ("instance", instance)],
            0,
            values,
        ));
    }
    // gap_metric: silent (no marker) longer than the lookback, so queries see a hole.
    for (g, instance) in ["g1", "g2"].into_iter().enumerate() {
        let values = (0..POINTS)
            .map(|k| (!GAP.contains(&k)).then(|| k as f64 * (g + 1) as f64))
            .collect();
        out.push(series("gap_metric", &[("instance", instance)], GAP_OFFSET_MS, values));
    }
    // late_metric: counters that start in the last 20 minutes, one after the other.
    for (l, instance) in ["l1", "l2", "l3"].into_iter().enumerate() {
        let first = 320 + 10 * l;
        let values = (0..POINTS)
            .map(|k| (k >= first).then(|| ((k - first) * (l + 2)) as f64))
            .collect();
        out.push(series(
            "late_metric",
            &[("job", "late"), ("instance", instance)],
            4_000,
            values,
        ));
    }
    type ValueAt = fn(usize) -> f64;
    let kinds: [(&str, ValueAt); 4] = [
        ("nan", |_| f64::NAN),
        ("inf", |_| f64::INFINITY),
        ("neginf", |_| f64::NEG_INFINITY),
        ("mixed", |k| {
            [1.0, f64::NAN, f64::INFINITY, -2.0, f64::NEG_INFINITY, 0.0][k % 6]
        }),
    ];
    for (kind, value) in kinds {
        let values = (0..POINTS).map(|k| Some(value(k))).collect();
        out.push(series("weird_values", &[("kind", kind)], 6_000, values));
    }
}
