//! The distributor's metrics, registered on the registry passed to [`crate::Distributor::new`].

use heddle_server::{DiscardedSamples, TenantFamily, TenantLabelSet};
use http::StatusCode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::time::Duration;

/// Reason label for exemplars of a tenant whose exemplar store is off (`limits.max_global_exemplars_per_user`
/// is 0): counted and dropped, as Mimir drops them.
pub(crate) const REASON_EXEMPLARS_DISABLED: &str = "exemplars-disabled";

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabels {
    tenant: String,
}

impl TenantLabelSet for TenantLabels {
    fn tenant(&self) -> &str {
        &self.tenant
    }
}

impl TenantLabelSet for TenantReasonLabels {
    fn tenant(&self) -> &str {
        &self.tenant
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    status: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantReasonLabels {
    tenant: String,
    reason: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IngesterOutcomeLabels {
    ingester: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IngesterLabels {
    ingester: String,
}

/// Outcome of one push to one ingester, as `heddle_distributor_ingester_pushes{outcome}` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IngesterPushOutcome {
    /// The ingester answered (it may have refused some series).
    Ok,
    /// It answered with an error status.
    Error,
    /// No answer within `distributor.remote_timeout`.
    Timeout,
}

/// Handles to every distributor metric.
#[derive(Debug, Clone)]
pub(crate) struct Metrics {
    received_samples: TenantFamily<TenantLabels, Counter>,
    pub(crate) discarded: DiscardedSamples,
    discarded_exemplars: TenantFamily<TenantReasonLabels, Counter>,
    discarded_metadata: TenantFamily<TenantReasonLabels, Counter>,
    received_metadata: TenantFamily<TenantLabels, Counter>,
    received_exemplars: TenantFamily<TenantLabels, Counter>,
    requests: Family<StatusLabels, Counter>,
    duration: Histogram,
    received_bytes: Counter,
    pub(crate) arena_retained_bytes: Gauge,
    /// Bytes held by in-flight push requests (the in-flight budget's own counter).
    pub(crate) inflight_push_bytes: Gauge,
    /// Requests refused because the in-flight bytes would pass the limit.
    pub(crate) inflight_push_bytes_refused: Counter,
    ingester_pushes: Family<IngesterOutcomeLabels, Counter>,
    ingester_push_duration: Family<IngesterLabels, Histogram>,
}

impl Metrics {
    /// Registers the distributor's metrics; `discarded` is the process-wide discarded-samples family (shared
    /// with the ingester), already registered by whoever created it. Its tenant tracker removes the series of
    /// idle tenants from the per-tenant families here too.
    pub(crate) fn register(registry: &mut Registry, discarded: DiscardedSamples) -> Self {
        let tenants = discarded.tenant_metrics().clone();
        let m = Self {
            received_samples: TenantFamily::new(&tenants, Family::default()),
            discarded,
            discarded_exemplars: TenantFamily::new(&tenants, Family::default()),
            discarded_metadata: TenantFamily::new(&tenants, Family::default()),
            received_metadata: TenantFamily::new(&tenants, Family::default()),
            received_exemplars: TenantFamily::new(&tenants, Family::default()),
            requests: Family::default(),
            // 1 ms .. ~16 s.
            duration: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            received_bytes: Counter::default(),
            arena_retained_bytes: Gauge::default(),
            inflight_push_bytes: Gauge::default(),
            inflight_push_bytes_refused: Counter::default(),
            ingester_pushes: Family::default(),
            ingester_push_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 15))
            }),
        };
        registry.register(
            "heddle_distributor_ingester_pushes",
            "Push calls to each ingester, by outcome (ok, error, timeout)",
            m.ingester_pushes.clone(),
        );
        registry.register(
            "heddle_distributor_ingester_push_duration_seconds",
            "Time for one ingester to answer a push, per ingester (timeouts count as the full remote timeout)",
            m.ingester_push_duration.clone(),
        );
        registry.register(
            "heddle_distributor_arena_retained_bytes",
            "Capacity held by idle pooled request arenas of the distributor",
            m.arena_retained_bytes.clone(),
        );
        registry.register(
            "heddle_distributor_inflight_push_requests_bytes",
            "Bytes held by push requests in flight: bodies, decompressed copies and decoded views, reserved before \
             allocation against distributor.instance_limits.max_inflight_push_requests_bytes",
            m.inflight_push_bytes.clone(),
        );
        registry.register(
            "heddle_distributor_inflight_push_requests_bytes_refused",
            "Push requests refused with 503 because distributor.instance_limits.max_inflight_push_requests_bytes \
             was reached",
            m.inflight_push_bytes_refused.clone(),
        );
        registry.register(
            "heddle_distributor_received_samples",
            "Samples that passed validation and rate limiting and were forwarded to ingesters",
            m.received_samples.family().clone(),
        );
        registry.register(
            "heddle_distributor_discarded_exemplars",
            "Exemplars dropped by the distributor, by tenant and reason",
            m.discarded_exemplars.family().clone(),
        );
        registry.register(
            "heddle_distributor_discarded_metadata",
            "Metric metadata entries dropped by the distributor's validation, by tenant and reason (error id)",
            m.discarded_metadata.family().clone(),
        );
        registry.register(
            "heddle_distributor_received_metadata",
            "Metric metadata entries that passed validation and were forwarded to ingesters",
            m.received_metadata.family().clone(),
        );
        registry.register(
            "heddle_distributor_received_exemplars",
            "Exemplars that passed validation and were forwarded to ingesters",
            m.received_exemplars.family().clone(),
        );
        registry.register(
            "heddle_distributor_requests",
            "Remote-write requests, by HTTP status of the response",
            m.requests.clone(),
        );
        registry.register(
            "heddle_distributor_request_duration_seconds",
            "Time to handle a remote-write request, from body received to response",
            m.duration.clone(),
        );
        registry.register(
            "heddle_distributor_received_bytes",
            "Compressed remote-write body bytes received",
            m.received_bytes.clone(),
        );
        m
    }

    pub(crate) fn received_samples(&self, tenant: &str, n: u64) {
        if n > 0 {
            self.received_samples.with(
                &TenantLabels {
                    tenant: tenant.to_owned(),
                },
                |c| {
                    c.inc_by(n);
                },
            );
        }
    }

    pub(crate) fn received_metadata(&self, tenant: &str, n: u64) {
        if n > 0 {
            self.received_metadata.with(
                &TenantLabels {
                    tenant: tenant.to_owned(),
                },
                |c| {
                    c.inc_by(n);
                },
            );
        }
    }

    pub(crate) fn received_exemplars(&self, tenant: &str, n: u64) {
        if n > 0 {
            self.received_exemplars.with(
                &TenantLabels {
                    tenant: tenant.to_owned(),
                },
                |c| {
                    c.inc_by(n);
                },
            );
        }
    }

    pub(crate) fn discarded_metadata(&self, tenant: &str, reason: &str, n: u64) {
        if n > 0 {
            self.discarded_metadata.with(
                &TenantReasonLabels {
                    tenant: tenant.to_owned(),
                    reason: reason.to_owned(),
                },
                |c| {
                    c.inc_by(n);
                },
            );
        }
    }

    pub(crate) fn discarded_exemplars(&self, tenant: &str, reason: &str, n: u64) {
        if n > 0 {
            self.discarded_exemplars.with(
                &TenantReasonLabels {
                    tenant: tenant.to_owned(),
                    reason: reason.to_owned(),
                },
                |c| {
                    c.inc_by(n);
                },
            );
        }
    }

    /// One push to `ingester` ended with `outcome` after `took`.
    pub(crate) fn ingester_push(&self, ingester: &str, outcome: IngesterPushOutcome, took: Duration) {
        let outcome = match outcome {
            IngesterPushOutcome::Ok => "ok",
            IngesterPushOutcome::Error => "error",
            IngesterPushOutcome::Timeout => "timeout",
        };
        self.ingester_pushes
            .get_or_create(&IngesterOutcomeLabels {
                ingester: ingester.to_owned(),
                outcome,
            })
            .inc();
        self.ingester_push_duration
            .get_or_create(&IngesterLabels {
                ingester: ingester.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    pub(crate) fn received_bytes(&self, n: usize) {
        self.received_bytes.inc_by(n as u64);
    }

    pub(crate) fn request(&self, status: StatusCode, took: Duration) {
        self.requests
            .get_or_create(&StatusLabels {
                status: status.as_str().to_owned(),
            })
            .inc();
        self.duration.observe(took.as_secs_f64());
    }
}
