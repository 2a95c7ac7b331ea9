//! Compaction: which ranges are due, blocks that hold exactly the head's samples of their range, the head
//! truncated after them, and the minimum valid time that keeps compacted ranges closed (across restarts too).

use heddle_model::{LabelRef, Sample};

use super::test_support::{all_samples, samples_of};
use super::*;
use crate::block::{BlockReader, list_local_blocks};

const H2: i64 = 7_200_000;
const STEP: i64 = 60_000;

fn opts() -> HeadOptions {
    HeadOptions {
        wal_segment_size: 2 * heddle_wal::PAGE_SIZE,
        ..HeadOptions::default()
    }
}

/// Appends one sample a minute for series `a` and `b` at `[from, to)` (ms), value = t / 1000 (+ 0.5 for `b`).
fn fill(head: &Head, from: i64, to: i64) -> AppendOutcome {
    let la = [LabelRef {
        name: "__name__",
        value: "a",
    }];
    let lb = [LabelRef {
        name: "__name__",
        value: "b",
    }];
    let mut total = AppendOutcome::default();
    let mut t = from;
    while t < to {
        let sa = [Sample::new(t, (t / 1000) as f64)];
        let sb = [Sample::new(t, (t / 1000) as f64 + 0.5)];
        let out = head
            .append(&[
                AppendSeries {
                    labels: &la,
                    samples: &sa,
                    created: None,
                    histograms: &[],
                },
                AppendSeries {
                    labels: &lb,
                    samples: &sb,
                    created: None,
                    histograms: &[],
                },
            ])
            .unwrap();
        total.samples_appended += out.samples_appended;
        total.errors.extend(out.errors);
        t += STEP;
    }
    total
}

/// Every sample of a block, as `all_samples` lists a head's.
fn block_samples(dir: &std::path::Path) -> Vec<(String, Vec<(i64, u64)>)> {
    let b = BlockReader::open_dir(dir).unwrap();
    let all = heddle_model::Matcher::new(heddle_model::MatchType::RegexMatch, "__name__", ".+").unwrap();
    samples_of(b.select(i64::MIN, i64::MAX, &[all]).unwrap())
}

/// `samples` restricted to `[mint, maxt)`.
fn in_range(samples: &[(String, Vec<(i64, u64)>)], mint: i64, maxt: i64) -> Vec<(String, Vec<(i64, u64)>)> {
    samples
        .iter()
        .map(|(l, v)| {
            (
                l.clone(),
                v.iter()
                    .copied()
                    .filter(|(t, _)| *t >= mint && *t < maxt)
                    .collect::<Vec<_>>(),
            )
        })
        .filter(|(_, v)| !v.is_empty())
        .collect()
}

#[test]
fn due_range_becomes_a_block_and_leaves_the_head() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = Head::open(dir.path(), opts()).unwrap();
    fill(&head, 0, 3 * H2 / 2 + STEP);
    assert_eq!(
        head.compactable_range(H2),
        None,
        "exactly 1.5 ranges is not more than 1.5"
    );
    fill(&head, 3 * H2 / 2 + STEP, 3 * H2 / 2 + 2 * STEP);
    assert_eq!(head.compactable_range(H2), Some((0, H2)));

    let before = all_samples(&head);
    let out = head.compact(dir.path(), H2, Some("team-a"), false).unwrap();
    assert_eq!(out.blocks.len(), 1, "{out:?}");
    let meta = &out.blocks[0];
    assert_eq!((meta.min_time, meta.max_time), (0, H2));
    assert_eq!(meta.tenant(), Some("team-a"));
    assert_eq!(meta.stats.num_series, 2);
    assert_eq!(meta.stats.num_samples, 2 * (H2 / STEP) as u64);
    assert_eq!(
        block_samples(&dir.path().join(&meta.ulid)),
        in_range(&before, 0, H2),
        "the block holds exactly the range's samples"
    );
    assert_eq!(
        all_samples(&head),
        in_range(&before, H2, i64::MAX),
        "the head keeps only what is after the block"
    );
    assert_eq!(head.min_valid_time(), H2);
    assert!(
        out.truncate.is_some_and(|t| t.checkpoint.is_some()),
        "the WAL was checkpointed"
    );
    assert_eq!(head.compactable_range(H2), None, "nothing else is due");
}

/// `compact_then` hands over the blocks while the head still holds their samples, so a reader of the head and
/// then of the blocks published finds every sample at every moment; when the hand-over fails, the head keeps
/// them.
#[test]
fn blocks_are_published_before_the_head_lets_go_of_their_samples() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = Head::open(dir.path(), opts()).unwrap();
    fill(&head, 0, H2 + H2 / 2);
    let before = all_samples(&head);

    let err = head
        .compact_then(dir.path(), H2, None, true, |_| Err(TsdbError::Closed))
        .unwrap_err();
    assert!(matches!(err, TsdbError::Closed), "{err:?}");
    assert_eq!(all_samples(&head), before, "a failed hand-over truncates nothing");

    // Past the failed turn's minimum valid time, a forced compaction of what is left.
    fill(&head, 2 * H2, 2 * H2 + 10 * STEP);
    let before = all_samples(&head);
    let mut seen = None;
    let out = head
        .compact_then(dir.path(), H2, None, true, |written| {
            seen = Some((
                written.iter().map(|m| m.ulid.clone()).collect::<Vec<_>>(),
                all_samples(&head),
            ));
            Ok(())
        })
        .unwrap();
    let (published, head_then) = seen.expect("the blocks were handed over");
    assert_eq!(
        published,
        out.blocks.iter().map(|m| m.ulid.clone()).collect::<Vec<_>>(),
        "every block written is handed over"
    );
    assert_eq!(head_then, before, "the head still held every sample when they were");
    assert!(all_samples(&head).is_empty(), "and lets go of them after");
}

#[test]
fn forced_compaction_empties_the_head_and_refuses_older_samples() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = Head::open(dir.path(), opts()).unwrap();
    // From the middle of one range to the middle of the one after next: three blocks.
    fill(&head, H2 / 2, 2 * H2 + H2 / 2);
    let before = all_samples(&head);
    let newest = head.stats().max_time.unwrap();
    let out = head.compact(dir.path(), H2, None, true).unwrap();
    let ranges: Vec<(i64, i64)> = out.blocks.iter().map(|m| (m.min_time, m.max_time)).collect();
    assert_eq!(ranges, vec![(H2 / 2, H2), (H2, 2 * H2), (2 * H2, newest + 1)]);
    let mut from_blocks: Vec<(String, Vec<(i64, u64)>)> = Vec::new();
    for m in &out.blocks {
        for (l, v) in block_samples(&dir.path().join(&m.ulid)) {
            match from_blocks.iter_mut().find(|(x, _)| *x == l) {
                Some((_, all)) => all.extend(v),
                None => from_blocks.push((l, v)),
            }
        }
    }
    assert_eq!(from_blocks, before, "the blocks together hold every sample once");
    assert!(all_samples(&head).is_empty(), "the head is empty");
    assert_eq!(head.stats().series, 0);

    // An older sample is out of bounds now; a newer one is fine.
    let late = fill(&head, newest, newest + 1);
    assert_eq!(late.samples_appended, 0);
    assert_eq!(late.errors.len(), 2);
    assert_eq!(late.errors[0].reason, AppendErrorKind::OutOfBounds);
    assert_eq!(late.errors[0].last_accepted_t, newest + 1);
    assert!(late.errors[0].to_string().contains("err-heddle-sample-out-of-bounds"));
    assert_eq!(fill(&head, newest + STEP, newest + 2 * STEP).samples_appended, 2);
    assert_eq!(
        head.compact(dir.path(), H2, None, false).unwrap().blocks.len(),
        0,
        "a short head has nothing due"
    );
}

/// A crash after the block is written but before the head is truncated: the next start takes the block's end
/// as minimum valid time, so the WAL does not bring the block's samples back into the head.
#[test]
fn a_block_written_before_a_crash_is_not_loaded_twice() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = Head::open(dir.path(), opts()).unwrap();
    fill(&head, 0, 2 * H2);
    let before = all_samples(&head);
    head.raise_min_valid_time(H2);
    let meta = head.write_block(dir.path(), 0, H2, None).unwrap().unwrap();
    drop(head); // no truncation, no snapshot: as after kill -9

    let blocks = list_local_blocks(dir.path()).unwrap();
    assert_eq!(blocks.len(), 1);
    let newest_end = blocks.iter().map(|(_, m)| m.max_time).max().unwrap();
    let (head, stats) = Head::open(
        dir.path(),
        HeadOptions {
            min_valid_time: newest_end,
            ..opts()
        },
    )
    .unwrap();
    assert!(stats.samples_before_min_valid_time > 0, "{stats:?}");
    assert_eq!(all_samples(&head), in_range(&before, H2, i64::MAX));
    assert_eq!(block_samples(&dir.path().join(&meta.ulid)), in_range(&before, 0, H2));
    assert_eq!(head.min_valid_time(), H2);
}

#[test]
fn a_range_without_samples_writes_no_block() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = Head::open(dir.path(), opts()).unwrap();
    fill(&head, 5 * H2, 5 * H2 + STEP);
    assert!(head.write_block(dir.path(), 0, H2, None).unwrap().is_none());
    assert!(list_local_blocks(dir.path()).unwrap().is_empty());
}

/// Appends one sample to a series named `name`.
fn one(head: &Head, name: &str, t: i64) -> AppendOutcome {
    let l = [LabelRef {
        name: "__name__",
        value: name,
    }];
    let s = [Sample::new(t, 1.0)];
    head.append(&[AppendSeries {
        labels: &l,
        samples: &s,
        created: None,
        histograms: &[],
    }])
    .unwrap()
}

/// Samples at the ends of the time line and samples now: compaction visits the ranges that hold samples and
/// jumps over the ~10^12 empty ranges in between, due or forced, and every sample ends up in a block (or, at
/// `i64::MAX`, which no block's exclusive end can cover, stays in the head).
#[test]
fn compaction_skips_empty_ranges_between_distant_samples() {
    let now = 1_700_000_000_000 - 1_700_000_000_000 % H2;
    for (name, force) in [("due", false), ("forced", true)] {
        let dir = tempfile::tempdir().unwrap();
        let (head, _) = Head::open(&dir.path().join("head"), opts()).unwrap();
        let blocks_dir = dir.path().join("blocks");
        std::fs::create_dir_all(&blocks_dir).unwrap();
        assert!(one(&head, "ancient", i64::MIN).errors.is_empty(), "{name}");
        assert!(one(&head, "ancient2", i64::MIN + 1).errors.is_empty(), "{name}");
        assert!(fill(&head, now, now + 3 * H2).errors.is_empty(), "{name}");
        assert!(one(&head, "last", i64::MAX).errors.is_empty(), "{name}");
        let before = all_samples(&head);

        let stats = head.compact(&blocks_dir, H2, Some("t"), force).unwrap();
        // One block for the first range (both ancient samples), one per range of `now`'s three: four turns.
        let ranges: Vec<(i64, i64)> = stats.blocks.iter().map(|b| (b.min_time, b.max_time)).collect();
        let expected = vec![
            (i64::MIN, i64::MIN + H2 - i64::MIN.rem_euclid(H2)),
            (now, now + H2),
            (now + H2, now + 2 * H2),
            (now + 2 * H2, now + 3 * H2),
        ];
        // Forced ranges end at their block range's end too here: the newest sample (at i64::MAX) is later.
        assert_eq!(ranges, expected, "{name}");

        // Every sample but the one at i64::MAX is in exactly one block; the head keeps that one.
        let mut from_blocks: std::collections::BTreeMap<String, Vec<(i64, u64)>> = Default::default();
        for meta in &stats.blocks {
            for (series, samples) in block_samples(&blocks_dir.join(&meta.ulid)) {
                from_blocks.entry(series).or_default().extend(samples);
            }
        }
        let expected: Vec<(String, Vec<(i64, u64)>)> =
            before.iter().filter(|(s, _)| !s.contains("last")).cloned().collect();
        assert_eq!(from_blocks.into_iter().collect::<Vec<_>>(), expected, "{name}");
        let left = all_samples(&head);
        assert_eq!(left.len(), 1, "{name}: {left:?}");
        assert!(
            left[0].0.contains("last") && left[0].1 == vec![(i64::MAX, 1f64.to_bits())],
            "{name}"
        );

        // A second compaction finds nothing to do and ends at once.
        let again = head.compact(&blocks_dir, H2, Some("t"), force).unwrap();
        assert!(again.blocks.is_empty(), "{name}: {:?}", again.blocks);
    }
}

/// The oldest sample at or after a time comes from the chunk that straddles it, not the chunk's start.
#[test]
fn oldest_sample_at_or_after_reads_into_a_straddling_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = Head::open(dir.path(), opts()).unwrap();
    fill(&head, 0, 10 * STEP);
    assert_eq!(head.oldest_sample_at_or_after(i64::MIN), Some(0));
    assert_eq!(head.oldest_sample_at_or_after(STEP + 1), Some(2 * STEP));
    assert_eq!(head.oldest_sample_at_or_after(9 * STEP), Some(9 * STEP));
    assert_eq!(head.oldest_sample_at_or_after(9 * STEP + 1), None);
}
