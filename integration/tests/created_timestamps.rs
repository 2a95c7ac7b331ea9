//! Created timestamps end to end: a remote write 2.0 sender's start timestamps become the zero samples
//! Prometheus injects, stored once per counter start, kept through a crash (`kill -9`, WAL replay), and only
//! for a tenant that turned `--distributor.created-timestamp-zero-ingestion-enabled` on.

use heddle_proto::prometheus::WriteRequest;
use heddle_testkit::codec::{snappy_compress, write_request_v2};
use heddle_testkit::{
    HeddleOptions, HeddleProcess, ReadClient, ReadMode, RemoteWriteProtocol, eq, http_client, now_ms, push_body_as,
    query, timeseries,
};
use prost::Message as _;
use std::time::Duration;

/// A 2.0 body of `requests_total{job}` at `(t, v)` whose counter started at `start`.
fn counter(job: &str, t: i64, v: f64, start: i64) -> Vec<u8> {
    let mut req = write_request_v2(&WriteRequest {
        timeseries: vec![timeseries(&[("__name__", "requests_total"), ("job", job)], &[(t, v)])],
        metadata: vec![],
    });
    req.timeseries[0].samples[0].start_timestamp = start;
    snappy_compress(&req.encode_to_vec()).expect("snappy")
}

async fn samples(http: &reqwest::Client, heddle: &HeddleProcess, job: &str) -> Vec<(i64, f64)> {
    let read = ReadClient::new(http.clone(), &heddle.prometheus_url(), None);
    let got = read
        .read(ReadMode::StreamedChunks, vec![query(0, i64::MAX, vec![eq("job", job)])])
        .await
        .expect("remote read");
    assert_eq!(got[0].len(), 1, "one series: {:?}", got[0]);
    got[0][0].samples.iter().map(|s| (s.t, s.v)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_timestamps_become_zero_samples_and_survive_a_crash() {
    let mut heddle = tokio::task::spawn_blocking(|| {
        HeddleProcess::start(HeddleOptions {
            args: vec!["--distributor.created-timestamp-zero-ingestion-enabled=true".into()],
            ..HeddleOptions::default()
        })
    })
    .await
    .expect("join")
    .expect("start heddle");
    let http = http_client(Duration::from_secs(30)).expect("client");
    let t0 = now_ms() - 120_000;
    let send = |body: Vec<u8>| {
        let (http, url) = (http.clone(), heddle.push_url());
        async move {
            let out = push_body_as(&http, &url, None, RemoteWriteProtocol::V2, body)
                .await
                .expect("push");
            assert_eq!(out.status / 100, 2, "{}", out.body);
        }
    };
    // A counter started 30 s before its first sample, pushed twice with the same start: one zero sample.
    send(counter("api", t0, 3.0, t0 - 30_000)).await;
    send(counter("api", t0 + 15_000, 5.0, t0 - 30_000)).await;
    // It restarts: a new start between the last sample and the next one.
    send(counter("api", t0 + 40_000, 1.0, t0 + 35_000)).await;
    // A start at or after the sample says nothing.
    send(counter("other", t0, 2.0, t0)).await;
    let want = vec![
        (t0 - 30_000, 0.0),
        (t0, 3.0),
        (t0 + 15_000, 5.0),
        (t0 + 35_000, 0.0),
        (t0 + 40_000, 1.0),
    ];
    assert_eq!(samples(&http, &heddle, "api").await, want);
    assert_eq!(samples(&http, &heddle, "other").await, vec![(t0, 2.0)]);

    heddle = heddle.kill9_and_restart().await.expect("kill -9 and restart");
    assert_eq!(samples(&http, &heddle, "api").await, want, "after kill -9");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_option_start_timestamps_store_nothing() {
    let heddle = tokio::task::spawn_blocking(|| HeddleProcess::start(HeddleOptions::default()))
        .await
        .expect("join")
        .expect("start heddle");
    let http = http_client(Duration::from_secs(30)).expect("client");
    let t0 = now_ms() - 60_000;
    let out = push_body_as(
        &http,
        &heddle.push_url(),
        None,
        RemoteWriteProtocol::V2,
        counter("api", t0, 3.0, t0 - 1),
    )
    .await
    .expect("push");
    assert_eq!(out.status / 100, 2, "{}", out.body);
    assert_eq!(samples(&http, &heddle, "api").await, vec![(t0, 3.0)]);
}
