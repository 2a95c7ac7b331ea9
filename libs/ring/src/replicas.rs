//! The one seam between the ring and its users: which instances (with a client for each) a write of one
//! series goes to, and which a query asks.
//!
//! Writers (the distributor) ask [`Replicas::write_sets`] for every series of a request at once (or
//! [`Replicas::for_write`] for one token); readers (the querier) ask
//! [`Replicas::for_read`] once per query. Two implementations: [`FixedReplicas`], a fixed list (the
//! single-process mode and tests), and [`RingReplicas`], the hash ring with one pooled client per instance
//! address. Generic over the client type `C`, so the ring knows nothing of gRPC.

use crate::error::RingError;
use crate::pool::ClientPool;
use crate::replication::{Operation, ReplicaBuf, min_success};
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

/// The replica sets of every series of one request (see [`Replicas::write_sets`]), in buffers that are filled
/// without allocating per series: each set lists instances by number into [`WriteSets::instances`], a table
/// holding each instance the request writes to once, with its client.
#[derive(Debug)]
pub struct WriteSets<C> {
    instances: Vec<Replica<C>>,
    /// Every set's instance numbers, one set after the other.
    members: Vec<u32>,
    /// Per series: its slice of `members` and its quorum.
    sets: Vec<SetEntry>,
    unavailable: Option<String>,
}

/// One series' set inside [`WriteSets`].
#[derive(Debug, Clone, Copy)]
struct SetEntry {
    start: u32,
    end: u32,
    min_success: u32,
}

/// One series' replica set, borrowed from [`WriteSets`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteSetRef<'a> {
    /// Numbers of the instances (in [`WriteSets::instances`]) to send to, in ring-walk order. A number can
    /// appear twice if the ring listed an instance twice: the series is still sent to it once.
    pub replicas: &'a [u32],
    /// Acknowledgements needed for the series (as [`WriteSet::min_success`]).
    pub min_success: usize,
}

impl<C> Default for WriteSets<C> {
    fn default() -> Self {
        Self {
            instances: Vec::new(),
            members: Vec::new(),
            sets: Vec::new(),
            unavailable: None,
        }
    }
}

impl<C> WriteSets<C> {
    /// Empty buffers with room for `series` sets of `replicas` instances each.
    pub fn with_capacity(series: usize, replicas: usize) -> Self {
        Self {
            instances: Vec::new(),
            members: Vec::with_capacity(series.saturating_mul(replicas)),
            sets: Vec::with_capacity(series),
            unavailable: None,
        }
    }

    /// Forgets every set and instance, keeping the buffers.
    pub fn clear(&mut self) {
        self.instances.clear();
        self.members.clear();
        self.sets.clear();
        self.unavailable = None;
    }

    /// Number of sets (series).
    pub fn len(&self) -> usize {
        self.sets.len()
    }

    /// True when there is no set.
    pub fn is_empty(&self) -> bool {
        self.sets.is_empty()
    }

    /// The set of series `i` (in the order they were asked for). Panics when `i >= self.len()`.
    pub fn set(&self, i: usize) -> WriteSetRef<'_> {
        let e = self.sets[i];
        WriteSetRef {
            replicas: &self.members[e.start as usize..e.end as usize],
            min_success: e.min_success as usize,
        }
    }

    /// Every instance some set writes to, each once, with its client; sets refer to them by position.
    pub fn instances(&self) -> &[Replica<C>] {
        &self.instances
    }

    /// The instance table, taken out (the sets' numbers index into it).
    pub fn take_instances(&mut self) -> Vec<Replica<C>> {
        std::mem::take(&mut self.instances)
    }

    /// The first ring error met while forming the sets (why some have too few replicas), as
    /// [`WriteSet::unavailable`].
    pub fn unavailable(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }

    /// Takes [`Self::unavailable`] out.
    pub fn take_unavailable(&mut self) -> Option<String> {
        self.unavailable.take()
    }

    /// Adds an instance to the table and returns its number.
    pub fn add_instance(&mut self, id: InstanceId, client: C) -> u32 {
        self.instances.push((id, client));
        (self.instances.len() - 1) as u32
    }

    /// Appends the next series' set: `replicas` (numbers from [`Self::add_instance`]) needing `min_success`.
    pub fn push_set(&mut self, replicas: impl IntoIterator<Item = u32>, min_success: usize) {
        let start = self.members.len() as u32;
        self.members.extend(replicas);
        self.sets.push(SetEntry {
            start,
            end: self.members.len() as u32,
            min_success: u32::try_from(min_success).unwrap_or(u32::MAX),
        });
    }

    /// Appends the next series' set as a copy of series `of`'s (the same instances and quorum), without
    /// copying its instance list. Panics when `of >= self.len()`.
    pub fn push_same_as(&mut self, of: usize) {
        self.sets.push(self.sets[of]);
    }

    /// Records why a set could not be formed; the first reason is kept.
    pub fn note_unavailable(&mut self, why: impl FnOnce() -> String) {
        if self.unavailable.is_none() {
            self.unavailable = Some(why());
        }
    }

    /// Appends a [`WriteSet`] made by [`Replicas::for_write`], numbering its instances by id (an id already
    /// in the table keeps its first client).
    pub fn push_write_set(&mut self, set: WriteSet<C>) {
        let start = self.members.len() as u32;
        for (id, client) in set.replicas {
            let n = match self.instances.iter().position(|(known, _)| *known == id) {
                Some(n) => n as u32,
                None => self.add_instance(id, client),
            };
            self.members.push(n);
        }
        self.sets.push(SetEntry {
            start,
            end: self.members.len() as u32,
            min_success: u32::try_from(set.min_success).unwrap_or(u32::MAX),
        });
        if let Some(why) = set.unavailable {
            self.note_unavailable(|| why);
        }
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

    /// The sets of the `series` series of one request into `out` (cleared first), in order: the same answers
    /// as [`Self::for_write`] gives each token, with each instance listed once in the request's table.
    /// `token(i)` is series `i`'s token; it is called at most once per series, and not at all by an
    /// implementation whose set is the same for every token.
    ///
    /// The ring answers every series from one snapshot and looks each instance's client up once per request.
    fn write_sets(&self, series: usize, token: &mut dyn FnMut(usize) -> u32, out: &mut WriteSets<C>) {
        out.clear();
        for i in 0..series {
            out.push_write_set(self.for_write(token(i)));
        }
    }

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

    /// One copy of the list per request, shared by every series' set; tokens are not needed.
    fn write_sets(&self, series: usize, _token: &mut dyn FnMut(usize) -> u32, out: &mut WriteSets<C>) {
        out.clear();
        if series == 0 {
            return;
        }
        out.push_write_set(self.for_write(0));
        for _ in 1..series {
            out.push_same_as(0);
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

/// [`RingReplicas::write_sets`]: an instance whose client is not looked up yet.
const UNRESOLVED: u32 = u32::MAX;
/// [`RingReplicas::write_sets`]: an instance no client can be made for.
const NO_CLIENT: u32 = u32::MAX - 1;

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

    fn write_sets(&self, series: usize, token: &mut dyn FnMut(usize) -> u32, out: &mut WriteSets<C>) {
        out.clear();
        if series == 0 {
            return;
        }
        let now = now_ms();
        let snapshot = self.ring.snapshot();
        let mut buf = ReplicaBuf::default();
        // Per snapshot instance: its number in `out`, looked up the first time a set names it.
        let mut number = vec![UNRESOLVED; snapshot.instances().len()];
        for i in 0..series {
            let min_success = match snapshot.replicas_into(token(i), Operation::Write, now, &mut buf) {
                Ok(min_success) => min_success,
                Err(e) => {
                    self.log_rate_limited(now, &e);
                    out.note_unavailable(|| e.to_string());
                    out.push_set([], 1);
                    continue;
                }
            };
            for &idx in &buf.healthy {
                let n = &mut number[idx as usize];
                if *n == UNRESOLVED {
                    let instance = snapshot.instance(idx);
                    *n = match self.pool.get(&instance.addr) {
                        Ok(client) => out.add_instance(instance.id.clone(), client),
                        // An address no client can be made for counts as a failed replica: min_success stays.
                        Err(e) => {
                            self.log_rate_limited(
                                now,
                                &format!("instance {} at {:?}: {e}", instance.id, instance.addr),
                            );
                            NO_CLIENT
                        }
                    };
                }
            }
            out.push_set(
                buf.healthy
                    .iter()
                    .map(|&idx| number[idx as usize])
                    .filter(|&n| n != NO_CLIENT),
                min_success,
            );
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
