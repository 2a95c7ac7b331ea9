//! Shard tests: the stage over decoded series with rings built for the case, then sharding and raw or
//! rewritten forwarding through the whole push path.

use super::*;
use crate::distributor::decode::{Framing, decode};
use crate::distributor::tests::{ParityRing, StageSinks, distributor, push};
use crate::distributor::validate::validate;
use crate::testutil::*;
use heddle_limits::Limits;
use heddle_proto::prometheus::{Exemplar, Histogram, Label, MetricMetadata, TimeSeries, WriteRequest, histogram};
use http::StatusCode;

/// Decodes and validates `sent` as the pipeline does, then shards it onto `ring`.
fn shard_request(ring: &IngesterReplicas, sent: Vec<TimeSeries>) -> Sharded {
    let sinks = StageSinks::new();
    let arena = Bump::new();
    let series = decode(
        &arena,
        &body(sent),
        Framing::Snappy,
        crate::distributor::RemoteWriteVersion::V1,
        1 << 20,
        &mut crate::testutil::unlimited_reservation(),
    )
    .unwrap()
    .series;
    let valid = validate(
        &arena,
        &Limits::default(),
        series,
        None,
        false,
        NOW_MS,
        sinks.discards(),
    );
    shard(&arena, &sinks.tenant, ring, &valid.accepted, &[], valid.window)
}

/// Lists one ingester twice and reports why it could not find more.
#[derive(Debug)]
struct TwiceRing(Arc<FakeIngester>);

impl Replicas<Arc<dyn IngesterClient>> for TwiceRing {
    fn for_read(&self) -> Result<ReadSet<Arc<dyn IngesterClient>>, RingError> {
        no_read_set()
    }

    fn for_write(&self, _token: u32) -> WriteSet<Arc<dyn IngesterClient>> {
        let c = Arc::clone(&self.0) as Arc<dyn IngesterClient>;
        WriteSet {
            replicas: vec![("a".to_owned(), c.clone()), ("a".to_owned(), c)],
            min_success: 2,
            unavailable: Some("only one ingester".into()),
        }
    }
}

#[test]
fn an_ingester_listed_twice_gets_each_series_once() {
    let ring = TwiceRing(fake(Behavior::Accept));
    let sharded = shard_request(&ring, vec![up("a"), up("b")]);
    assert_eq!(sharded.batches.len(), 1);
    assert_eq!(
        sharded.batches[0].series,
        vec![0, 1],
        "each series once, in request order"
    );
    assert_eq!(
        sharded.series,
        vec![
            Forwarded {
                samples: 1,
                histograms: 0,
                exemplars: 0,
                replicas: 2,
                min_success: 2
            };
            2
        ]
    );
    assert_eq!(sharded.ring_error.as_deref(), Some("only one ingester"));
}

#[test]
fn unchanged_series_are_framed_from_their_raw_bytes() {
    let fake = fake(Behavior::Accept);
    let ring = single(fake);
    let sent = vec![up("a"), up("b")];
    let sharded = shard_request(&ring, sent.clone());
    let mut framed = Vec::new();
    let encoded: Vec<Vec<u8>> = sent.iter().map(|s| s.encode_to_vec()).collect();
    encode_write_request_raw(encoded.iter().map(|v| v.as_slice()), &mut framed);
    let BatchBody::Encoded(body) = &sharded.batches[0].body else {
        panic!("a client over the network gets an encoded body");
    };
    assert_eq!(body.as_ref(), framed.as_slice());
}

/// An ingester in the distributor's process takes the decoded series as a batch: it must receive exactly
/// what an ingester over the network decodes from its body, raw or rewritten (empty label, future sample,
/// exemplar and histogram dropped), series for series, and answer the push the same way.
#[tokio::test]
async fn an_ingester_in_this_process_gets_the_series_the_network_one_decodes() {
    let net = fake(Behavior::Accept);
    let local = Arc::new(FakeIngester::new().taking_batches());
    let ring = Arc::new(StaticRing {
        ingesters: vec![("net".into(), net.clone()), ("local".into(), local.clone())],
        min_success: 2,
    });
    let (d, _registry) = distributor(ring);
    let grace = Limits::default().creation_grace_period.as_millis() as i64;
    let mut rewritten = series(
        &[("__name__", "up"), ("empty", ""), ("job", "a")],
        &[
            (NOW_MS, 1.0),
            (NOW_MS + grace + 1, 2.0),
            (NOW_MS + 1, f64::from_bits(0x7ff0_0000_0000_0001)),
        ],
    );
    rewritten.exemplars.push(Exemplar {
        labels: vec![Label {
            name: "trace_id".into(),
            value: "x".into(),
        }],
        value: 1.0,
        timestamp: NOW_MS,
    });
    let mut sent = vec![
        rewritten,
        up("b"),
        series(&[("__name__", "u"), ("job", "✓ ü")], &[(NOW_MS, -0.0)]),
    ];
    sent.extend((0..20).map(|i| up(&format!("m_{i}"))));
    let outcome = push(&d, sent).await.unwrap();
    assert_eq!(outcome.status(), StatusCode::BAD_REQUEST, "{}", outcome.body());
    assert_eq!(outcome.samples_ingested, 2 + 22);
    assert!(local.takes_batches() && !net.takes_batches());
    let (got, want) = (local.pushed_series(), net.pushed_series());
    // Values compared by their bits: NaN is not equal to itself.
    type Bits = (Vec<Label>, Vec<(i64, u64)>, usize);
    let bits = |all: &[TimeSeries]| -> Vec<Bits> {
        all.iter()
            .map(|s| {
                let samples = s.samples.iter().map(|x| (x.timestamp, x.value.to_bits())).collect();
                (s.labels.clone(), samples, s.exemplars.len() + s.histograms.len())
            })
            .collect()
    };
    assert_eq!(got.len(), 23);
    assert_eq!(bits(&got), bits(&want));
    assert_eq!(
        bits(&got)[0].1,
        vec![(NOW_MS, 1f64.to_bits()), (NOW_MS + 1, 0x7ff0_0000_0000_0001)]
    );
    assert_eq!(got[0].labels.len(), 2, "the empty label is dropped");
}

#[tokio::test]
async fn series_are_sharded_by_token_and_forwarded_byte_for_byte() {
    let ring = Arc::new(ParityRing {
        even: fake(Behavior::Accept),
        odd: fake(Behavior::Accept),
    });
    let (d, _r) = distributor(ring.clone());
    let sent: Vec<TimeSeries> = (0..40).map(|i| up(&format!("metric_{i}"))).collect();
    let outcome = push(&d, sent.clone()).await.unwrap();
    assert_eq!(outcome.status(), StatusCode::OK, "{}", outcome.body());
    assert_eq!(outcome.samples_ingested, 40);

    let mut received = 0;
    for (parity, ingester) in [(0, &ring.even), (1, &ring.odd)] {
        let bodies = ingester.pushed_bodies();
        assert_eq!(bodies.len(), 1, "one request per ingester");
        let got = ingester.pushed_series();
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

/// Each metadata entry goes, with the series, to the replicas of its family's token (tenant + family name),
/// deduplicated, encoded as prost encodes it for a remote ingester and carried in the batch of a local one.
#[tokio::test]
async fn metadata_is_sharded_by_family_and_rides_with_the_series() {
    for batches in [false, true] {
        let make = || {
            let f = FakeIngester::new();
            Arc::new(if batches { f.taking_batches() } else { f })
        };
        let ring = Arc::new(ParityRing {
            even: make(),
            odd: make(),
        });
        let (d, _r) = distributor(ring.clone());
        let family = |i: usize| format!("family_{i}");
        let metadata: Vec<MetricMetadata> = (0..20)
            .map(|i| MetricMetadata {
                r#type: 1,
                metric_family_name: family(i),
                help: format!("help {i}"),
                unit: if i % 2 == 0 { "seconds".into() } else { String::new() },
            })
            .collect();
        let mut repeated = metadata.clone();
        repeated.extend(metadata.iter().cloned());
        let req = WriteRequest {
            timeseries: vec![up("a")],
            metadata: repeated,
        };
        let outcome = d.push(&tenant(), &snappy(&req.encode_to_vec())).await.unwrap();
        assert_eq!(outcome.status(), StatusCode::OK, "{}", outcome.body());
        let seed = heddle_model::tenant_token_seed("team-a");
        for (parity, ingester) in [(0, &ring.even), (1, &ring.odd)] {
            let got: Vec<MetricMetadata> = ingester
                .pushed_bodies()
                .iter()
                .flat_map(|b| WriteRequest::decode(b.as_ref()).unwrap().metadata)
                .collect();
            let want: Vec<MetricMetadata> = metadata
                .iter()
                .filter(|m| super::metadata_token(seed, &m.metric_family_name) % 2 == parity)
                .cloned()
                .collect();
            assert!(!want.is_empty(), "both ingesters get some families");
            assert_eq!(got, want, "batches={batches} parity={parity}");
        }
    }
}

#[tokio::test]
async fn series_losing_parts_are_rewritten() {
    let fake = fake(Behavior::Accept);
    let (d, registry) = distributor(Arc::new(single(fake.clone())));
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
    // A valid histogram, kept (and copied as it came), and one in the future, dropped.
    let histogram = |t| Histogram {
        count: Some(histogram::Count::CountInt(3)),
        zero_count: Some(histogram::ZeroCount::ZeroCountInt(3)),
        sum: 1.0,
        timestamp: t,
        ..Histogram::default()
    };
    with_extras.histograms = vec![histogram(NOW_MS), histogram(NOW_MS + grace + 2)];
    // A series whose only histogram breaks Prometheus' rules: nothing of it is forwarded.
    let only_histogram = TimeSeries {
        histograms: vec![Histogram {
            count: Some(histogram::Count::CountInt(4)),
            ..histogram(NOW_MS)
        }],
        ..series(&[("__name__", "h")], &[])
    };
    let outcome = push(&d, vec![with_extras, only_histogram]).await.unwrap();
    // The future samples make the response a 400, but the rest of the series is ingested.
    assert_eq!(outcome.status(), StatusCode::BAD_REQUEST);
    assert_eq!((outcome.samples_ingested, outcome.histograms_ingested), (2, 1));
    let body = outcome.body();
    assert!(body.contains("err-heddle-too-far-in-future"), "{body}");
    assert!(body.contains("limits.creation_grace_period"), "{body}");
    assert!(
        body.contains(&format!(
            "2 samples have timestamps too far in the future (first: {} ms)",
            NOW_MS + grace + 1
        )),
        "{body}"
    );
    assert!(
        body.contains("err-heddle-native-histogram-count-mismatch: invalid native histogram sample at"),
        "{body}"
    );

    let got = fake.pushed_series();
    assert_eq!(got.len(), 1, "the series of the invalid histogram is not forwarded");
    assert_eq!(
        got[0],
        TimeSeries {
            histograms: vec![histogram(NOW_MS)],
            ..series(&[("__name__", "up"), ("job", "a")], &[(NOW_MS, 1.0), (NOW_MS + 1, 3.0)])
        },
        "empty label, future samples and exemplar (the tenant's store is off) removed"
    );
    let text = exposition(&registry);
    for line in [
        r#"heddle_discarded_samples_total{tenant="team-a",reason="err-heddle-native-histogram-count-mismatch"} 1"#,
        r#"heddle_discarded_samples_total{tenant="team-a",reason="err-heddle-too-far-in-future"} 2"#,
        r#"heddle_distributor_discarded_exemplars_total{tenant="team-a",reason="exemplars-disabled"} 1"#,
        r#"heddle_distributor_received_samples_total{tenant="team-a"} 3"#,
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
}

#[test]
fn rewritten_series_are_the_bytes_prost_encodes() {
    let long = "v".repeat(300);
    let label_sets: Vec<Vec<(&str, &str)>> = vec![
        vec![("__name__", "up"), ("empty", ""), ("job", "a")],
        vec![("__name__", "x"), ("long", long.as_str())],
        vec![("__name__", "no_samples_left")],
    ];
    let samples = [
        (NOW_MS, 1.5),
        (NOW_MS, 0.0),
        (NOW_MS, -0.0),
        (NOW_MS, f64::NAN),
        (NOW_MS, f64::from_bits(0x7ff0_0000_0000_0001)),
        (0, 2.0),
        (0, 0.0),
        (-1, 3.0),
        (i64::MIN, 4.0),
        (i64::MAX, 5.0),
    ];
    let window = TimeWindow {
        min_ms: i64::MIN,
        max_ms: NOW_MS,
    };
    let sent: Vec<TimeSeries> = label_sets.iter().map(|l| series(l, &samples)).collect();
    let arena = Bump::new();
    let decoded = decode(
        &arena,
        &body(sent),
        Framing::Snappy,
        crate::distributor::RemoteWriteVersion::V1,
        1 << 20,
        &mut unlimited_reservation(),
    )
    .unwrap()
    .series;
    for (ts, labels) in decoded.iter().zip(&label_sets) {
        for window in [window, TimeWindow::default(), TimeWindow { min_ms: 1, max_ms: 0 }] {
            let accepted = Accepted {
                series: ts,
                labels: ts.labels,
                samples: 0,
                histograms: Vec::new(),
                exemplars: &[],
                created: None,
                rewrite: true,
            };
            let got = rewrite_series(&arena, &accepted, window);
            let kept: Vec<(&str, &str)> = labels.iter().copied().filter(|(_, v)| !v.is_empty()).collect();
            let inside: Vec<(i64, f64)> = samples.iter().copied().filter(|s| window.contains(s.0)).collect();
            let want = series(&kept, &inside).encode_to_vec();
            assert_eq!(got, want.as_slice(), "{labels:?} in {window:?}");
        }
    }
}
