//! Which ingesters hold a tenant's recent data.
//!
//! The querier asks an [`IngesterSource`] for a [`ReplicationSet`] per request. In single-process mode that is
//! one in-process ingester ([`StaticIngesters`]); with a ring it is every ingester that may own the tenant's
//! series, and a number of them that may fail without failing the query (as dskit's `ReplicationSet`).

use heddle_model::TenantId;
use heddle_proto::IngesterClient;
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
