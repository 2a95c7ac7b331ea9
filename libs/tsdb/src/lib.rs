//! Per-tenant TSDB head in Prometheus' formats.
//!
//! Owns XOR chunk encoding (`chunkenc`), WAL record encoding (`record`), and the head: series, interned
//! symbols, postings, appends, queries and WAL replay. It knows nothing of gRPC, HTTP or tenants' limits (they
//! plug in through the head's [`SeriesLifecycle`] hook, asked before a series is created), and nothing of the
//! WAL's byte layout (`heddle-wal` owns that).

pub mod block;
pub mod chunk_samples;
pub mod chunkenc;
pub mod chunks_head;
mod error;
pub mod file;
pub mod head;
pub mod record;

pub use chunks_head::ChunksHeadCorruption;
pub use error::{ChunkError, TsdbError};
pub use head::{
    AppendBounds, AppendErrorKind, AppendExemplars, AppendOutcome, AppendSeries, ChunkData, CompactStats, Exemplar,
    ExemplarOutcome, Head, HeadOptions, HeadStats, RefusalScope, ReplayStats, SeriesAppendError, SeriesChunks,
    SeriesLifecycle, SeriesRefusal, SnapshotStats, TruncateStats,
};
