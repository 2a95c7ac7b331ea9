//! Truncation: memory, chunks_head files and WAL checkpoint, and restarts after it.

use heddle_model::{LabelRef, Sample};

use super::test_support::{all_samples, append_each};
use super::*;

const H2: i64 = 7_200_000;

fn opts() -> HeadOptions {
    HeadOptions {
        wal_segment_size: 2 * heddle_wal::PAGE_SIZE,
        chunks_head_file_size: 2 * 1024,
        ..HeadOptions::default()
    }
}

/// Series `s0..s9` get a sample every 15 s for `rounds`; `short0..short4` only for the first 200 rounds.
fn fill(head: &Head, from: i64, rounds: i64) {
    for round in from..from + rounds {
        let mut names: Vec<String> = (0..10).map(|i| format!("s{i}")).collect();
        if round < 200 {
            names.extend((0..5).map(|i| format!("short{i}")));
        }
        let labels: Vec<[LabelRef<'_>; 1]> = names
            .iter()
            .map(|n| {
                [LabelRef {
                    name: "__name__",
                    value: n,
                }]
            })
            .collect();
        let samples: Vec<[Sample; 1]> = (0..names.len())
            .map(|i| [Sample::new(round * 15_000, (round + i as i64) as f64)])
            .collect();
        append_each(head, &labels, &samples);
    }
}

fn names_in(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn truncate_drops_old_data_checkpoints_the_wal_and_survives_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = Head::open(dir.path(), opts()).unwrap();
    fill(&head, 0, 1500); // 6 h 15 min
    let before = all_samples(&head);
    let want: Vec<(String, Vec<(i64, u64)>)> = before
        .iter()
        .map(|(l, s)| {
            (
                l.clone(),
                s.iter().copied().filter(|(t, _)| *t >= H2).collect::<Vec<_>>(),
            )
        })
        .filter(|(_, s)| !s.is_empty())
        .collect();
    assert_eq!(want.len(), 10);
    let chunk_files_before = names_in(&dir.path().join("chunks_head")).len();

    let stats = head.truncate(H2).unwrap();
    assert_eq!(stats.series_removed, 5, "{stats:?}");
    assert!(stats.chunks_removed >= 10 * 4 + 5 * 2, "{stats:?}");
    assert!(stats.chunk_files_deleted > 0, "{stats:?}");
    assert!(stats.segments_deleted > 1, "{stats:?}");
    let cp = stats.checkpoint.clone().unwrap();
    assert!(cp.records_written > 0 && cp.records_written < cp.records_read, "{cp:?}");
    assert_eq!(all_samples(&head), want);
    assert_eq!(head.stats().series, 10);
    assert!(names_in(&dir.path().join("chunks_head")).len() < chunk_files_before);
    let wal = names_in(&dir.path().join("wal"));
    assert_eq!(
        wal,
        vec![format!("{:08}", cp.index + 1), format!("checkpoint.{:08}", cp.index)],
        "the new segment and the checkpoint"
    );

    // Appends go on; a crash: checkpoint + chunks_head + segments after it rebuild exactly the same head.
    fill(&head, 1500, 100);
    let want = all_samples(&head);
    drop(head);
    // Chunks before mint that share a file with newer ones are still on disk: the truncation time is passed
    // back at open, as Prometheus takes it from its newest block.
    let truncated = HeadOptions {
        min_valid_time: H2,
        ..opts()
    };
    let (head, stats) = Head::open(dir.path(), truncated.clone()).unwrap();
    assert!(stats.mmapped_chunks_before_min_valid_time > 0, "{stats:?}");
    assert_eq!(stats.unknown_ref_samples, 0, "{stats:?}");
    let got = all_samples(&head);
    let summary = |v: &[(String, Vec<(i64, u64)>)]| -> Vec<(String, usize, Option<i64>, Option<i64>)> {
        v.iter()
            .map(|(l, s)| (l.clone(), s.len(), s.first().map(|x| x.0), s.last().map(|x| x.0)))
            .collect()
    };
    assert_eq!(summary(&got), summary(&want), "{stats:?}");
    assert_eq!(got, want);

    // A second truncation folds the first checkpoint into the next.
    let stats = head.truncate(4 * H2 / 2).unwrap();
    let cp2 = stats.checkpoint.unwrap();
    assert_eq!(cp2.previous, Some(cp.index));
    let want: Vec<(String, Vec<(i64, u64)>)> = want
        .into_iter()
        .map(|(l, s)| (l, s.into_iter().filter(|(t, _)| *t >= 2 * H2).collect()))
        .collect();
    assert_eq!(all_samples(&head), want);
    head.close_with_snapshot().unwrap().unwrap();
    drop(head);
    let truncated = HeadOptions {
        min_valid_time: 2 * H2,
        ..opts()
    };
    let (head, stats) = Head::open(dir.path(), truncated.clone()).unwrap();
    assert!(stats.snapshot.is_some());
    assert_eq!(all_samples(&head), want);
    drop(head);
    // And once more after a crash (the snapshot is used once).
    let (head, _) = Head::open(dir.path(), truncated).unwrap();
    assert_eq!(all_samples(&head), want);
    assert!(
        names_in(&dir.path().join("wal"))
            .iter()
            .filter(|n| n.starts_with("checkpoint."))
            .count()
            == 1
    );
}

#[test]
fn truncating_everything_leaves_an_empty_head_that_still_takes_appends() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = Head::open(dir.path(), opts()).unwrap();
    fill(&head, 0, 300);
    let stats = head.truncate(i64::MAX).unwrap();
    assert_eq!(stats.series_removed, 15);
    assert!(all_samples(&head).is_empty());
    assert_eq!(head.stats().min_time, None);
    fill(&head, 300, 10);
    assert_eq!(all_samples(&head).len(), 10);
    drop(head);
    let (head, _) = Head::open(dir.path(), opts()).unwrap();
    let got = all_samples(&head);
    assert_eq!(got.len(), 10);
    assert!(got.iter().all(|(_, s)| s.len() == 10));
}

/// Open descriptors and memory maps of this process on files under `dir` that were deleted (Linux shows them as
/// `<path> (deleted)`): space the file system cannot give back yet.
#[cfg(target_os = "linux")]
fn deleted_but_held(dir: &std::path::Path) -> Vec<String> {
    let dir = dir.to_string_lossy().into_owned();
    let mut held: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|p| p.to_string_lossy().into_owned())
        .filter(|p| p.starts_with(&dir) && p.ends_with("(deleted)"))
        .collect();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    held.extend(
        maps.lines()
            .filter(|l| l.contains(&dir) && l.ends_with("(deleted)"))
            .map(str::to_owned),
    );
    held
}

/// Truncation deletes WAL segments and `chunks_head/` files, and nothing keeps them open or mapped: their
/// space is free at once (the WAL's closer thread closes cut segments in the background, so the check waits
/// for it, boundedly).
#[cfg(target_os = "linux")]
#[test]
fn truncation_releases_the_files_it_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = Head::open(dir.path(), opts()).unwrap();
    fill(&head, 0, 1500);
    // Read every chunk once, so the chunks_head files are mapped.
    assert!(!all_samples(&head).is_empty());
    let stats = head.truncate(H2).unwrap();
    assert!(stats.segments_deleted > 1 && stats.chunk_files_deleted > 0, "{stats:?}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut held = deleted_but_held(dir.path());
    while !held.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        held = deleted_but_held(dir.path());
    }
    assert!(held.is_empty(), "deleted files still held after truncation: {held:#?}");
    head.close().unwrap();
}
