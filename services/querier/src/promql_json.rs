//! A query's answer as Prometheus' HTTP API writes it:
//! `{"status":"success","data":{"resultType":...,"result":...,"stats":...}}`.
//!
//! Written by hand rather than through `serde_json::Value`: timestamps are seconds with exactly the
//! milliseconds they hold (`1700000000.5`, never a float's approximation of it), values are strings in Go's
//! float format (`"NaN"`, `"+Inf"`), and a large matrix is written once, not first built as a tree.

use crate::engine::{Answer, Timings};
use heddle_model::{FloatHistogram, Labels, Sample};
use heddle_promql::{Stats, Value, api_float, go_format_float, write_histogram_json};
use std::fmt::Write;

/// The success body of a `query` or `query_range` answer; with `stats`, Prometheus' `stats` block too.
pub(crate) fn query_body(answer: &Answer, with_stats: bool) -> String {
    let mut out = String::from(r#"{"status":"success","data":{"resultType":""#);
    out.push_str(answer.value.type_name());
    out.push_str(r#"","result":"#);
    match &answer.value {
        Value::Scalar { t, v } => point(&mut out, *t, &go_format_float(*v)),
        Value::String { t, s } => point(&mut out, *t, s),
        Value::Vector(samples) => {
            out.push('[');
            for (i, s) in samples.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(r#"{"metric":"#);
                labels(&mut out, &s.labels);
                match &s.h {
                    Some(h) => {
                        out.push_str(r#","histogram":"#);
                        histogram_point(&mut out, s.t, h);
                    }
                    None => {
                        out.push_str(r#","value":"#);
                        point(&mut out, s.t, &api_float(s.v));
                    }
                }
                out.push('}');
            }
            out.push(']');
        }
        Value::Matrix(series) => {
            out.push('[');
            for (i, s) in series.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(r#"{"metric":"#);
                labels(&mut out, &s.labels);
                // As Prometheus: each key only when the series has points of that kind.
                if !s.samples.is_empty() || s.histograms.is_empty() {
                    out.push_str(r#","values":"#);
                    points(&mut out, &s.samples);
                }
                if !s.histograms.is_empty() {
                    out.push_str(r#","histograms":["#);
                    for (i, p) in s.histograms.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        histogram_point(&mut out, p.t, &p.h);
                    }
                    out.push(']');
                }
                out.push('}');
            }
            out.push(']');
        }
    }
    if with_stats {
        out.push_str(r#","stats":"#);
        stats(&mut out, &answer.stats, &answer.timings);
    }
    out.push_str("}}");
    out
}

fn point(out: &mut String, t: i64, value: &str) {
    out.push('[');
    seconds(out, t);
    out.push(',');
    string(out, value);
    out.push(']');
}

/// `[t, {"count":..,"sum":..,"buckets":[..]}]`, a native histogram point as Prometheus' API writes it.
fn histogram_point(out: &mut String, t: i64, h: &FloatHistogram) {
    out.push('[');
    seconds(out, t);
    out.push(',');
    write_histogram_json(out, h);
    out.push(']');
}

fn points(out: &mut String, samples: &[Sample]) {
    out.push('[');
    for (i, s) in samples.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        point(out, s.t, &api_float(s.v));
    }
    out.push(']');
}

/// Milliseconds as a JSON number of seconds, as Prometheus writes them (`1700000000`, `1700000000.5`,
/// `-1.25`): exact, without trailing zeros.
pub(crate) fn seconds(out: &mut String, ms: i64) {
    if ms < 0 {
        out.push('-');
    }
    let abs = ms.unsigned_abs();
    let _ = write!(out, "{}", abs / 1000);
    let frac = abs % 1000;
    if frac != 0 {
        let digits = format!("{frac:03}");
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
}

/// A label set as a JSON object in label order.
fn labels(out: &mut String, labels: &Labels) {
    out.push('{');
    for (i, l) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        string(out, l.name);
        out.push(':');
        string(out, l.value);
    }
    out.push('}');
}

/// A JSON string, escaped by serde_json.
fn string(out: &mut String, s: &str) {
    // Serializing a `str` cannot fail.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

/// Prometheus' `stats` block (`stats=all`): timings in seconds and the engine's sample counts, keys in
/// Prometheus' order.
fn stats(out: &mut String, stats: &Stats, t: &Timings) {
    let eval_total = t.prepare + t.eval;
    let _ = write!(
        out,
        r#"{{"timings":{{"evalTotalTime":{},"resultSortTime":0,"queryPreparationTime":{},"innerEvalTime":{},"execQueueTime":{},"execTotalTime":{}}},"samples":{{"totalQueryableSamples":{},"peakSamples":{}}}}}"#,
        eval_total.as_secs_f64(),
        t.prepare.as_secs_f64(),
        t.eval.as_secs_f64(),
        t.queue.as_secs_f64(),
        (t.queue + eval_total).as_secs_f64(),
        stats.total_queryable_samples,
        stats.peak_samples,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use heddle_promql::{HistogramPoint, InstantSample, RangeSeries};

    /// A zero bucket of 1 and 3 observations in (1, 2].
    fn histogram() -> FloatHistogram {
        FloatHistogram {
            schema: 0,
            zero_threshold: 0.001,
            zero_count: 1.0,
            count: 4.0,
            sum: 10.5,
            positive_spans: vec![heddle_model::Span::new(1, 1)],
            positive_buckets: vec![3.0],
            ..FloatHistogram::default()
        }
    }

    fn answer(value: Value) -> Answer {
        Answer {
            value,
            stats: Stats::default(),
            timings: Timings::default(),
        }
    }

    #[test]
    fn sample_values_switch_to_exponents_where_prometheus_does() {
        for (v, want) in [
            (1e21, "1e+21"),
            (1.5e-7, "1.5e-07"),
            (-2.5e300, "-2.5e+300"),
            (1e-6, "0.000001"),
            (999_999_999_999.5, "999999999999.5"),
            (0.0, "0"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Inf"),
        ] {
            assert_eq!(api_float(v), want, "{v}");
        }
    }

    #[test]
    fn seconds_are_exact() {
        let cases = [
            ("whole", 1_700_000_000_000, "1700000000"),
            ("half", 1_700_000_000_500, "1700000000.5"),
            ("millis", 1_700_000_000_123, "1700000000.123"),
            ("tens of ms", 1_700_000_000_120, "1700000000.12"),
            ("one ms", 1, "0.001"),
            ("zero", 0, "0"),
            ("negative", -1_250, "-1.25"),
            ("negative under a second", -5, "-0.005"),
        ];
        for (name, ms, want) in cases {
            let mut out = String::new();
            seconds(&mut out, ms);
            assert_eq!(out, want, "case {name}");
            let back: f64 = serde_json::from_str(&out).unwrap();
            assert_eq!((back * 1000.0).round() as i64, ms, "case {name} reads back");
        }
    }

    #[test]
    fn every_result_type() {
        let l = Labels::from_unsorted([("__name__", "up"), ("job", "a\"b")]).unwrap();
        let cases = [
            (
                "scalar",
                Value::Scalar {
                    t: 1_500,
                    v: f64::INFINITY,
                },
                r#"{"resultType":"scalar","result":[1.5,"+Inf"]}"#,
            ),
            (
                "string",
                Value::String {
                    t: 2_000,
                    s: "x\ny".into(),
                },
                r#"{"resultType":"string","result":[2,"x\ny"]}"#,
            ),
            (
                "vector",
                Value::Vector(vec![InstantSample {
                    labels: l.clone(),
                    t: 1_700_000_000_500,
                    v: f64::NAN,
                    h: None,
                }]),
                r#"{"resultType":"vector","result":[{"metric":{"__name__":"up","job":"a\"b"},"value":[1700000000.5,"NaN"]}]}"#,
            ),
            (
                "empty vector",
                Value::Vector(vec![]),
                r#"{"resultType":"vector","result":[]}"#,
            ),
            (
                "matrix",
                Value::Matrix(vec![RangeSeries {
                    labels: l.clone(),
                    samples: vec![Sample::new(0, 1.0), Sample::new(30_000, -0.25)],
                    histograms: vec![],
                }]),
                r#"{"resultType":"matrix","result":[{"metric":{"__name__":"up","job":"a\"b"},"values":[[0,"1"],[30,"-0.25"]]}]}"#,
            ),
            (
                "vector of a histogram",
                Value::Vector(vec![InstantSample {
                    labels: l.clone(),
                    t: 1_000,
                    v: 0.0,
                    h: Some(Box::new(histogram())),
                }]),
                r#"{"resultType":"vector","result":[{"metric":{"__name__":"up","job":"a\"b"},"histogram":[1,{"count":"4","sum":"10.5","buckets":[[3,"-0.001","0.001","1"],[0,"1","2","3"]]}]}]}"#,
            ),
            (
                "matrix of histograms",
                Value::Matrix(vec![RangeSeries {
                    labels: l.clone(),
                    samples: vec![],
                    histograms: vec![
                        HistogramPoint::new(0, histogram()),
                        HistogramPoint::new(15_000, histogram()),
                    ],
                }]),
                r#"{"resultType":"matrix","result":[{"metric":{"__name__":"up","job":"a\"b"},"histograms":[[0,{"count":"4","sum":"10.5","buckets":[[3,"-0.001","0.001","1"],[0,"1","2","3"]]}],[15,{"count":"4","sum":"10.5","buckets":[[3,"-0.001","0.001","1"],[0,"1","2","3"]]}]]}]}"#,
            ),
            (
                "matrix of a series that switched kinds",
                Value::Matrix(vec![RangeSeries {
                    labels: l,
                    samples: vec![Sample::new(0, 1.0)],
                    histograms: vec![HistogramPoint::new(15_000, histogram())],
                }]),
                r#"{"resultType":"matrix","result":[{"metric":{"__name__":"up","job":"a\"b"},"values":[[0,"1"]],"histograms":[[15,{"count":"4","sum":"10.5","buckets":[[3,"-0.001","0.001","1"],[0,"1","2","3"]]}]]}]}"#,
            ),
        ];
        for (name, value, data) in cases {
            let body = query_body(&answer(value), false);
            assert_eq!(body, format!(r#"{{"status":"success","data":{data}}}"#), "case {name}");
            serde_json::from_str::<serde_json::Value>(&body).unwrap_or_else(|e| panic!("case {name}: {e}"));
        }
    }

    #[test]
    fn stats_block_in_prometheus_order() {
        let a = Answer {
            value: Value::Scalar { t: 0, v: 1.0 },
            stats: Stats {
                total_queryable_samples: 7,
                peak_samples: 9,
            },
            timings: Timings {
                queue: std::time::Duration::from_millis(1),
                prepare: std::time::Duration::from_millis(20),
                eval: std::time::Duration::from_micros(2500),
            },
        };
        assert_eq!(
            query_body(&a, true),
            r#"{"status":"success","data":{"resultType":"scalar","result":[0,"1"],"stats":{"timings":{"evalTotalTime":0.0225,"resultSortTime":0,"queryPreparationTime":0.02,"innerEvalTime":0.0025,"execQueueTime":0.001,"execTotalTime":0.0235},"samples":{"totalQueryableSamples":7,"peakSamples":9}}}}"#
        );
    }
}
