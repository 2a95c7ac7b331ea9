//! The memory and connection bounds of the real binary: a degenerate push is refused before it is decoded, a
//! remote-read request of fifty full-scan queries stops at the series limit, and a half-sent request head is
//! cut off after the header timeout. Everything runs on 127.0.0.1 and is stopped by the test.

use heddle_proto::prometheus::{LabelMatcher, WriteRequest, label_matcher::Type};
use heddle_testkit::codec::snappy_compress;
use heddle_testkit::{HeddleOptions, HeddleProcess, ReadClient, ReadMode, TestkitError, http_client, now_ms, query};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

fn heddle(args: &[&str]) -> HeddleProcess {
    HeddleProcess::start(HeddleOptions {
        args: args.iter().map(|a| a.to_string()).collect(),
        ..HeddleOptions::default()
    })
    .expect("heddle starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_degenerate_push_is_refused_and_valid_pushes_still_land() {
    let h = heddle(&[]);
    let client = http_client(Duration::from_secs(30)).unwrap();
    let body = snappy_compress(&heddle_testkit::codec::empty_labels_request(1_000_000)).unwrap();
    let out = heddle_testkit::push_body(&client, &h.push_url(), None, body)
        .await
        .unwrap();
    assert_eq!(out.status, 400, "{}", out.body);
    assert!(
        out.body.starts_with("err-heddle-degenerate-write-request:") && out.body.contains("1000000 labels"),
        "{}",
        out.body
    );

    let t = now_ms();
    let valid = WriteRequest {
        timeseries: vec![heddle_testkit::timeseries(&[("__name__", "up")], &[(t, 1.0)])],
        ..Default::default()
    };
    let out = heddle_testkit::push(&client, &h.push_url(), None, &valid)
        .await
        .unwrap();
    assert_eq!(out.status, 200, "{}", out.body);
    let (_, metrics) = heddle_testkit::http_get(h.http_addr(), "/metrics", Duration::from_secs(10)).unwrap();
    assert!(
        metrics.contains("heddle_distributor_inflight_push_requests_bytes 0"),
        "every reservation is released once the pushes are answered:\n{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_full_scan_queries_share_one_series_budget() {
    let h = heddle(&["--querier.max-fetched-series-per-query=250"]);
    let client = http_client(Duration::from_secs(30)).unwrap();
    let t = now_ms();
    let timeseries = (0..100)
        .map(|i| heddle_testkit::timeseries(&[("__name__", "metric"), ("i", &format!("{i:03}"))], &[(t, 1.0)]))
        .collect();
    let out = heddle_testkit::push(
        &client,
        &h.push_url(),
        None,
        &WriteRequest {
            timeseries,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(out.status, 200, "{}", out.body);

    let all = LabelMatcher {
        r#type: Type::Re as i32,
        name: "__name__".into(),
        value: ".+".into(),
    };
    let read = ReadClient::new(client.clone(), &h.prometheus_url(), None);
    for mode in [ReadMode::Samples, ReadMode::StreamedChunks] {
        let queries = vec![query(t - 60_000, t + 60_000, vec![all.clone()]); 50];
        match read.read(mode, queries).await {
            Err(TestkitError::Status { status, body, .. }) => {
                assert_eq!(status, 422, "{mode:?}: {body}");
                assert!(
                    body.starts_with("err-heddle-max-series-per-query:")
                        && body.contains("251 fetched so far and the limit is 250")
                        && body.contains("--querier.max-fetched-series-per-query"),
                    "{mode:?}: {body}"
                );
            }
            other => panic!("{mode:?}: expected 422, got {other:?}"),
        }
        let two = vec![query(t - 60_000, t + 60_000, vec![all.clone()]); 2];
        let answer = read.read(mode, two).await.expect("two copies fit the budget");
        assert_eq!(answer.iter().map(Vec::len).collect::<Vec<_>>(), [100, 100], "{mode:?}");
    }
    let (_, metrics) = heddle_testkit::http_get(h.http_addr(), "/metrics", Duration::from_secs(10)).unwrap();
    assert!(
        metrics.contains(r#"heddle_querier_refused_queries_total{reason="err-heddle-max-series-per-query"} 2"#),
        "{metrics}"
    );
}

#[test]
fn a_half_sent_request_head_is_cut_off_after_the_header_timeout() {
    let h = heddle(&["--server.http-server-read-header-timeout=1s"]);
    let mut slow = std::net::TcpStream::connect(h.http_addr()).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    slow.write_all(b"GET /ready HTTP/1.1\r\nHost: x\r\nX-Slow: ").unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 256];
    let n = slow
        .read(&mut buf)
        .expect("the server closes the connection rather than the read timing out");
    let took = start.elapsed();
    assert_eq!(
        n,
        0,
        "no response to a half header: {:?}",
        String::from_utf8_lossy(&buf[..n])
    );
    assert!(
        took < Duration::from_secs(10),
        "closed after {took:?}, the timeout is 1 s"
    );
    let (status, _) = heddle_testkit::http_get(h.http_addr(), "/ready", Duration::from_secs(10)).unwrap();
    assert_eq!(status, 200, "complete requests are still served");
    let (_, metrics) = heddle_testkit::http_get(h.http_addr(), "/metrics", Duration::from_secs(10)).unwrap();
    assert!(
        metrics.contains("heddle_http_header_read_timeouts_total 1"),
        "{metrics}"
    );
}
