//! Metrics shared across roles and the `/metrics` exposition.
//!
//! Every component registers its metrics on a `prometheus_client` registry handed to it at construction;
//! nothing is global. Counters are registered without the `_total` suffix: the encoder appends it.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::tenant_metrics::{TenantFamily, TenantLabelSet, TenantMetrics};

/// Labels of `heddle_discarded_samples_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DiscardLabels {
    pub tenant: String,
    /// A stable error id such as `err-heddle-sample-out-of-order`.
    pub reason: String,
}

impl TenantLabelSet for DiscardLabels {
    fn tenant(&self) -> &str {
        &self.tenant
    }
}

/// `heddle_discarded_samples_total{tenant, reason}`: samples refused anywhere on the write path. One family
/// is shared by the distributor and the ingester so a single process exposes it once. It also carries the
/// process's [`TenantMetrics`], so every role handed it removes its other per-tenant series with the same
/// idle tenants.
#[derive(Debug, Clone)]
pub struct DiscardedSamples {
    family: TenantFamily<DiscardLabels, Counter>,
    tenants: TenantMetrics,
}

impl Default for DiscardedSamples {
    fn default() -> Self {
        let tenants = TenantMetrics::default();
        Self {
            family: TenantFamily::new(&tenants, Family::default()),
            tenants,
        }
    }
}

impl DiscardedSamples {
    /// Creates the family and registers it on `registry`; its series are never removed.
    pub fn register(registry: &mut Registry) -> Self {
        Self::register_with(registry, &TenantMetrics::default())
    }

    /// Creates the family and registers it on `registry`; `tenants` removes the series of idle tenants.
    pub fn register_with(registry: &mut Registry, tenants: &TenantMetrics) -> Self {
        let this = Self {
            family: TenantFamily::new(tenants, Family::default()),
            tenants: tenants.clone(),
        };
        registry.register(
            "heddle_discarded_samples",
            "Samples refused on the write path, by tenant and stable error id",
            this.family.family().clone(),
        );
        this
    }

    /// The process's tracker of active tenants, for the other per-tenant families of the roles.
    pub fn tenant_metrics(&self) -> &TenantMetrics {
        &self.tenants
    }

    pub fn add(&self, tenant: &str, reason: &str, samples: u64) {
        if samples == 0 {
            return;
        }
        let labels = DiscardLabels {
            tenant: tenant.to_owned(),
            reason: reason.to_owned(),
        };
        self.family.with(&labels, |c| {
            c.inc_by(samples);
        });
    }

    /// Current count for one (tenant, reason), 0 when there is no such series; for tests.
    pub fn get(&self, tenant: &str, reason: &str) -> u64 {
        let labels = DiscardLabels {
            tenant: tenant.to_owned(),
            reason: reason.to_owned(),
        };
        self.family.family().get(&labels).map_or(0, |c| c.get())
    }
}

/// Prometheus text exposition (format 0.0.4) of everything on the registry.
pub fn encode_metrics(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail; a metric that fails to encode is a bug in its EncodeLabelSet impl.
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, registry) {
        tracing::error!(error = %e, "encoding metrics failed");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discarded_samples_exposition() {
        let mut r = Registry::default();
        let d = DiscardedSamples::register(&mut r);
        d.add("t1", "err-heddle-sample-out-of-order", 3);
        d.add("t1", "err-heddle-sample-out-of-order", 0);
        let text = encode_metrics(&r);
        assert!(
            text.contains(r#"heddle_discarded_samples_total{tenant="t1",reason="err-heddle-sample-out-of-order"} 3"#),
            "{text}"
        );
    }
}
