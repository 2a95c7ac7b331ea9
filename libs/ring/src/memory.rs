//! The in-memory membership backend: the single-process mode, and tests that share one ring between
//! several lifecyclers.

use crate::desc::MembershipView;
use crate::error::RingError;
use crate::instance::InstanceDesc;
use crate::membership::Membership;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// A ring held in this process. Every clone of the `Arc` sees the same members.
#[derive(Debug)]
pub struct MemoryMembership {
    view: Mutex<MembershipView>,
    tx: watch::Sender<Arc<MembershipView>>,
}

impl Default for MemoryMembership {
    fn default() -> Self {
        Self {
            view: Mutex::new(MembershipView::default()),
            tx: watch::channel(Arc::new(MembershipView::default())).0,
        }
    }
}

impl MemoryMembership {
    /// An empty ring.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Marks `id` unreachable (or reachable again), as a failure detector would.
    pub fn set_reachable(&self, id: &str, reachable: bool) {
        self.change(|v| {
            if reachable {
                v.unreachable.remove(id);
            } else {
                v.unreachable.insert(id.to_owned());
            }
        });
    }

    fn change(&self, f: impl FnOnce(&mut MembershipView)) {
        // A poisoned lock only means another thread panicked mid-update of a plain map; keep serving.
        let mut view = self.view.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut view);
        self.tx.send_replace(Arc::new(view.clone()));
    }
}

#[async_trait::async_trait]
impl Membership for MemoryMembership {
    async fn publish(&self, desc: &InstanceDesc) -> Result<(), RingError> {
        self.change(|v| v.desc.upsert(desc.clone()));
        Ok(())
    }

    async fn unregister(&self, id: &str) -> Result<(), RingError> {
        self.change(|v| {
            v.desc.instances.remove(id);
        });
        Ok(())
    }

    async fn forget(&self, id: &str) -> Result<(), RingError> {
        self.change(|v| {
            v.desc.instances.remove(id);
            v.unreachable.remove(id);
        });
        Ok(())
    }

    fn watch(&self) -> watch::Receiver<Arc<MembershipView>> {
        self.tx.subscribe()
    }
}
