use super::*;
use heddle_model::MatchType;

fn series(name: &str) -> Labels {
    Labels::from_sorted([("__name__", name)]).unwrap()
}

fn ex(t: i64, trace: &str) -> Exemplar {
    Exemplar {
        labels: vec![Label {
            name: "trace_id".into(),
            value: trace.into(),
        }],
        value: t as f64,
        t,
    }
}

fn all(store: &CircularExemplars) -> BTreeMap<Labels, Vec<Exemplar>> {
    store.select(i64::MIN, i64::MAX, &[vec![]])
}

fn times(store: &CircularExemplars, name: &str) -> Vec<i64> {
    all(store)
        .get(&series(name))
        .map(|v| v.iter().map(|e| e.t).collect())
        .unwrap_or_default()
}

#[test]
fn the_ring_is_bounded_and_evicts_the_oldest_of_all_series() {
    let mut s = CircularExemplars::new(3);
    for (r, name, t) in [(1, "a", 1), (2, "b", 2), (1, "a", 3), (2, "b", 4), (1, "a", 5)] {
        assert_eq!(s.add(r, || series(name), ex(t, "x")), Ok(ExemplarAdded::Stored));
    }
    assert_eq!(s.len(), 3);
    assert_eq!(times(&s, "a"), vec![3, 5], "a's oldest was evicted");
    assert_eq!(times(&s, "b"), vec![4]);
    s.add(1, || series("a"), ex(6, "x")).unwrap();
    assert_eq!((times(&s, "a"), times(&s, "b")), (vec![5, 6], vec![4]));
    // Evicting b's last exemplar drops b from the index.
    s.add(1, || series("a"), ex(7, "x")).unwrap();
    assert_eq!(times(&s, "b"), Vec::<i64>::new());
    assert_eq!(s.index.len(), 1);
    let order: Vec<i64> = s.oldest_first().map(|(_, _, e)| e.t).collect();
    assert_eq!(order, vec![5, 6, 7]);
}

#[test]
fn duplicates_are_accepted_once_and_out_of_order_refused() {
    let mut s = CircularExemplars::new(10);
    s.add(1, || series("a"), ex(10, "x")).unwrap();
    assert_eq!(s.add(1, || series("a"), ex(10, "x")), Ok(ExemplarAdded::Duplicate));
    assert_eq!(
        s.add(1, || series("a"), ex(10, "y")),
        Err(ExemplarRefusal::OutOfOrder),
        "same time, other labels"
    );
    assert_eq!(s.add(1, || series("a"), ex(9, "x")), Err(ExemplarRefusal::OutOfOrder));
    // Another series has its own order.
    assert_eq!(s.add(2, || series("b"), ex(5, "x")), Ok(ExemplarAdded::Stored));
    assert_eq!(s.len(), 2);
    assert_eq!(
        CircularExemplars::new(0).add(1, || series("a"), ex(1, "x")),
        Err(ExemplarRefusal::Disabled)
    );
}

#[test]
fn a_ring_of_one_keeps_the_newest() {
    let mut s = CircularExemplars::new(1);
    for t in 1..5 {
        s.add(1, || series("a"), ex(t, "x")).unwrap();
    }
    s.add(2, || series("b"), ex(1, "x")).unwrap();
    assert_eq!((times(&s, "a"), times(&s, "b")), (vec![], vec![1]));
}

#[test]
fn resizing_keeps_the_newest() {
    let mut s = CircularExemplars::new(4);
    for t in 1..=4 {
        s.add(t as u64 % 2, || series(if t % 2 == 0 { "a" } else { "b" }), ex(t, "x"))
            .unwrap();
    }
    s.resize(2);
    assert_eq!(s.oldest_first().map(|(_, _, e)| e.t).collect::<Vec<_>>(), vec![3, 4]);
    s.resize(5);
    assert_eq!(s.capacity(), 5);
    s.add(0, || series("a"), ex(7, "x")).unwrap();
    assert_eq!(times(&s, "a"), vec![4, 7]);
}

#[test]
fn select_matches_series_and_range() {
    let mut s = CircularExemplars::new(10);
    for t in 1..=5 {
        s.add(1, || series("a"), ex(t, "x")).unwrap();
        s.add(2, || series("b"), ex(t, "y")).unwrap();
    }
    let m = |v: &str| vec![Matcher::new(MatchType::Equal, "__name__", v).unwrap()];
    let got = s.select(2, 4, &[m("a")]);
    assert_eq!(got.len(), 1);
    assert_eq!(got[&series("a")].iter().map(|e| e.t).collect::<Vec<_>>(), vec![2, 3, 4]);
    assert_eq!(s.select(2, 4, &[m("a"), m("b")]).len(), 2, "selectors are a union");
    assert!(s.select(6, 9, &[m("a")]).is_empty());
}

/// A sender of a million exemplars over a million series: the store holds its capacity, no more.
#[test]
fn a_million_exemplars_are_bounded() {
    let mut s = CircularExemplars::new(1000);
    for r in 0..1_000_000u64 {
        s.add(r, || series("a"), ex(r as i64, "t")).unwrap();
    }
    assert_eq!(s.len(), 1000);
    assert_eq!(s.index.len(), 1000, "one chain per series still in the ring");
}

/// A query reading two slots per hold of the lock while pushes overwrite the ring between holds: it ends
/// (pushed exemplars newer than the query's start are not chased), what it returns is in time order, each
/// exemplar once, each one the ring held at some point, and every exemplar the ring held throughout the
/// query is in it.
#[test]
fn a_query_read_in_parts_survives_pushes_between_them() {
    for pushes_between in [0usize, 1, 3, 7, 20] {
        let mut s = CircularExemplars::new(16);
        let mut t = 0i64;
        let push = |s: &mut CircularExemplars, t: &mut i64| {
            *t += 1;
            let r = (*t % 3) as u64;
            s.add(r, || series(&format!("s{r}")), ex(*t, "x")).unwrap();
        };
        for _ in 0..16 {
            push(&mut s, &mut t);
        }
        let before: Vec<i64> = s.oldest_first().map(|(_, _, e)| e.t).collect();
        let all_series = s.series_after(None, SERIES_PER_LOCK);
        let mut reader = ChainReader::new(all_series, i64::MIN, i64::MAX);
        let mut out = BTreeMap::new();
        let mut ever: std::collections::BTreeSet<i64> = before.iter().copied().collect();
        let mut reads = 0;
        while !reader.done() {
            reader.read(&s, 2, &mut out);
            reads += 1;
            assert!(reads < 1000, "{pushes_between} pushes: the query ends");
            for _ in 0..pushes_between {
                push(&mut s, &mut t);
                ever.insert(t);
            }
        }
        let kept: std::collections::BTreeSet<i64> = s.oldest_first().map(|(_, _, e)| e.t).collect();
        let throughout: Vec<i64> = before.iter().copied().filter(|t| kept.contains(t)).collect();
        let mut got_all = Vec::new();
        for (labels, exemplars) in &out {
            let times: Vec<i64> = exemplars.iter().map(|e| e.t).collect();
            assert!(
                times.windows(2).all(|w| w[0] < w[1]),
                "{pushes_between} pushes: {labels:?} {times:?}"
            );
            got_all.extend(times);
        }
        assert!(reads >= 2, "{pushes_between} pushes: read in parts ({reads} reads)");
        for t in &got_all {
            assert!(ever.contains(t), "{pushes_between} pushes: {t} was never in the ring");
        }
        for t in &throughout {
            assert!(
                got_all.contains(t),
                "{pushes_between} pushes: {t} was in the ring throughout, not returned"
            );
        }
    }
}

/// A resize between two parts: the reader starts the series again from its oldest, without repeating what it
/// returned.
#[test]
fn a_query_read_in_parts_survives_a_resize() {
    let mut s = CircularExemplars::new(10);
    for t in 1..=10 {
        s.add(1, || series("a"), ex(t, "x")).unwrap();
    }
    let mut reader = ChainReader::new(s.series_after(None, 10), i64::MIN, i64::MAX);
    let mut out = BTreeMap::new();
    reader.read(&s, 3, &mut out);
    s.resize(20);
    while !reader.done() {
        reader.read(&s, 3, &mut out);
    }
    assert_eq!(
        out[&series("a")].iter().map(|e| e.t).collect::<Vec<_>>(),
        (1..=10).collect::<Vec<_>>()
    );
}

mod head {
    use crate::head::{AppendExemplars, AppendSeries, Head, HeadOptions};
    use heddle_model::{ExemplarRef, LabelRef, Labels, Sample};
    use std::path::Path;

    const T0: i64 = 1_700_000_000_000;

    fn opts(max_exemplars: usize) -> HeadOptions {
        HeadOptions {
            max_exemplars,
            ..HeadOptions::default()
        }
    }

    fn up(job: &'static str) -> [LabelRef<'static>; 2] {
        [
            LabelRef {
                name: "__name__",
                value: "up",
            },
            LabelRef {
                name: "job",
                value: job,
            },
        ]
    }

    const TRACE: [LabelRef<'static>; 1] = [LabelRef {
        name: "trace_id",
        value: "abc",
    }];

    fn exemplar(t: i64) -> ExemplarRef<'static> {
        ExemplarRef {
            labels: &TRACE,
            value: t as f64,
            t,
        }
    }

    /// Appends a sample to `up{job}` then its exemplars, as a push does.
    fn push(head: &Head, job: &'static str, t: i64, exemplars: &[ExemplarRef<'_>]) -> super::super::ExemplarOutcome {
        let labels = up(job);
        let samples = [Sample::new(t, 1.0)];
        head.append(&[AppendSeries {
            labels: &labels,
            samples: &samples,
            created: None,
            histograms: &[],
        }])
        .unwrap();
        head.append_exemplars(&[AppendExemplars {
            labels: &labels,
            exemplars,
        }])
        .unwrap()
    }

    fn held(head: &Head) -> Vec<(String, Vec<i64>)> {
        head.select_exemplars(i64::MIN, i64::MAX, &[vec![]])
            .into_iter()
            .map(|(l, e): (Labels, Vec<super::Exemplar>)| (l.to_string(), e.iter().map(|e| e.t).collect()))
            .collect()
    }

    fn open(dir: &Path, max: usize) -> Head {
        Head::open(dir, opts(max)).unwrap().0
    }

    #[test]
    fn appends_are_judged_logged_and_survive_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let head = open(dir.path(), 100);
        let out = push(
            &head,
            "a",
            T0,
            &[exemplar(T0), exemplar(T0 + 1), exemplar(T0 + 1), exemplar(T0)],
        );
        assert_eq!((out.appended, out.duplicates, out.out_of_order), (2, 1, 1));
        assert!(out.wal_bytes > 0);
        // No series: refused.
        let unknown = head
            .append_exemplars(&[AppendExemplars {
                labels: &up("nobody"),
                exemplars: &[exemplar(T0)],
            }])
            .unwrap();
        assert_eq!(unknown.unknown_series, 1);
        // A crash: the WAL alone brings them back.
        drop(head);
        let (head, stats) = Head::open(dir.path(), opts(100)).unwrap();
        assert_eq!(stats.exemplars, 2);
        assert_eq!(
            held(&head),
            vec![("{__name__=\"up\", job=\"a\"}".into(), vec![T0, T0 + 1])]
        );
        // And the order rule holds across the restart.
        assert_eq!(push(&head, "a", T0 + 5, &[exemplar(T0 + 1)]).duplicates, 1);
    }

    #[test]
    fn a_snapshot_carries_the_ring() {
        let dir = tempfile::tempdir().unwrap();
        let head = open(dir.path(), 3);
        for t in 0..5 {
            push(&head, if t % 2 == 0 { "a" } else { "b" }, T0 + t, &[exemplar(T0 + t)]);
        }
        let want = held(&head);
        assert_eq!(head.exemplars_len(), 3, "bounded by the ring");
        head.close_with_snapshot().unwrap().unwrap();
        let (head, stats) = Head::open(dir.path(), opts(3)).unwrap();
        assert!(stats.snapshot.is_some(), "{stats:?}");
        assert_eq!(stats.wal_records, 0, "nothing replayed from the wal: {stats:?}");
        assert_eq!(held(&head), want);
        // The ring's order came back too: the next exemplar evicts the oldest.
        push(&head, "b", T0 + 10, &[exemplar(T0 + 10)]);
        assert_eq!(
            held(&head),
            vec![
                ("{__name__=\"up\", job=\"a\"}".into(), vec![T0 + 4]),
                ("{__name__=\"up\", job=\"b\"}".into(), vec![T0 + 3, T0 + 10]),
            ]
        );
    }

    #[test]
    fn a_head_that_keeps_none_logs_none() {
        let dir = tempfile::tempdir().unwrap();
        let head = open(dir.path(), 0);
        let out = push(&head, "a", T0, &[exemplar(T0)]);
        assert_eq!((out.appended, out.disabled, out.wal_bytes), (0, 1, 0));
        head.set_max_exemplars(2);
        assert_eq!(push(&head, "a", T0 + 1, &[exemplar(T0 + 1)]).appended, 1);
    }
}
