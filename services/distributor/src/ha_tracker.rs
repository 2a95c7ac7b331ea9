//! Deduplication of Prometheus HA pairs (Mimir's HA tracker).
//!
//! Two Prometheus servers scraping the same targets carry the same `cluster` label and a different
//! `__replica__` label. Per (tenant, cluster) the tracker elects the first replica it hears from and accepts
//! only that replica's requests; the other's are answered 202 Accepted and dropped (Mimir does the same, so
//! Prometheus does not retry them). When the elected replica has sent nothing for
//! `ha_tracker_failover_timeout`, the next replica heard from is elected. Only the first series of a request
//! is looked at: Prometheus sends one replica's data per request.
//!
//! State is in memory: right for a single distributor. With several distributors the elections must be
//! shared (Mimir keeps them in its KV store); that comes with the cluster's gossip KV.

use crate::error::ConfigError;
use heddle_server::{FlagKind, FlagSpec, serde_duration};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// `distributor.ha_tracker:` settings (Mimir's names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HaTrackerConfig {
    /// Run the HA tracker; tenants opt in with `limits.accept_ha_samples`.
    pub enable_ha_tracker: bool,
    /// Time without samples from the elected replica after which another replica may be elected.
    #[serde(with = "serde_duration")]
    pub ha_tracker_failover_timeout: Duration,
}

impl Default for HaTrackerConfig {
    fn default() -> Self {
        Self {
            enable_ha_tracker: false,
            ha_tracker_failover_timeout: Duration::from_secs(30),
        }
    }
}

impl HaTrackerConfig {
    /// Checks the timeout.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.enable_ha_tracker && self.ha_tracker_failover_timeout.is_zero() {
            return Err(ConfigError {
                key: "distributor.ha_tracker.ha_tracker_failover_timeout",
                reason: "must be greater than 0s".into(),
            });
        }
        Ok(())
    }
}

/// Flags for [`HaTrackerConfig`].
pub const HA_TRACKER_FLAGS: &[FlagSpec] = &[
    FlagSpec {
        flag: "distributor.ha-tracker.enable",
        key: "distributor.ha_tracker.enable_ha_tracker",
        kind: FlagKind::Bool,
        help: "Run the HA tracker that deduplicates Prometheus HA pairs (tenants opt in with accept_ha_samples)",
    },
    FlagSpec {
        flag: "distributor.ha-tracker.failover-timeout",
        key: "distributor.ha_tracker.ha_tracker_failover_timeout",
        kind: FlagKind::Value,
        help: "Time without samples from the elected replica before another replica is elected",
    },
];

/// What to do with a request from an HA replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HaDecision {
    /// The replica is (now) the elected one: ingest, without the replica label.
    Accept,
    /// Another replica is elected: drop the request and answer 202.
    Deduplicate { elected: String },
    /// The tenant already tracks `limit` clusters and this is a new one: refuse with 400.
    TooManyClusters { limit: usize },
}

#[derive(Debug)]
struct Election {
    replica: String,
    last_seen: Instant,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ClusterLabels {
    tenant: String,
    cluster: String,
}

/// The elected replica of each (tenant, cluster).
#[derive(Debug)]
pub struct HaTracker {
    failover_timeout: Duration,
    elections: Mutex<HashMap<String, HashMap<String, Election>>>,
    deduped: Family<ClusterLabels, Counter>,
    elected_changes: Family<ClusterLabels, Counter>,
}

impl HaTracker {
    /// A tracker failing over after `failover_timeout`, registering
    /// `heddle_distributor_deduped_samples_total{tenant,cluster}` and
    /// `heddle_distributor_ha_elected_replica_changes_total{tenant,cluster}` on `registry`.
    pub fn new(failover_timeout: Duration, registry: &mut Registry) -> Self {
        let t = Self {
            failover_timeout,
            elections: Mutex::new(HashMap::new()),
            deduped: Family::default(),
            elected_changes: Family::default(),
        };
        registry.register(
            "heddle_distributor_deduped_samples",
            "Samples dropped because they came from a non-elected replica of a Prometheus HA pair",
            t.deduped.clone(),
        );
        registry.register(
            "heddle_distributor_ha_elected_replica_changes",
            "Times another replica was elected for an HA cluster (the first election counts)",
            t.elected_changes.clone(),
        );
        t
    }

    /// Judges a request of `samples` samples from `replica` of `cluster` at `now`. At most `max_clusters`
    /// clusters are tracked per tenant (0 = no limit).
    pub fn check(
        &self,
        tenant: &str,
        cluster: &str,
        replica: &str,
        samples: u64,
        max_clusters: usize,
        now: Instant,
    ) -> HaDecision {
        let mut all = self.elections.lock().unwrap_or_else(|p| p.into_inner());
        let clusters = all.entry(tenant.to_owned()).or_default();
        let labels = || ClusterLabels {
            tenant: tenant.to_owned(),
            cluster: cluster.to_owned(),
        };
        let tracked = clusters.len();
        match clusters.get_mut(cluster) {
            Some(e) if e.replica == replica => {
                if now > e.last_seen {
                    e.last_seen = now;
                }
                HaDecision::Accept
            }
            Some(e) if now.saturating_duration_since(e.last_seen) > self.failover_timeout => {
                tracing::info!(tenant, cluster, from = %e.replica, to = replica, "HA failover: electing another replica");
                e.replica = replica.to_owned();
                e.last_seen = now;
                self.elected_changes.get_or_create(&labels()).inc();
                HaDecision::Accept
            }
            Some(e) => {
                self.deduped.get_or_create(&labels()).inc_by(samples);
                HaDecision::Deduplicate {
                    elected: e.replica.clone(),
                }
            }
            None if max_clusters > 0 && tracked >= max_clusters => HaDecision::TooManyClusters { limit: max_clusters },
            None => {
                clusters.insert(
                    cluster.to_owned(),
                    Election {
                        replica: replica.to_owned(),
                        last_seen: now,
                    },
                );
                self.elected_changes.get_or_create(&labels()).inc();
                HaDecision::Accept
            }
        }
    }

    /// The elected replica of (tenant, cluster), if any.
    pub fn elected(&self, tenant: &str, cluster: &str) -> Option<String> {
        let all = self.elections.lock().unwrap_or_else(|p| p.into_inner());
        all.get(tenant)?.get(cluster).map(|e| e.replica.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker() -> (HaTracker, Registry) {
        let mut r = Registry::default();
        (HaTracker::new(Duration::from_secs(30), &mut r), r)
    }

    #[test]
    fn first_replica_is_elected_and_the_other_deduplicated() {
        let (t, r) = tracker();
        let t0 = Instant::now();
        assert_eq!(t.check("u", "c1", "a", 10, 0, t0), HaDecision::Accept);
        assert_eq!(
            t.check("u", "c1", "b", 7, 0, t0 + Duration::from_secs(1)),
            HaDecision::Deduplicate { elected: "a".into() }
        );
        assert_eq!(
            t.check("u", "c1", "a", 10, 0, t0 + Duration::from_secs(2)),
            HaDecision::Accept
        );
        assert_eq!(
            t.check("u", "c2", "b", 1, 0, t0),
            HaDecision::Accept,
            "clusters are independent"
        );
        assert_eq!(
            t.check("v", "c1", "b", 1, 0, t0),
            HaDecision::Accept,
            "tenants are independent"
        );
        let text = heddle_server::encode_metrics(&r);
        assert!(
            text.contains(r#"heddle_distributor_deduped_samples_total{tenant="u",cluster="c1"} 7"#),
            "{text}"
        );
    }

    #[test]
    fn fails_over_only_after_the_timeout() {
        let (t, _r) = tracker();
        let t0 = Instant::now();
        t.check("u", "c", "a", 1, 0, t0);
        // The elected replica's last sample is what counts: 30 s exactly is not past the timeout.
        assert!(matches!(
            t.check("u", "c", "b", 1, 0, t0 + Duration::from_secs(30)),
            HaDecision::Deduplicate { .. }
        ));
        assert_eq!(
            t.check("u", "c", "b", 1, 0, t0 + Duration::from_millis(30_001)),
            HaDecision::Accept
        );
        assert_eq!(t.elected("u", "c").as_deref(), Some("b"));
        assert!(
            matches!(t.check("u", "c", "a", 1, 0, t0 + Duration::from_secs(31)), HaDecision::Deduplicate { elected } if elected == "b"),
            "the old replica is now the follower"
        );
    }

    #[test]
    fn deduplicated_requests_do_not_keep_the_election_alive() {
        let (t, _r) = tracker();
        let t0 = Instant::now();
        t.check("u", "c", "a", 1, 0, t0);
        for s in 1..=40 {
            t.check("u", "c", "b", 1, 0, t0 + Duration::from_secs(s));
        }
        assert_eq!(
            t.elected("u", "c").as_deref(),
            Some("b"),
            "b took over once a was silent for 30 s"
        );
    }

    #[test]
    fn clusters_per_tenant_are_capped() {
        let (t, _r) = tracker();
        let t0 = Instant::now();
        assert_eq!(t.check("u", "c1", "a", 1, 2, t0), HaDecision::Accept);
        assert_eq!(t.check("u", "c2", "a", 1, 2, t0), HaDecision::Accept);
        assert_eq!(
            t.check("u", "c3", "a", 1, 2, t0),
            HaDecision::TooManyClusters { limit: 2 }
        );
        assert_eq!(
            t.check("u", "c1", "a", 1, 2, t0),
            HaDecision::Accept,
            "known clusters still pass"
        );
    }

    #[test]
    fn config_defaults_and_flags() {
        let c = HaTrackerConfig::default();
        assert_eq!(c.ha_tracker_failover_timeout, Duration::from_secs(30));
        let v = serde_norway::to_value(&c).unwrap();
        for k in v.as_mapping().unwrap().keys() {
            let k = format!("distributor.ha_tracker.{}", k.as_str().unwrap());
            assert!(HA_TRACKER_FLAGS.iter().any(|f| f.key == k), "no flag for {k}");
        }
    }
}
