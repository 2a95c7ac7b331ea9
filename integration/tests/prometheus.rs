//! Compatibility with the real Prometheus: Prometheus #1 scrapes itself and remote-writes to heddle; heddle's
//! remote read must return exactly what Prometheus #1 stored; Prometheus #2, with heddle as its only
//! `remote_read` source, must answer PromQL instant and range queries with those samples. A Prometheus with
//! native histograms on forwards the histograms pushed to it (`send_native_histograms`), and heddle stores
//! every one.
//!
//! Needs `/usr/bin/prometheus` (Debian package `prometheus`; `PROMETHEUS_BIN` overrides the path). Without it the
//! test is skipped with a message, unless `CI` is set, in which case a missing Prometheus fails the test.

use heddle_model::{Labels, METRIC_NAME, Sample};
use heddle_testkit::{
    HeddleOptions, HeddleProcess, ManagedProcess, ReadClient, ReadMode, SeriesSamples, eq, free_port, http_client,
    metric_value, metrics_text, now_ms, prometheus_tool, query, wait_until_async,
};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const SELF_JOB: &str = "prometheus-self";

/// A Prometheus server owned by the test (killed on drop).
struct Prometheus {
    process: ManagedProcess,
    port: u16,
}

impl Prometheus {
    fn start(bin: &Path, dir: &Path, name: &str, config: &str) -> Prometheus {
        Self::start_with(bin, dir, name, config, &[])
    }

    /// [`Prometheus::start`] with extra command-line flags.
    fn start_with(bin: &Path, dir: &Path, name: &str, config: &str, flags: &[&str]) -> Prometheus {
        let port = free_port().expect("port");
        let config_path = dir.join(format!("{name}.yml"));
        std::fs::write(&config_path, config.replace("{PORT}", &port.to_string())).expect("write prometheus config");
        let mut cmd = Command::new(bin);
        cmd.arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join(format!("{name}-data")).display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=info")
            .args(flags);
        let mut process = ManagedProcess::spawn(name, cmd, dir).expect("spawn prometheus");
        process
            .wait_http_ok(([127, 0, 0, 1], port).into(), "/-/ready", Duration::from_secs(60))
            .expect("prometheus ready");
        Prometheus { process, port }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// Percent-encodes a query-string value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Milliseconds as the decimal seconds the Prometheus API takes (exact).
fn secs(ms: i64) -> String {
    format!("{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000))
}

async fn api_get(http: &reqwest::Client, url: String) -> Value {
    let resp = http.get(&url).send().await.unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    assert!(status.is_success(), "GET {url}: {status}: {body}");
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {url}: not JSON ({e}): {body}"));
    assert_eq!(v["status"], "success", "GET {url}: {v}");
    v
}

/// `[ts_seconds, "value"]` from the Prometheus API.
fn api_sample(point: &Value) -> Sample {
    let t = point[0].as_f64().expect("timestamp");
    let v: f64 = point[1].as_str().expect("value string").parse().expect("float value");
    Sample::new((t * 1000.0).round() as i64, v)
}

async fn try_read_one(
    client: &ReadClient,
    mode: ReadMode,
    name: &str,
    lo: i64,
    hi: i64,
) -> Result<Vec<SeriesSamples>, heddle_testkit::TestkitError> {
    let q = query(lo, hi, vec![eq(METRIC_NAME, name), eq("job", SELF_JOB)]);
    Ok(client.read(mode, vec![q]).await?.pop().unwrap_or_default())
}

async fn read_one(client: &ReadClient, mode: ReadMode, name: &str, lo: i64, hi: i64) -> Vec<SeriesSamples> {
    try_read_one(client, mode, name, lo, hi)
        .await
        .unwrap_or_else(|e| panic!("remote read of {name} from {}: {e}", client.url()))
}

fn bits_equal(a: &[Sample], b: &[Sample]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.bit_eq(y))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_writes_and_reads_through_heddle() {
    let Some(bin) = prometheus_tool("PROMETHEUS_BIN", "prometheus", "prometheus compatibility test") else {
        return;
    };
    let heddle = tokio::task::spawn_blocking(|| HeddleProcess::start(HeddleOptions::default()))
        .await
        .expect("join")
        .expect("start heddle");
    let dir = tempfile::Builder::new()
        .prefix("heddle-prom-")
        .tempdir()
        .expect("tempdir");
    let writer = Prometheus::start(
        &bin,
        dir.path(),
        "prometheus-writer",
        &format!(
            r#"global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: {SELF_JOB}
    static_configs:
      - targets: ["127.0.0.1:{{PORT}}"]
remote_write:
  - url: {push}
    remote_timeout: 5s
    queue_config:
      batch_send_deadline: 1s
      min_backoff: 30ms
      max_backoff: 1s
"#,
            push = heddle.push_url()
        ),
    );
    let http = http_client(Duration::from_secs(30)).expect("client");
    let from_heddle = ReadClient::new(http.clone(), &heddle.prometheus_url(), None);
    let lo = now_ms() - 60_000;

    // Remote write is asynchronous: wait (bounded) until a few scrapes arrived.
    let arrived = wait_until_async(Duration::from_secs(90), || async {
        let hi = now_ms() + 60_000;
        // Errors while heddle or the queue warm up count as "not yet".
        let up = try_read_one(&from_heddle, ReadMode::Samples, "up", lo, hi)
            .await
            .unwrap_or_default();
        let info = try_read_one(&from_heddle, ReadMode::Samples, "prometheus_build_info", lo, hi)
            .await
            .unwrap_or_default();
        up.first().is_some_and(|s| s.samples.len() >= 4) && info.first().is_some_and(|s| !s.samples.is_empty())
    })
    .await;
    assert!(
        arrived,
        "heddle did not receive `up` and `prometheus_build_info` from Prometheus within 90s\nheddle:\n{}\nprometheus:\n{}",
        heddle.log_tail(30),
        writer.process.log_tail(30)
    );

    // What heddle holds is exactly what Prometheus stored (heddle may lag behind, never differ).
    let hi = now_ms();
    let metric = "scrape_duration_seconds";
    let held = read_one(&from_heddle, ReadMode::Samples, metric, lo, hi).await;
    assert_eq!(held.len(), 1, "one {metric} series for job {SELF_JOB}: {held:?}");
    let held = held.into_iter().next().expect("series");
    let streamed = read_one(&from_heddle, ReadMode::StreamedChunks, metric, lo, hi).await;
    assert_eq!(streamed.len(), 1, "streamed answer has the same series");
    assert_eq!(streamed[0].labels, held.labels);
    assert!(
        bits_equal(&streamed[0].samples, &held.samples),
        "SAMPLES and STREAMED_XOR_CHUNKS answers differ"
    );
    let from_writer = ReadClient::new(http.clone(), &writer.url(), None);
    let original = read_one(&from_writer, ReadMode::Samples, metric, lo, hi).await;
    assert_eq!(original.len(), 1, "Prometheus' own {metric}: {original:?}");
    assert_eq!(
        original[0].labels, held.labels,
        "labels differ between Prometheus and heddle"
    );
    for s in &held.samples {
        assert!(
            original[0].samples.iter().any(|o| o.bit_eq(s)),
            "heddle has {s:?} which Prometheus never stored"
        );
    }
    // Prometheus' own chunks decode with the testkit's XOR reader too: an independent check of that reader.
    let original_streamed = read_one(&from_writer, ReadMode::StreamedChunks, metric, lo, hi).await;
    assert!(
        bits_equal(&original_streamed[0].samples, &original[0].samples),
        "Prometheus' chunks decode wrongly"
    );

    // Prometheus #2 reads only from heddle.
    let reader = Prometheus::start(
        &bin,
        dir.path(),
        "prometheus-reader",
        &format!(
            r#"global:
  scrape_interval: 1m
remote_read:
  - url: {read}
    read_recent: true
"#,
            read = heddle.read_url()
        ),
    );
    let t_first = held.samples.first().expect("samples").t;
    let t_last = held.samples.last().expect("samples").t;
    let selector = format!(r#"{metric}{{job="{SELF_JOB}"}}"#);

    // A range-vector selector returns raw samples: exactly heddle's, up to t_last.
    let raw = api_get(
        &http,
        format!(
            "{}/api/v1/query?query={}&time={}",
            reader.url(),
            encode(&format!("{selector}[1h]")),
            secs(t_last)
        ),
    )
    .await;
    let result = raw["data"]["result"].as_array().expect("matrix");
    assert_eq!(result.len(), 1, "{raw}");
    let got: Vec<Sample> = result[0]["values"]
        .as_array()
        .expect("values")
        .iter()
        .map(api_sample)
        .collect();
    let want: Vec<Sample> = held
        .samples
        .iter()
        .copied()
        .filter(|s| s.t > t_last - 3_600_000)
        .collect();
    assert!(
        bits_equal(&got, &want),
        "PromQL raw samples differ from heddle's:\n got {got:?}\nwant {want:?}"
    );
    let labels = &result[0]["metric"];
    assert_eq!(labels["job"], SELF_JOB, "{labels}");
    assert_eq!(labels["instance"].as_str(), held.labels.get("instance"), "{labels}");

    // Instant query of `up`.
    let up = api_get(
        &http,
        format!(
            "{}/api/v1/query?query={}&time={}",
            reader.url(),
            encode(&format!(r#"up{{job="{SELF_JOB}"}}"#)),
            secs(t_last)
        ),
    )
    .await;
    let up_result = up["data"]["result"].as_array().expect("vector");
    assert_eq!(up_result.len(), 1, "{up}");
    assert_eq!(up_result[0]["value"][1], "1", "{up}");

    // Range query: each step takes the newest sample at or before it (5 min lookback).
    let range = api_get(
        &http,
        format!(
            "{}/api/v1/query_range?query={}&start={}&end={}&step=1",
            reader.url(),
            encode(&selector),
            secs(t_first),
            secs(t_last)
        ),
    )
    .await;
    let series = range["data"]["result"].as_array().expect("matrix");
    assert_eq!(series.len(), 1, "{range}");
    let points: Vec<Sample> = series[0]["values"]
        .as_array()
        .expect("values")
        .iter()
        .map(api_sample)
        .collect();
    assert!(points.len() >= 2, "{range}");
    for p in &points {
        let newest = held
            .samples
            .iter()
            .rev()
            .find(|s| s.t <= p.t)
            .expect("a sample at or before the step");
        assert_eq!(
            p.v.to_bits(),
            newest.v.to_bits(),
            "step {}: got {}, heddle has {:?}",
            p.t,
            p.v,
            newest
        );
    }
    let names: Labels = held.labels.clone();
    eprintln!(
        "prometheus compatibility: {} samples of {names} matched through remote read and PromQL",
        held.samples.len()
    );
    drop(reader);
    drop(writer);
}

/// `(WAL bytes written, samples ingested)` of a heddle, from its `/metrics`.
async fn wal_and_samples(http: &reqwest::Client, heddle: &HeddleProcess) -> (f64, f64) {
    let text = metrics_text(http, &heddle.url()).await.unwrap_or_default();
    let value = |name| metric_value(&text, name).unwrap_or(0.0);
    (
        value("heddle_ingester_wal_written_bytes_total"),
        value("heddle_ingester_ingested_samples_total"),
    )
}

/// Real scrape data (Prometheus' own metrics and both heddles'), remote-written by one Prometheus to a heddle
/// with WAL compression (the default) and to one without: snappy must really shrink the WAL of the same
/// samples (measured 2.17x). Measured after a warm-up, so the one-off series records do not flatter the ratio.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wal_compression_at_least_halves_the_wal_of_real_scrapes() {
    let Some(bin) = prometheus_tool("PROMETHEUS_BIN", "prometheus", "WAL compression test") else {
        return;
    };
    let start = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            HeddleProcess::start(HeddleOptions {
                args,
                ..HeddleOptions::default()
            })
        })
    };
    let snappy = start(Vec::new()).await.expect("join").expect("start heddle");
    let plain = start(vec!["--blocks-storage.tsdb.wal-compression-enabled=false".into()])
        .await
        .expect("join")
        .expect("start heddle");
    let dir = tempfile::Builder::new()
        .prefix("heddle-walc-")
        .tempdir()
        .expect("tempdir");
    let _prometheus = Prometheus::start(
        &bin,
        dir.path(),
        "prometheus-walc",
        &format!(
            r#"global:
  scrape_interval: 1s
scrape_configs:
  - job_name: prometheus
    static_configs:
      - targets: ["127.0.0.1:{{PORT}}"]
  - job_name: heddle
    static_configs:
      - targets: ["{a}", "{b}"]
remote_write:
  - url: {push_a}
    queue_config: {{batch_send_deadline: 1s, min_backoff: 30ms, max_backoff: 1s}}
  - url: {push_b}
    queue_config: {{batch_send_deadline: 1s, min_backoff: 30ms, max_backoff: 1s}}
"#,
            a = snappy.http_addr(),
            b = plain.http_addr(),
            push_a = snappy.push_url(),
            push_b = plain.push_url(),
        ),
    );
    let http = http_client(Duration::from_secs(10)).expect("client");
    // Waits (bounded) until both have ingested at least `samples`; returns both readings.
    let reach = |samples: f64| {
        let http = http.clone();
        let (snappy, plain) = (&snappy, &plain);
        async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(120);
            loop {
                let last = (
                    wal_and_samples(&http, snappy).await,
                    wal_and_samples(&http, plain).await,
                );
                if last.0.1 >= samples && last.1.1 >= samples {
                    return last;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "fewer than {samples} samples arrived: {last:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let warm = reach(5_000.0).await;
    let end = reach(warm.0.1.max(warm.1.1) + 40_000.0).await;
    let per_sample = |(b0, s0): (f64, f64), (b1, s1): (f64, f64)| (b1 - b0) / (s1 - s0);
    let compressed = per_sample(warm.0, end.0);
    let uncompressed = per_sample(warm.1, end.1);
    let ratio = uncompressed / compressed;
    eprintln!(
        "real scrapes: {uncompressed:.2} WAL bytes/sample uncompressed, {compressed:.2} with snappy: {ratio:.2}x smaller \
         ({} and {} samples measured)",
        end.1.1 - warm.1.1,
        end.0.1 - warm.0.1
    );
    assert!(
        ratio >= 2.0,
        "snappy shrinks the WAL only {ratio:.2}x on real scrape data"
    );
}

/// A native histogram of `count` observations in two buckets of schema 0 at `t`.
fn native_histogram(t: i64, count: u64) -> heddle_proto::prometheus::Histogram {
    use heddle_proto::prometheus::{BucketSpan, Histogram, histogram};
    Histogram {
        count: Some(histogram::Count::CountInt(count)),
        sum: count as f64 * 1.5,
        schema: 0,
        zero_threshold: 1e-128,
        zero_count: Some(histogram::ZeroCount::ZeroCountInt(0)),
        positive_spans: vec![BucketSpan { offset: 1, length: 2 }],
        positive_deltas: vec![1, count as i64 - 2],
        timestamp: t,
        ..Histogram::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_forwards_native_histograms_to_heddle() {
    let Some(bin) = prometheus_tool("PROMETHEUS_BIN", "prometheus", "prometheus native histogram test") else {
        return;
    };
    let heddle = tokio::task::spawn_blocking(|| HeddleProcess::start(HeddleOptions::default()))
        .await
        .expect("join")
        .expect("start heddle");
    let dir = tempfile::Builder::new()
        .prefix("heddle-prom-nh-")
        .tempdir()
        .expect("tempdir");
    // No scrape: what Prometheus forwards is exactly what the test pushes to it.
    let prometheus = Prometheus::start_with(
        &bin,
        dir.path(),
        "prometheus-histograms",
        &format!(
            r#"global:
  evaluation_interval: 1s
remote_write:
  - url: {push}
    remote_timeout: 5s
    send_native_histograms: true
    queue_config:
      batch_send_deadline: 1s
      min_backoff: 30ms
      max_backoff: 1s
"#,
            push = heddle.push_url()
        ),
        &[
            "--enable-feature=native-histograms",
            "--web.enable-remote-write-receiver",
        ],
    );
    let http = http_client(Duration::from_secs(30)).expect("client");
    // Prometheus' WAL watcher forwards only samples newer than its own start: these are a little ahead of it
    // (well inside heddle's creation grace period).
    let t0 = now_ms() + 1000;
    let series = |job: &str, counts: &[u64]| heddle_proto::prometheus::TimeSeries {
        histograms: counts
            .iter()
            .enumerate()
            .map(|(i, &c)| native_histogram(t0 + 1000 * i as i64, c))
            .collect(),
        ..heddle_testkit::timeseries(&[(METRIC_NAME, "request_duration_seconds"), ("job", job)], &[])
    };
    let req = heddle_proto::prometheus::WriteRequest {
        timeseries: vec![series("a", &[2, 5, 9]), series("b", &[3, 4])],
        metadata: vec![],
    };
    let out = heddle_testkit::push(&http, &format!("{}/api/v1/write", prometheus.url()), None, &req)
        .await
        .expect("push to prometheus");
    assert!(
        out.status / 100 == 2,
        "prometheus refused the push: {} {}",
        out.status,
        out.body
    );

    let stored = || async {
        let text = metrics_text(&http, &heddle.url()).await.ok()?;
        Some(metric_value(&text, "heddle_ingester_ingested_native_histograms_total").unwrap_or(0.0))
    };
    let all = wait_until_async(Duration::from_secs(60), || async { stored().await == Some(5.0) }).await;
    assert!(
        all,
        "heddle stored {:?} of the 5 histograms Prometheus received\n{}\n{}",
        stored().await,
        heddle.log_tail(20),
        prometheus.process.log_tail(20)
    );
    let body = metrics_text(&http, &heddle.url()).await.expect("metrics");
    assert!(
        !body.contains("heddle_discarded_samples_total{"),
        "nothing discarded:\n{}",
        body.lines()
            .filter(|l| l.contains("discarded"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
