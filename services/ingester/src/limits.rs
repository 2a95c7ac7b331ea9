//! Limits the ingester enforces: per-tenant series limits (checked when a push would create a series) and
//! the instance limits that protect the process itself (Mimir's `ingester.instance_limits`).
//!
//! Per-tenant limits come from a [`LimitsSource`] (the binary hands in the runtime-config overrides), so they
//! change without a restart. They are *global* (cluster-wide) numbers; an ingester holds only its share of a
//! tenant's series and applies [`local_series_limit`]: `global * replication_factor / ingesters`. A single
//! process (RF 1, one ingester) applies the global number as is.
//!
//! Rejections by tenant limits are per series and permanent (the distributor answers 400). Rejections by
//! instance limits refuse the whole push with `Unavailable` (503 to the sender, which backs off and retries).

mod instance;
mod series;

use crate::ingester::Ingester;
use heddle_config::{FlagKind, FlagSpec};
use heddle_model::TenantId;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

pub(crate) use instance::InstanceLimiter;
pub(crate) use series::{SeriesAdmission, TenantSeries};

/// Replication factor and ingester count of the single-process ring: the local limit equals the global one.
/// The cluster ring will pass its own numbers to [`local_series_limit`].
const SINGLE_PROCESS_TOPOLOGY: (usize, usize) = (1, 1);

/// The ingester's limit state: where tenant limits come from, the instance limiter, and each tenant's series
/// accounting.
#[derive(Debug, Clone)]
pub(crate) struct IngesterLimits {
    source: Arc<RwLock<Arc<dyn LimitsSource>>>,
    pub(crate) instance: Arc<InstanceLimiter>,
    tenants: Arc<Mutex<HashMap<TenantId, Arc<Mutex<TenantSeries>>>>>,
}

impl IngesterLimits {
    pub(crate) fn new(cfg: InstanceLimitsConfig, registry: &mut Registry) -> Self {
        Self {
            source: Arc::new(RwLock::new(Arc::new(StaticLimits::default()))),
            instance: Arc::new(InstanceLimiter::new(cfg, registry)),
            tenants: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The local (this ingester's) series limits of `tenant`.
    pub(crate) fn local_series_limits(&self, tenant: &TenantId) -> SeriesLimits {
        let global = self
            .source
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .series_limits(tenant);
        let (rf, n) = SINGLE_PROCESS_TOPOLOGY;
        SeriesLimits {
            max_global_series_per_user: local_series_limit(global.max_global_series_per_user, rf, n),
            max_global_series_per_metric: local_series_limit(global.max_global_series_per_metric, rf, n),
        }
    }

    /// The series accounting of `tenant` (lock it around seed, admit and append).
    pub(crate) fn tenant_series(&self, tenant: &TenantId) -> Arc<Mutex<TenantSeries>> {
        let mut map = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(tenant.clone()).or_default().clone()
    }
}

impl Ingester {
    /// Reads per-tenant series limits from `source` from now on (the default gives every tenant Mimir's
    /// defaults). The binary passes the runtime-config overrides here.
    pub fn set_limits_source(&self, source: Arc<dyn LimitsSource>) {
        *self.limits.source.write().unwrap_or_else(|p| p.into_inner()) = source;
    }
}

/// The per-tenant series limits, as configured (global numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeriesLimits {
    /// `limits.max_global_series_per_user` (0 = no limit).
    pub max_global_series_per_user: usize,
    /// `limits.max_global_series_per_metric` (0 = no limit).
    pub max_global_series_per_metric: usize,
}

impl Default for SeriesLimits {
    /// Mimir's defaults: 150,000 series per tenant, no per-metric limit.
    fn default() -> Self {
        Self {
            max_global_series_per_user: 150_000,
            max_global_series_per_metric: 0,
        }
    }
}

/// Where the ingester reads a tenant's current limits. Called on every push, so it must be cheap.
pub trait LimitsSource: Send + Sync + std::fmt::Debug + 'static {
    /// The series limits of `tenant`.
    fn series_limits(&self, tenant: &TenantId) -> SeriesLimits;
}

/// The same limits for every tenant.
#[derive(Debug, Clone, Copy, Default)]
pub struct StaticLimits(pub SeriesLimits);

impl LimitsSource for StaticLimits {
    fn series_limits(&self, _tenant: &TenantId) -> SeriesLimits {
        self.0
    }
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
}

impl Default for InstanceLimitsConfig {
    fn default() -> Self {
        Self {
            max_ingestion_rate: 0.0,
            max_tenants: 0,
            max_series: 0,
            max_inflight_push_requests: 30_000,
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
        assert_eq!(SeriesLimits::default().max_global_series_per_user, 150_000);
    }
}
