//! Stage 2, HA dedupe: a request from a Prometheus HA pair is kept only when it comes from the cluster's
//! elected replica (Mimir's HA tracker; the elections themselves are [`crate::HaTracker`]'s).
//!
//! Only the first series is looked at, before validation and rate limiting (as Mimir): Prometheus sends one
//! replica's data per request. It applies when the HA tracker runs and the tenant opted in with
//! `limits.accept_ha_samples`, and only to requests whose first series carries both the cluster and the
//! replica label with non-empty values (an empty label value is an absent label in Prometheus' data model).
//!
//! The two values become a tracker key and are shared with every distributor over gossip, so they are
//! checked first, before validation would see them: a value longer than the tenant's
//! `limits.max_label_value_length` refuses the request (400, `err-heddle-invalid-ha-label`) and is never
//! stored or gossiped. Values are UTF-8 already (the decoder refuses anything else).

use crate::error::PushError;
use crate::ha_tracker::{HaDecision, HaTracker};
use heddle_limits::Limits;
use heddle_model::TenantId;
use heddle_model::error_id;
use heddle_proto::TimeSeriesRef;
use heddle_server::DiscardedSamples;

/// What the HA stage decided for a request it did not refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HaVerdict<'l> {
    /// Ingest the request; when set, strip this label (the replica label) from every series.
    Ingest { drop_label: Option<&'l str> },
    /// The request came from a non-elected replica: forward nothing and answer 202 with this message.
    Deduplicated(String),
}

/// Judges the request of `tenant` whose series are `series` at `now_ms` (wall clock). `Err` when the tenant
/// already tracks `limits.ha_max_clusters` clusters and this is a new one (its samples are counted as
/// discarded).
pub(crate) fn dedupe<'l>(
    tracker: Option<&HaTracker>,
    tenant: &TenantId,
    limits: &'l Limits,
    series: &[TimeSeriesRef<'_>],
    now_ms: i64,
    discarded: &DiscardedSamples,
) -> Result<HaVerdict<'l>, PushError> {
    let ingest = HaVerdict::Ingest { drop_label: None };
    let (Some(tracker), true, Some(first)) = (tracker, limits.accept_ha_samples, series.first()) else {
        return Ok(ingest);
    };
    let find = |name: &str| first.labels.iter().find(|l| l.name == name).map(|l| l.value);
    let (Some(cluster), Some(replica)) = (find(&limits.ha_cluster_label), find(&limits.ha_replica_label)) else {
        return Ok(ingest);
    };
    if cluster.is_empty() || replica.is_empty() {
        return Ok(ingest);
    }
    let samples: u64 = series.iter().map(|ts| ts.samples.len() as u64).sum();
    for (role, label, value) in [
        ("cluster", &limits.ha_cluster_label, cluster),
        ("replica", &limits.ha_replica_label, replica),
    ] {
        if value.len() > limits.max_label_value_length {
            discarded.add(tenant.as_str(), error_id::INVALID_HA_LABEL, samples);
            return Err(PushError::InvalidHaLabel {
                tenant: tenant.to_string(),
                role,
                label: label.clone(),
                len: value.len(),
                start: value.chars().take(32).collect(),
                limit: limits.max_label_value_length,
            });
        }
    }
    match tracker.check(
        tenant.as_str(),
        cluster,
        replica,
        samples,
        limits.ha_max_clusters,
        now_ms,
    ) {
        HaDecision::Accept => Ok(HaVerdict::Ingest {
            drop_label: Some(limits.ha_replica_label.as_str()),
        }),
        HaDecision::Deduplicate { elected } => Ok(HaVerdict::Deduplicated(format!(
            "err-heddle-ha-replica-not-elected: samples from replica {replica:?} of HA cluster {cluster:?} dropped \
             (tenant={tenant}): replica {elected:?} is elected; another replica is elected after \
             `distributor.ha_tracker.ha_tracker_failover_timeout` without its samples"
        ))),
        HaDecision::TooManyClusters { limit } => {
            discarded.add(tenant.as_str(), error_id::TOO_MANY_HA_CLUSTERS, samples);
            Err(PushError::TooManyHaClusters {
                tenant: tenant.to_string(),
                cluster: cluster.to_owned(),
                limit,
            })
        }
    }
}

#[cfg(test)]
mod tests;
