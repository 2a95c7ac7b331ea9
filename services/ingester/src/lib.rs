//! The ingester: one TSDB per tenant behind the [`IngesterClient`](heddle_proto::IngesterClient) API.
//!
//! Owns the tenant: one `Tenant` per tenant (its head, local blocks, shipper, series admission, rate and metric
//! metadata),
//! opened as a unit the first time a tenant writes or at start-up for tenants found on disk, and kept in one map
//! (`ingester`). Per tenant: the push path from raw `WriteRequest` bytes to the head (decoded into a pooled
//! request arena, so nothing of a request outlives it; the head judges bounds and, through the admission hook,
//! series limits), the read calls (head and unshipped local blocks), blocks (compaction, shipping, retention)
//! and the operator statistics. It does not validate label sets (the distributor does) and knows nothing of
//! HTTP. The same [`Ingester`] serves in-process callers and, through `heddle_proto::ingester_service`, gRPC.

mod admin;
mod blocks;
mod config;
mod convert;
mod error;
mod ingester;
mod limits;
mod local_blocks;
mod metadata;
mod metrics;
mod push;
mod rates;
mod read;
mod tenant;

pub use admin::{FlushReport, TenantStats};
pub use blocks::TenantFlush;
pub use config::{INGESTER_FLAGS, IngesterConfig, TSDB_FLAGS, TsdbConfig};
pub use error::IngesterError;
pub use ingester::Ingester;
pub use limits::{INSTANCE_LIMITS_FLAGS, InstanceLimitsConfig, Topology, TopologySource, local_series_limit};
