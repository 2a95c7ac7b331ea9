//! Small values that every member publishes and every member reads: the gossip key-value store other
//! components share state through (the distributors' HA-tracker elections), dskit's memberlist KV for
//! anything that is not the ring.
//!
//! Each member writes only keys in its own gossip state; a reader sees every member's keys and merges them
//! with its own rule (there is no compare-and-swap: merges must be commutative and idempotent, as
//! memberlist's are). Keys of members that died stay readable until the failure detector's grace period
//! drops the member.

use crate::gossip::GossipMembership;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Mutex;

/// One member's value under a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedEntry {
    /// The member that published it.
    pub member: String,
    /// The key, without the prefix that was scanned for.
    pub key: String,
    pub value: String,
}

/// A key-value store replicated between the members of a cluster: the gossip one
/// ([`GossipMembership`]) or an in-process one ([`MemorySharedState`]).
#[async_trait::async_trait]
pub trait SharedState: Send + Sync + Debug {
    /// Sets `key` to `value` in this member's own state.
    async fn set(&self, key: &str, value: &str);
    /// Removes `key` from this member's own state; the deletion spreads like a value.
    async fn delete(&self, key: &str);
    /// Every member's entries (this one's included) whose key starts with `prefix`.
    async fn scan(&self, prefix: &str) -> Vec<SharedEntry>;
}

#[async_trait::async_trait]
impl SharedState for GossipMembership {
    async fn set(&self, key: &str, value: &str) {
        self.with_chitchat(|c| c.self_node_state().set(key, value)).await;
    }

    async fn delete(&self, key: &str) {
        self.with_chitchat(|c| {
            let state = c.self_node_state();
            if state.get(key).is_some() {
                state.delete(key);
            }
        })
        .await;
    }

    async fn scan(&self, prefix: &str) -> Vec<SharedEntry> {
        self.with_chitchat(|c| {
            let mut out = Vec::new();
            for (id, state) in c.node_states() {
                for (key, value) in state.iter_prefix(prefix) {
                    out.push(SharedEntry {
                        member: id.node_id.to_string(),
                        key: key[prefix.len()..].to_owned(),
                        value: value.value.clone(),
                    });
                }
            }
            out
        })
        .await
    }
}

/// Members sharing state inside one process (tests, and the single process, which has no gossip). Each
/// [`MemorySharedState::member`] handle writes its own keys and reads everybody's, as gossip members do.
#[derive(Debug, Default)]
pub struct MemorySharedState {
    /// member -> key -> value.
    members: Mutex<BTreeMap<String, BTreeMap<String, String>>>,
}

/// One member's handle on a [`MemorySharedState`].
#[derive(Debug)]
pub struct MemoryMember {
    store: std::sync::Arc<MemorySharedState>,
    id: String,
}

impl MemorySharedState {
    /// A store with no members.
    pub fn new() -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self::default())
    }

    /// The handle of member `id`.
    pub fn member(self: &std::sync::Arc<Self>, id: &str) -> MemoryMember {
        MemoryMember {
            store: std::sync::Arc::clone(self),
            id: id.to_owned(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, BTreeMap<String, String>>> {
        self.members.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait::async_trait]
impl SharedState for MemoryMember {
    async fn set(&self, key: &str, value: &str) {
        self.store
            .lock()
            .entry(self.id.clone())
            .or_default()
            .insert(key.to_owned(), value.to_owned());
    }

    async fn delete(&self, key: &str) {
        if let Some(keys) = self.store.lock().get_mut(&self.id) {
            keys.remove(key);
        }
    }

    async fn scan(&self, prefix: &str) -> Vec<SharedEntry> {
        let all = self.store.lock();
        all.iter()
            .flat_map(|(member, keys)| {
                keys.range(prefix.to_owned()..)
                    .take_while(|(k, _)| k.starts_with(prefix))
                    .map(|(k, v)| SharedEntry {
                        member: member.clone(),
                        key: k[prefix.len()..].to_owned(),
                        value: v.clone(),
                    })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn memory_members_read_each_others_keys_under_a_prefix() {
        let store = MemorySharedState::new();
        let (a, b) = (store.member("a"), store.member("b"));
        a.set("ha/x", "1").await;
        b.set("ha/y", "2").await;
        b.set("other", "3").await;
        let mut got = a.scan("ha/").await;
        got.sort_by(|l, r| l.key.cmp(&r.key));
        assert_eq!(
            got,
            vec![
                SharedEntry {
                    member: "a".into(),
                    key: "x".into(),
                    value: "1".into()
                },
                SharedEntry {
                    member: "b".into(),
                    key: "y".into(),
                    value: "2".into()
                },
            ]
        );
        b.delete("ha/y").await;
        assert_eq!(a.scan("ha/").await.len(), 1, "the deletion is seen by the other member");
    }
}
