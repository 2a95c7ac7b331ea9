//! The distributor's configuration (`distributor:` in YAML). Per-tenant limits (`limits:`) are
//! `heddle_limits::Limits`.
//!
//! Names and defaults follow Mimir (`-distributor.*`). The flag table beside the struct is what the binary
//! hands to `heddle_config::load`, so flags, YAML keys and the reference cannot drift.

use crate::ha_tracker::HaTrackerConfig;
use heddle_config::InvalidKey;
use heddle_config::{FlagKind, FlagSpec, serde_duration};
use serde::{Deserialize, Serialize};
use std::time::Duration;

const MIB: usize = 1024 * 1024;

/// Distributor settings: request size guards and the ingester deadline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DistributorConfig {
    /// Largest accepted (compressed) request body, in bytes. Larger bodies get 413 before they are read.
    pub max_recv_msg_size: usize,
    /// Largest accepted decompressed body, in bytes, checked against the length the snappy header declares
    /// before anything is allocated. Heddle's own key: Mimir applies `max_recv_msg_size` to both.
    pub max_decompressed_size: usize,
    /// Deadline of each push to an ingester.
    #[serde(with = "serde_duration")]
    pub remote_timeout: Duration,
    /// Deduplication of Prometheus HA pairs.
    pub ha_tracker: HaTrackerConfig,
    /// Longest time a push body may take to arrive; a slower sender gets 408 and its connection is closed, so
    /// it cannot hold a connection and a buffer indefinitely. Set from `server.http_server_read_timeout`.
    #[serde(skip)]
    pub body_read_timeout: Duration,
}

impl Default for DistributorConfig {
    fn default() -> Self {
        Self {
            max_recv_msg_size: 100 * MIB,
            max_decompressed_size: 100 * MIB,
            remote_timeout: Duration::from_secs(2),
            ha_tracker: HaTrackerConfig::default(),
            body_read_timeout: Duration::from_secs(30),
        }
    }
}

impl DistributorConfig {
    /// Checks values that would make every request fail.
    pub fn validate(&self) -> Result<(), InvalidKey> {
        if self.max_recv_msg_size == 0 {
            return Err(InvalidKey {
                key: "distributor.max_recv_msg_size",
                reason: "must be greater than 0".into(),
            });
        }
        if self.max_decompressed_size == 0 {
            return Err(InvalidKey {
                key: "distributor.max_decompressed_size",
                reason: "must be greater than 0".into(),
            });
        }
        if self.remote_timeout.is_zero() {
            return Err(InvalidKey {
                key: "distributor.remote_timeout",
                reason: "must be greater than 0s".into(),
            });
        }
        self.ha_tracker.validate()
    }
}

/// Flags for [`DistributorConfig`] (the `distributor.ha_tracker.` keys are in
/// [`crate::HA_TRACKER_FLAGS`]), keyed under `distributor.`.
pub const DISTRIBUTOR_FLAGS: &[FlagSpec] = &[
    FlagSpec {
        flag: "distributor.max-recv-msg-size",
        key: "distributor.max_recv_msg_size",
        kind: FlagKind::Value,
        help: "Largest remote-write request body accepted, in bytes (compressed); larger requests get 413",
    },
    FlagSpec {
        flag: "distributor.max-decompressed-size",
        key: "distributor.max_decompressed_size",
        kind: FlagKind::Value,
        help: "Largest decompressed remote-write body accepted, in bytes, checked before allocating; larger get 400",
    },
    FlagSpec {
        flag: "distributor.remote-timeout",
        key: "distributor.remote_timeout",
        kind: FlagKind::Value,
        help: "Deadline of each push from the distributor to an ingester",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_mimirs_and_valid() {
        let c = DistributorConfig::default();
        assert_eq!(c.max_recv_msg_size, 100 * MIB);
        c.validate().unwrap();
    }

    #[test]
    fn yaml_round_trip_and_unknown_keys() {
        let c: DistributorConfig = serde_norway::from_str("remote_timeout: 250ms\n").unwrap();
        assert_eq!(c.remote_timeout, Duration::from_millis(250));
    }

    #[test]
    fn validate_names_the_key() {
        let c = DistributorConfig {
            remote_timeout: Duration::ZERO,
            ..DistributorConfig::default()
        };
        assert_eq!(c.validate().unwrap_err().key, "distributor.remote_timeout");
    }

    #[test]
    fn flag_tables_cover_every_key() {
        let dist = serde_norway::to_value(DistributorConfig::default()).unwrap();
        for k in dist.as_mapping().unwrap().keys() {
            if k.as_str() == Some("ha_tracker") {
                continue;
            }
            let k = format!("distributor.{}", k.as_str().unwrap());
            assert!(DISTRIBUTOR_FLAGS.iter().any(|f| f.key == k), "no flag for {k}");
        }
    }
}
