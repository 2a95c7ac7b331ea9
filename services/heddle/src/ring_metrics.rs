//! `heddle_ring_members{state}`: how many ingesters this process sees in the ring, by state, with members whose
//! heartbeat is stale (or whom gossip reports unreachable) counted as `UNHEALTHY` instead of their own state, as
//! the ring page and the replica-set selection do.
//!
//! The counts are recomputed from the membership view on every view change and on a short tick (a stale
//! heartbeat changes nothing in the view; only time makes it stale), never at scrape time: a scrape reads five
//! atomics. The work per update is O(ring members).

use heddle_ring::{InstanceState, MembershipView, now_ms};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The state label of a member whose heartbeat is older than the timeout or that gossip cannot reach.
const UNHEALTHY: &str = "UNHEALTHY";
/// Every value of the `state` label, all exposed (0 included) so alerts never see an absent series.
const STATES: [&str; 5] = ["ACTIVE", "JOINING", "LEAVING", "PENDING", UNHEALTHY];

/// How often stale heartbeats are looked for between view changes (the default heartbeat timeout is 1m).
const TICK: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

/// The ring-members gauge family.
#[derive(Debug, Clone, Default)]
pub(crate) struct RingMembers(Family<StateLabels, Gauge>);

impl RingMembers {
    /// Creates the family, with every state at 0, and registers it.
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let me = Self::default();
        for state in STATES {
            me.0.get_or_create(&StateLabels { state }).set(0);
        }
        registry.register(
            "heddle_ring_members",
            "Ingesters in the ring as this process sees it, by state; UNHEALTHY counts members whose heartbeat is \
             older than ingester.ring.heartbeat_timeout or that gossip cannot reach, whatever their own state",
            me.0.clone(),
        );
        me
    }

    /// Sets the gauges from `view` at `now_ms`.
    pub(crate) fn update(&self, view: &MembershipView, now_ms: i64, heartbeat_timeout: Duration) {
        let timeout_ms = i64::try_from(heartbeat_timeout.as_millis()).unwrap_or(i64::MAX);
        let mut counts = [0i64; STATES.len()];
        for i in view.desc.instances.values() {
            let healthy = i.heartbeat_fresh(now_ms, timeout_ms) && !view.unreachable.contains(&i.id);
            let state = match i.state {
                // Tombstones are dropped from the ring desc; never count one.
                InstanceState::Left => continue,
                _ if !healthy => UNHEALTHY,
                s => s.as_str(),
            };
            if let Some(slot) = STATES.iter().position(|s| *s == state) {
                counts[slot] += 1;
            }
        }
        for (state, n) in STATES.into_iter().zip(counts) {
            self.0.get_or_create(&StateLabels { state }).set(n);
        }
    }

    /// Keeps the gauges current from `views` until `stop`: on every change, and every [`TICK`] for heartbeats
    /// that go stale.
    pub(crate) fn follow(
        self,
        mut views: watch::Receiver<Arc<MembershipView>>,
        heartbeat_timeout: Duration,
        stop: CancellationToken,
    ) {
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(TICK);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let view = Arc::clone(&views.borrow_and_update());
                self.update(&view, now_ms(), heartbeat_timeout);
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = ticker.tick() => {}
                    changed = views.changed() => if changed.is_err() { return },
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use heddle_ring::{InstanceDesc, RingDesc};

    fn member(id: &str, state: InstanceState, heartbeat_ms: i64) -> InstanceDesc {
        InstanceDesc {
            id: id.into(),
            addr: format!("{id}:9095"),
            zone: String::new(),
            state,
            tokens: vec![1],
            heartbeat_ms,
            registered_at_ms: 0,
        }
    }

    fn exposition(registry: &Registry) -> String {
        heddle_server::encode_metrics(registry)
    }

    #[test]
    fn counts_each_member_once_with_stale_and_unreachable_ones_unhealthy() {
        let mut registry = Registry::default();
        let m = RingMembers::register(&mut registry);
        let text = exposition(&registry);
        for state in STATES {
            assert!(
                text.contains(&format!("heddle_ring_members{{state=\"{state}\"}} 0")),
                "{state} is exposed before any view:\n{text}"
            );
        }
        let now = 1_000_000;
        let mut desc = RingDesc::default();
        desc.upsert(member("a", InstanceState::Active, now - 1_000));
        desc.upsert(member("b", InstanceState::Active, now - 61_000));
        desc.upsert(member("c", InstanceState::Joining, now));
        desc.upsert(member("d", InstanceState::Leaving, now));
        desc.upsert(member("e", InstanceState::Active, now));
        let view = MembershipView {
            desc,
            unreachable: ["e".to_owned()].into(),
        };
        m.update(&view, now, Duration::from_secs(60));
        let text = exposition(&registry);
        for (state, n) in [
            ("ACTIVE", 1),
            ("JOINING", 1),
            ("LEAVING", 1),
            ("PENDING", 0),
            ("UNHEALTHY", 2),
        ] {
            assert!(
                text.contains(&format!("heddle_ring_members{{state=\"{state}\"}} {n}")),
                "{state} = {n} (b's heartbeat is 61s old, e is unreachable):\n{text}"
            );
        }
        // b heartbeats again and e is back: both count in their own state.
        let mut healed = view.clone();
        healed.unreachable.clear();
        healed.desc.upsert(member("b", InstanceState::Active, now));
        m.update(&healed, now, Duration::from_secs(60));
        let text = exposition(&registry);
        assert!(text.contains("heddle_ring_members{state=\"ACTIVE\"} 3"), "{text}");
        assert!(text.contains("heddle_ring_members{state=\"UNHEALTHY\"} 0"), "{text}");
    }
}
