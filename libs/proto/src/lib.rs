//! Wire types and ingester clients.
//!
//! Owns the generated prost/tonic code for `proto/` (Prometheus remote write/read, `heddle.ingester.v1`, `heddle.admin.v1`), the
//! zero-copy arena decoder for `prometheus.WriteRequest` and remote write 2.0 ([`arena`]), snappy helpers, and the
//! [`IngesterClient`] trait with its gRPC transport ([`GrpcIngesterClient`], [`ingester_service`]), and,
//! behind the `test-util` feature, the one fake ingester every crate's tests use (`testing::FakeIngester`).
//! It does not validate series (the distributor does) nor store anything.

/// Prometheus remote-write/read messages (`prometheus` package).
pub mod prometheus {
    tonic::include_proto!("prometheus");
}

/// Prometheus remote write 2.0 messages (`io.prometheus.write.v2` package); the path mirrors the package so
/// generated code resolves. Use them through [`write_v2`].
pub mod io {
    pub mod prometheus {
        pub mod write {
            /// `io.prometheus.write.v2`: the remote write 2.0 request.
            pub mod v2 {
                tonic::include_proto!("io.prometheus.write.v2");
            }
        }
    }
}

pub use io::prometheus::write::v2 as write_v2;

/// Heddle's own gRPC packages; the module path mirrors the proto package so generated code resolves.
pub mod heddle {
    pub mod ingester {
        /// `heddle.ingester.v1`: the ingester gRPC API.
        pub mod v1 {
            tonic::include_proto!("heddle.ingester.v1");
            // The service, generated from a manual description (see build.rs): `Push` carries raw bytes.
            include!(concat!(env!("OUT_DIR"), "/heddle.ingester.v1.Ingester.rs"));
        }
    }
    pub mod admin {
        /// `heddle.admin.v1`: the operator API served by every process (client and server generated).
        #[allow(missing_docs)]
        pub mod v1 {
            tonic::include_proto!("heddle.admin.v1");
        }
    }
}

pub use heddle::admin::v1 as admin;

pub use heddle::ingester::v1 as ingester;

pub mod arena;
mod client;
mod codec;
mod convert;
mod error;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
pub mod transport;

pub use arena::{
    ArenaPool, CREATED_TIMESTAMP_FIELD, DECODED_BYTES_ALLOWANCE, HistogramRef, MAX_DECODED_BYTES_PER_INPUT_BYTE,
    MeasuredWriteRequest, PooledArena, TimeSeriesRef, WriteRequestRef, WriteRequestShape, decode_measured,
    decode_write_request, encode_write_request_created, encode_write_request_raw, max_decoded_bytes,
    measure_write_request, snappy_decompress_into, snappy_decompressed_len,
};
pub use arena::{
    MAX_DECODED_BYTES_PER_INPUT_BYTE_V2, MeasuredWriteRequestV2, WriteRequestV2Ref, WriteRequestV2Shape,
    decode_measured_v2, decode_write_request_v2, measure_write_request_v2,
};
pub use client::{IngesterClient, QueryStream, encode_batch};
pub use codec::{PushDecoder, PushEncoder, PushWire, RawPushCodec};
pub use convert::{
    MatcherConvertError, chunked_series, histogram_to_proto, labels_to_proto, matcher_from_proto, matcher_to_proto,
    matchers_from_proto,
};
pub use error::{DecodeError, SnappyError};
pub use transport::{GrpcIngesterClient, IngesterAdapter, TENANT_METADATA, ingester_service, tenant_from_metadata};
