//! `chunks_head/`: completed head chunks written to files in Prometheus' format and read back through
//! memory maps, so a series keeps only an 8-byte reference (plus its time range) per completed chunk.
//!
//! [`format`] documents the bytes. Durability: chunks are buffered (4 MiB) and written without fsync, as
//! Prometheus writes them asynchronously; the WAL keeps their samples until a checkpoint drops samples older
//! than the truncation time, and the files holding such chunks are only deleted together with them, so a
//! crash loses nothing: at startup the torn tail is cut off and the WAL replays what it held.
//!
//! Reads of chunks still in the write buffer are served from it; flushed chunks are read from a map of their
//! file (the active file is re-mapped when it has grown past its map). Every read checks the chunk's CRC,
//! so a chunk damaged on disk is reported rather than served.

pub(crate) mod format;
mod scan;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use memmap2::Mmap;

pub use scan::ChunksHeadCorruption;
pub(crate) use scan::{ChunksBySeries, ScanReport, scan};

use crate::chunkenc::Encoding;
use crate::error::TsdbError;
use crate::file::{DurableFile, FileCreator, sync_dir, write_all};
use crate::head::{lock, read, write};
use format::{FILE_HEADER_LEN, chunk_ref, decode_chunk, encode_chunk, encoded_len, file_header, split_ref};

/// Name of the head chunks directory inside a head directory.
pub const CHUNKS_HEAD_DIR: &str = "chunks_head";
/// Prometheus' maximum head chunk file size.
pub const DEFAULT_MAX_FILE_SIZE: u64 = 128 * 1024 * 1024;
/// Buffered bytes that trigger a write to the file (Prometheus' default write buffer).
const WRITE_BUFFER: usize = 4 * 1024 * 1024;

/// A completed chunk of a series, in a `chunks_head/` file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MappedChunk {
    /// `(file sequence << 32) | offset`.
    pub(crate) chunk_ref: u64,
    pub(crate) min_time: i64,
    pub(crate) max_time: i64,
}

/// A chunk's encoding and a copy of its data; an encoding the head never writes is corruption.
fn owned(c: format::RawChunk<'_>) -> Result<(Encoding, Bytes), String> {
    match Encoding::from_u8(c.encoding) {
        Some(e @ (Encoding::Xor | Encoding::Histogram | Encoding::FloatHistogram))
            if c.encoding & format::OOO_FLAG == 0 =>
        {
            Ok((e, Bytes::copy_from_slice(c.data)))
        }
        _ => Err(format!("chunk encoding {} is not one the head writes", c.encoding)),
    }
}

/// The file of a chunk reference.
pub(crate) fn file_path(dir: &Path, seq: u32) -> PathBuf {
    dir.join(format!("{seq:06}"))
}

/// Writes and reads the chunk files of one head.
#[derive(Debug)]
pub(crate) struct ChunkDiskMapper {
    dir: PathBuf,
    max_file_size: u64,
    files: Arc<dyn FileCreator>,
    writer: Mutex<Writer>,
    /// `(active seq << 32) | bytes of it written to the file`: reads below that come from the map.
    active: AtomicU64,
    maps: RwLock<BTreeMap<u32, Arc<Mmap>>>,
}

#[derive(Debug, Default)]
struct Writer {
    /// Sequence of the file being written (0: none yet).
    seq: u32,
    /// Highest sequence on disk.
    last_seq: u32,
    file: Option<Box<dyn DurableFile>>,
    /// Bytes of the active file, buffered ones included.
    size: u64,
    /// Bytes of the active file already written to it.
    flushed: u64,
    buf: Vec<u8>,
    /// Newest chunk end time per file, to know which files a truncation can delete.
    file_maxt: BTreeMap<u32, i64>,
}

impl ChunkDiskMapper {
    /// Opens `dir` after [`scan`] repaired it: maps every file; writes go to a new file after the last one.
    #[cfg(test)]
    pub(crate) fn open(
        dir: &Path,
        max_file_size: u64,
        files: Arc<dyn FileCreator>,
        scanned: &ScanReport,
    ) -> Result<Self, TsdbError> {
        let mapper = Self::new(dir, max_file_size, files);
        mapper.adopt(scanned)?;
        Ok(mapper)
    }

    /// A mapper of `dir` that knows no file yet: [`Self::adopt`] gives it what [`scan`] found, before any chunk
    /// is written or read (so the scan can run while a snapshot loads).
    pub(crate) fn new(dir: &Path, max_file_size: u64, files: Arc<dyn FileCreator>) -> Self {
        Self {
            dir: dir.to_path_buf(),
            max_file_size: max_file_size.clamp(FILE_HEADER_LEN as u64 + 64, u64::from(u32::MAX)),
            files,
            writer: Mutex::new(Writer::default()),
            active: AtomicU64::new(0),
            maps: RwLock::new(BTreeMap::new()),
        }
    }

    /// Maps the files `scanned` kept; new chunks go to a file after the last one.
    pub(crate) fn adopt(&self, scanned: &ScanReport) -> Result<(), TsdbError> {
        let mut maps = BTreeMap::new();
        for &seq in &scanned.files {
            let path = file_path(&self.dir, seq);
            maps.insert(seq, Arc::new(map_file(&path)?));
        }
        *write(&self.maps) = maps;
        let mut w = lock(&self.writer);
        debug_assert!(w.file.is_none() && w.seq == 0, "adopt before any write");
        w.last_seq = scanned.files.last().copied().unwrap_or(0);
        w.file_maxt = scanned.file_maxt.clone();
        Ok(())
    }

    /// Appends a chunk of series `series_ref` and returns its reference. The chunk is readable at once; it
    /// reaches the file when the buffer fills, on a file cut, or on [`Self::flush`].
    pub(crate) fn write_chunk(
        &self,
        series_ref: u64,
        mint: i64,
        maxt: i64,
        encoding: Encoding,
        data: &[u8],
    ) -> Result<u64, TsdbError> {
        let mut w = lock(&self.writer);
        let len = encoded_len(data.len()) as u64;
        if w.file.is_none() || w.size + len > self.max_file_size {
            self.cut(&mut w)?;
        } else if w.buf.len() >= WRITE_BUFFER {
            // A previous flush failed: try again before buffering more.
            self.flush_locked(&mut w)?;
        }
        let offset = u32::try_from(w.size).map_err(|_| TsdbError::Corruption {
            what: format!("chunks_head file {}", w.seq),
            reason: format!("offset {} beyond 4 GiB", w.size),
        })?;
        encode_chunk(&mut w.buf, series_ref, mint, maxt, encoding as u8, data);
        w.size += len;
        let seq = w.seq;
        let e = w.file_maxt.entry(seq).or_insert(i64::MIN);
        *e = (*e).max(maxt);
        if w.buf.len() >= WRITE_BUFFER
            && let Err(e) = self.flush_locked(&mut w)
        {
            // The chunk stays readable from the buffer; the next write retries.
            tracing::warn!(error = %e, "cannot write chunks_head buffer, will retry");
        }
        Ok(chunk_ref(seq, offset))
    }

    /// Writes buffered chunks to the file (no fsync).
    pub(crate) fn flush(&self) -> Result<(), TsdbError> {
        let mut w = lock(&self.writer);
        self.flush_locked(&mut w)
    }

    /// Writes buffered chunks and fsyncs the active file.
    pub(crate) fn sync(&self) -> Result<(), TsdbError> {
        let mut w = lock(&self.writer);
        self.flush_locked(&mut w)?;
        let path = file_path(&self.dir, w.seq);
        if let Some(f) = w.file.as_mut() {
            f.sync().map_err(|source| TsdbError::Io { path, source })?;
        }
        Ok(())
    }

    fn flush_locked(&self, w: &mut Writer) -> Result<(), TsdbError> {
        if w.buf.is_empty() {
            return Ok(());
        }
        let path = file_path(&self.dir, w.seq);
        let Some(file) = w.file.as_mut() else {
            return Ok(());
        };
        if let Err(source) = write_all(file.as_mut(), &w.buf) {
            // Drop whatever part was written, so the file ends at a chunk boundary and a retry rewrites it.
            if let Err(e) = file.truncate(w.flushed) {
                tracing::warn!(path = %path.display(), error = %e, "cannot cut chunks_head file after a failed write");
            }
            return Err(TsdbError::Io { path, source });
        }
        w.flushed += w.buf.len() as u64;
        w.buf.clear();
        self.active.store(chunk_ref(w.seq, w.flushed as u32), Ordering::Release);
        Ok(())
    }

    /// Seals the active file (flush, fsync) and starts the next one.
    fn cut(&self, w: &mut Writer) -> Result<(), TsdbError> {
        if w.file.is_some() {
            self.flush_locked(w)?;
            let path = file_path(&self.dir, w.seq);
            if let Some(f) = w.file.as_mut() {
                f.sync().map_err(|source| TsdbError::Io {
                    path: path.clone(),
                    source,
                })?;
            }
            let map = map_file(&path)?;
            write(&self.maps).insert(w.seq, Arc::new(map));
            w.file = None;
        }
        std::fs::create_dir_all(&self.dir).map_err(|source| TsdbError::Io {
            path: self.dir.clone(),
            source,
        })?;
        let seq = w.last_seq + 1;
        let path = file_path(&self.dir, seq);
        let mut file = self.files.create(&path).map_err(|source| TsdbError::Io {
            path: path.clone(),
            source,
        })?;
        if let Err(source) = write_all(file.as_mut(), &file_header()) {
            drop(file);
            let _ = std::fs::remove_file(&path);
            return Err(TsdbError::Io { path, source });
        }
        if let Err(e) = sync_dir(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot fsync chunks_head directory");
        }
        w.last_seq = seq;
        w.seq = seq;
        w.file = Some(file);
        w.size = FILE_HEADER_LEN as u64;
        w.flushed = FILE_HEADER_LEN as u64;
        w.buf.clear();
        self.active
            .store(chunk_ref(seq, FILE_HEADER_LEN as u32), Ordering::Release);
        Ok(())
    }

    /// The encoding and data of a chunk, CRC-checked.
    pub(crate) fn chunk(&self, chunk_ref: u64) -> Result<(Encoding, Bytes), TsdbError> {
        let (seq, offset) = split_ref(chunk_ref);
        let (active_seq, flushed) = split_ref(self.active.load(Ordering::Acquire));
        if seq == active_seq && offset >= flushed {
            let w = lock(&self.writer);
            if w.seq == seq && u64::from(offset) >= w.flushed {
                let at = (u64::from(offset) - w.flushed) as usize;
                let bytes = w.buf.get(at..).unwrap_or_default();
                return decode_chunk(bytes)
                    .and_then(owned)
                    .map_err(|reason| self.corrupt(seq, offset, reason));
            }
        }
        let map = read(&self.maps).get(&seq).cloned();
        let map = match map {
            Some(m) => m,
            None => self.remap(seq)?,
        };
        let at = offset as usize;
        match decode_chunk(map.get(at..).unwrap_or_default()) {
            Ok(c) => owned(c).map_err(|reason| self.corrupt(seq, offset, reason)),
            Err(_) if seq == active_seq => {
                // The map predates the last flush of the active file.
                let fresh = self.remap(seq)?;
                decode_chunk(fresh.get(at..).unwrap_or_default())
                    .and_then(owned)
                    .map_err(|reason| self.corrupt(seq, offset, reason))
            }
            Err(reason) => Err(self.corrupt(seq, offset, reason)),
        }
    }

    fn corrupt(&self, seq: u32, offset: u32, reason: String) -> TsdbError {
        TsdbError::Corruption {
            what: format!("{} offset {offset}", file_path(&self.dir, seq).display()),
            reason,
        }
    }

    fn remap(&self, seq: u32) -> Result<Arc<Mmap>, TsdbError> {
        let map = Arc::new(map_file(&file_path(&self.dir, seq))?);
        write(&self.maps).insert(seq, Arc::clone(&map));
        Ok(map)
    }

    /// Deletes the files whose chunks all end before `mint` (the active file is sealed first when it
    /// qualifies). Returns how many files were deleted.
    pub(crate) fn truncate_before(&self, mint: i64) -> Result<usize, TsdbError> {
        let mut w = lock(&self.writer);
        if w.file.is_some() && w.file_maxt.get(&w.seq).is_some_and(|&t| t < mint) {
            self.cut(&mut w)?;
        }
        let doomed: Vec<u32> = w
            .file_maxt
            .iter()
            .filter(|&(&seq, &maxt)| seq != w.seq && maxt < mint)
            .map(|(&seq, _)| seq)
            .collect();
        // Files with no chunk at all (a crash right after a cut) go too.
        let empty: Vec<u32> = read(&self.maps)
            .keys()
            .filter(|seq| **seq != w.seq && !w.file_maxt.contains_key(seq))
            .copied()
            .collect();
        let mut deleted = 0;
        for seq in doomed.into_iter().chain(empty) {
            write(&self.maps).remove(&seq);
            w.file_maxt.remove(&seq);
            let path = file_path(&self.dir, seq);
            match std::fs::remove_file(&path) {
                Ok(()) => deleted += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(TsdbError::Io { path, source }),
            }
        }
        if deleted > 0
            && let Err(e) = sync_dir(&self.dir)
        {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot fsync chunks_head directory");
        }
        Ok(deleted)
    }

    /// Flushes and fsyncs; later writes start a new file.
    pub(crate) fn close(&self) -> Result<(), TsdbError> {
        self.sync()?;
        let mut w = lock(&self.writer);
        if w.file.take().is_some() {
            let map = map_file(&file_path(&self.dir, w.seq))?;
            write(&self.maps).insert(w.seq, Arc::new(map));
        }
        Ok(())
    }

    /// Number of chunk files.
    #[cfg(test)]
    pub(crate) fn num_files(&self) -> usize {
        let w = lock(&self.writer);
        let maps = read(&self.maps);
        maps.len() + usize::from(w.file.is_some() && !maps.contains_key(&w.seq))
    }
}

/// Maps a whole file read-only.
fn map_file(path: &Path) -> Result<Mmap, TsdbError> {
    let file = std::fs::File::open(path).map_err(|source| TsdbError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    map_readonly(&file).map_err(|source| TsdbError::Io {
        path: path.to_path_buf(),
        source,
    })
}

// SAFETY: the maps are read-only and only of chunk files this head owns. Heddle never truncates or rewrites a
// file while it is mapped: files are only appended to (the bytes a map covers never change) and are deleted
// only after their map was dropped from the table (readers holding an `Arc` keep the pages valid, as a deleted
// file stays allocated while mapped). Another process modifying the files is outside this contract.
#[allow(unsafe_code)]
fn map_readonly(file: &std::fs::File) -> std::io::Result<Mmap> {
    unsafe { Mmap::map(file) }
}
