//! An immutable view of the ring, built once per membership change and shared by every lookup.

use crate::desc::MembershipView;
use crate::error::RingError;
use crate::instance::InstanceDesc;
use crate::replication::{Operation, ReplicaBuf, ReplicationConfig, min_success};
use crate::token_table::TokenTable;
use std::collections::BTreeMap;

/// Zone index meaning "no zone": never used up, so zone-less instances never block each other.
const NO_ZONE: u32 = u32::MAX;

/// The ring at one moment: instances (sorted by id), their reachability and zones, and the token table.
#[derive(Debug, Default)]
pub struct RingSnapshot {
    cfg: ReplicationConfig,
    instances: Vec<InstanceDesc>,
    reachable: Vec<bool>,
    zones: Vec<u32>,
    num_zones: usize,
    /// Instances owning at least one token: the most a walk can take.
    num_owners: usize,
    table: TokenTable,
}

/// One token's replica instances, borrowed from the snapshot ([`crate::Replicas`] pairs them with clients).
#[derive(Debug, Clone)]
pub struct InstanceSet<'a> {
    /// The instances to send to, in walk order.
    pub instances: Vec<&'a InstanceDesc>,
    /// Acknowledgements needed.
    pub min_success: usize,
}

/// The instances a query must ask, and how many may fail (dskit's `GetReplicationSetForOperation`).
#[derive(Debug, Clone)]
pub struct ReadInstances<'a> {
    pub instances: Vec<&'a InstanceDesc>,
    pub max_errors: usize,
    /// Zone-aware reads: how many zones of `instances` may still fail (`max_errors` is then 0).
    pub max_unavailable_zones: Option<usize>,
}

impl RingSnapshot {
    /// Builds the snapshot of `view` under `cfg`.
    pub fn new(view: &MembershipView, cfg: ReplicationConfig) -> Self {
        let instances: Vec<InstanceDesc> = view.desc.instances.values().cloned().collect();
        let reachable = instances.iter().map(|i| !view.unreachable.contains(&i.id)).collect();
        let mut zone_ids: BTreeMap<&str, u32> = BTreeMap::new();
        for i in &instances {
            if !i.zone.is_empty() {
                let next = zone_ids.len() as u32;
                zone_ids.entry(i.zone.as_str()).or_insert(next);
            }
        }
        let zones = instances
            .iter()
            .map(|i| {
                if i.zone.is_empty() {
                    NO_ZONE
                } else {
                    zone_ids[i.zone.as_str()]
                }
            })
            .collect();
        let num_zones = zone_ids.len();
        // Owners ranked by (registered_at, id) so a duplicated token goes to the earliest registration.
        let mut rank: Vec<u32> = (0..instances.len() as u32).collect();
        rank.sort_by_key(|&i| (instances[i as usize].registered_at_ms, i));
        let mut rank_of = vec![0u32; instances.len()];
        for (r, &i) in rank.iter().enumerate() {
            rank_of[i as usize] = r as u32;
        }
        let mut pairs: Vec<(u32, u32)> = instances
            .iter()
            .enumerate()
            .flat_map(|(idx, inst)| inst.tokens.iter().map(move |&t| (t, idx as u32)))
            .map(|(t, idx)| (t, rank_of[idx as usize]))
            .collect();
        pairs.sort_unstable();
        pairs.dedup_by_key(|(t, _)| *t);
        let table = TokenTable::build(pairs.into_iter().map(|(t, r)| (t, rank[r as usize])).collect());
        let num_owners = instances.iter().filter(|i| !i.tokens.is_empty()).count();
        Self {
            cfg,
            instances,
            reachable,
            zones,
            num_zones,
            num_owners,
            table,
        }
    }

    /// The replication settings lookups use.
    pub fn config(&self) -> &ReplicationConfig {
        &self.cfg
    }

    /// Every instance, sorted by id. Lookup results index into this.
    pub fn instances(&self) -> &[InstanceDesc] {
        &self.instances
    }

    /// The instance at `idx` of [`Self::instances`].
    pub fn instance(&self, idx: u32) -> &InstanceDesc {
        &self.instances[idx as usize]
    }

    /// The token table.
    pub fn tokens(&self) -> &TokenTable {
        &self.table
    }

    /// True when the membership backend can reach the instance at `idx`.
    pub fn is_reachable(&self, idx: u32) -> bool {
        self.reachable[idx as usize]
    }

    /// True when `idx` is reachable and its heartbeat is fresh at `now_ms`.
    pub fn is_alive(&self, idx: u32, now_ms: i64) -> bool {
        let timeout = self.cfg.heartbeat_timeout.as_millis().min(i64::MAX as u128) as i64;
        self.reachable[idx as usize] && self.instances[idx as usize].heartbeat_fresh(now_ms, timeout)
    }

    /// True when `idx` serves `op` at `now_ms` (dskit's `IsHealthy`).
    pub fn is_healthy(&self, idx: u32, op: Operation, now_ms: i64) -> bool {
        op.accepts(self.instances[idx as usize].state) && self.is_alive(idx, now_ms)
    }

    /// The replicas of `token` for `op`, into `buf.healthy` (instance indices); returns the quorum. The
    /// hot-path form: no allocation once `buf` has grown.
    pub fn replicas_into(
        &self,
        token: u32,
        op: Operation,
        now_ms: i64,
        buf: &mut ReplicaBuf,
    ) -> Result<usize, RingError> {
        buf.healthy.clear();
        buf.walked.clear();
        buf.used_zones.clear();
        if self.table.is_empty() {
            return Err(RingError::Empty);
        }
        let zone_aware = self.cfg.zone_awareness_enabled;
        let mut n = self.cfg.replication_factor.max(1);
        let mut counted = 0usize;
        let start = self.table.successor(token);
        for step in 0..self.table.len() {
            if buf.walked.len() >= n.min(self.num_owners)
                || (zone_aware && buf.used_zones.len() >= self.num_zones && self.num_zones > 0)
            {
                break;
            }
            let (_, owner) = self.table.at(start + step);
            if buf.walked.contains(&owner) {
                continue;
            }
            let zone = self.zones[owner as usize];
            if zone_aware && zone != NO_ZONE && buf.used_zones.contains(&zone) {
                continue;
            }
            buf.walked.push(owner);
            if !self.is_alive(owner, now_ms) {
                n += 1;
                continue;
            }
            let state = self.instances[owner as usize].state;
            counted += 1;
            if op.extends_on(state) {
                n += 1;
            } else if zone_aware && zone != NO_ZONE {
                buf.used_zones.push(zone);
            }
            if op.accepts(state) {
                buf.healthy.push(owner);
            }
        }
        let required = min_success(self.cfg.replication_factor, counted);
        if buf.healthy.len() < required {
            let unhealthy: Vec<&str> = buf
                .walked
                .iter()
                .filter(|i| !buf.healthy.contains(i))
                .map(|&i| self.instances[i as usize].id.as_str())
                .collect();
            return Err(RingError::TooManyUnhealthy {
                required,
                found: buf.healthy.len(),
                unhealthy: if unhealthy.is_empty() {
                    "none".into()
                } else {
                    unhealthy.join(",")
                },
            });
        }
        Ok(required)
    }

    /// The replicas of `token` for `op`, as instance descriptions. Allocates; see [`Self::replicas_into`].
    pub fn replica_set(&self, token: u32, op: Operation, now_ms: i64) -> Result<InstanceSet<'_>, RingError> {
        let mut buf = ReplicaBuf::default();
        let min_success = self.replicas_into(token, op, now_ms, &mut buf)?;
        Ok(InstanceSet {
            instances: buf.healthy.iter().map(|&i| self.instance(i)).collect(),
            min_success,
        })
    }

    /// Every instance a query must ask for `op`, and how many of them may fail: with RF replicas written at
    /// quorum, any RF/2 instances may be missing (dskit's `GetReplicationSetForOperation`). With zone
    /// awareness, failures are counted by zone instead; see [`Self::read_zones`].
    pub fn read_instances(&self, op: Operation, now_ms: i64) -> Result<ReadInstances<'_>, RingError> {
        if self.instances.is_empty() {
            return Err(RingError::Empty);
        }
        if self.cfg.zone_awareness_enabled {
            return self.read_zones(op, now_ms);
        }
        let rf = self.cfg.replication_factor.max(1);
        let required = self.instances.len().max(rf) - rf / 2;
        let healthy: Vec<&InstanceDesc> = (0..self.instances.len() as u32)
            .filter(|&i| self.is_healthy(i, op, now_ms))
            .map(|i| self.instance(i))
            .collect();
        if healthy.len() < required {
            let unhealthy: Vec<&str> = (0..self.instances.len() as u32)
                .filter(|&i| !self.is_healthy(i, op, now_ms))
                .map(|i| self.instance(i).id.as_str())
                .collect();
            return Err(RingError::TooManyUnhealthy {
                required,
                found: healthy.len(),
                unhealthy: unhealthy.join(","),
            });
        }
        Ok(ReadInstances {
            max_errors: healthy.len() - required,
            instances: healthy,
            max_unavailable_zones: None,
        })
    }

    /// The zone-aware read set (dskit's zone branch of `GetReplicationSetForOperation`): a series is written
    /// to `min(RF, zones)` zones and acknowledged by a majority of them, so all but `min(RF, zones)/2` zones
    /// together hold every acknowledged sample. A zone with any unhealthy instance is left out whole (its
    /// healthy instances hold nothing the other zones lack) and uses up one of the zones that may fail;
    /// more failed zones than that fail the read.
    fn read_zones(&self, op: Operation, now_ms: i64) -> Result<ReadInstances<'_>, RingError> {
        let mut zones: Vec<&str> = self.instances.iter().map(|i| i.zone.as_str()).collect();
        zones.sort_unstable();
        zones.dedup();
        let replicated = zones.len().min(self.cfg.replication_factor.max(1));
        let max_unavailable = replicated / 2;
        let unhealthy: Vec<&InstanceDesc> = (0..self.instances.len() as u32)
            .filter(|&i| !self.is_healthy(i, op, now_ms))
            .map(|i| self.instance(i))
            .collect();
        let mut failed: Vec<&str> = unhealthy.iter().map(|i| i.zone.as_str()).collect();
        failed.sort_unstable();
        failed.dedup();
        if failed.len() > max_unavailable {
            let detail: Vec<String> = failed
                .iter()
                .map(|zone| {
                    let ids: Vec<&str> = unhealthy
                        .iter()
                        .filter(|i| i.zone == *zone)
                        .map(|i| i.id.as_str())
                        .collect();
                    format!("zone {zone:?}: {}", ids.join(","))
                })
                .collect();
            return Err(RingError::TooManyUnhealthyZones {
                required: zones.len() - max_unavailable,
                zones: zones.len(),
                failed: failed.len(),
                max_unavailable,
                unhealthy: detail.join("; "),
            });
        }
        Ok(ReadInstances {
            instances: self
                .instances
                .iter()
                .filter(|i| !failed.contains(&i.zone.as_str()))
                .collect(),
            max_errors: 0,
            max_unavailable_zones: Some(max_unavailable - failed.len()),
        })
    }
}

#[cfg(test)]
#[path = "snapshot/tests.rs"]
mod tests;
