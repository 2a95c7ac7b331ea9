//! The ring as the admin API sees it: a small trait, so the single-process mode and the gossip ring answer
//! the same `RingStatus` / `ForgetMember` calls.

mod membership;

pub use membership::MembershipRing;

use super::error::AdminError;
use std::fmt::Debug;

/// One ring member as `RingStatus` reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberStatus {
    pub id: String,
    /// JOINING, ACTIVE, LEAVING or UNHEALTHY.
    pub state: String,
    pub zone: String,
    pub address: String,
    pub tokens: u32,
    /// Share of the token space owned, 0..=100.
    pub ownership_percent: f64,
    pub heartbeat_age_ms: i64,
}

/// What the admin API needs from the ring. The single-process mode uses [`LocalRing`]; the gossip ring
/// (`heddle-ring`'s `Membership` + `Lifecycler`) plugs in here when `run.rs` wires it.
#[tonic::async_trait]
pub trait RingAdmin: Send + Sync + Debug {
    /// Which backend answers ("local", "gossip").
    fn backend(&self) -> &'static str;
    /// Every member, sorted by id.
    async fn status(&self) -> Vec<MemberStatus>;
    /// Drops another member's entry.
    async fn forget(&self, id: &str) -> Result<(), AdminError>;
    /// Removes this process's own entry (prepared shutdown).
    async fn leave(&self) -> Result<(), AdminError>;
}

/// The in-memory ring of the single-process mode: this one ingester, owning the whole token space.
#[derive(Debug)]
pub struct LocalRing {
    id: String,
    address: String,
}

impl LocalRing {
    /// A ring holding only this process, reachable at `address`.
    pub fn new(id: impl Into<String>, address: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            address: address.into(),
        }
    }
}

#[tonic::async_trait]
impl RingAdmin for LocalRing {
    fn backend(&self) -> &'static str {
        "local"
    }

    async fn status(&self) -> Vec<MemberStatus> {
        vec![MemberStatus {
            id: self.id.clone(),
            state: "ACTIVE".into(),
            zone: String::new(),
            address: self.address.clone(),
            tokens: 0,
            ownership_percent: 100.0,
            heartbeat_age_ms: 0,
        }]
    }

    async fn forget(&self, id: &str) -> Result<(), AdminError> {
        if id == self.id {
            Err(AdminError::ForgetSelf { id: id.into() })
        } else {
            Err(AdminError::UnknownMember { id: id.into() })
        }
    }

    async fn leave(&self) -> Result<(), AdminError> {
        // Nobody else reads a single-process ring: leaving it has no one to tell.
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn local_ring_has_one_member_that_cannot_be_forgotten() {
        let ring = LocalRing::new("me", "127.0.0.1:9095");
        let members = ring.status().await;
        assert_eq!(members.len(), 1);
        assert_eq!((members[0].id.as_str(), members[0].ownership_percent), ("me", 100.0));
        assert_eq!(
            ring.forget("me").await.unwrap_err().code(),
            tonic::Code::FailedPrecondition
        );
        assert_eq!(ring.forget("other").await.unwrap_err().code(), tonic::Code::NotFound);
        ring.leave().await.unwrap();
    }
}
