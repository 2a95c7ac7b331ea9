//! Sharing elections through the cluster's [`SharedState`]: publish what this distributor elected or kept
//! alive, adopt newer elections that others published, forget elections whose replica went silent.
//!
//! Key: `ha/<tenant length>/<tenant><cluster>` (unambiguous whatever the tenant and cluster contain); value:
//! `<elected_at_ms> <received_at_ms> <replica>`. Merging keeps the newest election and, within one
//! election, the latest sample time, so it gives the same answer in any order and any number of times.

use super::{Election, Entry, FORGET_AFTER_MS, HaTracker};
use heddle_model::Clock;
use heddle_ring::SharedState;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const PREFIX: &str = "ha/";

fn key(tenant: &str, cluster: &str) -> String {
    format!("{PREFIX}{}/{tenant}{cluster}", tenant.len())
}

/// `(tenant, cluster)` of a key read without its prefix.
fn parse_key(key: &str) -> Option<(&str, &str)> {
    let (len, rest) = key.split_once('/')?;
    let len: usize = len.parse().ok()?;
    if !rest.is_char_boundary(len) {
        return None;
    }
    let (tenant, cluster) = rest.split_at(len);
    (!tenant.is_empty() && !cluster.is_empty()).then_some((tenant, cluster))
}

fn encode(e: &Election) -> String {
    format!("{} {} {}", e.elected_at_ms, e.received_at_ms, e.replica)
}

fn decode(value: &str) -> Option<Election> {
    let mut parts = value.splitn(3, ' ');
    let elected_at_ms = parts.next()?.parse().ok()?;
    let received_at_ms = parts.next()?.parse().ok()?;
    let replica = parts.next()?;
    (!replica.is_empty()).then(|| Election {
        replica: replica.to_owned(),
        elected_at_ms,
        received_at_ms,
    })
}

/// What one sync round writes to the shared state.
#[derive(Debug, Default)]
struct Writes {
    set: Vec<(String, String)>,
    delete: Vec<String>,
}

impl HaTracker {
    /// One round at `now_ms`: publish this distributor's new elections and stale last-sample times, forget
    /// silent elections, then adopt what the other distributors published.
    pub async fn sync_once(&self, kv: &dyn SharedState, now_ms: i64) {
        let writes = self.take_writes(now_ms);
        for (k, v) in &writes.set {
            kv.set(k, v).await;
        }
        for k in &writes.delete {
            kv.delete(k).await;
        }
        let entries = kv.scan(PREFIX).await;
        let mut malformed = 0usize;
        for entry in &entries {
            match (parse_key(&entry.key), decode(&entry.value)) {
                (Some((tenant, cluster)), Some(election)) => self.merge(tenant, cluster, election, now_ms),
                _ if entry.value.is_empty() => {} // a deletion not yet collected
                _ => malformed += 1,
            }
        }
        if malformed > 0 {
            tracing::warn!(malformed, "ignoring HA tracker entries that cannot be read");
        }
    }

    /// Runs [`Self::sync_once`] every `interval`, and at once when this distributor elects a replica, until
    /// `stop`.
    pub async fn run_sync(
        self: Arc<Self>,
        kv: Arc<dyn SharedState>,
        clock: Arc<dyn Clock>,
        interval: Duration,
        stop: CancellationToken,
    ) {
        loop {
            self.sync_once(kv.as_ref(), clock.now_ms()).await;
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.publish.notified() => {}
                _ = tokio::time::sleep(interval) => {}
            }
        }
    }

    fn take_writes(&self, now_ms: i64) -> Writes {
        let mut writes = Writes::default();
        let mut all = self.lock();
        for (tenant, clusters) in all.iter_mut() {
            clusters.retain(|cluster, e| {
                if now_ms.saturating_sub(e.election.received_at_ms) > FORGET_AFTER_MS {
                    if e.own_key {
                        writes.delete.push(key(tenant, cluster));
                    }
                    return false;
                }
                let stale = e.election.received_at_ms.saturating_sub(e.shared_received_at_ms)
                    >= self.update_timeout_ms.saturating_add(e.jitter_ms);
                if e.urgent || stale {
                    writes.set.push((key(tenant, cluster), encode(&e.election)));
                    e.shared_received_at_ms = e.election.received_at_ms;
                    e.own_key = true;
                    e.urgent = false;
                }
                true
            });
        }
        all.retain(|_, clusters| !clusters.is_empty());
        writes
    }

    fn merge(&self, tenant: &str, cluster: &str, remote: Election, now_ms: i64) {
        if now_ms.saturating_sub(remote.received_at_ms) > FORGET_AFTER_MS {
            return;
        }
        let horizon = now_ms.saturating_add(self.max_clock_skew_ms.load(std::sync::atomic::Ordering::Relaxed));
        if remote.elected_at_ms > horizon || remote.received_at_ms > horizon {
            self.future_elections.inc();
            tracing::debug!(tenant, cluster, replica = %remote.replica, elected_at_ms = remote.elected_at_ms,
                received_at_ms = remote.received_at_ms, now_ms, "ignoring an HA election dated in the future");
            return;
        }
        let mut all = self.lock();
        let clusters = all.entry(tenant.to_owned()).or_default();
        let changed = match clusters.get_mut(cluster) {
            None => {
                let jitter_ms = self.jitter_ms(tenant, cluster);
                clusters.insert(
                    cluster.to_owned(),
                    Entry {
                        shared_received_at_ms: remote.received_at_ms,
                        election: remote,
                        own_key: false,
                        urgent: false,
                        jitter_ms,
                    },
                );
                true
            }
            Some(local) if remote.supersedes(&local.election) => {
                let changed = remote.replica != local.election.replica;
                if changed {
                    tracing::info!(tenant, cluster, from = %local.election.replica, to = %remote.replica,
                        "HA tracker: another distributor elected a newer replica");
                }
                local.shared_received_at_ms = remote.received_at_ms;
                local.election = remote;
                local.urgent = false;
                changed
            }
            Some(local)
                if remote.elected_at_ms == local.election.elected_at_ms && remote.replica == local.election.replica =>
            {
                local.election.received_at_ms = local.election.received_at_ms.max(remote.received_at_ms);
                local.shared_received_at_ms = local.shared_received_at_ms.max(remote.received_at_ms);
                false
            }
            Some(_) => false,
        };
        drop(all);
        if changed {
            self.count_change(tenant, cluster);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_round_trip_whatever_the_names_contain() {
        for (tenant, cluster) in [("t", "c"), ("a/b", "c d"), ("12/x", "/"), ("ü", "ß 1 2")] {
            let k = key(tenant, cluster);
            assert_eq!(parse_key(&k[PREFIX.len()..]), Some((tenant, cluster)), "{k}");
        }
        let e = Election {
            replica: "replica with spaces".into(),
            elected_at_ms: -5,
            received_at_ms: 1_700_000_000_000,
        };
        assert_eq!(decode(&encode(&e)), Some(e));
        for bad in ["", "1 2", "x 2 r", "1 y r", "1 2 "] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
        for bad in ["", "x/tc", "9/tc", "1/t", "0/c", "1/üc"] {
            assert_eq!(parse_key(bad), None, "{bad:?}");
        }
    }
}
