//! A block's index header kept on local disk (`<sync dir>/<tenant>/<ULID>/index-header`), so a process that
//! restarts opens its bucket blocks without reading their index headers from the bucket again (what Mimir's
//! store-gateway keeps in `-blocks-storage.bucket-store.sync-dir`).
//!
//! The file holds, verbatim, the byte ranges of the block's `index` that opening it reads: the magic and
//! version, the symbol table, the postings offset table and the TOC (two ranges in a block written by
//! Prometheus or Heddle: from the start to the series, from the postings table to the end). Keeping the
//! original bytes rather than a format of our own means one decoder: opening from the file runs the very code
//! that opens from the bucket, over the same bytes, so every CRC of the index is checked again on each load
//! and the file never has to change when the in-memory header does. It is as large as those two sections,
//! the size of Mimir's index-header, which copies the symbols and postings table verbatim too.
//!
//! ```text
//! file  = magic u32 (0x48444948, "HDIH") | version u8 (1) | index size u64 | ulid len u16 | ulid
//!         | count u32 | (offset u64, len u64)* | the bytes of each range, in order | crc32c u32 of all before
//! ```
//! Integers are big-endian, as in the index. Ranges are sorted, apart from each other and within the index.
//!
//! A file that is missing, truncated, corrupt, of another version or of another block is rebuilt from the
//! block's files: written to `index-header.tmp`, fsynced, renamed over the old one, the directory fsynced. A
//! crash leaves the old file, the new one or none, and a torn one would fail its CRC. The file is a cache:
//! failing to write it is logged and costs the next open a bucket read, never the open itself.

use std::io;
use std::ops::Range;
use std::path::Path;
use std::sync::Mutex;

use bytes::Bytes;

use super::encoding::{Dec, DecodeResult, check_crc};
use super::files::BlockFiles;
use super::index::{INDEX_FILENAME, IndexHeader};
use crate::error::TsdbError;
use crate::file::{FileCreator, sync_dir, write_all};

/// Name of the file inside a block's directory of the sync dir.
pub const INDEX_HEADER_FILENAME: &str = "index-header";
/// Magic number opening the file.
const MAGIC: u32 = 0x4844_4948;
/// The version written and the only one read.
const VERSION: u8 = 1;

/// Where an opened block's index header came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderOrigin {
    /// The local file, `bytes` long: nothing of the index was read from the block's files.
    Disk {
        /// Size of the file.
        bytes: u64,
    },
    /// The block's files (`bytes` of the index read), then written to the local file.
    Files {
        /// Bytes of the index read.
        bytes: u64,
        /// Why a file that was there could not be used (truncated, corrupt, another version or block);
        /// `None` when there was none.
        replaced: Option<String>,
    },
}

/// The index header of the block `ulid` from the file at `path` when it is valid, else from `files`,
/// written to `path` for the next open. `what` names the block in errors.
pub(crate) fn open(
    files: &dyn BlockFiles,
    what: &str,
    ulid: &str,
    path: &Path,
    creator: &dyn FileCreator,
) -> Result<(IndexHeader, HeaderOrigin), TsdbError> {
    let mut replaced = None;
    match std::fs::read(path) {
        Ok(bytes) => {
            let len = bytes.len() as u64;
            let loaded = decode(Bytes::from(bytes), ulid)
                .and_then(|saved| IndexHeader::open(&saved, what).map_err(|e| e.to_string()));
            match loaded {
                Ok(header) => return Ok((header, HeaderOrigin::Disk { bytes: len })),
                Err(reason) => {
                    tracing::warn!(path = %path.display(), %reason, "index-header file unusable; rebuilding it");
                    replaced = Some(reason);
                }
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(path = %path.display(), error = %e, "cannot read the index-header file"),
    }
    let recording = Recording {
        inner: files,
        size: Mutex::new(None),
        reads: Mutex::new(Vec::new()),
    };
    let header = IndexHeader::open(&recording, what)?;
    let size = recording.size.into_inner().unwrap_or_else(|p| p.into_inner());
    let reads = recording.reads.into_inner().unwrap_or_else(|p| p.into_inner());
    let bytes = reads.iter().map(|(_, b)| b.len() as u64).sum();
    if let Some(size) = size {
        let data = encode(ulid, size, &merge(reads));
        if let Err(e) = write_atomically(creator, path, &data) {
            tracing::warn!(path = %path.display(), error = %e, "cannot write the index-header file");
        }
    }
    Ok((header, HeaderOrigin::Files { bytes, replaced }))
}

/// Sorted, non-overlapping ranges from `reads`, touching ones joined.
fn merge(mut reads: Vec<(u64, Bytes)>) -> Vec<(u64, Vec<u8>)> {
    reads.sort_by_key(|(at, _)| *at);
    let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
    for (at, b) in reads {
        match out.last_mut() {
            Some((start, buf)) if at <= *start + buf.len() as u64 => {
                let end = *start + buf.len() as u64;
                let skip = (end - at) as usize;
                if skip < b.len() {
                    buf.extend_from_slice(&b[skip..]);
                }
            }
            _ => out.push((at, b.to_vec())),
        }
    }
    out
}

/// The file's bytes.
fn encode(ulid: &str, size: u64, ranges: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let data: usize = ranges.iter().map(|(_, b)| b.len()).sum();
    let mut out = Vec::with_capacity(27 + ulid.len() + ranges.len() * 16 + data + 4);
    out.extend_from_slice(&MAGIC.to_be_bytes());
    out.push(VERSION);
    out.extend_from_slice(&size.to_be_bytes());
    // Block ids are 26-character ULIDs; a longer one is cut, so it cannot match on load and is rebuilt.
    let id = &ulid.as_bytes()[..ulid.len().min(usize::from(u16::MAX))];
    out.extend_from_slice(&(id.len() as u16).to_be_bytes());
    out.extend_from_slice(id);
    out.extend_from_slice(&(ranges.len() as u32).to_be_bytes());
    for (at, b) in ranges {
        out.extend_from_slice(&at.to_be_bytes());
        out.extend_from_slice(&(b.len() as u64).to_be_bytes());
    }
    for (_, b) in ranges {
        out.extend_from_slice(b);
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

/// The index ranges of the file `bytes`, checked to be whole, of this version and of block `ulid`.
fn decode(bytes: Bytes, ulid: &str) -> DecodeResult<SavedIndex> {
    let body_len = bytes
        .len()
        .checked_sub(4)
        .ok_or_else(|| format!("file of {} bytes is truncated", bytes.len()))?;
    let (body, crc) = bytes.split_at(body_len);
    check_crc(body, crc).map_err(|e| format!("truncated or corrupt: {e}"))?;
    let mut d = Dec::new(body);
    let magic = d.be32()?;
    if magic != MAGIC {
        return Err(format!("bad magic {magic:#010x}, want {MAGIC:#010x}"));
    }
    let version = d.u8()?;
    if version != VERSION {
        return Err(format!("version {version} is not supported ({VERSION} is)"));
    }
    let size = d.be64()?;
    let id_len = d.bytes(2)?;
    let id = d.bytes(usize::from(u16::from_be_bytes([id_len[0], id_len[1]])))?;
    if id != ulid.as_bytes() {
        return Err(format!("holds block {:?}, not {ulid}", String::from_utf8_lossy(id)));
    }
    let count = d.be32()? as usize;
    if count.checked_mul(16).is_none_or(|n| n > d.len()) {
        return Err(format!("{count} ranges cannot fit in {} bytes", d.len()));
    }
    let mut spans: Vec<Range<u64>> = Vec::with_capacity(count);
    for i in 0..count {
        let at = d.be64()?;
        let len = d.be64()?;
        let end = at
            .checked_add(len)
            .filter(|&e| e <= size)
            .ok_or_else(|| format!("range {i} ({at} + {len}) runs past the index size {size}"))?;
        if spans.last().is_some_and(|p| p.end >= at) {
            return Err(format!("range {i} at {at} is out of order"));
        }
        spans.push(at..end);
    }
    let data: u64 = spans.iter().map(|r| r.end - r.start).sum();
    if data != d.len() as u64 {
        return Err(format!("ranges of {data} bytes, {} bytes stored", d.len()));
    }
    let mut pos = d.pos();
    let ranges = spans
        .into_iter()
        .map(|r| {
            let len = (r.end - r.start) as usize;
            let b = bytes.slice(pos..pos + len);
            pos += len;
            (r.start, b)
        })
        .collect();
    Ok(SavedIndex { size, ranges })
}

fn write_atomically(creator: &dyn FileCreator, path: &Path, data: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::other("the index-header path has no directory"))?;
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension("tmp");
    let written = creator.create(&tmp).and_then(|mut f| {
        write_all(f.as_mut(), data)?;
        f.sync()
    });
    if let Err(e) = written {
        // Best effort: the next write replaces it anyway.
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, path)?;
    sync_dir(dir)
}

/// [`BlockFiles`] that passes reads through and keeps what was read of the index.
#[derive(Debug)]
struct Recording<'a> {
    inner: &'a dyn BlockFiles,
    size: Mutex<Option<u64>>,
    reads: Mutex<Vec<(u64, Bytes)>>,
}

impl BlockFiles for Recording<'_> {
    fn size(&self, name: &str) -> Result<u64, TsdbError> {
        let size = self.inner.size(name)?;
        if name == INDEX_FILENAME {
            *self.size.lock().unwrap_or_else(|p| p.into_inner()) = Some(size);
        }
        Ok(size)
    }

    fn read(&self, name: &str, range: Range<u64>) -> Result<Bytes, TsdbError> {
        let b = self.inner.read(name, range.clone())?;
        if name == INDEX_FILENAME {
            self.reads
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((range.start, b.clone()));
        }
        Ok(b)
    }
}

/// The index as the file holds it: its size and some of its ranges. A read outside them is an error (the
/// file does not hold what this version of the reader needs), so the header is rebuilt.
#[derive(Debug)]
struct SavedIndex {
    size: u64,
    /// Sorted by offset, apart from each other.
    ranges: Vec<(u64, Bytes)>,
}

impl BlockFiles for SavedIndex {
    fn size(&self, name: &str) -> Result<u64, TsdbError> {
        if name != INDEX_FILENAME {
            return Err(missing(name, "the file holds only the index"));
        }
        Ok(self.size)
    }

    fn read(&self, name: &str, range: Range<u64>) -> Result<Bytes, TsdbError> {
        if name != INDEX_FILENAME {
            return Err(missing(name, "the file holds only the index"));
        }
        let i = self.ranges.partition_point(|(at, _)| *at <= range.start);
        let held = i.checked_sub(1).map(|i| &self.ranges[i]).and_then(|(at, b)| {
            let (from, to) = (range.start - at, range.end.checked_sub(*at)?);
            (from <= to && to <= b.len() as u64).then(|| b.slice(from as usize..to as usize))
        });
        held.ok_or_else(|| missing(name, &format!("bytes {range:?} are not in it")))
    }
}

fn missing(name: &str, reason: &str) -> TsdbError {
    TsdbError::Corruption {
        what: format!("{INDEX_HEADER_FILENAME} file ({name})"),
        reason: reason.to_owned(),
    }
}

#[cfg(test)]
#[path = "index_header/tests.rs"]
mod tests;
