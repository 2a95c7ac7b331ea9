//! Startup on several threads: a snapshot load and a WAL replay with any number of workers leave exactly the
//! head a single-threaded one leaves.

use std::path::Path;
use std::sync::Arc;

use heddle_model::{LabelRef, MatchType, Matcher, Sample};

use super::test_support::{all_samples, append_each, copy_dir};
use super::*;
use crate::file::StdFiles;

/// Small segments and chunks, so records span segments and many chunks go to `chunks_head/`.
fn opts() -> HeadOptions {
    HeadOptions {
        wal_segment_size: 64 * 1024,
        chunk_target_samples: 8,
        ..HeadOptions::default()
    }
}

/// Label values of series `i`: shared ones (job, zone), unique ones (instance) and a sometimes empty one.
fn values(i: usize) -> [String; 4] {
    [
        format!("inst-{i}"),
        format!("job-{}", i % 7),
        if i.is_multiple_of(5) {
            String::new()
        } else {
            format!("v{}", i % 3)
        },
        format!("zone-{}", i % 3),
    ]
}

/// The labels of a series with label values `v` (an empty `opt` drops that label when appended).
fn labels_of(v: &[String; 4]) -> [LabelRef<'_>; 5] {
    [
        ("__name__", "m"),
        ("instance", &v[0]),
        ("job", &v[1]),
        ("opt", &v[2]),
        ("zone", &v[3]),
    ]
    .map(|(name, value)| LabelRef { name, value })
}

/// Appends `rounds` rounds to `series` series; each round also retries the previous sample of some series
/// (a duplicate) and sends an older one (rejected), so replay has to judge like appends did.
fn fill(head: &Head, series: usize, rounds: i64) {
    let vals: Vec<[String; 4]> = (0..series).map(values).collect();
    for round in 0..rounds {
        let labels: Vec<[LabelRef<'_>; 5]> = vals.iter().map(labels_of).collect();
        let samples: Vec<Vec<Sample>> = (0..series)
            .map(|i| {
                let t = round * 15_000 + (i as i64 % 4);
                let mut s = vec![Sample::new(t, (round * 31 + i as i64) as f64 / 3.0)];
                if i.is_multiple_of(11) && round > 0 {
                    s.insert(0, Sample::new(t - 30_000, 1.0));
                }
                s
            })
            .collect();
        append_each(head, &labels, &samples);
    }
}

/// All samples, label names, values of `opt`, a selection's size and the counters.
type Observed = (
    Vec<(String, Vec<(i64, u64)>)>,
    Vec<String>,
    Vec<String>,
    usize,
    HeadStats,
);

/// Everything a query can see of a head.
fn observe(head: &Head) -> Observed {
    let re = Matcher::new(MatchType::RegexMatch, "job", "job-[12]").unwrap();
    let selected = head
        .select(i64::MIN, i64::MAX, &[re, Matcher::equal("zone", "zone-1")])
        .len();
    (
        all_samples(head),
        head.label_names(i64::MIN, i64::MAX, &[]),
        head.label_values("opt", i64::MIN, i64::MAX, &[]),
        selected,
        head.stats(),
    )
}

/// Opens a copy of `dir` with each worker count and checks that all of them agree with one worker, and that
/// the next append is judged the same way (the newest sample of each series was restored alike).
fn check_worker_counts(dir: &Path, name: &str) {
    let mut first = None;
    for workers in [1, 2, 3, 5] {
        let copy = tempfile::tempdir().unwrap();
        copy_dir(dir, copy.path());
        let (head, stats) = Head::open_with_workers(copy.path(), opts(), Arc::new(StdFiles), workers).unwrap();
        let seen = observe(&head);
        let next = {
            let l = values(3);
            let labels = labels_of(&l);
            let newest = seen
                .0
                .iter()
                .find(|(k, _)| k.contains("inst-3\""))
                .unwrap()
                .1
                .last()
                .copied()
                .unwrap();
            let samples = [
                Sample::new(newest.0, f64::from_bits(newest.1)),
                Sample::new(newest.0 - 1, 0.0),
                Sample::new(newest.0 + 1, 0.0),
            ];
            head.append(&[AppendSeries {
                labels: &labels,
                samples: &samples,
                created: None,
                histograms: &[],
            }])
            .unwrap()
        };
        assert!(!seen.0.is_empty(), "{name}: the head has series");
        match &first {
            None => first = Some((stats, seen, next)),
            Some((s1, seen1, next1)) => {
                assert_eq!(&stats, s1, "{name}: replay stats with {workers} workers");
                assert!(seen == *seen1, "{name}: head contents differ with {workers} workers");
                assert_eq!(&next, next1, "{name}: next append with {workers} workers");
            }
        }
    }
}

#[test]
fn wal_replay_with_several_workers_matches_one() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = Head::open(dir.path(), opts()).unwrap();
    fill(&head, 700, 30);
    head.sync().unwrap();
    // A crash: no close, no snapshot.
    drop(head);
    check_worker_counts(dir.path(), "wal replay");
}

#[test]
fn snapshot_load_with_several_workers_matches_one() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = Head::open(dir.path(), opts()).unwrap();
    fill(&head, 700, 30);
    head.close_with_snapshot().unwrap().unwrap();
    drop(head);
    check_worker_counts(dir.path(), "snapshot load");
}

/// Labels `a`, `b`, `c` with the three values.
fn abc(v: &[String; 3]) -> [LabelRef<'_>; 3] {
    [("a", 0), ("b", 1), ("c", 2)].map(|(name, k)| LabelRef { name, value: &v[k] })
}

/// The loader's shortcuts (pre-computed hashes, [`index::LoadCache`]) build the index that one-by-one
/// creation builds, also when cache slots collide and are evicted (more distinct values than slots).
#[test]
fn loaded_index_matches_one_by_one_creation() {
    let vals: Vec<[String; 3]> = (0..9000usize)
        .map(|i| [format!("u{i}"), format!("w{}", i % 5000), format!("x{}", (i * 7) % 13)])
        .collect();
    let mut plain = index::HeadIndex::new();
    let mut loaded = index::HeadIndex::new();
    let mut cache = index::LoadCache::default();
    let hasher = loaded.symbols.hasher().clone();
    let mut hashes = Vec::new();
    for (i, v) in vals.iter().enumerate() {
        let labels = abc(v);
        let h = index::hash_labels(&labels);
        let r = Some(i as u64 * 3 + 1);
        assert!(matches!(
            plain.get_or_create(h, &labels, r, true),
            index::Created::New(_)
        ));
        hashes.clear();
        index::symbol_hashes(&hasher, &labels, &mut hashes);
        assert!(matches!(
            loaded.get_or_create_loaded(h, &labels, r, true, Some((&hashes, &mut cache))),
            index::Created::New(_)
        ));
    }
    assert_eq!(plain.postings.all().to_vec(), loaded.postings.all().to_vec());
    for v in &vals {
        for (n, val) in ["a", "b", "c"].iter().zip(v) {
            let get = |ix: &index::HeadIndex| {
                let (Some(n), Some(v)) = (ix.symbols.id(n), ix.symbols.id(val)) else {
                    return Vec::new();
                };
                ix.postings.get(n, v).to_vec()
            };
            assert_eq!(get(&plain), get(&loaded), "postings of {n}={val}");
        }
        let labels = abc(v);
        let h = index::hash_labels(&labels);
        let found = |ix: &index::HeadIndex| ix.find(h, &labels).map(|s| (s.series_ref, ix.labels_of(s)));
        assert_eq!(found(&plain), found(&loaded), "series {}", v[0]);
    }
}
