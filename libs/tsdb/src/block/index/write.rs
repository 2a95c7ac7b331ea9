//! Writing an index from series held in memory (labels as interned string ids, chunk metas), in one pass.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::{HEADER_LEN, MAGIC, SERIES_ALIGN, Toc, VERSION};
use crate::block::encoding::{put_crc, put_uvarint, put_uvarint_str, put_varint};
use crate::error::TsdbError;

/// Where a chunk is and what it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkMeta {
    pub(crate) min_time: i64,
    pub(crate) max_time: i64,
    pub(crate) chunk_ref: u64,
}

/// A series to index: label pairs as ids into the writer's string table, sorted by name.
#[derive(Debug)]
pub(crate) struct IndexSeries {
    pub(crate) labels: Box<[(u32, u32)]>,
    pub(crate) chunks: Box<[ChunkMeta]>,
}

/// A file written sequentially that knows its position.
struct PosWriter {
    path: PathBuf,
    w: BufWriter<File>,
    pos: u64,
}

impl PosWriter {
    fn write(&mut self, b: &[u8]) -> Result<(), TsdbError> {
        self.w.write_all(b).map_err(|source| TsdbError::Io {
            path: self.path.clone(),
            source,
        })?;
        self.pos += b.len() as u64;
        Ok(())
    }

    fn pad(&mut self, align: u64) -> Result<(), TsdbError> {
        let rem = self.pos % align;
        if rem != 0 {
            self.write(&vec![0u8; (align - rem) as usize])?;
        }
        Ok(())
    }

    /// Writes `len u32 | body | crc(body)`.
    fn section(&mut self, body: &[u8]) -> Result<(), TsdbError> {
        let len = u32::try_from(body.len()).map_err(|_| self.too_large("section", body.len() as u64))?;
        self.write(&len.to_be_bytes())?;
        self.write(body)?;
        let mut crc = Vec::with_capacity(4);
        put_crc(&mut crc, body);
        self.write(&crc)
    }

    fn too_large(&self, what: &str, n: u64) -> TsdbError {
        TsdbError::Corruption {
            what: self.path.display().to_string(),
            reason: format!("{what} of {n} bytes exceeds the index format's 32-bit limits"),
        }
    }
}

/// Writes the index of `series` (sorted by labels, which the caller checked) to `path`, fsynced. `strings`
/// resolves the ids in the series' labels. Returns the file's size.
pub(crate) fn write_index(path: &Path, strings: &[Box<str>], series: &[IndexSeries]) -> Result<u64, TsdbError> {
    let file = File::create(path).map_err(|source| TsdbError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut w = PosWriter {
        path: path.to_path_buf(),
        w: BufWriter::with_capacity(1 << 20, file),
        pos: 0,
    };
    let mut header = MAGIC.to_be_bytes().to_vec();
    header.push(VERSION);
    w.write(&header)?;
    debug_assert_eq!(w.pos, HEADER_LEN);

    // Symbols, sorted; `symbol_of[id]` is the position of string `id` in the table.
    let mut order: Vec<u32> = (0..strings.len() as u32).collect();
    order.sort_unstable_by(|&a, &b| strings[a as usize].cmp(&strings[b as usize]));
    let mut symbol_of = vec![0u32; strings.len()];
    let mut body = Vec::new();
    body.extend_from_slice(&(order.len() as u32).to_be_bytes());
    for (pos, &id) in order.iter().enumerate() {
        symbol_of[id as usize] = pos as u32;
        put_uvarint_str(&mut body, &strings[id as usize]);
    }
    let mut toc = Toc {
        symbols: w.pos,
        ..Toc::default()
    };
    w.section(&body)?;

    // Series, collecting postings keyed by symbol positions (whose order is the strings' order).
    toc.series = w.pos;
    let mut all: Vec<u32> = Vec::with_capacity(series.len());
    let mut postings: BTreeMap<(u32, u32), Vec<u32>> = BTreeMap::new();
    let mut entry = Vec::new();
    let mut framed = Vec::new();
    for s in series {
        w.pad(SERIES_ALIGN)?;
        let id = u32::try_from(w.pos / SERIES_ALIGN).map_err(|_| w.too_large("series section", w.pos))?;
        all.push(id);
        entry.clear();
        put_uvarint(&mut entry, s.labels.len() as u64);
        for &(n, v) in s.labels.iter() {
            let (n, v) = (symbol_of[n as usize], symbol_of[v as usize]);
            put_uvarint(&mut entry, u64::from(n));
            put_uvarint(&mut entry, u64::from(v));
            postings.entry((n, v)).or_default().push(id);
        }
        encode_chunk_metas(&mut entry, &s.chunks);
        framed.clear();
        put_uvarint(&mut framed, entry.len() as u64);
        framed.extend_from_slice(&entry);
        put_crc(&mut framed, &entry);
        w.write(&framed)?;
    }

    // Postings: the all-series list, then one list per label pair in (name, value) order.
    toc.label_indices = w.pos;
    toc.postings = w.pos;
    let mut table = Vec::new();
    let mut count: u32 = 0;
    let mut list = Vec::new();
    let mut write_list = |w: &mut PosWriter, name: &str, value: &str, ids: &[u32]| -> Result<(), TsdbError> {
        w.pad(4)?;
        put_uvarint(&mut table, 2);
        put_uvarint_str(&mut table, name);
        put_uvarint_str(&mut table, value);
        put_uvarint(&mut table, w.pos);
        count += 1;
        list.clear();
        list.extend_from_slice(&(ids.len() as u32).to_be_bytes());
        for id in ids {
            list.extend_from_slice(&id.to_be_bytes());
        }
        w.section(&list)
    };
    write_list(&mut w, "", "", &all)?;
    for ((n, v), ids) in &postings {
        let name = &strings[order[*n as usize] as usize];
        let value = &strings[order[*v as usize] as usize];
        write_list(&mut w, name, value, ids)?;
    }
    toc.label_indices_table = w.pos;
    toc.postings_table = w.pos;
    let mut body = count.to_be_bytes().to_vec();
    body.extend_from_slice(&table);
    w.section(&body)?;
    w.write(&toc.encode())?;

    let size = w.pos;
    let file = w.w.into_inner().map_err(|e| TsdbError::Io {
        path: path.to_path_buf(),
        source: e.into_error(),
    })?;
    file.sync_all().map_err(|source| TsdbError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(size)
}

/// Appends the chunk count and the delta-encoded chunk metas of a series entry.
pub(crate) fn encode_chunk_metas(out: &mut Vec<u8>, chunks: &[ChunkMeta]) {
    put_uvarint(out, chunks.len() as u64);
    let Some(first) = chunks.first() else {
        return;
    };
    put_varint(out, first.min_time);
    put_uvarint(out, first.max_time.wrapping_sub(first.min_time) as u64);
    put_uvarint(out, first.chunk_ref);
    let (mut prev_maxt, mut prev_ref) = (first.max_time, first.chunk_ref);
    for c in &chunks[1..] {
        put_uvarint(out, c.min_time.wrapping_sub(prev_maxt) as u64);
        put_uvarint(out, c.max_time.wrapping_sub(c.min_time) as u64);
        put_varint(out, (c.chunk_ref as i64).wrapping_sub(prev_ref as i64));
        prev_maxt = c.max_time;
        prev_ref = c.chunk_ref;
    }
}
