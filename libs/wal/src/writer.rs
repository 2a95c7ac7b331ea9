//! The WAL writer: packs records into fragments, pages and segments (format in [`crate::segment`]).

mod closer;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::file::{DurableFile, FileCreator, StdFiles, write_all};
use crate::segment::{
    DEFAULT_SEGMENT_SIZE, FLAG_SNAPPY, HEADER_SIZE, PAGE_SIZE, TYPE_FIRST, TYPE_FULL, TYPE_LAST, TYPE_MIDDLE,
    put_header, segment_path, segment_range, sync_dir,
};
use crate::{Position, WalError};

/// How a [`Wal`] writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalOptions {
    /// Maximum size of a segment file in bytes; a positive multiple of the 32 KiB page size. Default 128 MiB.
    pub segment_size: usize,
    /// Snappy-compress each record when that makes it smaller. Default true. Readers handle both, so a WAL may
    /// mix compressed and uncompressed records.
    pub compress: bool,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            segment_size: DEFAULT_SEGMENT_SIZE,
            compress: true,
        }
    }
}

impl WalOptions {
    fn validate(&self) -> Result<(), WalError> {
        if self.segment_size < PAGE_SIZE || !self.segment_size.is_multiple_of(PAGE_SIZE) {
            return Err(WalError::InvalidOptions(format!(
                "segment size {} is not a positive multiple of the page size {PAGE_SIZE}",
                self.segment_size
            )));
        }
        Ok(())
    }
}

/// Where the writer stood at the start of a call, so that a failed call can be undone: the segment is cut back
/// to `done_pages * PAGE_SIZE + alloc` bytes. Everything up to it had been written when the mark was taken.
#[derive(Debug, Clone, Copy)]
struct Mark {
    segment: u32,
    done_pages: usize,
    alloc: usize,
}

impl Mark {
    fn offset(&self) -> u64 {
        (self.done_pages * PAGE_SIZE + self.alloc) as u64
    }
}

/// The WAL writer: appends opaque records to the segments of one directory.
///
/// Writes are batched per page like Prometheus: [`Wal::log`] hands every byte of its records to the OS before it
/// returns (a killed process loses nothing), but does not fsync; call [`Wal::sync`] for that. A call that fails
/// is undone (the segment is cut back to where the call started), so a failed write never leaves a torn record
/// in front of later ones.
pub struct Wal {
    dir: PathBuf,
    segment_size: usize,
    compress: bool,
    creator: Box<dyn FileCreator>,
    file: Box<dyn DurableFile>,
    segment: u32,
    /// The page being filled; `page[..flushed]` is already in the file.
    page: Box<[u8]>,
    alloc: usize,
    flushed: usize,
    /// Full pages already in the current segment.
    done_pages: usize,
    /// Closed segments handed to the closer thread (fsync, then close) and not closed yet.
    pending: Arc<closer::Pending>,
    dir_unsynced: bool,
    bytes_written: u64,
    encoder: snap::raw::Encoder,
    scratch: Vec<u8>,
    /// Set when undoing a failed call failed: the mark to cut back to, and why it failed.
    broken: Option<(Mark, String)>,
}

impl fmt::Debug for Wal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wal")
            .field("dir", &self.dir)
            .field("segment_size", &self.segment_size)
            .field("compress", &self.compress)
            .field("segment", &self.segment)
            .field("done_pages", &self.done_pages)
            .field("alloc", &self.alloc)
            .field("bytes_written", &self.bytes_written)
            .field("broken", &self.broken)
            .finish_non_exhaustive()
    }
}

impl Wal {
    /// Opens `dir` for appending: creates it if missing and always starts a new segment after the last existing
    /// one (as Prometheus does) and after the last checkpoint, so replay the directory first.
    pub fn open(dir: &Path, opts: WalOptions) -> Result<Wal, WalError> {
        Self::open_with(dir, opts, Box::new(StdFiles))
    }

    pub(crate) fn open_with(dir: &Path, opts: WalOptions, creator: Box<dyn FileCreator>) -> Result<Wal, WalError> {
        opts.validate()?;
        std::fs::create_dir_all(dir).map_err(|e| WalError::io(dir, e))?;
        // After the last segment, and after the last checkpoint too: if every segment was folded into a
        // checkpoint and deleted, a segment numbered at or below the checkpoint would be skipped by replay.
        let after_segments = segment_range(dir)?.map(|(_, last)| last);
        let after_checkpoint = crate::checkpoint::last_checkpoint(dir)?;
        let segment = match after_segments.max(after_checkpoint) {
            None => 0,
            Some(last) => next_index(last)?,
        };
        let path = segment_path(dir, segment);
        let file = creator.create(&path).map_err(|e| WalError::io(&path, e))?;
        sync_dir(dir)?;
        Ok(Wal {
            dir: dir.to_path_buf(),
            segment_size: opts.segment_size,
            compress: opts.compress,
            creator,
            file,
            segment,
            page: vec![0u8; PAGE_SIZE].into_boxed_slice(),
            alloc: 0,
            flushed: 0,
            done_pages: 0,
            pending: Arc::default(),
            dir_unsynced: false,
            bytes_written: 0,
            encoder: snap::raw::Encoder::new(),
            scratch: Vec::new(),
            broken: None,
        })
    }

    /// Appends `records` in order. When it returns `Ok`, every record has been handed to the OS with write(2)
    /// (it survives the process being killed, not a power loss; see [`Wal::sync`]). On error none of the
    /// records is guaranteed to be logged, though those before a segment cut may be (replay may see them).
    pub fn log(&mut self, records: &[&[u8]]) -> Result<(), WalError> {
        self.heal()?;
        let max = self.max_record_len();
        if let Some(r) = records.iter().find(|r| r.len() > max) {
            return Err(WalError::RecordTooLarge {
                len: r.len(),
                max,
                segment_size: self.segment_size,
            });
        }
        let mut mark = self.mark();
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut result = Ok(());
        for rec in records {
            result = self.log_one(rec, &mut scratch, &mut mark);
            if result.is_err() {
                break;
            }
        }
        self.scratch = scratch;
        if result.is_ok() && self.alloc > self.flushed {
            result = self.flush_page(false);
        }
        if result.is_err() {
            self.rollback(mark);
        }
        result
    }

    /// Closes the current segment (zero-padding its last page) and starts the next one; returns the new
    /// segment's index. Checkpointing cuts a segment so that the segments it folds in are complete.
    pub fn cut_segment(&mut self) -> Result<u32, WalError> {
        self.heal()?;
        let mark = self.mark();
        if let Err(e) = self.next_segment() {
            self.rollback(mark);
            return Err(e);
        }
        Ok(self.segment)
    }

    /// Fsyncs everything written so far: waits for closed segments still being fsynced in the background
    /// (reporting one that failed), then fsyncs the current segment and the directory.
    pub fn sync(&mut self) -> Result<(), WalError> {
        if let Some((path, e)) = self.pending.wait() {
            return Err(WalError::io(path, e));
        }
        self.file
            .sync()
            .map_err(|e| WalError::io(segment_path(&self.dir, self.segment), e))?;
        if self.dir_unsynced {
            sync_dir(&self.dir)?;
            self.dir_unsynced = false;
        }
        Ok(())
    }

    /// Zero-pads the current page to its end (as Prometheus does on close, so the segment holds whole pages),
    /// then fsyncs everything.
    pub fn close(mut self) -> Result<(), WalError> {
        self.heal()?;
        if self.alloc > 0 {
            let mark = self.mark();
            if let Err(e) = self.flush_page(true) {
                self.rollback(mark);
                return Err(e);
            }
        }
        self.sync()
    }

    /// Total bytes this writer wrote to segment files (padding included).
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// Index of the segment being written.
    pub fn current_segment(&self) -> u32 {
        self.segment
    }

    /// Where the next record will start if it fits in the current segment; after a successful [`Wal::log`],
    /// the end of everything written. A chunk snapshot is named after this position.
    pub fn position(&self) -> Position {
        Position {
            segment: self.segment,
            offset: (self.done_pages * PAGE_SIZE + self.alloc) as u64,
        }
    }

    /// The directory this writer appends to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The largest record [`Wal::log`] accepts (measured before compression): one that fills a whole segment.
    pub fn max_record_len(&self) -> usize {
        self.pages_per_segment() * (PAGE_SIZE - HEADER_SIZE)
    }

    fn pages_per_segment(&self) -> usize {
        self.segment_size / PAGE_SIZE
    }

    fn page_full(&self) -> bool {
        PAGE_SIZE - self.alloc < HEADER_SIZE
    }

    fn mark(&self) -> Mark {
        debug_assert_eq!(self.alloc, self.flushed, "a call starts with everything written");
        Mark {
            segment: self.segment,
            done_pages: self.done_pages,
            alloc: self.alloc,
        }
    }

    fn log_one(&mut self, rec: &[u8], scratch: &mut Vec<u8>, mark: &mut Mark) -> Result<(), WalError> {
        if self.page_full() {
            self.flush_page(true)?;
        }
        let (data, flag) = self.maybe_compress(rec, scratch);

        // A record never crosses a segment boundary: cut a new segment if it does not fit in what is left.
        let pages_left = self.pages_per_segment().saturating_sub(self.done_pages);
        let room = match pages_left {
            0 => 0,
            n => (PAGE_SIZE - self.alloc - HEADER_SIZE) + (n - 1) * (PAGE_SIZE - HEADER_SIZE),
        };
        if pages_left == 0 || data.len() > room {
            self.next_segment()?;
            // Records of this call before the cut are complete in the closed segment; a later failure only
            // undoes the new one.
            *mark = self.mark();
        }

        let mut rest = data;
        let mut first = true;
        loop {
            let n = rest.len().min(PAGE_SIZE - self.alloc - HEADER_SIZE);
            let (part, tail) = rest.split_at(n);
            let typ = match (first, tail.is_empty()) {
                (true, true) => TYPE_FULL,
                (true, false) => TYPE_FIRST,
                (false, false) => TYPE_MIDDLE,
                (false, true) => TYPE_LAST,
            };
            let at = self.alloc;
            put_header(&mut self.page[at..at + HEADER_SIZE], typ | flag, part);
            self.page[at + HEADER_SIZE..at + HEADER_SIZE + n].copy_from_slice(part);
            self.alloc += HEADER_SIZE + n;
            if self.page_full() {
                self.flush_page(true)?;
            }
            rest = tail;
            first = false;
            if rest.is_empty() {
                return Ok(());
            }
        }
    }

    /// The bytes to store for `rec` and the fragment flag: snappy block format when it saves bytes.
    fn maybe_compress<'a>(&mut self, rec: &'a [u8], scratch: &'a mut Vec<u8>) -> (&'a [u8], u8) {
        if !self.compress || rec.is_empty() {
            return (rec, 0);
        }
        let max = snap::raw::max_compress_len(rec.len());
        if max == 0 {
            return (rec, 0); // too large for snappy's format
        }
        scratch.resize(max, 0);
        match self.encoder.compress(rec, scratch) {
            Ok(n) if n < rec.len() => (&scratch[..n], FLAG_SNAPPY),
            _ => (rec, 0),
        }
    }

    /// Writes the unwritten part of the page; with `clear` (or when the page is full) pads it with zeros to its
    /// end and starts a new page.
    fn flush_page(&mut self, clear: bool) -> Result<(), WalError> {
        let clear = clear || self.page_full();
        let end = if clear { PAGE_SIZE } else { self.alloc };
        let bytes_written = &mut self.bytes_written;
        write_all(self.file.as_mut(), &self.page[self.flushed..end], |n| {
            *bytes_written += n as u64
        })
        .map_err(|e| WalError::io(segment_path(&self.dir, self.segment), e))?;
        self.flushed = end;
        if clear {
            self.page.fill(0);
            self.alloc = 0;
            self.flushed = 0;
            self.done_pages += 1;
        }
        Ok(())
    }

    fn next_segment(&mut self) -> Result<(), WalError> {
        if self.alloc > 0 {
            self.flush_page(true)?;
        }
        let index = next_index(self.segment)?;
        let path = segment_path(&self.dir, index);
        let file = self.creator.create(&path).map_err(|e| WalError::io(&path, e))?;
        let old = std::mem::replace(&mut self.file, file);
        // Fsynced and closed off this thread at once: its descriptor (and, once truncation deletes it, its
        // disk space) must not wait for the next `sync`, which may be at shutdown.
        closer::close_later(segment_path(&self.dir, self.segment), old, &self.pending);
        self.dir_unsynced = true;
        self.segment = index;
        self.done_pages = 0;
        self.alloc = 0;
        self.flushed = 0;
        Ok(())
    }

    /// Undoes a failed call: cuts the segment back to `mark`. If that fails too, the writer stays broken and
    /// retries at the next call.
    fn rollback(&mut self, mark: Mark) {
        debug_assert_eq!(mark.segment, self.segment, "a mark is retaken after every segment cut");
        self.page.fill(0);
        self.alloc = mark.alloc;
        self.flushed = mark.alloc;
        self.done_pages = mark.done_pages;
        match self.file.truncate(mark.offset()) {
            Ok(()) => self.broken = None,
            Err(e) => {
                tracing::error!(segment = self.segment, offset = mark.offset(), error = %e, "cannot undo a failed wal write");
                self.broken = Some((mark, e.to_string()));
            }
        }
    }

    fn heal(&mut self) -> Result<(), WalError> {
        if let Some((mark, _)) = self.broken.take() {
            self.rollback(mark);
        }
        match &self.broken {
            None => Ok(()),
            Some((_, reason)) => Err(WalError::Poisoned {
                segment: self.segment,
                reason: reason.clone(),
            }),
        }
    }
}

fn next_index(index: u32) -> Result<u32, WalError> {
    index
        .checked_add(1)
        .ok_or_else(|| WalError::InvalidOptions(format!("segment index {index} cannot grow")))
}

#[cfg(test)]
mod tests;
