//! The seam between the distributor and the ring: which ingesters own a token.
//!
//! Kept deliberately small so `libs/ring` can implement it later (token walk, zones, unhealthy instances)
//! without the distributor changing. [`SingleIngesterRing`] serves the single-process mode.

use heddle_proto::IngesterClient;
use std::fmt::Debug;
use std::sync::Arc;

/// An ingester's id in the ring (`--ingester.ring.instance-id`).
pub type InstanceId = String;

/// The ingesters a series must be written to, and how many must acknowledge it.
#[derive(Debug, Clone)]
pub struct ReplicaSet {
    /// Distinct ingesters; a series is sent once to each.
    pub ingesters: Vec<(InstanceId, Arc<dyn IngesterClient>)>,
    /// Acknowledgements needed for the write of a series to succeed (quorum, usually RF/2+1).
    pub min_success: usize,
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorum_is_majority() {
        for (rf, q) in [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3)] {
            assert_eq!(ReplicaSet::quorum(rf), q, "rf {rf}");
        }
    }
}
