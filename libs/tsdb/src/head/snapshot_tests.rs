//! Restarts from a chunk snapshot, and snapshots that must be ignored.

use std::path::{Path, PathBuf};

use heddle_model::{LabelRef, Sample};

use super::test_support::{all_samples, append_each, copy_dir};
use super::*;

fn fill(head: &Head, series: usize, from: i64, rounds: i64) {
    let names: Vec<String> = (0..series).map(|i| format!("s{i}")).collect();
    for round in from..from + rounds {
        let labels: Vec<[LabelRef<'_>; 2]> = names
            .iter()
            .map(|n| {
                [
                    LabelRef {
                        name: "__name__",
                        value: "m",
                    },
                    LabelRef { name: "id", value: n },
                ]
            })
            .collect();
        let samples: Vec<[Sample; 1]> = (0..series)
            .map(|i| [Sample::new(round * 15_000, (round * 3 + i as i64) as f64 / 7.0)])
            .collect();
        append_each(head, &labels, &samples);
    }
}

fn snapshot_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("chunk_snapshot."))
        .collect();
    out.sort();
    out
}

#[test]
fn graceful_restart_loads_the_snapshot_and_replays_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = Head::open(dir.path(), HeadOptions::default()).unwrap();
    fill(&head, 50, 0, 300);
    let want = all_samples(&head);
    let written = head.close_with_snapshot().unwrap().unwrap();
    assert_eq!(written.series, 50);
    assert!(
        head.close_with_snapshot().unwrap().is_none(),
        "second close writes nothing"
    );
    drop(head);
    let snaps = snapshot_dirs(dir.path());
    assert_eq!(snaps, vec![written.dir.clone()]);
    let name = written.dir.file_name().unwrap().to_str().unwrap().to_owned();
    assert!(name.starts_with("chunk_snapshot.000000.") && name.len() == "chunk_snapshot.000000.0000000000".len());

    let (head, stats) = Head::open(dir.path(), HeadOptions::default()).unwrap();
    assert_eq!(stats.snapshot, Some(written.position), "{stats:?}");
    assert_eq!(stats.snapshot_series, 50);
    assert_eq!(
        (stats.samples, stats.wal_records),
        (0, 0),
        "nothing after the snapshot: {stats:?}"
    );
    assert_eq!(stats.orphan_mmapped_chunks, 0);
    assert_eq!(all_samples(&head), want);
    assert!(snapshot_dirs(dir.path()).is_empty(), "a loaded snapshot is used once");

    // Appends continue the restored open chunks; then a crash: checkpoint-less full replay + chunks_head.
    fill(&head, 50, 300, 200);
    let want = all_samples(&head);
    drop(head);
    let (head, stats) = Head::open(dir.path(), HeadOptions::default()).unwrap();
    assert_eq!(stats.snapshot, None);
    assert_eq!(all_samples(&head), want);
    assert_eq!(want[0].1.len(), 500);
}

#[test]
fn samples_logged_after_the_snapshot_position_are_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = Head::open(dir.path(), HeadOptions::default()).unwrap();
    fill(&head, 5, 0, 100);
    head.close_with_snapshot().unwrap().unwrap();
    drop(head);
    // Move the snapshot back to the WAL's start, as if it had been taken earlier: the WAL holds samples
    // "after" it that are also in its chunks, and replay must skip them as old.
    let snap = snapshot_dirs(dir.path()).pop().unwrap();
    std::fs::rename(&snap, dir.path().join("chunk_snapshot.000000.0000000000")).unwrap();
    let (head, stats) = Head::open(dir.path(), HeadOptions::default()).unwrap();
    assert_eq!(stats.snapshot_series, 5);
    assert_eq!(stats.samples, 0, "{stats:?}");
    assert_eq!(stats.skipped_samples, 500, "{stats:?}");
    assert_eq!(all_samples(&head)[0].1.len(), 100);
}

#[test]
fn damaged_snapshots_are_deleted_counted_and_the_wal_replayed() {
    type Damage = fn(&Path);
    let cases: [(&str, Damage); 4] = [
        ("half-written (.tmp) snapshot", |snap| {
            let tmp = snap.with_file_name(format!("{}.tmp", snap.file_name().unwrap().to_str().unwrap()));
            std::fs::rename(snap, tmp).unwrap();
        }),
        ("crc mismatch", |snap| {
            let seg = snap.join("00000000");
            let mut b = std::fs::read(&seg).unwrap();
            b[200] ^= 0x01;
            std::fs::write(&seg, b).unwrap();
        }),
        ("segment cut in the middle", |snap| {
            let seg = snap.join("00000000");
            let b = std::fs::read(&seg).unwrap();
            let used = b.iter().rposition(|&x| x != 0).unwrap();
            std::fs::write(&seg, &b[..used / 2]).unwrap();
        }),
        ("segment missing", |snap| {
            std::fs::remove_file(snap.join("00000000")).unwrap();
        }),
    ];
    for (name, damage) in cases {
        let dir = tempfile::tempdir().unwrap();
        let (head, _) = Head::open(dir.path(), HeadOptions::default()).unwrap();
        fill(&head, 30, 0, 250);
        let want = all_samples(&head);
        head.close_with_snapshot().unwrap().unwrap();
        drop(head);
        damage(&snapshot_dirs(dir.path()).pop().unwrap());

        let (head, stats) = Head::open(dir.path(), HeadOptions::default()).unwrap();
        assert_eq!(stats.snapshot, None, "{name}: {stats:?}");
        assert_eq!(stats.snapshots_discarded, 1, "{name}: {stats:?}");
        assert!(snapshot_dirs(dir.path()).is_empty(), "{name}: deleted");
        assert_eq!(stats.series, 30, "{name}: series from the wal");
        assert_eq!(all_samples(&head), want, "{name}");
    }
}

/// A snapshot that fails after series were created and given their `chunks_head/` chunks (a CRC mismatch in
/// its second batch of records) leaves those chunks to the WAL replay that follows, exactly as a crash
/// restart of the same directory uses them.
#[test]
fn a_snapshot_failing_half_way_gives_its_chunks_back_to_the_wal_replay() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = Head::open(dir.path(), HeadOptions::default()).unwrap();
    fill(&head, 4000, 0, 130);
    let want = all_samples(&head);
    head.close_with_snapshot().unwrap().unwrap();
    drop(head);
    let crashed = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), crashed.path());
    for snap in snapshot_dirs(crashed.path()) {
        std::fs::remove_dir_all(snap).unwrap();
    }
    let (_, crash) = Head::open(crashed.path(), HeadOptions::default()).unwrap();
    assert_eq!(crash.samples_in_mmapped_chunks, 4000 * 120, "{crash:?}");

    let seg = snapshot_dirs(dir.path()).pop().unwrap().join("00000000");
    let mut b = std::fs::read(&seg).unwrap();
    let used = b.iter().rposition(|&x| x != 0).unwrap();
    assert!(
        used > 400 << 10,
        "the snapshot spans several load batches ({used} bytes)"
    );
    b[used - 1000] ^= 0x01;
    std::fs::write(&seg, b).unwrap();
    let (head, stats) = Head::open(dir.path(), HeadOptions::default()).unwrap();
    assert_eq!(stats.snapshots_discarded, 1, "{stats:?}");
    assert_eq!(
        (
            stats.samples_in_mmapped_chunks,
            stats.orphan_mmapped_chunks,
            stats.samples
        ),
        (crash.samples_in_mmapped_chunks, 0, crash.samples),
        "{stats:?}"
    );
    assert_eq!(all_samples(&head), want);
}
