//! What can stop a tenant's compaction pass.

use heddle_bucket::BucketError;
use heddle_tsdb::TsdbError;

/// A failed step of the compactor. Each leaves the bucket as it was before the step or in a state the next
/// pass finishes (see the crate docs); nothing is retried within the pass.
#[derive(Debug, thiserror::Error)]
pub enum CompactorError {
    /// Listing, downloading, uploading, marking or deleting failed.
    #[error("compactor: tenant {tenant}: {source}")]
    Bucket {
        tenant: String,
        #[source]
        source: BucketError,
    },
    /// Reading the source blocks or writing the compacted one failed.
    #[error("compactor: tenant {tenant}: compacting {blocks}: {source}")]
    Tsdb {
        tenant: String,
        /// The source blocks' ULIDs.
        blocks: String,
        #[source]
        source: TsdbError,
    },
    /// The local data directory could not be prepared.
    #[error("compactor: local i/o on {path}: {source}")]
    Local {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The tenant's lease ran out during the pass and another compactor took the lock over: the pass stops
    /// before its next group, leaving the tenant to the new holder.
    #[error(
        "compactor: tenant {tenant}: the tenant's lock was taken over by another compactor after its lease ran out; \
         the pass stopped and leaves the tenant to it"
    )]
    LockLost { tenant: String },
    /// A blocking task panicked or was cancelled.
    #[error("compactor: tenant {tenant}: {reason}")]
    Task { tenant: String, reason: String },
}
