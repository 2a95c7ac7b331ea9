//! The small file interface that crash-relevant writes go through (`chunks_head/` files), so tests can
//! inject short writes and failures. It is heddle-wal's: one interface for every file the head writes.

use std::fs::File;
use std::io;
use std::path::Path;

pub use heddle_wal::file::{DurableFile, FileCreator, StdFiles};

/// Writes all of `buf`, retrying short writes and EINTR.
pub(crate) fn write_all(f: &mut dyn DurableFile, buf: &[u8]) -> io::Result<()> {
    heddle_wal::file::write_all(f, buf, |_| {})
}

/// Fsyncs a directory so that creations, renames and deletions in it are durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}
