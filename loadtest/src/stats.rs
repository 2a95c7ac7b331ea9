//! Latency percentiles.

use serde::Serialize;
use std::time::Duration;

/// Request latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// Collects request latencies (one entry per HTTP attempt).
#[derive(Debug, Default, Clone)]
pub struct Latencies {
    micros: Vec<u64>,
}

impl Latencies {
    /// Records one latency.
    pub fn record(&mut self, d: Duration) {
        self.micros.push(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    }

    /// Appends another collection.
    pub fn merge(&mut self, other: &Latencies) {
        self.micros.extend_from_slice(&other.micros);
    }

    /// Number of recorded latencies.
    pub fn len(&self) -> usize {
        self.micros.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.micros.is_empty()
    }

    /// Nearest-rank percentiles; all zero when empty.
    pub fn summary(&self) -> LatencySummary {
        let mut v = self.micros.clone();
        v.sort_unstable();
        let rank = |q: f64| -> f64 {
            if v.is_empty() {
                return 0.0;
            }
            let idx = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
            v[idx] as f64 / 1000.0
        };
        LatencySummary {
            p50: rank(0.5),
            p90: rank(0.9),
            p99: rank(0.99),
            max: rank(1.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut l = Latencies::default();
        for ms in 1..=100u64 {
            l.record(Duration::from_millis(ms));
        }
        assert_eq!(
            l.summary(),
            LatencySummary {
                p50: 50.0,
                p90: 90.0,
                p99: 99.0,
                max: 100.0
            }
        );
        assert_eq!(Latencies::default().summary(), LatencySummary::default());
        let mut one = Latencies::default();
        one.record(Duration::from_micros(1500));
        assert_eq!(one.summary().p50, 1.5);
        assert_eq!(one.summary().max, 1.5);
    }
}
