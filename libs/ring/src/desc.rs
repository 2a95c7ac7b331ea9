//! The whole ring as one value: every instance by id (dskit's `Desc`).

use crate::instance::{InstanceDesc, InstanceState};
use std::collections::{BTreeMap, BTreeSet};

/// Every known instance, keyed by id. LEFT instances are tombstones and never appear here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RingDesc {
    pub instances: BTreeMap<String, InstanceDesc>,
}

impl RingDesc {
    /// Adds or replaces `desc`; a LEFT entry removes the instance instead.
    pub fn upsert(&mut self, desc: InstanceDesc) {
        if desc.state == InstanceState::Left {
            self.instances.remove(&desc.id);
        } else {
            self.instances.insert(desc.id.clone(), desc);
        }
    }

    /// Every token owned by any instance, for picking new ones that do not collide.
    pub fn tokens_in_use(&self) -> BTreeSet<u32> {
        self.instances.values().flat_map(|i| i.tokens.iter().copied()).collect()
    }
}

/// What a membership backend knows: the ring, plus the members its failure detector has declared
/// unreachable (they keep their tokens, so ownership does not move, but they are treated as unhealthy).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MembershipView {
    pub desc: RingDesc,
    pub unreachable: BTreeSet<String>,
}
