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

/// Environment variable naming a crash point for tests: when a process reaches [`failpoint`] with this name it
/// aborts on the spot (no destructor, no flush: what `kill -9` at that instant would leave on disk).
pub const FAILPOINT_ENV: &str = "HEDDLE_FAILPOINT";

/// Aborts the process if `HEDDLE_FAILPOINT` names this point. Crash tests use it to stop a real process
/// between two steps of a multi-file write (a block written but the head not truncated, a block's files
/// uploaded but not its meta.json). Unset, it costs one cached comparison.
pub fn failpoint(name: &str) {
    static ARMED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let armed = ARMED.get_or_init(|| std::env::var(FAILPOINT_ENV).ok().filter(|v| !v.is_empty()));
    if armed.as_deref() == Some(name) {
        eprintln!("failpoint {name} reached: aborting ({FAILPOINT_ENV})");
        std::process::abort();
    }
}
