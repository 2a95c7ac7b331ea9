//! Reading an index through [`BlockFiles`]: the "index header" (TOC, symbols, postings offset table) is read
//! once and kept; series entries and postings lists are decoded from ranges fetched on demand.
//!
//! Nothing here trusts the bytes: every length is checked against the section or file it lies in before
//! anything is allocated for it, every CRC is verified, and arithmetic on decoded values wraps instead of
//! overflowing.

use std::ops::Range;

use bytes::Bytes;
use heddle_model::Labels;

use super::write::ChunkMeta;
use super::{HEADER_LEN, INDEX_FILENAME, MAGIC, TOC_LEN, Toc};
use crate::block::encoding::{Dec, DecodeResult, check_crc};
use crate::block::files::BlockFiles;
use crate::error::TsdbError;

/// One label value of a name in the postings offset table, with the byte range of its postings list.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ValueEntry {
    /// Symbol id of the value.
    pub(crate) value: u32,
    pub(crate) start: u64,
    pub(crate) end: u64,
}

#[derive(Debug, Clone)]
struct NameEntry {
    /// Symbol id of the name.
    name: u32,
    values: Range<usize>,
}

/// The part of an index kept in memory while a block is open.
#[derive(Debug)]
pub(crate) struct IndexHeader {
    /// Names the index in errors (block ULID and file).
    what: String,
    pub(crate) toc: Toc,
    /// End of the series section.
    pub(crate) series_end: u64,
    /// Sorted, so a symbol's id orders like its string.
    symbols: Vec<Box<str>>,
    /// Sorted by name.
    names: Vec<NameEntry>,
    values: Vec<ValueEntry>,
    /// The list of every series, under ("", "").
    all: Option<Range<u64>>,
}

/// A decoded series entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SeriesEntry {
    pub(crate) labels: Labels,
    pub(crate) chunks: Vec<ChunkMeta>,
}

impl IndexHeader {
    /// Reads and checks the TOC, the symbol table and the postings offset table. `what` names the block.
    pub(crate) fn open(files: &dyn BlockFiles, what: &str) -> Result<Self, TsdbError> {
        let what = format!("{what} {INDEX_FILENAME}");
        let corrupt = |at: u64, reason: String| TsdbError::Corruption {
            what: format!("{what} offset {at}"),
            reason,
        };
        let size = files.size(INDEX_FILENAME)?;
        if size < HEADER_LEN + TOC_LEN {
            return Err(corrupt(
                0,
                format!("index of {size} bytes is shorter than its header and TOC"),
            ));
        }
        let header = files.read(INDEX_FILENAME, 0..HEADER_LEN)?;
        let mut d = Dec::new(&header);
        let magic = d.be32().map_err(|e| corrupt(0, e))?;
        if magic != MAGIC {
            return Err(corrupt(0, format!("bad magic {magic:#010x}, want {MAGIC:#010x}")));
        }
        let version = d.u8().map_err(|e| corrupt(4, e))?;
        if version != 2 && version != 3 {
            return Err(corrupt(
                4,
                format!("index version {version} is not supported (2 and 3 are)"),
            ));
        }
        let toc_at = size - TOC_LEN;
        let toc_bytes = files.read(INDEX_FILENAME, toc_at..size)?;
        let toc = decode_toc(&toc_bytes).map_err(|e| corrupt(toc_at, format!("TOC: {e}")))?;
        let in_order = HEADER_LEN <= toc.symbols
            && toc.symbols < toc.series
            && toc.series <= toc.postings
            && toc.postings <= toc.postings_table
            && toc.postings_table < toc_at;
        if !in_order {
            return Err(corrupt(
                toc_at,
                format!("TOC sections out of order or out of the file: {toc:?}"),
            ));
        }
        let series_end = if toc.label_indices >= toc.series && toc.label_indices != 0 {
            toc.label_indices.min(toc.postings)
        } else {
            toc.postings
        };
        let mut header = Self {
            what: what.clone(),
            toc,
            series_end,
            symbols: Vec::new(),
            names: Vec::new(),
            values: Vec::new(),
            all: None,
        };
        let symbols = header.read_section(files, toc.symbols, toc.series)?;
        header.symbols = decode_symbols(&symbols).map_err(|e| corrupt(toc.symbols, format!("symbol table: {e}")))?;
        let table = header.read_section(files, toc.postings_table, toc_at)?;
        header
            .decode_postings_table(&table)
            .map_err(|e| corrupt(toc.postings_table, format!("postings offset table: {e}")))?;
        Ok(header)
    }

    /// An error naming the index and the offset.
    pub(crate) fn corrupt(&self, at: u64, reason: impl Into<String>) -> TsdbError {
        TsdbError::Corruption {
            what: format!("{} offset {at}", self.what),
            reason: reason.into(),
        }
    }

    /// The body of the `len u32 | body | crc` section at `at`, which must end by `limit`.
    fn read_section(&self, files: &dyn BlockFiles, at: u64, limit: u64) -> Result<Bytes, TsdbError> {
        if at.saturating_add(8) > limit {
            return Err(self.corrupt(at, format!("section cut off by offset {limit}")));
        }
        let len = files.read(INDEX_FILENAME, at..at + 4)?;
        let len = u64::from(u32::from_be_bytes([len[0], len[1], len[2], len[3]]));
        let end = at + 4 + len + 4;
        if end > limit {
            return Err(self.corrupt(at, format!("section of {len} bytes runs past offset {limit}")));
        }
        let bytes = files.read(INDEX_FILENAME, at + 4..end)?;
        let (body, crc) = bytes.split_at(len as usize);
        check_crc(body, crc).map_err(|e| self.corrupt(at, e))?;
        Ok(bytes.slice(..len as usize))
    }

    fn decode_postings_table(&mut self, body: &[u8]) -> DecodeResult<()> {
        let mut d = Dec::new(body);
        let count = d.be32()?;
        let mut last: Option<(&str, &str)> = None;
        let mut starts: Vec<u64> = Vec::with_capacity((count as usize).min(body.len() / 4));
        for i in 0..count {
            let keys = d.uvarint()?;
            if keys != 2 {
                return Err(format!("entry {i} has {keys} keys, want 2"));
            }
            let name = d.uvarint_str()?;
            let value = d.uvarint_str()?;
            let start = d.uvarint()?;
            if last.is_some_and(|l| l >= (name, value)) {
                return Err(format!("entry {i} ({name:?}, {value:?}) is out of order"));
            }
            last = Some((name, value));
            if starts.last().is_some_and(|&s| s >= start) || start < self.toc.postings {
                return Err(format!(
                    "entry {i} ({name:?}, {value:?}) has out-of-order offset {start}"
                ));
            }
            starts.push(start);
            if name.is_empty() {
                if !value.is_empty() || i != 0 {
                    return Err(format!("entry {i} has an empty name and value {value:?}"));
                }
                self.all = Some(start..0);
                continue;
            }
            let (Some(n), Some(v)) = (self.symbol_id(name), self.symbol_id(value)) else {
                return Err(format!("entry {i} ({name:?}, {value:?}) is not in the symbol table"));
            };
            if self.names.last().is_none_or(|e| e.name != n) {
                let at = self.values.len();
                self.names.push(NameEntry {
                    name: n,
                    values: at..at,
                });
            }
            self.values.push(ValueEntry {
                value: v,
                start,
                end: 0,
            });
            if let Some(e) = self.names.last_mut() {
                e.values.end = self.values.len();
            }
        }
        if d.len() > 0 {
            return Err(format!("{} bytes after the last entry", d.len()));
        }
        if starts.last().is_some_and(|&s| s >= self.toc.postings_table) {
            return Err("postings offsets run into the table".to_owned());
        }
        // Every list ends where the next begins (lists are written in table order), the last at the table.
        let mut ends = starts
            .iter()
            .skip(1)
            .copied()
            .chain(std::iter::once(self.toc.postings_table));
        if let Some(all) = self.all.as_mut() {
            all.end = ends.next().unwrap_or(self.toc.postings_table);
        }
        for (v, end) in self.values.iter_mut().zip(ends) {
            v.end = end;
        }
        Ok(())
    }

    /// The string of symbol `id`.
    pub(crate) fn symbol(&self, id: u32) -> DecodeResult<&str> {
        self.symbols
            .get(id as usize)
            .map(|s| &**s)
            .ok_or_else(|| format!("symbol {id} out of range ({} symbols)", self.symbols.len()))
    }

    /// The id of symbol `s`.
    pub(crate) fn symbol_id(&self, s: &str) -> Option<u32> {
        self.symbols.binary_search_by(|x| (**x).cmp(s)).ok().map(|i| i as u32)
    }

    /// Label names, sorted, without the all-postings key.
    pub(crate) fn label_names(&self) -> impl Iterator<Item = &str> + '_ {
        self.names.iter().filter_map(|n| self.symbol(n.name).ok())
    }

    /// The values of label `name` with their postings ranges, sorted.
    pub(crate) fn values_of(&self, name: &str) -> &[ValueEntry] {
        let Some(id) = self.symbol_id(name) else {
            return &[];
        };
        match self.names.binary_search_by_key(&id, |n| n.name) {
            Ok(i) => self.values.get(self.names[i].values.clone()).unwrap_or_default(),
            Err(_) => &[],
        }
    }

    /// The postings range of `name` = `value`.
    pub(crate) fn postings_range(&self, name: &str, value: &str) -> Option<Range<u64>> {
        let v = self.symbol_id(value)?;
        let values = self.values_of(name);
        let i = values.binary_search_by_key(&v, |e| e.value).ok()?;
        Some(values[i].start..values[i].end)
    }

    /// The range of the list of every series.
    pub(crate) fn all_postings(&self) -> Result<Range<u64>, TsdbError> {
        self.all
            .clone()
            .ok_or_else(|| self.corrupt(self.toc.postings_table, "no postings list of all series"))
    }

    /// Decodes the series entry framed in `frame` (length, body, CRC).
    pub(crate) fn decode_series(&self, frame: &[u8]) -> DecodeResult<SeriesEntry> {
        let mut d = Dec::new(frame);
        let len = d.uvarint()?;
        let len = usize::try_from(len).map_err(|_| format!("series length {len} too large"))?;
        let body = d.bytes(len)?;
        check_crc(body, d.bytes(4)?)?;
        let mut d = Dec::new(body);
        let n = d.uvarint()?;
        if n > (d.len() / 2) as u64 {
            return Err(format!("{n} labels cannot fit in {} bytes", d.len()));
        }
        let mut pairs: Vec<(&str, &str)> = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let name = self.symbol(d.uvarint32()?)?;
            let value = self.symbol(d.uvarint32()?)?;
            pairs.push((name, value));
        }
        let labels = Labels::from_sorted(pairs).map_err(|e| format!("bad label set: {e}"))?;
        let chunks = decode_chunk_metas(&mut d)?;
        Ok(SeriesEntry { labels, chunks })
    }
}

fn decode_toc(b: &[u8]) -> DecodeResult<Toc> {
    let (body, crc) = b.split_at(b.len().saturating_sub(4));
    check_crc(body, crc)?;
    let mut d = Dec::new(body);
    Ok(Toc {
        symbols: d.be64()?,
        series: d.be64()?,
        label_indices: d.be64()?,
        label_indices_table: d.be64()?,
        postings: d.be64()?,
        postings_table: d.be64()?,
    })
}

/// Symbols of a symbol table body (count and strings), checked to be strictly increasing.
pub(crate) fn decode_symbols(body: &[u8]) -> DecodeResult<Vec<Box<str>>> {
    let mut d = Dec::new(body);
    let count = d.be32()?;
    let mut out: Vec<Box<str>> = Vec::with_capacity((count as usize).min(d.len()));
    for i in 0..count {
        let s = d.uvarint_str()?;
        if out.last().is_some_and(|l| **l >= *s) {
            return Err(format!("symbol {i} {s:?} is out of order"));
        }
        out.push(s.into());
    }
    Ok(out)
}

/// Chunk metas of a series entry, after its labels.
pub(crate) fn decode_chunk_metas(d: &mut Dec<'_>) -> DecodeResult<Vec<ChunkMeta>> {
    let n = d.uvarint()?;
    if n > (d.len() / 3) as u64 {
        return Err(format!("{n} chunks cannot fit in {} bytes", d.len()));
    }
    let mut out = Vec::with_capacity(n as usize);
    let (mut prev_maxt, mut prev_ref) = (0i64, 0u64);
    for i in 0..n {
        let (min_time, chunk_ref) = if i == 0 {
            let mint = d.varint()?;
            let maxt_delta = d.uvarint()?;
            let r = d.uvarint()?;
            prev_maxt = mint.wrapping_add(maxt_delta as i64);
            (mint, r)
        } else {
            let mint = prev_maxt.wrapping_add(d.uvarint()? as i64);
            prev_maxt = mint.wrapping_add(d.uvarint()? as i64);
            (mint, (prev_ref as i64).wrapping_add(d.varint()?) as u64)
        };
        prev_ref = chunk_ref;
        out.push(ChunkMeta {
            min_time,
            max_time: prev_maxt,
            chunk_ref,
        });
    }
    Ok(out)
}

/// Total bytes of the series entry framed at the start of `bytes`, once its length varint is complete.
pub(crate) fn series_frame_total(bytes: &[u8]) -> Option<DecodeResult<u64>> {
    let mut d = Dec::new(bytes);
    match d.uvarint() {
        Ok(len) => Some(
            len.checked_add(d.pos() as u64 + 4)
                .ok_or_else(|| format!("series length {len} too large")),
        ),
        Err(_) if bytes.len() < 10 => None,
        Err(e) => Some(Err(e)),
    }
}

/// Series ids of the postings list at the start of `bytes` (`len u32 | count u32 | id u32* | crc`), checked
/// to be strictly increasing. Bytes after the list (padding) are ignored.
pub(crate) fn decode_postings(bytes: &[u8]) -> DecodeResult<Vec<u32>> {
    let mut d = Dec::new(bytes);
    let len = d.be32()? as usize;
    let body = d.bytes(len)?;
    check_crc(body, d.bytes(4)?)?;
    let mut d = Dec::new(body);
    let count = d.be32()? as usize;
    if count.checked_mul(4) != Some(d.len()) {
        return Err(format!("{count} postings in {} bytes", d.len()));
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let id = d.be32()?;
        if out.last().is_some_and(|&l| l >= id) {
            return Err(format!("postings out of order at series {id}"));
        }
        out.push(id);
    }
    Ok(out)
}
