//! The engine against hand-computed answers, and range queries against instant queries at each step.

use crate::{PromqlError, Query, QueryOptions, QueryTime, Series, Value};
use heddle_model::{Labels, STALE_NAN_BITS, Sample};
use proptest::prelude::*;

mod deadlines;
mod histograms;
mod time_edges;

pub(super) fn labels(pairs: &[(&str, &str)]) -> Labels {
    Labels::from_unsorted(pairs.iter().copied()).unwrap()
}

fn series(pairs: &[(&str, &str)], samples: &[(i64, f64)]) -> Series {
    Series::floats(labels(pairs), samples.iter().map(|&(t, v)| Sample::new(t, v)).collect())
}

/// What the querier does: each selection gets the matching series, cut to its time range.
fn fetch(query: &Query, data: &[Series]) -> Vec<Vec<Series>> {
    query
        .selections()
        .iter()
        .map(|sel| {
            let mut out: Vec<Series> = data
                .iter()
                .filter(|s| {
                    sel.matchers
                        .iter()
                        .all(|m| m.matches(s.labels.get(m.name()).unwrap_or("")))
                })
                .map(|s| Series {
                    labels: s.labels.clone(),
                    samples: s
                        .samples
                        .iter()
                        .copied()
                        .filter(|x| x.t >= sel.start && x.t <= sel.end)
                        .collect(),
                    histograms: s
                        .histograms
                        .iter()
                        .filter(|x| x.t >= sel.start && x.t <= sel.end)
                        .cloned()
                        .collect(),
                })
                .filter(|s| !s.samples.is_empty() || !s.histograms.is_empty())
                .collect();
            out.sort_by(|a, b| a.labels.cmp(&b.labels));
            out
        })
        .collect()
}

pub(super) fn run_with(
    text: &str,
    time: QueryTime,
    data: &[Series],
    opts: &QueryOptions,
) -> Result<Value, PromqlError> {
    let query = Query::new(text, time, opts)?;
    let fetched = fetch(&query, data);
    query.evaluate(fetched, opts).map(|(v, _)| v)
}

pub(super) fn instant(text: &str, t: i64, data: &[Series]) -> Result<Value, PromqlError> {
    run_with(text, QueryTime::Instant(t), data, &QueryOptions::default())
}

/// An instant vector's `(labels text, value)` pairs, sorted by labels.
fn vector(v: Value) -> Vec<(String, f64)> {
    let Value::Vector(samples) = v else {
        panic!("not a vector: {v:?}")
    };
    let mut out: Vec<(String, f64)> = samples.into_iter().map(|s| (s.labels.to_string(), s.v)).collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn one(v: Value) -> f64 {
    let out = vector(v);
    assert_eq!(out.len(), 1, "{out:?}");
    out[0].1
}

fn close(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

pub(super) const S: i64 = 1000;
pub(super) const MIN: i64 = 60 * S;

/// A counter scraped every 15 s for 10 minutes, reset to 0 at 5 minutes.
fn counter() -> Vec<Series> {
    let samples: Vec<(i64, f64)> = (0..40)
        .map(|i| {
            let t = i * 15 * S;
            let v = if i < 20 {
                i as f64 * 10.0
            } else {
                (i - 20) as f64 * 10.0
            };
            (t, v)
        })
        .collect();
    vec![series(&[("__name__", "reqs"), ("job", "api")], &samples)]
}

#[test]
fn an_instant_selector_looks_back_five_minutes_inclusive_and_stops_at_a_staleness_marker() {
    let stale = f64::from_bits(STALE_NAN_BITS);
    let data = vec![
        series(&[("__name__", "g")], &[(0, 1.0), (15 * S, 2.0), (30 * S, 3.0)]),
        series(&[("__name__", "s")], &[(0, 1.0), (15 * S, stale)]),
    ];
    assert_eq!(one(instant("g", 40 * S, &data).unwrap()), 3.0);
    assert_eq!(one(instant("g", 30 * S + 5 * MIN, &data).unwrap()), 3.0);
    assert!(vector(instant("g", 30 * S + 5 * MIN + 1, &data).unwrap()).is_empty());
    assert_eq!(one(instant("s", 10 * S, &data).unwrap()), 1.0);
    assert!(
        vector(instant("s", 20 * S, &data).unwrap()).is_empty(),
        "stale after the marker"
    );
    // The marker is not a value inside a range either.
    assert_eq!(one(instant("count_over_time(s[1m])", 20 * S, &data).unwrap()), 1.0);
}

#[test]
fn rate_and_increase_correct_resets_and_extrapolate_like_prometheus() {
    let data = counter();
    // Window [4m, 6m] at 6m: samples 16..=24 (9 samples, 4m..6m), values 160,170,180,190,0,10,20,30,40.
    // Change with the reset corrected: 40 - 160 + 190 = 70 over 120 s sampled, samples on both edges.
    let inc = one(instant("increase(reqs[2m])", 6 * MIN, &data).unwrap());
    assert!(close(inc, 70.0), "{inc}");
    let rate = one(instant("rate(reqs[2m])", 6 * MIN, &data).unwrap());
    assert!(close(rate, 70.0 / 120.0), "{rate}");
    // A window that starts between samples extrapolates: [2m+5s, 3m+5s] holds 9..=12 (90..120 at 2m15..3m).
    // Sampled 45 s; 10 s to the start, 5 s to the end, both under 1.1 x 15 s: extrapolated over 60 s.
    let inc = one(instant("increase(reqs[1m])", 3 * MIN + 5 * S, &data).unwrap());
    assert!(close(inc, 30.0 * 60.0 / 45.0), "{inc}");
    assert_eq!(one(instant("resets(reqs[10m])", 10 * MIN, &data).unwrap()), 1.0);
    // The name goes, except for last_over_time.
    let v = instant("rate(reqs[1m])", 3 * MIN, &data).unwrap();
    assert_eq!(vector(v)[0].0, r#"{job="api"}"#);
    let v = instant("last_over_time(reqs[1m])", 3 * MIN, &data).unwrap();
    assert_eq!(vector(v)[0].0, r#"{__name__="reqs", job="api"}"#);
}

#[test]
fn offset_and_at_move_the_evaluation_time() {
    let data = counter();
    assert_eq!(one(instant("reqs offset 1m", 3 * MIN, &data).unwrap()), 80.0);
    assert_eq!(one(instant("reqs offset -1m", 3 * MIN, &data).unwrap()), 160.0);
    assert_eq!(one(instant("reqs @ 60", 9 * MIN, &data).unwrap()), 40.0);
    assert_eq!(one(instant("reqs @ 120 offset 1m", 9 * MIN, &data).unwrap()), 40.0);
    let opts = QueryOptions::default();
    let v = run_with(
        "reqs @ start()",
        QueryTime::Range {
            start: MIN,
            end: 3 * MIN,
            step: MIN,
        },
        &data,
        &opts,
    )
    .unwrap();
    let Value::Matrix(m) = v else { panic!() };
    assert_eq!(m.len(), 1);
    let vals: Vec<f64> = m[0].samples.iter().map(|s| s.v).collect();
    assert_eq!(vals, vec![40.0, 40.0, 40.0]);
}

#[test]
fn aggregations_group_by_labels_and_topk_orders_an_instant_result() {
    let data: Vec<Series> = (0..6)
        .map(|i| {
            let job = if i % 2 == 0 { "a" } else { "b" };
            let inst = i.to_string();
            series(
                &[("__name__", "m"), ("job", job), ("instance", &inst)],
                &[(0, i as f64)],
            )
        })
        .collect();
    let v = vector(instant("sum by (job) (m)", 0, &data).unwrap());
    assert_eq!(v, vec![(r#"{job="a"}"#.into(), 6.0), (r#"{job="b"}"#.into(), 9.0)]);
    let v = vector(instant("count without (instance) (m)", 0, &data).unwrap());
    assert_eq!(v, vec![(r#"{job="a"}"#.into(), 3.0), (r#"{job="b"}"#.into(), 3.0)]);
    assert_eq!(one(instant("quantile(0.5, m)", 0, &data).unwrap()), 2.5);
    assert!(close(
        one(instant("stddev(m)", 0, &data).unwrap()),
        (35.0f64 / 12.0).sqrt()
    ));
    let Value::Vector(top) = instant("topk(2, m)", 0, &data).unwrap() else {
        panic!()
    };
    let order: Vec<f64> = top.iter().map(|s| s.v).collect();
    assert_eq!(order, vec![5.0, 4.0]);
    assert_eq!(
        top[0].labels.get("__name__"),
        Some("m"),
        "topk keeps the series' labels"
    );
    let v = vector(instant("count_values(\"v\", m > 3)", 0, &data).unwrap());
    assert_eq!(v, vec![(r#"{v="4"}"#.into(), 1.0), (r#"{v="5"}"#.into(), 1.0)]);
}

#[test]
fn vector_matching_follows_on_ignoring_and_group_left() {
    let data = vec![
        series(&[("__name__", "req"), ("job", "a"), ("code", "200")], &[(0, 8.0)]),
        series(&[("__name__", "req"), ("job", "a"), ("code", "500")], &[(0, 2.0)]),
        series(&[("__name__", "total"), ("job", "a")], &[(0, 10.0)]),
        series(&[("__name__", "info"), ("job", "a"), ("team", "x")], &[(0, 1.0)]),
    ];
    let v = vector(instant("req / ignoring(code) group_left total", 0, &data).unwrap());
    assert_eq!(
        v,
        vec![
            (r#"{code="200", job="a"}"#.into(), 0.8),
            (r#"{code="500", job="a"}"#.into(), 0.2)
        ]
    );
    let v = vector(instant("req * on(job) group_left(team) info", 0, &data).unwrap());
    assert_eq!(v[0].0, r#"{code="200", job="a", team="x"}"#);
    let err = instant("req / ignoring(code) total", 0, &data).unwrap_err();
    assert!(
        err.to_string().contains("many-to-one matching must be explicit"),
        "{err}"
    );
    let err = instant("total / ignoring(code) req", 0, &data).unwrap_err();
    assert!(err.to_string().contains("many-to-many matching not allowed"), "{err}");
    assert_eq!(err.error_type(), "execution");
    let v = vector(instant("req > 5", 0, &data).unwrap());
    assert_eq!(v, vec![(r#"{__name__="req", code="200", job="a"}"#.into(), 8.0)]);
    let v = vector(instant("req > bool 5", 0, &data).unwrap());
    assert_eq!(v.len(), 2);
    let v = vector(instant("req and on(code) req{code=\"500\"}", 0, &data).unwrap());
    assert_eq!(v.len(), 1);
    let v = vector(instant("total or req", 0, &data).unwrap());
    assert_eq!(v.len(), 3);
    let v = vector(instant("req unless on(code) req{code=\"500\"}", 0, &data).unwrap());
    assert_eq!(v.len(), 1);
}

#[test]
fn strings_outside_selectors_are_not_taken_for_quoted_names() {
    let data = counter();
    let q = r#"label_replace(reqs{job="api"}, "a", "{,", "job", "(.*)") or label_join(reqs, "b", ",", "job")"#;
    assert_eq!(vector(instant(q, MIN, &data).unwrap()).len(), 2);
}

/// Prometheus 3's quoted names: the only way to select the UTF-8 names a tenant with the `utf8` name
/// validation scheme stores, in selectors, groupings and label functions alike.
#[test]
fn quoted_names_select_and_group_utf8_names() {
    let data = vec![
        series(
            &[
                ("__name__", "http.server.duration"),
                ("service.name", "a"),
                ("zone", "x"),
            ],
            &[(0, 1.0)],
        ),
        series(
            &[
                ("__name__", "http.server.duration"),
                ("service.name", "b"),
                ("zone", "x"),
            ],
            &[(0, 2.0)],
        ),
        series(&[("__name__", "up"), ("service.name", "a")], &[(0, 1.0)]),
    ];
    let cases: &[(&str, &[(&str, f64)])] = &[
        (
            r#"{"http.server.duration", "service.name"="a"}"#,
            &[(r#"{__name__="http.server.duration", service.name="a", zone="x"}"#, 1.0)],
        ),
        (
            r#"{"http.server.duration"}"#,
            &[
                (r#"{__name__="http.server.duration", service.name="a", zone="x"}"#, 1.0),
                (r#"{__name__="http.server.duration", service.name="b", zone="x"}"#, 2.0),
            ],
        ),
        (r#"{"up"}"#, &[(r#"{__name__="up", service.name="a"}"#, 1.0)]),
        (
            r#"up{"service.name"=~"a|c"}"#,
            &[(r#"{__name__="up", service.name="a"}"#, 1.0)],
        ),
        (
            r#"sum by ("service.name") ({"http.server.duration"})"#,
            &[(r#"{service.name="a"}"#, 1.0), (r#"{service.name="b"}"#, 2.0)],
        ),
        (
            r#"sum without ("service.name") ({"http.server.duration"})"#,
            &[(r#"{zone="x"}"#, 3.0)],
        ),
        (
            r#"label_replace(up, "service.tier", "$1", "service.name", "(.*)")"#,
            &[(r#"{__name__="up", service.name="a", service.tier="a"}"#, 1.0)],
        ),
        (r#"count_values("value.seen", up)"#, &[(r#"{value.seen="1"}"#, 1.0)]),
    ];
    for (q, want) in cases {
        let want: Vec<(String, f64)> = want.iter().map(|(l, v)| ((*l).to_owned(), *v)).collect();
        assert_eq!(vector(instant(q, 0, &data).unwrap()), want, "{q}");
    }
}

#[test]
fn functions_keep_prometheus_special_cases() {
    let data = vec![
        series(&[("__name__", "h_bucket"), ("le", "0.1")], &[(0, 10.0)]),
        series(&[("__name__", "h_bucket"), ("le", "1")], &[(0, 30.0)]),
        series(&[("__name__", "h_bucket"), ("le", "+Inf")], &[(0, 40.0)]),
        series(&[("__name__", "g"), ("src", "a-b")], &[(0, -2.5)]),
    ];
    // Rank 20 of 40 falls in (0.1, 1]: 10 of its 20 observations: halfway.
    assert!(close(
        one(instant("histogram_quantile(0.5, h_bucket)", 0, &data).unwrap()),
        0.55
    ));
    assert_eq!(
        one(instant("histogram_quantile(0.9, h_bucket)", 0, &data).unwrap()),
        1.0
    );
    let v = instant(r#"label_replace(g, "dst", "$2-$1", "src", "(.*)-(.*)")"#, 0, &data).unwrap();
    assert_eq!(vector(v)[0].0, r#"{__name__="g", dst="b-a", src="a-b"}"#);
    assert_eq!(one(instant("abs(g)", 0, &data).unwrap()), 2.5);
    assert_eq!(one(instant("round(g)", 0, &data).unwrap()), -2.0);
    assert_eq!(one(instant("clamp(g, -1, 1)", 0, &data).unwrap()), -1.0);
    assert!(vector(instant("clamp(g, 1, -1)", 0, &data).unwrap()).is_empty());
    assert_eq!(one(instant("sgn(g)", 0, &data).unwrap()), -1.0);
    // 2024-02-29T13:45:00Z
    let leap = 1_709_214_300.0;
    for (f, want) in [
        ("year", 2024.0),
        ("month", 2.0),
        ("day_of_month", 29.0),
        ("days_in_month", 29.0),
        ("day_of_week", 4.0),
        ("day_of_year", 60.0),
        ("hour", 13.0),
        ("minute", 45.0),
    ] {
        assert_eq!(
            one(instant(&format!("{f}(vector({leap}))"), 0, &data).unwrap()),
            want,
            "{f}"
        );
    }
    assert_eq!(
        vector(instant("absent(nope{job=\"x\"})", 0, &data).unwrap()),
        vec![(r#"{job="x"}"#.into(), 1.0)]
    );
    assert!(vector(instant("absent(g)", 0, &data).unwrap()).is_empty());
    let Value::Scalar { v, .. } = instant("scalar(g)", 0, &data).unwrap() else {
        panic!()
    };
    assert_eq!(v, -2.5);
}

#[test]
fn a_subquery_evaluates_its_expression_at_steps_aligned_to_its_step() {
    let data = counter();
    // reqs at 2m, 2m30, 3m (aligned to 30 s in [2m, 3m]): 80, 100, 120.
    assert_eq!(
        one(instant("max_over_time(reqs[1m:30s])", 3 * MIN, &data).unwrap()),
        120.0
    );
    assert_eq!(
        one(instant("count_over_time(reqs[1m:30s])", 3 * MIN, &data).unwrap()),
        3.0
    );
    assert_eq!(
        one(instant("min_over_time(reqs[1m:30s])", 3 * MIN + 10 * S, &data).unwrap()),
        100.0
    );
    let Value::Matrix(m) = instant("reqs[1m:30s]", 3 * MIN, &data).unwrap() else {
        panic!()
    };
    assert_eq!(
        m[0].samples.iter().map(|s| s.t).collect::<Vec<_>>(),
        vec![2 * MIN, 150 * S, 3 * MIN]
    );
}

#[test]
fn bad_queries_are_refused_with_prometheus_error_classes() {
    let data = counter();
    let opts = QueryOptions::default();
    let range = QueryTime::Range {
        start: 0,
        end: MIN,
        step: 15 * S,
    };
    for (q, ty) in [
        ("sum(", "bad_data"),
        ("rate(reqs)", "bad_data"),
        ("reqs[5m]", "bad_data"),
        ("\"text\"", "bad_data"),
        ("sort_by_label(reqs)", "bad_data"),
        ("{\"reqs\" \"job\"}", "bad_data"),
        ("reqs{\"job\"}", "bad_data"),
    ] {
        let err = run_with(q, range, &data, &opts).expect_err(q);
        assert_eq!(err.error_type(), ty, "{q}: {err}");
        assert_eq!(err.http_status(), 400, "{q}");
    }
    let tight = QueryOptions {
        max_samples: 8,
        ..QueryOptions::default()
    };
    let err = run_with("reqs", range, &data, &tight).unwrap_err();
    assert!(matches!(err, PromqlError::TooManySamples { limit: 8 }), "{err}");
    assert_eq!(err.http_status(), 422);
    // A subquery of a billion steps is refused before its steps are allocated.
    let err = run_with("count_over_time(reqs[12d:1ms])", QueryTime::Instant(MIN), &data, &opts).unwrap_err();
    assert!(matches!(err, PromqlError::TooManySamples { .. }), "{err}");
    let past = QueryOptions {
        deadline: Some(std::time::Instant::now()),
        ..QueryOptions::default()
    };
    let err = run_with("reqs", range, &data, &past).unwrap_err();
    assert_eq!(err.error_type(), "timeout");
}

#[test]
fn a_range_query_selects_each_selector_once_over_the_span_its_steps_read() {
    let opts = QueryOptions::default();
    let q = Query::new(
        "rate(a[5m]) + b offset 1m + max_over_time(c[10m:1m])",
        QueryTime::Range {
            start: 100 * MIN,
            end: 200 * MIN,
            step: MIN,
        },
        &opts,
    )
    .unwrap();
    let spans: Vec<(i64, i64)> = q.selections().iter().map(|s| (s.start, s.end)).collect();
    assert_eq!(
        spans,
        vec![
            (95 * MIN, 200 * MIN),
            (94 * MIN, 199 * MIN),
            // The subquery's steps from 90m to 200m, each looking back 5 minutes.
            (85 * MIN, 200 * MIN),
        ]
    );
    let q = Query::new("a / a + rate(a[1m]) / rate(a[1m])", QueryTime::Instant(MIN), &opts).unwrap();
    assert_eq!(
        q.selections().len(),
        2,
        "the same series over the same span are fetched once"
    );
}

/// Expressions whose range evaluation must agree with instant evaluation at every step.
const STEPWISE: &[&str] = &[
    "m",
    "m offset 30s",
    "rate(m[1m])",
    "irate(m[45s])",
    "delta(m[2m])",
    "deriv(m[2m])",
    "changes(m[3m])",
    "avg_over_time(m[1m])",
    "quantile_over_time(0.3, m[2m])",
    "sum by (k) (m)",
    "topk(1, m)",
    "m > 5",
    "m * on(k) group_left sum by (k) (m)",
    "max_over_time(m[2m:20s])",
    "rate(m[1m:15s])",
    "absent(m{k=\"none\"})",
    "time() - timestamp(m)",
    "m or vector(1)",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn range_queries_agree_with_instant_queries_at_every_step(
        values in proptest::collection::vec(proptest::collection::vec((0i64..4, -5.0f64..20.0), 0..30), 1..4),
        start in 0i64..240,
        steps in 1i64..12,
        step in 1i64..40,
    ) {
        // Series with irregular gaps: each sample 5-20 s after the previous one.
        let data: Vec<Series> = values.iter().enumerate().map(|(i, samples)| {
            let mut t = 0;
            let samples: Vec<(i64, f64)> = samples.iter().map(|&(gap, v)| { t += (gap + 1) * 5 * S; (t, v) }).collect();
            let k = (i % 2).to_string();
            let inst = i.to_string();
            series(&[("__name__", "m"), ("k", &k), ("i", &inst)], &samples)
        }).collect();
        let (start, step) = (start * S, step * S);
        let end = start + (steps - 1) * step;
        let opts = QueryOptions::default();
        for q in STEPWISE {
            let range = run_with(q, QueryTime::Range { start, end, step }, &data, &opts);
            let range = match range {
                Ok(Value::Matrix(m)) => m,
                Ok(other) => panic!("{q}: {other:?}"),
                // Matching errors depend on the data; the instant queries must then fail at some step too.
                Err(e) => {
                    let failed = (0..steps).any(|i| run_with(q, QueryTime::Instant(start + i * step), &data, &opts).is_err());
                    prop_assert!(failed, "{q}: range failed ({e}) but every step succeeds");
                    continue;
                }
            };
            for i in 0..steps {
                let t = start + i * step;
                let Ok(Value::Vector(at)) = run_with(q, QueryTime::Instant(t), &data, &opts) else { continue };
                let mut want: Vec<(String, f64)> = at.into_iter().map(|s| (s.labels.to_string(), s.v)).collect();
                want.sort_by(|a, b| a.0.cmp(&b.0));
                let mut got: Vec<(String, f64)> = range.iter().filter_map(|s| {
                    s.samples.iter().find(|x| x.t == t).map(|x| (s.labels.to_string(), x.v))
                }).collect();
                got.sort_by(|a, b| a.0.cmp(&b.0));
                prop_assert_eq!(got.len(), want.len(), "{} at {}: {:?} vs {:?}", q, t, got, want);
                for (g, w) in got.iter().zip(&want) {
                    prop_assert_eq!(&g.0, &w.0, "{} at {}", q, t);
                    prop_assert!(close(g.1, w.1), "{} at {}: {} vs {}", q, t, g.1, w.1);
                }
            }
        }
    }
}

#[test]
fn deeply_nested_and_long_queries_are_refused_quickly_not_a_stack_overflow() {
    for depth in [200usize, 1_000, 4_000, 200_000] {
        for q in [
            format!("{}1{}", "(".repeat(depth), ")".repeat(depth)),
            format!("up{}", " + up".repeat(depth)),
            format!("{}up", "-".repeat(depth)),
            format!("up{}", " or up".repeat(depth)),
        ] {
            // A thread's default 2 MiB, as the querier's runtime threads have.
            let started = std::time::Instant::now();
            let answer = std::thread::Builder::new()
                .stack_size(2 << 20)
                .spawn(move || instant(&q, 0, &[]).map_err(|e| (e.error_type(), e.to_string())))
                .unwrap()
                .join()
                .expect("no stack overflow");
            match answer {
                Ok(_) => assert!(depth < crate::query::MAX_DEPTH, "depth {depth} evaluated"),
                Err((ty, msg)) => {
                    assert_eq!(ty, "bad_data");
                    assert!(
                        ["nested", "operators", "bytes"].iter().any(|w| msg.contains(w)),
                        "{msg}"
                    );
                }
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "depth {depth}: {:?}",
                started.elapsed()
            );
        }
    }
    let long = format!("up{{job=~\"{}\"}}", "a|".repeat(300_000));
    let err = instant(&long, 0, &[]).unwrap_err();
    assert!(err.to_string().contains("bytes"), "{err}");
}
