//! Metric metadata end to end: a real Prometheus remote-writes its metadata and heddle's
//! `/prometheus/api/v1/metadata` describes its metrics as Prometheus' own `/api/v1/metadata` does; limits refuse
//! with the right status, message and metric.
//!
//! The Prometheus part needs `/usr/bin/prometheus` (Debian package `prometheus`; `PROMETHEUS_BIN` overrides
//! the path); without it that test is skipped with a message, unless `CI` is set.

use heddle_proto::prometheus::{MetricMetadata, WriteRequest};
use heddle_testkit::{
    HeddleOptions, HeddleProcess, ManagedProcess, free_port, http_client, metric_value, metrics_text, now_ms,
    prometheus_tool, push, timeseries, wait_until_async,
};
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

async fn get_json(http: &reqwest::Client, url: &str) -> Value {
    let resp = http.get(url).send().await.unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    assert!(status.is_success(), "GET {url}: {status}: {body}");
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {url}: not JSON ({e}): {body}"));
    assert_eq!(v["status"], "success", "GET {url}: {v}");
    v
}

/// A family's entries as a set of (type, help, unit).
fn entries(data: &Value, family: &str) -> BTreeSet<(String, String, String)> {
    data[family]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    let s = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
                    (s("type"), s("help"), s("unit"))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn start_heddle(args: &[&str]) -> HeddleProcess {
    HeddleProcess::start(HeddleOptions {
        args: args.iter().map(|s| (*s).to_owned()).collect(),
        ..HeddleOptions::default()
    })
    .expect("start heddle")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_metadata_is_served_as_prometheus_serves_it() {
    let Some(bin) = prometheus_tool("PROMETHEUS_BIN", "prometheus", "metadata compatibility test") else {
        return;
    };
    let heddle = tokio::task::spawn_blocking(|| start_heddle(&[])).await.expect("join");
    let dir = tempfile::Builder::new()
        .prefix("heddle-metadata-")
        .tempdir()
        .expect("tempdir");
    let port = free_port().expect("port");
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            r#"global:
  scrape_interval: 1s
scrape_configs:
  - job_name: self
    static_configs:
      - targets: ["127.0.0.1:{port}"]
remote_write:
  - url: {push}
    queue_config:
      batch_send_deadline: 1s
      min_backoff: 30ms
      max_backoff: 1s
    metadata_config:
      send_interval: 1s
"#,
            push = heddle.push_url()
        ),
    )
    .expect("write config");
    let mut cmd = Command::new(&bin);
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"));
    let mut prometheus = ManagedProcess::spawn("prometheus", cmd, dir.path()).expect("spawn prometheus");
    prometheus
        .wait_http_ok(([127, 0, 0, 1], port).into(), "/-/ready", Duration::from_secs(60))
        .expect("prometheus ready");

    let http = http_client(Duration::from_secs(30)).expect("client");
    let families = [
        "prometheus_http_requests_total",
        "go_goroutines",
        "process_cpu_seconds_total",
        "prometheus_http_request_duration_seconds",
        "go_gc_duration_seconds",
    ];
    let ours = format!("{}/api/v1/metadata", heddle.prometheus_url());
    let theirs = format!("http://127.0.0.1:{port}/api/v1/metadata");
    let arrived = wait_until_async(Duration::from_secs(90), || async {
        let Ok(resp) = http.get(&ours).send().await else {
            return false;
        };
        let v: Value = serde_json::from_str(&resp.text().await.unwrap_or_default()).unwrap_or_default();
        families.iter().all(|f| v["data"][f].is_array())
    })
    .await;
    assert!(
        arrived,
        "heddle did not receive the metadata of {families:?} within 90s\nheddle:\n{}\nprometheus:\n{}",
        heddle.log_tail(30),
        prometheus.log_tail(30)
    );
    let ours = get_json(&http, &ours).await;
    let theirs = get_json(&http, &theirs).await;
    for family in families {
        let (o, t) = (entries(&ours["data"], family), entries(&theirs["data"], family));
        assert!(!t.is_empty(), "Prometheus describes {family}: {theirs}");
        assert_eq!(o, t, "{family}: heddle's metadata differs from Prometheus'");
    }
    // Every family heddle knows, Prometheus described the same way (heddle may lag, never differ).
    for (family, _) in ours["data"].as_object().expect("object") {
        let t = entries(&theirs["data"], family);
        if !t.is_empty() {
            assert!(t.is_superset(&entries(&ours["data"], family)), "{family}");
        }
    }
    // Prometheus' parameters.
    let one = get_json(
        &http,
        &format!("{}/api/v1/metadata?metric=go_goroutines", heddle.prometheus_url()),
    )
    .await;
    assert_eq!(one["data"].as_object().map(|o| o.len()), Some(1), "{one}");
    let two = get_json(&http, &format!("{}/api/v1/metadata?limit=2", heddle.prometheus_url())).await;
    assert_eq!(two["data"].as_object().map(|o| o.len()), Some(2), "{two}");
}

fn metadata(family: &str, help: &str) -> MetricMetadata {
    MetricMetadata {
        r#type: 1,
        metric_family_name: family.into(),
        help: help.into(),
        unit: String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_limits_refuse_with_status_message_and_metric() {
    let heddle = tokio::task::spawn_blocking(|| {
        start_heddle(&[
            "--validation.max-metadata-length=64",
            "--ingester.max-global-metadata-per-user=100",
        ])
    })
    .await
    .expect("join");
    let http = http_client(Duration::from_secs(30)).expect("client");
    let now = now_ms();

    // Oversize help: 400 naming the family, the length and the flag; the sample still lands.
    let req = WriteRequest {
        timeseries: vec![timeseries(&[("__name__", "long_help_total")], &[(now, 1.0)])],
        metadata: vec![
            metadata("long_help_total", &"h".repeat(65)),
            metadata("fine_total", "ok"),
        ],
    };
    let out = push(&http, &heddle.push_url(), None, &req).await.expect("push");
    assert_eq!(out.status, 400, "{}", out.body);
    assert_eq!(
        out.body.trim(),
        "err-heddle-metadata-help-too-long: metadata HELP is 65 bytes long (tenant=anonymous, \
         metric=\"long_help_total\"): the limit is 64 bytes; the entry is dropped: shorten it or raise \
         `limits.max_metadata_length` (--validation.max-metadata-length)"
    );

    // A hostile sender: a million families in pushes of 10,000; the ingester keeps its limit.
    for batch in 0..100 {
        let req = WriteRequest {
            timeseries: Vec::new(),
            metadata: (0..10_000)
                .map(|i| metadata(&format!("family_{batch}_{i}"), "help"))
                .collect(),
        };
        let out = push(&http, &heddle.push_url(), None, &req).await.expect("push");
        assert_eq!(out.status, 400, "batch {batch}: {}", out.body);
        assert!(
            out.body
                .starts_with("err-heddle-max-metadata-per-user: per-tenant metadata limit of 100 metric families"),
            "batch {batch}: {}",
            out.body
        );
        assert_eq!(out.body.lines().count(), 1, "one message per reason: {}", out.body);
    }
    let all = get_json(&http, &format!("{}/api/v1/metadata", heddle.prometheus_url())).await;
    let held = all["data"].as_object().expect("object");
    assert_eq!(held.len(), 100, "the per-tenant limit holds");
    assert!(held.contains_key("fine_total") && !held.contains_key("long_help_total"));

    let metrics = metrics_text(&http, &heddle.url()).await.expect("metrics");
    let value = |series: &str| metric_value(&metrics, series).unwrap_or_else(|| panic!("{series} not in /metrics"));
    assert_eq!(
        value(
            "heddle_distributor_discarded_metadata_total{tenant=\"anonymous\",reason=\"err-heddle-metadata-help-too-long\"}"
        ),
        1.0
    );
    assert_eq!(
        value(
            "heddle_ingester_discarded_metadata_total{tenant=\"anonymous\",reason=\"err-heddle-max-metadata-per-user\"}"
        ),
        1_000_000.0 - 99.0
    );
    assert_eq!(value("heddle_ingester_memory_metadata"), 100.0);
}
