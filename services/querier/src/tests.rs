//! End-to-end tests of the querier's HTTP routes over fake ingesters holding real XOR chunks.

use crate::{Querier, QuerierConfig, STREAMED_CONTENT_TYPE, router};
use axum::Extension;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use heddle_model::{Labels, Sample, TenantId};
use heddle_proto::IngesterClient;
use heddle_proto::prometheus::{
    ChunkedReadResponse, LabelMatcher, Query, ReadRequest, ReadResponse, label_matcher::Type,
    read_request::ResponseType,
};
use heddle_proto::testing::{FakeIngester, Fault};
use heddle_ring::FixedReplicas;
use heddle_testkit::codec::decode_chunked_frames;
use heddle_testkit::xor::decode_xor_chunk;
use http_body_util::BodyExt;
use prometheus_client::registry::Registry;
use prost::Message;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

pub(crate) struct Harness {
    pub(crate) app: axum::Router,
    pub(crate) registry: Registry,
}

/// The shared fake ingester, given series as samples cut into real XOR chunks.
pub(crate) trait WithSamples {
    /// Adds a series whose samples are cut into chunks of `per_chunk` samples.
    fn with_samples(self, labels: &[(&str, &str)], samples: &[Sample], per_chunk: usize) -> Self;
}

impl WithSamples for FakeIngester {
    fn with_samples(self, labels: &[(&str, &str)], samples: &[Sample], per_chunk: usize) -> Self {
        let chunks = samples
            .chunks(per_chunk)
            .map(|c| crate::convert::chunk_to_proto(&crate::chunks::encode_one(c).unwrap()))
            .collect();
        self.with_series(Labels::from_unsorted(labels.iter().copied()).unwrap(), chunks)
    }
}

/// Every call fails with `Unavailable`.
pub(crate) fn down() -> FakeIngester {
    FakeIngester::new().with_fault(Fault::Fail(tonic::Status::unavailable("fake ingester is down")))
}

/// Every call waits forever.
pub(crate) fn hung() -> FakeIngester {
    FakeIngester::new().with_fault(Fault::Hang)
}

pub(crate) fn harness(cfg: QuerierConfig, ingesters: Vec<Arc<dyn IngesterClient>>, max_errors: usize) -> Harness {
    let mut registry = Registry::default();
    let replicas = ingesters
        .into_iter()
        .enumerate()
        .map(|(i, c)| (format!("ingester-{i}"), c))
        .collect();
    let replicas = Arc::new(FixedReplicas::new(replicas).with_max_errors(max_errors));
    let q = Arc::new(Querier::new(cfg, replicas, &mut registry));
    let app = router(q).layer(Extension(TenantId::new("team-a").unwrap()));
    Harness { app, registry }
}

pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) content_type: String,
    pub(crate) content_encoding: Option<String>,
    pub(crate) body: Vec<u8>,
}

pub(crate) async fn send(app: &axum::Router, req: Request<Body>) -> Answer {
    let resp = app.clone().oneshot(req).await.unwrap();
    let header_str = |h| {
        resp.headers()
            .get(h)
            .map(|v: &header::HeaderValue| v.to_str().unwrap().to_owned())
    };
    let content_type = header_str(header::CONTENT_TYPE).unwrap_or_default();
    let content_encoding = header_str(header::CONTENT_ENCODING);
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes().to_vec();
    Answer {
        status,
        content_type,
        content_encoding,
        body,
    }
}

/// Noisy values, so that XOR chunks are realistically large (~9 bytes a sample).
fn value(t: i64) -> f64 {
    (t as f64 * 0.37).sin() * 1e3
}

fn samples(ts: impl IntoIterator<Item = i64>) -> Vec<Sample> {
    ts.into_iter().map(|t| Sample::new(t, value(t))).collect()
}

pub(crate) fn matcher(t: Type, name: &str, value: &str) -> LabelMatcher {
    LabelMatcher {
        r#type: t as i32,
        name: name.into(),
        value: value.into(),
    }
}

/// A snappy remote-read request of `queries`, as Prometheus sends it.
pub(crate) fn read_request(queries: Vec<Query>, accepted: &[ResponseType]) -> Request<Body> {
    let req = ReadRequest {
        queries,
        accepted_response_types: accepted.iter().map(|t| *t as i32).collect(),
    };
    let body = snap::raw::Encoder::new().compress_vec(&req.encode_to_vec()).unwrap();
    Request::post("/prometheus/api/v1/read")
        .header(header::CONTENT_TYPE, "application/x-protobuf")
        .header(header::CONTENT_ENCODING, "snappy")
        .body(Body::from(body))
        .unwrap()
}

pub(crate) fn query(start: i64, end: i64, matchers: Vec<LabelMatcher>) -> Query {
    Query {
        start_timestamp_ms: start,
        end_timestamp_ms: end,
        matchers,
        hints: None,
    }
}

/// Two series of `up` and one of another metric, 1000 samples each at t = 0, 10, 20, ...
fn standard_ingester() -> FakeIngester {
    FakeIngester::new()
        .with_samples(
            &[("__name__", "up"), ("job", "b")],
            &samples((0..1000).map(|i| i * 10)),
            120,
        )
        .with_samples(
            &[("__name__", "up"), ("job", "a")],
            &samples((0..1000).map(|i| i * 10)),
            120,
        )
        .with_samples(
            &[("__name__", "other"), ("job", "a")],
            &samples((0..1000).map(|i| i * 10)),
            120,
        )
}

pub(crate) fn decode_samples_response(a: &Answer) -> ReadResponse {
    assert_eq!(a.status, StatusCode::OK, "body: {}", String::from_utf8_lossy(&a.body));
    assert_eq!(a.content_type, "application/x-protobuf");
    assert_eq!(a.content_encoding.as_deref(), Some("snappy"));
    let raw = snap::raw::Decoder::new().decompress_vec(&a.body).unwrap();
    ReadResponse::decode(raw.as_slice()).unwrap()
}

pub(crate) fn label_string(labels: &[heddle_proto::prometheus::Label]) -> String {
    labels
        .iter()
        .map(|l| format!("{}={}", l.name, l.value))
        .collect::<Vec<_>>()
        .join(",")
}

#[tokio::test]
async fn remote_read_samples_round_trip() {
    let h = harness(QuerierConfig::default(), vec![Arc::new(standard_ingester())], 0);
    let q0 = query(1005, 2000, vec![matcher(Type::Eq, "__name__", "up")]);
    let q1 = query(
        0,
        30,
        vec![matcher(Type::Re, "job", "a"), matcher(Type::Neq, "__name__", "up")],
    );
    let a = send(&h.app, read_request(vec![q0, q1], &[ResponseType::Samples])).await;
    let resp = decode_samples_response(&a);
    assert_eq!(resp.results.len(), 2);

    let r0 = &resp.results[0].timeseries;
    let names: Vec<String> = r0.iter().map(|s| label_string(&s.labels)).collect();
    assert_eq!(names, ["__name__=up,job=a", "__name__=up,job=b"], "sorted by labels");
    for s in r0 {
        let ts: Vec<i64> = s.samples.iter().map(|x| x.timestamp).collect();
        assert_eq!(
            ts,
            (101..=200).map(|i| i * 10).collect::<Vec<_>>(),
            "trimmed to [1005, 2000]"
        );
        assert!(s.samples.iter().all(|x| x.value == value(x.timestamp)));
    }
    let r1 = &resp.results[1].timeseries;
    assert_eq!(r1.len(), 1);
    assert_eq!(label_string(&r1[0].labels), "__name__=other,job=a");
    assert_eq!(r1[0].samples.len(), 4);
}

#[tokio::test]
async fn remote_read_streamed_round_trip() {
    let cfg = QuerierConfig {
        max_bytes_in_frame: 4096,
        ..Default::default()
    };
    let h = harness(cfg, vec![Arc::new(standard_ingester())], 0);
    let q0 = query(1005, 8994, vec![matcher(Type::Eq, "__name__", "up")]);
    let q1 = query(0, 100, vec![matcher(Type::Eq, "__name__", "other")]);
    let a = send(&h.app, read_request(vec![q0, q1], &[ResponseType::StreamedXorChunks])).await;
    assert_eq!(a.status, StatusCode::OK, "body: {}", String::from_utf8_lossy(&a.body));
    assert_eq!(a.content_type, STREAMED_CONTENT_TYPE);
    assert_eq!(a.content_encoding, None);

    let frames: Vec<ChunkedReadResponse> = decode_chunked_frames(&a.body).unwrap();
    assert!(
        frames.len() > 3,
        "a series of 800 samples is split over several 4 KiB frames"
    );
    let mut per_series: Vec<(i64, String, Vec<Sample>)> = Vec::new();
    for f in &frames {
        assert!(f.encoded_len() <= 4096, "frame of {} bytes", f.encoded_len());
        assert_eq!(f.chunked_series.len(), 1, "one series per frame");
        let s = &f.chunked_series[0];
        let name = label_string(&s.labels);
        let (start, end) = if f.query_index == 0 { (1005, 8994) } else { (0, 100) };
        let mut got = Vec::new();
        for c in &s.chunks {
            let decoded = decode_xor_chunk(&c.data).unwrap();
            assert!(c.min_time_ms >= start && c.max_time_ms <= end, "chunk inside the range");
            assert_eq!(c.min_time_ms, decoded[0].t);
            assert_eq!(c.max_time_ms, decoded[decoded.len() - 1].t);
            got.extend(decoded);
        }
        match per_series.last_mut() {
            Some((qi, n, acc)) if *qi == f.query_index && *n == name => acc.extend(got),
            _ => per_series.push((f.query_index, name, got)),
        }
    }
    let order: Vec<(i64, &str)> = per_series.iter().map(|(q, n, _)| (*q, n.as_str())).collect();
    assert_eq!(
        order,
        [
            (0, "__name__=up,job=a"),
            (0, "__name__=up,job=b"),
            (1, "__name__=other,job=a")
        ],
        "sorted by query, then labels; a series' frames are consecutive"
    );
    for (q, name, got) in &per_series {
        let want = if *q == 0 {
            samples((101..=899).map(|i| i * 10))
        } else {
            samples((0..=10).map(|i| i * 10))
        };
        assert_eq!(got, &want, "samples of {name} in query {q}");
    }
}

#[tokio::test]
async fn replicas_are_merged_and_deduplicated() {
    let labels = [("__name__", "up"), ("job", "a")];
    // Replica 1 and 2 hold the same samples but cut chunks differently; replica 3 misses some and has
    // one extra sample the others lost.
    let r1 = FakeIngester::new().with_samples(&labels, &samples(0..300), 120);
    let r2 = FakeIngester::new().with_samples(&labels, &samples(0..300), 70);
    let r3 = FakeIngester::new()
        .with_samples(&labels, &samples((0..300).filter(|t| t % 3 != 0).chain([300])), 120)
        .with_samples(&[("__name__", "up"), ("job", "z")], &samples(0..5), 120);
    let replicas: Vec<Arc<dyn IngesterClient>> = vec![Arc::new(r1), Arc::new(r2), Arc::new(r3)];
    let h = harness(QuerierConfig::default(), replicas, 0);
    let m = vec![matcher(Type::Eq, "__name__", "up")];

    let resp = decode_samples_response(&send(&h.app, read_request(vec![query(0, 1000, m.clone())], &[])).await);
    let series = &resp.results[0].timeseries;
    assert_eq!(series.len(), 2, "same label set from three ingesters is one series");
    let ts: Vec<i64> = series[0].samples.iter().map(|s| s.timestamp).collect();
    assert_eq!(
        ts,
        (0..=300).collect::<Vec<_>>(),
        "union of replicas, no duplicate timestamps"
    );

    let a = send(
        &h.app,
        read_request(vec![query(0, 1000, m)], &[ResponseType::StreamedXorChunks]),
    )
    .await;
    let frames = decode_chunked_frames(&a.body).unwrap();
    let mut got = Vec::new();
    let mut chunks = Vec::new();
    for f in frames
        .iter()
        .filter(|f| label_string(&f.chunked_series[0].labels) == "__name__=up,job=a")
    {
        for c in &f.chunked_series[0].chunks {
            chunks.push((c.min_time_ms, c.max_time_ms));
            got.extend(decode_xor_chunk(&c.data).unwrap());
        }
    }
    assert_eq!(got, samples(0..=300), "streamed chunks merged");
    assert!(
        chunks.windows(2).all(|w| w[0].1 < w[1].0),
        "chunks sorted and disjoint: {chunks:?}"
    );
}

#[tokio::test]
async fn failing_replicas_within_max_errors_are_tolerated() {
    let labels = [("__name__", "up")];
    let up =
        || -> Arc<dyn IngesterClient> { Arc::new(FakeIngester::new().with_samples(&labels, &samples(0..10), 120)) };
    let down = || -> Arc<dyn IngesterClient> { Arc::new(down()) };
    let m = || vec![matcher(Type::Eq, "__name__", "up")];

    let h = harness(QuerierConfig::default(), vec![up(), down(), up()], 1);
    let resp = decode_samples_response(&send(&h.app, read_request(vec![query(0, 100, m())], &[])).await);
    assert_eq!(resp.results[0].timeseries[0].samples.len(), 10);

    // A frozen replica (no answer until the 2m query timeout) does not hold the query once the others answered.
    let hang = || -> Arc<dyn IngesterClient> { Arc::new(hung()) };
    let h = harness(QuerierConfig::default(), vec![hang(), up(), up()], 1);
    let a = tokio::time::timeout(
        Duration::from_secs(10),
        send(&h.app, read_request(vec![query(0, 100, m())], &[])),
    )
    .await
    .expect("the query waited for the frozen replica");
    assert_eq!(decode_samples_response(&a).results[0].timeseries[0].samples.len(), 10);

    let h = harness(QuerierConfig::default(), vec![up(), down(), down()], 1);
    let a = send(&h.app, read_request(vec![query(0, 100, m())], &[])).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    let msg = String::from_utf8_lossy(&a.body);
    assert!(msg.contains("2 of 3 ingesters failed (at most 1 may)"), "{msg}");
}

#[tokio::test]
async fn queries_older_than_query_ingesters_within_leave_the_ingesters_alone() {
    let labels = [("__name__", "up")];
    let now = heddle_model::Clock::now_ms(&heddle_model::SystemClock);
    let recent = now - 60_000;
    let up = || -> Arc<dyn IngesterClient> {
        Arc::new(FakeIngester::new().with_samples(&labels, &samples(recent..recent + 10), 120))
    };
    let down = || -> Arc<dyn IngesterClient> { Arc::new(down()) };
    let m = || vec![matcher(Type::Eq, "__name__", "up")];
    let cfg = QuerierConfig {
        query_ingesters_within: Duration::from_secs(3600),
        ..QuerierConfig::default()
    };
    // Every ingester down: a query of two days ago does not ask them (and, without a bucket, finds nothing),
    // a query of the last minute does, and fails.
    let h = harness(cfg.clone(), vec![down(), down(), down()], 1);
    let old = send(
        &h.app,
        read_request(vec![query(now - 49 * 3_600_000, now - 48 * 3_600_000, m())], &[]),
    )
    .await;
    assert_eq!(old.status, StatusCode::OK, "{}", String::from_utf8_lossy(&old.body));
    assert!(decode_samples_response(&old).results[0].timeseries.is_empty());
    let new = send(&h.app, read_request(vec![query(now - 120_000, now, m())], &[])).await;
    assert_eq!(new.status, StatusCode::SERVICE_UNAVAILABLE);
    let h = harness(cfg, vec![up(), up(), up()], 1);
    let resp = decode_samples_response(&send(&h.app, read_request(vec![query(now - 120_000, now, m())], &[])).await);
    assert_eq!(resp.results[0].timeseries[0].samples.len(), 10);
}

#[tokio::test]
async fn remote_read_rejects_bad_requests() {
    let fake = Arc::new(standard_ingester());
    let h = harness(QuerierConfig::default(), vec![fake.clone()], 0);
    let cases: Vec<(&str, Request<Body>, &str)> = vec![
        (
            "bad regex",
            read_request(vec![query(0, 1, vec![matcher(Type::Re, "job", "a(")])], &[]),
            r#"remote read query 0: invalid regular expression "a(" for label "job""#,
        ),
        (
            "no matchers",
            read_request(vec![query(0, 1, vec![])], &[]),
            "remote read query 0 has no label matchers",
        ),
        (
            "unknown matcher type",
            read_request(
                vec![query(
                    0,
                    1,
                    vec![LabelMatcher {
                        r#type: 5,
                        name: "a".into(),
                        value: "b".into(),
                    }],
                )],
                &[],
            ),
            "unknown label matcher type 5",
        ),
        (
            "not snappy",
            Request::post("/prometheus/api/v1/read")
                .body(Body::from("hello"))
                .unwrap(),
            "snappy",
        ),
    ];
    for (name, req, want) in cases {
        let a = send(&h.app, req).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "case {name}");
        let msg = String::from_utf8_lossy(&a.body);
        assert!(msg.contains(want), "case {name}: {msg:?} should contain {want:?}");
    }
    assert!(fake.tenants().is_empty(), "bad requests never reach ingesters");
}

#[tokio::test]
async fn sample_limit_and_timeout() {
    let cfg = QuerierConfig {
        max_samples_per_query: 1500,
        ..Default::default()
    };
    let h = harness(cfg, vec![Arc::new(standard_ingester())], 0);
    let m = vec![matcher(Type::Eq, "__name__", "up")];
    for accepted in [ResponseType::Samples, ResponseType::StreamedXorChunks] {
        let a = send(&h.app, read_request(vec![query(0, 100_000, m.clone())], &[accepted])).await;
        assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{accepted:?}");
        let msg = String::from_utf8_lossy(&a.body);
        assert!(
            msg.contains("the limit is 1500") && msg.contains("querier.max_samples_per_query"),
            "{msg}"
        );
    }
    // Under the limit with a narrower range.
    let a = send(&h.app, read_request(vec![query(0, 5000, m.clone())], &[])).await;
    assert_eq!(a.status, StatusCode::OK);

    let cfg = QuerierConfig {
        query_timeout: Duration::from_millis(20),
        ..Default::default()
    };
    let h = harness(cfg, vec![Arc::new(hung())], 0);
    let a = send(&h.app, read_request(vec![query(0, 1, m)], &[])).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(String::from_utf8_lossy(&a.body).contains("query timed out after 20ms (tenant=team-a)"));
}

pub(crate) fn get(uri: &str) -> Request<Body> {
    Request::get(uri).body(Body::empty()).unwrap()
}

pub(crate) fn json(a: &Answer) -> serde_json::Value {
    assert_eq!(a.content_type, "application/json");
    serde_json::from_slice(&a.body).unwrap()
}

#[tokio::test]
async fn series_and_label_apis() {
    let replicas: Vec<Arc<dyn IngesterClient>> = vec![Arc::new(standard_ingester()), Arc::new(standard_ingester())];
    let h = harness(QuerierConfig::default(), replicas, 0);
    let cases: Vec<(&str, Request<Body>, &str)> = vec![
        (
            "series of one selector, replicas merged",
            get("/prometheus/api/v1/series?match[]=up"),
            r#"{"data":[{"__name__":"up","job":"a"},{"__name__":"up","job":"b"}],"status":"success"}"#,
        ),
        (
            "series union of selectors, encoded brackets and range",
            get(
                "/prometheus/api/v1/series?match%5B%5D=%7Bjob%3D%22a%22%7D&match[]=up{job=~%22b%22}&start=0&end=2023-11-14T22:13:20Z",
            ),
            r#"{"data":[{"__name__":"other","job":"a"},{"__name__":"up","job":"a"},{"__name__":"up","job":"b"}],"status":"success"}"#,
        ),
        (
            "series with limit",
            get("/prometheus/api/v1/series?match[]=up&limit=1"),
            r#"{"data":[{"__name__":"up","job":"a"}],"status":"success","warnings":["results truncated due to limit"]}"#,
        ),
        (
            "labels, all series",
            get("/prometheus/api/v1/labels"),
            r#"{"data":["__name__","job"],"status":"success"}"#,
        ),
        (
            "label values",
            get("/prometheus/api/v1/label/job/values"),
            r#"{"data":["a","b"],"status":"success"}"#,
        ),
        (
            "label values with selector",
            get("/prometheus/api/v1/label/__name__/values?match[]={job=%22b%22}"),
            r#"{"data":["up"],"status":"success"}"#,
        ),
        (
            "series by POST form",
            Request::post("/prometheus/api/v1/series")
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from("match%5B%5D=other&start=1"))
                .unwrap(),
            r#"{"data":[{"__name__":"other","job":"a"}],"status":"success"}"#,
        ),
    ];
    for (name, req, want) in cases {
        let a = send(&h.app, req).await;
        assert_eq!(
            a.status,
            StatusCode::OK,
            "case {name}: {}",
            String::from_utf8_lossy(&a.body)
        );
        assert_eq!(json(&a).to_string(), want, "case {name}");
    }
}

#[tokio::test]
async fn json_api_errors() {
    let h = harness(QuerierConfig::default(), vec![Arc::new(standard_ingester())], 0);
    let cases: &[(&str, &str, &str)] = &[
        (
            "series without match",
            "/prometheus/api/v1/series",
            "no match[] parameter provided",
        ),
        (
            "selector matching everything",
            "/prometheus/api/v1/series?match[]={job=~%22.*%22}",
            "vector selector must contain at least one non-empty matcher",
        ),
        (
            "bad selector",
            "/prometheus/api/v1/series?match[]=up[5m]",
            "only series selectors",
        ),
        (
            "bad start",
            "/prometheus/api/v1/series?match[]=up&start=yesterday",
            r#"invalid parameter \"start\": cannot parse \"yesterday\" to a valid timestamp"#,
        ),
        (
            "end before start",
            "/prometheus/api/v1/labels?start=10&end=1",
            "end timestamp must not be before start time",
        ),
        (
            "bad label name",
            "/prometheus/api/v1/label/a-b/values",
            r#"invalid label name: \"a-b\""#,
        ),
        (
            "bad limit",
            "/prometheus/api/v1/labels?limit=x",
            "invalid parameter \\\"limit\\\"",
        ),
    ];
    for (name, uri, want) in cases {
        let a = send(&h.app, get(uri)).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "case {name}");
        let body = json(&a).to_string();
        assert!(
            body.starts_with(r#"{"error":""#) && body.ends_with(r#"","errorType":"bad_data","status":"error"}"#),
            "case {name}: {body}"
        );
        assert!(body.contains(want), "case {name}: {body} should contain {want}");
    }

    let h = harness(QuerierConfig::default(), vec![Arc::new(down())], 0);
    let a = send(&h.app, get("/prometheus/api/v1/labels")).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(json(&a)["errorType"], "unavailable");
}

#[tokio::test]
async fn metrics_are_exposed() {
    let h = harness(QuerierConfig::default(), vec![Arc::new(standard_ingester())], 0);
    send(&h.app, get("/prometheus/api/v1/series?match[]=up")).await;
    send(&h.app, get("/prometheus/api/v1/series")).await;
    let m = vec![matcher(Type::Eq, "__name__", "up")];
    send(&h.app, read_request(vec![query(0, 95, m)], &[])).await;
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &h.registry).unwrap();
    for want in [
        r#"heddle_querier_requests_total{endpoint="series",status="200"} 1"#,
        r#"heddle_querier_requests_total{endpoint="series",status="400"} 1"#,
        r#"heddle_querier_requests_total{endpoint="remote_read",status="200"} 1"#,
        r#"heddle_querier_request_duration_seconds_count{endpoint="series"} 2"#,
        r#"heddle_querier_series_returned_total{endpoint="remote_read"} 2"#,
        "heddle_querier_samples_returned_total 20",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
}

#[tokio::test]
async fn streamed_body_is_produced_series_by_series() {
    let h = harness(QuerierConfig::default(), vec![Arc::new(standard_ingester())], 0);
    let m = vec![matcher(Type::Re, "job", "a|b")];
    let req = read_request(vec![query(0, 10_000, m)], &[ResponseType::StreamedXorChunks]);
    let mut body = h.app.clone().oneshot(req).await.unwrap().into_body();
    let mut pieces = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            pieces.push(decode_chunked_frames(&data).unwrap().len());
        }
    }
    // Three series, each in its own body chunk of whole frames: encoded as the body is polled.
    assert_eq!(pieces, [1, 1, 1]);
}

#[tokio::test]
async fn streamed_failure_after_a_frame_was_ready_cuts_the_body_short() {
    // Each series is ~9 KiB of frames, over a 4 KiB frame: the status line goes out after the first series,
    // and the limit, passed at the second, can then only cut the body short.
    let cfg = QuerierConfig {
        max_bytes_in_frame: 4096,
        max_samples_per_query: 1500,
        ..Default::default()
    };
    let h = harness(cfg, vec![Arc::new(standard_ingester())], 0);
    let m = vec![matcher(Type::Re, "job", "a|b")];
    let req = read_request(vec![query(0, 100_000, m)], &[ResponseType::StreamedXorChunks]);
    let resp = h.app.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let mut series = Vec::new();
    let mut failed = false;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Ok(data) = frame.into_data() {
                    for f in decode_chunked_frames(&data).unwrap() {
                        series.push(label_string(&f.chunked_series[0].labels));
                    }
                }
            }
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    series.dedup();
    assert_eq!(series, ["__name__=other,job=a"], "only the series before the limit");
    assert!(failed, "the body ends with an error the client sees");
}

#[tokio::test]
async fn streamed_answer_goes_out_before_the_ingester_stream_ends() {
    // The ingester sends two series, then stalls: the answer must not wait for the end of its stream.
    let cfg = QuerierConfig {
        max_bytes_in_frame: 4096,
        ..Default::default()
    };
    let stalls = standard_ingester().with_fault(Fault::StallStream { after: 2 });
    let h = harness(cfg, vec![Arc::new(stalls)], 0);
    let m = vec![matcher(Type::Re, "job", "a|b")];
    let req = read_request(vec![query(0, 100_000, m)], &[ResponseType::StreamedXorChunks]);
    let first_two = async {
        let resp = h.app.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let mut body = resp.into_body();
        let mut series = Vec::new();
        while series.len() < 2 {
            let data = body.frame().await.unwrap().unwrap().into_data().unwrap();
            for f in decode_chunked_frames(&data).unwrap() {
                series.push(label_string(&f.chunked_series[0].labels));
            }
            series.dedup();
        }
        series
    };
    let series = tokio::time::timeout(Duration::from_secs(10), first_two)
        .await
        .expect("the merged series were held until the ingester's stream ended");
    assert_eq!(series, ["__name__=other,job=a", "__name__=up,job=a"]);
}

/// The answer is a 503 whose body names `id`.
fn unavailable_with(a: &Answer, id: &str) {
    let text = String::from_utf8_lossy(&a.body);
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    assert!(text.contains(id), "{id} missing: {text}");
}

/// A ring with too few healthy ingesters fails the query through the real replica seam: 503 with the ring's
/// error id, for remote read and the JSON API alike; an empty ring says so.
#[tokio::test]
async fn too_few_healthy_ingesters_fail_the_query_with_the_ring_error() {
    use heddle_ring::{InstanceDesc, InstanceState, MembershipView, ReplicationConfig, Ring, RingReplicas};
    let ring = Arc::new(Ring::new(ReplicationConfig::default()));
    let mut desc = heddle_ring::RingDesc::default();
    for k in 0..3u32 {
        desc.upsert(InstanceDesc {
            id: format!("ing-{k}"),
            addr: format!("ing-{k}:9095"),
            zone: String::new(),
            state: InstanceState::Active,
            tokens: vec![k * 1000],
            heartbeat_ms: heddle_ring::now_ms(),
            registered_at_ms: 0,
        });
    }
    ring.update(&MembershipView {
        desc,
        unreachable: ["ing-0", "ing-1"].iter().map(|s| s.to_string()).collect(),
    });
    let pool = Arc::new(heddle_ring::ClientPool::new(Arc::new(|_: &str| {
        Ok(Arc::new(standard_ingester()) as Arc<dyn IngesterClient>)
    })));
    let app_over = |replicas| {
        let mut registry = Registry::default();
        let q = Arc::new(Querier::new(QuerierConfig::default(), replicas, &mut registry));
        router(q).layer(Extension(TenantId::new("team-a").unwrap()))
    };
    let app = app_over(Arc::new(RingReplicas::new(Arc::clone(&ring), Arc::clone(&pool))));
    let read = read_request(
        vec![query(0, 1_000, vec![matcher(Type::Eq, "__name__", "up")])],
        &[ResponseType::Samples],
    );
    let a = send(&app, read).await;
    unavailable_with(&a, "err-heddle-ring-too-many-unhealthy");
    let a = send(&app, get("/prometheus/api/v1/labels")).await;
    unavailable_with(&a, "err-heddle-ring-too-many-unhealthy");

    let empty = app_over(Arc::new(RingReplicas::new(
        Arc::new(Ring::new(ReplicationConfig::default())),
        pool,
    )));
    let a = send(&empty, get("/prometheus/api/v1/labels")).await;
    unavailable_with(&a, "err-heddle-ring-empty");
}

#[path = "tests/replicas.rs"]
mod replicas;
