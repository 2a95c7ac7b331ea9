//! Scenario files (`loadtest/scenarios/*.yaml`): what data to push, how fast, for how long, and what must hold
//! at the end.
//!
//! ```yaml
//! name: steady
//! description: node-exporter shaped series, one sample each per round, as fast as the target accepts
//! duration: 60s          # push for this long (or until max_rounds)
//! max_rounds: 240        # upper bound on rounds; timestamps start max_rounds * interval in the past
//! interval: 15s          # time between the timestamps of consecutive rounds (the scrape interval)
//! rate: 0                # target samples/s over all tenants; 0 = as fast as the target acknowledges
//! series: 10000          # active series per round, over all tenants
//! metrics: 40            # metric names the series are spread over
//! batch: 2000            # series per request
//! concurrency: 4         # requests in flight
//! churn: { share: 0.2, every_rounds: 5 }     # optional: this share of series is replaced every K rounds
//! tenants: { count: 8, skew: 1.2 }           # optional: series split over tenants, Zipf-weighted
//! bursts: { on: 2s, off: 3s }                # optional: send only during `on`, pause for `off`
//! settle: 15s            # optional: wait this long after the last round before reading the target's RSS
//! checks: { verify: true, max_errors: 0, max_p99_ms: 2000 }
//! ```

use crate::LoadtestError;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::path::Path;
use std::time::Duration;

/// A parsed and validated scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name, used in reports and as the default `job` label prefix.
    pub name: String,
    /// What the scenario exercises, for the report.
    #[serde(default)]
    pub description: String,
    /// How long to push.
    #[serde(with = "human_duration")]
    pub duration: Duration,
    /// Rounds are never more than this; also fixes how far in the past round 0 is.
    #[serde(default = "default_max_rounds")]
    pub max_rounds: u32,
    /// Time between the timestamps of consecutive rounds.
    #[serde(with = "human_duration", default = "default_interval")]
    pub interval: Duration,
    /// Target samples per second over all tenants; 0 = unlimited.
    #[serde(default)]
    pub rate: u64,
    /// Active series per round, over all tenants.
    pub series: usize,
    /// Metric names per tenant.
    #[serde(default = "default_metrics")]
    pub metrics: usize,
    /// Series per request.
    #[serde(default = "default_batch")]
    pub batch: usize,
    /// Requests in flight.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Seed of values and jitter.
    #[serde(default = "default_seed")]
    pub seed: u64,
    #[serde(default)]
    pub churn: Option<Churn>,
    #[serde(default)]
    pub tenants: Option<Tenants>,
    #[serde(default)]
    pub bursts: Option<Bursts>,
    #[serde(default)]
    pub checks: Checks,
    /// How long to wait after the last round before reading the target's memory (default 0): allocators and
    /// garbage collectors return memory freed in a burst (every series' previous chunk at a chunk cut) over
    /// seconds, so a reading taken at once depends on how recently the target got there.
    #[serde(with = "human_duration", default)]
    pub settle: Duration,
}

/// Series churn: `share` of the series slots get a new identity (new labels) every `every_rounds` rounds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Churn {
    pub share: f64,
    pub every_rounds: u32,
}

/// Several tenants: tenant `k` (0-based) gets a share of the series proportional to `1 / (k + 1)^skew`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tenants {
    pub count: usize,
    #[serde(default)]
    pub skew: f64,
}

/// A bursty sender: sends during `on`, then stays silent for `off`, repeatedly.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bursts {
    #[serde(with = "human_duration")]
    pub on: Duration,
    #[serde(with = "human_duration")]
    pub off: Duration,
}

/// What must hold at the end for the run to pass.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Checks {
    /// Read everything back and compare (the `verified` field of the result).
    pub verify: bool,
    /// Requests that may finally fail.
    pub max_errors: u64,
    /// Largest acceptable p99 push latency, when set.
    pub max_p99_ms: Option<f64>,
    /// Smallest acceptable throughput, when set.
    pub min_samples_per_second: Option<f64>,
}

impl Default for Checks {
    fn default() -> Self {
        Self {
            verify: true,
            max_errors: 0,
            max_p99_ms: None,
            min_samples_per_second: None,
        }
    }
}

fn default_max_rounds() -> u32 {
    240
}
fn default_interval() -> Duration {
    Duration::from_secs(15)
}
fn default_metrics() -> usize {
    40
}
fn default_batch() -> usize {
    2000
}
fn default_concurrency() -> usize {
    4
}
fn default_seed() -> u64 {
    1
}

impl Scenario {
    /// Reads, parses and validates a scenario file.
    pub fn load(path: &Path) -> Result<Self, LoadtestError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| LoadtestError::Scenario(format!("reading {}: {e}", path.display())))?;
        Self::parse(&text).map_err(|e| match e {
            LoadtestError::Scenario(m) => LoadtestError::Scenario(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    /// Parses and validates scenario YAML.
    pub fn parse(yaml: &str) -> Result<Self, LoadtestError> {
        let s: Scenario = serde_norway::from_str(yaml).map_err(|e| LoadtestError::Scenario(e.to_string()))?;
        s.validate()?;
        Ok(s)
    }

    /// Checks the values, naming the key that is wrong.
    pub fn validate(&self) -> Result<(), LoadtestError> {
        let bad = |m: String| Err(LoadtestError::Scenario(m));
        if self.name.is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return bad(format!("name {:?} must be non-empty [A-Za-z0-9_-]", self.name));
        }
        for (key, v) in [
            ("series", self.series),
            ("metrics", self.metrics),
            ("batch", self.batch),
            ("concurrency", self.concurrency),
            ("max_rounds", self.max_rounds as usize),
        ] {
            if v == 0 {
                return bad(format!("{key} must be at least 1"));
            }
        }
        if self.duration.is_zero() {
            return bad("duration must be positive".to_owned());
        }
        if self.interval < Duration::from_millis(10) {
            return bad(format!("interval {:?} must be at least 10ms", self.interval));
        }
        if let Some(c) = self.churn
            && (!(0.0..=1.0).contains(&c.share) || c.every_rounds == 0)
        {
            return bad(format!(
                "churn.share ({}) must be in [0, 1] and churn.every_rounds ({}) at least 1",
                c.share, c.every_rounds
            ));
        }
        if let Some(t) = self.tenants {
            if t.count == 0 || t.count > self.series {
                return bad(format!(
                    "tenants.count ({}) must be in 1..=series ({})",
                    t.count, self.series
                ));
            }
            if !(0.0..=4.0).contains(&t.skew) {
                return bad(format!("tenants.skew ({}) must be in [0, 4]", t.skew));
            }
        }
        if let Some(b) = self.bursts
            && b.on.is_zero()
        {
            return bad("bursts.on must be positive".to_owned());
        }
        Ok(())
    }

    /// Series per tenant (largest first), summing to `series`; every tenant gets at least one.
    pub fn tenant_sizes(&self) -> Vec<usize> {
        let Some(t) = self.tenants else {
            return vec![self.series];
        };
        let weights: Vec<f64> = (0..t.count).map(|k| 1.0 / ((k + 1) as f64).powf(t.skew)).collect();
        let total: f64 = weights.iter().sum();
        let spare = self.series - t.count;
        let mut sizes: Vec<usize> = weights
            .iter()
            .map(|w| 1 + (w / total * spare as f64).floor() as usize)
            .collect();
        let assigned: usize = sizes.iter().sum();
        sizes[0] += self.series - assigned;
        sizes
    }
}

/// Parses `1500ms`, `30s`, `2m`, `1h`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("invalid duration {s:?}"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("invalid duration unit in {s:?}: use ms, s, m or h")),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("invalid duration {s:?}"));
    }
    Ok(Duration::from_secs_f64(secs))
}

pub(crate) mod human_duration {
    use super::*;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{}ms", d.as_millis()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Secs(f64),
        }
        match Raw::deserialize(d)? {
            Raw::Text(t) => parse_duration(&t).map_err(serde::de::Error::custom),
            Raw::Secs(n) => parse_duration(&n.to_string()).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: &str = "name: t\nduration: 2s\nseries: 100\n";

    #[test]
    fn durations() {
        for (text, ms) in [
            ("1500ms", 1500),
            ("30s", 30_000),
            ("2m", 120_000),
            ("1h", 3_600_000),
            ("0.5", 500),
        ] {
            assert_eq!(parse_duration(text), Ok(Duration::from_millis(ms)), "{text}");
        }
        for bad in ["", "s", "3d", "-1s", "1.2.3s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn defaults_and_validation() {
        let s = Scenario::parse(MIN).expect("minimal");
        assert_eq!((s.batch, s.concurrency, s.metrics, s.max_rounds), (2000, 4, 40, 240));
        assert!(s.checks.verify);
        assert_eq!(s.settle, Duration::ZERO);
        let settled = Scenario::parse(&format!("{MIN}settle: 15s\n")).expect("settle");
        assert_eq!(settled.settle, Duration::from_secs(15));
        for (name, yaml, needle) in [
            ("zero series", "name: t\nduration: 2s\nseries: 0\n".to_owned(), "series"),
            (
                "bad churn",
                format!("{MIN}churn: {{share: 1.5, every_rounds: 2}}\n"),
                "churn.share",
            ),
            (
                "too many tenants",
                format!("{MIN}tenants: {{count: 101}}\n"),
                "tenants.count",
            ),
            ("unknown key", format!("{MIN}sereis: 4\n"), "unknown field"),
            ("tiny interval", format!("{MIN}interval: 1ms\n"), "interval"),
            ("bad name", "name: a b\nduration: 2s\nseries: 1\n".to_owned(), "name"),
        ] {
            let err = Scenario::parse(&yaml).expect_err(name).to_string();
            assert!(err.contains(needle), "{name}: {err}");
        }
    }

    #[test]
    fn tenant_sizes_are_skewed_and_sum_up() {
        let s = Scenario::parse(&format!("{MIN}tenants: {{count: 5, skew: 1.0}}\n")).expect("parse");
        let sizes = s.tenant_sizes();
        assert_eq!(sizes.iter().sum::<usize>(), 100);
        assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "{sizes:?}");
        assert!(sizes[0] > 3 * sizes[4], "{sizes:?}");
        let flat = Scenario::parse(&format!("{MIN}tenants: {{count: 4}}\n")).expect("parse");
        assert_eq!(flat.tenant_sizes(), vec![25, 25, 25, 25]);
    }
}
