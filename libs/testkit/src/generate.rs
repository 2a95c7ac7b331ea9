//! Deterministic remote-write data: series that look like node-exporter's, with values and timestamps that are
//! pure functions of `(seed, series index, round)`. A writer and a verifier built from the same [`SeriesGen`]
//! agree on every label, timestamp and value bit without sharing any state.

use heddle_model::{Labels, METRIC_NAME, Sample};
use heddle_proto::prometheus::{Label, Sample as ProtoSample, TimeSeries, WriteRequest};
use std::ops::Range;

/// The SplitMix64 finaliser: a fixed, well-mixed 64-bit hash. Used instead of a seeded RNG because its output
/// must never change between releases (a verifier recomputes what an older writer pushed).
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn mix(seed: u64, a: u64, b: u64, salt: u64) -> u64 {
    splitmix64(splitmix64(splitmix64(seed ^ salt) ^ a) ^ b)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    /// Full-precision random values (worst case for XOR compression).
    Gauge,
    /// Integral byte counts.
    BytesGauge,
}

#[derive(Debug)]
struct Family {
    name: &'static str,
    kind: Kind,
    dims: &'static [(&'static str, &'static [&'static str])],
}

const CPUS: &[&str] = &["0", "1", "2", "3", "4", "5", "6", "7"];
const MODES: &[&str] = &["idle", "iowait", "irq", "nice", "softirq", "steal", "system", "user"];
const NET_DEVICES: &[&str] = &["docker0", "eth0", "eth1", "lo"];
const DISKS: &[&str] = &["dm-0", "nvme0n1", "sda", "sdb"];
const MOUNTS: &[&str] = &["/", "/boot", "/home", "/var"];

const FAMILIES: &[Family] = &[
    Family {
        name: "node_cpu_seconds_total",
        kind: Kind::Counter,
        dims: &[("cpu", CPUS), ("mode", MODES)],
    },
    Family {
        name: "node_memory_MemAvailable_bytes",
        kind: Kind::BytesGauge,
        dims: &[],
    },
    Family {
        name: "node_network_receive_bytes_total",
        kind: Kind::Counter,
        dims: &[("device", NET_DEVICES)],
    },
    Family {
        name: "node_disk_read_bytes_total",
        kind: Kind::Counter,
        dims: &[("device", DISKS)],
    },
    Family {
        name: "node_filesystem_avail_bytes",
        kind: Kind::BytesGauge,
        dims: &[("mountpoint", MOUNTS)],
    },
    Family {
        name: "node_load1",
        kind: Kind::Gauge,
        dims: &[],
    },
    Family {
        name: "node_netstat_Tcp_CurrEstab",
        kind: Kind::Gauge,
        dims: &[],
    },
    Family {
        name: "node_context_switches_total",
        kind: Kind::Counter,
        dims: &[],
    },
];

const SALT_BASE: u64 = 1;
const SALT_RATE: u64 = 2;
const SALT_VALUE: u64 = 3;
const SALT_JITTER: u64 = 4;

/// Largest timestamp jitter added to a scheduled sample time, in milliseconds (only when the interval is at
/// least [`MIN_INTERVAL_FOR_JITTER_MS`], so per-series timestamps stay strictly increasing).
pub const MAX_JITTER_MS: i64 = 4;
/// Intervals shorter than this get no jitter.
pub const MIN_INTERVAL_FOR_JITTER_MS: i64 = 10;

/// A deterministic population of `series` series spread round-robin over `metrics` metric names.
///
/// Series `i` belongs to metric `i % metrics` and is the `i / metrics`-th series of that metric. Its labels are
/// node-exporter-like (`__name__`, `instance`, `job`, and `cpu`/`mode`, `device` or `mountpoint` depending on the
/// metric). Its sample for round `r` is at `start_ms + r * interval_ms` plus a few milliseconds of jitter, like
/// a real scrape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesGen {
    /// Seed of every value and jitter.
    pub seed: u64,
    /// Number of series.
    pub series: usize,
    /// Number of metric names (at least 1 is used).
    pub metrics: usize,
    /// The `job` label of every series.
    pub job: String,
    /// Scheduled time of round 0.
    pub start_ms: i64,
    /// Time between rounds.
    pub interval_ms: i64,
}

impl SeriesGen {
    /// `series` series over `metrics` names, job `node`, starting at `start_ms`, one round every 15 s.
    pub fn new(seed: u64, series: usize, metrics: usize, start_ms: i64) -> Self {
        Self {
            seed,
            series,
            metrics,
            job: "node".to_owned(),
            start_ms,
            interval_ms: 15_000,
        }
    }

    fn metrics(&self) -> usize {
        self.metrics.max(1)
    }

    fn family(&self, metric: usize) -> &'static Family {
        &FAMILIES[metric % FAMILIES.len()]
    }

    /// The metric name of metric index `metric`: the node-exporter names first, then the same names with a
    /// `_<n>` suffix.
    pub fn metric_name(&self, metric: usize) -> String {
        let base = self.family(metric).name;
        match metric / FAMILIES.len() {
            0 => base.to_owned(),
            n => format!("{base}_{n}"),
        }
    }

    /// All metric names, in metric-index order (only those that have at least one series).
    pub fn metric_names(&self) -> Vec<String> {
        (0..self.metrics().min(self.series))
            .map(|m| self.metric_name(m))
            .collect()
    }

    /// The metric index of series `i`.
    pub fn metric_of(&self, i: usize) -> usize {
        i % self.metrics()
    }

    /// The series indices of metric `metric`.
    pub fn series_of_metric(&self, metric: usize) -> impl Iterator<Item = usize> + use<> {
        (metric..self.series).step_by(self.metrics())
    }

    /// Labels of series `i`, sorted by name.
    pub fn labels(&self, i: usize) -> Vec<(String, String)> {
        let metric = self.metric_of(i);
        let family = self.family(metric);
        let k = i / self.metrics();
        let fanout: usize = family.dims.iter().map(|(_, vals)| vals.len()).product();
        let host = k / fanout.max(1);
        let mut combo = k % fanout.max(1);
        let mut out = Vec::with_capacity(family.dims.len() + 3);
        out.push((METRIC_NAME.to_owned(), self.metric_name(metric)));
        // Least significant dimension last, so consecutive series differ in the last label (e.g. `mode`).
        for (name, values) in family.dims.iter().rev() {
            out.push(((*name).to_owned(), values[combo % values.len()].to_owned()));
            combo /= values.len();
        }
        out.push((
            "instance".to_owned(),
            format!("10.{}.{}.{}:9100", (host >> 16) & 0xff, (host >> 8) & 0xff, host & 0xff),
        ));
        out.push(("job".to_owned(), self.job.clone()));
        out.sort();
        out
    }

    /// Labels of series `i` as protobuf labels.
    pub fn proto_labels(&self, i: usize) -> Vec<Label> {
        self.labels(i)
            .into_iter()
            .map(|(name, value)| Label { name, value })
            .collect()
    }

    /// Labels of series `i` as a model label set.
    pub fn model_labels(&self, i: usize) -> Labels {
        let pairs = self.labels(i);
        // Sorted, unique, non-empty by construction; an empty set here would be a generator bug.
        let labels = Labels::from_sorted(pairs.iter().map(|(n, v)| (n.as_str(), v.as_str())));
        debug_assert!(labels.is_ok(), "generator produced an invalid label set: {pairs:?}");
        labels.unwrap_or_default()
    }

    /// Timestamp of series `i` in round `round`.
    pub fn timestamp(&self, i: usize, round: u32) -> i64 {
        let scheduled = self.start_ms + i64::from(round) * self.interval_ms;
        if self.interval_ms < MIN_INTERVAL_FOR_JITTER_MS {
            return scheduled;
        }
        let jitter = mix(self.seed, i as u64, u64::from(round), SALT_JITTER) % (MAX_JITTER_MS as u64 + 1);
        scheduled + jitter as i64
    }

    /// Value of series `i` in round `round`: counters grow by a per-series rate, gauges are random (integral
    /// for byte gauges, full-precision otherwise).
    pub fn value(&self, i: usize, round: u32) -> f64 {
        let (seed, idx) = (self.seed, i as u64);
        match self.family(self.metric_of(i)).kind {
            Kind::Counter => {
                let base = (mix(seed, idx, 0, SALT_BASE) % 1_000_000) as f64;
                let rate = (mix(seed, idx, 0, SALT_RATE) % 4096) as f64 * 0.25 + 0.125;
                base + f64::from(round) * rate
            }
            Kind::Gauge => {
                let h = mix(seed, idx, u64::from(round), SALT_VALUE);
                (h >> 11) as f64 / (1u64 << 53) as f64 * 1000.0
            }
            Kind::BytesGauge => (mix(seed, idx, u64::from(round), SALT_VALUE) % (64 << 30)) as f64,
        }
    }

    /// The sample of series `i` in round `round`.
    pub fn sample(&self, i: usize, round: u32) -> Sample {
        Sample::new(self.timestamp(i, round), self.value(i, round))
    }

    /// Inclusive time range covering every sample of rounds `0..rounds`.
    pub fn time_range(&self, rounds: u32) -> (i64, i64) {
        let last = self.start_ms + i64::from(rounds.saturating_sub(1)) * self.interval_ms;
        let jitter = if self.interval_ms < MIN_INTERVAL_FOR_JITTER_MS {
            0
        } else {
            MAX_JITTER_MS
        };
        (self.start_ms, last + jitter)
    }

    /// The time series `i` with one sample per round in `rounds`.
    pub fn timeseries(&self, i: usize, rounds: Range<u32>) -> TimeSeries {
        TimeSeries {
            labels: self.proto_labels(i),
            samples: rounds
                .map(|r| {
                    let s = self.sample(i, r);
                    ProtoSample {
                        value: s.v,
                        timestamp: s.t,
                    }
                })
                .collect(),
            ..Default::default()
        }
    }

    /// A write request with the series in `series` (clamped to the population), each with rounds `rounds`.
    pub fn write_request(&self, series: Range<usize>, rounds: Range<u32>) -> WriteRequest {
        let series = series.start.min(self.series)..series.end.min(self.series);
        WriteRequest {
            timeseries: series.map(|i| self.timeseries(i, rounds.clone())).collect(),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn labels_are_sorted_unique_and_distinct_per_series() {
        let g = SeriesGen::new(7, 5000, 13, 1_700_000_000_000);
        let mut seen = HashSet::new();
        for i in 0..g.series {
            let labels = g.labels(i);
            assert!(labels.windows(2).all(|w| w[0].0 < w[1].0), "series {i}: {labels:?}");
            assert!(labels.iter().all(|(n, v)| !n.is_empty() && !v.is_empty()), "series {i}");
            assert_eq!(
                labels[0],
                (METRIC_NAME.to_owned(), g.metric_name(g.metric_of(i))),
                "series {i}"
            );
            assert!(seen.insert(labels), "series {i} duplicates another series");
        }
    }

    #[test]
    fn metric_names_cycle_with_suffix() {
        let g = SeriesGen::new(0, 100, 10, 0);
        assert_eq!(g.metric_name(0), "node_cpu_seconds_total");
        assert_eq!(g.metric_name(FAMILIES.len()), "node_cpu_seconds_total_1");
        assert_eq!(g.metric_names().len(), 10);
        let few = SeriesGen::new(0, 3, 10, 0);
        assert_eq!(few.metric_names().len(), 3);
        let total: usize = (0..10).map(|m| g.series_of_metric(m).count()).sum();
        assert_eq!(total, 100);
        assert!(g.series_of_metric(3).all(|i| g.metric_of(i) == 3));
    }

    #[test]
    fn deterministic_and_seed_sensitive() {
        let a = SeriesGen::new(1, 100, 8, 1000);
        let b = SeriesGen::new(1, 100, 8, 1000);
        let c = SeriesGen::new(2, 100, 8, 1000);
        assert_eq!(a.write_request(0..100, 0..3), b.write_request(0..100, 0..3));
        assert_ne!(a.write_request(0..100, 0..3), c.write_request(0..100, 0..3));
    }

    #[test]
    fn timestamps_increase_and_stay_in_range() {
        let g = SeriesGen::new(3, 64, 4, 1_000_000);
        let rounds = 20;
        let (lo, hi) = g.time_range(rounds);
        for i in 0..g.series {
            let ts: Vec<i64> = (0..rounds).map(|r| g.timestamp(i, r)).collect();
            assert!(ts.windows(2).all(|w| w[0] < w[1]), "series {i}: {ts:?}");
            assert!(
                ts.iter().all(|t| (lo..=hi).contains(t)),
                "series {i}: {ts:?} outside {lo}..={hi}"
            );
        }
        let tight = SeriesGen {
            interval_ms: 1,
            ..g.clone()
        };
        assert_eq!(tight.timestamp(5, 3), 1_000_003);
        assert_eq!(tight.time_range(4), (1_000_000, 1_000_003));
    }

    #[test]
    fn counters_grow_and_values_are_finite() {
        let g = SeriesGen::new(9, 80, 8, 0);
        for i in 0..g.series {
            let vals: Vec<f64> = (0..10).map(|r| g.value(i, r)).collect();
            assert!(vals.iter().all(|v| v.is_finite()), "series {i}");
            if g.labels(i)[0].1.ends_with("_total") {
                assert!(vals.windows(2).all(|w| w[0] < w[1]), "counter {i}: {vals:?}");
            }
        }
    }

    #[test]
    fn write_request_clamps_range() {
        let g = SeriesGen::new(0, 10, 2, 0);
        let req = g.write_request(5..50, 0..2);
        assert_eq!(req.timeseries.len(), 5);
        assert!(req.timeseries.iter().all(|ts| ts.samples.len() == 2));
    }

    #[test]
    fn model_labels_match_pairs() {
        let g = SeriesGen::new(0, 10, 3, 0);
        let l = g.model_labels(4);
        assert_eq!(l.len(), g.labels(4).len());
        assert_eq!(l.get("job"), Some("node"));
    }
}
