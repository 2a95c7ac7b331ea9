//! Per-tenant TSDB head in Prometheus' formats.
//!
//! Owns XOR chunk encoding (`chunkenc`), WAL record encoding (`record`), and the head: series, interned
//! symbols, postings, appends, queries and WAL replay. It knows nothing of gRPC, HTTP or tenants' limits.

pub mod chunkenc;
mod error;
pub mod record;

pub use error::ChunkError;
