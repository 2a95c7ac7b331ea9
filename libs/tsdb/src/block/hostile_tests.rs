//! A reader faces bytes from a bucket: whatever they hold, it answers with a result, never a panic or an
//! allocation larger than the bytes it read. Mutations are fed both raw (CRCs catch most) and with every
//! CRC recomputed, so they reach the decoders behind the checksums. Also: chunks of other encodings.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use heddle_model::Matcher;
use proptest::prelude::*;

use super::encoding::Dec;
use super::tests::{MemFiles, matcher, mem_files, small_block};
use super::*;

/// Where the checksummed pieces of an index are.
struct Layout {
    /// `len u32 | body | crc` sections: symbols, postings lists, postings table.
    fixed: Vec<usize>,
    /// `uvarint len | body | crc` series entries.
    series: Vec<usize>,
}

fn be32(b: &[u8], at: usize) -> usize {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap()) as usize
}

fn be64(b: &[u8], at: usize) -> usize {
    u64::from_be_bytes(b[at..at + 8].try_into().unwrap()) as usize
}

/// The layout of a valid index.
fn layout(b: &[u8]) -> Layout {
    let toc = b.len() - 52;
    let (symbols, table) = (be64(b, toc), be64(b, toc + 40));
    let len = be32(b, table);
    let mut d = Dec::new(&b[table + 4..table + 4 + len]);
    let mut postings = Vec::new();
    for _ in 0..d.be32().unwrap() {
        d.uvarint().unwrap();
        d.uvarint_str().unwrap();
        d.uvarint_str().unwrap();
        postings.push(d.uvarint().unwrap() as usize);
    }
    let all = postings[0];
    let series = (0..be32(b, all + 4)).map(|i| be32(b, all + 8 + 4 * i) * 16).collect();
    let mut fixed = postings;
    fixed.extend([symbols, table]);
    Layout { fixed, series }
}

fn put_crc_at(b: &mut [u8], body: std::ops::Range<usize>) {
    if body.end.checked_add(4).is_some_and(|e| e <= b.len()) && body.start <= body.end {
        let crc = crc32c::crc32c(&b[body.clone()]);
        b[body.end..body.end + 4].copy_from_slice(&crc.to_be_bytes());
    }
}

/// Recomputes the CRCs of a mutated index, reading lengths from the mutated bytes.
fn fix_crcs(b: &mut [u8], l: &Layout) {
    for &at in &l.series {
        let Some(rest) = b.get(at..) else { continue };
        let mut d = Dec::new(rest);
        if let Ok(len) = d.uvarint() {
            let start = at + d.pos();
            put_crc_at(b, start..start.saturating_add(len as usize));
        }
    }
    for &at in &l.fixed {
        if at + 4 <= b.len() {
            let len = be32(b, at);
            put_crc_at(b, at + 4..(at + 4).saturating_add(len));
        }
    }
    if b.len() >= 52 {
        let n = b.len();
        put_crc_at(b, n - 52..n - 4);
    }
}

fn query_everything(files: HashMap<String, Bytes>, meta: BlockMeta, ms: &[Matcher]) {
    if let Ok(r) = BlockReader::open(Arc::new(MemFiles(files)), meta) {
        let _ = r.select(i64::MIN, i64::MAX, ms);
        let _ = r.series(0, 100_000, ms);
        let _ = r.label_values("i", ms);
        let _ = r.label_names(ms);
        let _ = r.label_names(&[]);
    }
}

proptest! {
    #[test]
    fn hostile_index_bytes_never_panic(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        cut in prop::option::of(any::<prop::sample::Index>()),
        fix in any::<bool>(),
        ms in prop::collection::vec(matcher(), 0..2),
    ) {
        let (dir, meta, _) = small_block(40);
        let mut files = mem_files(&dir.path().join(&meta.ulid));
        let l = layout(&files["index"]);
        for name in ["index", "chunks/000001"] {
            let mut b = files[name].to_vec();
            for (at, v) in &edits {
                let i = at.index(b.len());
                b[i] = *v;
            }
            if name == "index" {
                if let Some(c) = &cut {
                    b.truncate(c.index(b.len()));
                }
                if fix {
                    fix_crcs(&mut b, &l);
                }
            }
            files.insert(name.to_owned(), Bytes::from(b));
        }
        query_everything(files, meta, &ms);
    }

    #[test]
    fn hostile_section_bodies_never_panic(body in prop::collection::vec(any::<u8>(), 0..200)) {
        let (dir, meta, _) = small_block(3);
        let files = LocalBlockFiles::new(dir.path().join(&meta.ulid));
        let header = index::IndexHeader::open(&files, "test").unwrap();
        let _ = header.decode_series(&body);
        let _ = index::decode_postings(&body);
        let _ = index::series_frame_total(&body);
        let _ = chunks::decode_frame(&body);
        let _ = chunks::frame_total(&body);
        let _ = index::decode_symbols(&body);
        let mut d = Dec::new(&body);
        let _ = index::decode_chunk_metas(&mut d);
    }
}

#[test]
fn crc_fix_up_leaves_a_valid_index_unchanged() {
    let (dir, meta, series) = small_block(40);
    let mut files = mem_files(&dir.path().join(&meta.ulid));
    let mut b = files["index"].to_vec();
    let orig = b.clone();
    fix_crcs(&mut b, &layout(&orig));
    assert_eq!(b, orig);
    files.insert("index".to_owned(), Bytes::from(b));
    let r = BlockReader::open(Arc::new(MemFiles(files)), meta).unwrap();
    assert_eq!(r.series(i64::MIN, i64::MAX, &[]).unwrap().len(), series.len());
}

#[test]
fn chunks_of_unknown_encodings_are_skipped_and_counted() {
    let (dir, meta, series) = small_block(3);
    let mut files = mem_files(&dir.path().join(&meta.ulid));
    // Re-label the first chunk of the segment (series 0's first) with an encoding newer than float histograms,
    // CRC fixed.
    let mut seg = files["chunks/000001"].to_vec();
    let len = seg[8] as usize;
    seg[9] = 4;
    let crc = crc32c::crc32c(&seg[9..10 + len]);
    seg[10 + len..14 + len].copy_from_slice(&crc.to_be_bytes());
    files.insert("chunks/000001".to_owned(), Bytes::from(seg));
    let r = BlockReader::open(Arc::new(MemFiles(files)), meta).unwrap();
    let got = r.select(i64::MIN, i64::MAX, &[]).unwrap();
    assert_eq!(r.skipped_chunks(), 1);
    let (first, want) = series.iter().next().unwrap();
    assert_eq!(&got[0].labels, first);
    assert_eq!(
        got[0].chunks,
        want[1..].to_vec(),
        "the chunk of unknown encoding is left out"
    );
    assert_eq!(got.len(), series.len());
}

#[test]
fn local_files_refuse_ranges_outside_and_names_outside_the_block() {
    let (dir, meta, _) = small_block(1);
    let files = LocalBlockFiles::new(dir.path().join(&meta.ulid));
    let size = files.size("index").unwrap();
    assert_eq!(files.read("index", 0..4).unwrap().as_ref(), &[0xBA, 0xAA, 0xD7, 0x00]);
    assert!(files.read("index", size - 1..size + 1).is_err());
    assert!(files.read("../index", 0..1).is_err());
    assert!(files.size("/etc/passwd").is_err());
    fn send_sync<T: Send + Sync>() {}
    send_sync::<BlockReader>();
}
