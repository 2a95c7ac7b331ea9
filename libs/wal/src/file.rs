//! The small file interface that crash-relevant writes go through (WAL segments here, `chunks_head/` files in
//! heddle-tsdb), so tests can inject short writes and failures.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// An append-only file.
pub trait DurableFile: fmt::Debug + Send {
    /// Writes some prefix of `buf` at the end of the file, like write(2); returns how many bytes were written.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize>;
    /// Cuts the file to `len` bytes; later writes append after it.
    fn truncate(&mut self, len: u64) -> io::Result<()>;
    /// fsync.
    fn sync(&mut self) -> io::Result<()>;
}

/// Creates [`DurableFile`]s.
pub trait FileCreator: fmt::Debug + Send + Sync {
    /// Creates (or empties) the file at `path` for appending.
    fn create(&self, path: &Path) -> io::Result<Box<dyn DurableFile>>;
}

/// Real files.
#[derive(Debug, Default, Clone, Copy)]
pub struct StdFiles;

impl FileCreator for StdFiles {
    fn create(&self, path: &Path) -> io::Result<Box<dyn DurableFile>> {
        // O_APPEND keeps writes at the end after a truncation, without tracking a cursor.
        // The index is always past the last segment, so the file is new; a leftover of an earlier failed cut
        // is emptied.
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        file.set_len(0)?;
        Ok(Box::new(StdFile(file)))
    }
}

#[derive(Debug)]
struct StdFile(File);

impl DurableFile for StdFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }
}

/// Writes all of `buf`, retrying short writes and EINTR; calls `written` with each accepted chunk's length.
pub fn write_all(f: &mut dyn DurableFile, mut buf: &[u8], mut written: impl FnMut(usize)) -> io::Result<()> {
    while !buf.is_empty() {
        match f.write(buf) {
            Ok(0) => {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "file accepted no bytes"));
            }
            Ok(n) => {
                written(n);
                buf = &buf[n..];
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
