//! Replica-set selection: which instances hold a token, and how many must answer (dskit's `ring.go` walk and
//! `replication_strategy.go`).
//!
//! Walk clockwise from the token's successor, taking each distinct instance once (and, with zone awareness,
//! one instance per zone) until RF instances are taken:
//! - an instance in a state the operation does not want (JOINING for writes) is still taken but extends the
//!   set by one, and does not use up its zone, exactly as dskit;
//! - an instance that is unreachable (the gossip failure detector says so) or whose heartbeat is older than
//!   the timeout is skipped and the set extended past it. dskit instead keeps it in the set and filters it
//!   out afterwards, which leaves RF-1 replicas; Heddle writes the full RF to healthy instances instead
//!   (the issue asks for this), and does not count skipped instances towards the quorum size.
//!
//! The quorum is `max(RF, taken)/2 + 1` where `taken` counts state-extended instances too (dskit: during a
//! join or leave the set is bigger than RF and so is its majority).

use crate::instance::InstanceState;
use std::time::Duration;

/// What a replica set is for; decides which states serve it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Pushes: only ACTIVE instances take writes; every other state extends the set.
    Write,
    /// Queries: ACTIVE, LEAVING and PENDING instances answer; states other than ACTIVE and LEAVING extend
    /// the set so reads reach the instance that writes went to instead.
    Read,
}

impl Operation {
    /// True when an instance in `state` serves this operation.
    pub fn accepts(self, state: InstanceState) -> bool {
        match self {
            Self::Write => state == InstanceState::Active,
            Self::Read => matches!(
                state,
                InstanceState::Active | InstanceState::Leaving | InstanceState::Pending
            ),
        }
    }

    /// True when taking an instance in `state` should add one more instance to the set.
    pub fn extends_on(self, state: InstanceState) -> bool {
        match self {
            Self::Write => state != InstanceState::Active,
            Self::Read => !matches!(state, InstanceState::Active | InstanceState::Leaving),
        }
    }
}

/// How replica sets are formed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicationConfig {
    /// Replicas per series (`ingester.ring.replication_factor`).
    pub replication_factor: usize,
    /// One replica per zone (`ingester.ring.zone_awareness_enabled`).
    pub zone_awareness_enabled: bool,
    /// An instance whose heartbeat is older than this is unhealthy; zero disables the check.
    pub heartbeat_timeout: Duration,
}

impl Default for ReplicationConfig {
    fn default() -> Self {
        Self {
            replication_factor: 3,
            zone_awareness_enabled: false,
            heartbeat_timeout: Duration::from_secs(60),
        }
    }
}

/// The quorum for a set of `taken` instances under replication factor `rf` (dskit's `minSuccess`).
pub fn min_success(rf: usize, taken: usize) -> usize {
    rf.max(taken) / 2 + 1
}

/// Reusable buffers for lookups, so the per-series hot path does not allocate.
#[derive(Debug, Default, Clone)]
pub struct ReplicaBuf {
    /// After a lookup: the instances (indices into the snapshot) to send to, in walk order.
    pub healthy: Vec<u32>,
    pub(crate) walked: Vec<u32>,
    pub(crate) used_zones: Vec<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorum_follows_dskit() {
        // (rf, taken, want): the set can be bigger than RF while instances join or leave.
        for (rf, taken, want) in [(1, 1, 1), (3, 3, 2), (3, 2, 2), (3, 4, 3), (5, 5, 3), (2, 2, 2)] {
            assert_eq!(min_success(rf, taken), want, "rf={rf} taken={taken}");
        }
    }

    #[test]
    fn operations_accept_and_extend_like_dskit() {
        use InstanceState::*;
        let cases = [
            (Operation::Write, Active, true, false),
            (Operation::Write, Joining, false, true),
            (Operation::Write, Leaving, false, true),
            (Operation::Read, Active, true, false),
            (Operation::Read, Leaving, true, false),
            (Operation::Read, Pending, true, true),
            (Operation::Read, Joining, false, true),
        ];
        for (op, state, accepts, extends) in cases {
            assert_eq!(op.accepts(state), accepts, "{op:?} accepts {state}");
            assert_eq!(op.extends_on(state), extends, "{op:?} extends on {state}");
        }
    }
}
