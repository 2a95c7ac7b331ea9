//! Which ingesters hold a tenant's recent data.
//!
//! The querier asks an [`IngesterSource`] for a [`ReplicationSet`] per request. In single-process mode that is
//! one in-process ingester ([`StaticIngesters`]); with a ring it is every ingester that may own the tenant's
//! series, and a number of them that may fail without failing the query (as dskit's `ReplicationSet`).

use bytes::Bytes;
use heddle_model::TenantId;
use heddle_proto::IngesterClient;
use heddle_proto::ingester::{
    LabelNamesRequest, LabelNamesResponse, LabelValuesRequest, LabelValuesResponse, PushResponse, QueryRequest,
    SeriesRequest, SeriesResponse,
};
use heddle_ring::{ClientPool, Operation, Ring};
use std::fmt;
use std::sync::Arc;

/// The ingesters to ask for one request, and how many of them may fail.
#[derive(Clone)]
pub struct ReplicationSet {
    /// Every ingester that may hold matching series; the querier asks all and merges their answers.
    pub ingesters: Vec<Arc<dyn IngesterClient>>,
    /// How many ingesters may fail before the query fails. With RF replicas and a quorum write, RF - quorum.
    pub max_errors: usize,
}

impl fmt::Debug for ReplicationSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicationSet")
            .field("ingesters", &self.ingesters)
            .field("max_errors", &self.max_errors)
            .finish()
    }
}

/// Something that knows which ingesters to read a tenant's data from: a fixed list, or the ring.
pub trait IngesterSource: Send + Sync + fmt::Debug + 'static {
    /// The ingesters to ask for `tenant`'s series.
    fn replication_set(&self, tenant: &TenantId) -> ReplicationSet;
}

/// A fixed list of ingesters that must all answer: the single-process mode (one ingester, RF=1) and tests.
#[derive(Debug, Clone)]
pub struct StaticIngesters {
    ingesters: Vec<Arc<dyn IngesterClient>>,
    max_errors: usize,
}

impl StaticIngesters {
    /// All of `ingesters` are asked; none may fail.
    pub fn new(ingesters: Vec<Arc<dyn IngesterClient>>) -> Self {
        Self {
            ingesters,
            max_errors: 0,
        }
    }

    /// All of `ingesters` are asked; up to `max_errors` may fail (their replicas cover for them).
    pub fn with_max_errors(ingesters: Vec<Arc<dyn IngesterClient>>, max_errors: usize) -> Self {
        Self { ingesters, max_errors }
    }
}

impl IngesterSource for StaticIngesters {
    fn replication_set(&self, _tenant: &TenantId) -> ReplicationSet {
        ReplicationSet {
            ingesters: self.ingesters.clone(),
            max_errors: self.max_errors,
        }
    }
}

/// The cluster's ingesters from the `heddle-ring` hash ring: every instance healthy for reads (ACTIVE, LEAVING,
/// PENDING; reachable, fresh heartbeat), tolerating RF/2 failures minus those already unhealthy (dskit's
/// `GetReplicationSetForOperation`). Queries go to every ingester because a tenant's series are spread over all.
#[derive(Debug)]
pub struct RingIngesterSource {
    ring: Arc<Ring>,
    pool: Arc<ClientPool<Arc<dyn IngesterClient>>>,
}

impl RingIngesterSource {
    /// Ingesters from `ring`, clients from `pool`.
    pub fn new(ring: Arc<Ring>, pool: Arc<ClientPool<Arc<dyn IngesterClient>>>) -> Self {
        Self { ring, pool }
    }
}

impl IngesterSource for RingIngesterSource {
    fn replication_set(&self, _tenant: &TenantId) -> ReplicationSet {
        let snapshot = self.ring.snapshot();
        let set = match snapshot.read_set(Operation::Read, heddle_ring::now_ms()) {
            Ok(set) => set,
            // Too few ingesters to answer completely: fail the query rather than answer partially.
            Err(e) => return Unavailable::set(e.to_string()),
        };
        let mut ingesters = Vec::with_capacity(set.instances.len());
        let max_errors = set.max_errors;
        for instance in set.instances {
            match self.pool.get(&instance.addr) {
                Ok(client) => ingesters.push(client),
                Err(e) => {
                    let reason = format!("ingester {} at {:?}: {e}", instance.id, instance.addr);
                    // Fails when asked: one of the failures the set can absorb, or the query's error.
                    ingesters.push(Arc::new(Unavailable(reason)));
                }
            }
        }
        ReplicationSet { ingesters, max_errors }
    }
}

/// An ingester that cannot be asked: every call fails with `Unavailable` and the reason, so a query that
/// needed it fails loudly instead of returning a partial answer.
#[derive(Debug)]
struct Unavailable(String);

impl Unavailable {
    fn set(reason: String) -> ReplicationSet {
        ReplicationSet {
            ingesters: vec![Arc::new(Unavailable(reason))],
            max_errors: 0,
        }
    }

    fn status(&self) -> tonic::Status {
        tonic::Status::unavailable(self.0.clone())
    }
}

#[async_trait::async_trait]
impl IngesterClient for Unavailable {
    async fn push(&self, _: &TenantId, _: Bytes) -> Result<PushResponse, tonic::Status> {
        Err(self.status())
    }
    async fn query_stream(&self, _: &TenantId, _: QueryRequest) -> Result<heddle_proto::QueryStream, tonic::Status> {
        Err(self.status())
    }
    async fn label_names(&self, _: &TenantId, _: LabelNamesRequest) -> Result<LabelNamesResponse, tonic::Status> {
        Err(self.status())
    }
    async fn label_values(&self, _: &TenantId, _: LabelValuesRequest) -> Result<LabelValuesResponse, tonic::Status> {
        Err(self.status())
    }
    async fn series(&self, _: &TenantId, _: SeriesRequest) -> Result<SeriesResponse, tonic::Status> {
        Err(self.status())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use heddle_ring::{InstanceDesc, InstanceState, MembershipView, ReplicationConfig, RingDesc};

    fn ring(n: usize, unreachable: &[&str]) -> Arc<Ring> {
        let ring = Arc::new(Ring::new(ReplicationConfig::default()));
        let mut desc = RingDesc::default();
        for k in 0..n {
            desc.upsert(InstanceDesc {
                id: format!("ing-{k}"),
                addr: format!("ing-{k}:9095"),
                zone: String::new(),
                state: InstanceState::Active,
                tokens: vec![k as u32 * 1000],
                heartbeat_ms: heddle_ring::now_ms(),
                registered_at_ms: 0,
            });
        }
        ring.update(&MembershipView {
            desc,
            unreachable: unreachable.iter().map(|s| s.to_string()).collect(),
        });
        ring
    }

    fn pool() -> Arc<ClientPool<Arc<dyn IngesterClient>>> {
        Arc::new(ClientPool::new(Arc::new(|addr: &str| {
            Ok(Arc::new(Unavailable(addr.to_owned())) as Arc<dyn IngesterClient>)
        })))
    }

    #[test]
    fn asks_every_healthy_ingester_and_tolerates_rf_over_two() {
        let tenant = TenantId::new("t").unwrap();
        let set = RingIngesterSource::new(ring(3, &[]), pool()).replication_set(&tenant);
        assert_eq!((set.ingesters.len(), set.max_errors), (3, 1));
        let set = RingIngesterSource::new(ring(3, &["ing-0"]), pool()).replication_set(&tenant);
        assert_eq!((set.ingesters.len(), set.max_errors), (2, 0));
    }

    #[tokio::test]
    async fn too_few_ingesters_fail_the_query_with_the_ring_error() {
        let tenant = TenantId::new("t").unwrap();
        let set = RingIngesterSource::new(ring(3, &["ing-0", "ing-1"]), pool()).replication_set(&tenant);
        assert_eq!((set.ingesters.len(), set.max_errors), (1, 0));
        let err = set.ingesters[0]
            .series(&tenant, SeriesRequest::default())
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unavailable);
        assert!(
            err.message().contains("err-heddle-ring-too-many-unhealthy"),
            "{}",
            err.message()
        );
        let empty = RingIngesterSource::new(Arc::new(Ring::new(ReplicationConfig::default())), pool());
        let err = empty.replication_set(&tenant).ingesters[0]
            .series(&tenant, SeriesRequest::default())
            .await
            .unwrap_err();
        assert!(err.message().contains("err-heddle-ring-empty"), "{}", err.message());
    }
}
