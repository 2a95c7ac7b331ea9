//! Chunk segment files of a block (Prometheus `tsdb/chunks/chunks.go`, `docs/format/chunks.md`):
//!
//! ```text
//! chunks/000001 = magic u32 (0x85BD40DD) | version u8 (1) | 3 zero bytes | chunk*
//! chunk         = uvarint len(data) | encoding u8 | data | crc32c(encoding, data) u32
//! ref           = (segment index << 32) | byte offset, where segment index 0 is file 000001
//! ```
//!
//! A new segment is started when the next chunk would take the current one past the size limit (512 MiB);
//! chunks are never padded or split.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::encoding::{Dec, check_crc, put_uvarint, uvarint_len};
use crate::error::TsdbError;

/// Magic number opening every chunk segment.
pub(crate) const MAGIC: u32 = 0x85BD_40DD;
/// Bytes of a segment header.
pub(crate) const SEGMENT_HEADER_LEN: u64 = 8;
/// Prometheus' segment size limit.
pub(crate) const DEFAULT_SEGMENT_SIZE: u64 = 512 * 1024 * 1024;
/// Directory of the segments inside a block.
pub(crate) const CHUNKS_DIR: &str = "chunks";

/// Name of segment `index` (0-based) relative to the block directory: `chunks/000001` for 0.
pub(crate) fn segment_name(index: u32) -> String {
    format!("{CHUNKS_DIR}/{:06}", u64::from(index) + 1)
}

/// Bytes a chunk with `data_len` data bytes takes in a segment.
pub(crate) fn frame_len(data_len: usize) -> u64 {
    (uvarint_len(data_len as u64) + 1 + data_len + 4) as u64
}

/// Writes chunk segments sequentially.
#[derive(Debug)]
pub(crate) struct SegmentWriter {
    dir: PathBuf,
    max_size: u64,
    /// Index of the open segment.
    index: u32,
    file: BufWriter<File>,
    /// Bytes in the open segment.
    size: u64,
    buf: Vec<u8>,
}

impl SegmentWriter {
    /// Creates `dir` (the block's `chunks/`) and segment 000001.
    pub(crate) fn create(dir: &Path, max_size: u64) -> Result<Self, TsdbError> {
        std::fs::create_dir_all(dir).map_err(|source| TsdbError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let file = open_segment(dir, 0)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            max_size,
            index: 0,
            file,
            size: SEGMENT_HEADER_LEN,
            buf: Vec::new(),
        })
    }

    fn path(&self) -> PathBuf {
        self.dir.join(format!("{:06}", u64::from(self.index) + 1))
    }

    /// Appends a chunk; returns its reference.
    pub(crate) fn write(&mut self, encoding: u8, data: &[u8]) -> Result<u64, TsdbError> {
        let len = frame_len(data.len());
        if self.size > SEGMENT_HEADER_LEN && self.size + len > self.max_size {
            self.seal()?;
            self.index += 1;
            self.file = open_segment(&self.dir, self.index)?;
            self.size = SEGMENT_HEADER_LEN;
        }
        let offset = u32::try_from(self.size).map_err(|_| TsdbError::Corruption {
            what: self.path().display().to_string(),
            reason: format!("chunk offset {} beyond 4 GiB", self.size),
        })?;
        self.buf.clear();
        put_uvarint(&mut self.buf, data.len() as u64);
        let covered = self.buf.len();
        self.buf.push(encoding);
        self.buf.extend_from_slice(data);
        let crc = crc32c::crc32c(&self.buf[covered..]);
        self.buf.extend_from_slice(&crc.to_be_bytes());
        let path = self.path();
        self.file
            .write_all(&self.buf)
            .map_err(|source| TsdbError::Io { path, source })?;
        self.size += len;
        Ok((u64::from(self.index) << 32) | u64::from(offset))
    }

    /// Flushes and fsyncs the open segment.
    fn seal(&mut self) -> Result<(), TsdbError> {
        let path = self.path();
        self.file.flush().map_err(|source| TsdbError::Io {
            path: path.clone(),
            source,
        })?;
        self.file
            .get_ref()
            .sync_all()
            .map_err(|source| TsdbError::Io { path, source })
    }

    /// Seals the last segment; returns how many segments were written.
    pub(crate) fn finish(mut self) -> Result<u32, TsdbError> {
        self.seal()?;
        Ok(self.index + 1)
    }
}

fn open_segment(dir: &Path, index: u32) -> Result<BufWriter<File>, TsdbError> {
    let path = dir.join(format!("{:06}", u64::from(index) + 1));
    let io = |source| TsdbError::Io {
        path: path.clone(),
        source,
    };
    let file = File::create(&path).map_err(io)?;
    let mut file = BufWriter::with_capacity(1 << 20, file);
    let mut header = Vec::with_capacity(SEGMENT_HEADER_LEN as usize);
    header.extend_from_slice(&MAGIC.to_be_bytes());
    header.extend_from_slice(&[1, 0, 0, 0]);
    file.write_all(&header).map_err(io)?;
    Ok(file)
}

/// Total bytes of the chunk whose frame starts `bytes`, once its length varint is complete.
pub(crate) fn frame_total(bytes: &[u8]) -> Option<Result<u64, String>> {
    match Dec::new(bytes).uvarint() {
        Ok(len) => Some(
            usize::try_from(len)
                .ok()
                .filter(|l| *l <= u32::MAX as usize)
                .map(frame_len)
                .ok_or_else(|| format!("chunk length {len} is implausible")),
        ),
        Err(_) if bytes.len() < 10 => None,
        Err(e) => Some(Err(e)),
    }
}

/// A decoded chunk frame: its encoding and data.
pub(crate) fn decode_frame(bytes: &[u8]) -> Result<(u8, &[u8]), String> {
    let mut d = Dec::new(bytes);
    let len = d.uvarint()?;
    let len = usize::try_from(len).map_err(|_| format!("chunk length {len} too large"))?;
    let covered_start = d.pos();
    let _enc = d.u8()?;
    let data = d.bytes(len)?;
    let crc = d.bytes(4)?;
    let covered = &bytes[covered_start..covered_start + 1 + len];
    check_crc(covered, crc)?;
    Ok((covered[0], data))
}

/// Checks a segment header.
pub(crate) fn check_header(bytes: &[u8]) -> Result<(), String> {
    let mut d = Dec::new(bytes);
    let magic = d.be32()?;
    if magic != MAGIC {
        return Err(format!("bad magic {magic:#010x}, want {MAGIC:#010x}"));
    }
    match d.u8()? {
        1 => Ok(()),
        v => Err(format!("unsupported chunk segment version {v}")),
    }
}
