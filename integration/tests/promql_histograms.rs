//! PromQL over native histograms, with a real Prometheus 2.42 (`--enable-feature=native-histograms`) as the
//! judge: the same remote-write requests go to both, then the queries below run as instant queries at several
//! times and as a range query on both, and heddle's answers must equal Prometheus' (series by label set,
//! timestamps, float values and every histogram's count, sum and buckets, bounds included, to 1e-9 relative).
//!
//! The queries are those whose meaning Prometheus 3 did not change since 2.42 (heddle follows 3, see
//! `docs/ARCHITECTURE.md`): the raw histograms, their count and sum, `rate`, `increase` and `sum` of counters
//! with a reset. Quantiles and fractions interpolate inside a bucket differently since 2.42, so they are
//! checked by the engine's unit tests against Prometheus 3's rules instead.
//!
//! Needs `/usr/bin/prometheus` (Debian package `prometheus`; `PROMETHEUS_BIN` overrides the path). Without it the
//! test skips, unless `CI` is set.

#[path = "promql/api.rs"]
#[allow(dead_code)] // The oracle's API client, of which this test needs a part.
mod api;

use api::{Answer, Api, Prometheus, secs, write_all};
use heddle_proto::prometheus::{BucketSpan, Histogram, TimeSeries, WriteRequest, histogram};
use heddle_testkit::{HeddleOptions, HeddleProcess, http_client, now_ms, prometheus_tool, timeseries};
use serde_json::Value;
use std::time::Duration;

const STEP_MS: i64 = 15_000;
const SCRAPES: i64 = 240;

/// An integer counter histogram of series `k` at scrape `i`: schema `schema`, buckets in two spans (and, for
/// odd `k`, negative buckets and observations in the zero bucket), growing by scrape; reset at scrape `reset`.
fn counter(k: i64, i: i64, schema: i32, reset: i64) -> Histogram {
    let n = if i >= reset { i - reset + 1 } else { i + 10 };
    let positive: Vec<i64> = (0..6).map(|b| n * (b + 1 + k)).collect();
    let negative: Vec<i64> = if k % 2 == 1 { vec![n, 2 * n] } else { vec![] };
    let zero = if k % 2 == 1 { n * 3 } else { 0 };
    let deltas = |counts: &[i64]| -> Vec<i64> {
        let mut prev = 0;
        counts
            .iter()
            .map(|&c| {
                let d = c - prev;
                prev = c;
                d
            })
            .collect()
    };
    let count = positive.iter().sum::<i64>() + negative.iter().sum::<i64>() + zero;
    Histogram {
        count: Some(histogram::Count::CountInt(count as u64)),
        sum: n as f64 * (12.5 + k as f64),
        schema,
        zero_threshold: 1e-3,
        zero_count: Some(histogram::ZeroCount::ZeroCountInt(zero as u64)),
        positive_spans: vec![
            BucketSpan { offset: -2, length: 4 },
            BucketSpan { offset: 3, length: 2 },
        ],
        positive_deltas: deltas(&positive),
        negative_spans: if negative.is_empty() {
            vec![]
        } else {
            vec![BucketSpan { offset: 1, length: 2 }]
        },
        negative_deltas: deltas(&negative),
        ..Histogram::default()
    }
}

/// Three counter series (two schemas, one with negative and zero buckets), one with a reset at scrape 150,
/// in requests of 20 scrapes, the first `start_ms`.
fn requests(start_ms: i64) -> Vec<WriteRequest> {
    let series: [(&str, i64, i32, i64); 3] = [("a", 0, 3, 150), ("b", 1, 0, i64::MAX), ("c", 2, 3, i64::MAX)];
    (0..SCRAPES / 20)
        .map(|r| WriteRequest {
            timeseries: series
                .iter()
                .map(|&(job, k, schema, reset)| TimeSeries {
                    histograms: (r * 20..(r + 1) * 20)
                        .map(|i| Histogram {
                            timestamp: start_ms + i * STEP_MS + k,
                            ..counter(k, i, schema, reset)
                        })
                        .collect(),
                    ..timeseries(&[("__name__", "rpc_latency_seconds"), ("job", job)], &[])
                })
                .collect(),
            metadata: vec![],
        })
        .collect()
}

const QUERIES: &[&str] = &[
    "rpc_latency_seconds",
    "histogram_count(rpc_latency_seconds)",
    "histogram_sum(rpc_latency_seconds)",
    "rate(rpc_latency_seconds[5m])",
    "histogram_count(rate(rpc_latency_seconds[5m]))",
    "histogram_sum(increase(rpc_latency_seconds[10m]))",
    "sum(rpc_latency_seconds)",
    "histogram_count(sum by (job) (rate(rpc_latency_seconds[2m])))",
];

fn close(a: &str, b: &str) -> bool {
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) if x.is_nan() && y.is_nan() => true,
        (Ok(x), Ok(y)) => x == y || (x - y).abs() <= 1e-9 * x.abs().max(y.abs()),
        _ => a == b,
    }
}

/// A histogram object (`{"count","sum","buckets"}`) compared field by field; `None` when equal.
fn histogram_diff(want: &Value, got: &Value) -> Option<String> {
    let num = |v: &Value, k: &str| v[k].as_str().unwrap_or_default().to_owned();
    for k in ["count", "sum"] {
        if !close(&num(want, k), &num(got, k)) {
            return Some(format!("{k}: want {} got {}", want[k], got[k]));
        }
    }
    let (wb, gb) = (
        want["buckets"].as_array().cloned().unwrap_or_default(),
        got["buckets"].as_array().cloned().unwrap_or_default(),
    );
    if wb.len() != gb.len() {
        return Some(format!("buckets: want {wb:?} got {gb:?}"));
    }
    for (w, g) in wb.iter().zip(&gb) {
        let same = w[0] == g[0] && (1..4).all(|i| close(w[i].as_str().unwrap_or(""), g[i].as_str().unwrap_or("")));
        if !same {
            return Some(format!("bucket: want {w} got {g}"));
        }
    }
    None
}

/// A `[t, "v"]` or `[t, {histogram}]` point compared.
fn point_diff(want: &Value, got: &Value) -> Option<String> {
    if want[0] != got[0] {
        return Some(format!("timestamp: want {} got {}", want[0], got[0]));
    }
    match (&want[1], &got[1]) {
        (Value::String(w), Value::String(g)) if close(w, g) => None,
        (w @ Value::Object(_), g @ Value::Object(_)) => histogram_diff(w, g),
        (w, g) => Some(format!("value: want {w} got {g}")),
    }
}

/// The differences between two `data` objects of the same query.
fn diff(want: &Value, got: &Value) -> Vec<String> {
    let by_metric = |d: &Value| -> Vec<Value> {
        let mut r = d["result"].as_array().cloned().unwrap_or_default();
        r.sort_by_key(|s| s["metric"].to_string());
        r
    };
    let (w, g) = (by_metric(want), by_metric(got));
    if want["resultType"] != got["resultType"] || w.len() != g.len() {
        return vec![format!("want {want}\n got {got}")];
    }
    let mut out = Vec::new();
    for (ws, gs) in w.iter().zip(&g) {
        if ws["metric"] != gs["metric"] {
            out.push(format!("series: want {} got {}", ws["metric"], gs["metric"]));
            continue;
        }
        for key in ["value", "histogram"] {
            if ws.get(key).is_some() || gs.get(key).is_some() {
                out.extend(point_diff(&ws[key], &gs[key]).map(|d| format!("{}: {key} {d}", ws["metric"])));
            }
        }
        for key in ["values", "histograms"] {
            let (wp, gp) = (
                ws[key].as_array().cloned().unwrap_or_default(),
                gs[key].as_array().cloned().unwrap_or_default(),
            );
            if wp.len() != gp.len() {
                out.push(format!(
                    "{}: {key}: want {} points got {}",
                    ws["metric"],
                    wp.len(),
                    gp.len()
                ));
                continue;
            }
            out.extend(
                wp.iter()
                    .zip(&gp)
                    .filter_map(|(a, b)| point_diff(a, b))
                    .map(|d| format!("{}: {key} {d}", ws["metric"])),
            );
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_histogram_queries_answer_as_prometheus_does() {
    let Some(bin) = prometheus_tool("PROMETHEUS_BIN", "prometheus", "native histogram PromQL test") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let prometheus = Prometheus::start_with(
        &bin,
        dir.path(),
        "prometheus-histograms",
        &["--enable-feature=native-histograms"],
    );
    let heddle = tokio::task::spawn_blocking(|| HeddleProcess::start(HeddleOptions::default()))
        .await
        .expect("join")
        .expect("start heddle");
    let http = http_client(Duration::from_secs(30)).expect("client");
    // An hour of scrapes ending a minute ago, on a 15 s grid.
    let end = now_ms() / STEP_MS * STEP_MS - 60_000;
    let start = end - (SCRAPES - 1) * STEP_MS;
    write_all(&http, &[prometheus.write_url(), heddle.push_url()], &requests(start)).await;

    let oracle = Api {
        http: http.clone(),
        base: prometheus.api_base(),
    };
    let candidate = Api {
        http,
        base: heddle.prometheus_url(),
    };
    let mut evaluations: Vec<(&str, Vec<(&str, String)>)> =
        [start + 20 * STEP_MS + 7_000, start + 151 * STEP_MS, end, end + 120_000]
            .into_iter()
            .map(|t| ("/api/v1/query", vec![("time", secs(t))]))
            .collect();
    evaluations.push((
        "/api/v1/query_range",
        vec![
            ("start", secs(start + 300_000)),
            ("end", secs(end)),
            ("step", "60".to_owned()),
        ],
    ));
    let mut failures = Vec::new();
    let mut histograms_seen = 0;
    for q in QUERIES {
        let mut answered = 0;
        for (path, params) in &evaluations {
            let mut params = params.clone();
            params.push(("query", (*q).to_owned()));
            let (want, got) = (oracle.get(path, &params).await, candidate.get(path, &params).await);
            match (&want, &got) {
                (Answer::Data(w), Answer::Data(g)) => {
                    histograms_seen += w.to_string().matches("\"buckets\"").count();
                    answered += usize::from(!w["result"].as_array().is_none_or(Vec::is_empty));
                    failures.extend(diff(w, g).into_iter().map(|d| format!("{q} {path} {params:?}: {d}")));
                }
                _ => failures.push(format!("{q}: want {} got {}", want.describe(), got.describe())),
            }
        }
        assert!(
            answered >= 3,
            "{q}: Prometheus answered {answered} of the evaluations: the data missed them"
        );
    }
    assert!(
        histograms_seen > 100,
        "Prometheus returned histograms: {histograms_seen}"
    );
    assert!(
        failures.is_empty(),
        "{} differences:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn the_comparison_sees_every_part_of_a_histogram() {
    let data = |count: &str, bound: &str, n: &str| {
        serde_json::json!({"resultType": "vector", "result": [{"metric": {"job": "a"},
            "histogram": [1.5, {"count": count, "sum": "2", "buckets": [[0, "1", bound, n]]}]}]})
    };
    let base = data("3", "2", "3");
    assert!(diff(&base, &data("3", "2", "3")).is_empty());
    assert!(
        diff(&base, &data("3.0000000000001", "2", "3")).is_empty(),
        "within 1e-9"
    );
    for (name, other) in [
        ("count", data("4", "2", "3")),
        ("bound", data("3", "2.5", "3")),
        ("bucket count", data("3", "2", "2")),
    ] {
        assert!(!diff(&base, &other).is_empty(), "a different {name} is seen");
    }
    let float = serde_json::json!({"resultType": "vector", "result": [{"metric": {"job": "a"}, "value": [1.5, "3"]}]});
    assert!(
        !diff(&base, &float).is_empty(),
        "a float in place of a histogram is seen"
    );
}
