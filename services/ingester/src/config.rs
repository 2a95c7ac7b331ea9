//! Ingester and TSDB configuration (`ingester:` and `blocks_storage.tsdb:` in YAML).

use crate::limits::InstanceLimitsConfig;
use heddle_config::{FlagKind, FlagSpec};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// `ingester:` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IngesterConfig {
    /// Request arenas kept for reuse between pushes.
    pub arena_pool_size: usize,
    /// An arena that grew beyond this many bytes for one request is freed instead of pooled.
    pub arena_max_retained_bytes: usize,
    /// Limits protecting this ingester (Mimir's `instance_limits`).
    pub instance_limits: InstanceLimitsConfig,
    /// How long a metric metadata entry is kept after the last push that carried it (Mimir's
    /// `metadata_retain_period`, 10m). Metadata lives in memory only, as in Mimir: it is in neither the WAL nor
    /// the snapshot, so a restarted ingester knows a family's metadata again at the sender's next send
    /// (Prometheus sends all of it every minute).
    #[serde(with = "heddle_config::serde_duration")]
    pub metadata_retain_period: Duration,
    /// `ingester.ring:`: this ingester's place in the hash ring (`heddle-ring`).
    pub ring: heddle_ring::RingConfig,
}

impl Default for IngesterConfig {
    fn default() -> Self {
        Self {
            arena_pool_size: 64,
            arena_max_retained_bytes: 4 * 1024 * 1024,
            instance_limits: InstanceLimitsConfig::default(),
            metadata_retain_period: Duration::from_secs(600),
            ring: heddle_ring::RingConfig::default(),
        }
    }
}

/// `blocks_storage.tsdb:` settings (Mimir's names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TsdbConfig {
    /// Directory holding one sub-directory per tenant (WAL, and later chunks and blocks).
    pub dir: PathBuf,
    /// Snappy-compress WAL records. Mimir's default is false; Heddle's is true: it roughly halves the WAL
    /// and replay reads any mix of compressed and plain records.
    pub wal_compression_enabled: bool,
    /// WAL segment size in bytes (Prometheus: 128 MiB). Must be a multiple of 32 KiB.
    pub wal_segment_size_bytes: usize,
    /// On graceful shutdown, write a chunk snapshot of every head (`chunk_snapshot.NNNNNN.NNNNNNNNNN`) so the next
    /// start loads it instead of replaying the WAL. Mimir's default is false; Heddle's is true: restarts are
    /// several times faster and a bad snapshot only falls back to the WAL.
    pub memory_snapshot_on_shutdown: bool,
    /// Length of a block, and the range no head chunk crosses (Mimir's `block_ranges_period`; one range:
    /// ingesters only cut level-1 blocks, so a list, as Mimir's YAML writes it, may hold one element).
    #[serde(with = "block_range")]
    pub block_ranges_period: Duration,
    /// Local blocks are deleted once shipped and older than this (their end before now minus it).
    #[serde(with = "heddle_config::serde_duration")]
    pub retention_period: Duration,
    /// How often new blocks are uploaded to the bucket; 0 disables shipping (blocks stay local).
    #[serde(with = "heddle_config::serde_duration")]
    pub ship_interval: Duration,
    /// How often heads are checked for a block range that is due.
    #[serde(with = "heddle_config::serde_duration")]
    pub head_compaction_interval: Duration,
    /// A head that received nothing for this long is compacted whole (and shipped); 0 disables it.
    #[serde(with = "heddle_config::serde_duration")]
    pub head_compaction_idle_timeout: Duration,
    /// Compact every head into blocks and ship them on shutdown (Mimir's `flush_blocks_on_shutdown`).
    pub flush_blocks_on_shutdown: bool,
    /// A tenant that received no push for this long, whose head is empty (compacted by the idle compaction)
    /// and whose blocks are all in the bucket, is closed: its head's files are released, it leaves the tenant
    /// map and its local directory is deleted; the next push opens it again. 0 disables it. Mimir's
    /// `close_idle_tsdb_timeout`, with Mimir's default (13h). With shipping off a tenant is closed only when it
    /// has no local block, since the ingester holds the only copy of its blocks.
    #[serde(with = "heddle_config::serde_duration")]
    pub close_idle_tsdb_timeout: Duration,
    /// How far before the ingester's clock an empty head accepts samples (Heddle's own setting; Mimir has no
    /// bound there). 0, the default, means one block range: a head holds no range that is already closed.
    /// Raise it to backfill a fresh tenant with older data, in time order (a head with samples keeps
    /// Prometheus' window, half a block range before its newest sample).
    #[serde(with = "heddle_config::serde_duration")]
    pub empty_head_sample_age_limit: Duration,
}

impl Default for TsdbConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("./tsdb"),
            wal_compression_enabled: true,
            wal_segment_size_bytes: 128 * 1024 * 1024,
            memory_snapshot_on_shutdown: true,
            block_ranges_period: Duration::from_secs(2 * 3600),
            retention_period: Duration::from_secs(24 * 3600),
            ship_interval: Duration::from_secs(60),
            head_compaction_interval: Duration::from_secs(60),
            head_compaction_idle_timeout: Duration::from_secs(3600),
            flush_blocks_on_shutdown: false,
            close_idle_tsdb_timeout: Duration::from_secs(13 * 3600),
            empty_head_sample_age_limit: Duration::ZERO,
        }
    }
}

impl TsdbConfig {
    /// Checks values the WAL would refuse, naming the YAML key.
    pub fn validate(&self) -> Result<(), String> {
        const PAGE: usize = 32 * 1024;
        if self.wal_segment_size_bytes < PAGE || !self.wal_segment_size_bytes.is_multiple_of(PAGE) {
            return Err(format!(
                "blocks_storage.tsdb.wal_segment_size_bytes: {} is not a positive multiple of the 32 KiB page size",
                self.wal_segment_size_bytes
            ));
        }
        if self.dir.as_os_str().is_empty() {
            return Err("blocks_storage.tsdb.dir: must not be empty".into());
        }
        if self.block_ranges_period < Duration::from_secs(60)
            || !self.block_ranges_period.as_millis().is_multiple_of(60_000)
        {
            return Err(format!(
                "blocks_storage.tsdb.block_ranges_period: {:?} must be a whole number of minutes, at least 1m",
                self.block_ranges_period
            ));
        }
        if self.head_compaction_interval.is_zero() {
            return Err("blocks_storage.tsdb.head_compaction_interval: must be positive".into());
        }
        Ok(())
    }

    /// How far before now an empty head accepts samples, in milliseconds (see `empty_head_sample_age_limit`).
    pub fn empty_head_sample_age_limit_ms(&self) -> i64 {
        match self.empty_head_sample_age_limit {
            d if d.is_zero() => self.block_range_ms(),
            d => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        }
    }

    /// The block range in milliseconds.
    pub fn block_range_ms(&self) -> i64 {
        i64::try_from(self.block_ranges_period.as_millis()).unwrap_or(i64::MAX)
    }
}

/// Flags for [`IngesterConfig`].
pub const INGESTER_FLAGS: &[FlagSpec] = &[
    FlagSpec {
        flag: "ingester.arena-pool-size",
        key: "ingester.arena_pool_size",
        kind: FlagKind::Value,
        help: "Request arenas kept for reuse between pushes",
    },
    FlagSpec {
        flag: "ingester.arena-max-retained-bytes",
        key: "ingester.arena_max_retained_bytes",
        kind: FlagKind::Value,
        help: "An arena that grew past this many bytes for one request is freed instead of pooled",
    },
    FlagSpec {
        flag: "ingester.metadata-retain-period",
        key: "ingester.metadata_retain_period",
        kind: FlagKind::Value,
        help: "How long metric metadata is kept after the last push that carried it",
    },
];

/// Flags for [`TsdbConfig`].
pub const TSDB_FLAGS: &[FlagSpec] = &[
    FlagSpec {
        flag: "blocks-storage.tsdb.dir",
        key: "blocks_storage.tsdb.dir",
        kind: FlagKind::Value,
        help: "Directory for the per-tenant TSDBs (WAL, head chunks, blocks)",
    },
    FlagSpec {
        flag: "blocks-storage.tsdb.wal-compression-enabled",
        key: "blocks_storage.tsdb.wal_compression_enabled",
        kind: FlagKind::Bool,
        help: "Snappy-compress WAL records",
    },
    FlagSpec {
        flag: "blocks-storage.tsdb.wal-segment-size-bytes",
        key: "blocks_storage.tsdb.wal_segment_size_bytes",
        kind: FlagKind::Value,
        help: "WAL segment size in bytes, a multiple of 32 KiB",
    },
    FlagSpec {
        flag: "blocks-storage.tsdb.memory-snapshot-on-shutdown",
        key: "blocks_storage.tsdb.memory_snapshot_on_shutdown",
        kind: FlagKind::Bool,
        help: "Write a chunk snapshot of every head on graceful shutdown, so the next start skips WAL replay",
    },
    FlagSpec {
        flag: "blocks-storage.tsdb.block-ranges-period",
        key: "blocks_storage.tsdb.block_ranges_period",
        kind: FlagKind::Value,
        help: "Length of the blocks cut from the head (one range, e.g. 2h)",
    },
    FlagSpec {
        flag: "blocks-storage.tsdb.retention-period",
        key: "blocks_storage.tsdb.retention_period",
        kind: FlagKind::Value,
        help: "Delete local blocks once shipped and older than this",
    },
    FlagSpec {
        flag: "blocks-storage.tsdb.ship-interval",
        key: "blocks_storage.tsdb.ship_interval",
        kind: FlagKind::Value,
        help: "How often new blocks are uploaded to the bucket; 0 disables shipping",
    },
    FlagSpec {
        flag: "blocks-storage.tsdb.head-compaction-interval",
        key: "blocks_storage.tsdb.head_compaction_interval",
        kind: FlagKind::Value,
        help: "How often heads are checked for a block range that is due",
    },
    FlagSpec {
        flag: "blocks-storage.tsdb.head-compaction-idle-timeout",
        key: "blocks_storage.tsdb.head_compaction_idle_timeout",
        kind: FlagKind::Value,
        help: "Compact and ship a head that received nothing for this long; 0 disables it",
    },
    FlagSpec {
        flag: "blocks-storage.tsdb.flush-blocks-on-shutdown",
        key: "blocks_storage.tsdb.flush_blocks_on_shutdown",
        kind: FlagKind::Bool,
        help: "Compact every head into blocks and ship them on shutdown",
    },
    FlagSpec {
        flag: "blocks-storage.tsdb.close-idle-tsdb-timeout",
        key: "blocks_storage.tsdb.close_idle_tsdb_timeout",
        kind: FlagKind::Value,
        help: "Close a tenant with no push for this long once its head is compacted and its blocks shipped, \
               releasing its files and deleting its local directory; 0 disables it",
    },
    FlagSpec {
        flag: "blocks-storage.tsdb.empty-head-sample-age-limit",
        key: "blocks_storage.tsdb.empty_head_sample_age_limit",
        kind: FlagKind::Value,
        help: "How far before now an empty head (a fresh tenant) accepts samples; 0 means one block range. Raise \
               it to backfill a fresh tenant with older data",
    },
];

/// `block_ranges_period` as a duration string, or Mimir's list form holding exactly one.
mod block_range {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        heddle_config::serde_duration::serialize(d, s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrList {
            One(String),
            List(Vec<String>),
        }
        let s = match OneOrList::deserialize(d)? {
            OneOrList::One(s) => s,
            OneOrList::List(mut l) if l.len() == 1 => l.remove(0),
            OneOrList::List(l) => {
                return Err(serde::de::Error::custom(format!(
                    "{} block ranges given; ingesters cut blocks of one range, give one (e.g. 2h)",
                    l.len()
                )));
            }
        };
        heddle_config::parse_duration(&s).map_err(serde::de::Error::custom)
    }
}
