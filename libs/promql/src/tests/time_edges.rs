//! Times at the edges of i64 (offsets, `@`, ranges, lookback, subquery steps: answered exactly where they fit,
//! refused with `bad_data` where they do not, never wrapped or panicking in a debug build), and sorts by value
//! whose order is total with NaN among the values.

use super::{instant, run_with, series, vector};
use crate::functions::{bucket_quantile, quantile};
use crate::{PromqlError, QueryOptions, QueryTime, Series, Value};

const MIN: i64 = i64::MIN;
const MAX: i64 = i64::MAX;

/// Series with samples at both ends of time and one far below zero.
fn edges() -> Vec<Series> {
    let at = |start: i64| -> Vec<(i64, f64)> { (0..10).map(|k| (start + k * 1000, k as f64)).collect() };
    vec![
        series(&[("__name__", "edge"), ("at", "low")], &at(MIN)),
        series(&[("__name__", "edge"), ("at", "high")], &at(MAX - 9000)),
        series(&[("__name__", "far")], &at(-9_223_371_990_000_000_000)),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Want {
    Answered,
    OutOfRange,
}

#[test]
fn times_at_the_edges_of_i64_are_exact_or_refused_never_wrapped() {
    use Want::*;
    let data = edges();
    let at = QueryTime::Instant;
    let cases: &[(&str, &str, QueryTime, Want)] = &[
        (
            "a range ending at the low edge",
            "rate(edge[10s])",
            at(MIN + 10_000),
            Answered,
        ),
        ("a range ending at the high edge", "rate(edge[10s])", at(MAX), Answered),
        (
            "a lookback reaching i64::MIN exactly",
            "edge",
            at(MIN + 300_000),
            Answered,
        ),
        (
            "an offset reaching i64::MIN exactly",
            "edge offset 1m",
            at(MIN + 360_000),
            Answered,
        ),
        (
            "a negative offset to the high edge",
            "edge offset -1m",
            at(MAX - 60_000),
            Answered,
        ),
        (
            "the step's time farther than i64 from the window's samples",
            "predict_linear(far[292471208y] offset 292471208y, 1)",
            at(MAX - 10),
            Answered,
        ),
        (
            "a range query over all of i64",
            "vector(1)",
            QueryTime::Range {
                start: MIN,
                end: MAX,
                step: MAX,
            },
            Answered,
        ),
        ("an offset before i64::MIN", "edge offset 1m", at(MIN + 10), OutOfRange),
        (
            "a negative offset past i64::MAX",
            "edge offset -1m",
            at(MAX - 10),
            OutOfRange,
        ),
        (
            "a range starting before i64::MIN",
            "rate(edge[1m])",
            at(MIN + 10),
            OutOfRange,
        ),
        ("a lookback before i64::MIN", "edge", at(MIN + 10), OutOfRange),
        (
            "a subquery range before i64::MIN",
            "max_over_time(edge[1m:1m])",
            at(MIN + 10),
            OutOfRange,
        ),
        (
            "a subquery step aligned past i64::MAX",
            "max_over_time(edge[1ms:292471208y])",
            at(MAX - 10),
            OutOfRange,
        ),
        ("@ past i64", "edge @ 1e300", at(0), OutOfRange),
        (
            "@ plus an offset past i64",
            "edge @ 9223372036854774 offset -1h",
            at(0),
            OutOfRange,
        ),
        (
            "an offset longer than i64",
            "edge offset 4294967295y",
            at(0),
            OutOfRange,
        ),
        ("a range longer than i64", "rate(edge[4294967295y])", at(0), OutOfRange),
        ("a range in seconds past i64", "edge[1e30]", at(0), OutOfRange),
        ("an infinite offset", "edge offset Inf", at(0), OutOfRange),
        ("a NaN offset", "edge offset NaN", at(0), OutOfRange),
        (
            "a subquery step in seconds past i64",
            "max_over_time(edge[1m:1e300])",
            at(0),
            OutOfRange,
        ),
    ];
    for (name, text, time, want) in cases {
        let got = std::panic::catch_unwind(|| run_with(text, *time, &data, &QueryOptions::default()))
            .unwrap_or_else(|_| panic!("{name}: {text} panicked"));
        match (want, got) {
            (Answered, Ok(_)) => {}
            (OutOfRange, Err(e @ PromqlError::TimeOutOfRange(_))) => {
                assert_eq!((e.http_status(), e.error_type()), (400, "bad_data"), "{name}");
                let msg = e.to_string();
                assert!(
                    msg.starts_with("err-heddle-query-timestamp-out-of-range: ")
                        && msg.contains("64-bit millisecond timestamp"),
                    "{name}: {msg}"
                );
            }
            (want, got) => panic!("{name}: {text} at {time:?}: want {want:?}, got {got:?}"),
        }
    }
}

#[test]
fn answers_at_the_edges_are_the_answers_of_the_middle() {
    let mut data = edges();
    // The same ten samples as at the edges, from time 0.
    let mid: Vec<(i64, f64)> = (0..10).map(|k| (k * 1000, k as f64)).collect();
    data.push(series(&[("__name__", "edge"), ("at", "mid")], &mid));
    let rate = |at: &str, t: i64| {
        let got = vector(instant(&format!("rate(edge{{at=\"{at}\"}}[10s])"), t, &data).unwrap());
        assert_eq!(got.len(), 1, "{at}: {got:?}");
        got[0].1
    };
    // The window starting at the first sample, and the one ending at the last.
    assert_eq!(rate("low", MIN + 10_000), rate("mid", 10_000));
    assert_eq!(rate("high", MAX), rate("mid", 9000));
    let Value::Matrix(m) = run_with(
        "vector(1)",
        QueryTime::Range {
            start: MIN,
            end: MAX,
            step: MAX,
        },
        &data,
        &QueryOptions::default(),
    )
    .unwrap() else {
        panic!("not a matrix")
    };
    let times: Vec<i64> = m[0].samples.iter().map(|s| s.t).collect();
    assert_eq!(times, vec![MIN, -1, MAX - 1]);
    // The window 292471208 years back holds the far series' ten samples.
    let got = vector(instant("count_over_time(far[292471208y] offset 292471208y)", MAX - 10, &data).unwrap());
    assert_eq!(got, vec![("{}".to_owned(), 10.0)]);
}

/// Every ordering of `items`, by Heap's algorithm.
fn permutations<T: Clone>(items: &[T]) -> Vec<Vec<T>> {
    fn go<T: Clone>(k: usize, a: &mut Vec<T>, out: &mut Vec<Vec<T>>) {
        if k <= 1 {
            out.push(a.clone());
            return;
        }
        for i in 0..k {
            go(k - 1, a, out);
            let j = if k.is_multiple_of(2) { i } else { 0 };
            a.swap(j, k - 1);
        }
    }
    let mut a = items.to_vec();
    let mut out = Vec::new();
    go(a.len(), &mut a, &mut out);
    out
}

fn same(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

#[test]
fn quantiles_with_nan_bounds_and_values_do_not_depend_on_the_input_order() {
    let nan = f64::NAN;
    // Classic buckets: (upper bound, cumulative count), with NaN bounds (`le="NaN"`) and NaN counts.
    let buckets = [
        (1.0, 10.0),
        (nan, 5.0),
        (2.0, 20.0),
        (f64::INFINITY, 30.0),
        (nan, 7.0),
        (5.0, nan),
    ];
    for q in [0.1, 0.5, 0.9] {
        let mut first = None;
        for mut p in permutations(&buckets) {
            let got = bucket_quantile(q, &mut p);
            let want = *first.get_or_insert(got);
            assert!(same(got, want), "q={q}: {got} for {p:?}, {want} for another order");
        }
    }
    let values = [3.0, nan, 1.0, -0.5, nan, f64::NEG_INFINITY];
    for q in [0.0, 0.3, 0.5, 1.0] {
        let mut first = None;
        for p in permutations(&values) {
            let got = quantile(q, p.clone());
            let want = *first.get_or_insert(got);
            assert!(same(got, want), "q={q}: {got} for {p:?}, {want} for another order");
        }
    }
    // Go's order: NaN first, so the lowest quantile of values with a NaN is NaN.
    assert!(quantile(0.0, vec![1.0, nan]).is_nan());
    assert_eq!(quantile(1.0, vec![1.0, nan]), 1.0);

    // Many buckets with NaN bounds spelled in several ways: a sort that is not a total order may panic here.
    let mut many: Vec<(f64, f64)> = (0..200)
        .map(|i| (if i % 7 == 0 { nan } else { f64::from(i) }, f64::from(i)))
        .collect();
    many.push((f64::INFINITY, 500.0));
    let mut reversed = many.clone();
    reversed.reverse();
    let (a, b) = (bucket_quantile(0.5, &mut many), bucket_quantile(0.5, &mut reversed));
    assert!(same(a, b), "{a} vs {b}");
}

#[test]
fn histogram_quantile_over_nan_buckets_answers_like_prometheus() {
    let t = 60_000;
    let bucket = |le: &str, count: f64| series(&[("__name__", "b_bucket"), ("le", le)], &[(t, count)]);
    let data = vec![
        bucket("1", 1.0),
        bucket("NaN", 2.0),
        bucket("nan", 2.0),
        bucket("2", f64::NAN),
        bucket("+Inf", 3.0),
    ];
    let got = vector(instant("histogram_quantile(0.5, b_bucket)", t, &data).unwrap());
    assert_eq!(got.len(), 1, "{got:?}");
    // The NaN bounds sort first (Prometheus 3's `cmp.Compare`): the rank falls in a bucket with a NaN bound.
    assert!(got[0].1.is_nan(), "{got:?}");
    // Without the NaN bound the answer is a number, NaN counts notwithstanding.
    let plain = vec![bucket("1", 1.0), bucket("2", 2.0), bucket("+Inf", 3.0)];
    let got = vector(instant("histogram_quantile(0.5, b_bucket)", t, &plain).unwrap());
    assert_eq!(got, vec![("{}".to_owned(), 1.5)]);
}

#[test]
fn sorts_by_value_put_nan_last_either_way() {
    let t = 60_000;
    let data: Vec<Series> = [("a", f64::NAN), ("b", 1.0), ("c", 3.0), ("d", 2.0), ("e", f64::NAN)]
        .iter()
        .map(|&(i, v)| series(&[("__name__", "m"), ("i", i)], &[(t, v)]))
        .collect();
    // In an instant query `sort`, `topk`... decide the order of the answer.
    let order = |text: &str| -> Vec<String> {
        let Value::Vector(v) = instant(text, t, &data).unwrap() else {
            panic!("{text}: not a vector")
        };
        v.into_iter().map(|s| s.labels.get("i").unwrap().to_owned()).collect()
    };
    let nan_pair = |v: &[String]| {
        let mut tail = v[v.len() - 2..].to_vec();
        tail.sort();
        tail == ["a", "e"]
    };
    let sorted = order("sort(m)");
    assert_eq!(sorted[..3], ["b", "d", "c"], "{sorted:?}");
    assert!(nan_pair(&sorted), "{sorted:?}");
    let desc = order("sort_desc(m)");
    assert_eq!(desc[..3], ["c", "d", "b"], "{desc:?}");
    assert!(nan_pair(&desc), "{desc:?}");
    assert_eq!(order("topk(2, m)"), ["c", "d"]);
    assert_eq!(order("bottomk(2, m)"), ["b", "d"]);
    let all = order("topk(5, m)");
    assert_eq!(all[..3], ["c", "d", "b"], "{all:?}");
    assert!(nan_pair(&all), "{all:?}");
}
