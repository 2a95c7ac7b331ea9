//! One ring member: `InstanceDesc` and its `InstanceState` (dskit's `ring.proto`).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The lifecycle state of an instance. The numbers are dskit's, so the ring page and logs read the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum InstanceState {
    /// Owns its tokens and takes writes.
    Active = 0,
    /// Shutting down: still readable, no longer written to.
    Leaving = 1,
    /// Registered without tokens (kept for dskit compatibility; Heddle's lifecycler never uses it).
    Pending = 2,
    /// Has tokens but is still replaying its WAL: not written to yet.
    Joining = 3,
    /// Unregistered: a gossip tombstone, never part of a replica set.
    Left = 4,
}

impl InstanceState {
    /// Every state, in dskit's numeric order.
    pub const ALL: [InstanceState; 5] = [Self::Active, Self::Leaving, Self::Pending, Self::Joining, Self::Left];

    /// The upper-case name used on the wire and on the ring page.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "ACTIVE",
            Self::Leaving => "LEAVING",
            Self::Pending => "PENDING",
            Self::Joining => "JOINING",
            Self::Left => "LEFT",
        }
    }
}

impl fmt::Display for InstanceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for InstanceState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| format!("unknown instance state {s:?} (want ACTIVE, LEAVING, PENDING, JOINING or LEFT)"))
    }
}

/// A ring member as every process sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceDesc {
    /// `--ingester.ring.instance-id`, unique in the ring.
    pub id: String,
    /// The gRPC `host:port` distributors and queriers dial.
    pub addr: String,
    /// Availability zone; empty when zone awareness is off.
    pub zone: String,
    pub state: InstanceState,
    /// Owned tokens, sorted ascending, no duplicates.
    pub tokens: Vec<u32>,
    /// Last heartbeat, unix milliseconds.
    pub heartbeat_ms: i64,
    /// When this instance registered, unix milliseconds.
    pub registered_at_ms: i64,
}

impl InstanceDesc {
    /// True when the last heartbeat is at most `timeout_ms` old at `now_ms`. A zero timeout disables the
    /// check, as in dskit.
    pub fn heartbeat_fresh(&self, now_ms: i64, timeout_ms: i64) -> bool {
        timeout_ms <= 0 || now_ms.saturating_sub(self.heartbeat_ms) <= timeout_ms
    }
}
