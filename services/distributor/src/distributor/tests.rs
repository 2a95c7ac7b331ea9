//! Distributor tests: quorum with fake ingesters, sharding, raw forwarding, rewriting, rate limiting, metrics.

use super::*;
use crate::ring::{ReplicaSet, SingleIngesterRing};
use crate::testutil::*;
use axum::http::StatusCode;
use heddle_proto::IngesterClient;
use heddle_proto::prometheus::{Exemplar, Histogram, Label, TimeSeries};
use prost::Message as _;

fn distributor_with(ring: Arc<dyn IngesterRing>, limits: Limits) -> (Distributor, Registry) {
    let mut registry = Registry::default();
    let d = Distributor::new(DistributorConfig::default(), limits, ring, &mut registry).with_clock(ManualClock::new());
    (d, registry)
}

fn distributor(ring: Arc<dyn IngesterRing>) -> (Distributor, Registry) {
    distributor_with(ring, Limits::default())
}

async fn push(d: &Distributor, series: Vec<TimeSeries>) -> Result<PushOutcome, PushError> {
    d.push(&tenant(), &body(series), &HeaderMap::new()).await
}

#[tokio::test(start_paused = true)]
async fn quorum_table() {
    use Behavior::*;
    let timeout = DistributorConfig::default().remote_timeout;
    let slow = Slow(timeout * 3);
    // (case, replica behaviours, expected status, substrings of the body)
    let cases: Vec<(&str, Vec<Behavior>, StatusCode, Vec<&str>)> = vec![
        ("rf3 all accept", vec![Accept, Accept, Accept], StatusCode::OK, vec![]),
        (
            "rf3 one unavailable",
            vec![Accept, Fail(tonic::Code::Unavailable), Accept],
            StatusCode::OK,
            vec![],
        ),
        (
            "rf3 one internal error",
            vec![Fail(tonic::Code::Internal), Accept, Accept],
            StatusCode::OK,
            vec![],
        ),
        (
            "rf3 one slow beyond timeout",
            vec![Accept, slow.clone(), Accept],
            StatusCode::OK,
            vec![],
        ),
        (
            "rf3 two unavailable",
            vec![Fail(tonic::Code::Unavailable), Accept, Fail(tonic::Code::Unavailable)],
            StatusCode::SERVICE_UNAVAILABLE,
            vec![
                "err-heddle-ingesters-unavailable",
                "ingester-0",
                "ingester-2",
                "needed 2 of 3",
                "tenant=team-a",
            ],
        ),
        (
            "rf3 one failing one slow",
            vec![Fail(tonic::Code::Unavailable), slow.clone(), Accept],
            StatusCode::SERVICE_UNAVAILABLE,
            vec![
                "ingester-1: no response within 2s",
                "ingester-0: Unavailable: fake ingester failure",
            ],
        ),
        (
            "rf3 internal error and timeout is 500",
            vec![Fail(tonic::Code::Internal), slow.clone(), Accept],
            StatusCode::INTERNAL_SERVER_ERROR,
            vec!["err-heddle-ingester-failed", "ingester-0: Internal"],
        ),
        (
            "rf3 all slow",
            vec![slow.clone(), slow.clone(), slow],
            StatusCode::SERVICE_UNAVAILABLE,
            vec!["1 series (1 samples)"],
        ),
        (
            "rf3 two refuse the series",
            vec![RefuseMetric("up"), RefuseMetric("up"), Accept],
            StatusCode::BAD_REQUEST,
            vec!["err-heddle-sample-out-of-order: sample out of order (metric=up)"],
        ),
        (
            "rf3 one refuses the series",
            vec![RefuseMetric("up"), Accept, Accept],
            StatusCode::OK,
            vec![],
        ),
        (
            "rf3 one refuses one fails",
            vec![RefuseMetric("up"), Fail(tonic::Code::Unavailable), Accept],
            StatusCode::SERVICE_UNAVAILABLE,
            vec!["ingester-1"],
        ),
        ("rf1 accept", vec![Accept], StatusCode::OK, vec![]),
        (
            "rf1 unavailable",
            vec![Fail(tonic::Code::Unavailable)],
            StatusCode::SERVICE_UNAVAILABLE,
            vec![],
        ),
        (
            "no ingesters",
            vec![],
            StatusCode::SERVICE_UNAVAILABLE,
            vec!["the ring has 0 healthy ingesters"],
        ),
    ];
    for (name, behaviors, status, wanted) in cases {
        let ring = StaticRing::new(&behaviors);
        let (d, _registry) = distributor(ring.clone());
        let outcome = push(&d, vec![up("up")])
            .await
            .unwrap_or_else(|e| panic!("case {name}: {e}"));
        let body = outcome.body();
        assert_eq!(outcome.status(), status, "case {name}: {body}");
        for w in wanted {
            assert!(body.contains(w), "case {name}: {w:?} not in {body:?}");
        }
        let expect_ingested = if status == StatusCode::OK { 1 } else { 0 };
        assert_eq!(outcome.samples_ingested, expect_ingested, "case {name}");
        assert_eq!(outcome.series_received, 1, "case {name}");
    }
}

#[tokio::test(start_paused = true)]
async fn quorum_does_not_wait_for_a_slow_replica_and_it_still_gets_the_write() {
    let timeout = DistributorConfig::default().remote_timeout;
    let ring = StaticRing::new(&[Behavior::Accept, Behavior::Slow(timeout / 2), Behavior::Accept]);
    let (d, _r) = distributor(ring.clone());
    let start = tokio::time::Instant::now();
    let outcome = push(&d, vec![up("up")]).await.unwrap();
    assert_eq!(outcome.status(), StatusCode::OK);
    assert!(
        start.elapsed() < timeout / 2,
        "answered after {:?}, before the slow replica",
        start.elapsed()
    );
    // The slow push was detached, not cancelled.
    tokio::time::sleep(timeout).await;
    assert_eq!(ring.ingesters[1].1.series().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn per_series_quorum_in_a_mixed_request() {
    // Two of three replicas refuse "bad" (400 for it); "good" reaches quorum and counts as ingested.
    let ring = StaticRing::new(&[
        Behavior::RefuseMetric("bad"),
        Behavior::RefuseMetric("bad"),
        Behavior::Accept,
    ]);
    let (d, _r) = distributor(ring);
    let outcome = push(&d, vec![up("good"), up("bad"), up("good2")]).await.unwrap();
    assert_eq!(outcome.status(), StatusCode::BAD_REQUEST);
    assert_eq!(outcome.samples_ingested, 2);
    assert_eq!(outcome.rejections.len(), 1, "{:?}", outcome.rejections);
    assert_eq!(outcome.rejections[0].reason, "err-heddle-sample-out-of-order");
}

/// Sends series with an even token to `even`, odd to `odd` (RF=1 each).
#[derive(Debug)]
struct ParityRing {
    even: Arc<FakeIngester>,
    odd: Arc<FakeIngester>,
}

impl IngesterRing for ParityRing {
    fn replica_set(&self, token: u32) -> ReplicaSet {
        let (id, c) = if token.is_multiple_of(2) {
            ("even", &self.even)
        } else {
            ("odd", &self.odd)
        };
        ReplicaSet {
            ingesters: vec![(id.to_owned(), Arc::clone(c) as Arc<dyn IngesterClient>)],
            min_success: 1,
            unavailable: None,
        }
    }
}

#[tokio::test]
async fn series_are_sharded_by_token_and_forwarded_byte_for_byte() {
    let ring = Arc::new(ParityRing {
        even: FakeIngester::new(Behavior::Accept),
        odd: FakeIngester::new(Behavior::Accept),
    });
    let (d, _r) = distributor(ring.clone());
    let sent: Vec<TimeSeries> = (0..40).map(|i| up(&format!("metric_{i}"))).collect();
    let outcome = push(&d, sent.clone()).await.unwrap();
    assert_eq!(outcome.status(), StatusCode::OK, "{}", outcome.body());
    assert_eq!(outcome.samples_ingested, 40);

    let mut received = 0;
    for (parity, ingester) in [(0, &ring.even), (1, &ring.odd)] {
        let bodies = ingester.bodies();
        assert_eq!(bodies.len(), 1, "one request per ingester");
        let got = ingester.series();
        received += got.len();
        // Same order as sent, and the body is exactly the re-framed original series bytes.
        let expected: Vec<&TimeSeries> = sent
            .iter()
            .filter(|s| {
                let labels = s.labels.iter().map(|l| (l.name.as_str(), l.value.as_str()));
                heddle_model::series_token("team-a", labels) % 2 == parity
            })
            .collect();
        assert_eq!(got.iter().collect::<Vec<_>>(), expected, "parity {parity}");
        let mut framed = Vec::new();
        heddle_proto::encode_write_request_raw(
            expected
                .iter()
                .map(|s| s.encode_to_vec())
                .collect::<Vec<_>>()
                .iter()
                .map(|v| v.as_slice()),
            &mut framed,
        );
        assert_eq!(
            bodies[0].as_ref(),
            framed.as_slice(),
            "parity {parity}: raw slices forwarded"
        );
    }
    assert_eq!(received, 40);
}

#[tokio::test]
async fn series_losing_parts_are_rewritten() {
    let fake = FakeIngester::new(Behavior::Accept);
    let (d, registry) = distributor(Arc::new(SingleIngesterRing::new("i", fake.clone())));
    let grace = Limits::default().creation_grace_period.as_millis() as i64;
    let mut with_extras = series(
        &[("__name__", "up"), ("empty", ""), ("job", "a")],
        &[(NOW_MS, 1.0), (NOW_MS + grace + 1, 2.0), (NOW_MS + 1, 3.0)],
    );
    with_extras.exemplars.push(Exemplar {
        labels: vec![Label {
            name: "trace_id".into(),
            value: "x".into(),
        }],
        value: 1.0,
        timestamp: NOW_MS,
    });
    with_extras.histograms.push(Histogram::default());
    let only_histogram = TimeSeries {
        histograms: vec![Histogram::default()],
        ..series(&[("__name__", "h")], &[])
    };
    let outcome = push(&d, vec![with_extras, only_histogram]).await.unwrap();
    // The future sample makes the response a 400, but the rest of the series is ingested.
    assert_eq!(outcome.status(), StatusCode::BAD_REQUEST);
    assert_eq!(outcome.samples_ingested, 2);
    let body = outcome.body();
    assert!(body.contains("err-heddle-too-far-in-future"), "{body}");
    assert!(body.contains("limits.creation_grace_period"), "{body}");
    assert!(body.contains(&format!("(first: {} ms)", NOW_MS + grace + 1)), "{body}");

    let got = fake.series();
    assert_eq!(got.len(), 1, "the histogram-only series is not forwarded");
    assert_eq!(
        got[0],
        series(&[("__name__", "up"), ("job", "a")], &[(NOW_MS, 1.0), (NOW_MS + 1, 3.0)]),
        "empty label, future sample, exemplar and histogram removed"
    );
    let text = exposition(&registry);
    for line in [
        r#"heddle_discarded_samples_total{tenant="team-a",reason="native-histograms-unsupported"} 2"#,
        r#"heddle_discarded_samples_total{tenant="team-a",reason="err-heddle-too-far-in-future"} 1"#,
        r#"heddle_distributor_discarded_exemplars_total{tenant="team-a",reason="exemplars-unsupported"} 1"#,
        r#"heddle_distributor_received_samples_total{tenant="team-a"} 2"#,
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
}

#[tokio::test]
async fn invalid_series_are_dropped_and_valid_ones_forwarded() {
    let fake = FakeIngester::new(Behavior::Accept);
    let (d, registry) = distributor(Arc::new(SingleIngesterRing::new("i", fake.clone())));
    let no_name = series(&[("job", "a")], &[(NOW_MS, 1.0), (NOW_MS, 2.0)]);
    let outcome = push(&d, vec![up("ok_1"), no_name, up("ok_2")]).await.unwrap();
    assert_eq!(outcome.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        outcome.rejections[0].message,
        "err-heddle-missing-metric-name: series has no metric name (tenant=team-a, series={job=\"a\"}): every \
         series needs a non-empty `__name__` label"
    );
    assert_eq!(fake.series(), vec![up("ok_1"), up("ok_2")]);
    let text = exposition(&registry);
    assert!(
        text.contains(r#"heddle_discarded_samples_total{tenant="team-a",reason="err-heddle-missing-metric-name"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(r#"heddle_distributor_requests_total{status="400"} 1"#),
        "{text}"
    );
    assert!(
        text.contains("heddle_distributor_request_duration_seconds_count 1"),
        "{text}"
    );
    let sent = body(vec![
        up("ok_1"),
        series(&[("job", "a")], &[(NOW_MS, 1.0), (NOW_MS, 2.0)]),
        up("ok_2"),
    ])
    .len();
    assert!(
        text.contains(&format!("heddle_distributor_received_bytes_total {sent}")),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn rate_limit_refuses_whole_request_and_recovers() {
    let fake = FakeIngester::new(Behavior::Accept);
    let limits = Limits {
        ingestion_rate: 2.0,
        ingestion_burst_size: 3,
        ..Limits::default()
    };
    let (d, registry) = distributor_with(Arc::new(SingleIngesterRing::new("i", fake.clone())), limits);
    assert!(push(&d, vec![up("a"), up("b")]).await.is_ok());
    let err = push(&d, vec![up("c"), up("d")]).await.unwrap_err();
    assert_eq!(err.status(), StatusCode::TOO_MANY_REQUESTS);
    let msg = err.to_string();
    for w in [
        "err-heddle-ingestion-rate-limited",
        "tenant=team-a",
        "2 samples/s",
        "burst of 3",
        "limits.ingestion_rate",
    ] {
        assert!(msg.contains(w), "{w:?} not in {msg}");
    }
    assert_eq!(fake.series().len(), 2, "nothing of the refused request was forwarded");
    tokio::time::advance(Duration::from_millis(500)).await;
    assert!(
        push(&d, vec![up("c"), up("d")]).await.is_ok(),
        "1 + 0.5 s * 2/s = 2 tokens"
    );
    let text = exposition(&registry);
    assert!(
        text.contains(
            r#"heddle_discarded_samples_total{tenant="team-a",reason="err-heddle-ingestion-rate-limited"} 2"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"heddle_distributor_requests_total{status="429"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"heddle_distributor_requests_total{status="200"} 2"#),
        "{text}"
    );
}

#[tokio::test]
async fn invalid_samples_do_not_consume_rate() {
    let limits = Limits {
        ingestion_rate: 1.0,
        ingestion_burst_size: 1,
        ..Limits::default()
    };
    let fake = FakeIngester::new(Behavior::Accept);
    let (d, _r) = distributor_with(Arc::new(SingleIngesterRing::new("i", fake)), limits);
    let many_bad = series(&[("job", "a")], &[(NOW_MS, 1.0), (NOW_MS + 1, 1.0), (NOW_MS + 2, 1.0)]);
    let outcome = push(&d, vec![many_bad, up("ok")]).await.unwrap();
    assert_eq!(outcome.samples_ingested, 1);
}

#[test]
fn header_checks() {
    let cfg = DistributorConfig {
        max_recv_msg_size: 100,
        ..DistributorConfig::default()
    };
    /// (case, headers, expected error id or None)
    type HeaderCase<'a> = (&'a str, &'a [(&'a str, &'a str)], Option<&'a str>);
    let cases: &[HeaderCase<'_>] = &[
        ("none", &[], None),
        (
            "rw1 headers",
            &[
                ("content-encoding", "snappy"),
                ("content-type", "application/x-protobuf"),
            ],
            None,
        ),
        (
            "case and spaces",
            &[
                ("content-encoding", " Snappy "),
                ("content-type", "Application/X-Protobuf"),
            ],
            None,
        ),
        (
            "params ignored",
            &[("content-type", "application/x-protobuf; charset=utf-8")],
            None,
        ),
        (
            "rw1 proto param",
            &[("content-type", "application/x-protobuf;proto=prometheus.WriteRequest")],
            None,
        ),
        (
            "rw2 proto param",
            &[(
                "content-type",
                "application/x-protobuf;proto=io.prometheus.write.v2.Request",
            )],
            Some("err-heddle-unsupported-content-type"),
        ),
        (
            "json",
            &[("content-type", "application/json")],
            Some("err-heddle-unsupported-content-type"),
        ),
        (
            "gzip",
            &[("content-encoding", "gzip")],
            Some("err-heddle-unsupported-content-encoding"),
        ),
        (
            "identity",
            &[("content-encoding", "identity")],
            Some("err-heddle-unsupported-content-encoding"),
        ),
        ("length at limit", &[("content-length", "100")], None),
        (
            "length over limit",
            &[("content-length", "101")],
            Some("err-heddle-request-too-large"),
        ),
    ];
    for (name, pairs, want) in cases {
        let mut h = HeaderMap::new();
        for (k, v) in *pairs {
            h.insert(*k, v.parse().unwrap());
        }
        let got = check_headers(&h, &cfg).err().map(|e| e.id());
        assert_eq!(got, *want, "case {name}");
    }
}

/// A ring that cannot form any replica set, as the gossip ring does with too many unhealthy ingesters.
#[derive(Debug)]
struct BrokenRing;

impl IngesterRing for BrokenRing {
    fn replica_set(&self, _token: u32) -> ReplicaSet {
        ReplicaSet {
            ingesters: Vec::new(),
            min_success: 1,
            unavailable: Some(
                "err-heddle-ring-too-many-unhealthy: at least 2 live replicas required, could only find 1 \
                 (unhealthy or unreachable: ing-1,ing-2)"
                    .into(),
            ),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_rings_error_is_quoted_when_no_replica_set_can_be_formed() {
    let (d, _registry) = distributor(Arc::new(BrokenRing));
    let outcome = push(&d, vec![up("up")]).await.expect("push");
    let body = outcome.body();
    assert_eq!(outcome.status(), StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(
        body.contains("no replica set: err-heddle-ring-too-many-unhealthy") && body.contains("ing-1,ing-2"),
        "{body}"
    );
}

/// Each ingester's pushes are counted by outcome and timed, per ingester.
#[tokio::test]
async fn per_ingester_push_metrics() {
    let ring = Arc::new(ParityRing {
        even: FakeIngester::new(Behavior::Accept),
        odd: FakeIngester::new(Behavior::Fail(tonic::Code::Unavailable)),
    });
    let (d, registry) = distributor(ring);
    let sent: Vec<TimeSeries> = (0..40).map(|i| up(&format!("metric_{i}"))).collect();
    let outcome = push(&d, sent).await.unwrap();
    assert!(outcome.status().is_server_error(), "{}", outcome.body());
    let text = exposition(&registry);
    for want in [
        r#"heddle_distributor_ingester_pushes_total{ingester="even",outcome="ok"} 1"#,
        r#"heddle_distributor_ingester_pushes_total{ingester="odd",outcome="error"} 1"#,
        r#"heddle_distributor_ingester_push_duration_seconds_count{ingester="even"} 1"#,
        r#"heddle_distributor_ingester_push_duration_seconds_count{ingester="odd"} 1"#,
    ] {
        assert!(text.contains(want), "missing {want} in:\n{text}");
    }
}
