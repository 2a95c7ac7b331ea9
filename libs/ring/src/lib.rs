//! The ingester hash ring (dskit's `ring` package, one concept per file).
//!
//! Owns: the ring model ([`InstanceDesc`], [`RingDesc`]), tokens and the tokens file, the sorted token table
//! and replica-set selection ([`RingSnapshot`], [`Operation`]), the lock-free [`Ring`] handle, the one
//! replica seam writers and readers share ([`Replicas`]: a fixed list or the ring, with a client per
//! replica), membership backends (in-memory and gossip over chitchat), the [`SharedState`] other components
//! gossip through, the ingester [`Lifecycler`] and their configuration.
//! Does not own: gRPC clients to the instances (the seam is generic over the client type, with a
//! per-address [`ClientPool`]), or what the distributor and querier do with replica sets.

mod config;
mod desc;
mod error;
mod gossip;
mod instance;
mod lifecycler;
mod membership;
mod memory;
mod pool;
mod read_tracker;
mod replicas;
mod replication;
mod ring;
mod shared;
mod snapshot;
mod token_table;
mod tokens;

pub use config::{MEMBERLIST_FLAGS, MemberlistConfig, RING_FLAGS, RingConfig, hostname};
pub use desc::{MembershipView, RingDesc};
pub use error::RingError;
pub use gossip::{ClusterKey, GossipConfig, GossipMembership, GossipMetrics};
pub use instance::{InstanceDesc, InstanceState};
pub use lifecycler::{Lifecycler, LifecyclerConfig, system_clock};
pub use membership::Membership;
pub use memory::MemoryMembership;
pub use pool::{ClientFactory, ClientPool};
pub use read_tracker::ReadTracker;
pub use replicas::{
    FixedReplicas, InstanceId, ReadSet, ReadZones, Replica, Replicas, RingReplicas, WriteSet, WriteSetRef, WriteSets,
};
pub use replication::{Operation, ReplicaBuf, ReplicationConfig, min_success};
pub use ring::{Ring, now_ms};
pub use shared::{MemoryMember, MemorySharedState, SharedEntry, SharedState};
pub use snapshot::{InstanceSet, ReadInstances, RingSnapshot};
pub use token_table::TokenTable;
pub use tokens::{generate_tokens, load_tokens, store_tokens};
