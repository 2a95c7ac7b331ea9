//! Metrics shared across roles and the `/metrics` exposition.
//!
//! Every component registers its metrics on a `prometheus_client` registry handed to it at construction;
//! nothing is global. Counters are registered without the `_total` suffix: the encoder appends it.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Labels of `heddle_discarded_samples_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DiscardLabels {
    pub tenant: String,
    /// A stable error id such as `err-heddle-sample-out-of-order`.
    pub reason: String,
}

/// `heddle_discarded_samples_total{tenant, reason}`: samples refused anywhere on the write path. One family
/// is shared by the distributor and the ingester so a single process exposes it once.
#[derive(Debug, Clone, Default)]
pub struct DiscardedSamples(Family<DiscardLabels, Counter>);

impl DiscardedSamples {
    /// Creates the family and registers it on `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let this = Self::default();
        registry.register(
            "heddle_discarded_samples",
            "Samples refused on the write path, by tenant and stable error id",
            this.0.clone(),
        );
        this
    }

    pub fn add(&self, tenant: &str, reason: &str, samples: u64) {
        if samples == 0 {
            return;
        }
        self.0
            .get_or_create(&DiscardLabels {
                tenant: tenant.to_owned(),
                reason: reason.to_owned(),
            })
            .inc_by(samples);
    }

    /// Current count for one (tenant, reason); for tests.
    pub fn get(&self, tenant: &str, reason: &str) -> u64 {
        self.0
            .get_or_create(&DiscardLabels {
                tenant: tenant.to_owned(),
                reason: reason.to_owned(),
            })
            .get()
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
