//! Per-series validation: label rules and limits, and sample timestamps.
//!
//! Labels with an empty value are treated as absent, as Mimir does (it strips them before validating) and as
//! Prometheus' own TSDB does (an empty value means "no such label"). They are ignored by every check here
//! and removed from the series before it is forwarded. The remote-write spec says senders must not send
//! them, but refusing the series would lose data a Prometheus/Mimir user expects to be kept.

use crate::error::InvalidSeries;
use heddle_limits::Limits;
use heddle_model::{LabelRef, METRIC_NAME, Sample, is_valid_label_name, is_valid_metric_name};
use std::cmp::Ordering;
use std::fmt::Write as _;

/// Longest label name or value quoted in an error message; longer ones are cut (the length is reported).
const MAX_QUOTED: usize = 128;
/// Longest series text in an error message.
const MAX_SERIES_TEXT: usize = 1024;

/// What validation learned about a valid series' labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LabelCheck {
    /// Some labels have empty values; they must be stripped before forwarding.
    pub has_empty_values: bool,
}

/// Checks a series' labels in Mimir's order: metric name present and valid, label count, then each label's
/// name, name length, value length, and its order relative to the previous one.
pub(crate) fn validate_labels(labels: &[LabelRef<'_>], limits: &Limits) -> Result<LabelCheck, InvalidSeries> {
    let mut metric_name = None;
    let mut count = 0usize;
    let mut has_empty_values = false;
    for l in labels {
        if l.value.is_empty() {
            has_empty_values = true;
            continue;
        }
        count += 1;
        if metric_name.is_none() && l.name == METRIC_NAME {
            metric_name = Some(l.value);
        }
    }
    let Some(metric_name) = metric_name else {
        return Err(InvalidSeries::MissingMetricName);
    };
    if !is_valid_metric_name(metric_name) {
        return Err(InvalidSeries::InvalidMetricName {
            name: quoted(metric_name),
        });
    }
    if count > limits.max_label_names_per_series {
        return Err(InvalidSeries::TooManyLabels {
            count,
            limit: limits.max_label_names_per_series,
        });
    }
    let mut prev: Option<&str> = None;
    for l in labels.iter().filter(|l| !l.value.is_empty()) {
        if !is_valid_label_name(l.name) {
            return Err(InvalidSeries::InvalidLabelName { name: quoted(l.name) });
        }
        if l.name.len() > limits.max_label_name_length {
            return Err(InvalidSeries::LabelNameTooLong {
                name: quoted(l.name),
                len: l.name.len(),
                limit: limits.max_label_name_length,
            });
        }
        if l.value.len() > limits.max_label_value_length {
            return Err(InvalidSeries::LabelValueTooLong {
                name: quoted(l.name),
                len: l.value.len(),
                limit: limits.max_label_value_length,
            });
        }
        if let Some(p) = prev {
            match p.cmp(l.name) {
                Ordering::Less => {}
                Ordering::Equal => return Err(InvalidSeries::DuplicateLabelNames { name: quoted(l.name) }),
                Ordering::Greater => {
                    return Err(InvalidSeries::LabelsNotSorted {
                        prev: quoted(p),
                        next: quoted(l.name),
                    });
                }
            }
        }
        prev = Some(l.name);
    }
    Ok(LabelCheck { has_empty_values })
}

/// The samples whose timestamp is past `max_ms` (now + creation grace period), as an error, or `None`.
pub(crate) fn check_timestamps(samples: &[Sample], max_ms: i64) -> Option<InvalidSeries> {
    let mut future = samples.iter().filter(|s| s.t > max_ms);
    let first = future.next()?;
    Some(InvalidSeries::TooFarInFuture {
        count: 1 + future.count(),
        timestamp_ms: first.t,
        max_ms,
    })
}

/// Prometheus' text form of a series for messages, `{__name__="up", job="a"}`, without empty-valued labels,
/// with long values cut and the whole capped at ~1 KiB.
pub(crate) fn series_text(labels: &[LabelRef<'_>]) -> String {
    let mut out = String::from("{");
    let kept: Vec<&LabelRef<'_>> = labels.iter().filter(|l| !l.value.is_empty()).collect();
    for (i, l) in kept.iter().enumerate() {
        if out.len() > MAX_SERIES_TEXT {
            let _ = write!(out, ", …{} more labels", kept.len() - i);
            break;
        }
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{}={:?}", quoted(l.name), quoted(l.value));
    }
    out.push('}');
    out
}

/// `s` cut to at most [`MAX_QUOTED`] bytes on a character boundary, marked when cut.
fn quoted(s: &str) -> String {
    if s.len() <= MAX_QUOTED {
        return s.to_owned();
    }
    let mut end = MAX_QUOTED;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    type Pairs<'a> = Vec<(&'a str, &'a str)>;
    /// (case name, labels, expected error id or None for valid, has_empty_values)
    type LabelCase<'a> = (&'a str, Pairs<'a>, Option<&'a str>, bool);
    /// (case name, samples, expected (count, first timestamp) past the limit)
    type FutureCase<'a> = (&'a str, Vec<Sample>, Option<(usize, i64)>);

    fn labels<'a>(pairs: &[(&'a str, &'a str)]) -> Vec<LabelRef<'a>> {
        pairs.iter().map(|&(name, value)| LabelRef { name, value }).collect()
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
            let got = check_timestamps(&samples, 1000).map(|e| match e {
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
    fn series_text_is_bounded_and_skips_empty_values() {
        assert_eq!(
            series_text(&labels(&[("__name__", "up"), ("e", ""), ("job", "a\"b")])),
            r#"{__name__="up", job="a\"b"}"#
        );
        let long = "é".repeat(200);
        let text = series_text(&labels(&[("__name__", &long)]));
        assert!(text.len() < 200, "{text}");
        assert!(text.ends_with("…\"}"), "{text}");
        let many: Vec<(String, String)> = (0..500).map(|i| (format!("l{i:03}"), "v".repeat(20))).collect();
        let refs: Vec<LabelRef<'_>> = many.iter().map(|(n, v)| LabelRef { name: n, value: v }).collect();
        let text = series_text(&refs);
        assert!(text.len() < MAX_SERIES_TEXT + 200, "{}", text.len());
        assert!(text.contains("more labels"), "{text}");
    }
}
