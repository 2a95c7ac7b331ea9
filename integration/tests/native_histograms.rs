//! Native histograms end to end, into a real `heddle` process: pushed with remote write 1.0 and 2.0 (and an
//! invalid one refused by name), counted by the ingester, and kept through a crash (`kill -9`, WAL replay):
//! after the restart the head knows each series' newest histogram, so an older one is refused as out of
//! order and the newest one again is accepted as a duplicate. Then the same through a cluster, where the
//! histograms cross the distributor-to-ingester gRPC hop inside remote write 1.0 bytes (raw, or re-encoded
//! for a 2.0 request and for a histogram over the bucket limit). After the crash, PromQL reads the replayed
//! histograms back: `histogram_count`, `histogram_sum`, a vector's `"histogram"` and a range's `"histograms"`,
//! as Prometheus' API writes them.

use heddle_proto::prometheus::{BucketSpan, Histogram, TimeSeries, WriteRequest, histogram};
use heddle_testkit::{
    Cluster, ClusterOptions, HeddleOptions, HeddleProcess, RemoteWriteProtocol, codec::encode_write_request_v2,
    http_client, metric_value, metrics_text, now_ms, push, timeseries,
};
use std::time::Duration;

/// An integer histogram at `t` whose buckets hold `count` observations (its count is `count` plus `extra`,
/// so a non-zero `extra` makes it invalid).
fn int_histogram(t: i64, count: i64, extra: u64) -> Histogram {
    Histogram {
        count: Some(histogram::Count::CountInt(count as u64 + extra)),
        sum: count as f64 * 0.25,
        schema: 3,
        zero_threshold: 1e-128,
        zero_count: Some(histogram::ZeroCount::ZeroCountInt(0)),
        positive_spans: vec![BucketSpan { offset: 2, length: 2 }],
        positive_deltas: vec![1, count - 2],
        timestamp: t,
        ..Histogram::default()
    }
}

fn histogram_series(name: &str, histograms: Vec<Histogram>) -> TimeSeries {
    TimeSeries {
        histograms,
        ..timeseries(&[("__name__", name), ("job", "api")], &[])
    }
}

fn request(timeseries: Vec<TimeSeries>) -> WriteRequest {
    WriteRequest {
        timeseries,
        metadata: vec![],
    }
}

async fn metric(http: &reqwest::Client, heddle: &HeddleProcess, name: &str) -> f64 {
    metric_at(http, &heddle.url(), name).await
}

async fn metric_at(http: &reqwest::Client, url: &str, name: &str) -> f64 {
    let text = metrics_text(http, url).await.expect("metrics");
    metric_value(&text, name).unwrap_or_else(|| panic!("{name} not in /metrics"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_histograms_are_ingested_and_survive_a_crash() {
    let mut heddle = tokio::task::spawn_blocking(|| HeddleProcess::start(HeddleOptions::default()).expect("start"))
        .await
        .expect("join");
    let http = http_client(Duration::from_secs(30)).expect("client");
    let t0 = now_ms() - 60_000;

    // Remote write 1.0: two histograms of one series, one in a series with a float sample too, and an
    // invalid one (its count is not what its buckets hold), refused by name while the rest is stored.
    let mut mixed = timeseries(&[("__name__", "mixed"), ("job", "api")], &[(t0, 1.0)]);
    mixed.histograms = vec![int_histogram(t0 + 1, 5, 0)];
    let req = request(vec![
        histogram_series(
            "latency_v1",
            vec![int_histogram(t0, 3, 0), int_histogram(t0 + 15_000, 7, 0)],
        ),
        mixed,
        histogram_series("broken", vec![int_histogram(t0, 3, 1)]),
    ]);
    let out = push(&http, &heddle.push_url(), None, &req).await.expect("push 1.0");
    assert_eq!(out.status, 400, "{}", out.body);
    assert!(
        out.body.contains("err-heddle-native-histogram-count-mismatch")
            && out
                .body
                .contains("3 observations found in buckets, but the count field is 4")
            && out.body.contains("broken"),
        "{}",
        out.body
    );

    // Remote write 2.0: the written-counts header says what was stored.
    let v2 = [int_histogram(t0, 4, 0), int_histogram(t0 + 15_000, 9, 0)];
    let resp = http
        .post(heddle.push_url())
        .header("Content-Encoding", "snappy")
        .header("Content-Type", RemoteWriteProtocol::V2.headers().0)
        .header("X-Prometheus-Remote-Write-Version", "2.0.0")
        .body(encode_write_request_v2(&request(vec![histogram_series("latency_v2", v2.to_vec())])).expect("encode"))
        .send()
        .await
        .expect("push 2.0");
    let written = |what: &str| {
        resp.headers()
            .get(format!("x-prometheus-remote-write-{what}-written"))
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(resp.status(), 200);
    assert_eq!(written("histograms").as_deref(), Some("2"));
    assert_eq!(written("samples").as_deref(), Some("0"));

    assert_eq!(
        metric(&http, &heddle, "heddle_ingester_ingested_native_histograms_total").await,
        5.0
    );
    assert_eq!(
        metric(&http, &heddle, "heddle_ingester_ingested_samples_total").await,
        1.0
    );
    let discarded =
        r#"heddle_discarded_samples_total{tenant="anonymous",reason="err-heddle-native-histogram-count-mismatch"}"#;
    assert_eq!(metric(&http, &heddle, discarded).await, 1.0);

    // A crash: the WAL brings the histograms back.
    heddle = heddle.kill9_and_restart().await.expect("kill -9 and restart");
    assert_eq!(metric(&http, &heddle, "heddle_ingester_memory_series").await, 3.0);
    // PromQL over what the WAL replay brought back.
    let promql = |path: String| {
        let http = http.clone();
        let url = format!("{}/prometheus/api/v1/{path}", heddle.url());
        async move {
            let text = http.get(url).send().await.expect("query").text().await.expect("body");
            let body: serde_json::Value = serde_json::from_str(&text).expect("json");
            assert_eq!(body["status"], "success", "{body}");
            body["data"]["result"].clone()
        }
    };
    let at = (t0 + 15_000) / 1000 + 1;
    let count = promql(format!("query?query=histogram_count(latency_v1)&time={at}")).await;
    assert_eq!(count[0]["value"][1], "7", "{count}");
    let sum = promql(format!("query?query=histogram_sum(latency_v2)&time={at}")).await;
    assert_eq!(sum[0]["value"][1], "2.25", "{sum}");
    let vector = promql(format!("query?query=latency_v2&time={at}")).await;
    let h = &vector[0]["histogram"][1];
    assert_eq!((&h["count"], &h["sum"]), (&"9".into(), &"2.25".into()), "{vector}");
    // Schema 3, buckets 2 and 3: (2^(1/8), 2^(2/8)] holds 1, (2^(2/8), 2^(3/8)] the other 8.
    assert_eq!(h["buckets"].as_array().map(Vec::len), Some(2), "{vector}");
    assert_eq!(h["buckets"][1][3], "8", "{vector}");
    let range = promql(format!(
        "query_range?query=latency_v1&start={}&end={}&step=15",
        t0 / 1000 + 1,
        at
    ))
    .await;
    let points = range[0]["histograms"].as_array().cloned().unwrap_or_default();
    let counts: Vec<&str> = points.iter().filter_map(|p| p[1]["count"].as_str()).collect();
    assert_eq!(counts.last(), Some(&"7"), "{range}");
    assert!(
        range[0].get("values").is_none(),
        "a histogram-only series has no float values: {range}"
    );
    // The newest histogram again: a duplicate, accepted and not stored twice; an older one: out of order.
    let again = request(vec![histogram_series(
        "latency_v1",
        vec![int_histogram(t0 + 15_000, 7, 0)],
    )]);
    let out = push(&http, &heddle.push_url(), None, &again).await.expect("push again");
    assert_eq!(out.status, 200, "{}", out.body);
    let older = request(vec![histogram_series(
        "latency_v2",
        vec![int_histogram(t0 + 5_000, 4, 0)],
    )]);
    let out = push(&http, &heddle.push_url(), None, &older).await.expect("push older");
    assert_eq!(out.status, 400, "{}", out.body);
    assert!(out.body.contains("err-heddle-sample-out-of-order"), "{}", out.body);
    assert_eq!(
        metric(&http, &heddle, "heddle_ingester_ingested_native_histograms_total").await,
        0.0,
        "nothing new stored after the restart"
    );
}

#[test]
fn native_histograms_cross_the_grpc_hop_to_the_ingesters() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let cluster = Cluster::start(ClusterOptions {
        ingesters: 2,
        distributors: 1,
        replication_factor: 2,
        args: vec!["--validation.max-native-histogram-buckets=1".into()],
        ready_timeout: Duration::from_secs(120),
        ..ClusterOptions::default()
    })
    .expect("start a cluster");
    runtime.block_on(async {
        let http = http_client(Duration::from_secs(30)).expect("client");
        let push_url = cluster.distributor(0).push_url();
        let t0 = now_ms() - 60_000;
        // One bucket: forwarded as its bytes. Two buckets over the limit of one: merged into one bucket of a
        // lower schema and re-encoded.
        let one_bucket = Histogram {
            count: Some(histogram::Count::CountInt(2)),
            positive_spans: vec![BucketSpan { offset: 0, length: 1 }],
            positive_deltas: vec![2],
            ..int_histogram(t0, 2, 0)
        };
        let req = request(vec![
            histogram_series("small", vec![one_bucket]),
            histogram_series("reduced", vec![int_histogram(t0, 3, 0)]),
        ]);
        let out = push(&http, &push_url, None, &req).await.expect("push 1.0");
        assert_eq!(out.status, 200, "{}", out.body);
        let v2 = encode_write_request_v2(&request(vec![histogram_series(
            "small_v2",
            vec![Histogram {
                timestamp: t0 + 1,
                ..req.timeseries[0].histograms[0].clone()
            }],
        )]))
        .expect("encode");
        let resp = http
            .post(&push_url)
            .header("Content-Encoding", "snappy")
            .header("Content-Type", RemoteWriteProtocol::V2.headers().0)
            .header("X-Prometheus-Remote-Write-Version", "2.0.0")
            .body(v2)
            .send()
            .await
            .expect("push 2.0");
        assert_eq!(resp.status(), 200);
        let mut stored = 0.0;
        for ingester in cluster.ingesters() {
            stored += metric_at(
                &http,
                &ingester.url(),
                "heddle_ingester_ingested_native_histograms_total",
            )
            .await;
        }
        assert_eq!(stored, 6.0, "three histograms, on both replicas");
    });
}
