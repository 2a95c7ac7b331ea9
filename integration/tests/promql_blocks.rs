//! PromQL answers do not depend on where the data lives: the same queries, asked of a heddle whose ingester
//! holds five hours of data in its head, and again after that data was flushed to the bucket and the ingester
//! replaced by an empty one (so every sample comes from bucket blocks), give identical answers, value for
//! value. Instant and range queries, range functions, aggregations, subqueries and `offset`.

use heddle_testkit::{HeddleOptions, HeddleProcess, SeriesGen, http_client, now_ms, push};
use serde_json::Value;
use std::time::Duration;

const SERIES: usize = 60;
const METRICS: usize = 6;
const INTERVAL_MS: i64 = 60_000;
/// Five hours at one sample a minute: three 2 h block ranges.
const ROUNDS: u32 = 300;
const RANGE_MS: i64 = 2 * 3600 * 1000;
const JOB: &str = "promql-blocks";

/// Queries whose answers are compared; their times come from the workload.
const QUERIES: &[&str] = &[
    r#"rate(node_cpu_seconds_total{job="promql-blocks"}[5m])"#,
    r#"sum by (mode) (increase(node_cpu_seconds_total{job="promql-blocks"}[10m]))"#,
    r#"max_over_time(node_memory_MemAvailable_bytes{job="promql-blocks"}[30m])"#,
    r#"avg by (__name__) ({job="promql-blocks"} offset 1h)"#,
    r#"topk(3, node_memory_MemAvailable_bytes{job="promql-blocks"})"#,
    r#"max_over_time(rate(node_cpu_seconds_total{job="promql-blocks"}[5m])[1h:5m])"#,
    r#"count({job="promql-blocks"}) by (instance)"#,
];

fn workload() -> SeriesGen {
    let start = (now_ms() - 6 * 3600 * 1000).div_euclid(RANGE_MS) * RANGE_MS;
    let mut g = SeriesGen::new(7, SERIES, METRICS, start);
    g.interval_ms = INTERVAL_MS;
    g.job = JOB.to_owned();
    g
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

/// Every query as an instant query at three times and as one range query over the whole workload.
async fn answers(heddle: &HeddleProcess, g: &SeriesGen) -> Vec<(String, Value)> {
    let http = http_client(Duration::from_secs(60)).unwrap();
    let (start, end) = g.time_range(ROUNDS);
    let secs = |ms: i64| format!("{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000));
    let mut out = Vec::new();
    for q in QUERIES {
        let mut calls = vec![(
            "query_range",
            vec![
                ("query", q.to_string()),
                ("start", secs(start + 600_000)),
                ("end", secs(end)),
                ("step", "300".to_owned()),
            ],
        )];
        for t in [start + 3_600_000, start + 3 * 3_600_000 + 30_000, end] {
            calls.push(("query", vec![("query", q.to_string()), ("time", secs(t))]));
        }
        for (endpoint, params) in calls {
            let query: Vec<String> = params.iter().map(|(k, v)| format!("{k}={}", encode(v))).collect();
            let url = format!("{}/api/v1/{endpoint}?{}", heddle.prometheus_url(), query.join("&"));
            let resp = http.get(&url).send().await.expect("query sent");
            let status = resp.status();
            let text = resp.text().await.expect("answer read");
            let body: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{endpoint} {q}: {e}: {text}"));
            assert!(status.is_success(), "{endpoint} {q}: {status}: {body}");
            out.push((format!("{endpoint} {params:?}"), body["data"].clone()));
        }
    }
    out
}

fn non_empty(answers: &[(String, Value)]) -> bool {
    answers
        .iter()
        .all(|(_, data)| data["result"].as_array().is_some_and(|r| !r.is_empty()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_queries_answer_the_same_from_ingesters_and_from_bucket_blocks() {
    let g = workload();
    let mut heddle = HeddleProcess::start(HeddleOptions {
        args: [
            // Nothing is compacted until the flush: the first answers come from the ingester's head only.
            "--blocks-storage.tsdb.head-compaction-interval=1h",
            "--blocks-storage.bucket-store.sync-interval=500ms",
            "--blocks-storage.tsdb.empty-head-sample-age-limit=24h",
        ]
        .map(String::from)
        .to_vec(),
        ..HeddleOptions::default()
    })
    .expect("heddle starts");
    let http = http_client(Duration::from_secs(30)).unwrap();
    for r in (0..ROUNDS).step_by(20) {
        let out = push(
            &http,
            &heddle.push_url(),
            None,
            &g.write_request(0..g.series, r..(r + 20).min(ROUNDS)),
        )
        .await
        .expect("push sent");
        assert!(out.is_success(), "push refused: {out:?}");
    }
    let from_head = answers(&heddle, &g).await;
    assert!(
        non_empty(&from_head),
        "a query found nothing in the head: {from_head:?}"
    );
    assert!(
        !heddle.root_dir().join("blocks").join("anonymous").exists(),
        "blocks were shipped before the flush"
    );

    let flushed = http
        .post(format!("{}/ingester/flush?wait=true", heddle.url()))
        .send()
        .await
        .expect("flush sent");
    assert_eq!(flushed.status().as_u16(), 204, "flush failed");
    heddle.sigterm_and_wait().unwrap();
    std::fs::remove_dir_all(heddle.data_dir()).unwrap();
    heddle.restart().unwrap();

    // The empty ingester answers nothing; the bucket's blocks answer everything once the store has listed them.
    let mut from_bucket = Vec::new();
    for _ in 0..60 {
        from_bucket = answers(&heddle, &g).await;
        if non_empty(&from_bucket) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        non_empty(&from_bucket),
        "the bucket's blocks never answered: {from_bucket:?}"
    );
    assert_eq!(from_head.len(), from_bucket.len());
    for ((call, head), (_, bucket)) in from_head.iter().zip(&from_bucket) {
        assert_eq!(head, bucket, "{call}: the head and the bucket answer differently");
    }
}
