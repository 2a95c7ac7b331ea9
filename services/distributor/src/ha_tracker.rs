//! Deduplication of Prometheus HA pairs (Mimir's HA tracker).
//!
//! Two Prometheus servers scraping the same targets carry the same `cluster` label and a different
//! `__replica__` label. Per (tenant, cluster) the tracker elects the first replica it hears from and accepts
//! only that replica's requests; the other's are answered 202 Accepted and dropped (Mimir does the same, so
//! Prometheus does not retry them). When the elected replica has sent nothing for
//! `ha_tracker_failover_timeout`, the next replica heard from is elected. Only the first series of a request
//! is looked at: Prometheus sends one replica's data per request.
//!
//! Elections are shared between distributors through the gossip key-value store ([`sync`], run by
//! [`HaTracker::run_sync`]): each distributor publishes the elections it made or keeps alive, and adopts
//! the newest election it reads. A distributor republishes the elected replica's last-sample time at most
//! every `ha_tracker_update_timeout` (plus a per-cluster jitter up to `ha_tracker_update_timeout_jitter_max`),
//! so another distributor sees the replica alive and does not fail over while it still sends; a distributor
//! that never receives the elected replica's requests therefore fails over between `failover - update -
//! jitter` and `failover` after the replica's last sample (Mimir behaves the same). Two
//! distributors electing different replicas at the same moment converge on the later election within a
//! gossip round or two; samples accepted from the loser in that window are ingested (memberlist in Mimir
//! has the same window). Without a cluster (the single process) elections stay in memory.
//!
//! Times read from gossip are bounded by the clock: an election whose election or last-sample time is more
//! than `memberlist.max_clock_skew` ahead of this distributor's clock is ignored (and counted in
//! `heddle_distributor_ha_tracker_future_elections_total`). Adopted, it would supersede every later election
//! or keep its replica from ever failing over until the clock caught up. Distributors' clocks must agree
//! within that skew (NTP), as for gossip itself.

mod page;
mod sync;

pub use page::router as ha_tracker_router;

use heddle_config::InvalidKey;
use heddle_config::{FlagKind, FlagSpec, serde_duration};
use heddle_server::{TenantFamily, TenantLabelSet, TenantMetrics};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

/// How far ahead of this distributor's clock a gossiped election may be dated before it is ignored, unless
/// [`HaTracker::set_max_clock_skew`] says otherwise (`memberlist.max_clock_skew`'s default).
const DEFAULT_MAX_CLOCK_SKEW: Duration = Duration::from_secs(30);

/// An election older than this (no sample from its replica) is forgotten, and its gossip key deleted, so
/// clusters that stopped sending do not count against `ha_max_clusters` forever.
const FORGET_AFTER_MS: i64 = 30 * 60 * 1000;

/// `distributor.ha_tracker:` settings (Mimir's names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HaTrackerConfig {
    /// Run the HA tracker; tenants opt in with `limits.accept_ha_samples`.
    pub enable_ha_tracker: bool,
    /// How often the elected replica's last-sample time is republished to the other distributors.
    #[serde(with = "serde_duration")]
    pub ha_tracker_update_timeout: Duration,
    /// At most this much random time is added to the update timeout, per cluster, to spread the updates.
    #[serde(with = "serde_duration")]
    pub ha_tracker_update_timeout_jitter_max: Duration,
    /// Time without samples from the elected replica after which another replica may be elected.
    #[serde(with = "serde_duration")]
    pub ha_tracker_failover_timeout: Duration,
    /// Where elections are shared.
    pub kvstore: HaKvStoreConfig,
}

/// `distributor.ha_tracker.kvstore:`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HaKvStoreConfig {
    /// `memberlist`: shared with the other distributors over the cluster's gossip (the process's own
    /// memory when it runs alone); `inmemory`: never shared.
    pub store: String,
}

impl Default for HaKvStoreConfig {
    fn default() -> Self {
        Self {
            store: "memberlist".into(),
        }
    }
}

impl Default for HaTrackerConfig {
    fn default() -> Self {
        Self {
            enable_ha_tracker: false,
            ha_tracker_update_timeout: Duration::from_secs(15),
            ha_tracker_update_timeout_jitter_max: Duration::from_secs(5),
            ha_tracker_failover_timeout: Duration::from_secs(30),
            kvstore: HaKvStoreConfig::default(),
        }
    }
}

impl HaTrackerConfig {
    /// Checks the timeouts (Mimir's rule: the failover timeout exceeds the update timeout plus its jitter
    /// by at least a second, or a live replica could lose its election between two updates) and the store.
    pub fn validate(&self) -> Result<(), InvalidKey> {
        if !matches!(self.kvstore.store.as_str(), "memberlist" | "inmemory") {
            return Err(InvalidKey {
                key: "distributor.ha_tracker.kvstore.store",
                reason: format!("{:?} is not supported: use memberlist or inmemory", self.kvstore.store),
            });
        }
        if !self.enable_ha_tracker {
            return Ok(());
        }
        let min = self.ha_tracker_update_timeout + self.ha_tracker_update_timeout_jitter_max + Duration::from_secs(1);
        if self.ha_tracker_failover_timeout < min {
            return Err(InvalidKey {
                key: "distributor.ha_tracker.ha_tracker_failover_timeout",
                reason: format!(
                    "{:?} must be at least update timeout + jitter max + 1s = {min:?}, or a replica that still \
                     sends could lose its election",
                    self.ha_tracker_failover_timeout
                ),
            });
        }
        Ok(())
    }

    /// Whether elections are shared with other distributors when the process is in a cluster.
    pub fn shared(&self) -> bool {
        self.kvstore.store == "memberlist"
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
        flag: "distributor.ha-tracker.update-timeout",
        key: "distributor.ha_tracker.ha_tracker_update_timeout",
        kind: FlagKind::Value,
        help: "How often the elected replica's last-sample time is shared with the other distributors",
    },
    FlagSpec {
        flag: "distributor.ha-tracker.update-timeout-jitter-max",
        key: "distributor.ha_tracker.ha_tracker_update_timeout_jitter_max",
        kind: FlagKind::Value,
        help: "Largest random time added to the update timeout, per cluster",
    },
    FlagSpec {
        flag: "distributor.ha-tracker.failover-timeout",
        key: "distributor.ha_tracker.ha_tracker_failover_timeout",
        kind: FlagKind::Value,
        help: "Time without samples from the elected replica before another replica is elected \
               (at least update timeout + jitter max + 1s)",
    },
    FlagSpec {
        flag: "distributor.ha-tracker.store",
        key: "distributor.ha_tracker.kvstore.store",
        kind: FlagKind::Value,
        help: "Where elections are shared: memberlist (the cluster's gossip) or inmemory (this process only)",
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

/// One (tenant, cluster)'s election as the distributors share it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Election {
    pub replica: String,
    /// When this replica was elected (wall clock, ms). The newest election wins a conflict.
    pub elected_at_ms: i64,
    /// The last sample from the elected replica that any distributor reported (wall clock, ms).
    pub received_at_ms: i64,
}

impl Election {
    /// Whether `self` wins over `other` for the same cluster: the later election, ties broken by replica
    /// name so every distributor picks the same one.
    fn supersedes(&self, other: &Election) -> bool {
        (self.elected_at_ms, &self.replica) > (other.elected_at_ms, &other.replica)
    }
}

#[derive(Debug)]
struct Entry {
    election: Election,
    /// The newest `received_at_ms` of this election the other distributors know (published by this one or
    /// read from another); `i64::MIN` when none.
    shared_received_at_ms: i64,
    /// This distributor has a gossip key for this cluster (to delete when the election is forgotten).
    own_key: bool,
    /// Needs publishing now (a new election by this distributor).
    urgent: bool,
    /// Extra time on top of the update timeout before republishing, fixed per entry.
    jitter_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ClusterLabels {
    tenant: String,
    cluster: String,
}

impl TenantLabelSet for ClusterLabels {
    fn tenant(&self) -> &str {
        &self.tenant
    }
}

type Elections = HashMap<String, HashMap<String, Entry>>;

/// The elected replica of each (tenant, cluster).
#[derive(Debug)]
pub struct HaTracker {
    failover_timeout_ms: i64,
    update_timeout_ms: i64,
    jitter_max_ms: i64,
    elections: Mutex<Elections>,
    /// Wakes the sync task when an election needs publishing at once.
    publish: Notify,
    jitter_seed: RandomState,
    deduped: TenantFamily<ClusterLabels, Counter>,
    elected_changes: TenantFamily<ClusterLabels, Counter>,
    /// Gossiped elections dated beyond now plus this are ignored.
    max_clock_skew_ms: AtomicI64,
    future_elections: Counter,
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl HaTracker {
    /// A tracker with `cfg`'s timeouts, registering `heddle_distributor_deduped_samples_total{tenant,cluster}`
    /// and `heddle_distributor_ha_elected_replica_changes_total{tenant,cluster}` on `registry`.
    pub fn new(cfg: &HaTrackerConfig, registry: &mut Registry) -> Self {
        let t = Self {
            failover_timeout_ms: ms(cfg.ha_tracker_failover_timeout),
            update_timeout_ms: ms(cfg.ha_tracker_update_timeout),
            jitter_max_ms: ms(cfg.ha_tracker_update_timeout_jitter_max),
            elections: Mutex::new(HashMap::new()),
            publish: Notify::new(),
            jitter_seed: RandomState::new(),
            deduped: TenantFamily::new(&TenantMetrics::default(), Family::default()),
            elected_changes: TenantFamily::new(&TenantMetrics::default(), Family::default()),
            max_clock_skew_ms: AtomicI64::new(ms(DEFAULT_MAX_CLOCK_SKEW)),
            future_elections: Counter::default(),
        };
        registry.register(
            "heddle_distributor_deduped_samples",
            "Samples dropped because they came from a non-elected replica of a Prometheus HA pair",
            t.deduped.family().clone(),
        );
        registry.register(
            "heddle_distributor_ha_elected_replica_changes",
            "Times this distributor saw another replica elected for an HA cluster, by itself or by another \
             distributor (the first election counts)",
            t.elected_changes.family().clone(),
        );
        registry.register(
            "heddle_distributor_ha_tracker_future_elections",
            "Elections read from other distributors dated beyond now + memberlist.max_clock_skew, ignored: they \
             would win every election, or never fail over, until the clock caught up",
            t.future_elections.clone(),
        );
        t
    }

    /// Removes the series of a tenant idle in `tenants` (the process's tracker) from the tracker's families.
    pub fn with_tenant_metrics(mut self, tenants: &TenantMetrics) -> Self {
        self.deduped = TenantFamily::new(tenants, self.deduped.family().clone());
        self.elected_changes = TenantFamily::new(tenants, self.elected_changes.family().clone());
        self
    }

    /// Gossiped elections (their election or last-sample time) dated more than `skew` ahead of this
    /// distributor's clock are ignored (`memberlist.max_clock_skew`, 30s unless set).
    pub fn set_max_clock_skew(&self, skew: Duration) {
        self.max_clock_skew_ms.store(ms(skew), Ordering::Relaxed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Elections> {
        self.elections.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn jitter_ms(&self, tenant: &str, cluster: &str) -> i64 {
        if self.jitter_max_ms <= 0 {
            return 0;
        }
        let h = self.jitter_seed.hash_one((tenant, cluster));
        (h % (self.jitter_max_ms as u64 + 1)) as i64
    }

    fn count_change(&self, tenant: &str, cluster: &str) {
        let labels = ClusterLabels {
            tenant: tenant.to_owned(),
            cluster: cluster.to_owned(),
        };
        self.elected_changes.with(&labels, |c| {
            c.inc();
        });
    }

    /// Judges a request of `samples` samples from `replica` of `cluster` at `now_ms` (wall clock). At most
    /// `max_clusters` clusters are tracked per tenant (0 = no limit).
    pub fn check(
        &self,
        tenant: &str,
        cluster: &str,
        replica: &str,
        samples: u64,
        max_clusters: usize,
        now_ms: i64,
    ) -> HaDecision {
        let mut all = self.lock();
        let clusters = all.entry(tenant.to_owned()).or_default();
        let tracked = clusters.len();
        let elect = |jitter_ms, own_key| Entry {
            election: Election {
                replica: replica.to_owned(),
                elected_at_ms: now_ms,
                received_at_ms: now_ms,
            },
            shared_received_at_ms: i64::MIN,
            own_key,
            urgent: true,
            jitter_ms,
        };
        match clusters.get_mut(cluster) {
            Some(e) if e.election.replica == replica => {
                e.election.received_at_ms = e.election.received_at_ms.max(now_ms);
                HaDecision::Accept
            }
            Some(e) if now_ms.saturating_sub(e.election.received_at_ms) > self.failover_timeout_ms => {
                tracing::info!(tenant, cluster, from = %e.election.replica, to = replica, "HA failover: electing another replica");
                *e = elect(e.jitter_ms, e.own_key);
                drop(all);
                self.count_change(tenant, cluster);
                self.publish.notify_one();
                HaDecision::Accept
            }
            Some(e) => {
                let elected = e.election.replica.clone();
                drop(all);
                let labels = ClusterLabels {
                    tenant: tenant.to_owned(),
                    cluster: cluster.to_owned(),
                };
                self.deduped.with(&labels, |c| {
                    c.inc_by(samples);
                });
                HaDecision::Deduplicate { elected }
            }
            None if max_clusters > 0 && tracked >= max_clusters => HaDecision::TooManyClusters { limit: max_clusters },
            None => {
                let jitter = self.jitter_ms(tenant, cluster);
                clusters.insert(cluster.to_owned(), elect(jitter, false));
                drop(all);
                self.count_change(tenant, cluster);
                self.publish.notify_one();
                HaDecision::Accept
            }
        }
    }

    /// The elected replica of (tenant, cluster), if any.
    pub fn elected(&self, tenant: &str, cluster: &str) -> Option<String> {
        self.lock()
            .get(tenant)?
            .get(cluster)
            .map(|e| e.election.replica.clone())
    }

    /// Every election this distributor knows, sorted by tenant and cluster.
    pub fn elections(&self) -> Vec<(String, String, Election)> {
        let mut out: Vec<_> = self
            .lock()
            .iter()
            .flat_map(|(t, clusters)| clusters.iter().map(|(c, e)| (t.clone(), c.clone(), e.election.clone())))
            .collect();
        out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        out
    }

    /// The failover timeout, in milliseconds.
    pub fn failover_timeout_ms(&self) -> i64 {
        self.failover_timeout_ms
    }
}

#[cfg(test)]
#[path = "ha_tracker/tests.rs"]
mod tests;
