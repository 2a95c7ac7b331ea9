//! The seam between the distributor and the ring: which ingesters own a token.
//!
//! Kept deliberately small: [`SingleIngesterRing`] serves the single-process mode, [`RingIngesters`] the
//! cluster (the `heddle-ring` hash ring, with one pooled client per ingester address).

use heddle_proto::IngesterClient;
use heddle_ring::{ClientPool, Operation, Ring};
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// An ingester's id in the ring (`--ingester.ring.instance-id`).
pub type InstanceId = String;

/// The ingesters a series must be written to, and how many must acknowledge it.
#[derive(Debug, Clone)]
pub struct ReplicaSet {
    /// Distinct ingesters; a series is sent once to each.
    pub ingesters: Vec<(InstanceId, Arc<dyn IngesterClient>)>,
    /// Acknowledgements needed for the write of a series to succeed (quorum, usually RF/2+1).
    pub min_success: usize,
    /// Why the ring could not form a full set (its error, e.g. too many unhealthy ingesters), quoted in the
    /// 5xx message of a write that misses quorum for lack of replicas.
    pub unavailable: Option<String>,
}

impl ReplicaSet {
    /// The quorum for `replicas` replicas: `replicas/2 + 1` (dskit's `minSuccess`).
    pub fn quorum(replicas: usize) -> usize {
        replicas / 2 + 1
    }
}

/// Maps a series token to its replica set.
pub trait IngesterRing: Send + Sync + Debug {
    /// The replica set owning `token`. An empty set (no healthy ingesters) fails the series with 503.
    fn replica_set(&self, token: u32) -> ReplicaSet;
}

/// A ring of one ingester: replication factor 1, every token owned by it.
#[derive(Debug, Clone)]
pub struct SingleIngesterRing {
    id: InstanceId,
    client: Arc<dyn IngesterClient>,
}

impl SingleIngesterRing {
    pub fn new(id: impl Into<InstanceId>, client: Arc<dyn IngesterClient>) -> Self {
        Self { id: id.into(), client }
    }
}

impl IngesterRing for SingleIngesterRing {
    fn replica_set(&self, _token: u32) -> ReplicaSet {
        ReplicaSet {
            ingesters: vec![(self.id.clone(), Arc::clone(&self.client))],
            min_success: 1,
            unavailable: None,
        }
    }
}

/// The cluster ring: replica sets from the `heddle-ring` snapshot (write operation: ACTIVE instances only,
/// extended past unhealthy ones), clients from a pool keyed by the instance's gRPC address.
#[derive(Debug)]
pub struct RingIngesters {
    ring: Arc<Ring>,
    pool: Arc<ClientPool<Arc<dyn IngesterClient>>>,
    last_error_log_ms: AtomicI64,
}

impl RingIngesters {
    /// Replica sets from `ring`, clients from `pool`.
    pub fn new(ring: Arc<Ring>, pool: Arc<ClientPool<Arc<dyn IngesterClient>>>) -> Self {
        Self {
            ring,
            pool,
            last_error_log_ms: AtomicI64::new(0),
        }
    }

    /// Logs a ring failure at most once every 10 s: it repeats for every series of every push.
    fn log_rate_limited(&self, now_ms: i64, error: &dyn std::fmt::Display) {
        let last = self.last_error_log_ms.load(Ordering::Relaxed);
        if now_ms - last >= 10_000
            && self
                .last_error_log_ms
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(error = %error, "no replica set for a series");
        }
    }
}

impl IngesterRing for RingIngesters {
    fn replica_set(&self, token: u32) -> ReplicaSet {
        let now = heddle_ring::now_ms();
        let snapshot = self.ring.snapshot();
        let set = match snapshot.replica_set(token, Operation::Write, now) {
            Ok(set) => set,
            Err(e) => {
                self.log_rate_limited(now, &e);
                return ReplicaSet {
                    ingesters: Vec::new(),
                    min_success: 1,
                    unavailable: Some(e.to_string()),
                };
            }
        };
        let mut ingesters = Vec::with_capacity(set.instances.len());
        for instance in set.instances {
            match self.pool.get(&instance.addr) {
                Ok(client) => ingesters.push((instance.id.clone(), client)),
                // An address no client can be made for counts as a failed replica.
                Err(e) => self.log_rate_limited(now, &format!("instance {} at {:?}: {e}", instance.id, instance.addr)),
            }
        }
        ReplicaSet {
            ingesters,
            min_success: set.min_success,
            unavailable: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use heddle_ring::{InstanceDesc, InstanceState, MembershipView, ReplicationConfig, RingDesc};

    #[derive(Debug)]
    struct Named(#[allow(dead_code)] String);

    #[async_trait::async_trait]
    impl IngesterClient for Named {
        async fn push(
            &self,
            _: &heddle_model::TenantId,
            _: bytes::Bytes,
        ) -> Result<heddle_proto::ingester::PushResponse, tonic::Status> {
            Err(tonic::Status::unimplemented("test"))
        }
        async fn query_stream(
            &self,
            _: &heddle_model::TenantId,
            _: heddle_proto::ingester::QueryRequest,
        ) -> Result<heddle_proto::QueryStream, tonic::Status> {
            Err(tonic::Status::unimplemented("test"))
        }
        async fn label_names(
            &self,
            _: &heddle_model::TenantId,
            _: heddle_proto::ingester::LabelNamesRequest,
        ) -> Result<heddle_proto::ingester::LabelNamesResponse, tonic::Status> {
            Err(tonic::Status::unimplemented("test"))
        }
        async fn label_values(
            &self,
            _: &heddle_model::TenantId,
            _: heddle_proto::ingester::LabelValuesRequest,
        ) -> Result<heddle_proto::ingester::LabelValuesResponse, tonic::Status> {
            Err(tonic::Status::unimplemented("test"))
        }
        async fn series(
            &self,
            _: &heddle_model::TenantId,
            _: heddle_proto::ingester::SeriesRequest,
        ) -> Result<heddle_proto::ingester::SeriesResponse, tonic::Status> {
            Err(tonic::Status::unimplemented("test"))
        }
    }

    fn ring_of(states: &[(&str, InstanceState, &[u32])]) -> Arc<Ring> {
        let ring = Arc::new(Ring::new(ReplicationConfig::default()));
        let mut desc = RingDesc::default();
        for (id, state, tokens) in states {
            desc.upsert(InstanceDesc {
                id: id.to_string(),
                addr: format!("{id}:9095"),
                zone: String::new(),
                state: *state,
                tokens: tokens.to_vec(),
                heartbeat_ms: heddle_ring::now_ms(),
                registered_at_ms: 0,
            });
        }
        ring.update(&MembershipView {
            desc,
            unreachable: Default::default(),
        });
        ring
    }

    #[test]
    fn ring_replica_sets_use_pooled_clients_and_fail_closed() {
        let pool: Arc<ClientPool<Arc<dyn IngesterClient>>> = Arc::new(ClientPool::new(Arc::new(|addr: &str| {
            Ok(Arc::new(Named(addr.to_owned())) as Arc<dyn IngesterClient>)
        })));
        let active = InstanceState::Active;
        let ring = ring_of(&[
            ("a", active, &[10]),
            ("b", active, &[20]),
            ("c", active, &[30]),
            ("d", InstanceState::Joining, &[40]),
        ]);
        let r = RingIngesters::new(ring, Arc::clone(&pool));
        let set = r.replica_set(25);
        let ids: Vec<&str> = set.ingesters.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["c", "a", "b"], "JOINING d is passed over");
        assert_eq!(
            set.min_success, 3,
            "the set was extended past d, so its majority grew (dskit)"
        );
        r.replica_set(5);
        assert_eq!(pool.len(), 3, "one client per address");

        let empty = RingIngesters::new(Arc::new(Ring::new(ReplicationConfig::default())), pool);
        let set = empty.replica_set(1);
        assert!(
            set.ingesters.is_empty() && set.min_success == 1,
            "an empty ring fails every series"
        );
        assert!(
            set.unavailable.as_deref().is_some_and(|e| !e.is_empty()),
            "and says why: {:?}",
            set.unavailable
        );
    }

    #[test]
    fn quorum_is_majority() {
        for (rf, q) in [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3)] {
            assert_eq!(ReplicaSet::quorum(rf), q, "rf {rf}");
        }
    }
}
