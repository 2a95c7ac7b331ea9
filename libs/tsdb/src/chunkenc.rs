//! Chunk encodings: Prometheus' XOR float chunk and its integer and float native histogram chunks.
//!
//! The bytes are exactly those Prometheus writes (since 3.0), so chunks move unchanged between the head,
//! `chunks_head/` files, blocks and remote-read responses.

mod bstream;
mod float_histogram;
mod histogram;
mod histogram_meta;
mod varbit;
mod xor;

#[cfg(test)]
mod histogram_tests;
#[cfg(test)]
mod tests;

pub use float_histogram::{FloatHistogramChunk, FloatHistogramIter, decode_float_histograms};
pub use histogram::{Appendable, HistogramAppend, HistogramChunk, HistogramIter, decode_histograms};
pub use histogram_meta::{
    CounterResetHeader, HISTOGRAM_CHUNK_MIN_SAMPLES, HISTOGRAM_CHUNK_TARGET_BYTES, HISTOGRAM_HEADER_LEN,
    HistogramChunkCutter, histogram_chunk_size,
};
pub use xor::{XOR_HEADER_LEN, XorChunk, XorIter, decode_xor};

/// Chunk encoding byte, as stored in chunk files and remote-read responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Encoding {
    /// No encoding (never written).
    None = 0,
    /// XOR float chunk.
    Xor = 1,
    /// Integer native histogram chunk.
    Histogram = 2,
    /// Float native histogram chunk.
    FloatHistogram = 3,
}

impl Encoding {
    /// The encoding for a stored byte; bit 7 (the out-of-order flag of head chunk files) is ignored.
    pub fn from_u8(b: u8) -> Option<Self> {
        match b & 0x7f {
            0 => Some(Self::None),
            1 => Some(Self::Xor),
            2 => Some(Self::Histogram),
            3 => Some(Self::FloatHistogram),
            _ => None,
        }
    }
}
