//! Errors of the WAL layer.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong while writing or reading a WAL.
///
/// None of these is the sender's fault: an ingester maps them all to HTTP 500 / gRPC `INTERNAL`, except
/// [`WalError::RecordTooLarge`], which is a caller bug (a batch that should have been split). Whether a retry can
/// succeed is answered by [`WalError::is_retryable`].
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    /// A file system call failed.
    #[error("wal i/o error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The bytes on disk do not form valid records from this position on.
    #[error("wal corruption in segment {segment} at offset {offset}: {reason}")]
    Corruption { segment: u32, offset: u64, reason: String },
    /// A record (measured before compression) cannot fit in one segment, and records never span segments.
    #[error("wal record of {len} bytes exceeds the maximum of {max} bytes for a segment size of {segment_size} bytes")]
    RecordTooLarge {
        len: usize,
        max: usize,
        segment_size: usize,
    },
    /// The options given to [`crate::Wal::open`] are unusable.
    #[error("invalid wal options: {0}")]
    InvalidOptions(String),
    /// An earlier write failed and undoing it failed too, so the segment tail is unknown; the writer refuses to
    /// append after bytes that a replay would treat as corruption.
    #[error("wal writer is unusable: undoing a failed write to segment {segment} failed: {reason}")]
    Poisoned { segment: u32, reason: String },
}

impl WalError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        WalError::Io {
            path: path.into(),
            source,
        }
    }

    /// Whether the same call may succeed later (a transient I/O failure such as a full disk), as opposed to a
    /// permanent condition of the data or of the writer.
    pub fn is_retryable(&self) -> bool {
        matches!(self, WalError::Io { .. })
    }
}
