//! Heddle's head directory holding native histograms is a Prometheus head directory: after a crash (`kill -9`)
//! and after a graceful stop (SIGTERM), Prometheus 2.42 (`--enable-feature=native-histograms`) opens a copy of
//! the tenant directory, replays heddle's WAL (histogram records, types 7 and 8) and maps its `chunks_head/`
//! (histogram chunks, encodings 2 and 3), logs no tsdb warning, and serves every acknowledged sample: integer
//! histograms with a recode and a counter reset, float histograms, and a series switching from floats to
//! histograms.
//!
//! promtool 2.42 cannot judge these files (`tsdb dump` stops at a series' first histogram), and Prometheus 2.42
//! turns `memory-snapshot-on-shutdown` off when native histograms are on, so the chunk snapshot heddle writes
//! on SIGTERM is left unread by the judge; heddle's own snapshot load is tested in `libs/tsdb`.
//!
//! Needs `/usr/bin/prometheus` (Debian package `prometheus`; `PROMETHEUS_BIN` overrides the path). Without it the
//! test is skipped with a message, unless `CI` is set.

#[path = "promql/api.rs"]
#[allow(dead_code)] // The oracle's Prometheus and API client, of which this test needs a part.
mod api;

use api::Prometheus;
use heddle_model::histogram::deltas_from_absolute;
use heddle_model::{Histogram, HistogramSample, HistogramValue, Span};
use heddle_proto::histogram_to_proto;
use heddle_proto::prometheus::{TimeSeries, WriteRequest};
use heddle_testkit::{HeddleOptions, HeddleProcess, copy_dir, http_client, now_ms, prometheus_tool, push, timeseries};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

const STEP: i64 = 15_000;
/// Samples per series; the crash comes after [`BEFORE_CRASH`].
const SAMPLES: i64 = 300;
const BEFORE_CRASH: i64 = 200;
const NAMES: [&str; 3] = ["h_floats", "h_ints", "h_switching"];

/// A counter histogram at step `k`: a bucket appears at k = 60 (the chunk is recoded), and the counter resets
/// at k = 150.
fn histogram(k: i64) -> Histogram {
    let n = if k >= 150 { k - 149 } else { k + 1 };
    let mut buckets = vec![n + 2, 3 * n];
    let mut spans = vec![Span::new(-2, 2)];
    if k >= 60 {
        buckets.push(n);
        spans.push(Span::new(4, 1));
    }
    Histogram {
        schema: 1,
        zero_threshold: 2f64.powi(-128),
        zero_count: n as u64 / 5,
        count: n as u64 / 5 + buckets.iter().sum::<i64>() as u64,
        sum: n as f64 * 3.5 + 0.25,
        positive_spans: spans,
        positive_buckets: deltas_from_absolute(&buckets),
        ..Histogram::default()
    }
}

/// What a sample holds.
enum Sent {
    Float(f64),
    Histogram(HistogramValue),
}

/// Sample `k` of series `name`.
fn value(name: &str, k: i64) -> Sent {
    match name {
        "h_ints" => Sent::Histogram(HistogramValue::Int(histogram(k))),
        "h_floats" => Sent::Histogram(HistogramValue::Float(histogram(k * 2 + 1).to_float())),
        _ if k < 100 => Sent::Float(k as f64 * 0.75),
        _ => Sent::Histogram(HistogramValue::Int(histogram(k))),
    }
}

/// Samples `ks` of every series, in one request.
fn request(start: i64, ks: std::ops::Range<i64>) -> WriteRequest {
    let timeseries = NAMES
        .iter()
        .map(|name| {
            let mut ts: TimeSeries = timeseries(&[("__name__", name), ("job", "hist")], &[]);
            for k in ks.clone() {
                let t = start + k * STEP;
                match value(name, k) {
                    Sent::Float(v) => ts
                        .samples
                        .push(heddle_proto::prometheus::Sample { value: v, timestamp: t }),
                    Sent::Histogram(h) => ts.histograms.push(histogram_to_proto(&HistogramSample { t, value: h })),
                }
            }
            ts
        })
        .collect();
    WriteRequest {
        timeseries,
        metadata: vec![],
    }
}

/// A point as Prometheus' API answers it: a float's bits, or a histogram's count and sum bits.
#[derive(Debug, PartialEq)]
enum Point {
    Float(u64),
    Histogram(u64, u64),
}

fn expected(name: &str, start: i64, samples: i64) -> Vec<(i64, Point)> {
    (0..samples)
        .map(|k| {
            let p = match value(name, k) {
                Sent::Float(v) => Point::Float(v.to_bits()),
                Sent::Histogram(h) => {
                    let f = h.to_float();
                    Point::Histogram(f.count.to_bits(), f.sum.to_bits())
                }
            };
            (start + k * STEP, p)
        })
        .collect()
}

fn num(v: &Value) -> f64 {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a number string: {v}"))
}

/// What Prometheus serves of series `name`, one step per sample.
async fn served(http: &reqwest::Client, base: &str, name: &str, start: i64, samples: i64) -> Vec<(i64, Point)> {
    let url = format!(
        "{base}/api/v1/query_range?query={name}&start={}&end={}&step=15",
        start as f64 / 1000.0,
        (start + (samples - 1) * STEP) as f64 / 1000.0
    );
    let text = http.get(&url).send().await.expect("query").text().await.expect("body");
    let answer: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(answer["status"], "success", "{text}");
    let mut out = Vec::new();
    for s in answer["data"]["result"].as_array().into_iter().flatten() {
        for v in s["values"].as_array().into_iter().flatten() {
            let t = (v[0].as_f64().expect("time") * 1000.0).round() as i64;
            out.push((t, Point::Float(num(&v[1]).to_bits())));
        }
        for h in s["histograms"].as_array().into_iter().flatten() {
            let t = (h[0].as_f64().expect("time") * 1000.0).round() as i64;
            out.push((
                t,
                Point::Histogram(num(&h[1]["count"]).to_bits(), num(&h[1]["sum"]).to_bits()),
            ));
        }
    }
    out.sort_by_key(|p| p.0);
    out
}

/// Opens a copy of `tenant_dir` with Prometheus and checks it serves the first `samples` of every series,
/// without a tsdb warning.
async fn prometheus_serves(bin: &Path, tenant_dir: &Path, scratch: &Path, what: &str, start: i64, samples: i64) {
    // `Prometheus::start_with` keeps its data in `<dir>/<name>-data`: the copy goes there.
    let name = format!("prometheus-{what}");
    let data = scratch.join(format!("{name}-data"));
    copy_dir(tenant_dir, &data).unwrap_or_else(|e| panic!("copying {}: {e}", tenant_dir.display()));
    let prometheus = Prometheus::start_with(bin, scratch, &name, &["--enable-feature=native-histograms"]);
    let http = http_client(Duration::from_secs(30)).expect("client");
    for name in NAMES {
        let got = served(&http, &prometheus.api_base(), name, start, samples).await;
        let want = expected(name, start, samples);
        assert_eq!(got.len(), want.len(), "{what}: {name}: samples served");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "{what}: {name} sample {i}");
        }
        let histograms = got.iter().filter(|(_, p)| matches!(p, Point::Histogram(..))).count();
        eprintln!(
            "{what}: {name}: {} samples served, {histograms} of them histograms",
            got.len()
        );
    }
    let log = prometheus.log();
    let complaints: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("component=tsdb") && (l.contains("level=warn") || l.contains("level=error")))
        .collect();
    assert!(
        complaints.is_empty(),
        "{what}: prometheus complained:\n{}",
        complaints.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_opens_a_heddle_head_holding_native_histograms() {
    let Some(bin) = prometheus_tool("PROMETHEUS_BIN", "prometheus", "histogram head compatibility test") else {
        return;
    };
    let scratch = tempfile::tempdir().expect("scratch");
    let mut heddle = tokio::task::spawn_blocking(|| HeddleProcess::start(HeddleOptions::default()))
        .await
        .expect("join")
        .expect("start heddle");
    let http = http_client(Duration::from_secs(30)).expect("client");
    // 75 minutes of samples ending a minute ago: inside the head's window, and long enough to cut chunks.
    let start = (now_ms() - 60_000) / STEP * STEP - (SAMPLES - 1) * STEP;
    let send = |ks: std::ops::Range<i64>, url: String| {
        let http = http.clone();
        async move {
            for from in ks.clone().step_by(20) {
                let req = request(start, from..(from + 20).min(ks.end));
                let out = push(&http, &url, None, &req).await.expect("push");
                assert_eq!(out.status, 200, "{}", out.body);
            }
        }
    };
    send(0..BEFORE_CRASH, heddle.push_url()).await;
    let tenant_dir = heddle.data_dir().join("anonymous");
    heddle.kill9().expect("kill -9");
    assert!(
        std::fs::read_dir(tenant_dir.join("chunks_head")).is_ok_and(|mut d| d.next().is_some()),
        "completed histogram chunks were written to chunks_head/"
    );
    prometheus_serves(&bin, &tenant_dir, scratch.path(), "after-kill-9", start, BEFORE_CRASH).await;

    let mut heddle = tokio::task::spawn_blocking(move || {
        heddle.restart().expect("restart after kill -9");
        heddle
    })
    .await
    .expect("join");
    send(BEFORE_CRASH..SAMPLES, heddle.push_url()).await;
    // The process handle is kept: dropping it deletes the data directory.
    let (heddle, status) = tokio::task::spawn_blocking(move || {
        let status = heddle.sigterm_and_wait().expect("sigterm");
        (heddle, status)
    })
    .await
    .expect("join");
    assert!(status.success(), "graceful stop: {status}");
    prometheus_serves(&bin, &tenant_dir, scratch.path(), "after-sigterm", start, SAMPLES).await;
    drop(heddle);
}
