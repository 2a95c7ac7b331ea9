//! Restarts from a chunk snapshot, and snapshots that must be ignored.

use std::path::{Path, PathBuf};

use heddle_model::{LabelRef, Sample};

use super::test_support::{all_samples, append_each, copy_dir};
use super::*;

/// Labels `{__name__="m", id="<name>"}` for each name.
fn series_labels(names: &[String]) -> Vec<[LabelRef<'_>; 2]> {
    names
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
        .collect()
}

fn fill(head: &Head, series: usize, from: i64, rounds: i64) {
    let names: Vec<String> = (0..series).map(|i| format!("s{i}")).collect();
    for round in from..from + rounds {
        let labels = series_labels(&names);
        let samples: Vec<[Sample; 1]> = (0..series)
            .map(|i| [Sample::new(round * 15_000, (round * 3 + i as i64) as f64 / 7.0)])
            .collect();
        append_each(head, &labels, &samples);
    }
}

/// Every sample of a head, as [`all_samples`] lists them.
type Samples = Vec<(String, Vec<(i64, u64)>)>;

/// A head directory with `series` series filled for `rounds` rounds and closed with a snapshot: the directory,
/// every sample, and what the snapshot wrote.
fn snapshotted(series: usize, rounds: i64) -> (tempfile::TempDir, Samples, SnapshotStats) {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = Head::open(dir.path(), HeadOptions::default()).unwrap();
    fill(&head, series, 0, rounds);
    let want = all_samples(&head);
    let written = head.close_with_snapshot().unwrap().unwrap();
    (dir, want, written)
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
    assert!(!written.dir.exists(), "a loaded snapshot is used once");
    assert!(snapshot_dirs(dir.path()).is_empty());
    // Renamed out of the way before the open returned, and deleted in the background.
    let retired = dir.path().join(format!("deleting.{name}"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while retired.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!retired.exists(), "the loaded snapshot is deleted");

    // Appends continue the restored open chunks; then a crash: checkpoint-less full replay + chunks_head.
    fill(&head, 50, 300, 200);
    let want = all_samples(&head);
    drop(head);
    let (head, stats) = Head::open(dir.path(), HeadOptions::default()).unwrap();
    assert_eq!(stats.snapshot, None);
    assert_eq!(all_samples(&head), want);
    assert_eq!(want[0].1.len(), 500);
}

/// The record header types of a WAL-format directory's segments, in order (page padding skipped).
fn record_types(dir: &Path) -> Vec<u8> {
    const PAGE: usize = 32 * 1024;
    let mut types = Vec::new();
    for seg in heddle_wal::list_segments(dir).unwrap() {
        let bytes = std::fs::read(heddle_wal::segment_path(dir, seg)).unwrap();
        let mut pos = 0;
        while pos + 7 <= bytes.len() {
            if bytes[pos] == 0 {
                pos = (pos / PAGE + 1) * PAGE;
                continue;
            }
            types.push(bytes[pos]);
            pos += 7 + usize::from(u16::from_be_bytes([bytes[pos + 1], bytes[pos + 2]]));
        }
    }
    types
}

/// With WAL compression on, the WAL's records are snappy-compressed and the snapshot's are not (it is read
/// once, at the next start, where decompressing cost more than its 1.2x smaller size saved); it loads as
/// well as a compressed one ([`rewrite_snapshot`] writes those, and so does Prometheus).
#[test]
fn snapshots_are_written_uncompressed_whatever_the_wal_setting() {
    const SNAPPY: u8 = 0x08;
    let (dir, want, written) = snapshotted(40, 130);
    assert!(HeadOptions::default().wal_compression);
    let wal = record_types(&dir.path().join("wal"));
    assert!(wal.iter().any(|t| t & SNAPPY != 0), "the wal is compressed: {wal:?}");
    let snap = record_types(&written.dir);
    assert_eq!(snap.len(), 41, "40 series records and the tombstones: {snap:?}");
    assert!(snap.iter().all(|t| t & SNAPPY == 0), "the snapshot is not: {snap:?}");
    let (head, stats) = Head::open(dir.path(), HeadOptions::default()).unwrap();
    assert_eq!(stats.snapshot_series, 40);
    assert_eq!(all_samples(&head), want);
}

/// A loaded snapshot whose deletion a crash interrupted (left renamed) is never loaded again: the next start
/// deletes it, without counting it as damaged, and replays the WAL.
#[test]
fn a_loaded_snapshot_left_behind_is_deleted_not_loaded() {
    let (dir, want, written) = snapshotted(20, 200);
    let name = written.dir.file_name().unwrap().to_str().unwrap();
    let used = dir.path().join(format!("deleting.{name}"));
    std::fs::rename(&written.dir, &used).unwrap();

    let (head, stats) = Head::open(dir.path(), HeadOptions::default()).unwrap();
    assert_eq!((stats.snapshot, stats.snapshots_discarded), (None, 0), "{stats:?}");
    assert_eq!(stats.series, 20, "from the wal: {stats:?}");
    assert!(!used.exists());
    assert_eq!(all_samples(&head), want);
}

#[test]
fn samples_logged_after_the_snapshot_position_are_replayed() {
    let (dir, _, _) = snapshotted(5, 100);
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

/// The WAL after a snapshot's position can hold samples of series the snapshot loaded (here: an older snapshot
/// put back after a crash) and new series: each gets exactly its samples after the snapshot's.
#[test]
fn samples_after_the_snapshot_reach_loaded_and_new_series() {
    let (dir, _, _) = snapshotted(300, 50);
    let old = snapshot_dirs(dir.path()).pop().unwrap();
    let kept = tempfile::tempdir().unwrap();
    copy_dir(&old, kept.path());
    let (head, _) = Head::open(dir.path(), HeadOptions::default()).unwrap();
    fill(&head, 320, 50, 60);
    let want = all_samples(&head);
    head.sync().unwrap();
    drop(head);
    copy_dir(kept.path(), &old);
    let (head, stats) = Head::open(dir.path(), HeadOptions::default()).unwrap();
    assert_eq!(stats.snapshot_series, 300, "{stats:?}");
    assert_eq!((stats.series, stats.samples), (20, 320 * 60), "{stats:?}");
    assert_eq!((stats.unknown_ref_samples, stats.skipped_samples), (0, 0), "{stats:?}");
    assert!(
        all_samples(&head) == want,
        "every series holds every sample after the restart"
    );
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
        let (dir, want, _) = snapshotted(30, 250);
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
    let (dir, want, _) = snapshotted(4000, 130);
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

/// Rewrites the snapshot in `snap` (CRCs and all) with `edit` applied to its series records, in order; the
/// tombstones record stays last.
fn rewrite_snapshot(snap: &Path, edit: impl FnOnce(&mut Vec<Vec<u8>>)) {
    use crate::record::snapshot::{self as rec, SnapshotRecord};
    let mut series = Vec::new();
    let mut reader = heddle_wal::Reader::open(snap).unwrap();
    while let Some(r) = reader.next_record().unwrap() {
        if let SnapshotRecord::Series(_) = rec::decode(r.data).unwrap() {
            series.push(r.data.to_vec());
        }
    }
    drop(reader);
    edit(&mut series);
    let mut tomb = Vec::new();
    rec::encode_empty_tombstones(&mut tomb);
    series.push(tomb);
    std::fs::remove_dir_all(snap).unwrap();
    let mut w = heddle_wal::Wal::open(snap, heddle_wal::WalOptions::default()).unwrap();
    let refs: Vec<&[u8]> = series.iter().map(Vec::as_slice).collect();
    w.log(&refs).unwrap();
    w.close().unwrap();
}

/// `record` (a snapshot Series record) re-encoded with `f` applied to its ref, labels and chunk data.
fn reencode(record: &[u8], f: impl FnOnce(&mut u64, &mut Vec<(String, String)>, &mut Vec<u8>)) -> Vec<u8> {
    use crate::record::snapshot::{self as rec, SnapshotChunk, SnapshotRecord};
    let SnapshotRecord::Series(s) = rec::decode(record).unwrap() else {
        panic!("not a series record")
    };
    let mut series_ref = s.series_ref;
    let mut labels: Vec<(String, String)> = s.labels.iter().map(|l| (l.name.into(), l.value.into())).collect();
    let c = s.chunk.unwrap();
    let mut data = c.data.to_vec();
    f(&mut series_ref, &mut labels, &mut data);
    let mut out = Vec::new();
    let chunk = SnapshotChunk { data: &data, ..c };
    rec::encode_series(
        &mut out,
        series_ref,
        labels.iter().map(|(n, v)| (n.as_str(), v.as_str())),
        Some(chunk),
    );
    out
}

/// Snapshot records that pass their CRCs but contradict each other or themselves (a series twice, by labels
/// or by ref; an open chunk whose first sample does not decode) reject the snapshot, which is deleted and
/// counted, and the WAL rebuilds the head: no sample lost, none invented. The records sit past the first load
/// batches, so the series before them were already created.
#[test]
fn contradictory_snapshot_records_reject_the_snapshot() {
    type Edit = fn(&mut Vec<Vec<u8>>);
    let cases: [(&str, Edit); 3] = [
        ("labels twice", |s| {
            let again = reencode(&s[10], |r, _, _| *r = 1 << 40);
            s.push(again);
        }),
        ("ref twice", |s| {
            let again = reencode(&s[10], |_, l, _| l[1].1 = "another".into());
            s.push(again);
        }),
        ("open chunk cut inside its first sample", |s| {
            let last = s.len() - 1;
            s[last] = reencode(&s[last], |_, _, d| d.truncate(4));
        }),
    ];
    for (name, edit) in cases {
        let (dir, want, _) = snapshotted(3000, 130);
        rewrite_snapshot(&snapshot_dirs(dir.path()).pop().unwrap(), edit);

        let (head, stats) = Head::open(dir.path(), HeadOptions::default()).unwrap();
        assert_eq!(stats.snapshot, None, "{name}: {stats:?}");
        assert_eq!(stats.snapshots_discarded, 1, "{name}: {stats:?}");
        assert_eq!(stats.series, 3000, "{name}: series from the wal");
        assert!(snapshot_dirs(dir.path()).is_empty(), "{name}: deleted");
        assert!(all_samples(&head) == want, "{name}: samples differ");
    }
}

/// Open chunks are decoded at their first append, not at load: one whose record passes its CRC but whose
/// bytes end in another sample than the record says (here its sample count lowered) is dropped then, counted
/// and logged, and the series goes on in a new chunk; every other series keeps every sample.
#[test]
fn an_open_chunk_that_disagrees_with_its_record_is_dropped_at_its_first_append() {
    let (dir, _, _) = snapshotted(3000, 130);
    let mut damaged = None;
    rewrite_snapshot(&snapshot_dirs(dir.path()).pop().unwrap(), |s| {
        let last = s.len() - 1;
        s[last] = reencode(&s[last], |r, l, d| {
            damaged = Some((*r, l[1].1.clone()));
            d[1] = d[1].wrapping_sub(1);
        });
    });
    let (_, damaged_id) = damaged.unwrap();

    let (head, stats) = Head::open(dir.path(), HeadOptions::default()).unwrap();
    assert_eq!(
        (stats.snapshot_series, stats.snapshots_discarded),
        (3000, 0),
        "{stats:?}"
    );
    let before = all_samples(&head);
    let names: Vec<String> = (0..3000).map(|i| format!("s{i}")).collect();
    let labels = series_labels(&names);
    let samples: Vec<[Sample; 1]> = (0..3000).map(|i| [Sample::new(130 * 15_000, i as f64)]).collect();
    let batch: Vec<AppendSeries<'_>> = labels
        .iter()
        .zip(&samples)
        .map(|(l, s)| AppendSeries {
            labels: l,
            samples: s,
            created: None,
            histograms: &[],
        })
        .collect();
    let out = head.append(&batch).unwrap();
    assert_eq!((out.samples_appended, out.open_chunks_dropped), (3000, 1), "{out:?}");

    let after = all_samples(&head);
    for ((name, was), (name_after, now)) in before.iter().zip(&after) {
        assert_eq!(name, name_after);
        let i: usize = name
            .split("id=\"s")
            .nth(1)
            .unwrap()
            .trim_end_matches("\"}")
            .parse()
            .unwrap();
        let new = (130 * 15_000, (i as f64).to_bits());
        if *name == format!("{{__name__=\"m\", id=\"{damaged_id}\"}}") {
            // Its mmapped chunk stays; the open chunk's 10 samples are gone.
            assert_eq!(now.len(), 121, "{name}");
            assert_eq!(now[..120], was[..120], "{name}");
            assert_eq!(now[120], new, "{name}");
        } else {
            assert_eq!(now.len(), was.len() + 1, "{name}");
            assert_eq!(now[..was.len()], was[..], "{name}");
            assert_eq!(now[was.len()], new, "{name}");
        }
    }
}
