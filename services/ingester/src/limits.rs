//! Limits the ingester enforces: per-tenant series limits (checked when a push would create a series) and
//! the instance limits that protect the process itself (Mimir's `ingester.instance_limits`).
//!
//! Per-tenant limits are read from `heddle_limits::Overrides` (the binary hands in the runtime-config overrides
//! the distributor reads too), so they change without a restart. They are *global* (cluster-wide) numbers; an ingester holds only its share of a
//! tenant's series and applies [`local_series_limit`]: `global * replication_factor / ingesters`, with the
//! replication factor and ingester count of the [`Topology`] the binary reads from the ring. A single process
//! (RF 1, one ingester) applies the global number as is.
//!
//! The series limits are checked by the tenant head itself, through its series lifecycle hook
//! ([`SeriesAdmission`]), only when a push would create a series; the head's series count is the tenant's
//! count, and the hook keeps a count per metric name.
//!
//! Rejections by tenant limits are per series and permanent (the distributor answers 400). Rejections by
//! instance limits refuse the whole push with `Unavailable` (503 to the sender, which backs off and retries).

mod instance;
mod series;

use heddle_config::{FlagKind, FlagSpec};
use heddle_limits::{Limits, Overrides};
use heddle_model::TenantId;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, RwLock};

pub(crate) use instance::{InstanceLimiter, bytes_refused};
pub(crate) use series::SeriesAdmission;

/// Where the ingester's limits come from: per-tenant limits, the cluster topology they are divided by, and the
/// instance limiter. One per ingester, shared by every tenant's [`SeriesAdmission`].
#[derive(Debug)]
pub(crate) struct IngesterLimits {
    overrides: RwLock<Arc<Overrides>>,
    topology: RwLock<Arc<dyn TopologySource>>,
    pub(crate) instance: InstanceLimiter,
}

impl IngesterLimits {
    pub(crate) fn new(cfg: InstanceLimitsConfig, registry: &mut Registry) -> Self {
        Self {
            overrides: RwLock::new(Arc::new(Overrides::new(Limits::default()))),
            topology: RwLock::new(Arc::new(Topology::SINGLE_PROCESS)),
            instance: InstanceLimiter::new(cfg, registry),
        }
    }

    /// Reads per-tenant limits from `overrides` from now on.
    pub(crate) fn set_overrides(&self, overrides: Arc<Overrides>) {
        *self.overrides.write().unwrap_or_else(|p| p.into_inner()) = overrides;
    }

    /// Divides global limits by what `topology` says from now on.
    pub(crate) fn set_topology(&self, topology: Arc<dyn TopologySource>) {
        *self.topology.write().unwrap_or_else(|p| p.into_inner()) = topology;
    }

    /// How far past the ingester's clock a sample of `tenant` may be (`limits.creation_grace_period`).
    pub(crate) fn creation_grace_period(&self, tenant: &TenantId) -> std::time::Duration {
        self.overrides
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(tenant.as_str())
            .creation_grace_period
    }

    /// The local (this ingester's) metadata and exemplar limits of `tenant`.
    pub(crate) fn local_entry_limits(&self, tenant: &TenantId) -> EntryLimits {
        let global = self
            .overrides
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(tenant.as_str());
        let topology = self.topology.read().unwrap_or_else(|p| p.into_inner()).topology();
        EntryLimits {
            max_metadata_per_user: topology.local_limit(global.max_global_metadata_per_user),
            // Every replica of a family holds all of its entries: the per-metric limit is not divided.
            max_metadata_per_metric: global.max_global_metadata_per_metric,
            max_exemplars: topology.local_limit(global.max_global_exemplars_per_user),
        }
    }

    /// The local (this ingester's) series limits of `tenant`.
    pub(crate) fn local_series_limits(&self, tenant: &TenantId) -> SeriesLimits {
        let global = self
            .overrides
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(tenant.as_str());
        let topology = self.topology.read().unwrap_or_else(|p| p.into_inner()).topology();
        SeriesLimits {
            max_global_series_per_user: topology.local_limit(global.max_global_series_per_user),
            max_global_series_per_metric: topology.local_limit(global.max_global_series_per_metric),
        }
    }
}

/// What a global limit is divided by: how many copies of each series the cluster keeps and over how many
/// ingesters they spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Topology {
    /// `ingester.ring.replication_factor`.
    pub replication_factor: usize,
    /// Ingesters in the ring; with zone awareness, those in this ingester's zone.
    pub ingesters: usize,
    /// Zones in the ring when zone awareness is on (each holds one copy of every series); 1 otherwise.
    pub zones: usize,
}

impl Topology {
    /// One process holding every series once: the local limit is the global one.
    pub const SINGLE_PROCESS: Topology = Topology {
        replication_factor: 1,
        ingesters: 1,
        zones: 1,
    };

    /// This ingester's share of `global`: [`local_series_limit`] over all ingesters, or, with zones, Mimir's
    /// `global * RF / zones / ingesters in the zone` (one copy per zone, spread over that zone's ingesters).
    pub fn local_limit(&self, global: usize) -> usize {
        let spread = if self.zones > 1 {
            self.ingesters.saturating_mul(self.zones)
        } else {
            self.ingesters
        };
        local_series_limit(global, self.replication_factor, spread)
    }
}

/// Where the ingester reads the cluster topology: the binary follows the ring. Called when a push would create
/// a series, so it must be cheap.
pub trait TopologySource: Send + Sync + std::fmt::Debug + 'static {
    /// The topology now.
    fn topology(&self) -> Topology;
}

impl TopologySource for Topology {
    fn topology(&self) -> Topology {
        *self
    }
}

/// A tenant's metadata and exemplar limits on this ingester (its share of the global numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct EntryLimits {
    /// From `limits.max_global_metadata_per_user` (0 = no limit).
    pub(crate) max_metadata_per_user: usize,
    /// From `limits.max_global_metadata_per_metric` (0 = no limit).
    pub(crate) max_metadata_per_metric: usize,
    /// From `limits.max_global_exemplars_per_user` (0 = exemplars are not kept).
    pub(crate) max_exemplars: usize,
}

/// A tenant's series limits on this ingester (its share of the global numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SeriesLimits {
    /// From `limits.max_global_series_per_user` (0 = no limit).
    pub(crate) max_global_series_per_user: usize,
    /// From `limits.max_global_series_per_metric` (0 = no limit).
    pub(crate) max_global_series_per_metric: usize,
}

/// The share of a global series limit one ingester enforces: `global * replication_factor / ingesters`,
/// rounded up, as Mimir's "local limit" for the classic (non-shuffle-sharded) ring. 0 (no limit) stays 0;
/// with no ingesters known the global limit applies.
pub fn local_series_limit(global: usize, replication_factor: usize, ingesters: usize) -> usize {
    if global == 0 || ingesters == 0 {
        return global;
    }
    let local = (global as u128 * replication_factor.max(1) as u128).div_ceil(ingesters as u128);
    usize::try_from(local)
        .unwrap_or(usize::MAX)
        .min(global.saturating_mul(replication_factor.max(1)))
}

/// `ingester.instance_limits:` (Mimir's names). 0 disables a limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InstanceLimitsConfig {
    /// Most samples per second this ingester accepts, all tenants together.
    pub max_ingestion_rate: f64,
    /// Most tenants with a head on this ingester.
    pub max_tenants: usize,
    /// Most in-memory series on this ingester, all tenants together.
    pub max_series: usize,
    /// Most push requests being handled at once; more are refused at once rather than queued.
    pub max_inflight_push_requests: usize,
    /// Most bytes the push requests being handled may hold together: their bodies and decoded views, reserved
    /// before decoding. Mimir's default is 0 (no limit); Heddle's is 1 GiB, the least that admits one push of
    /// the largest gRPC message accepted (100 MiB) with its decoded view (at most 8 bytes per byte), so any
    /// valid push gets through once others are done while a flood cannot take the process much past 1 GiB of
    /// request memory.
    pub max_inflight_push_requests_bytes: usize,
}

impl Default for InstanceLimitsConfig {
    fn default() -> Self {
        Self {
            max_ingestion_rate: 0.0,
            max_tenants: 0,
            max_series: 0,
            max_inflight_push_requests: 30_000,
            max_inflight_push_requests_bytes: 1024 * 1024 * 1024,
        }
    }
}

impl InstanceLimitsConfig {
    /// Checks the rate is a usable number, naming the YAML key.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.max_ingestion_rate.is_finite() && self.max_ingestion_rate >= 0.0) {
            return Err(format!(
                "ingester.instance_limits.max_ingestion_rate: must be a number of samples per second >= 0, got {}",
                self.max_ingestion_rate
            ));
        }
        Ok(())
    }
}

/// Flags for [`InstanceLimitsConfig`].
pub const INSTANCE_LIMITS_FLAGS: &[FlagSpec] = &[
    FlagSpec {
        flag: "ingester.instance-limits.max-ingestion-rate",
        key: "ingester.instance_limits.max_ingestion_rate",
        kind: FlagKind::Value,
        help: "Most samples per second this ingester accepts across tenants; more get 503 (0 = no limit)",
    },
    FlagSpec {
        flag: "ingester.instance-limits.max-tenants",
        key: "ingester.instance_limits.max_tenants",
        kind: FlagKind::Value,
        help: "Most tenants on this ingester; pushes of further tenants get 503 (0 = no limit)",
    },
    FlagSpec {
        flag: "ingester.instance-limits.max-series",
        key: "ingester.instance_limits.max_series",
        kind: FlagKind::Value,
        help: "Most in-memory series on this ingester; pushes creating more get 503 (0 = no limit)",
    },
    FlagSpec {
        flag: "ingester.instance-limits.max-inflight-push-requests",
        key: "ingester.instance_limits.max_inflight_push_requests",
        kind: FlagKind::Value,
        help: "Most push requests handled at once; more get 503 at once (0 = no limit)",
    },
    FlagSpec {
        flag: "ingester.instance-limits.max-inflight-push-requests-bytes",
        key: "ingester.instance_limits.max_inflight_push_requests_bytes",
        kind: FlagKind::Value,
        help: "Most bytes the pushes being handled may hold together (bodies and decoded views); more get 503 (0 = no limit)",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_limit_is_the_ingesters_share() {
        let cases = [
            ("single process", 150_000, 1, 1, 150_000),
            ("rf3 over 3 ingesters holds everything", 150_000, 3, 3, 150_000),
            ("rf3 over 6", 150_000, 3, 6, 75_000),
            ("rounded up", 10, 3, 4, 8),
            ("off stays off", 0, 3, 6, 0),
            ("no ingesters known", 100, 3, 0, 100),
        ];
        for (name, global, rf, n, want) in cases {
            assert_eq!(local_series_limit(global, rf, n), want, "case {name}");
        }
    }

    #[test]
    fn topology_divides_the_global_limit() {
        let t = |replication_factor, ingesters, zones| Topology {
            replication_factor,
            ingesters,
            zones,
        };
        let cases = [
            ("single process", Topology::SINGLE_PROCESS, 150_000, 150_000),
            ("rf3 over 6 ingesters", t(3, 6, 1), 150_000, 75_000),
            ("rf3 over 10, rounded up", t(3, 10, 1), 100, 30),
            (
                "3 zones of 2: a zone holds one copy over 2",
                t(3, 2, 3),
                150_000,
                75_000,
            ),
            ("3 zones of 1: each holds everything", t(3, 1, 3), 150_000, 150_000),
            ("one zone counts as none", t(3, 6, 1), 60, 30),
            ("off stays off", t(3, 6, 3), 0, 0),
            ("no ingesters known", t(3, 0, 3), 100, 100),
        ];
        for (name, topology, global, want) in cases {
            assert_eq!(topology.local_limit(global), want, "case {name}");
        }
    }

    #[test]
    fn limits_are_divided_by_the_topology_source() {
        let mut r = Registry::default();
        let l = IngesterLimits::new(InstanceLimitsConfig::default(), &mut r);
        let t = TenantId::new("t").unwrap();
        assert_eq!(
            l.local_series_limits(&t),
            SeriesLimits {
                max_global_series_per_user: 150_000,
                max_global_series_per_metric: 0,
            },
            "single process, Mimir's default limits, by default"
        );
        l.set_overrides(Arc::new(Overrides::new(Limits {
            max_global_series_per_user: 1000,
            max_global_series_per_metric: 100,
            ..Limits::default()
        })));
        l.set_topology(Arc::new(Topology {
            replication_factor: 3,
            ingesters: 10,
            zones: 1,
        }));
        assert_eq!(
            l.local_series_limits(&t),
            SeriesLimits {
                max_global_series_per_user: 300,
                max_global_series_per_metric: 30,
            }
        );
    }

    #[test]
    fn defaults_and_flags() {
        let c = InstanceLimitsConfig::default();
        assert_eq!(c.max_inflight_push_requests, 30_000);
        c.validate().unwrap();
        assert!(
            InstanceLimitsConfig {
                max_ingestion_rate: f64::NAN,
                ..c.clone()
            }
            .validate()
            .is_err()
        );
        let v = serde_norway::to_value(&c).unwrap();
        for k in v.as_mapping().unwrap().keys() {
            let k = format!("ingester.instance_limits.{}", k.as_str().unwrap());
            assert!(INSTANCE_LIMITS_FLAGS.iter().any(|f| f.key == k), "no flag for {k}");
        }
    }
}
