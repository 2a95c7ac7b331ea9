//! Fault tests: damage a WAL on disk, replay, check what was recovered and that writing continues.

use std::io::Write;

use super::*;
use crate::{HEADER_SIZE, Wal, WalOptions};

fn opts(compress: bool) -> WalOptions {
    WalOptions {
        segment_size: 4 * PAGE_SIZE,
        compress,
    }
}

fn record(i: usize) -> Vec<u8> {
    // Varying sizes, some spanning pages; the index makes each distinct.
    let len = [10, 5000, 40_000, 0, 70_000, 300][i % 6];
    let mut v: Vec<u8> = (0..len).map(|j| (j * 31 + i * 7) as u8).collect();
    v.extend_from_slice(&(i as u32).to_be_bytes());
    v
}

/// Writes `n` records, one `log` call each, and returns them with each record's start position.
fn write_wal(dir: &Path, n: usize, compress: bool) -> (Vec<Vec<u8>>, Vec<(u32, u64)>) {
    let mut wal = Wal::open(dir, opts(compress)).unwrap();
    let mut recs = Vec::new();
    let mut starts = Vec::new();
    for i in 0..n {
        let r = record(i);
        let before = wal.position();
        wal.log(&[&r]).unwrap();
        // A cut happened if the record did not fit: it then starts at the new segment's start.
        let start = if wal.current_segment() != before.segment {
            (wal.current_segment(), 0)
        } else {
            (before.segment, before.offset)
        };
        starts.push(start);
        recs.push(r);
    }
    drop(wal); // a crash: no close, the last page stays short
    (recs, starts)
}

fn replay_collect(dir: &Path) -> (Vec<Vec<u8>>, ReplayReport) {
    let mut out = Vec::new();
    let report = replay(dir, |r: &[u8]| -> Result<(), WalError> {
        out.push(r.to_vec());
        Ok(())
    })
    .unwrap();
    (out, report)
}

/// After a repair, the WAL takes new records and replays old + new without complaint.
fn assert_writing_continues(dir: &Path, recovered: &[Vec<u8>]) {
    let mut wal = Wal::open(dir, opts(true)).unwrap();
    wal.log(&[b"after repair"]).unwrap();
    wal.close().unwrap();
    let (records, report) = replay_collect(dir);
    assert_eq!(report.repaired, None, "a repaired wal replays cleanly");
    assert_eq!(&records[..recovered.len()], recovered);
    assert_eq!(records[recovered.len()..], [b"after repair".to_vec()]);
}

#[test]
fn clean_wal_replays_everything() {
    let dir = tempfile::tempdir().unwrap();
    let (recs, _) = write_wal(dir.path(), 20, true);
    let (got, report) = replay_collect(dir.path());
    assert_eq!(got, recs);
    assert_eq!(report.records, 20);
    assert_eq!(report.repaired, None);
    let on_disk: u64 = list_segments(dir.path())
        .unwrap()
        .iter()
        .map(|&s| std::fs::metadata(segment_path(dir.path(), s)).unwrap().len())
        .sum();
    assert_eq!(report.bytes, on_disk);
    assert_eq!(report.segments as usize, list_segments(dir.path()).unwrap().len());
}

#[test]
fn missing_dir_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    let (got, report) = replay_collect(&dir.path().join("wal"));
    assert!(got.is_empty());
    assert_eq!(report, ReplayReport::default());
    assert!(!dir.path().join("wal").exists(), "replay does not create the directory");
}

#[test]
fn torn_last_page_is_cut_at_the_torn_record() {
    for compress in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (recs, starts) = write_wal(dir.path(), 11, compress);
        // Record 10 is 70 KB of raw data: cut its last segment in the middle of it.
        let (seg, start) = starts[10];
        let path = segment_path(dir.path(), seg);
        let len = std::fs::metadata(&path).unwrap().len();
        let cut = start + (len - start) / 2;
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(cut)
            .unwrap();

        let (got, report) = replay_collect(dir.path());
        assert_eq!(got, recs[..10], "compress={compress}");
        let c = report.repaired.clone().unwrap();
        assert_eq!((c.segment, c.offset), (seg, start), "compress={compress}: {c:?}");
        assert_eq!(
            std::fs::metadata(&path).unwrap().len() % PAGE_SIZE as u64,
            0,
            "cut and padded"
        );
        assert_writing_continues(dir.path(), &recs[..10]);
    }
}

#[test]
fn torn_fragment_header_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (recs, starts) = write_wal(dir.path(), 4, false);
    let (seg, start) = starts[3];
    let path = segment_path(dir.path(), seg);
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(start + 3)
        .unwrap();
    let (got, report) = replay_collect(dir.path());
    assert_eq!(got, recs[..3]);
    assert_eq!(report.repaired.unwrap().offset, start);
    assert_writing_continues(dir.path(), &recs[..3]);
}

#[test]
fn flipped_byte_in_the_last_segment_drops_that_record_and_later_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (recs, starts) = write_wal(dir.path(), 14, false);
    let last = starts[13].0;
    // The first record that starts in the last segment, and one after it in that segment.
    let victim = starts.iter().position(|s| s.0 == last).unwrap();
    assert!(victim < 13, "the last segment holds several records");
    let (seg, start) = starts[victim];
    let path = segment_path(dir.path(), seg);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[start as usize + HEADER_SIZE] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();

    let (got, report) = replay_collect(dir.path());
    assert_eq!(got, recs[..victim]);
    let c = report.repaired.unwrap();
    assert_eq!((c.segment, c.offset), (seg, start));
    assert!(c.reason.contains("crc mismatch"), "{}", c.reason);
    assert_writing_continues(dir.path(), &recs[..victim]);
}

#[test]
fn flipped_byte_in_an_earlier_segment_deletes_later_segments() {
    let dir = tempfile::tempdir().unwrap();
    let (recs, starts) = write_wal(dir.path(), 14, false);
    let (seg, start) = starts[1];
    assert!(starts[13].0 > seg);
    let path = segment_path(dir.path(), seg);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[start as usize + 2] ^= 0x10; // the fragment length
    std::fs::write(&path, &bytes).unwrap();

    let (got, report) = replay_collect(dir.path());
    assert_eq!(got, recs[..1]);
    assert_eq!(report.repaired.unwrap().segment, seg);
    assert_eq!(list_segments(dir.path()).unwrap().last(), Some(&seg));
    assert_writing_continues(dir.path(), &recs[..1]);
}

#[test]
fn garbage_appended_is_cut() {
    for garbage in [&b"\x07garbage"[..], b"\x00\x00\x05", &[0xAB; 5000]] {
        let dir = tempfile::tempdir().unwrap();
        let (recs, _) = write_wal(dir.path(), 6, true);
        let last = list_segments(dir.path()).unwrap().last().copied().unwrap();
        let path = segment_path(dir.path(), last);
        let len = std::fs::metadata(&path).unwrap().len();
        OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(garbage)
            .unwrap();

        let (got, report) = replay_collect(dir.path());
        assert_eq!(got, recs, "garbage {:?}", &garbage[..3]);
        let c = report.repaired.unwrap();
        assert_eq!((c.segment, c.offset), (last, len), "garbage {:?}: {c:?}", &garbage[..3]);
        assert_writing_continues(dir.path(), &recs);
    }
}

#[test]
fn zero_filled_tail_is_not_corruption() {
    // A file system may leave zeros after a crash where data was not yet written.
    let dir = tempfile::tempdir().unwrap();
    let (recs, _) = write_wal(dir.path(), 5, true);
    let last = list_segments(dir.path()).unwrap().last().copied().unwrap();
    let path = segment_path(dir.path(), last);
    let len = std::fs::metadata(&path).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len + 3 * PAGE_SIZE as u64)
        .unwrap();
    let (got, report) = replay_collect(dir.path());
    assert_eq!(got, recs);
    assert_eq!(report.repaired, None);
}

#[test]
fn callback_error_stops_without_repair() {
    #[derive(Debug)]
    enum MyError {
        Wal,
        Stop(usize),
    }
    impl From<WalError> for MyError {
        fn from(_: WalError) -> Self {
            MyError::Wal
        }
    }
    let dir = tempfile::tempdir().unwrap();
    write_wal(dir.path(), 6, true);
    let before = std::fs::read(segment_path(dir.path(), 0)).unwrap();
    let mut n = 0;
    let err = replay(dir.path(), |_| {
        n += 1;
        if n == 3 { Err(MyError::Stop(n)) } else { Ok(()) }
    })
    .unwrap_err();
    assert!(matches!(err, MyError::Stop(3)), "{err:?}");
    assert_eq!(std::fs::read(segment_path(dir.path(), 0)).unwrap(), before);
}

#[test]
fn replay_from_a_position_skips_earlier_records_and_repairs() {
    let dir = tempfile::tempdir().unwrap();
    let (recs, starts) = write_wal(dir.path(), 14, false);
    // Resume at the start of record 5 (a record boundary, like a snapshot position).
    let (seg, offset) = starts[5];
    let mut got = Vec::new();
    let report = replay_from(
        dir.path(),
        crate::Position { segment: seg, offset },
        |r: &[u8]| -> Result<(), WalError> {
            got.push(r.to_vec());
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(got, recs[5..]);
    assert_eq!(report.records, 9);
    assert_eq!(report.repaired, None);

    // A torn tail after the position is repaired as in a full replay.
    let (last_seg, last_start) = starts[13];
    let path = segment_path(dir.path(), last_seg);
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(last_start + 5)
        .unwrap();
    let mut got = Vec::new();
    let report = replay_from(
        dir.path(),
        crate::Position { segment: seg, offset },
        |r: &[u8]| -> Result<(), WalError> {
            got.push(r.to_vec());
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(got, recs[5..13]);
    let c = report.repaired.unwrap();
    assert_eq!((c.segment, c.offset), (last_seg, last_start));
    assert!(
        c.to_string()
            .starts_with(&format!("segment {last_seg:08} offset {last_start}: ")),
        "{c}"
    );
}
