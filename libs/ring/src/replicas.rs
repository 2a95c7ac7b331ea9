//! The one seam between the ring and its users: which instances (with a client for each) a write of one
//! series goes to, and which a query asks.
//!
//! Writers (the distributor) ask [`Replicas::for_write`] per series token; readers (the querier) ask
//! [`Replicas::for_read`] once per query. Two implementations: [`FixedReplicas`], a fixed list (the
//! single-process mode and tests), and [`RingReplicas`], the hash ring with one pooled client per instance
//! address. Generic over the client type `C`, so the ring knows nothing of gRPC.

use crate::error::RingError;
use crate::pool::ClientPool;
use crate::replication::{Operation, min_success};
use crate::ring::{Ring, now_ms};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// An instance's id in the ring (`--ingester.ring.instance-id`).
pub type InstanceId = String;

/// One replica: the instance's id and the client that reaches it.
pub type Replica<C> = (InstanceId, C);

/// The instances a series must be written to, and how many must acknowledge it.
#[derive(Debug, Clone)]
pub struct WriteSet<C> {
    /// Distinct instances, in ring-walk order; a series is sent once to each.
    pub replicas: Vec<Replica<C>>,
    /// Acknowledgements needed for the write of a series to succeed (quorum, usually RF/2+1).
    pub min_success: usize,
    /// Why the ring could not form a full set (its error, e.g. too many unhealthy instances), for the 5xx
    /// message of a write that misses quorum for lack of replicas.
    pub unavailable: Option<String>,
}

impl<C> WriteSet<C> {
    /// The quorum for `replicas` replicas: `replicas/2 + 1` (dskit's `minSuccess`).
    pub fn quorum(replicas: usize) -> usize {
        min_success(replicas, replicas)
    }
}

/// The instances a query asks, and how many of them may fail (dskit's `ReplicationSet` for reads).
#[derive(Debug, Clone)]
pub struct ReadSet<C> {
    /// Every instance that may hold matching series; the query asks all of them and merges their answers.
    pub replicas: Vec<Replica<C>>,
    /// Instances that should be asked but cannot be (no client could be made for their address), with why.
    /// Each counts as one failed answer against `max_errors`.
    pub unreachable: Vec<(InstanceId, String)>,
    /// How many instances may fail before the query fails. With RF replicas written at quorum, RF - quorum.
    /// Zero for zone-aware reads, which count failed zones instead.
    pub max_errors: usize,
    /// Zone-aware reads: the zone of every instance and how many zones may fail; see [`crate::ReadTracker`].
    pub zones: Option<ReadZones>,
}

/// The zones of a zone-aware read (dskit's `MaxUnavailableZones`): one failed instance fails its zone, and
/// the read is complete once every instance of all zones but `max_unavailable` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadZones {
    /// The zone of each of [`ReadSet::replicas`], in order.
    pub of_replica: Vec<String>,
    /// The zone of each of [`ReadSet::unreachable`], in order.
    pub of_unreachable: Vec<String>,
    /// Zones that may fail with the read still complete.
    pub max_unavailable: usize,
}

impl<C> ReadSet<C> {
    /// Instances the query should hear from: those asked plus those that cannot be.
    pub fn len(&self) -> usize {
        self.replicas.len() + self.unreachable.len()
    }

    /// True when there is no instance at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Which instances hold a token (writes) or a tenant's data (reads): a fixed list, or the ring.
pub trait Replicas<C>: Send + Sync + fmt::Debug {
    /// The replicas owning `token`. An empty set (no healthy instance) fails the series; `unavailable` says
    /// why.
    fn for_write(&self, token: u32) -> WriteSet<C>;

    /// Every instance a query must ask. Queries go to every instance because a tenant's series are spread over
    /// all of them. An error means too few instances are healthy to answer completely.
    fn for_read(&self) -> Result<ReadSet<C>, RingError>;
}

/// A fixed list of replicas owning every token: the single-process mode (one instance, RF 1) and tests.
#[derive(Debug, Clone)]
pub struct FixedReplicas<C> {
    replicas: Vec<Replica<C>>,
    min_success: usize,
    max_errors: usize,
}

impl<C: Clone> FixedReplicas<C> {
    /// Every token is owned by all of `replicas`: writes need a majority, reads all of them.
    pub fn new(replicas: Vec<Replica<C>>) -> Self {
        Self {
            min_success: WriteSet::<C>::quorum(replicas.len()),
            replicas,
            max_errors: 0,
        }
    }

    /// One replica, `id`, owning everything (replication factor 1).
    pub fn single(id: impl Into<InstanceId>, client: C) -> Self {
        Self::new(vec![(id.into(), client)])
    }

    /// Writes succeed with `min_success` acknowledgements instead of a majority.
    pub fn with_min_success(mut self, min_success: usize) -> Self {
        self.min_success = min_success;
        self
    }

    /// Queries succeed with up to `max_errors` replicas failing (their copies cover for them).
    pub fn with_max_errors(mut self, max_errors: usize) -> Self {
        self.max_errors = max_errors;
        self
    }

    /// The replicas, in order.
    pub fn replicas(&self) -> &[Replica<C>] {
        &self.replicas
    }
}

impl<C: Clone + Send + Sync + fmt::Debug> Replicas<C> for FixedReplicas<C> {
    fn for_write(&self, _token: u32) -> WriteSet<C> {
        WriteSet {
            replicas: self.replicas.clone(),
            min_success: self.min_success,
            unavailable: None,
        }
    }

    fn for_read(&self) -> Result<ReadSet<C>, RingError> {
        Ok(ReadSet {
            replicas: self.replicas.clone(),
            unreachable: Vec::new(),
            max_errors: self.max_errors,
            zones: None,
        })
    }
}

/// The cluster: sets from the current [`Ring`] snapshot, clients from a pool keyed by instance address.
///
/// Writes use [`Operation::Write`] (ACTIVE instances only, extended past unhealthy ones); reads use
/// [`Operation::Read`] over every instance healthy for reads, tolerating RF/2 failures minus those already
/// unhealthy, or with zone awareness RF/2 failed zones (dskit's `GetReplicationSetForOperation`).
pub struct RingReplicas<C> {
    ring: Arc<Ring>,
    pool: Arc<ClientPool<C>>,
    /// Unix ms of the last logged write-lookup failure: they repeat for every series of every push.
    last_error_log_ms: AtomicI64,
}

impl<C> fmt::Debug for RingReplicas<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the ring itself: its snapshot holds every instance and token.
        f.debug_struct("RingReplicas")
            .field("instances", &self.ring.snapshot().instances().len())
            .field("pool", &self.pool)
            .finish()
    }
}

impl<C: Clone> RingReplicas<C> {
    /// Sets from `ring`, clients from `pool`.
    pub fn new(ring: Arc<Ring>, pool: Arc<ClientPool<C>>) -> Self {
        Self {
            ring,
            pool,
            last_error_log_ms: AtomicI64::new(0),
        }
    }

    /// Logs a lookup failure at most once every 10 s.
    fn log_rate_limited(&self, now_ms: i64, error: &dyn fmt::Display) {
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

impl<C: Clone + Send + Sync> Replicas<C> for RingReplicas<C> {
    fn for_write(&self, token: u32) -> WriteSet<C> {
        let now = now_ms();
        let snapshot = self.ring.snapshot();
        let set = match snapshot.replica_set(token, Operation::Write, now) {
            Ok(set) => set,
            Err(e) => {
                self.log_rate_limited(now, &e);
                return WriteSet {
                    replicas: Vec::new(),
                    min_success: 1,
                    unavailable: Some(e.to_string()),
                };
            }
        };
        let mut replicas = Vec::with_capacity(set.instances.len());
        for instance in set.instances {
            match self.pool.get(&instance.addr) {
                Ok(client) => replicas.push((instance.id.clone(), client)),
                // An address no client can be made for counts as a failed replica: min_success stays.
                Err(e) => self.log_rate_limited(now, &format!("instance {} at {:?}: {e}", instance.id, instance.addr)),
            }
        }
        WriteSet {
            replicas,
            min_success: set.min_success,
            unavailable: None,
        }
    }

    fn for_read(&self) -> Result<ReadSet<C>, RingError> {
        let snapshot = self.ring.snapshot();
        let set = snapshot.read_instances(Operation::Read, now_ms())?;
        let mut out = ReadSet {
            replicas: Vec::with_capacity(set.instances.len()),
            unreachable: Vec::new(),
            max_errors: set.max_errors,
            zones: set.max_unavailable_zones.map(|max_unavailable| ReadZones {
                of_replica: Vec::with_capacity(set.instances.len()),
                of_unreachable: Vec::new(),
                max_unavailable,
            }),
        };
        for instance in set.instances {
            let zone = instance.zone.clone();
            match self.pool.get(&instance.addr) {
                Ok(client) => {
                    out.replicas.push((instance.id.clone(), client));
                    if let Some(z) = out.zones.as_mut() {
                        z.of_replica.push(zone);
                    }
                }
                Err(e) => {
                    out.unreachable.push((
                        instance.id.clone(),
                        format!("ingester {} at {:?}: {e}", instance.id, instance.addr),
                    ));
                    if let Some(z) = out.zones.as_mut() {
                        z.of_unreachable.push(zone);
                    }
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
#[path = "replicas/tests.rs"]
mod tests;
