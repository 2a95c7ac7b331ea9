use std::path::Path;
use std::sync::Arc;

use heddle_model::{LabelRef, Labels, MatchType, Matcher, STALE_NAN_BITS, Sample};

use super::*;
use crate::chunkenc::decode_xor;

fn lbls<'a>(pairs: &[(&'a str, &'a str)]) -> Vec<LabelRef<'a>> {
    pairs.iter().map(|&(name, value)| LabelRef { name, value }).collect()
}

fn samples(ts: &[(i64, f64)]) -> Vec<Sample> {
    ts.iter().map(|&(t, v)| Sample::new(t, v)).collect()
}

fn open(dir: &Path) -> (Head, ReplayStats) {
    Head::open(dir, HeadOptions::default()).unwrap()
}

fn push(head: &Head, labels: &[(&str, &str)], ts: &[(i64, f64)]) -> AppendOutcome {
    let l = lbls(labels);
    let s = samples(ts);
    head.append(&[AppendSeries {
        labels: &l,
        samples: &s,
        created: None,
        histograms: &[],
    }])
    .unwrap()
}

/// Every series with every sample, as (labels, [(t, value bits)]).
fn dump(head: &Head) -> Vec<(String, Vec<(i64, u64)>)> {
    head.select(i64::MIN, i64::MAX, &[])
        .into_iter()
        .map(|s| {
            let samples = s
                .chunks
                .iter()
                .flat_map(|c| decode_xor(&c.data).unwrap())
                .map(|x| (x.t, x.v.to_bits()))
                .collect();
            (s.labels.to_string(), samples)
        })
        .collect()
}

fn m(kind: MatchType, name: &str, value: &str) -> Matcher {
    Matcher::new(kind, name, value).unwrap()
}

fn names(head: &Head, matchers: &[Matcher]) -> Vec<String> {
    head.series(i64::MIN, i64::MAX, matchers)
        .iter()
        .map(Labels::to_string)
        .collect()
}

fn seed(head: &Head) {
    push(
        head,
        &[("__name__", "up"), ("job", "api"), ("zone", "a")],
        &[(1000, 1.0)],
    );
    push(head, &[("__name__", "up"), ("job", "db")], &[(1000, 0.0)]);
    push(
        head,
        &[("__name__", "up"), ("job", "web"), ("zone", "b")],
        &[(2000, 1.0)],
    );
    push(head, &[("__name__", "cpu"), ("job", "api")], &[(3000, 0.5)]);
}

#[test]
fn matchers_follow_prometheus_semantics() {
    use MatchType::*;
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = open(dir.path());
    seed(&head);
    let api = r#"{__name__="up", job="api", zone="a"}"#;
    let db = r#"{__name__="up", job="db"}"#;
    let web = r#"{__name__="up", job="web", zone="b"}"#;
    let cpu = r#"{__name__="cpu", job="api"}"#;
    let cases: Vec<(&str, Vec<Matcher>, Vec<&str>)> = vec![
        ("no matcher selects all", vec![], vec![cpu, api, db, web]),
        ("equal", vec![m(Equal, "job", "api")], vec![cpu, api]),
        (
            "two equals intersect",
            vec![m(Equal, "__name__", "up"), m(Equal, "job", "api")],
            vec![api],
        ),
        ("equal unknown value", vec![m(Equal, "job", "nope")], vec![]),
        ("equal unknown name", vec![m(Equal, "nope", "x")], vec![]),
        (
            "not equal",
            vec![m(Equal, "__name__", "up"), m(NotEqual, "job", "api")],
            vec![db, web],
        ),
        (
            "not equal keeps absent",
            vec![m(NotEqual, "zone", "a")],
            vec![cpu, db, web],
        ),
        ("regex", vec![m(RegexMatch, "job", "a.*|w.*")], vec![cpu, api, web]),
        ("regex is anchored", vec![m(RegexMatch, "job", "ap")], vec![]),
        (
            "negative regex",
            vec![m(Equal, "__name__", "up"), m(RegexNoMatch, "job", "a.*")],
            vec![db, web],
        ),
        (
            "absent via equal empty",
            vec![m(Equal, "__name__", "up"), m(Equal, "zone", "")],
            vec![db],
        ),
        (
            "present via not equal empty",
            vec![m(NotEqual, "zone", "")],
            vec![api, web],
        ),
        (
            "present via regex .+",
            vec![m(RegexMatch, "zone", ".+")],
            vec![api, web],
        ),
        (
            "regex matching empty includes absent",
            vec![m(RegexMatch, "zone", "a|")],
            vec![cpu, api, db],
        ),
        (
            "absent via negative regex .+",
            vec![m(RegexNoMatch, "zone", ".+")],
            vec![cpu, db],
        ),
        (
            "unknown label absent everywhere",
            vec![m(Equal, "nope", "")],
            vec![cpu, api, db, web],
        ),
        (
            "only empty-matching matchers",
            vec![m(RegexMatch, "job", ".*"), m(NotEqual, "job", "db")],
            vec![cpu, api, web],
        ),
    ];
    for (name, matchers, want) in cases {
        assert_eq!(names(&head, &matchers), want, "case {name}");
        let selected: Vec<String> = head
            .select(i64::MIN, i64::MAX, &matchers)
            .iter()
            .map(|s| s.labels.to_string())
            .collect();
        assert_eq!(selected, want, "case {name} (select)");
    }
}

#[test]
fn time_ranges_filter_series_chunks_and_labels() {
    use MatchType::*;
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = open(dir.path());
    seed(&head);
    assert_eq!(names(&head, &[m(Equal, "__name__", "up")]).len(), 3);
    let late = head.series(1500, 2500, &[m(Equal, "__name__", "up")]);
    assert_eq!(late.len(), 1);
    assert_eq!(late[0].get("job"), Some("web"));
    assert!(head.select(4000, 5000, &[]).is_empty());

    assert_eq!(
        head.label_names(i64::MIN, i64::MAX, &[]),
        vec!["__name__", "job", "zone"]
    );
    assert_eq!(
        head.label_names(3000, 3000, &[m(Equal, "job", "api")]),
        vec!["__name__", "job"]
    );
    assert!(head.label_names(5000, 6000, &[]).is_empty());
    assert_eq!(head.label_values("job", 0, 10_000, &[]), vec!["api", "db", "web"]);
    assert_eq!(
        head.label_values("job", 0, 10_000, &[m(Equal, "zone", "")]),
        vec!["api", "db"]
    );
    assert_eq!(
        head.label_values("zone", 0, 1500, &[m(Equal, "__name__", "up")]),
        vec!["a"]
    );
    assert!(head.label_values("nope", 0, 10_000, &[]).is_empty());

    let stats = head.stats();
    assert_eq!(
        stats,
        HeadStats {
            series: 4,
            samples_appended: 4,
            min_time: Some(1000),
            max_time: Some(3000)
        }
    );
}

#[test]
fn out_of_order_and_duplicates_are_judged_per_sample() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = open(dir.path());
    let series = [("__name__", "m")];
    let out = push(&head, &series, &[(10, 1.0), (20, 2.0)]);
    assert_eq!((out.samples_appended, out.series_created), (2, 1));
    assert!(out.errors.is_empty());

    // 15 is out of order, 20 with another value a duplicate timestamp, 20 with the same value a silent
    // repeat; 30 after the rejected ones is still appended.
    let out = push(&head, &series, &[(15, 9.0), (20, 2.0), (20, 3.0), (30, 4.0)]);
    assert_eq!(out.samples_appended, 1);
    assert_eq!(out.samples_deduplicated, 1);
    assert_eq!(out.series_created, 0);
    assert_eq!(
        out.errors,
        vec![SeriesAppendError {
            index: 0,
            reason: AppendErrorKind::OutOfOrder,
            samples_rejected: 2,
            first_rejected_t: 15,
            last_accepted_t: 20,
            message: None,
        }]
    );
    assert_eq!(out.errors[0].reason.id(), "err-heddle-sample-out-of-order");
    assert!(out.errors[0].to_string().contains("ts=15"), "{}", out.errors[0]);

    let out = push(&head, &series, &[(30, 5.0)]);
    assert_eq!(out.errors[0].reason, AppendErrorKind::DuplicateTimestamp);
    assert_eq!(out.errors[0].reason.id(), "err-heddle-sample-duplicate-timestamp");

    // NaN repeats are judged by bits: the same stale marker twice is a repeat, another NaN is not.
    let stale = f64::from_bits(STALE_NAN_BITS);
    assert_eq!(
        push(&head, &series, &[(40, stale), (40, stale)]).samples_deduplicated,
        1
    );
    let out = push(&head, &series, &[(40, f64::NAN)]);
    assert_eq!(out.errors[0].reason, AppendErrorKind::DuplicateTimestamp);

    let want: Vec<(i64, u64)> = [(10, 1.0), (20, 2.0), (30, 4.0), (40, stale)]
        .iter()
        .map(|&(t, v): &(i64, f64)| (t, v.to_bits()))
        .collect();
    assert_eq!(dump(&head), vec![(r#"{__name__="m"}"#.to_owned(), want)]);
}

#[test]
fn a_series_repeated_in_a_batch_sees_its_earlier_samples() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = open(dir.path());
    let l = lbls(&[("__name__", "m")]);
    let a = samples(&[(1, 1.0), (2, 2.0)]);
    let b = samples(&[(2, 2.5), (3, 3.0)]);
    let out = head
        .append(&[
            AppendSeries {
                labels: &l,
                samples: &a,
                created: None,
                histograms: &[],
            },
            AppendSeries {
                labels: &l,
                samples: &b,
                created: None,
                histograms: &[],
            },
        ])
        .unwrap();
    assert_eq!((out.samples_appended, out.series_created), (3, 1));
    assert_eq!(out.errors.len(), 1);
    assert_eq!(
        (out.errors[0].index, out.errors[0].reason),
        (1, AppendErrorKind::DuplicateTimestamp)
    );
}

#[test]
fn invalid_label_sets_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = open(dir.path());
    for (name, labels) in [
        ("empty", vec![]),
        ("only empty values", vec![("a", "")]),
        ("unsorted", vec![("b", "1"), ("a", "1")]),
        ("repeated name", vec![("a", "1"), ("a", "2")]),
    ] {
        let out = push(&head, &labels, &[(1, 1.0)]);
        assert_eq!(out.samples_appended, 0, "case {name}");
        assert_eq!(out.errors[0].reason, AppendErrorKind::InvalidLabels, "case {name}");
    }
    assert_eq!(head.stats().series, 0);
    // Empty values are dropped: {a="1", b=""} is {a="1"}.
    push(&head, &[("a", "1"), ("b", "")], &[(1, 1.0)]);
    assert_eq!(push(&head, &[("a", "1")], &[(1, 1.0)]).samples_deduplicated, 1);
    assert_eq!(head.stats().series, 1);
}

#[test]
fn chunks_are_cut_and_all_returned() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = open(dir.path());
    let ts: Vec<(i64, f64)> = (0..300).map(|i| (i * 15_000, i as f64)).collect();
    push(&head, &[("__name__", "m")], &ts);
    let all = head.select(i64::MIN, i64::MAX, &[]);
    let ranges: Vec<(i64, i64)> = all[0].chunks.iter().map(|c| (c.min_time, c.max_time)).collect();
    assert_eq!(
        ranges,
        vec![
            (0, 119 * 15_000),
            (120 * 15_000, 239 * 15_000),
            (240 * 15_000, 299 * 15_000)
        ]
    );
    // Only overlapping chunks come back.
    let mid = head.select(130 * 15_000, 140 * 15_000, &[]);
    assert_eq!(mid[0].chunks.len(), 1);
    assert_eq!(mid[0].chunks[0].min_time, 120 * 15_000);
    assert_eq!(dump(&head)[0].1.len(), 300);
}

#[test]
fn reopening_restores_everything_with_or_without_close() {
    for close in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let before = {
            let (head, _) = open(dir.path());
            seed(&head);
            let ts: Vec<(i64, f64)> = (0..250).map(|i| (10_000 + i * 1000, (i % 7) as f64)).collect();
            push(&head, &[("__name__", "long")], &ts);
            push(
                &head,
                &[("__name__", "up"), ("job", "db")],
                &[(5000, f64::from_bits(STALE_NAN_BITS))],
            );
            if close {
                head.close().unwrap();
                assert!(matches!(head.append(&[]), Err(TsdbError::Closed)));
            }
            (dump(&head), head.stats())
            // Dropped here without close when `close` is false: like a killed process, only what
            // `wal.log` handed to the OS survives, which is everything.
        };
        let (head, stats) = open(dir.path());
        assert_eq!(stats.series, 5, "close {close}");
        // Chunks cut before a close are in chunks_head; after a kill the unflushed ones come from the WAL.
        assert_eq!(stats.samples + stats.samples_in_mmapped_chunks, 255, "close {close}");
        if close {
            assert!(stats.samples_in_mmapped_chunks >= 120, "close {close}: {stats:?}");
        }
        assert_eq!(stats.unknown_ref_samples, 0, "close {close}");
        assert_eq!(stats.wal_repaired, None, "close {close}");
        assert_eq!(dump(&head), before.0, "close {close}");
        let (now, then) = (head.stats(), before.1);
        assert_eq!(
            (now.series, now.min_time, now.max_time),
            (then.series, then.min_time, then.max_time),
            "close {close}"
        );

        // Refs continue after the replayed ones: a new series must not take an old ref.
        let next = read(&head.index).next_ref();
        assert_eq!(next, 6, "close {close}");
        push(&head, &[("__name__", "new")], &[(1, 1.0)]);
        let after = dump(&head);
        drop(head);
        let (head, _) = open(dir.path());
        assert_eq!(dump(&head), after, "close {close}: second reopen");
    }
}

/// The newest WAL segment file with data.
fn last_segment(dir: &Path) -> std::path::PathBuf {
    let wal = dir.join(WAL_DIR);
    let mut segs: Vec<_> = std::fs::read_dir(&wal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| std::fs::metadata(p).unwrap().len() > 0)
        .collect();
    segs.sort();
    segs.pop().unwrap()
}

#[test]
fn corrupt_or_torn_wal_tail_keeps_the_good_prefix() {
    for (name, damage) in [("flipped byte", 0usize), ("torn write", 1)] {
        let dir = tempfile::tempdir().unwrap();
        let good = {
            let (head, _) = open(dir.path());
            push(&head, &[("__name__", "a")], &[(1, 1.0), (2, 2.0)]);
            let good = dump(&head);
            push(&head, &[("__name__", "a")], &[(3, 3.0)]);
            push(&head, &[("__name__", "b")], &[(3, 3.0)]);
            good
        };
        let seg = last_segment(dir.path());
        let mut bytes = std::fs::read(&seg).unwrap();
        // The last record is `b`'s samples; damage the series record before it too, for the flip.
        match damage {
            0 => {
                let len = bytes.len();
                bytes[len - 1] ^= 0xff;
            }
            _ => bytes.truncate(bytes.len() - 3),
        }
        std::fs::write(&seg, &bytes).unwrap();
        let (head, stats) = open(dir.path());
        assert!(stats.wal_repaired.is_some(), "case {name}");
        let got = dump(&head);
        // What came before the damaged record is kept: `a` fully (its third sample preceded `b`'s records).
        assert_eq!(got[0].0, good[0].0, "case {name}");
        assert_eq!(got[0].1.len(), 3, "case {name}");
        assert!(
            got.iter().all(|(l, s)| l != r#"{__name__="b"}"# || s.is_empty()),
            "case {name}"
        );
        // The repaired head takes appends, and they survive another restart.
        push(&head, &[("__name__", "c")], &[(9, 9.0)]);
        let after = dump(&head);
        drop(head);
        let (head, stats) = open(dir.path());
        assert_eq!(stats.wal_repaired, None, "case {name}");
        assert_eq!(dump(&head), after, "case {name}");
    }
}

#[test]
fn a_failed_wal_write_stores_nothing_and_is_retried() {
    let dir = tempfile::tempdir().unwrap();
    let opts = HeadOptions {
        wal_segment_size: heddle_wal::PAGE_SIZE,
        ..HeadOptions::default()
    };
    let (head, _) = Head::open(dir.path(), opts.clone()).unwrap();
    let huge = "x".repeat(heddle_wal::PAGE_SIZE);
    let ok = lbls(&[("__name__", "ok")]);
    let bad = lbls(&[("__name__", "bad"), ("big", &huge)]);
    let s = samples(&[(1, 1.0)]);
    let err = head
        .append(&[
            AppendSeries {
                labels: &ok,
                samples: &s,
                created: None,
                histograms: &[],
            },
            AppendSeries {
                labels: &bad,
                samples: &s,
                created: None,
                histograms: &[],
            },
        ])
        .unwrap_err();
    assert!(matches!(err, TsdbError::Wal(_)), "{err}");
    assert!(
        head.select(i64::MIN, i64::MAX, &[]).is_empty(),
        "no sample may be stored"
    );
    assert_eq!(head.stats().samples_appended, 0);
    // `ok` was created but not logged: the next append logs its series record with the samples.
    let out = head
        .append(&[AppendSeries {
            labels: &ok,
            samples: &s,
            created: None,
            histograms: &[],
        }])
        .unwrap();
    assert_eq!((out.samples_appended, out.series_created), (1, 0));
    drop(head);
    let (head, stats) = Head::open(dir.path(), opts).unwrap();
    assert_eq!(stats.unknown_ref_samples, 0);
    assert_eq!(
        dump(&head),
        vec![(r#"{__name__="ok"}"#.to_owned(), vec![(1, 1.0f64.to_bits())])]
    );
}

#[test]
fn many_series_split_into_records_that_fit_small_segments() {
    let dir = tempfile::tempdir().unwrap();
    let opts = HeadOptions {
        wal_segment_size: heddle_wal::PAGE_SIZE,
        ..HeadOptions::default()
    };
    let values: Vec<String> = (0..3000)
        .map(|i| format!("instance-{i:05}-with-a-long-value"))
        .collect();
    let labels: Vec<Vec<LabelRef<'_>>> = values.iter().map(|v| lbls(&[("__name__", "m"), ("i", v)])).collect();
    let s: Vec<Sample> = samples(&[(1, 1.0), (2, 2.0)]);
    let batch: Vec<AppendSeries<'_>> = labels
        .iter()
        .map(|l| AppendSeries {
            labels: l,
            samples: &s,
            created: None,
            histograms: &[],
        })
        .collect();
    let before = {
        let (head, _) = Head::open(dir.path(), opts.clone()).unwrap();
        let out = head.append(&batch).unwrap();
        assert_eq!((out.samples_appended, out.series_created), (6000, 3000));
        dump(&head)
    };
    let (head, stats) = Head::open(dir.path(), opts).unwrap();
    assert!(stats.wal_segments > 1, "records spread over segments: {stats:?}");
    assert_eq!(dump(&head), before);
}

#[test]
fn concurrent_appends_and_queries() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = open(dir.path());
    let head = Arc::new(head);
    let threads = 4;
    let rounds = 200i64;
    let handles: Vec<_> = (0..threads)
        .map(|w| {
            let head = Arc::clone(&head);
            std::thread::spawn(move || {
                let worker = w.to_string();
                for r in 0..rounds {
                    let series: Vec<String> = (0..10).map(|i| i.to_string()).collect();
                    let labels: Vec<Vec<LabelRef<'_>>> = series
                        .iter()
                        .map(|i| lbls(&[("__name__", "m"), ("i", i), ("worker", &worker)]))
                        .collect();
                    let s = samples(&[(r * 10, r as f64)]);
                    let shared = lbls(&[("__name__", "shared")]);
                    let same = samples(&[(1, 1.0)]);
                    let mut batch: Vec<AppendSeries<'_>> = labels
                        .iter()
                        .map(|l| AppendSeries {
                            labels: l,
                            samples: &s,
                            created: None,
                            histograms: &[],
                        })
                        .collect();
                    batch.push(AppendSeries {
                        labels: &shared,
                        samples: &same,
                        created: None,
                        histograms: &[],
                    });
                    let out = head.append(&batch).unwrap();
                    assert!(out.errors.is_empty(), "{:?}", out.errors);
                    // Queries run alongside.
                    let mine = head.select(0, r * 10, &[Matcher::equal("worker", worker.as_str())]);
                    assert_eq!(mine.len(), 10);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let stats = head.stats();
    assert_eq!(stats.series, 41);
    assert_eq!(stats.samples_appended, threads as u64 * rounds as u64 * 10 + 1);
    let before = dump(&head);
    for (labels, s) in &before {
        let want = if labels.contains("shared") { 1 } else { rounds as usize };
        assert_eq!(s.len(), want, "{labels}");
        assert!(s.windows(2).all(|w| w[0].0 < w[1].0), "{labels} in order");
    }
    drop(head);
    let (head, _) = open(dir.path());
    assert_eq!(dump(&head), before);
}

#[test]
fn samples_of_unknown_series_are_counted_and_skipped() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut wal = heddle_wal::Wal::open(&dir.path().join(WAL_DIR), heddle_wal::WalOptions::default()).unwrap();
        let mut series = Vec::new();
        let l = lbls(&[("__name__", "known")]);
        crate::record::encode_series([(7u64, l.iter().copied())], &mut series);
        let mut samples = Vec::new();
        let refs = [
            crate::record::RefSample {
                series_ref: 7,
                t: 1,
                v: 1.0,
            },
            crate::record::RefSample {
                series_ref: 99,
                t: 1,
                v: 1.0,
            },
            crate::record::RefSample {
                series_ref: 7,
                t: 0,
                v: 1.0,
            },
        ];
        crate::record::encode_samples(&refs, &mut samples);
        wal.log(&[&series, &samples, b"\xffjunk"]).unwrap();
        wal.close().unwrap();
    }
    let (head, stats) = open(dir.path());
    assert_eq!(stats.series, 1);
    assert_eq!(stats.samples, 1);
    assert_eq!(stats.unknown_ref_samples, 1);
    assert_eq!(stats.skipped_samples, 1);
    assert_eq!(stats.undecodable_records + stats.ignored_records, 1);
    assert_eq!(read(&head.index).next_ref(), 8);
    assert_eq!(
        dump(&head),
        vec![(r#"{__name__="known"}"#.to_owned(), vec![(1, 1.0f64.to_bits())])]
    );
}

#[test]
fn invalid_options_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let zero = HeadOptions {
        chunk_target_samples: 0,
        ..HeadOptions::default()
    };
    assert!(matches!(
        Head::open(dir.path(), zero),
        Err(TsdbError::InvalidOptions(_))
    ));
    let segment = HeadOptions {
        wal_segment_size: 1000,
        ..HeadOptions::default()
    };
    assert!(matches!(Head::open(dir.path(), segment), Err(TsdbError::Wal(_))));
}

mod model {
    //! The head against a plain model: per series, the accepted samples in order.

    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    const NAMES: [&str; 4] = ["a", "b", "c", "d"];

    /// Batches of (series index, [(t, value index)]).
    type Batches = Vec<Vec<(usize, Vec<(i64, usize)>)>>;

    fn batches() -> impl Strategy<Value = Batches> {
        let series = (0..NAMES.len(), proptest::collection::vec((0i64..400, 0usize..4), 0..40));
        proptest::collection::vec(proptest::collection::vec(series, 0..4), 1..12)
    }

    fn value(i: usize) -> f64 {
        [1.0, 2.0, f64::NAN, f64::from_bits(STALE_NAN_BITS)][i]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn head_matches_a_model_and_survives_restart(batches in batches(), target in 1u16..8) {
            let dir = tempfile::tempdir().unwrap();
            let opts = HeadOptions {
                wal_segment_size: 2 * heddle_wal::PAGE_SIZE,
                chunk_target_samples: target,
                chunk_range_ms: 100,
                ..HeadOptions::default()
            };
            let (head, _) = Head::open(dir.path(), opts.clone()).unwrap();
            let mut model: BTreeMap<usize, Vec<(i64, u64)>> = BTreeMap::new();
            for batch in &batches {
                let labels: Vec<Vec<LabelRef<'_>>> =
                    batch.iter().map(|(i, _)| lbls(&[("__name__", NAMES[*i])])).collect();
                let samples: Vec<Vec<Sample>> = batch
                    .iter()
                    .map(|(_, s)| s.iter().map(|&(t, v)| Sample::new(t, value(v))).collect())
                    .collect();
                let req: Vec<AppendSeries<'_>> = labels
                    .iter()
                    .zip(&samples)
                    .map(|(l, s)| AppendSeries { labels: l, samples: s, created: None, histograms: &[] })
                    .collect();
                let out = head.append(&req).unwrap();
                let (mut appended, mut dedup, mut rejected) = (0u64, 0u64, 0u32);
                // The appendable window: half a chunk range before the newest sample of the head, as the batch
                // found it.
                let min_valid = model.values().flatten().map(|&(t, _)| t - 50).max().unwrap_or(i64::MIN);
                for (i, s) in batch {
                    let accepted = model.entry(*i).or_default();
                    for &(t, v) in s {
                        let bits = value(v).to_bits();
                        if t < min_valid {
                            rejected += 1;
                            continue;
                        }
                        match accepted.last() {
                            Some(&(lt, lv)) if t == lt && bits == lv => dedup += 1,
                            Some(&(lt, _)) if t <= lt => rejected += 1,
                            _ => {
                                accepted.push((t, bits));
                                appended += 1;
                            }
                        }
                    }
                }
                prop_assert_eq!(out.samples_appended, appended);
                prop_assert_eq!(out.samples_deduplicated, dedup);
                prop_assert_eq!(out.errors.iter().map(|e| e.samples_rejected).sum::<u32>(), rejected);
            }
            let want: Vec<(String, Vec<(i64, u64)>)> = model
                .iter()
                .filter(|(_, s)| !s.is_empty())
                .map(|(i, s)| (format!("{{__name__={:?}}}", NAMES[*i]), s.clone()))
                .collect();
            let got = dump(&head);
            prop_assert_eq!(&got, &want);
            for s in head.select(i64::MIN, i64::MAX, &[]) {
                for c in &s.chunks {
                    let n = decode_xor(&c.data).unwrap().len();
                    prop_assert!(n <= 2 * usize::from(target), "chunk of {} samples", n);
                    prop_assert_eq!(c.min_time.div_euclid(100), c.max_time.div_euclid(100));
                }
            }
            drop(head);
            let (head, _) = Head::open(dir.path(), opts).unwrap();
            prop_assert_eq!(dump(&head), want);
        }
    }
}

#[test]
fn append_reports_the_wal_bytes_it_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = open(dir.path());
    let first = push(&head, &[("__name__", "up"), ("job", "a")], &[(1000, 1.0), (2000, 2.0)]);
    let second = push(&head, &[("__name__", "up"), ("job", "a")], &[(3000, 3.0)]);
    assert!(
        first.wal_bytes > second.wal_bytes,
        "the first also logs the series record"
    );
    assert!(second.wal_bytes > 0);
    let on_disk: u64 = std::fs::read_dir(dir.path().join("wal"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum();
    assert_eq!(
        first.wal_bytes + second.wal_bytes,
        on_disk,
        "every byte in the segment came from these appends"
    );
}

/// The caller's bounds: samples past `max` are refused; an empty head refuses samples before
/// `empty_head_min` (a whole series of them is not even created), a head with samples keeps its own window;
/// the valid samples of the batch still land.
#[test]
fn append_within_refuses_samples_outside_the_callers_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = open(dir.path());
    let now = 1_000_000_000_000;
    let bounds = AppendBounds {
        empty_head_min: now - 7_200_000,
        max: now + 600_000,
    };
    let (ancient, future, ok) = (
        lbls(&[("__name__", "a")]),
        lbls(&[("__name__", "f")]),
        lbls(&[("__name__", "ok")]),
    );
    let (s_ancient, s_future, s_ok) = (
        samples(&[(i64::MIN, 1.0), (now - 7_200_001, 2.0)]),
        samples(&[(now, 1.0), (i64::MAX, 2.0)]),
        samples(&[(now - 7_200_000, 1.0), (now, 2.0)]),
    );
    let out = head
        .append_within(
            &[
                AppendSeries {
                    labels: &ancient,
                    samples: &s_ancient,
                    created: None,
                    histograms: &[],
                },
                AppendSeries {
                    labels: &future,
                    samples: &s_future,
                    created: None,
                    histograms: &[],
                },
                AppendSeries {
                    labels: &ok,
                    samples: &s_ok,
                    created: None,
                    histograms: &[],
                },
            ],
            bounds,
        )
        .unwrap();
    assert_eq!(out.samples_appended, 3, "{out:?}");
    assert_eq!(out.errors.len(), 2, "{out:?}");
    let (e0, e1) = (&out.errors[0], &out.errors[1]);
    assert_eq!(
        (e0.index, e0.reason, e0.samples_rejected),
        (0, AppendErrorKind::TooOldForEmptyHead, 2)
    );
    assert_eq!((e0.first_rejected_t, e0.last_accepted_t), (i64::MIN, now - 7_200_000));
    assert_eq!(e0.reason.id(), "err-heddle-sample-out-of-bounds");
    assert_eq!(
        (e1.index, e1.reason, e1.samples_rejected),
        (1, AppendErrorKind::TooFarInFuture, 1)
    );
    assert_eq!((e1.first_rejected_t, e1.last_accepted_t), (i64::MAX, now + 600_000));
    assert_eq!(e1.reason.id(), "err-heddle-too-far-in-future");
    assert!(e0.to_string().contains(&format!("ts={}", i64::MIN)), "{e0}");
    assert_eq!(head.stats().series, 2, "the all-refused ancient series was not created");
    assert_eq!(head.stats().min_time, Some(now - 7_200_000));

    // With samples in it, the head's window (half a block range before its newest sample) decides.
    let late = samples(&[(now - 3_600_001, 1.0)]);
    let l = lbls(&[("__name__", "late")]);
    let out = head
        .append_within(
            &[AppendSeries {
                labels: &l,
                samples: &late,
                created: None,
                histograms: &[],
            }],
            bounds,
        )
        .unwrap();
    assert_eq!(out.errors[0].reason, AppendErrorKind::OutOfBounds, "{out:?}");
    assert_eq!(out.errors[0].last_accepted_t, now - 3_600_000);
}

#[test]
fn a_created_timestamp_stores_one_zero_sample_before_the_counter_starts() {
    let dir = tempfile::tempdir().unwrap();
    let l = lbls(&[("__name__", "requests_total")]);
    let push_created = |head: &Head, created: i64, ts: &[(i64, f64)]| {
        let s = samples(ts);
        head.append(&[AppendSeries {
            labels: &l,
            samples: &s,
            created: Some(created),
            histograms: &[],
        }])
        .unwrap()
    };
    let zero = 0f64.to_bits();
    {
        let (head, _) = open(dir.path());
        // A new series: the zero sample first.
        let out = push_created(&head, 1_000, &[(2_000, 5.0)]);
        assert_eq!((out.samples_appended, out.created_zero_samples), (1, 1), "{out:?}");
        // The same counter pushed again repeats its created timestamp: nothing more.
        let out = push_created(&head, 1_000, &[(3_000, 7.0)]);
        assert_eq!(
            (out.samples_appended, out.created_zero_samples, out.errors.len()),
            (1, 0, 0)
        );
        // A created timestamp at or after the first sample says nothing to store.
        let out = push_created(&head, 4_000, &[(4_000, 1.0)]);
        assert_eq!((out.samples_appended, out.created_zero_samples), (1, 0));
        // The counter restarted after the newest sample: a zero sample between the two.
        let out = push_created(&head, 4_500, &[(5_000, 2.0)]);
        assert_eq!((out.samples_appended, out.created_zero_samples), (1, 1));
        // A sample refused as out of order takes no zero sample with it.
        let out = push_created(&head, 100, &[(200, 9.0)]);
        assert_eq!(
            (out.samples_appended, out.created_zero_samples, out.errors.len()),
            (0, 0, 1)
        );
        assert_eq!(head.stats().samples_appended, 6, "zero samples are stored samples");
        head.close().unwrap();
    }
    // Logged like any sample: a restart replaying the WAL keeps them.
    let (head, _) = open(dir.path());
    let want = vec![
        (1_000, zero),
        (2_000, 5f64.to_bits()),
        (3_000, 7f64.to_bits()),
        (4_000, 1f64.to_bits()),
        (4_500, zero),
        (5_000, 2f64.to_bits()),
    ];
    assert_eq!(dump(&head), vec![("{__name__=\"requests_total\"}".to_owned(), want)]);
}

#[test]
fn a_created_timestamp_outside_the_heads_bounds_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = open(dir.path());
    push(&head, &[("__name__", "other")], &[(10 * 3_600_000, 1.0)]);
    let l = lbls(&[("__name__", "c")]);
    let s = samples(&[(10 * 3_600_000, 1.0)]);
    // Far older than half a chunk range before the newest sample: out of bounds, not stored, no error.
    let out = head
        .append(&[AppendSeries {
            labels: &l,
            samples: &s,
            created: Some(1),
            histograms: &[],
        }])
        .unwrap();
    assert_eq!(
        (out.samples_appended, out.created_zero_samples, out.errors.len()),
        (1, 0, 0)
    );
}
