//! The compactor's configuration (YAML section `compactor`), with Mimir's flag names.

use std::path::PathBuf;
use std::time::Duration;

use heddle_config::{FlagKind, FlagSpec, serde_duration};
use serde::{Deserialize, Serialize};

/// Compactor settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompactorConfig {
    /// Block ranges, shortest first, each a multiple of the one before: overlapping blocks (the replicas of one
    /// range) are merged first, then blocks are compacted into each longer range in turn. The first must be
    /// the ingesters' `blocks_storage.tsdb.block_ranges_period`. Comma-separated in YAML and on the command
    /// line, as Mimir's `compactor.block_ranges`.
    #[serde(with = "duration_list")]
    pub block_ranges: Vec<Duration>,
    /// How often the compactor looks at every tenant.
    #[serde(with = "serde_duration")]
    pub compaction_interval: Duration,
    /// How long a block marked for deletion stays in the bucket before the compactor deletes it. Queriers stop
    /// reading marked blocks after `blocks_storage.bucket_store.ignore_deletion_marks_delay`, which must be
    /// shorter, so no query is still reading a block when it goes.
    #[serde(with = "serde_duration")]
    pub deletion_delay: Duration,
    /// Where the compactor downloads the blocks it merges and writes the merged block before uploading it;
    /// emptied at the start of each compaction.
    pub data_dir: PathBuf,
    /// How long a level-1 block waits before it is compacted, so the blocks the other replicas ship for the
    /// same range arrive first and the range is merged once rather than once per replica (Mimir's
    /// `compactor.first_level_compaction_wait_period`).
    #[serde(with = "serde_duration")]
    pub first_level_compaction_wait_period: Duration,
    /// How long a block directory without `meta.json` and without a deletion mark (an upload cut short, by an
    /// ingester or a compactor) stays before the compactor deletes it; 0 never deletes them. Far longer than
    /// any upload takes (Mimir's `compactor.partial_block_deletion_delay`, 1d).
    #[serde(with = "serde_duration")]
    pub partial_block_deletion_delay: Duration,
}

impl Default for CompactorConfig {
    fn default() -> Self {
        Self {
            block_ranges: vec![
                Duration::from_secs(2 * 3600),
                Duration::from_secs(12 * 3600),
                Duration::from_secs(24 * 3600),
            ],
            compaction_interval: Duration::from_secs(3600),
            deletion_delay: Duration::from_secs(12 * 3600),
            data_dir: PathBuf::from("./data-compactor"),
            first_level_compaction_wait_period: Duration::from_secs(25 * 60),
            partial_block_deletion_delay: Duration::from_secs(24 * 3600),
        }
    }
}

/// Flags for [`CompactorConfig`], keyed under `compactor.`.
pub const COMPACTOR_FLAGS: &[FlagSpec] = &[
    FlagSpec {
        flag: "compactor.block-ranges",
        key: "compactor.block_ranges",
        kind: FlagKind::Value,
        help: "Comma-separated block ranges, shortest first (the ingesters' block range), each a multiple of the one before",
    },
    FlagSpec {
        flag: "compactor.compaction-interval",
        key: "compactor.compaction_interval",
        kind: FlagKind::Value,
        help: "How often the compactor compacts every tenant",
    },
    FlagSpec {
        flag: "compactor.deletion-delay",
        key: "compactor.deletion_delay",
        kind: FlagKind::Value,
        help: "How long a block marked for deletion stays in the bucket before the compactor deletes it",
    },
    FlagSpec {
        flag: "compactor.data-dir",
        key: "compactor.data_dir",
        kind: FlagKind::Value,
        help: "Local directory for the blocks being compacted",
    },
    FlagSpec {
        flag: "compactor.first-level-compaction-wait-period",
        key: "compactor.first_level_compaction_wait_period",
        kind: FlagKind::Value,
        help: "How long a block shipped by an ingester waits before it is compacted, so the other replicas' arrive",
    },
    FlagSpec {
        flag: "compactor.partial-block-deletion-delay",
        key: "compactor.partial_block_deletion_delay",
        kind: FlagKind::Value,
        help: "How long an incomplete block (no meta.json, an upload cut short) stays before it is deleted (0 = never)",
    },
];

impl CompactorConfig {
    /// Checks values that deserialize but make no sense; the message names the YAML key.
    pub fn validate(&self) -> Result<(), String> {
        let Some(first) = self.block_ranges.first() else {
            return Err("compactor.block_ranges: at least one range is needed".into());
        };
        if first.as_millis() == 0 {
            return Err("compactor.block_ranges: ranges must be longer than 0".into());
        }
        for w in self.block_ranges.windows(2) {
            let (a, b) = (w[0].as_millis(), w[1].as_millis());
            if b <= a || b % a != 0 {
                return Err(format!(
                    "compactor.block_ranges: {} does not follow {} as a longer multiple of it",
                    heddle_config::format_duration(w[1]),
                    heddle_config::format_duration(w[0])
                ));
            }
        }
        if self.compaction_interval.is_zero() {
            return Err("compactor.compaction_interval: must be longer than 0".into());
        }
        if self.data_dir.as_os_str().is_empty() {
            return Err("compactor.data_dir: must name a directory".into());
        }
        Ok(())
    }

    /// The block ranges in milliseconds.
    pub fn ranges_ms(&self) -> Vec<i64> {
        self.block_ranges
            .iter()
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .collect()
    }
}

/// A list of durations written as one comma-separated string (`2h,12h,24h`), as Mimir's `DurationList`.
mod duration_list {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(list: &[Duration], s: S) -> Result<S::Ok, S::Error> {
        let text: Vec<String> = list.iter().map(|d| heddle_config::format_duration(*d)).collect();
        s.serialize_str(&text.join(","))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Duration>, D::Error> {
        let text = String::deserialize(d)?;
        text.split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| heddle_config::parse_duration(p).map_err(serde::de::Error::custom))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_mimirs_and_valid() {
        let c = CompactorConfig::default();
        c.validate().unwrap();
        assert_eq!(c.ranges_ms(), [7_200_000, 43_200_000, 86_400_000]);
        let yaml = serde_norway::to_string(&c).unwrap();
        assert!(yaml.contains("block_ranges: 2h,12h,24h"), "{yaml}");
        let back: CompactorConfig = serde_norway::from_str(&yaml).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn ranges_must_grow_by_multiples() {
        let cases = [
            ("2h,12h,24h", None),
            ("1m", None),
            ("", Some("at least one range")),
            ("2h,3h", Some("does not follow")),
            ("2h,2h", Some("does not follow")),
            ("12h,2h", Some("does not follow")),
            ("0s", Some("longer than 0")),
        ];
        for (ranges, want) in cases {
            let c: CompactorConfig = serde_norway::from_str(&format!("block_ranges: \"{ranges}\"")).unwrap();
            match (c.validate(), want) {
                (Ok(()), None) => {}
                (Err(e), Some(text)) => assert!(e.contains(text), "case {ranges:?}: {e}"),
                (got, want) => panic!("case {ranges:?}: got {got:?}, want {want:?}"),
            }
        }
    }
}
