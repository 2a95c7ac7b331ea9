//! Forward tests: quorum per series with fake ingesters that accept, fail, refuse or stall, and the
//! per-ingester metrics.

use super::*;
use crate::DistributorConfig;
use crate::distributor::shard::{Batch, BatchBody, Forwarded};
use crate::distributor::tests::{ParityRing, distributor, push};
use crate::testutil::*;
use heddle_proto::IngesterClient;
use heddle_proto::prometheus::TimeSeries;
use http::StatusCode;
use std::sync::Arc;

/// `sent` framed as one ingester's batch, standing for the series numbered `series`.
fn batch(instance: &str, fake: &Arc<FakeIngester>, series: Vec<usize>, sent: Vec<TimeSeries>) -> Batch {
    let body = heddle_proto::prometheus::WriteRequest {
        timeseries: sent,
        metadata: Vec::new(),
    };
    Batch {
        instance: instance.to_owned(),
        client: Arc::clone(fake) as Arc<dyn heddle_proto::IngesterClient>,
        body: BatchBody::Encoded(prost::Message::encode_to_vec(&body).into()),
        series,
    }
}

/// Runs the stage alone on `sharded`, with the default remote timeout.
async fn forward_alone(sharded: Sharded) -> Acked {
    let mut registry = prometheus_client::registry::Registry::default();
    let discarded = heddle_server::DiscardedSamples::register(&mut registry);
    let metrics = Metrics::register(&mut registry, discarded);
    let warn = LogLimiter::new(10, std::time::Duration::from_secs(1));
    let timeout = DistributorConfig::default().remote_timeout;
    forward(&tenant(), sharded, timeout, &metrics, &warn).await
}

#[tokio::test(start_paused = true)]
async fn stage_decides_each_series_by_its_own_quorum() {
    let a = fake(Behavior::Accept);
    let b = fake(Behavior::Fail(tonic::Code::Unavailable));
    let two = Forwarded {
        samples: 1,
        histograms: 0,
        exemplars: 0,
        replicas: 2,
        min_success: 2,
    };
    let one = Forwarded {
        samples: 3,
        histograms: 0,
        exemplars: 0,
        replicas: 1,
        min_success: 1,
    };
    let acked = forward_alone(Sharded {
        series: vec![two, one],
        batches: vec![
            batch("a", &a, vec![0, 1], vec![up("x"), up("y")]),
            batch("b", &b, vec![0], vec![up("x")]),
        ],
        ring_error: None,
    })
    .await;
    assert_eq!(acked.samples_ingested, 3, "series 1 reached its quorum of one");
    assert!(acked.rejections.is_empty());
    let f = acked.failure.expect("series 0 fell short");
    assert_eq!((f.series, f.samples, f.unavailable), (1, 1, true));
    assert!(f.message.contains("b: Unavailable"), "{}", f.message);
}

#[tokio::test(start_paused = true)]
async fn stage_turns_refusals_by_too_many_replicas_into_rejections() {
    let refuse = || fake(Behavior::RefuseMetric("x"));
    let (a, b) = (refuse(), refuse());
    let two = Forwarded {
        samples: 1,
        histograms: 0,
        exemplars: 0,
        replicas: 2,
        min_success: 2,
    };
    let acked = forward_alone(Sharded {
        series: vec![two],
        batches: vec![
            batch("a", &a, vec![0], vec![up("x")]),
            batch("b", &b, vec![0], vec![up("x")]),
        ],
        ring_error: None,
    })
    .await;
    assert_eq!(acked.samples_ingested, 0);
    assert!(acked.failure.is_none(), "{:?}", acked.failure);
    assert_eq!(acked.rejections.len(), 1);
    assert_eq!(acked.rejections[0].reason, "err-heddle-sample-out-of-order");
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
    assert_eq!(ring.ingesters[1].1.pushed_series().len(), 1);
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

/// A ring that cannot form any replica set, as the gossip ring does with too many unhealthy ingesters.
#[derive(Debug)]
struct BrokenRing;

impl Replicas<Arc<dyn IngesterClient>> for BrokenRing {
    fn for_read(&self) -> Result<ReadSet<Arc<dyn IngesterClient>>, RingError> {
        no_read_set()
    }

    fn for_write(&self, _token: u32) -> WriteSet<Arc<dyn IngesterClient>> {
        WriteSet {
            replicas: Vec::new(),
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
        even: fake(Behavior::Accept),
        odd: fake(Behavior::Fail(tonic::Code::Unavailable)),
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
