//! Wire types and ingester clients.
//!
//! Owns the generated prost/tonic code for `proto/` (Prometheus remote write/read, `heddle.ingester.v1`), the
//! zero-copy arena decoder for `prometheus.WriteRequest`, snappy helpers, and the [`IngesterClient`] trait with
//! its gRPC implementation. It does not validate series (the distributor does) nor store anything.

/// Prometheus remote-write/read messages (`prometheus` package).
pub mod prometheus {
    tonic::include_proto!("prometheus");
}

/// Heddle's own gRPC packages; the module path mirrors the proto package so generated code resolves.
pub mod heddle {
    pub mod ingester {
        /// `heddle.ingester.v1`: the ingester gRPC API.
        pub mod v1 {
            tonic::include_proto!("heddle.ingester.v1");
        }
    }
}

pub use heddle::ingester::v1 as ingester;

mod client;

pub use client::{IngesterClient, QueryStream};
