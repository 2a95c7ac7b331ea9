//! [`RingAdmin`] over `heddle-ring`'s membership backend (gossip in a cluster).

use super::{MemberStatus, RingAdmin};
use crate::admin::error::AdminError;
use heddle_ring::{InstanceState, Membership, MembershipView};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The cluster ring as the admin API sees it.
#[derive(Debug)]
pub struct MembershipRing {
    membership: Arc<dyn Membership>,
    /// This process's ring id when it is an ingester (it may leave but never forget itself).
    self_id: Option<String>,
    heartbeat_timeout: Duration,
}

impl MembershipRing {
    /// Reads and changes the ring through `membership`.
    pub fn new(membership: Arc<dyn Membership>, self_id: Option<String>, heartbeat_timeout: Duration) -> Self {
        Self {
            membership,
            self_id,
            heartbeat_timeout,
        }
    }
}

#[tonic::async_trait]
impl RingAdmin for MembershipRing {
    fn backend(&self) -> &'static str {
        "gossip"
    }

    async fn status(&self) -> Vec<MemberStatus> {
        let view = self.membership.watch().borrow().clone();
        members(&view, heddle_ring::now_ms(), self.heartbeat_timeout)
    }

    async fn forget(&self, id: &str) -> Result<(), AdminError> {
        if self.self_id.as_deref() == Some(id) {
            return Err(AdminError::ForgetSelf { id: id.into() });
        }
        if !self.membership.watch().borrow().desc.instances.contains_key(id) {
            return Err(AdminError::UnknownMember { id: id.into() });
        }
        self.membership
            .forget(id)
            .await
            .map_err(|e| AdminError::Ring(e.to_string()))
    }

    async fn leave(&self) -> Result<(), AdminError> {
        match &self.self_id {
            Some(id) => self
                .membership
                .unregister(id)
                .await
                .map_err(|e| AdminError::Ring(e.to_string())),
            None => Ok(()),
        }
    }
}

/// Every member with the share of the 32-bit token space it owns: a token owns the range from the previous
/// token (exclusive) up to itself, wrapping around.
fn members(view: &MembershipView, now_ms: i64, timeout: Duration) -> Vec<MemberStatus> {
    let mut tokens: Vec<(u32, &str)> = view
        .desc
        .instances
        .values()
        .flat_map(|i| i.tokens.iter().map(move |t| (*t, i.id.as_str())))
        .collect();
    tokens.sort_unstable();
    let mut owned: BTreeMap<&str, u64> = BTreeMap::new();
    for (idx, (token, owner)) in tokens.iter().enumerate() {
        let prev = if idx == 0 {
            tokens[tokens.len() - 1].0
        } else {
            tokens[idx - 1].0
        };
        let span = if tokens.len() == 1 {
            1u64 << 32
        } else {
            u64::from(token.wrapping_sub(prev))
        };
        *owned.entry(owner).or_default() += span;
    }
    let timeout_ms = timeout.as_millis().min(i64::MAX as u128) as i64;
    view.desc
        .instances
        .values()
        .map(|i| {
            let healthy = i.heartbeat_fresh(now_ms, timeout_ms) && !view.unreachable.contains(&i.id);
            let state = if healthy || i.state == InstanceState::Left {
                i.state.as_str().to_owned()
            } else {
                "UNHEALTHY".to_owned()
            };
            MemberStatus {
                id: i.id.clone(),
                state,
                zone: i.zone.clone(),
                address: i.addr.clone(),
                tokens: i.tokens.len() as u32,
                ownership_percent: owned.get(i.id.as_str()).copied().unwrap_or(0) as f64 / (1u64 << 32) as f64 * 100.0,
                heartbeat_age_ms: (now_ms - i.heartbeat_ms).max(0),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use heddle_ring::{InstanceDesc, MemoryMembership};

    fn desc(id: &str, tokens: Vec<u32>, heartbeat_ms: i64) -> InstanceDesc {
        InstanceDesc {
            id: id.into(),
            addr: format!("{id}:9095"),
            zone: "z1".into(),
            state: InstanceState::Active,
            tokens,
            heartbeat_ms,
            registered_at_ms: 0,
        }
    }

    #[test]
    fn ownership_and_health() {
        let mut view = MembershipView::default();
        view.desc.upsert(desc("a", vec![0, 1 << 31], 1_000));
        view.desc.upsert(desc("b", vec![1 << 30], 100));
        let m = members(&view, 1_000, Duration::from_millis(500));
        let by_id: BTreeMap<_, _> = m.iter().map(|s| (s.id.as_str(), s)).collect();
        assert_eq!(
            by_id["a"].ownership_percent, 75.0,
            "a owns (2^30, 2^31] and (2^31, 2^32]"
        );
        assert_eq!(by_id["b"].ownership_percent, 25.0);
        assert_eq!(by_id["a"].state, "ACTIVE");
        assert_eq!(by_id["b"].state, "UNHEALTHY", "heartbeat 900ms old, timeout 500ms");
        assert_eq!(by_id["b"].heartbeat_age_ms, 900);
        assert_eq!(by_id["a"].tokens, 2);
        let empty = members(&MembershipView::default(), 0, Duration::from_secs(1));
        assert!(empty.is_empty());
    }

    #[tokio::test]
    async fn forget_goes_to_the_membership() {
        let mem = Arc::new(MemoryMembership::default());
        mem.publish(&desc("dead", vec![7], 0)).await.unwrap();
        mem.publish(&desc("me", vec![9], 0)).await.unwrap();
        let ring = MembershipRing::new(mem.clone(), Some("me".into()), Duration::from_secs(60));
        assert_eq!(
            ring.forget("me").await.unwrap_err().code(),
            tonic::Code::FailedPrecondition
        );
        assert_eq!(ring.forget("nobody").await.unwrap_err().code(), tonic::Code::NotFound);
        ring.forget("dead").await.unwrap();
        let ids: Vec<String> = ring.status().await.into_iter().map(|m| m.id).collect();
        assert_eq!(ids, vec!["me".to_owned()]);
        ring.leave().await.unwrap();
        assert!(ring.status().await.is_empty());
    }
}
