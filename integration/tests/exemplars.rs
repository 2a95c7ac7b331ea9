//! Exemplars end to end: pushed with remote write, kept by the ingester's ring through a crash (`kill -9`,
//! WAL replay) and a graceful restart (chunk snapshot), answered by `/prometheus/api/v1/query_exemplars` in
//! Prometheus' shape, and bounded by `--ingester.max-global-exemplars-per-user` whatever a sender pushes.

use heddle_proto::prometheus::{Exemplar, Label, WriteRequest};
use heddle_testkit::{HeddleOptions, HeddleProcess, http_client, metrics_text, now_ms, push, timeseries};
use serde_json::Value;
use std::time::Duration;

fn start(ring: usize) -> HeddleProcess {
    HeddleProcess::start(HeddleOptions {
        args: vec![format!("--ingester.max-global-exemplars-per-user={ring}")],
        ..HeddleOptions::default()
    })
    .expect("start heddle")
}

fn exemplar(trace: &str, t: i64, value: f64) -> Exemplar {
    Exemplar {
        labels: vec![Label {
            name: "trace_id".into(),
            value: trace.into(),
        }],
        value,
        timestamp: t,
    }
}

async fn query_exemplars(http: &reqwest::Client, heddle: &HeddleProcess, query: &str) -> Value {
    let url = format!("{}/api/v1/query_exemplars", heddle.prometheus_url());
    let encoded: String = query
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let url = format!("{url}?query={encoded}&start=0&end=4102444800");
    let resp = http.get(&url).send().await.unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    assert!(status.is_success(), "GET {url}: {status}: {body}");
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    v["data"].clone()
}

/// (trace id, timestamp ms) of every exemplar of the answer's only series.
fn traces(data: &Value) -> Vec<(String, i64)> {
    let series = data.as_array().expect("array");
    assert_eq!(series.len(), 1, "{data}");
    series[0]["exemplars"]
        .as_array()
        .expect("exemplars")
        .iter()
        .map(|e| {
            let t = (e["timestamp"].as_f64().expect("timestamp") * 1000.0).round() as i64;
            (e["labels"]["trace_id"].as_str().expect("trace_id").to_owned(), t)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exemplars_survive_a_crash_and_a_restart() {
    let mut heddle = tokio::task::spawn_blocking(|| start(100)).await.expect("join");
    let http = http_client(Duration::from_secs(30)).expect("client");
    let t0 = now_ms() - 60_000;
    // Samples and exemplars in one series entry, then exemplars alone in another (as Prometheus sends them).
    let mut with = timeseries(&[("__name__", "requests_total"), ("job", "api")], &[(t0, 1.0)]);
    with.exemplars = vec![exemplar("trace-1", t0, 0.5)];
    let mut apart = timeseries(&[("__name__", "requests_total"), ("job", "api")], &[]);
    apart.exemplars = vec![exemplar("trace-2", t0 + 1000, 0.25)];
    let req = WriteRequest {
        timeseries: vec![with, apart],
        metadata: vec![],
    };
    let out = push(&http, &heddle.push_url(), None, &req).await.expect("push");
    assert_eq!(out.status, 200, "{}", out.body);
    let want = vec![("trace-1".to_owned(), t0), ("trace-2".to_owned(), t0 + 1000)];
    let query = r#"rate(requests_total{job="api"}[5m])"#;
    let data = query_exemplars(&http, &heddle, query).await;
    assert_eq!(traces(&data), want);
    assert_eq!(data[0]["seriesLabels"]["job"], "api", "{data}");
    assert_eq!(data[0]["exemplars"][0]["value"], "0.5", "{data}");

    // A crash: the WAL brings them back.
    heddle = heddle.kill9_and_restart().await.expect("kill -9 and restart");
    assert_eq!(
        traces(&query_exemplars(&http, &heddle, query).await),
        want,
        "after kill -9"
    );

    // A graceful restart: the chunk snapshot carries them (and the WAL after it is empty).
    heddle = tokio::task::spawn_blocking(move || {
        heddle.restart().expect("graceful restart");
        heddle
    })
    .await
    .expect("join");
    assert_eq!(
        traces(&query_exemplars(&http, &heddle, query).await),
        want,
        "after a graceful restart"
    );
    assert!(
        heddle.log_tail(200).contains("wrote chunk snapshot"),
        "the restart wrote a snapshot:\n{}",
        heddle.log_tail(30)
    );
    // Out of order after the restart: refused, nothing changes.
    let mut late = timeseries(&[("__name__", "requests_total"), ("job", "api")], &[]);
    late.exemplars = vec![exemplar("trace-0", t0 - 1000, 1.0)];
    let req = WriteRequest {
        timeseries: vec![late],
        metadata: vec![],
    };
    push(&http, &heddle.push_url(), None, &req).await.expect("push");
    assert_eq!(traces(&query_exemplars(&http, &heddle, query).await), want);
}

/// A sender of a million exemplars (10,000 series, 100 each) leaves the ring at its size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_exemplars_fill_the_ring_and_no_more() {
    let heddle = tokio::task::spawn_blocking(|| start(1000)).await.expect("join");
    let http = http_client(Duration::from_secs(60)).expect("client");
    let t0 = now_ms() - 300_000;
    for round in 0..10 {
        let timeseries = (0..1000)
            .map(|s| {
                let id = format!("{}", round * 1000 + s);
                let mut ts = timeseries(&[("__name__", "hostile"), ("id", id.as_str())], &[(t0, 1.0)]);
                ts.exemplars = (0..100).map(|i| exemplar("t", t0 + i, 1.0)).collect();
                ts
            })
            .collect();
        let req = WriteRequest {
            timeseries,
            metadata: vec![],
        };
        let out = push(&http, &heddle.push_url(), None, &req).await.expect("push");
        assert_eq!(out.status, 200, "round {round}: {}", out.body);
    }
    let data = query_exemplars(&http, &heddle, "hostile").await;
    let held: usize = data
        .as_array()
        .expect("array")
        .iter()
        .map(|s| s["exemplars"].as_array().map_or(0, Vec::len))
        .sum();
    assert_eq!(held, 1000, "the ring holds its size");
    let metrics = metrics_text(&http, &heddle.url()).await.expect("metrics");
    assert!(
        metrics.contains("heddle_ingester_exemplars_appended_total 1000000"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("exemplar"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
