use super::*;
use crate::{PAGE_SIZE, replay};

fn opts() -> WalOptions {
    WalOptions {
        segment_size: 2 * PAGE_SIZE,
        compress: true,
    }
}

/// Record `i`: its index, then filler so a few records fill a segment.
fn record(i: u32) -> Vec<u8> {
    let mut v = i.to_be_bytes().to_vec();
    let mut x = u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    v.extend((0..9000).map(|_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as u8
    }));
    v
}

fn index_of(rec: &[u8]) -> u32 {
    u32::from_be_bytes([rec[0], rec[1], rec[2], rec[3]])
}

/// Writes records 0..n, one per call; returns the segment each record went to.
fn write(dir: &Path, range: std::ops::Range<u32>) -> Vec<u32> {
    let mut wal = Wal::open(dir, opts()).unwrap();
    let mut segs = Vec::new();
    for i in range {
        wal.log(&[&record(i)]).unwrap();
        segs.push(wal.current_segment());
    }
    wal.close().unwrap();
    segs
}

/// Indices of the records a replay yields, and the report.
fn replayed(dir: &Path) -> (Vec<u32>, crate::ReplayReport) {
    let mut out = Vec::new();
    let report = replay(dir, |r: &[u8]| -> Result<(), WalError> {
        out.push(index_of(r));
        Ok(())
    })
    .unwrap();
    (out, report)
}

/// Keeps even records, replaces multiples of 3 by a short record, drops the rest.
fn filter(rec: &[u8], out: &mut Vec<u8>) -> Result<Keep, WalError> {
    let i = index_of(rec);
    Ok(if i.is_multiple_of(3) {
        out.extend_from_slice(&(i + 1000).to_be_bytes());
        Keep::Replaced
    } else if i.is_multiple_of(2) {
        Keep::Original
    } else {
        Keep::Drop
    })
}

fn kept(range: std::ops::Range<u32>) -> Vec<u32> {
    range
        .filter_map(|i| match i {
            i if i.is_multiple_of(3) => Some(i + 1000),
            i if i.is_multiple_of(2) => Some(i),
            _ => None,
        })
        .collect()
}

#[test]
fn checkpoint_then_truncate_then_replay() {
    let dir = tempfile::tempdir().unwrap();
    let segs = write(dir.path(), 0..30);
    let through = segs[15];
    // Records in segments up to `through` are folded in.
    let folded = segs.iter().take_while(|&&s| s <= through).count() as u32;

    let stats = write_checkpoint(dir.path(), through, opts(), filter).unwrap();
    assert_eq!(stats.index, through);
    assert_eq!(stats.previous, None);
    assert_eq!(stats.segments, Some((0, through)));
    assert_eq!(stats.records_read, folded as u64);
    assert_eq!(stats.records_written, kept(0..folded).len() as u64);
    assert_eq!(last_checkpoint(dir.path()).unwrap(), Some(through));

    // Before the old segments are deleted (a crash right after checkpointing), replay skips them.
    let (got, report) = replayed(dir.path());
    let mut want = kept(0..folded);
    want.extend(folded..30);
    assert_eq!(got, want);
    assert_eq!(report.checkpoint, Some(through));

    assert_eq!(delete_segments_before(dir.path(), through + 1).unwrap(), through + 1);
    assert_eq!(
        crate::segment_range(dir.path()).unwrap().map(|r| r.0),
        Some(through + 1)
    );
    let (got, report) = replayed(dir.path());
    assert_eq!(got, want);
    assert_eq!(report.repaired, None);
    assert_eq!(report.checkpoint_repaired, None);
}

#[test]
fn second_checkpoint_folds_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let segs = write(dir.path(), 0..20);
    let first = segs[8];
    write_checkpoint(dir.path(), first, opts(), filter).unwrap();
    delete_segments_before(dir.path(), first + 1).unwrap();
    let segs2 = write(dir.path(), 20..40);
    let second = segs2[10];
    let stats = write_checkpoint(dir.path(), second, opts(), |rec: &[u8], _: &mut Vec<u8>| {
        Ok::<_, WalError>(if index_of(rec) >= 1000 {
            Keep::Drop
        } else {
            Keep::Original
        })
    })
    .unwrap();
    assert_eq!(stats.previous, Some(first));
    assert_eq!(stats.segments.map(|s| s.0), Some(first + 1));
    delete_segments_before(dir.path(), second + 1).unwrap();
    assert_eq!(delete_checkpoints_before(dir.path(), second).unwrap(), 1);
    assert_eq!(list_checkpoints(dir.path()).unwrap(), vec![second]);

    let (got, _) = replayed(dir.path());
    let all: Vec<u32> = segs.iter().chain(&segs2).copied().collect();
    let folded = all.iter().take_while(|&&s| s <= second).count() as u32;
    let first_folded = segs.iter().take_while(|&&s| s <= first).count() as u32;
    // From the first checkpoint only the even, non-multiple-of-3 records survive the second filter.
    let mut want: Vec<u32> = kept(0..first_folded).into_iter().filter(|&i| i < 1000).collect();
    want.extend(first_folded..folded);
    want.extend(folded..40);
    assert_eq!(got, want);
}

#[test]
fn refuses_bad_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let segs = write(dir.path(), 0..10);
    let last = *segs.last().unwrap();
    let err = write_checkpoint(dir.path(), last + 5, opts(), filter).unwrap_err();
    assert!(matches!(err, WalError::InvalidOptions(_)), "{err}");
    write_checkpoint(dir.path(), 1, opts(), filter).unwrap();
    let err = write_checkpoint(dir.path(), 1, opts(), filter).unwrap_err();
    assert!(err.to_string().contains("already covers"), "{err}");
}

#[test]
fn corrupt_source_leaves_no_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let segs = write(dir.path(), 0..10);
    let path = segment_path(dir.path(), 0);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[100] ^= 0xFF;
    std::fs::write(&path, bytes).unwrap();
    let err = write_checkpoint(dir.path(), segs[9], opts(), filter).unwrap_err();
    assert!(matches!(err, WalError::Corruption { segment: 0, .. }), "{err}");
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with(PREFIX))
        .collect();
    assert!(names.is_empty(), "{names:?}");
}

#[test]
fn filter_error_is_returned() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), 0..4);
    let err = write_checkpoint(dir.path(), 0, opts(), |_: &[u8], _: &mut Vec<u8>| {
        Err::<Keep, _>(WalError::InvalidOptions("stop".into()))
    })
    .unwrap_err();
    assert!(err.to_string().contains("stop"));
    assert_eq!(last_checkpoint(dir.path()).unwrap(), None);
}

#[test]
fn temporary_checkpoints_are_ignored_and_cleaned() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), 0..4);
    let tmp = dir.path().join("checkpoint.00000007.tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::write(tmp.join("00000000"), b"partial").unwrap();
    std::fs::create_dir(dir.path().join("checkpoint.x")).unwrap();
    assert_eq!(last_checkpoint(dir.path()).unwrap(), None);
    let (got, report) = replayed(dir.path());
    assert_eq!(got, vec![0, 1, 2, 3]);
    assert_eq!(report.checkpoint, None);
    delete_checkpoints_before(dir.path(), 0).unwrap();
    assert!(!tmp.exists());
}

#[test]
fn corrupt_checkpoint_is_repaired_and_segments_still_replay() {
    let dir = tempfile::tempdir().unwrap();
    let segs = write(dir.path(), 0..20);
    let through = segs[9];
    write_checkpoint(dir.path(), through, opts(), |_: &[u8], _: &mut Vec<u8>| {
        Ok::<_, WalError>(Keep::Original)
    })
    .unwrap();
    delete_segments_before(dir.path(), through + 1).unwrap();
    let folded = segs.iter().take_while(|&&s| s <= through).count() as u32;
    // Tear the checkpoint's last segment.
    let cp = checkpoint_path(dir.path(), through);
    let last = *list_segments(&cp).unwrap().last().unwrap();
    let path = segment_path(&cp, last);
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - PAGE_SIZE as u64 + 50)
        .unwrap();

    let (got, report) = replayed(dir.path());
    let repaired = report.checkpoint_repaired.clone().expect("checkpoint repaired");
    assert_eq!(repaired.segment, last);
    assert_eq!(report.repaired, None);
    let lost = got.iter().filter(|&&i| i < folded).count() as u32;
    assert!(lost < folded, "some checkpoint records are lost");
    assert_eq!(got[..lost as usize], (0..lost).collect::<Vec<_>>()[..]);
    assert_eq!(got[lost as usize..], (folded..20).collect::<Vec<_>>()[..]);
    let (_, again) = replayed(dir.path());
    assert_eq!(again.checkpoint_repaired, None, "the repair holds");
}

#[test]
fn writer_starts_after_the_checkpoint_when_all_segments_are_gone() {
    let dir = tempfile::tempdir().unwrap();
    let segs = write(dir.path(), 0..3);
    let last = *segs.last().unwrap();
    write_checkpoint(dir.path(), last, opts(), |_: &[u8], _: &mut Vec<u8>| {
        Ok::<_, WalError>(Keep::Original)
    })
    .unwrap();
    delete_segments_before(dir.path(), last + 1).unwrap();
    assert_eq!(crate::segment_range(dir.path()).unwrap(), None);
    let mut wal = Wal::open(dir.path(), opts()).unwrap();
    assert_eq!(wal.current_segment(), last + 1);
    wal.log(&[&record(3)]).unwrap();
    wal.close().unwrap();
    assert_eq!(replayed(dir.path()).0, vec![0, 1, 2, 3]);
}
