//! Segment files: naming, listing, and the fragment framing shared by the writer and the reader.
//!
//! On-disk layout (Prometheus `tsdb/wlog`), all integers big-endian:
//!
//! ```text
//! wal/00000000 00000001 ...        segments, named %08d, no header, at most `segment_size` bytes
//! segment  = page*                  32 KiB pages; only the newest segment's last page may be short
//! page     = fragment* zero*        a page ends with zeros when fewer than 7 bytes remain, or when a
//!                                   segment is closed (the writer pads its last page); zeros with room for
//!                                   a header left therefore end the segment: only zeros may follow them
//! fragment = type u8 | len u16 | crc32c u32 (of data) | data[len]
//! type     = bits 0-2: 1 full, 2 first, 3 middle, 4 last (0 = rest of page is zeros)
//!            bit 3 (0x08): the record was snappy-compressed (block format) as a whole before it was split
//!            bit 4 (0x10): zstd (not written by Heddle; reported as corruption when read); bits 5-7 reserved
//! ```
//!
//! A record is a FULL fragment, or FIRST, MIDDLE*, LAST. Records never cross a segment boundary.

use std::io;
use std::path::{Path, PathBuf};

use crate::WalError;

/// Size of a page; fragments never cross a page boundary.
pub const PAGE_SIZE: usize = 32 * 1024;
/// Size of a fragment header: type, length, CRC.
pub const HEADER_SIZE: usize = 7;
/// Prometheus' default segment size.
pub const DEFAULT_SEGMENT_SIZE: usize = 128 * 1024 * 1024;

/// Fragment type bits 0-2: the rest of the page is zero padding.
pub(crate) const TYPE_PAGE_TERM: u8 = 0;
pub(crate) const TYPE_FULL: u8 = 1;
pub(crate) const TYPE_FIRST: u8 = 2;
pub(crate) const TYPE_MIDDLE: u8 = 3;
pub(crate) const TYPE_LAST: u8 = 4;
pub(crate) const TYPE_MASK: u8 = 0x07;
/// The record was snappy-compressed before fragmenting.
pub(crate) const FLAG_SNAPPY: u8 = 0x08;
/// The record was zstd-compressed (Prometheus >= 3.0 can write this; Heddle cannot read it).
pub(crate) const FLAG_ZSTD: u8 = 0x10;

/// Writes a fragment header for `data` into `out[..HEADER_SIZE]`.
pub(crate) fn put_header(out: &mut [u8], typ: u8, data: &[u8]) {
    debug_assert!(data.len() <= PAGE_SIZE - HEADER_SIZE, "fragment larger than a page");
    out[0] = typ;
    out[1..3].copy_from_slice(&(data.len() as u16).to_be_bytes());
    out[3..7].copy_from_slice(&crc32c::crc32c(data).to_be_bytes());
}

/// The file name of segment `index` in `dir`.
pub fn segment_path(dir: &Path, index: u32) -> PathBuf {
    dir.join(format!("{index:08}"))
}

/// Indices of the segment files in `dir`, ascending. Other entries (checkpoints, temporary files) are ignored.
/// A missing directory has no segments.
pub fn list_segments(dir: &Path) -> Result<Vec<u32>, WalError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(WalError::io(dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| WalError::io(dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(index) = parse_segment_name(name) {
            let file_type = entry.file_type().map_err(|e| WalError::io(entry.path(), e))?;
            if file_type.is_file() {
                out.push(index);
            }
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Parses a segment file name: decimal digits only (Prometheus writes `%08d`; it reads any integer).
fn parse_segment_name(name: &str) -> Option<u32> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse().ok()
}

/// The first and last segment indices in `dir`, or `None` when there is no segment (or no directory).
pub fn segment_range(dir: &Path) -> Result<Option<(u32, u32)>, WalError> {
    let segments = list_segments(dir)?;
    Ok(segments.first().copied().zip(segments.last().copied()))
}

/// Fsyncs a directory so that file creations, renames and deletions in it are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), WalError> {
    let f = std::fs::File::open(dir).map_err(|e| WalError::io(dir, e))?;
    f.sync_all().map_err(|e| WalError::io(dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_are_eight_digits() {
        assert_eq!(segment_path(Path::new("/w"), 0), PathBuf::from("/w/00000000"));
        assert_eq!(segment_path(Path::new("/w"), 123), PathBuf::from("/w/00000123"));
    }

    #[test]
    fn listing_ignores_other_entries_and_sorts() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "00000002",
            "00000000",
            "checkpoint.00000001",
            "00000001.repair",
            "+3",
            "x",
        ] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        std::fs::create_dir(dir.path().join("00000009")).unwrap();
        assert_eq!(list_segments(dir.path()).unwrap(), vec![0, 2]);
        assert_eq!(segment_range(dir.path()).unwrap(), Some((0, 2)));
    }

    #[test]
    fn missing_dir_has_no_segments() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(segment_range(&dir.path().join("nope")).unwrap(), None);
    }

    #[test]
    fn header_layout() {
        let mut out = [0u8; HEADER_SIZE];
        put_header(&mut out, TYPE_FULL | FLAG_SNAPPY, b"abc");
        let crc = crc32c::crc32c(b"abc").to_be_bytes();
        assert_eq!(out, [0x09, 0, 3, crc[0], crc[1], crc[2], crc[3]]);
    }
}
