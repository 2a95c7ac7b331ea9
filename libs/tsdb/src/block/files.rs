//! Where a block reader gets its bytes: a local block directory, or objects in a bucket read by range.
//!
//! The reader asks for byte ranges of the block's files by their name inside the block (`index`,
//! `chunks/000001`, `tombstones`), so the same reader serves a local directory (memory-mapped) and a bucket
//! (ranged GETs, implemented in `heddle-bucket`). Calls are blocking: run them off the async runtime.

use std::ops::Range;

use bytes::Bytes;

use crate::error::TsdbError;

/// The files of one block, read by range.
pub trait BlockFiles: Send + Sync + std::fmt::Debug {
    /// Size in bytes of file `name` (a path relative to the block directory, e.g. `chunks/000001`).
    fn size(&self, name: &str) -> Result<u64, TsdbError>;
    /// Bytes `range` of file `name`. A range past the end of the file is an error naming the file.
    fn read(&self, name: &str, range: Range<u64>) -> Result<Bytes, TsdbError>;
}
