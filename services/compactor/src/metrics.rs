//! The compactor's metrics, registered on the registry the process passes in.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TenantLabels {
    tenant: String,
}

/// Why a block was marked for deletion, as the `reason` label spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MarkReason {
    /// Its samples are in the block it was compacted into.
    Compacted,
    /// Another block holds all its samples (a compaction whose sources were not marked in time).
    Superseded,
    /// Past the tenant's retention.
    Retention,
}

impl MarkReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            MarkReason::Compacted => "compacted",
            MarkReason::Superseded => "superseded",
            MarkReason::Retention => "retention",
        }
    }
}

/// Counters and gauges of the compaction runs.
#[derive(Debug, Clone)]
pub(crate) struct Metrics {
    pub(crate) runs_started: Counter,
    pub(crate) runs_completed: Counter,
    pub(crate) runs_failed: Counter,
    pub(crate) run_duration: Histogram,
    pub(crate) last_success: Gauge<f64, AtomicU64>,
    pub(crate) compactions: Counter,
    pub(crate) compaction_failures: Counter,
    pub(crate) samples_written: Counter,
    marked: Family<ReasonLabels, Counter>,
    pub(crate) deleted: Counter,
    pub(crate) skipped_tenants: Counter,
    bucket_bytes: Family<TenantLabels, Gauge>,
    uncompacted: Family<TenantLabels, Gauge>,
    /// The tenants the two gauge families have a series of.
    shown: Arc<Mutex<HashSet<String>>>,
}

impl Metrics {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let m = Self {
            runs_started: Counter::default(),
            runs_completed: Counter::default(),
            runs_failed: Counter::default(),
            run_duration: Histogram::new(exponential_buckets(1.0, 4.0, 8)),
            last_success: Gauge::default(),
            compactions: Counter::default(),
            compaction_failures: Counter::default(),
            samples_written: Counter::default(),
            marked: Family::default(),
            deleted: Counter::default(),
            skipped_tenants: Counter::default(),
            bucket_bytes: Family::default(),
            uncompacted: Family::default(),
            shown: Arc::default(),
        };
        registry.register(
            "heddle_compactor_runs_started",
            "Compaction runs started (one run looks at every tenant)",
            m.runs_started.clone(),
        );
        registry.register(
            "heddle_compactor_runs_completed",
            "Compaction runs in which every tenant was compacted without an error",
            m.runs_completed.clone(),
        );
        registry.register(
            "heddle_compactor_runs_failed",
            "Compaction runs in which at least one tenant failed",
            m.runs_failed.clone(),
        );
        registry.register(
            "heddle_compactor_run_duration_seconds",
            "How long compaction runs took",
            m.run_duration.clone(),
        );
        registry.register(
            "heddle_compactor_last_successful_run_timestamp_seconds",
            "When the last compaction run without an error ended (unix seconds)",
            m.last_success.clone(),
        );
        registry.register(
            "heddle_compactor_group_compactions",
            "Groups of blocks compacted into one block",
            m.compactions.clone(),
        );
        registry.register(
            "heddle_compactor_group_compaction_failures",
            "Groups of blocks whose compaction failed (the sources stay as they are)",
            m.compaction_failures.clone(),
        );
        registry.register(
            "heddle_compactor_samples_written",
            "Samples written into compacted blocks",
            m.samples_written.clone(),
        );
        registry.register(
            "heddle_compactor_blocks_marked_for_deletion",
            "Blocks marked for deletion, by reason (compacted, superseded, retention)",
            m.marked.clone(),
        );
        registry.register(
            "heddle_compactor_blocks_deleted",
            "Blocks deleted from the bucket after their deletion delay",
            m.deleted.clone(),
        );
        registry.register(
            "heddle_compactor_tenants_skipped",
            "Tenant passes skipped because another compactor holds the tenant's lock",
            m.skipped_tenants.clone(),
        );
        registry.register(
            "heddle_compactor_bucket_bytes",
            "Bytes a tenant holds in the bucket, as of the compactor's last pass over it",
            m.bucket_bytes.clone(),
        );
        registry.register(
            "heddle_compactor_tenant_uncompacted_blocks",
            "Level-1 blocks (as ingesters shipped them) of a tenant not yet compacted, as of the last pass",
            m.uncompacted.clone(),
        );
        m
    }

    pub(crate) fn marked(&self, reason: MarkReason) {
        self.marked
            .get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            })
            .inc();
    }

    pub(crate) fn tenant_state(&self, tenant: &str, bytes: u64, uncompacted: usize) {
        let labels = TenantLabels {
            tenant: tenant.to_owned(),
        };
        self.bucket_bytes
            .get_or_create(&labels)
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
        self.uncompacted
            .get_or_create(&labels)
            .set(i64::try_from(uncompacted).unwrap_or(i64::MAX));
        self.shown
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(labels.tenant);
    }

    /// Removes the gauges of every tenant but `kept` (those this compactor passed over in its last run):
    /// a tenant gone from the bucket, or compacted by another compactor, is no longer this one's to show.
    pub(crate) fn keep_tenants(&self, kept: &HashSet<String>) {
        let mut shown = self.shown.lock().unwrap_or_else(|p| p.into_inner());
        shown.retain(|tenant| {
            if kept.contains(tenant) {
                return true;
            }
            let labels = TenantLabels { tenant: tenant.clone() };
            self.bucket_bytes.remove(&labels);
            self.uncompacted.remove(&labels);
            false
        });
    }
}
