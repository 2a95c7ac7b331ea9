//! Property tests: whatever is logged is read back exactly, across pages, segments and compression modes.

use std::path::Path;

use heddle_wal::{PAGE_SIZE, Reader, Wal, WalError, WalOptions, list_segments, replay, segment_path};
use proptest::prelude::*;

const SEGMENT_PAGES: usize = 4;

/// A record: its length, and whether it is compressible (a short repeated pattern) or noise.
#[derive(Debug, Clone)]
struct Spec {
    len: usize,
    seed: u64,
    compressible: bool,
}

fn build(spec: &Spec) -> Vec<u8> {
    let mut x = spec.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as u8
    };
    if spec.compressible {
        let pattern: Vec<u8> = (0..1 + spec.seed % 16).map(|_| next()).collect();
        pattern.iter().copied().cycle().take(spec.len).collect()
    } else {
        (0..spec.len).map(|_| next()).collect()
    }
}

fn spec() -> impl Strategy<Value = Spec> {
    // Mostly small records with some large ones, so batches mix single fragments and page-spanning records.
    let len = prop_oneof![3 => 0usize..200, 2 => 0usize..8_000, 1 => 0usize..100 * 1024];
    (len, any::<u64>(), any::<bool>()).prop_map(|(len, seed, compressible)| Spec {
        len,
        seed,
        compressible,
    })
}

/// Records grouped into `log` calls.
fn batches() -> impl Strategy<Value = Vec<Vec<Spec>>> {
    prop::collection::vec(prop::collection::vec(spec(), 1..4), 1..12)
}

fn opts(compress: bool) -> WalOptions {
    WalOptions {
        segment_size: SEGMENT_PAGES * PAGE_SIZE,
        compress,
    }
}

fn read_back(dir: &Path) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let report = replay(dir, |r: &[u8]| -> Result<(), WalError> {
        out.push(r.to_vec());
        Ok(())
    })
    .unwrap();
    assert_eq!(report.repaired, None);
    assert_eq!(report.records as usize, out.len());
    out
}

/// Segment files respect the size limit; every segment but the last holds whole pages.
fn check_segments(dir: &Path) {
    let segs = list_segments(dir).unwrap();
    for (i, &s) in segs.iter().enumerate() {
        let len = std::fs::metadata(segment_path(dir, s)).unwrap().len() as usize;
        assert!(len <= SEGMENT_PAGES * PAGE_SIZE, "segment {s} has {len} bytes");
        if i + 1 < segs.len() {
            assert_eq!(len % PAGE_SIZE, 0, "closed segment {s} has {len} bytes");
        }
    }
}

/// Positions increase strictly and each record ends where the next can start.
fn check_positions(dir: &Path, expected: &[Vec<u8>]) {
    let mut reader = Reader::open(dir).unwrap();
    let mut prev_end = None;
    let mut i = 0;
    while let Some(rec) = reader.next_record().unwrap() {
        assert_eq!(rec.data, &expected[i][..], "record {i} via Reader");
        assert!(rec.start < rec.end, "record {i}: {:?} .. {:?}", rec.start, rec.end);
        if let Some(prev) = prev_end {
            assert!(
                rec.start >= prev,
                "record {i} starts at {:?} before {prev:?}",
                rec.start
            );
        }
        prev_end = Some(rec.end);
        i += 1;
    }
    assert_eq!(i, expected.len());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn round_trip(batches in batches(), compress in any::<bool>(), close in any::<bool>()) {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = Wal::open(dir.path(), opts(compress)).unwrap();
        let mut expected = Vec::new();
        for batch in &batches {
            let records: Vec<Vec<u8>> = batch.iter().map(build).collect();
            let refs: Vec<&[u8]> = records.iter().map(|r| r.as_slice()).collect();
            wal.log(&refs).unwrap();
            expected.extend(records);
        }
        if close { wal.close().unwrap() } else { drop(wal) }
        prop_assert_eq!(read_back(dir.path()), expected.clone());
        check_segments(dir.path());
        check_positions(dir.path(), &expected);
    }

    #[test]
    fn mixed_compression_across_reopens(runs in prop::collection::vec((batches(), any::<bool>()), 1..4)) {
        let dir = tempfile::tempdir().unwrap();
        let mut expected = Vec::new();
        for (batches, compress) in &runs {
            // Replay first, as a restart does; the writer then starts a new segment.
            prop_assert_eq!(read_back(dir.path()), expected.clone());
            let mut wal = Wal::open(dir.path(), opts(*compress)).unwrap();
            for batch in batches {
                let records: Vec<Vec<u8>> = batch.iter().map(build).collect();
                let refs: Vec<&[u8]> = records.iter().map(|r| r.as_slice()).collect();
                wal.log(&refs).unwrap();
                expected.extend(records);
            }
            wal.close().unwrap();
        }
        prop_assert_eq!(read_back(dir.path()), expected.clone());
        check_segments(dir.path());
        check_positions(dir.path(), &expected);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Damaged segments never panic the reader, and records wholly before the damage read back intact.
    #[test]
    fn damaged_segment_never_panics(
        batches in batches(),
        compress in any::<bool>(),
        damage in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = Wal::open(dir.path(), WalOptions { segment_size: 64 * PAGE_SIZE, compress }).unwrap();
        let mut expected = Vec::new();
        for batch in &batches {
            let records: Vec<Vec<u8>> = batch.iter().map(build).collect();
            let refs: Vec<&[u8]> = records.iter().map(|r| r.as_slice()).collect();
            wal.log(&refs).unwrap();
            expected.extend(records);
        }
        drop(wal);
        let mut bytes = std::fs::read(segment_path(dir.path(), 0)).unwrap();
        prop_assume!(!bytes.is_empty());
        let mut first_damage = bytes.len();
        for (at, xor) in &damage {
            let at = at.index(bytes.len());
            bytes[at] ^= xor | 1;
            first_damage = first_damage.min(at);
        }
        let cut = cut.index(bytes.len() + 1);
        bytes.truncate(cut);
        first_damage = first_damage.min(cut);

        let mut reader = heddle_wal::SegmentReader::new(0, std::io::Cursor::new(bytes));
        let mut i = 0;
        loop {
            match reader.next_record() {
                Ok(Some(rec)) => {
                    if rec.end.offset as usize <= first_damage {
                        prop_assert_eq!(rec.data, &expected[i][..], "record {} before the damage", i);
                    }
                    i += 1;
                }
                Ok(None) => break,
                Err(WalError::Corruption { offset, .. }) => {
                    prop_assert!(offset as usize <= first_damage + PAGE_SIZE, "corruption at {offset}");
                    break;
                }
                Err(e) => return Err(TestCaseError::fail(format!("unexpected error {e}"))),
            }
        }
    }

    /// Arbitrary bytes never panic the reader.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..70_000)) {
        let mut reader = heddle_wal::SegmentReader::new(0, std::io::Cursor::new(bytes));
        let mut n = 0;
        while let Ok(Some(_)) = reader.next_record() {
            n += 1;
            prop_assert!(n < 70_000);
        }
    }
}
