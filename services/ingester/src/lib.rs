//! The ingester: one TSDB head per tenant behind the [`IngesterClient`](heddle_proto::IngesterClient) API.
//!
//! Owns the tenant map (a head is opened, and its WAL replayed, the first time a tenant writes or at start-up
//! for tenants found on disk), the push path from raw `WriteRequest` bytes to the head (decoded into a pooled
//! request arena, so nothing of a request outlives it), and the read calls. It does not validate label sets
//! against limits (the distributor does) and knows nothing of HTTP. The same [`Ingester`] serves in-process
//! callers and, through `heddle_proto::ingester_service`, gRPC.

mod admin;
mod blocks;
mod config;
mod convert;
mod error;
mod ingester;
mod limits;
mod metrics;
mod push;
mod rates;
mod read;

pub use admin::{FlushReport, TenantStats};
pub use blocks::TenantFlush;
pub use config::{INGESTER_FLAGS, IngesterConfig, TSDB_FLAGS, TsdbConfig};
pub use error::IngesterError;
pub use ingester::Ingester;
pub use limits::{
    INSTANCE_LIMITS_FLAGS, InstanceLimitsConfig, LimitsSource, SeriesLimits, StaticLimits, local_series_limit,
};
