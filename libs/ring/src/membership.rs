//! How processes learn the ring: the `Membership` backend trait.

use crate::desc::MembershipView;
use crate::error::RingError;
use crate::instance::InstanceDesc;
use std::fmt::Debug;
use std::sync::Arc;
use tokio::sync::watch;

/// A membership backend: where ring entries are published and read. Ingesters publish their own entry;
/// every process watches the view. Implemented in memory ([`crate::MemoryMembership`]) and over gossip
/// ([`crate::GossipMembership`]).
#[async_trait::async_trait]
pub trait Membership: Send + Sync + Debug {
    /// Adds or replaces this process's own entry.
    async fn publish(&self, desc: &InstanceDesc) -> Result<(), RingError>;
    /// Removes this process's own entry (clean shutdown with `unregister_on_shutdown`).
    async fn unregister(&self, id: &str) -> Result<(), RingError>;
    /// Drops another member's entry (an operator's "forget" of a dead ingester). A live member re-appears
    /// with its next heartbeat, as in dskit.
    async fn forget(&self, id: &str) -> Result<(), RingError>;
    /// The current view, and every change after it.
    fn watch(&self) -> watch::Receiver<Arc<MembershipView>>;
}
