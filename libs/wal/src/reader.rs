//! Reading records back, with their positions.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::WalError;
use crate::segment::{
    FLAG_SNAPPY, FLAG_ZSTD, HEADER_SIZE, PAGE_SIZE, TYPE_FIRST, TYPE_FULL, TYPE_LAST, TYPE_MASK, TYPE_MIDDLE,
    TYPE_PAGE_TERM, list_segments, segment_path,
};

/// A place in a WAL: a segment and a byte offset in it. Chunk snapshots (`chunk_snapshot.%06d.%010d`) and
/// checkpoints are named after positions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    pub segment: u32,
    pub offset: u64,
}

/// A record read back, borrowed from the reader until its next call.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// The record as logged (decompressed).
    pub data: &'a [u8],
    /// Where its first fragment starts.
    pub start: Position,
    /// Just after its last fragment: where the next record (or padding) starts.
    pub end: Position,
}

/// Snappy expands at most ~21x (a 3-byte copy of 64 bytes); a larger declared length is corruption, and
/// refusing it bounds the allocation.
fn max_decoded_len(compressed: usize) -> usize {
    compressed.saturating_mul(22).saturating_add(64)
}

/// Reads the records of one segment in order.
///
/// Any byte sequence the writer cannot produce is reported as [`WalError::Corruption`] at the start of the record
/// it belongs to (or of the bytes that are not a record), which is where a repair cuts the segment.
#[derive(Debug)]
pub struct SegmentReader<R> {
    index: u32,
    src: R,
    page: Box<[u8]>,
    page_len: usize,
    /// Offset in the segment of `page[0]`.
    page_start: u64,
    /// Next unread byte in `page`.
    pos: usize,
    eof: bool,
    rec: Vec<u8>,
    dec: Vec<u8>,
    decoder: snap::raw::Decoder,
    last: Option<(u64, u64, bool)>,
    /// Where padding that closed the segment started (zeros with room for a fragment header left in the page).
    closed_at: Option<u64>,
    /// The file's path, for error messages.
    path: Option<PathBuf>,
}

impl SegmentReader<File> {
    /// Opens segment `index` of `dir` at its start.
    pub fn open(dir: &Path, index: u32) -> Result<Self, WalError> {
        Self::open_at(dir, index, 0)
    }

    /// Opens segment `index` of `dir` at `offset`, which must be a record boundary (a [`Record::end`] or a
    /// writer's [`crate::Wal::position`]).
    pub fn open_at(dir: &Path, index: u32, offset: u64) -> Result<Self, WalError> {
        let path = segment_path(dir, index);
        let mut file = File::open(&path).map_err(|e| WalError::io(&path, e))?;
        let page_base = offset - offset % PAGE_SIZE as u64;
        file.seek(SeekFrom::Start(page_base))
            .map_err(|e| WalError::io(&path, e))?;
        let mut reader = SegmentReader::new(index, file);
        reader.path = Some(path.clone());
        reader.page_start = page_base;
        reader.fill_page().map_err(|e| WalError::io(&path, e))?;
        let in_page = (offset - page_base) as usize;
        if in_page > reader.page_len {
            return Err(reader.corruption(offset, format!("start offset {offset} is past the end of the segment")));
        }
        reader.pos = in_page;
        Ok(reader)
    }
}

impl<R: Read> SegmentReader<R> {
    /// Reads segment `index` from `src`, positioned at the segment's start.
    pub fn new(index: u32, src: R) -> Self {
        SegmentReader {
            index,
            src,
            page: vec![0u8; PAGE_SIZE].into_boxed_slice(),
            page_len: 0,
            page_start: 0,
            pos: 0,
            eof: false,
            rec: Vec::new(),
            dec: Vec::new(),
            decoder: snap::raw::Decoder::new(),
            last: None,
            closed_at: None,
            path: None,
        }
    }

    /// The segment's index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Offset of the next unread byte: after the last record returned (and any padding skipped since).
    pub fn offset(&self) -> u64 {
        self.page_start + self.pos as u64
    }

    /// The next record, or `None` at the end of the segment.
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, WalError> {
        if self.advance()? { Ok(self.current()) } else { Ok(None) }
    }

    /// The record the last successful [`SegmentReader::advance`] read.
    fn current(&self) -> Option<Record<'_>> {
        let (start, end, compressed) = self.last?;
        Some(Record {
            data: if compressed { &self.dec } else { &self.rec },
            start: Position {
                segment: self.index,
                offset: start,
            },
            end: Position {
                segment: self.index,
                offset: end,
            },
        })
    }

    /// Reads the next record into the reader; false at the end of the segment.
    fn advance(&mut self) -> Result<bool, WalError> {
        self.last = None;
        self.rec.clear();
        // Offset of the first fragment of the record being assembled, and whether it is compressed.
        let mut started: Option<(u64, bool)> = None;
        loop {
            if self.pos >= self.page_len {
                if !self.eof {
                    self.page_start += self.page_len as u64;
                    self.fill_page().map_err(|e| WalError::io(self.name(), e))?;
                }
                if self.pos >= self.page_len {
                    return match started {
                        None => Ok(false),
                        Some((start, _)) => {
                            Err(self.corruption(start, "last record is torn: the segment ends inside it".into()))
                        }
                    };
                }
            }
            let here = self.offset();
            let record_start = started.map_or(here, |(s, _)| s);
            let byte = self.page[self.pos];
            let page = &self.page[self.pos..self.page_len];

            if byte == TYPE_PAGE_TERM {
                if started.is_some() {
                    return Err(self.corruption(record_start, "zero padding inside a fragmented record".into()));
                }
                if let Some(i) = page.iter().position(|&b| b != 0) {
                    let at = here + i as u64;
                    return Err(self.corruption(here, format!("non-zero byte at offset {at} in page padding")));
                }
                // Padding with room for a header left is written only when a segment is closed: nothing but
                // zeros may follow it in this segment.
                if page.len() >= HEADER_SIZE && self.closed_at.is_none() {
                    self.closed_at = Some(here);
                }
                self.pos = self.page_len;
                continue;
            }
            if let Some(closed_at) = self.closed_at {
                return Err(self.corruption(
                    closed_at,
                    format!("data at offset {here} after the segment was closed by zero padding at offset {closed_at}"),
                ));
            }
            if page.len() < HEADER_SIZE {
                let reason = if self.page_len == PAGE_SIZE {
                    "fragment header crosses a page boundary"
                } else {
                    "truncated fragment header"
                };
                return Err(self.corruption(record_start, reason.into()));
            }
            let typ = byte & TYPE_MASK;
            let flags = byte & !TYPE_MASK;
            if flags & FLAG_ZSTD != 0 {
                return Err(self.corruption(record_start, "zstd-compressed record (not supported)".into()));
            }
            if flags & !FLAG_SNAPPY != 0 {
                return Err(self.corruption(record_start, format!("reserved bits set in fragment type {byte:#04x}")));
            }
            let compressed = flags & FLAG_SNAPPY != 0;
            let len = u16::from_be_bytes([page[1], page[2]]) as usize;
            let crc = u32::from_be_bytes([page[3], page[4], page[5], page[6]]);
            if page.len() - HEADER_SIZE < len {
                let reason = if self.page_len == PAGE_SIZE {
                    format!("fragment length {len} runs past the end of the page")
                } else {
                    format!(
                        "truncated fragment: {len} bytes declared, {} present",
                        page.len() - HEADER_SIZE
                    )
                };
                return Err(self.corruption(record_start, reason));
            }
            let data = &page[HEADER_SIZE..HEADER_SIZE + len];
            let actual = crc32c::crc32c(data);
            if actual != crc {
                return Err(self.corruption(
                    record_start,
                    format!("crc mismatch in fragment at offset {here}: stored {crc:#010x}, computed {actual:#010x}"),
                ));
            }
            let unexpected = match (typ, started) {
                (TYPE_FULL | TYPE_FIRST, None) | (TYPE_MIDDLE | TYPE_LAST, Some(_)) => None,
                (TYPE_FULL, Some(_)) => Some("full fragment inside a fragmented record"),
                (TYPE_FIRST, Some(_)) => Some("first fragment inside a fragmented record"),
                (TYPE_MIDDLE, None) => Some("middle fragment without a first"),
                (TYPE_LAST, None) => Some("last fragment without a first"),
                _ => return Err(self.corruption(record_start, format!("invalid fragment type {byte:#04x}"))),
            };
            if let Some(reason) = unexpected {
                return Err(self.corruption(record_start, reason.into()));
            }
            if let Some((_, c)) = started
                && c != compressed
            {
                return Err(self.corruption(record_start, "compression flag changes inside a record".into()));
            }
            self.rec.extend_from_slice(data);
            self.pos += HEADER_SIZE + len;
            if typ == TYPE_FIRST || typ == TYPE_MIDDLE {
                started = Some((record_start, compressed));
                continue;
            }
            let compressed = compressed && !self.rec.is_empty();
            if compressed {
                self.decompress(record_start)?;
            }
            self.last = Some((record_start, self.offset(), compressed));
            return Ok(true);
        }
    }

    fn decompress(&mut self, record_start: u64) -> Result<(), WalError> {
        let len = match snap::raw::decompress_len(&self.rec) {
            Ok(len) if len <= max_decoded_len(self.rec.len()) => len,
            Ok(len) => {
                let reason = format!("snappy record declares {len} bytes from {} compressed", self.rec.len());
                return Err(self.corruption(record_start, reason));
            }
            Err(e) => return Err(self.corruption(record_start, format!("bad snappy record: {e}"))),
        };
        self.dec.resize(len, 0);
        match self.decoder.decompress(&self.rec, &mut self.dec) {
            Ok(n) => {
                self.dec.truncate(n);
                Ok(())
            }
            Err(e) => Err(self.corruption(record_start, format!("bad snappy record: {e}"))),
        }
    }

    /// Reads the page at `page_start` (up to a full page; less only at the end of the file).
    fn fill_page(&mut self) -> io::Result<()> {
        self.pos = 0;
        self.page_len = 0;
        while self.page_len < PAGE_SIZE {
            match self.src.read(&mut self.page[self.page_len..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => self.page_len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn corruption(&self, offset: u64, reason: String) -> WalError {
        WalError::Corruption {
            segment: self.index,
            offset,
            reason,
        }
    }

    fn name(&self) -> PathBuf {
        self.path
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("segment {:08}", self.index)))
    }
}

/// Reads the records of every segment of a directory in order (a WAL, a checkpoint or a chunk snapshot).
///
/// Segments must be consecutive: a missing segment is reported as corruption at the end of the one before it,
/// since records after a hole cannot be applied safely.
#[derive(Debug)]
pub struct Reader {
    dir: PathBuf,
    /// Segments still to open, in order.
    segments: Vec<u32>,
    next: usize,
    /// The first missing index after `segments`, if the listing has a hole.
    missing: Option<u32>,
    start: Position,
    current: Option<SegmentReader<File>>,
    /// Offset the current segment was opened at.
    current_start: u64,
    opened: u32,
    bytes_done: u64,
    position: Position,
}

impl Reader {
    /// Reads all segments of `dir`; a missing directory reads as empty.
    pub fn open(dir: &Path) -> Result<Reader, WalError> {
        Self::open_from(dir, Position::default())
    }

    /// Reads the segments of `dir` from `from` on: segments before `from.segment` are skipped, and if
    /// `from.segment` exists, it is read from `from.offset` (a record boundary).
    pub fn open_from(dir: &Path, from: Position) -> Result<Reader, WalError> {
        Self::open_range(dir, from, u32::MAX)
    }

    /// Like [`Reader::open_from`], stopping after segment `last`.
    pub fn open_range(dir: &Path, from: Position, last: u32) -> Result<Reader, WalError> {
        let mut segments: Vec<u32> = list_segments(dir)?
            .into_iter()
            .filter(|&s| s >= from.segment && s <= last)
            .collect();
        let mut missing = None;
        if let Some(i) = segments.windows(2).position(|w| w[1] != w[0] + 1) {
            missing = Some(segments[i] + 1);
            segments.truncate(i + 1);
        }
        let position = match segments.first() {
            Some(&s) if s == from.segment => from,
            Some(&s) => Position { segment: s, offset: 0 },
            None => from,
        };
        Ok(Reader {
            dir: dir.to_path_buf(),
            segments,
            next: 0,
            missing,
            start: position,
            current: None,
            current_start: 0,
            opened: 0,
            bytes_done: 0,
            position,
        })
    }

    /// The next record, or `None` after the last segment.
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, WalError> {
        loop {
            if let Some(cur) = self.current.as_mut() {
                if cur.advance()? {
                    break;
                }
                self.bytes_done += cur.offset() - self.current_start;
                let end = Position {
                    segment: cur.index(),
                    offset: cur.offset(),
                };
                self.current = None;
                if self.next == self.segments.len()
                    && let Some(missing) = self.missing
                {
                    return Err(WalError::Corruption {
                        segment: end.segment,
                        offset: end.offset,
                        reason: format!("segment {missing:08} is missing; later segments cannot be replayed"),
                    });
                }
            }
            let Some(&index) = self.segments.get(self.next) else {
                return Ok(None);
            };
            self.next += 1;
            let offset = if index == self.start.segment {
                self.start.offset
            } else {
                0
            };
            self.current = Some(SegmentReader::open_at(&self.dir, index, offset)?);
            self.current_start = offset;
            self.opened += 1;
        }
        let rec = self.current.as_ref().and_then(|c| c.current());
        if let Some(rec) = &rec {
            self.position = rec.end;
        }
        Ok(rec)
    }

    /// The end of the last record returned, or the starting position before the first.
    pub fn position(&self) -> Position {
        self.position
    }

    /// How many segments were opened so far.
    pub fn segments_opened(&self) -> u32 {
        self.opened
    }

    /// Bytes of segment files consumed so far (records and padding).
    pub fn bytes_read(&self) -> u64 {
        self.bytes_done + self.current.as_ref().map_or(0, |c| c.offset() - self.current_start)
    }
}

#[cfg(test)]
mod tests;
