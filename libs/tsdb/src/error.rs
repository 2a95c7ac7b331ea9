//! Errors of the TSDB crate.

/// Why an encoded chunk cannot be decoded or appended to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    /// Fewer bytes than the 2-byte header.
    #[error("chunk too short: {len} bytes, the header alone needs 2")]
    TooShort {
        /// Bytes given.
        len: usize,
    },
    /// The bit stream ends before the sample count says it should.
    #[error("chunk truncated while decoding sample {sample}")]
    Truncated {
        /// Zero-based index of the sample being decoded.
        sample: u16,
    },
    /// A varint longer than 64 bits.
    #[error("varint overflow while decoding sample {sample}")]
    VarintOverflow {
        /// Zero-based index of the sample being decoded.
        sample: u16,
    },
    /// An XOR window with more than 64 bits.
    #[error("corrupt value window in sample {sample}: {leading} leading zeros + {sig} significant bits > 64")]
    BadWindow {
        /// Zero-based index of the sample being decoded.
        sample: u16,
        /// Leading zero count read.
        leading: u8,
        /// Significant bit count read.
        sig: u8,
    },
    /// The 16-bit sample count is exhausted.
    #[error("chunk full: it already holds {samples} samples")]
    Full {
        /// Samples in the chunk.
        samples: u16,
    },
}
