//! Ingester and TSDB configuration (`ingester:` and `blocks_storage.tsdb:` in YAML).

use crate::limits::InstanceLimitsConfig;
use heddle_server::{FlagKind, FlagSpec};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

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
    /// `ingester.ring:`: this ingester's place in the hash ring (`heddle-ring`).
    pub ring: heddle_ring::RingConfig,
}

impl Default for IngesterConfig {
    fn default() -> Self {
        Self {
            arena_pool_size: 64,
            arena_max_retained_bytes: 4 * 1024 * 1024,
            instance_limits: InstanceLimitsConfig::default(),
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
}

impl Default for TsdbConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("./tsdb"),
            wal_compression_enabled: true,
            wal_segment_size_bytes: 128 * 1024 * 1024,
            memory_snapshot_on_shutdown: true,
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
        Ok(())
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
];
