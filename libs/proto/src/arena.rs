//! Zero-copy decoding of remote-write requests into a per-request arena.
//!
//! A request's life: take a [`PooledArena`] from an [`ArenaPool`], decompress the body into it with
//! [`snappy_decompress_into`], decode it with [`decode_write_request`], use the borrowed view, drop the arena.
//! Label strings are `&'a str` slices of the decompressed body, samples live in arena vectors, and each
//! series keeps its encoded bytes ([`TimeSeriesRef::raw`]) so it can be forwarded with
//! [`encode_write_request_raw`] without re-encoding.
//!
//! ```
//! use heddle_proto::arena::{ArenaPool, decode_write_request, snappy_decompress_into};
//! # let compressed = snap::raw::Encoder::new().compress_vec(&[0x0a, 5, 0x0a, 3, 0x0a, 1, b'a']).unwrap();
//! let pool = ArenaPool::default();
//! let arena = pool.get();
//! let body = snappy_decompress_into(&arena, &compressed, 32 << 20)?;
//! let request = decode_write_request(&arena, body)?;
//! assert_eq!(request.timeseries[0].labels[0].name, "a");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Remote write 2.0 requests (`io.prometheus.write.v2.Request`) decode into the same views with
//! [`decode_write_request_v2`]; see its module for what differs.
//!
//! # Ownership rule
//!
//! Nothing decoded from a request may outlive its [`PooledArena`]. The `'a` lifetime on [`WriteRequestRef`],
//! [`TimeSeriesRef`] and the `LabelRef`s they hold is the borrow of that arena, so the compiler proves it:
//! code that wants to keep a label (a new series in the head, a symbol in a table) must copy it into owned
//! storage first. This is what stops a pooled buffer from being kept alive, or reused under a reader, by a
//! stray reference.
//!
//! ```compile_fail
//! use heddle_proto::arena::{ArenaPool, decode_write_request};
//! let pool = ArenaPool::default();
//! let name: &str;
//! {
//!     let arena = pool.get();
//!     let body = arena.alloc_slice_copy(&[0x0a, 5, 0x0a, 3, 0x0a, 1, b'a']);
//!     name = decode_write_request(&arena, body).unwrap().timeseries[0].labels[0].name;
//! } // the arena goes back to the pool here
//! println!("{name}");
//! ```
//!
//! # What is decoded
//!
//! Labels, samples, exemplars (with their labels) and metric metadata are decoded; native histograms are
//! checked field by field and kept encoded ([`HistogramRef`]), to be decoded into owned samples outside the
//! arena. Apart from the histograms' buckets, none of the decoded messages has a repeated scalar field, so
//! packed encoding applies there only. Labels are neither sorted nor validated here:
//! that is the distributor's job.

mod canonical;
mod decode;
mod encode;
mod histogram;
mod pool;
mod snappy;
mod v2;
mod wire;

pub use decode::{
    CREATED_TIMESTAMP_FIELD, DECODED_BYTES_ALLOWANCE, MAX_DECODED_BYTES_PER_INPUT_BYTE, MeasuredWriteRequest,
    TimeSeriesRef, WriteRequestRef, WriteRequestShape, decode_measured, decode_write_request, max_decoded_bytes,
    measure_write_request,
};
pub use encode::{encode_write_request_created, encode_write_request_raw};
pub use histogram::HistogramRef;
pub use pool::{ArenaPool, PooledArena};
pub use snappy::{snappy_decompress_into, snappy_decompressed_len};
pub use v2::{
    MAX_DECODED_BYTES_PER_INPUT_BYTE_V2, MeasuredWriteRequestV2, WriteRequestV2Ref, WriteRequestV2Shape,
    decode_measured_v2, decode_write_request_v2, measure_write_request_v2,
};
pub use wire::MAX_GROUP_DEPTH;

#[cfg(test)]
mod tests;
