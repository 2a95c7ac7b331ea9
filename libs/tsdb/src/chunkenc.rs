//! Chunk encodings. Only Prometheus' XOR float chunk exists here; histogram chunks are out of scope.
//!
//! The bytes are exactly those Prometheus writes (since 3.0), so chunks move unchanged between the head,
//! `chunks_head/` files, blocks and remote-read responses.

mod bstream;
mod xor;

#[cfg(test)]
mod tests;

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
