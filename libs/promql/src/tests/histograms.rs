//! Native histograms through the engine, against answers derived by hand from Prometheus 3's definitions.

use super::{MIN, S, instant, labels, run_with};
use crate::{HistogramPoint, PromqlError, QueryOptions, QueryTime, Series, Value, write_histogram_json};
use heddle_model::{FloatHistogram, STALE_NAN_BITS, Sample, Span};
use std::f64::consts::SQRT_2;

/// An exponential histogram: each side one run of buckets from `(first index, counts)`; the count is the sum of
/// the buckets and the zero bucket.
fn hist(schema: i32, zero: (f64, f64), sum: f64, positive: (i32, &[f64]), negative: (i32, &[f64])) -> FloatHistogram {
    let side = |(first, counts): (i32, &[f64])| {
        if counts.is_empty() {
            (Vec::new(), Vec::new())
        } else {
            (vec![Span::new(first, counts.len() as u32)], counts.to_vec())
        }
    };
    let (positive_spans, positive_buckets) = side(positive);
    let (negative_spans, negative_buckets) = side(negative);
    FloatHistogram {
        schema,
        zero_threshold: zero.0,
        zero_count: zero.1,
        count: zero.1 + positive_buckets.iter().sum::<f64>() + negative_buckets.iter().sum::<f64>(),
        sum,
        positive_spans,
        positive_buckets,
        negative_spans,
        negative_buckets,
        ..Default::default()
    }
}

/// Schema 0: [-2,-1) 2, the zero bucket [-0.001,0.001] 2, (1,2] 4, (2,4] 2; count 10, sum 10.
fn both_sides() -> FloatHistogram {
    hist(0, (0.001, 2.0), 10.0, (1, &[4.0, 2.0]), (1, &[2.0]))
}

/// A counter histogram growing by `k` observations in (1,2], one bucket.
fn counter_at(k: f64) -> FloatHistogram {
    hist(0, (0.0, 0.0), k, (1, &[k]), (0, &[]))
}

fn hseries(pairs: &[(&str, &str)], floats: &[(i64, f64)], hists: Vec<(i64, FloatHistogram)>) -> Series {
    Series {
        labels: labels(pairs),
        samples: floats.iter().map(|&(t, v)| Sample::new(t, v)).collect(),
        histograms: hists.into_iter().map(|(t, h)| HistogramPoint::new(t, h)).collect(),
    }
}

/// An instant vector's `(labels, float, histogram)` triples, sorted by labels.
fn elements(v: Value) -> Vec<(String, f64, Option<FloatHistogram>)> {
    let Value::Vector(samples) = v else {
        panic!("not a vector: {v:?}")
    };
    let mut out: Vec<_> = samples
        .into_iter()
        .map(|s| (s.labels.to_string(), s.v, s.h.map(|h| *h)))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn float(v: Value) -> f64 {
    let e = elements(v);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].2.is_none(), "a histogram: {e:?}");
    e[0].1
}

fn histogram(v: Value) -> FloatHistogram {
    let e = elements(v);
    assert_eq!(e.len(), 1, "{e:?}");
    e[0].2.clone().unwrap_or_else(|| panic!("a float: {e:?}"))
}

fn close(name: &str, got: f64, want: f64) {
    assert!(
        (got - want).abs() <= 1e-12 * want.abs().max(1.0),
        "case {name}: got {got}, want {want}"
    );
}

#[test]
fn a_selector_picks_the_newest_sample_of_either_kind_and_stops_at_a_stale_histogram() {
    let mut stale = counter_at(1.0);
    stale.sum = f64::from_bits(STALE_NAN_BITS);
    let data = [hseries(
        &[("__name__", "x")],
        &[(0, 1.0), (60 * S, 2.0)],
        vec![(30 * S, counter_at(3.0)), (90 * S, stale)],
    )];
    assert_eq!(
        histogram(instant("x", 45 * S, &data).unwrap()),
        counter_at(3.0),
        "case histogram newest"
    );
    assert_eq!(float(instant("x", 60 * S, &data).unwrap()), 2.0, "case float newest");
    assert!(elements(instant("x", 100 * S, &data).unwrap()).is_empty(), "case stale");
    assert_eq!(
        float(instant("timestamp(x)", 45 * S, &data).unwrap()),
        30.0,
        "case timestamp"
    );
    // Float functions ignore histograms.
    assert!(
        elements(instant("abs(x)", 45 * S, &data).unwrap()).is_empty(),
        "case abs"
    );
    let Value::Scalar { v, .. } = instant("scalar(x)", 45 * S, &data).unwrap() else {
        panic!("not a scalar")
    };
    assert!(v.is_nan(), "case scalar of a histogram: {v}");
    let Value::Matrix(m) = instant("x[1m]", 60 * S, &data).unwrap() else {
        panic!("not a matrix")
    };
    assert_eq!(m[0].samples, vec![Sample::new(0, 1.0), Sample::new(60 * S, 2.0)]);
    assert_eq!(m[0].histograms, vec![HistogramPoint::new(30 * S, counter_at(3.0))]);
}

#[test]
fn histogram_functions_compute_prometheus_estimates() {
    let data = [hseries(
        &[("__name__", "h"), ("job", "a")],
        &[(0, 5.0)],
        vec![(MIN, both_sides())],
    )];
    let at = |q: &str| instant(q, MIN, &data).unwrap();
    let cases = [
        ("count", "histogram_count(h)", 10.0),
        ("sum", "histogram_sum(h)", 10.0),
        ("avg", "histogram_avg(h)", 1.0),
        // Observations at the buckets' geometric means (-√2, 0, √2, 2√2) around the mean 1:
        // (2(√2+1)² + 2 + 4(√2-1)² + 2(2√2-1)²) / 10.
        ("stdvar", "histogram_stdvar(h)", 3.8 - 1.2 * SQRT_2),
        ("stddev", "histogram_stddev(h)", (3.8 - 1.2 * SQRT_2).sqrt()),
        // Rank 1 of 10 is half-way through [-2,-1), on a logarithmic scale.
        ("q0.1 negative bucket", "histogram_quantile(0.1, h)", -SQRT_2),
        // Rank 3: half-way through the zero bucket, linearly.
        ("q0.3 zero bucket", "histogram_quantile(0.3, h)", 0.0),
        // From the top: rank 5 falls a quarter into (1,2].
        ("q0.5", "histogram_quantile(0.5, h)", 2f64.powf(0.25)),
        ("q0.9", "histogram_quantile(0.9, h)", 2f64.powf(1.5)),
        ("q above 1", "histogram_quantile(1.5, h)", f64::INFINITY),
        // From the middle of the zero bucket (rank 3) to (2,4]'s lower bound (rank 8).
        ("fraction 0..2", "histogram_fraction(0, 2, h)", 0.5),
        (
            "fraction 1.5..3",
            "histogram_fraction(1.5, 3, h)",
            ((8.0 + 2.0 * (3f64.log2() - 1.0)) - (4.0 + 4.0 * 1.5f64.log2())) / 10.0,
        ),
    ];
    for (name, query, want) in cases {
        let got = float(at(query));
        if want.is_infinite() {
            assert_eq!(got, want, "case {name}");
        } else {
            close(name, got, want);
        }
        let e = elements(at(query));
        assert_eq!(e[0].0, r#"{job="a"}"#, "case {name}: the name is dropped");
    }
    // Only positive buckets: the zero bucket starts at 0, and rank 1 of 2 lies half-way into [0, 0.5].
    let one_sided = [hseries(
        &[("__name__", "h")],
        &[],
        vec![(0, hist(0, (0.5, 2.0), 3.0, (1, &[2.0]), (0, &[])))],
    )];
    close(
        "one-sided zero bucket",
        float(instant("histogram_quantile(0.25, h)", 0, &one_sided).unwrap()),
        0.25,
    );
    // Floats are no histograms; classic buckets still work beside.
    let classic = [
        hseries(&[("__name__", "c"), ("le", "1")], &[(0, 1.0)], vec![]),
        hseries(&[("__name__", "c"), ("le", "+Inf")], &[(0, 2.0)], vec![]),
    ];
    assert!(elements(instant("histogram_count(c)", 0, &classic).unwrap()).is_empty());
    assert_eq!(float(instant("histogram_quantile(0.5, c)", 0, &classic).unwrap()), 1.0);
}

#[test]
fn rate_and_increase_of_histograms_correct_resets_and_extrapolate() {
    let at = |ks: &[f64]| {
        let points = ks
            .iter()
            .enumerate()
            .map(|(i, &k)| (i as i64 * 15 * S, counter_at(k)))
            .collect();
        [hseries(&[("__name__", "x")], &[], points)]
    };
    // Samples at both ends of the window: no extrapolation.
    let steady = at(&[1.0, 2.0, 3.0, 4.0, 5.0]);
    let h = histogram(instant("rate(x[1m])", MIN, &steady).unwrap());
    close("rate count", h.count, 4.0 / 60.0);
    close("rate sum", h.sum, 4.0 / 60.0);
    assert_eq!(h.positive_buckets.len(), 1, "{h:?}");
    close("rate bucket", h.positive_buckets[0], 4.0 / 60.0);
    // 3 -> 1 is a reset: the 3 before it is added back.
    let reset = at(&[1.0, 2.0, 3.0, 1.0, 2.0]);
    close(
        "increase over a reset",
        float(instant("histogram_count(increase(x[1m]))", MIN, &reset).unwrap()),
        4.0,
    );
    // Samples from 15s to 60s in [15s, 75s]: 45s sampled, extrapolated by 15s to the end (within 1.1
    // intervals), so 4/3 of the change.
    close(
        "extrapolated",
        float(instant("histogram_count(increase(x[1m]))", 75 * S, &steady).unwrap()),
        (5.0 - 2.0) * 60.0 / 45.0 + 0.0,
    );
    // Samples at 30s, 45s, 60s in [0, 60s]: 30s before the first is past 1.1 intervals, so half an interval
    // (7.5s) is taken; the count would reach zero 9s before (30s * 0.6 / 2), later than that, so it does not
    // bound it (Prometheus 2's order for floats would take the 9s).
    let late = [hseries(
        &[("__name__", "x")],
        &[],
        vec![
            (30 * S, counter_at(0.6)),
            (45 * S, counter_at(1.6)),
            (MIN, counter_at(2.6)),
        ],
    )];
    close(
        "zero bound after the threshold",
        float(instant("histogram_count(increase(x[1m]))", MIN, &late).unwrap()),
        2.0 * 37.5 / 30.0,
    );
    // A count 0.1 at the first sample would reach zero 1.5s before it: that bounds the extrapolation.
    let from_zero = [hseries(
        &[("__name__", "x")],
        &[],
        vec![
            (30 * S, counter_at(0.1)),
            (45 * S, counter_at(1.1)),
            (MIN, counter_at(2.1)),
        ],
    )];
    close(
        "zero bound",
        float(instant("histogram_count(increase(x[1m]))", MIN, &from_zero).unwrap()),
        2.0 * 31.5 / 30.0,
    );
    // irate and idelta: the last two samples; irate over a reset takes the last alone.
    let last_two = |a, b| {
        [hseries(
            &[("__name__", "x")],
            &[],
            vec![(45 * S, counter_at(a)), (MIN, counter_at(b))],
        )]
    };
    close(
        "irate",
        float(instant("histogram_count(irate(x[1m]))", MIN, &last_two(2.0, 5.0)).unwrap()),
        3.0 / 15.0,
    );
    close(
        "irate over a reset",
        float(instant("histogram_count(irate(x[1m]))", MIN, &last_two(5.0, 2.0)).unwrap()),
        2.0 / 15.0,
    );
    close(
        "idelta",
        float(instant("histogram_count(idelta(x[1m]))", MIN, &last_two(5.0, 2.0)).unwrap()),
        -3.0,
    );
    // delta of a counter: last minus first, no reset correction.
    close(
        "delta",
        float(instant("histogram_count(delta(x[1m]))", MIN, &reset).unwrap()),
        1.0,
    );
}

#[test]
fn a_histogram_rate_reduces_to_the_lowest_schema_and_mixed_windows_give_nothing() {
    // Schema 1's (1, √2] is inside schema 0's (1, 2].
    let finer = hist(1, (0.0, 0.0), 1.0, (1, &[1.0]), (0, &[]));
    let data = [hseries(
        &[("__name__", "x")],
        &[],
        vec![(0, finer), (MIN, hist(0, (0.0, 0.0), 3.0, (1, &[3.0]), (0, &[])))],
    )];
    let h = histogram(instant("increase(x[1m])", MIN, &data).unwrap());
    assert_eq!(h.schema, 0);
    assert_eq!(h.positive_spans, vec![Span::new(1, 1)]);
    assert_eq!(h.positive_buckets, vec![2.0]);
    assert_eq!(h.count, 2.0);

    // A reset right after the first sample makes the first count as empty, whatever its layout: here custom
    // buckets, which exponential ones cannot be combined with.
    let custom = FloatHistogram {
        schema: -53,
        count: 5.0,
        sum: 5.0,
        positive_spans: vec![Span::new(0, 1)],
        positive_buckets: vec![5.0],
        custom_values: vec![1.0],
        ..Default::default()
    };
    let relaid = [hseries(
        &[("__name__", "x")],
        &[],
        vec![(0, custom.clone()), (30 * S, counter_at(1.0)), (MIN, counter_at(3.0))],
    )];
    assert_eq!(histogram(instant("increase(x[1m])", MIN, &relaid).unwrap()).count, 3.0);
    let custom_last = [hseries(
        &[("__name__", "x")],
        &[],
        vec![(0, counter_at(1.0)), (30 * S, counter_at(2.0)), (MIN, custom)],
    )];
    assert!(elements(instant("increase(x[1m])", MIN, &custom_last).unwrap()).is_empty());

    let mixed = [hseries(
        &[("__name__", "x")],
        &[(0, 1.0)],
        vec![(30 * S, counter_at(1.0)), (MIN, counter_at(2.0))],
    )];
    for q in ["rate(x[1m])", "increase(x[1m])", "delta(x[1m])", "sum_over_time(x[1m])"] {
        assert!(elements(instant(q, MIN, &mixed).unwrap()).is_empty(), "case {q}");
    }
    assert_eq!(float(instant("count_over_time(x[1m])", MIN, &mixed).unwrap()), 3.0);
    assert_eq!(
        float(instant("max_over_time(x[1m])", MIN, &mixed).unwrap()),
        1.0,
        "floats alone"
    );
    assert_eq!(
        histogram(instant("last_over_time(x[1m])", MIN, &mixed).unwrap()),
        counter_at(2.0)
    );
    let reset = [hseries(
        &[("__name__", "x")],
        &[],
        vec![(0, counter_at(2.0)), (30 * S, counter_at(1.0)), (MIN, counter_at(1.0))],
    )];
    assert_eq!(float(instant("resets(x[1m])", MIN, &reset).unwrap()), 1.0);
    assert_eq!(float(instant("changes(x[1m])", MIN, &reset).unwrap()), 1.0);
}

#[test]
fn aggregations_sum_and_average_histograms_and_drop_mixed_groups() {
    let data = [
        hseries(
            &[("__name__", "x"), ("g", "a"), ("i", "1")],
            &[],
            vec![(0, counter_at(1.0))],
        ),
        hseries(
            &[("__name__", "x"), ("g", "a"), ("i", "2")],
            &[],
            vec![(0, counter_at(3.0))],
        ),
        hseries(
            &[("__name__", "x"), ("g", "b"), ("i", "1")],
            &[],
            vec![(0, counter_at(1.0))],
        ),
        hseries(&[("__name__", "x"), ("g", "b"), ("i", "2")], &[(0, 7.0)], vec![]),
    ];
    let sum = elements(instant("sum by (g) (x)", 0, &data).unwrap());
    assert_eq!(sum.len(), 1, "the mixed group b is dropped: {sum:?}");
    assert_eq!(sum[0].0, r#"{g="a"}"#);
    assert_eq!(sum[0].2, Some(counter_at(4.0)));
    let avg = elements(instant("avg by (g) (x)", 0, &data).unwrap());
    assert_eq!(avg.len(), 1, "{avg:?}");
    assert_eq!(avg[0].2, Some(counter_at(2.0)));
    let count = elements(instant("count by (g) (x)", 0, &data).unwrap());
    assert_eq!(
        count.iter().map(|e| (e.0.as_str(), e.1)).collect::<Vec<_>>(),
        vec![(r#"{g="a"}"#, 2.0), (r#"{g="b"}"#, 2.0)]
    );
    // max reads floats only.
    let max = elements(instant("max by (g) (x)", 0, &data).unwrap());
    assert_eq!(max.len(), 1, "{max:?}");
    assert_eq!(max[0].1, 7.0);
    assert!(elements(instant("topk(1, x{g=\"a\"})", 0, &data).unwrap()).is_empty());
    assert_eq!(
        elements(instant("sort(x)", 0, &data).unwrap()).len(),
        1,
        "histograms are not sorted"
    );
}

#[test]
fn operators_scale_add_and_subtract_histograms_and_drop_the_rest() {
    let data = [
        hseries(&[("__name__", "x"), ("i", "1")], &[], vec![(0, counter_at(2.0))]),
        hseries(&[("__name__", "y"), ("i", "1")], &[], vec![(0, counter_at(6.0))]),
    ];
    let h = |q: &str| histogram(instant(q, 0, &data).unwrap_or_else(|e| panic!("{q}: {e}")));
    assert_eq!(h("x * 3"), counter_at(6.0));
    assert_eq!(h("3 * x"), counter_at(6.0));
    assert_eq!(h("y / 3"), counter_at(2.0));
    assert_eq!(h("-x"), counter_at(-2.0));
    assert_eq!(h("x + y"), counter_at(8.0));
    assert_eq!(h("y - x"), counter_at(4.0));
    assert_eq!(h("x == on(i) x"), counter_at(2.0));
    assert_eq!(float(instant("x != bool on(i) y", 0, &data).unwrap()), 1.0);
    for q in [
        "3 / x",
        "x + 1",
        "x > 1",
        "x > bool 1",
        "x * on(i) y",
        "x < y",
        "sqrt(x)",
    ] {
        assert!(elements(instant(q, 0, &data).unwrap()).is_empty(), "case {q}");
    }
    // `y` has the labels of `x` but for the name: `or` keeps `x`.
    assert_eq!(h("x or y"), counter_at(2.0));
    assert_eq!(h("x and y"), counter_at(2.0));
}

#[test]
fn a_range_query_returns_histogram_points_beside_float_points() {
    let data = [hseries(
        &[("__name__", "x")],
        &[(0, 1.0)],
        vec![(MIN, counter_at(1.0)), (2 * MIN, counter_at(2.0))],
    )];
    let time = QueryTime::Range {
        start: 0,
        end: 2 * MIN,
        step: MIN,
    };
    let Value::Matrix(m) = run_with("x", time, &data, &QueryOptions::default()).unwrap() else {
        panic!("not a matrix")
    };
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].samples, vec![Sample::new(0, 1.0)]);
    assert_eq!(
        m[0].histograms,
        vec![
            HistogramPoint::new(MIN, counter_at(1.0)),
            HistogramPoint::new(2 * MIN, counter_at(2.0))
        ]
    );
    // Subqueries carry histograms too; over 0..2m the float at 0 would mix the kinds.
    let sub = float(
        run_with(
            "histogram_count(increase(x[1m:1m]))",
            QueryTime::Instant(2 * MIN),
            &data,
            &QueryOptions::default(),
        )
        .unwrap(),
    );
    close("subquery", sub, 1.0);
    assert!(
        elements(
            run_with(
                "increase(x[2m:1m])",
                QueryTime::Instant(2 * MIN),
                &data,
                &QueryOptions::default()
            )
            .unwrap()
        )
        .is_empty()
    );
}

#[test]
fn a_histogram_counts_against_the_sample_limit_by_its_size() {
    // 168 bytes + one span + one bucket = 184 bytes: (184 + 8) / 16 = 12 samples.
    let data = [hseries(&[("__name__", "x")], &[], vec![(0, counter_at(1.0))])];
    let opts = |max_samples| QueryOptions {
        max_samples,
        ..QueryOptions::default()
    };
    let run = |n| run_with("x", QueryTime::Instant(0), &data, &opts(n));
    // The fetched histogram and the selector's result: 24, where two floats would be 2.
    assert!(run(24).is_ok());
    assert!(matches!(run(23), Err(PromqlError::TooManySamples { limit: 23 })));
}

#[test]
fn histograms_are_written_as_prometheus_api_objects() {
    let mut out = String::new();
    write_histogram_json(&mut out, &both_sides());
    assert_eq!(
        out,
        r#"{"count":"10","sum":"10","buckets":[[1,"-2","-1","2"],[3,"-0.001","0.001","2"],[0,"1","2","4"],[0,"2","4","2"]]}"#
    );
    let mut empty = String::new();
    write_histogram_json(&mut empty, &FloatHistogram::default());
    assert_eq!(empty, r#"{"count":"0","sum":"0"}"#);
    let mut tiny = String::new();
    write_histogram_json(&mut tiny, &hist(0, (0.0, 0.0), 1.5e-7, (0, &[]), (0, &[])));
    assert_eq!(tiny, r#"{"count":"0","sum":"1.5e-07"}"#);
}

/// Expressions over histograms whose range evaluation must agree with instant evaluation at every step.
const STEPWISE: &[&str] = &[
    "h",
    "h offset 30s",
    "rate(h[1m])",
    "increase(h[2m])",
    "delta(h[1m])",
    "irate(h[45s])",
    "resets(h[2m])",
    "histogram_quantile(0.7, h)",
    "histogram_fraction(1, 3, rate(h[1m]))",
    "sum by (k) (h)",
    "avg(h)",
    "count(h)",
    "h * 2",
    "h - on(i, k) h offset 20s",
    "histogram_count(rate(h[1m:15s]))",
    "last_over_time(h[1m])",
    "sum_over_time(h[1m])",
];

/// A histogram over schema 0's buckets 1 to 3 from `counts`.
fn spread(counts: [f64; 3]) -> FloatHistogram {
    hist(0, (0.0, 0.0), counts.iter().sum::<f64>() * 1.5, (1, &counts), (0, &[]))
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(32))]

    #[test]
    fn range_queries_of_histograms_agree_with_instant_queries_at_every_step(
        series in proptest::collection::vec(
            proptest::collection::vec((0i64..4, 0u8..4, [0.0f64..5.0, 0.0..5.0, 0.0..5.0]), 0..25),
            1..4,
        ),
        start in 0i64..240,
        steps in 1i64..10,
        step in 1i64..40,
    ) {
        // Counters of histograms with irregular gaps; a quarter of the increments restart the counter and one
        // series in three has a float now and then.
        let data: Vec<Series> = series.iter().enumerate().map(|(i, points)| {
            let (mut t, mut acc) = (0, [0.0; 3]);
            let (mut floats, mut hists) = (Vec::new(), Vec::new());
            for &(gap, kind, add) in points {
                t += (gap + 1) * 5 * S;
                if kind == 0 {
                    acc = [0.0; 3];
                }
                for (a, d) in acc.iter_mut().zip(add) {
                    *a += d.round();
                }
                if kind == 3 && i == 2 {
                    floats.push((t, acc[0]));
                } else {
                    hists.push((t, spread(acc)));
                }
            }
            let (k, inst) = ((i % 2).to_string(), i.to_string());
            hseries(&[("__name__", "h"), ("k", &k), ("i", &inst)], &floats, hists)
        }).collect();
        let (start, step) = (start * S, step * S);
        let end = start + (steps - 1) * step;
        let opts = QueryOptions::default();
        for q in STEPWISE {
            let range = match run_with(q, QueryTime::Range { start, end, step }, &data, &opts) {
                Ok(Value::Matrix(m)) => m,
                other => panic!("{q}: {other:?}"),
            };
            for i in 0..steps {
                let t = start + i * step;
                let at = run_with(q, QueryTime::Instant(t), &data, &opts).unwrap();
                let want = elements(at);
                let mut got: Vec<(String, f64, Option<FloatHistogram>)> = range.iter().filter_map(|s| {
                    let label = s.labels.to_string();
                    s.samples.iter().find(|x| x.t == t).map(|x| (label.clone(), x.v, None))
                        .or_else(|| s.histograms.iter().find(|x| x.t == t).map(|x| (label, 0.0, Some(x.h.clone()))))
                }).collect();
                got.sort_by(|a, b| a.0.cmp(&b.0));
                proptest::prop_assert_eq!(got.len(), want.len(), "{} at {}: {:?} vs {:?}", q, t, got, want);
                for (g, w) in got.iter().zip(&want) {
                    proptest::prop_assert_eq!(&g.0, &w.0, "{} at {}", q, t);
                    proptest::prop_assert!(g.1 == w.1 || (g.1.is_nan() && w.1.is_nan()), "{} at {}: {} vs {}", q, t, g.1, w.1);
                    proptest::prop_assert_eq!(&g.2, &w.2, "{} at {}", q, t);
                }
            }
        }
    }
}
