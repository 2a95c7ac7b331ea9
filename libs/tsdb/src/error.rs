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
    /// A histogram chunk whose layout has a schema no reader knows.
    #[error("histogram chunk with unknown schema {schema}")]
    UnknownHistogramSchema {
        /// The schema read.
        schema: i32,
    },
    /// A histogram that no histogram chunk can hold as given.
    #[error("histogram cannot be appended: {reason}")]
    HistogramShape {
        /// What is wrong with it.
        reason: String,
    },
    /// A chunk whose encoding byte names no encoding samples can be read from.
    #[error("chunk of unknown encoding {encoding}")]
    UnknownEncoding {
        /// The encoding byte.
        encoding: u8,
    },
    /// The 16-bit sample count is exhausted.
    #[error("chunk full: it already holds {samples} samples")]
    Full {
        /// Samples in the chunk.
        samples: u16,
    },
    /// A chunk restored with its newest sample given ([`crate::chunkenc::XorChunk::restore`]) decodes to
    /// another newest sample.
    #[error(
        "chunk decodes to {samples} samples ending at t={t} (value bits {v_bits:#x}), but was restored as \
         {want_samples} samples ending at t={want_t} (value bits {want_v_bits:#x})"
    )]
    NotAsRestored {
        /// Samples decoded.
        samples: u16,
        /// Timestamp of the last sample decoded.
        t: i64,
        /// Value bits of the last sample decoded.
        v_bits: u64,
        /// Samples the header announced.
        want_samples: u16,
        /// The newest timestamp given.
        want_t: i64,
        /// The newest value bits given.
        want_v_bits: u64,
    },
}

/// Errors of the head.
///
/// None of them is the sender's fault: an ingester answers HTTP 500 / gRPC `INTERNAL` (`UNAVAILABLE` for
/// [`TsdbError::Closed`] and [`TsdbError::BatchRefused`]), and the sender retries. Per-sample rejections are not
/// errors: they are reported in [`crate::head::AppendOutcome::errors`].
#[derive(Debug, thiserror::Error)]
pub enum TsdbError {
    /// Writing or replaying the WAL failed.
    #[error(transparent)]
    Wal(#[from] heddle_wal::WalError),
    /// A file system call outside the WAL failed.
    #[error("tsdb i/o error on {path}: {source}")]
    Io {
        /// The file or directory.
        path: std::path::PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Stored data does not decode.
    #[error("corrupt tsdb data in {what}: {reason}")]
    Corruption {
        /// Which file or record.
        what: String,
        /// What is wrong.
        reason: String,
    },
    /// The head was closed; nothing more can be appended.
    #[error("head is closed")]
    Closed,
    /// The options given to the head are unusable.
    #[error("invalid head options: {0}")]
    InvalidOptions(String),
    /// The series lifecycle hook refused a whole append batch (a limit of the process, not of the series):
    /// nothing of it was stored. The message is the hook's.
    #[error("{message}")]
    BatchRefused {
        /// The hook's stable error id.
        id: &'static str,
        /// The hook's message.
        message: String,
    },
}

impl TsdbError {
    /// Whether the same call may succeed later.
    pub fn is_retryable(&self) -> bool {
        match self {
            TsdbError::Wal(e) => e.is_retryable(),
            TsdbError::Io { .. } | TsdbError::BatchRefused { .. } => true,
            TsdbError::Corruption { .. } | TsdbError::Closed | TsdbError::InvalidOptions(_) => false,
        }
    }
}
