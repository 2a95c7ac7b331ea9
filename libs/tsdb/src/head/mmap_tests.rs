//! Head restarts with `chunks_head/`: replay skips what the files hold, and damaged files fall back to the WAL.

use heddle_model::{LabelRef, Sample};

use super::test_support::{all_samples, append_each};
use super::*;

fn fill(head: &Head, series: usize, samples: i64) {
    for round in 0..samples {
        let names: Vec<String> = (0..series).map(|i| format!("s{i}")).collect();
        let labels: Vec<[LabelRef<'_>; 1]> = names
            .iter()
            .map(|n| {
                [LabelRef {
                    name: "__name__",
                    value: n,
                }]
            })
            .collect();
        let samples: Vec<[Sample; 1]> = (0..series)
            .map(|i| [Sample::new(round * 15_000, (round * 7 + i as i64) as f64)])
            .collect();
        append_each(head, &labels, &samples);
    }
}

#[test]
fn restart_reads_chunks_head_and_replays_only_newer_wal_samples() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = Head::open(dir.path(), HeadOptions::default()).unwrap();
    fill(&head, 20, 500);
    let want = all_samples(&head);
    head.close().unwrap();
    drop(head);
    assert!(dir.path().join("chunks_head/000001").exists());

    let (head, stats) = Head::open(dir.path(), HeadOptions::default()).unwrap();
    // 500 samples at 15 s: the first 2 h range holds 4 chunks of 120 (in files); 20 are in the open chunk.
    assert_eq!(stats.mmapped_chunks, 80, "{stats:?}");
    assert_eq!(stats.samples_in_mmapped_chunks, 20 * 480, "{stats:?}");
    assert_eq!(stats.samples, 20 * 20, "{stats:?}");
    assert_eq!(all_samples(&head), want);
    // Appends continue after the newest sample, and are judged against the one in the files.
    let out = head
        .append(&[AppendSeries {
            labels: &[LabelRef {
                name: "__name__",
                value: "s0",
            }],
            samples: &[Sample::new(499 * 15_000, 499.0 * 7.0), Sample::new(1, 0.0)],
            created: None,
            histograms: &[],
        }])
        .unwrap();
    assert_eq!((out.samples_deduplicated, out.errors.len()), (1, 1));
}

#[test]
fn damaged_chunks_head_falls_back_to_the_wal_and_serves_no_corrupt_sample() {
    for (name, damage) in [
        ("flipped byte in the first chunk", 0usize),
        ("file cut in the middle", 1),
        ("file cut to a torn header", 2),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (head, _) = Head::open(dir.path(), HeadOptions::default()).unwrap();
        fill(&head, 10, 400);
        let want = all_samples(&head);
        head.close().unwrap();
        drop(head);
        let p = dir.path().join("chunks_head/000001");
        let mut bytes = std::fs::read(&p).unwrap();
        match damage {
            0 => bytes[40] ^= 0x10,
            1 => bytes.truncate(bytes.len() / 2),
            _ => bytes.truncate(5),
        }
        std::fs::write(&p, &bytes).unwrap();

        let (head, stats) = Head::open(dir.path(), HeadOptions::default()).unwrap();
        let c = stats
            .chunks_head_repaired
            .clone()
            .unwrap_or_else(|| panic!("{name}: not repaired"));
        assert_eq!(c.file, 1, "{name}");
        assert_eq!(all_samples(&head), want, "{name}: every sample is back, from the wal");
        assert_eq!(
            stats.samples + stats.samples_in_mmapped_chunks,
            10 * 400,
            "{name}: {stats:?}"
        );
    }
}
