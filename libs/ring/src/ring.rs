//! The `Ring` handle: the current snapshot, swapped whole on every membership change.
//!
//! Readers call [`Ring::snapshot`] (an atomic pointer load and a reference-count increment, no lock) and keep
//! the `Arc` for as long as one request needs a stable view; a writer builds the next snapshot off to the side
//! and swaps it in.

use crate::desc::MembershipView;
use crate::replication::ReplicationConfig;
use crate::snapshot::RingSnapshot;
use arc_swap::ArcSwap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Wall-clock unix milliseconds: the time base of heartbeats.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis().min(i64::MAX as u128) as i64)
        .unwrap_or(0)
}

/// A shared, always-current view of the ring.
#[derive(Debug)]
pub struct Ring {
    cfg: ReplicationConfig,
    current: ArcSwap<RingSnapshot>,
}

impl Ring {
    /// An empty ring with `cfg`.
    pub fn new(cfg: ReplicationConfig) -> Self {
        let empty = RingSnapshot::new(&MembershipView::default(), cfg.clone());
        Self {
            cfg,
            current: ArcSwap::from_pointee(empty),
        }
    }

    /// The current snapshot. Cheap: no lock, no copy.
    pub fn snapshot(&self) -> Arc<RingSnapshot> {
        self.current.load_full()
    }

    /// The replication settings.
    pub fn config(&self) -> &ReplicationConfig {
        &self.cfg
    }

    /// Rebuilds the snapshot from `view` and publishes it.
    pub fn update(&self, view: &MembershipView) {
        self.current.store(Arc::new(RingSnapshot::new(view, self.cfg.clone())));
    }

    /// Follows a membership backend: applies its current view, then every change, until `stop` or until the
    /// backend goes away.
    pub fn follow(
        self: &Arc<Self>,
        mut views: watch::Receiver<Arc<MembershipView>>,
        stop: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let ring = Arc::clone(self);
        let first = Arc::clone(&views.borrow_and_update());
        ring.update(&first);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    changed = views.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        let view = Arc::clone(&views.borrow_and_update());
                        ring.update(&view);
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desc::RingDesc;
    use crate::instance::{InstanceDesc, InstanceState};
    use crate::replication::Operation;

    #[tokio::test]
    async fn follow_swaps_snapshots_and_old_ones_stay_valid() {
        let ring = Arc::new(Ring::new(ReplicationConfig {
            replication_factor: 1,
            ..Default::default()
        }));
        let (tx, rx) = watch::channel(Arc::new(MembershipView::default()));
        let stop = CancellationToken::new();
        let task = ring.follow(rx, stop.clone());
        let before = ring.snapshot();
        assert!(before.instances().is_empty());
        let mut desc = RingDesc::default();
        desc.upsert(InstanceDesc {
            id: "i1".into(),
            addr: "h:1".into(),
            zone: String::new(),
            state: InstanceState::Active,
            tokens: vec![7],
            heartbeat_ms: now_ms(),
            registered_at_ms: 0,
        });
        let mut seen = ring.snapshot();
        tx.send(Arc::new(MembershipView {
            desc,
            unreachable: Default::default(),
        }))
        .unwrap();
        for _ in 0..100 {
            seen = ring.snapshot();
            if !seen.instances().is_empty() {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(
            seen.replica_set(3, Operation::Write, now_ms()).unwrap().instances[0].id,
            "i1"
        );
        assert!(before.instances().is_empty(), "an old snapshot is not mutated");
        stop.cancel();
        task.await.unwrap();
    }
}
