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
    /// Limits protecting this distributor process (Mimir's `distributor.instance_limits`).
    pub instance_limits: DistributorInstanceLimits,
    /// The key's former place: the promoted resource attributes are a per-tenant limit now
    /// (`limits.promote_otel_resource_attributes`, same flag). Read only so that a config still setting it
    /// is refused with a message saying where it went, instead of "unknown field".
    #[serde(skip_serializing)]
    pub otel_promote_resource_attributes: Option<Vec<String>>,
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
            instance_limits: DistributorInstanceLimits::default(),
            otel_promote_resource_attributes: None,
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
        if self.otel_promote_resource_attributes.is_some() {
            return Err(InvalidKey {
                key: "distributor.otel_promote_resource_attributes",
                reason: "moved to the per-tenant `limits.promote_otel_resource_attributes` (the flag \
                         --distributor.otel-promote-resource-attributes is unchanged); move the list there"
                    .into(),
            });
        }
        let limit = self.instance_limits.max_inflight_push_requests_bytes;
        let one_request = self.max_request_inflight_bytes();
        if limit > 0 && limit < one_request {
            return Err(InvalidKey {
                key: "distributor.instance_limits.max_inflight_push_requests_bytes",
                reason: format!(
                    "{limit} bytes cannot hold one request of the largest size the size limits accept ({one_request} \
                     bytes: `max_recv_msg_size` + `max_decompressed_size` + its decoded view of at most {} times \
                     that); such a request would be refused for ever. Raise it, set 0 (no limit), or lower the size limits",
                    heddle_proto::MAX_DECODED_BYTES_PER_INPUT_BYTE
                ),
            });
        }
        self.ha_tracker.validate()
    }

    /// The most bytes one request can hold in flight under the size limits: its compressed body, its
    /// decompressed copy and its decoded view (bounded by `heddle_proto::max_decoded_bytes`).
    pub fn max_request_inflight_bytes(&self) -> usize {
        self.max_recv_msg_size
            .saturating_add(self.max_decompressed_size)
            .saturating_add(heddle_proto::max_decoded_bytes(self.max_decompressed_size))
    }
}

/// `distributor.instance_limits:` (Mimir's names). 0 disables a limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DistributorInstanceLimits {
    /// Most bytes all push requests being handled may hold together: bodies as they arrive, their decompressed
    /// copies and their decoded views, each reserved before it is allocated. A request that would pass it is
    /// refused with 503 at once (never queued). Mimir's default is 0 (no limit); Heddle's is 1 GiB, the least
    /// that admits one request of the largest size the default size limits accept (100 MiB body + 100 MiB
    /// decompressed + at most 800 MiB decoded), so any valid request gets through once the others are done, while
    /// a flood of large pushes can no longer take the process past about 1 GiB of request memory.
    pub max_inflight_push_requests_bytes: usize,
}

impl Default for DistributorInstanceLimits {
    fn default() -> Self {
        Self {
            max_inflight_push_requests_bytes: 1024 * MIB,
        }
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
        flag: "distributor.instance-limits.max-inflight-push-requests-bytes",
        key: "distributor.instance_limits.max_inflight_push_requests_bytes",
        kind: FlagKind::Value,
        help: "Most bytes in-flight push requests may hold together (bodies, decompressed and decoded); more get 503 (0 = no limit)",
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
        let moved: DistributorConfig =
            serde_norway::from_str("otel_promote_resource_attributes: [host.name]\n").unwrap();
        let err = moved.validate().unwrap_err();
        assert_eq!(err.key, "distributor.otel_promote_resource_attributes");
        assert!(
            err.reason.contains("limits.promote_otel_resource_attributes"),
            "{}",
            err.reason
        );
    }

    #[test]
    fn the_inflight_limit_holds_one_largest_request() {
        let c = DistributorConfig::default();
        assert!(c.instance_limits.max_inflight_push_requests_bytes >= c.max_request_inflight_bytes());
        let small = DistributorConfig {
            instance_limits: DistributorInstanceLimits {
                max_inflight_push_requests_bytes: 64 * MIB,
            },
            ..DistributorConfig::default()
        };
        let err = small.validate().unwrap_err();
        assert_eq!(err.key, "distributor.instance_limits.max_inflight_push_requests_bytes");
        assert!(err.reason.contains("refused for ever"), "{}", err.reason);
        DistributorConfig {
            max_recv_msg_size: 4 * MIB,
            max_decompressed_size: 6 * MIB,
            ..small.clone()
        }
        .validate()
        .expect("smaller size limits fit the smaller budget");
        DistributorConfig {
            instance_limits: DistributorInstanceLimits {
                max_inflight_push_requests_bytes: 0,
            },
            ..small
        }
        .validate()
        .expect("0 is no limit");
    }

    #[test]
    fn flag_tables_cover_every_key() {
        let dist = serde_norway::to_value(DistributorConfig::default()).unwrap();
        for k in dist.as_mapping().unwrap().keys() {
            if k.as_str() == Some("ha_tracker") {
                continue;
            }
            if k.as_str() == Some("instance_limits") {
                for inner in dist["instance_limits"].as_mapping().unwrap().keys() {
                    let k = format!("distributor.instance_limits.{}", inner.as_str().unwrap());
                    assert!(DISTRIBUTOR_FLAGS.iter().any(|f| f.key == k), "no flag for {k}");
                }
                continue;
            }
            let k = format!("distributor.{}", k.as_str().unwrap());
            assert!(DISTRIBUTOR_FLAGS.iter().any(|f| f.key == k), "no flag for {k}");
        }
    }
}
