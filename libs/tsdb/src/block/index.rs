//! The `index` file of a block, format v2 (Prometheus `tsdb/index/index.go`, `docs/format/index.md`). All
//! fixed-width integers are big-endian; every CRC is CRC32C.
//!
//! ```text
//! index    = magic u32 (0xBAAAD700) | version u8 (2) | symbols | series | postings | postings table | toc
//! symbols  = len u32 | count u32 | (uvarint len, bytes)* | crc(count..)        sorted, referenced by position
//! series   = entries, each 16-byte aligned; a series' id is its offset / 16; sorted by labels
//! entry    = uvarint len | uvarint nLabels | (uvarint nameRef, uvarint valueRef)* | uvarint nChunks
//!            | first chunk: varint mint, uvarint (maxt - mint), uvarint ref
//!            | later:       uvarint (mint - prev maxt), uvarint (maxt - mint), varint (ref - prev ref)
//!            | crc(the len bytes)
//! postings = lists, each 4-byte aligned: len u32 | count u32 | series id u32* | crc(count..)
//!            the list under ("", "") holds every series
//! table    = len u32 | count u32 | (uvarint 2, uvarint-str name, uvarint-str value, uvarint offset)* | crc(count..)
//!            sorted by (name, value); offset = start of the list's len field
//! toc      = symbols, series, label indices, label offset table, postings, postings table: u64 each | crc
//! ```
//!
//! Label indices and the label offset table are no longer written (as in current Prometheus): their TOC
//! entries point at the postings and the postings table. Zero bytes may pad the end of any section.

mod read;
mod write;

pub(crate) use read::{IndexHeader, SeriesEntry, decode_postings, series_frame_total};
#[cfg(test)]
pub(crate) use read::{decode_chunk_metas, decode_symbols};
pub(crate) use write::{ChunkMeta, IndexSeries, write_index};

/// Magic number opening an index.
pub(crate) const MAGIC: u32 = 0xBAAA_D700;
/// The version written.
pub(crate) const VERSION: u8 = 2;
/// Bytes of the header (magic, version).
pub(crate) const HEADER_LEN: u64 = 5;
/// Bytes of the TOC at the end of the file, CRC included.
pub(crate) const TOC_LEN: u64 = 6 * 8 + 4;
/// Alignment of series entries; a series id is its offset divided by it.
pub(crate) const SERIES_ALIGN: u64 = 16;
/// Name of the file inside a block.
pub(crate) const INDEX_FILENAME: &str = "index";

/// Where the sections start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Toc {
    pub(crate) symbols: u64,
    pub(crate) series: u64,
    pub(crate) label_indices: u64,
    pub(crate) label_indices_table: u64,
    pub(crate) postings: u64,
    pub(crate) postings_table: u64,
}

impl Toc {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(TOC_LEN as usize);
        for v in [
            self.symbols,
            self.series,
            self.label_indices,
            self.label_indices_table,
            self.postings,
            self.postings_table,
        ] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }
}
