//! Validation tests: the label and timestamp rules, then the stage over a whole request.

use super::*;
use crate::distributor::decode::decode;
use crate::distributor::tests::{StageSinks, distributor, push};
use crate::testutil::*;
use heddle_model::Sample;
use http::StatusCode;
use std::sync::Arc;

type Pairs<'a> = Vec<(&'a str, &'a str)>;
/// (case name, labels, expected error id or None for valid, has_empty_values)
type LabelCase<'a> = (&'a str, Pairs<'a>, Option<&'a str>, bool);
/// (case name, samples, expected (count, first timestamp) past the limit)
type FutureCase<'a> = (&'a str, Vec<Sample>, Option<(usize, i64)>);

fn labels<'a>(pairs: &[(&'a str, &'a str)]) -> Vec<LabelRef<'a>> {
    pairs.iter().map(|&(name, value)| LabelRef { name, value }).collect()
}

/// Decodes `body` with no in-flight budget to respect.
fn decode_unlimited<'a>(arena: &'a Bump, body: &[u8]) -> &'a [TimeSeriesRef<'a>] {
    decode(
        arena,
        body,
        crate::distributor::Framing::Snappy,
        crate::distributor::RemoteWriteVersion::V1,
        1 << 20,
        &mut crate::testutil::unlimited_reservation(),
    )
    .unwrap()
    .series
}

fn small_limits() -> Limits {
    Limits {
        max_label_names_per_series: 3,
        max_label_name_length: 8,
        max_label_value_length: 10,
        ..Limits::default()
    }
}

#[test]
fn label_rules_table() {
    let long_name = "abcdefghi"; // 9 > 8
    let long_value = "0123456789x"; // 11 > 10
    let cases: Vec<LabelCase<'_>> = vec![
        ("valid", vec![("__name__", "up"), ("job", "a")], None, false),
        ("valid metric name with colon", vec![("__name__", "a:b")], None, false),
        ("no labels", vec![], Some("err-heddle-missing-metric-name"), false),
        (
            "no metric name",
            vec![("job", "a")],
            Some("err-heddle-missing-metric-name"),
            false,
        ),
        (
            "empty metric name",
            vec![("__name__", ""), ("job", "a")],
            Some("err-heddle-missing-metric-name"),
            false,
        ),
        (
            "invalid metric name",
            vec![("__name__", "1up")],
            Some("err-heddle-invalid-metric-name"),
            false,
        ),
        (
            "too many labels",
            vec![("__name__", "up"), ("a", "1"), ("b", "2"), ("c", "3")],
            Some("err-heddle-max-label-names-per-series"),
            false,
        ),
        (
            "empty values do not count toward the label limit",
            vec![("__name__", "up"), ("a", "1"), ("b", ""), ("c", "3")],
            None,
            true,
        ),
        (
            "invalid label name",
            vec![("__name__", "up"), ("a-b", "1")],
            Some("err-heddle-invalid-label"),
            false,
        ),
        (
            "empty label name",
            vec![("", "x"), ("__name__", "up")],
            Some("err-heddle-invalid-label"),
            false,
        ),
        (
            "label name too long",
            vec![("__name__", "up"), (long_name, "1")],
            Some("err-heddle-label-name-too-long"),
            false,
        ),
        (
            "label value too long",
            vec![("__name__", "up"), ("a", long_value)],
            Some("err-heddle-label-value-too-long"),
            false,
        ),
        (
            "metric name counts as a value",
            vec![("__name__", "up_up_up_up")],
            Some("err-heddle-label-value-too-long"),
            false,
        ),
        (
            "duplicate names",
            vec![("__name__", "up"), ("a", "1"), ("a", "2")],
            Some("err-heddle-duplicate-label-names"),
            false,
        ),
        (
            "not sorted",
            vec![("__name__", "up"), ("b", "1"), ("a", "2")],
            Some("err-heddle-labels-not-sorted"),
            false,
        ),
        (
            "not sorted around name",
            vec![("job", "a"), ("__name__", "up")],
            Some("err-heddle-labels-not-sorted"),
            false,
        ),
        (
            "empty-valued label out of order is ignored",
            vec![("__name__", "up"), ("z", ""), ("a", "1")],
            None,
            true,
        ),
        (
            "empty-valued duplicate is ignored",
            vec![("__name__", "up"), ("a", ""), ("a", "1")],
            None,
            true,
        ),
    ];
    for (name, pairs, want, empty) in cases {
        let got = validate_labels(&labels(&pairs), &small_limits());
        match (want, got) {
            (None, Ok(check)) => assert_eq!(check.has_empty_values, empty, "case {name}"),
            (Some(id), Err(e)) => {
                assert_eq!(e.id(), id, "case {name}: {e}");
                assert!(!e.remedy().is_empty(), "case {name}");
            }
            (want, got) => panic!("case {name}: wanted {want:?}, got {got:?}"),
        }
    }
}

#[test]
fn the_utf8_scheme_accepts_any_non_empty_name_and_keeps_every_other_check() {
    let utf8 = |limits: Limits| Limits {
        name_validation_scheme: heddle_limits::NameValidationScheme::Utf8,
        ..limits
    };
    let dotted = vec![
        ("__name__", "http.server.duration"),
        ("service.name", "api"),
        ("é", "1"),
    ];
    validate_labels(&labels(&dotted), &utf8(Limits::default())).expect("utf8 names are accepted");
    let e = validate_labels(&labels(&dotted), &Limits::default()).expect_err("legacy refuses a dotted metric name");
    assert_eq!(e.id(), "err-heddle-invalid-metric-name");
    assert!(
        e.remedy().contains("limits.name_validation_scheme: utf8"),
        "{}",
        e.remedy()
    );
    let e = validate_labels(
        &labels(&[("__name__", "up"), ("service.name", "api")]),
        &Limits::default(),
    )
    .expect_err("legacy refuses a dotted label name");
    assert_eq!(e.to_string(), r#"invalid label name "service.name""#);
    let cases: Vec<(&str, Pairs<'_>, &str)> = vec![
        (
            "duplicate",
            vec![("__name__", "a.b"), ("x.y", "1"), ("x.y", "2")],
            "err-heddle-duplicate-label-names",
        ),
        (
            "unsorted",
            vec![("__name__", "a.b"), ("y.z", "1"), ("x.y", "2")],
            "err-heddle-labels-not-sorted",
        ),
        (
            "name too long",
            vec![("__name__", "a.b"), ("abcdefgh.i", "1")],
            "err-heddle-label-name-too-long",
        ),
        (
            "value too long",
            vec![("__name__", "a.b"), ("a.b", "0123456789x")],
            "err-heddle-label-value-too-long",
        ),
        (
            "too many",
            vec![("__name__", "a.b"), ("a", "1"), ("b", "2"), ("c", "3")],
            "err-heddle-max-label-names-per-series",
        ),
        ("no name", vec![("a.b", "1")], "err-heddle-missing-metric-name"),
    ];
    for (name, pairs, id) in cases {
        let e = validate_labels(&labels(&pairs), &utf8(small_limits())).expect_err(name);
        assert_eq!(e.id(), id, "case {name}: {e}");
    }
}

#[test]
fn limits_are_named_in_remedies() {
    let cases: Vec<(&str, Pairs<'_>, &str)> = vec![
        (
            "count",
            vec![("__name__", "up"), ("a", "1"), ("b", "2"), ("c", "3")],
            "limits.max_label_names_per_series",
        ),
        (
            "name length",
            vec![("__name__", "up"), ("abcdefghi", "1")],
            "limits.max_label_name_length",
        ),
        (
            "value length",
            vec![("__name__", "up"), ("a", "0123456789x")],
            "limits.max_label_value_length",
        ),
    ];
    for (name, pairs, key) in cases {
        let e = validate_labels(&labels(&pairs), &small_limits()).expect_err(name);
        let remedy = e.remedy();
        assert!(remedy.contains(key), "case {name}: {remedy}");
        assert!(remedy.contains("the limit is"), "case {name}: {remedy}");
    }
}

#[test]
fn future_timestamps() {
    let s = |t| Sample { t, v: 1.0 };
    let cases: Vec<FutureCase<'_>> = vec![
        ("none", vec![], None),
        ("all ok", vec![s(1), s(1000)], None),
        ("at the limit is ok", vec![s(1000)], None),
        ("one past", vec![s(1), s(1001)], Some((1, 1001))),
        ("several past", vec![s(2000), s(5), s(3000)], Some((2, 2000))),
    ];
    for (name, samples, want) in cases {
        let window = TimeWindow {
            min_ms: i64::MIN,
            max_ms: 1000,
        };
        let got = check_timestamps(samples.iter().map(|s| s.t), window)
            .into_iter()
            .next()
            .map(|e| match e {
                InvalidSeries::TooFarInFuture {
                    count,
                    timestamp_ms,
                    max_ms,
                } => {
                    assert_eq!(max_ms, 1000, "case {name}");
                    (count, timestamp_ms)
                }
                other => panic!("case {name}: unexpected {other:?}"),
            });
        assert_eq!(got, want, "case {name}");
    }
}

#[test]
fn stage_keeps_valid_series_and_marks_the_ones_to_rewrite() {
    let sinks = StageSinks::new();
    let grace = Limits::default().creation_grace_period.as_millis() as i64;
    let sent = vec![
        up("plain"),
        series(&[("job", "a")], &[(NOW_MS, 1.0), (NOW_MS, 2.0)]),
        series(&[("__name__", "empty"), ("e", ""), ("job", "a")], &[(NOW_MS, 1.0)]),
        series(
            &[("__name__", "ha"), ("__replica__", "r1"), ("job", "a")],
            &[(NOW_MS, 1.0)],
        ),
        series(&[("__name__", "future")], &[(NOW_MS, 1.0), (NOW_MS + grace + 1, 2.0)]),
        series(&[("__name__", "all_future")], &[(NOW_MS + grace + 1, 2.0)]),
    ];
    let arena = Bump::new();
    let decoded = decode_unlimited(&arena, &body(sent));
    let v = validate(
        &arena,
        &Limits::default(),
        decoded,
        Some("__replica__"),
        false,
        NOW_MS,
        sinks.discards(),
    );
    assert_eq!(v.window.max_ms, NOW_MS + grace);
    assert_eq!(v.window.min_ms, i64::MIN, "the past grace period is off by default");
    let kept: Vec<(&str, u64, bool)> = v
        .accepted
        .iter()
        .map(|a| (a.labels[0].value, a.samples, a.rewrite))
        .collect();
    assert_eq!(
        kept,
        vec![
            ("plain", 1, false),
            ("empty", 1, true),
            ("ha", 1, true),
            ("future", 1, true)
        ]
    );
    assert!(
        v.accepted[2].labels.iter().all(|l| l.name != "__replica__"),
        "the replica label is dropped"
    );
    assert_eq!(v.samples, 4);
    let reasons: Vec<&str> = v.rejections.iter().map(|r| r.reason.as_str()).collect();
    assert_eq!(
        reasons,
        vec![
            "err-heddle-missing-metric-name",
            "err-heddle-too-far-in-future",
            "err-heddle-too-far-in-future"
        ]
    );
    let text = exposition(&sinks.registry);
    assert!(
        text.contains(r#"heddle_discarded_samples_total{tenant="team-a",reason="err-heddle-too-far-in-future"} 2"#),
        "{text}"
    );
}

#[tokio::test]
async fn invalid_series_are_dropped_and_valid_ones_forwarded() {
    let fake = fake(Behavior::Accept);
    let (d, registry) = distributor(Arc::new(single(fake.clone())));
    let no_name = series(&[("job", "a")], &[(NOW_MS, 1.0), (NOW_MS, 2.0)]);
    let outcome = push(&d, vec![up("ok_1"), no_name, up("ok_2")]).await.unwrap();
    assert_eq!(outcome.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        outcome.rejections[0].message,
        "err-heddle-missing-metric-name: series has no metric name (tenant=team-a, series={job=\"a\"}): every \
         series needs a non-empty `__name__` label"
    );
    assert_eq!(fake.pushed_series(), vec![up("ok_1"), up("ok_2")]);
    let text = exposition(&registry);
    assert!(
        text.contains(r#"heddle_discarded_samples_total{tenant="team-a",reason="err-heddle-missing-metric-name"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(r#"heddle_distributor_requests_total{status="400"} 1"#),
        "{text}"
    );
    assert!(
        text.contains("heddle_distributor_request_duration_seconds_count 1"),
        "{text}"
    );
    let sent = body(vec![
        up("ok_1"),
        series(&[("job", "a")], &[(NOW_MS, 1.0), (NOW_MS, 2.0)]),
        up("ok_2"),
    ])
    .len();
    assert!(
        text.contains(&format!("heddle_distributor_received_bytes_total {sent}")),
        "{text}"
    );
}

/// `limits.past_grace_period` (Mimir's `-validation.past-grace-period`): older samples are refused with their
/// id and a message naming the bound and the flag; 0 (the default) accepts any age, even `i64::MIN`; a series
/// with samples on both sides of the window gets both refusals and keeps the samples inside.
#[test]
fn past_grace_period() {
    let hour = 3_600_000;
    let limits = Limits {
        past_grace_period: std::time::Duration::from_secs(3600),
        ..Limits::default()
    };
    let window = TimeWindow::of(&limits, NOW_MS);
    assert_eq!(window.min_ms, NOW_MS - hour);
    assert_eq!(TimeWindow::of(&Limits::default(), NOW_MS).min_ms, i64::MIN);
    assert!(TimeWindow::of(&Limits::default(), NOW_MS).contains(i64::MIN));
    let far = Limits {
        past_grace_period: std::time::Duration::MAX,
        creation_grace_period: std::time::Duration::MAX,
        ..Limits::default()
    };
    let w = TimeWindow::of(&far, NOW_MS);
    assert_eq!(
        (w.min_ms, w.max_ms),
        (NOW_MS.saturating_sub(i64::MAX), i64::MAX),
        "saturates, never panics"
    );

    let sinks = StageSinks::new();
    let sent = vec![
        series(&[("__name__", "old")], &[(i64::MIN, 1.0), (NOW_MS - hour - 1, 2.0)]),
        series(
            &[("__name__", "both")],
            &[(NOW_MS - hour - 1, 1.0), (NOW_MS, 2.0), (i64::MAX, 3.0)],
        ),
        series(&[("__name__", "edge")], &[(NOW_MS - hour, 1.0)]),
    ];
    let arena = Bump::new();
    let decoded = decode_unlimited(&arena, &body(sent));
    let v = validate(&arena, &limits, decoded, None, false, NOW_MS, sinks.discards());
    let kept: Vec<(&str, u64, bool)> = v
        .accepted
        .iter()
        .map(|a| (a.labels[0].value, a.samples, a.rewrite))
        .collect();
    assert_eq!(kept, vec![("both", 1, true), ("edge", 1, false)]);
    let reasons: Vec<&str> = v.rejections.iter().map(|r| r.reason.as_str()).collect();
    assert_eq!(
        reasons,
        vec![
            "err-heddle-sample-too-far-in-past",
            "err-heddle-too-far-in-future",
            "err-heddle-sample-too-far-in-past"
        ]
    );
    let m = &v.rejections[0].message;
    assert!(m.starts_with("err-heddle-sample-too-far-in-past: 2 samples"), "{m}");
    assert!(m.contains(&format!("first: {} ms", i64::MIN)), "{m}");
    assert!(
        m.contains(&format!("oldest accepted timestamp is {} ms", NOW_MS - hour)),
        "{m}"
    );
    assert!(m.contains("--validation.past-grace-period"), "{m}");
}

#[test]
fn exemplars_are_checked_in_mimirs_order() {
    let long_value = "é".repeat(121);
    let at_limit_value = "é".repeat(120);
    let trace = labels(&[("trace_id", "abc")]);
    let long = labels(&[("trace_id", long_value.as_str())]);
    let at_limit = labels(&[("trace_id", at_limit_value.as_str())]);
    let e = |labels: &[LabelRef<'_>], t: i64| {
        super::validate_exemplar(&heddle_model::ExemplarRef { labels, value: 1.0, t })
            .err()
            .map(|e| e.id())
    };
    let cases: &[(&str, Option<&str>, Option<&str>)] = &[
        ("valid", e(&trace, 5), None),
        ("128 characters (256 bytes)", e(&at_limit, 5), None),
        ("no labels", e(&[], 5), Some("err-heddle-exemplar-labels-missing")),
        (
            "no labels and no timestamp",
            e(&[], 0),
            Some("err-heddle-exemplar-labels-missing"),
        ),
        (
            "no timestamp",
            e(&trace, 0),
            Some("err-heddle-exemplar-timestamp-invalid"),
        ),
        (
            "129 characters",
            e(&long, 5),
            Some("err-heddle-exemplar-labels-too-long"),
        ),
    ];
    for (name, got, want) in cases {
        assert_eq!(got, want, "case {name}");
    }
}
