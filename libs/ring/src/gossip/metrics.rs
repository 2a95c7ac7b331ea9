//! Gossip metrics, registered on the registry passed to [`GossipMetrics::register`].

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FieldLabels {
    field: &'static str,
}

/// What a gossip member counts. Clones share the counters.
#[derive(Debug, Clone, Default)]
pub struct GossipMetrics {
    dropped: Family<ReasonLabels, Counter>,
    future_values: Family<FieldLabels, Counter>,
}

impl GossipMetrics {
    /// Reasons a datagram is dropped, all exposed from the start.
    const REASONS: [&'static str; 4] = ["missing-tag", "bad-tag", "stale", "malformed"];

    /// Registers `heddle_memberlist_dropped_datagrams_total{reason}` and
    /// `heddle_memberlist_future_values_total{field}` on `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let me = Self::default();
        for reason in Self::REASONS {
            let _ = me.dropped.get_or_create(&ReasonLabels { reason });
        }
        registry.register(
            "heddle_memberlist_dropped_datagrams",
            "Gossip datagrams dropped before reaching the membership state, by reason: missing-tag (no \
             authentication trailer), bad-tag (another key or tampered), stale (timestamp beyond \
             memberlist.max_clock_skew: a replay or a clock far off), malformed",
            me.dropped.clone(),
        );
        registry.register(
            "heddle_memberlist_future_values",
            "Times values read from gossip were dated beyond now + memberlist.max_clock_skew, by field: a \
             heartbeat or forget marker is ignored, a registered_at is clamped to now",
            me.future_values.clone(),
        );
        me
    }

    pub(crate) fn dropped_datagram(&self, reason: &'static str) {
        self.dropped.get_or_create(&ReasonLabels { reason }).inc();
    }

    pub(crate) fn future_value(&self, field: &'static str) {
        self.future_values.get_or_create(&FieldLabels { field }).inc();
    }

    /// Datagrams dropped for `reason` so far.
    pub fn dropped_datagrams(&self, reason: &'static str) -> u64 {
        self.dropped.get_or_create(&ReasonLabels { reason }).get()
    }

    /// Gossip values of `field` found in the future so far.
    pub fn future_values(&self, field: &'static str) -> u64 {
        self.future_values.get_or_create(&FieldLabels { field }).get()
    }
}
