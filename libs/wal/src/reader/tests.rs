use std::io::Cursor;

use super::*;
use crate::segment::put_header;
use crate::{Wal, WalOptions};

/// Builds a segment by hand: each fragment is (type byte, data); `pad_to` appends zeros up to that length.
fn frag(out: &mut Vec<u8>, typ: u8, data: &[u8]) {
    let mut h = [0u8; HEADER_SIZE];
    put_header(&mut h, typ, data);
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
}

/// A record read back: data, start offset, end offset.
type Read3 = (Vec<u8>, u64, u64);

fn read_all(bytes: Vec<u8>) -> (Vec<Read3>, Option<WalError>) {
    let mut r = SegmentReader::new(3, Cursor::new(bytes));
    let mut out = Vec::new();
    loop {
        match r.next_record() {
            Ok(Some(rec)) => {
                assert_eq!(rec.start.segment, 3);
                out.push((rec.data.to_vec(), rec.start.offset, rec.end.offset));
            }
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e)),
        }
    }
}

#[test]
fn reads_fragments_and_positions() {
    let mut seg = Vec::new();
    frag(&mut seg, TYPE_FULL, b"one");
    frag(&mut seg, TYPE_FIRST, b"tw");
    frag(&mut seg, TYPE_MIDDLE, b"o-");
    frag(&mut seg, TYPE_LAST, b"parts");
    let compressed = snap::raw::Encoder::new().compress_vec(&[b'z'; 300]).unwrap();
    frag(&mut seg, TYPE_FULL | FLAG_SNAPPY, &compressed);
    let end = seg.len() as u64;
    // A filler record leaves 3 bytes in the page: zeros, and the next record starts on the next page.
    let filler = vec![9u8; PAGE_SIZE - seg.len() - HEADER_SIZE - 3];
    frag(&mut seg, TYPE_FULL, &filler);
    seg.resize(PAGE_SIZE, 0);
    frag(&mut seg, TYPE_FULL, b"");
    let (recs, err) = read_all(seg);
    assert!(err.is_none(), "{err:?}");
    let data: Vec<&[u8]> = recs.iter().map(|r| r.0.as_slice()).collect();
    assert_eq!(data, vec![&b"one"[..], b"two-parts", &[b'z'; 300], &filler, b""]);
    assert_eq!((recs[0].1, recs[0].2), (0, 10));
    assert_eq!((recs[1].1, recs[1].2), (10, 10 + 3 * 7 + 9));
    assert_eq!(recs[2].2, end);
    assert_eq!((recs[3].1, recs[3].2), (end, PAGE_SIZE as u64 - 3));
    assert_eq!((recs[4].1, recs[4].2), (PAGE_SIZE as u64, PAGE_SIZE as u64 + 7));
}

/// Named corruption cases: the bytes after one good record, and the reason fragment expected.
#[test]
fn corruption_cases() {
    let good = {
        let mut v = Vec::new();
        frag(&mut v, TYPE_FULL, b"good");
        v
    };
    let at = good.len() as u64;
    let crc_flip = {
        let mut v = Vec::new();
        frag(&mut v, TYPE_FULL, b"payload");
        v[9] ^= 0x40;
        v
    };
    let mut first_then_eof = Vec::new();
    frag(&mut first_then_eof, TYPE_FIRST, b"abc");
    let mut first_then_full = first_then_eof.clone();
    frag(&mut first_then_full, TYPE_FULL, b"abc");
    let mut first_then_zero = first_then_eof.clone();
    first_then_zero.extend_from_slice(&[0u8; 20]);
    let mut middle = Vec::new();
    frag(&mut middle, TYPE_MIDDLE, b"abc");
    let mut last = Vec::new();
    frag(&mut last, TYPE_LAST, b"abc");
    let mut mixed = Vec::new();
    frag(&mut mixed, TYPE_FIRST, b"abc");
    frag(&mut mixed, TYPE_LAST | FLAG_SNAPPY, b"abc");
    let mut bad_snappy = Vec::new();
    frag(
        &mut bad_snappy,
        TYPE_FULL | FLAG_SNAPPY,
        &[0xff, 0xff, 0xff, 0xff, 0x0f, 1, 2],
    );
    let mut zstd = Vec::new();
    frag(&mut zstd, TYPE_FULL | FLAG_ZSTD, b"abc");
    let mut typ5 = Vec::new();
    frag(&mut typ5, 5, b"abc");
    let mut reserved = Vec::new();
    frag(&mut reserved, TYPE_FULL | 0x20, b"abc");
    let mut flag_only = Vec::new();
    frag(&mut flag_only, FLAG_SNAPPY, b"abc");

    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("crc mismatch", crc_flip, "crc mismatch"),
        ("torn after first", first_then_eof, "torn"),
        ("full inside record", first_then_full, "full fragment inside"),
        ("zero inside record", first_then_zero, "zero padding inside"),
        ("middle without first", middle, "middle fragment without"),
        ("last without first", last, "last fragment without"),
        ("compression flag changes", mixed, "compression flag changes"),
        ("bad snappy", bad_snappy, "snappy"),
        ("zstd", zstd, "zstd"),
        ("type 5", typ5, "invalid fragment type"),
        ("type 0 with snappy flag", flag_only, "invalid fragment type"),
        ("reserved bits", reserved, "reserved bits"),
        ("truncated header", vec![1, 0, 3], "truncated fragment header"),
        ("truncated data", vec![1, 0, 9, 0, 0, 0, 0, 1, 2], "truncated fragment"),
        ("garbage in padding", vec![0, 0, 0, 7, 0], "non-zero byte"),
    ];
    for (name, tail, reason) in cases {
        let mut seg = good.clone();
        seg.extend_from_slice(&tail);
        let (recs, err) = read_all(seg);
        assert_eq!(recs.len(), 1, "{name}: the good record is read");
        match err {
            Some(WalError::Corruption {
                segment: 3,
                offset,
                reason: got,
            }) => {
                assert_eq!(offset, at, "{name}: offset of the bad record");
                assert!(got.contains(reason), "{name}: reason {got:?} lacks {reason:?}");
            }
            other => panic!("{name}: expected corruption, got {other:?}"),
        }
    }
}

#[test]
fn header_crossing_a_full_page_is_corruption() {
    let mut seg = Vec::new();
    frag(&mut seg, TYPE_FULL, &vec![1u8; PAGE_SIZE - HEADER_SIZE - 3]);
    let at = seg.len() as u64;
    assert_eq!(at, PAGE_SIZE as u64 - 3);
    seg.extend_from_slice(&[TYPE_FULL, 0, 0]);
    seg.resize(PAGE_SIZE + 10, 0);
    let (recs, err) = read_all(seg);
    assert_eq!(recs.len(), 1);
    assert!(
        matches!(&err, Some(WalError::Corruption { offset, reason, .. }) if *offset == at && reason.contains("crosses")),
        "{err:?}"
    );
}

#[test]
fn data_after_closing_padding_is_corruption() {
    // A zero page, or zeros with room for a header left, close a segment: the writer never writes after them.
    for (name, pad_from) in [("mid-page padding", 100usize), ("zero page", PAGE_SIZE)] {
        let mut seg = Vec::new();
        frag(&mut seg, TYPE_FULL, &[1u8; 100 - HEADER_SIZE]);
        seg.resize(pad_from, 0);
        seg.resize(seg.len().next_multiple_of(PAGE_SIZE), 0);
        frag(&mut seg, TYPE_FULL, b"later");
        let (recs, err) = read_all(seg);
        assert_eq!(recs.len(), 1, "{name}");
        assert!(
            matches!(&err, Some(WalError::Corruption { offset: 100, reason, .. }) if reason.contains("after the segment was closed")),
            "{name}: {err:?}"
        );
    }
    // Fewer than 7 bytes of padding end a page, not the segment.
    let mut seg = Vec::new();
    frag(&mut seg, TYPE_FULL, &vec![1u8; PAGE_SIZE - HEADER_SIZE - 6]);
    seg.resize(PAGE_SIZE, 0);
    frag(&mut seg, TYPE_FULL, b"next page");
    seg.resize(2 * PAGE_SIZE, 0);
    let (recs, err) = read_all(seg);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(recs[1].0, b"next page");
}

#[test]
fn length_past_a_full_page_is_corruption() {
    let mut seg = Vec::new();
    frag(&mut seg, TYPE_FULL, &vec![1u8; PAGE_SIZE - 100]);
    seg.extend_from_slice(&[TYPE_FULL, 0, 200, 0, 0, 0, 0]);
    seg.resize(PAGE_SIZE * 2, 0);
    let (recs, err) = read_all(seg);
    assert_eq!(recs.len(), 1);
    assert!(
        matches!(&err, Some(WalError::Corruption { reason, .. }) if reason.contains("past the end of the page")),
        "{err:?}"
    );
}

#[test]
fn huge_declared_snappy_length_is_refused() {
    let mut payload = Vec::new();
    // uvarint 1 GiB, then a literal.
    let mut n: u64 = 1 << 30;
    while n >= 0x80 {
        payload.push((n as u8) | 0x80);
        n >>= 7;
    }
    payload.push(n as u8);
    payload.extend_from_slice(&[0x00, b'a']);
    let mut seg = Vec::new();
    frag(&mut seg, TYPE_FULL | FLAG_SNAPPY, &payload);
    let (_, err) = read_all(seg);
    assert!(
        matches!(&err, Some(WalError::Corruption { reason, .. }) if reason.contains("declares")),
        "{err:?}"
    );
}

#[test]
fn reader_resumes_from_a_position() {
    let dir = tempfile::tempdir().unwrap();
    let mut wal = Wal::open(
        dir.path(),
        WalOptions {
            segment_size: 2 * PAGE_SIZE,
            compress: true,
        },
    )
    .unwrap();
    // Half compressible, half not, so both kinds of fragments cross pages and segments.
    let records: Vec<Vec<u8>> = (0..40u64)
        .map(|i| {
            let len = 3000 + i as usize * 97;
            if i % 2 == 0 {
                vec![i as u8; len]
            } else {
                let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect()
            }
        })
        .collect();
    for r in &records {
        wal.log(&[r]).unwrap();
    }
    wal.close().unwrap();

    let mut all = Reader::open(dir.path()).unwrap();
    let mut ends = Vec::new();
    while let Some(rec) = all.next_record().unwrap() {
        ends.push(rec.end);
    }
    assert_eq!(ends.len(), records.len());
    assert!(all.segments_opened() > 1);
    for (i, pos) in ends.iter().enumerate() {
        let mut r = Reader::open_from(dir.path(), *pos).unwrap();
        let mut rest = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            rest.push(rec.data.to_vec());
        }
        assert_eq!(rest, records[i + 1..], "resuming after record {i} at {pos:?}");
    }
}

#[test]
fn reader_reports_a_missing_segment() {
    let dir = tempfile::tempdir().unwrap();
    let mut wal = Wal::open(dir.path(), WalOptions::default()).unwrap();
    wal.log(&[b"a"]).unwrap();
    wal.cut_segment().unwrap();
    wal.cut_segment().unwrap();
    wal.log(&[b"c"]).unwrap();
    drop(wal);
    std::fs::remove_file(segment_path(dir.path(), 1)).unwrap();
    let mut r = Reader::open(dir.path()).unwrap();
    assert_eq!(r.next_record().unwrap().unwrap().data, b"a");
    let err = r.next_record().unwrap_err();
    assert!(
        matches!(&err, WalError::Corruption { segment: 0, offset, reason } if *offset == PAGE_SIZE as u64 && reason.contains("00000001")),
        "{err}"
    );
}

#[test]
fn open_at_past_the_end_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(segment_path(dir.path(), 0), [1, 0, 0, 0, 0, 0, 0]).unwrap();
    assert!(SegmentReader::open_at(dir.path(), 0, 7).is_ok());
    let err = SegmentReader::open_at(dir.path(), 0, 8).unwrap_err();
    assert!(matches!(err, WalError::Corruption { offset: 8, .. }), "{err}");
}
