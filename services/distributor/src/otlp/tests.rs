//! HTTP tests of `/otlp/v1/metrics` through the distributor's router, with fake ingesters: what is stored,
//! every status, `partial_success`, and hostile bodies.

use super::*;
use crate::config::DistributorConfig;
use crate::testutil::*;
use axum::Extension;
use axum::http::Request;
use flate2::Compression as Level;
use flate2::write::GzEncoder;
use heddle_limits::Limits;
use heddle_proto::testing::FakeIngester;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics,
    ScopeMetrics, Sum, metric::Data, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prometheus_client::registry::Registry;
use proptest::prelude::*;
use std::io::Write as _;
use tower::ServiceExt as _;

const MAX_RECV: usize = 4096;
const MAX_DECOMPRESSED: usize = 8192;
/// [`NOW_MS`] in nanoseconds.
const NOW_NS: u64 = NOW_MS as u64 * 1_000_000;

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..KeyValue::default()
    }
}

fn point(v: f64) -> NumberDataPoint {
    NumberDataPoint {
        time_unix_nano: NOW_NS,
        value: Some(number_data_point::Value::AsDouble(v)),
        ..NumberDataPoint::default()
    }
}

fn metric(name: &str, unit: &str, data: Data) -> Metric {
    Metric {
        name: name.into(),
        unit: unit.into(),
        data: Some(data),
        ..Metric::default()
    }
}

fn counter(name: &str, v: f64, temporality: AggregationTemporality) -> Metric {
    metric(
        name,
        "",
        Data::Sum(Sum {
            data_points: vec![point(v)],
            aggregation_temporality: temporality as i32,
            is_monotonic: true,
        }),
    )
}

/// A request from service `api` (instance `pod-1`, on host `node-a`) with these metrics.
fn export_request(metrics: Vec<Metric>) -> Vec<u8> {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", "api"),
                    kv("service.instance.id", "pod-1"),
                    kv("host.name", "node-a"),
                ],
                ..Resource::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics,
                ..ScopeMetrics::default()
            }],
            ..ResourceMetrics::default()
        }],
    }
    .encode_to_vec()
}

fn gzip(raw: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Level::default());
    e.write_all(raw).unwrap();
    e.finish().unwrap()
}

struct Setup {
    app: axum::Router,
    fake: Arc<FakeIngester>,
    registry: Registry,
}

/// The limits of the tests' tenant: the defaults, promoting `host.name`.
fn limits() -> Limits {
    Limits {
        promote_otel_resource_attributes: vec!["host.name".to_owned()],
        ..Limits::default()
    }
}

fn setup(behavior: Behavior, limits: Limits) -> Setup {
    setup_with_inflight(
        behavior,
        limits,
        DistributorConfig::default()
            .instance_limits
            .max_inflight_push_requests_bytes,
    )
}

fn setup_with_inflight(behavior: Behavior, limits: Limits, inflight: usize) -> Setup {
    let fake = fake(behavior);
    let mut registry = Registry::default();
    let mut cfg = DistributorConfig {
        max_recv_msg_size: MAX_RECV,
        max_decompressed_size: MAX_DECOMPRESSED,
        ..DistributorConfig::default()
    };
    cfg.instance_limits.max_inflight_push_requests_bytes = inflight;
    let d = Distributor::new(cfg, limits, Arc::new(single(fake.clone())), &mut registry).with_clock(manual_clock());
    let app = crate::router(Arc::new(d)).layer(Extension(tenant()));
    Setup { app, fake, registry }
}

async fn post(app: &axum::Router, headers: &[(&str, &str)], body: Vec<u8>) -> (StatusCode, HeaderMap, Vec<u8>) {
    let mut req = Request::post("/otlp/v1/metrics");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = app.clone().oneshot(req.body(Body::from(body)).unwrap()).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
    (status, headers, bytes.to_vec())
}

const PROTOBUF: (&str, &str) = ("content-type", "application/x-protobuf");
const JSON: (&str, &str) = ("content-type", "application/json");

/// The request of [`export_request`] in OTLP JSON, as `opentelemetry-proto`'s serde mapping writes it.
fn json_request(metrics: &[Metric]) -> Vec<u8> {
    let request = ExportMetricsServiceRequest::decode(&export_request(metrics.to_vec())[..]).unwrap();
    serde_json::to_vec(&request).unwrap()
}

/// The code and message of a refusal's `google.rpc.Status`, in protobuf or JSON.
fn rpc_status(body: &[u8], json: bool) -> (i32, String) {
    if json {
        let v: serde_json::Value = serde_json::from_slice(body).expect("the answer is JSON");
        let code = v["code"].as_i64().expect("code") as i32;
        (code, v["message"].as_str().expect("message").to_owned())
    } else {
        let status = RpcStatus::decode(body).expect("the answer is a google.rpc.Status");
        (status.code, status.message)
    }
}

/// The stored series as `{labels} value@ts` lines.
fn stored(fake: &FakeIngester) -> Vec<String> {
    fake.pushed_series()
        .iter()
        .map(|ts| {
            let labels: Vec<String> = ts.labels.iter().map(|l| format!("{}={:?}", l.name, l.value)).collect();
            let s = &ts.samples[0];
            format!("{{{}}} {}@{}", labels.join(","), s.value, s.timestamp)
        })
        .collect()
}

fn partial_success(body: &[u8]) -> Option<ExportMetricsPartialSuccess> {
    ExportMetricsServiceResponse::decode(body)
        .expect("the answer is an ExportMetricsServiceResponse")
        .partial_success
}

#[tokio::test]
async fn counter_gauge_and_histogram_are_stored_translated() {
    let hist = HistogramDataPoint {
        time_unix_nano: NOW_NS,
        count: 3,
        sum: Some(0.7),
        bucket_counts: vec![1, 2],
        explicit_bounds: vec![0.25],
        ..HistogramDataPoint::default()
    };
    let body = export_request(vec![
        counter("http.requests", 7.0, AggregationTemporality::Cumulative),
        metric(
            "memory.usage",
            "By",
            Data::Gauge(Gauge {
                data_points: vec![point(1024.0)],
            }),
        ),
        metric(
            "rpc.duration",
            "s",
            Data::Histogram(Histogram {
                data_points: vec![hist],
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
            }),
        ),
    ]);
    for (name, headers, body) in [
        ("plain", vec![PROTOBUF], body.clone()),
        ("gzip", vec![PROTOBUF, ("content-encoding", "gzip")], gzip(&body)),
    ] {
        let s = setup(Behavior::Accept, limits());
        let (status, h, answer) = post(&s.app, &headers, body).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "case {name}: {}",
            String::from_utf8_lossy(&answer)
        );
        assert_eq!(h["content-type"], "application/x-protobuf", "case {name}");
        assert_eq!(partial_success(&answer), None, "case {name}");
        let common = r#"host_name="node-a",instance="pod-1",job="api""#;
        assert_eq!(
            stored(&s.fake),
            vec![
                format!(r#"{{__name__="http_requests_total",{common}}} 7@{NOW_MS}"#),
                format!(r#"{{__name__="memory_usage_bytes",{common}}} 1024@{NOW_MS}"#),
                format!(r#"{{__name__="rpc_duration_seconds_bucket",{common},le="0.25"}} 1@{NOW_MS}"#),
                format!(r#"{{__name__="rpc_duration_seconds_bucket",{common},le="+Inf"}} 3@{NOW_MS}"#),
                format!(r#"{{__name__="rpc_duration_seconds_sum",{common}}} 0.7@{NOW_MS}"#),
                format!(r#"{{__name__="rpc_duration_seconds_count",{common}}} 3@{NOW_MS}"#),
                format!(r#"{{__name__="target_info",{common}}} 1@{NOW_MS}"#),
            ],
            "case {name}"
        );
        assert!(
            exposition(&s.registry).contains(r#"heddle_distributor_requests_total{status="200"} 1"#),
            "case {name}"
        );
    }
}

#[tokio::test]
async fn refused_points_come_back_in_partial_success() {
    let s = setup(Behavior::RefuseMetric("b_total"), limits());
    let long = "v".repeat(3000);
    let mut too_long = counter("c", 1.0, AggregationTemporality::Cumulative);
    if let Some(Data::Sum(sum)) = &mut too_long.data {
        sum.data_points[0].attributes = vec![kv("big", &long)];
    }
    let body = export_request(vec![
        counter("a", 1.0, AggregationTemporality::Cumulative),
        counter("b", 2.0, AggregationTemporality::Cumulative),
        too_long,
        counter("d", 3.0, AggregationTemporality::Delta),
    ]);
    let (status, _, answer) = post(&s.app, &[PROTOBUF], body).await;
    assert_eq!(status, StatusCode::OK);
    let p = partial_success(&answer).expect("some points were refused");
    assert_eq!(p.rejected_data_points, 3, "{}", p.error_message);
    for part in [
        r#"metric "d": a monotonic sum with delta temporality"#,
        "err-heddle-label-value-too-long",
        "err-heddle-sample-out-of-order",
    ] {
        assert!(p.error_message.contains(part), "{part:?} not in {:?}", p.error_message);
    }
    let names: Vec<String> = s
        .fake
        .pushed_series()
        .iter()
        .map(|ts| ts.labels[0].value.clone())
        .collect();
    assert_eq!(
        names,
        ["a_total", "b_total", "target_info"],
        "forwarded (b refused by the ingester)"
    );
}

/// A request whose every point is refused by the translation pushes nothing, answers 200 with the count, and
/// is counted.
#[tokio::test]
async fn a_request_with_nothing_to_push() {
    let s = setup(Behavior::Accept, limits());
    let body = export_request(vec![counter("d", 1.0, AggregationTemporality::Delta)]);
    let (status, _, answer) = post(&s.app, &[PROTOBUF], body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(partial_success(&answer).map(|p| p.rejected_data_points), Some(1));
    assert!(s.fake.pushes().is_empty());
    assert!(exposition(&s.registry).contains(r#"heddle_distributor_requests_total{status="200"} 1"#));
}

#[tokio::test]
async fn statuses() {
    let valid = || export_request(vec![counter("a", 1.0, AggregationTemporality::Cumulative)]);
    /// (case, headers, body, ingester, status, part of the answer)
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, Vec<u8>, Behavior, StatusCode, &'a str);
    let cases: Vec<Case<'_>> = vec![
        (
            "text is not an OTLP encoding",
            vec![("content-type", "text/plain")],
            b"{}".to_vec(),
            Behavior::Accept,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send OTLP protobuf (Content-Type: application/x-protobuf) or OTLP JSON",
        ),
        (
            "malformed json",
            vec![JSON],
            br#"{"resourceMetrics": [{"scopeMetrics": 7}]}"#.to_vec(),
            Behavior::Accept,
            StatusCode::BAD_REQUEST,
            "err-heddle-invalid-otlp: request body is not a valid OTLP ExportMetricsServiceRequest: invalid type: \
             integer `7`, expected a sequence at line 1 column 39",
        ),
        (
            "json with a negative count",
            vec![JSON],
            br#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"h","histogram":{"dataPoints":[{"count":"-1"}]}}]}]}]}"#
                .to_vec(),
            Behavior::Accept,
            StatusCode::BAD_REQUEST,
            r#"metric "h" has no gauge, sum, histogram, exponentialHistogram or summary that could be read"#,
        ),
        (
            "json point with a malformed value",
            vec![JSON],
            br#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"g","gauge":{"dataPoints":[{"asInt":"1.5"}]}}]}]}]}"#
                .to_vec(),
            Behavior::Accept,
            StatusCode::BAD_REQUEST,
            r#"metric "g" has a data point without an asDouble or asInt that could be read"#,
        ),
        (
            "json rate limited",
            vec![JSON],
            json_request(
                &(0..6)
                    .map(|i| counter(&format!("m{i}"), 1.0, AggregationTemporality::Cumulative))
                    .collect::<Vec<_>>(),
            ),
            Behavior::Accept,
            StatusCode::TOO_MANY_REQUESTS,
            "err-heddle-ingestion-rate-limited",
        ),
        (
            "no content type",
            vec![],
            valid(),
            Behavior::Accept,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "err-heddle-unsupported-content-type",
        ),
        (
            "snappy is not an OTLP encoding",
            vec![PROTOBUF, ("content-encoding", "snappy")],
            valid(),
            Behavior::Accept,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            r#"content encoding "snappy" is not supported: OTLP bodies"#,
        ),
        (
            "declared length over the limit",
            vec![PROTOBUF, ("content-length", "4097")],
            valid(),
            Behavior::Accept,
            StatusCode::PAYLOAD_TOO_LARGE,
            "err-heddle-request-too-large",
        ),
        (
            "malformed protobuf",
            vec![PROTOBUF],
            vec![0x0a, 0x05, 0x01],
            Behavior::Accept,
            StatusCode::BAD_REQUEST,
            "err-heddle-invalid-otlp: request body is not a valid OTLP ExportMetricsServiceRequest",
        ),
        (
            "corrupt gzip",
            vec![PROTOBUF, ("content-encoding", "gzip")],
            valid(),
            Behavior::Accept,
            StatusCode::BAD_REQUEST,
            "err-heddle-corrupt-gzip",
        ),
        (
            "gzip bomb",
            vec![PROTOBUF, ("content-encoding", "gzip")],
            gzip(&vec![0; 1 << 20]),
            Behavior::Accept,
            StatusCode::BAD_REQUEST,
            "decompresses to more than 8192 bytes",
        ),
        (
            "ingesters down",
            vec![PROTOBUF],
            valid(),
            Behavior::Fail(tonic::Code::Unavailable),
            StatusCode::SERVICE_UNAVAILABLE,
            "err-heddle-ingesters-unavailable",
        ),
        (
            "rate limited",
            vec![PROTOBUF],
            export_request(
                (0..6)
                    .map(|i| counter(&format!("m{i}"), 1.0, AggregationTemporality::Cumulative))
                    .collect(),
            ),
            Behavior::Accept,
            StatusCode::TOO_MANY_REQUESTS,
            "err-heddle-ingestion-rate-limited",
        ),
    ];
    for (name, headers, body, behavior, want, part) in cases {
        let limits = Limits {
            ingestion_rate: 5.0,
            ingestion_burst_size: 5,
            ..limits()
        };
        let s = setup(behavior, limits);
        let json = headers.contains(&JSON);
        let (status, h, answer) = post(&s.app, &headers, body).await;
        let text = String::from_utf8_lossy(&answer);
        assert_eq!(status, want, "case {name}: {text}");
        let want_type = if json {
            "application/json"
        } else {
            "application/x-protobuf"
        };
        assert_eq!(h["content-type"], want_type, "case {name}");
        let (code, message) = rpc_status(&answer, json);
        assert!(message.contains(part), "case {name}: {part:?} not in {message:?}");
        let want_code = match want {
            StatusCode::TOO_MANY_REQUESTS | StatusCode::PAYLOAD_TOO_LARGE => tonic::Code::ResourceExhausted,
            StatusCode::SERVICE_UNAVAILABLE => tonic::Code::Unavailable,
            _ => tonic::Code::InvalidArgument,
        };
        assert_eq!(code, want_code as i32, "case {name}");
        let line = format!("heddle_distributor_requests_total{{status=\"{}\"}} 1", want.as_u16());
        assert!(exposition(&s.registry).contains(&line), "case {name}: {line}");
    }
}

/// A request of empty data points (two bytes each on the wire, a hundred-odd once decoded) whose decoded
/// bound exceeds the whole in-flight budget is refused for good (413), before prost allocates any of it; an
/// ordinary request under the same budget is stored.
#[tokio::test]
async fn a_request_that_would_decode_past_the_inflight_budget_is_refused() {
    let inflight = 256 * 1024;
    let mut points = counter("g", 1.0, AggregationTemporality::Cumulative);
    if let Some(Data::Sum(sum)) = &mut points.data {
        sum.data_points = vec![NumberDataPoint::default(); 3000];
    }
    let s = setup_with_inflight(Behavior::Accept, limits(), inflight);
    let headers = [PROTOBUF, ("content-encoding", "gzip")];
    let (status, _, answer) = post(&s.app, &headers, gzip(&export_request(vec![points]))).await;
    let (_, message) = rpc_status(&answer, false);
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{message}");
    assert!(
        message.starts_with("err-heddle-request-too-large: the OTLP request may take up to")
            && message.contains(&format!("in-flight limit of {inflight} bytes")),
        "{message}"
    );
    assert!(s.fake.pushed_series().is_empty());

    let ordinary = export_request(vec![counter("a", 1.0, AggregationTemporality::Cumulative)]);
    let (status, _, answer) = post(&s.app, &[PROTOBUF], ordinary).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer));
    assert_eq!(s.fake.pushed_series().len(), 2);
}

/// A histogram point of many buckets and attributes copies every label onto each bucket's series: its
/// translation, tens of times the body, is counted before it is built. Past the whole in-flight budget it
/// is refused for good (413) and nothing is pushed; the budget is whole again afterwards, and a smaller
/// histogram under the same budget is stored.
#[tokio::test]
async fn a_request_whose_translation_would_pass_the_inflight_budget_is_refused() {
    let inflight = 512 * 1024;
    let histogram = |buckets: u32| {
        let attributes = (0..12).map(|i| kv(&format!("a{i}"), &format!("value{i}"))).collect();
        metric(
            "h",
            "s",
            Data::Histogram(Histogram {
                data_points: vec![HistogramDataPoint {
                    attributes,
                    time_unix_nano: NOW_NS,
                    explicit_bounds: (0..buckets).map(f64::from).collect(),
                    bucket_counts: vec![0; buckets as usize + 1],
                    ..HistogramDataPoint::default()
                }],
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
            }),
        )
    };
    let s = setup_with_inflight(Behavior::Accept, limits(), inflight);
    let headers = [PROTOBUF, ("content-encoding", "gzip")];
    let body = export_request(vec![histogram(400)]);
    assert!(body.len() < MAX_DECOMPRESSED);
    let (status, _, answer) = post(&s.app, &headers, gzip(&body)).await;
    let (_, message) = rpc_status(&answer, false);
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{message}");
    assert!(
        message.starts_with("err-heddle-request-too-large: the OTLP request's translation into Prometheus series")
            && message.contains(&format!("in-flight limit of {inflight} bytes"))
            && message.contains("histogram buckets per point"),
        "{message}"
    );
    assert!(s.fake.pushed_series().is_empty());
    assert!(
        exposition(&s.registry).contains("heddle_distributor_inflight_push_requests_bytes 0"),
        "every reservation given back"
    );

    let (status, _, answer) = post(&s.app, &headers, gzip(&export_request(vec![histogram(20)]))).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer));
    assert_eq!(
        s.fake.pushed_series().len(),
        20 + 2 + 1,
        "buckets, +Inf, count and target_info"
    );
}

/// OTLP JSON as a sender writes it by hand, with proto3's JSON mapping: 64-bit integers as strings or numbers,
/// enums as integers, unknown fields ignored. It is stored exactly as the same request in protobuf.
#[tokio::test]
async fn json_is_stored_as_its_protobuf_twin() {
    let t = NOW_NS.to_string();
    let json = format!(
        r#"{{"resourceMetrics":[{{
            "resource":{{"attributes":[
                {{"key":"service.name","value":{{"stringValue":"api"}}}},
                {{"key":"service.instance.id","value":{{"stringValue":"pod-1"}}}},
                {{"key":"host.name","value":{{"stringValue":"node-a"}}}}]}},
            "scopeMetrics":[{{"scope":{{"name":"lib","version":"1"}},"metrics":[
                {{"name":"http.requests","sum":{{"aggregationTemporality":2,"isMonotonic":true,
                    "dataPoints":[{{"timeUnixNano":"{t}","asInt":"7","attributes":[
                        {{"key":"code","value":{{"intValue":"200"}}}}]}}]}}}},
                {{"name":"memory.usage","unit":"By","gauge":{{"dataPoints":[
                    {{"timeUnixNano":{t},"asDouble":1024.5}}]}}}},
                {{"name":"rpc.duration","unit":"s","histogram":{{"aggregationTemporality":2,"dataPoints":[
                    {{"timeUnixNano":"{t}","count":"3","sum":0.7,"bucketCounts":["1",2],"explicitBounds":[0.25],
                      "someFutureField":{{"x":1}}}}]}}}}
            ]}}]
        }}]}}"#
    );
    let mut with_int = counter("http.requests", 0.0, AggregationTemporality::Cumulative);
    if let Some(Data::Sum(sum)) = &mut with_int.data {
        sum.data_points[0].value = Some(number_data_point::Value::AsInt(7));
        sum.data_points[0].attributes = vec![KeyValue {
            key: "code".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::IntValue(200)),
            }),
            ..KeyValue::default()
        }];
    }
    let protobuf = export_request(vec![
        with_int,
        metric(
            "memory.usage",
            "By",
            Data::Gauge(Gauge {
                data_points: vec![point(1024.5)],
            }),
        ),
        metric(
            "rpc.duration",
            "s",
            Data::Histogram(Histogram {
                data_points: vec![HistogramDataPoint {
                    time_unix_nano: NOW_NS,
                    count: 3,
                    sum: Some(0.7),
                    bucket_counts: vec![1, 2],
                    explicit_bounds: vec![0.25],
                    ..HistogramDataPoint::default()
                }],
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
            }),
        ),
    ]);
    let from_protobuf = setup(Behavior::Accept, limits());
    let (status, _, _) = post(&from_protobuf.app, &[PROTOBUF], protobuf).await;
    assert_eq!(status, StatusCode::OK);
    let want = stored(&from_protobuf.fake);
    assert_eq!(want.len(), 7, "{want:?}");
    for (name, headers, body) in [
        ("plain", vec![JSON], json.clone().into_bytes()),
        (
            "gzip",
            vec![
                ("content-type", "application/json; charset=utf-8"),
                ("content-encoding", "gzip"),
            ],
            gzip(json.as_bytes()),
        ),
    ] {
        let s = setup(Behavior::Accept, limits());
        let (status, h, answer) = post(&s.app, &headers, body).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "case {name}: {}",
            String::from_utf8_lossy(&answer)
        );
        assert_eq!(h["content-type"], "application/json", "case {name}");
        assert_eq!(answer, b"{}", "case {name}: no partial success");
        assert_eq!(stored(&s.fake), want, "case {name}");
    }
}

/// A JSON request with refused points answers `partialSuccess` in JSON, its int64 count as a string.
#[tokio::test]
async fn json_partial_success() {
    let s = setup(Behavior::Accept, limits());
    let body = json_request(&[
        counter("kept", 1.0, AggregationTemporality::Cumulative),
        counter("d", 1.0, AggregationTemporality::Delta),
    ]);
    let (status, _, answer) = post(&s.app, &[JSON], body).await;
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_slice(&answer).expect("JSON answer");
    assert_eq!(v["partialSuccess"]["rejectedDataPoints"], "1", "{v}");
    assert!(
        v["partialSuccess"]["errorMessage"]
            .as_str()
            .is_some_and(|m| m.contains("delta")),
        "{v}"
    );
    assert_eq!(s.fake.pushed_series().len(), 2, "kept_total and target_info");
}

/// JSON nested deeper than serde_json's limit of 128 levels is refused, not a stack overflow.
#[tokio::test]
async fn deeply_nested_json_is_refused() {
    // 200 levels, gzipped to fit the test's body limit.
    let depth = 200;
    let mut value = String::from(r#"{"stringValue":"x"}"#);
    value = format!(
        "{}{value}{}",
        r#"{"arrayValue":{"values":["#.repeat(depth),
        "]}}".repeat(depth)
    );
    let body = format!(r#"{{"resourceMetrics":[{{"resource":{{"attributes":[{{"key":"deep","value":{value}}}]}}}}]}}"#);
    let s = setup(Behavior::Accept, limits());
    let app = s.app.clone();
    let headers = [JSON, ("content-encoding", "gzip")];
    let (status, _, answer) = post(&app, &headers, gzip(body.as_bytes())).await;
    let (_, message) = rpc_status(&answer, true);
    assert_eq!(status, StatusCode::BAD_REQUEST, "{message}");
    assert!(message.contains("recursion limit exceeded"), "{message}");
    assert!(s.fake.pushed_series().is_empty());
}

/// An OTLP request nested deeper than prost's recursion limit (attribute values within arrays) is refused,
/// not a stack overflow.
#[tokio::test]
async fn deeply_nested_attribute_values_are_refused() {
    let mut value = AnyValue {
        value: Some(any_value::Value::StringValue("x".into())),
    };
    for _ in 0..200 {
        value = AnyValue {
            value: Some(any_value::Value::ArrayValue(
                opentelemetry_proto::tonic::common::v1::ArrayValue { values: vec![value] },
            )),
        };
    }
    let mut m = counter("a", 1.0, AggregationTemporality::Cumulative);
    if let Some(Data::Sum(sum)) = &mut m.data {
        sum.data_points[0].attributes = vec![KeyValue {
            key: "deep".into(),
            value: Some(value),
            ..KeyValue::default()
        }];
    }
    let s = setup(Behavior::Accept, limits());
    let (status, _, answer) = post(&s.app, &[PROTOBUF], export_request(vec![m])).await;
    let text = String::from_utf8_lossy(&answer);
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(text.contains("recursion limit"), "{text}");
    assert!(s.fake.pushed_series().is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random bytes, plain or as gzip, never panic the endpoint, and anything that is not a valid request
    /// gets 400. A random body that happens to decode is a valid (usually empty) request: 200.
    #[test]
    fn random_bodies_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512), gz in any::<bool>()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let s = setup(Behavior::Accept, limits());
        let (body, headers) = if gz {
            (gzip(&bytes), vec![PROTOBUF, ("content-encoding", "gzip")])
        } else {
            (bytes.clone(), vec![PROTOBUF])
        };
        let (status, _, answer) = rt.block_on(post(&s.app, &headers, body));
        let decodes = ExportMetricsServiceRequest::decode(&bytes[..]).is_ok();
        if decodes {
            prop_assert!(status == StatusCode::OK, "{status} {}", String::from_utf8_lossy(&answer));
        } else {
            prop_assert_eq!(status, StatusCode::BAD_REQUEST);
            prop_assert!(rpc_status(&answer, false).1.contains("err-heddle-invalid-otlp"));
        }
    }

    /// Valid JSON requests cut short or with a byte changed never panic the endpoint: each is stored (200) or
    /// refused with 400 naming the line and column of the fault.
    #[test]
    fn mutated_json_never_panics(cut in 0usize..2000, at in 0usize..2000, byte in any::<u8>()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let s = setup(Behavior::Accept, limits());
        let mut body = json_request(&[
            counter("a", 1.0, AggregationTemporality::Cumulative),
            metric("g", "s", Data::Gauge(Gauge { data_points: vec![point(2.5)] })),
        ]);
        let len = body.len();
        body[at % len] = byte;
        body.truncate(cut % (len + 1));
        let (status, _, answer) = rt.block_on(post(&s.app, &[JSON], body));
        if status != StatusCode::OK {
            prop_assert_eq!(status, StatusCode::BAD_REQUEST);
            let (_, message) = rpc_status(&answer, true);
            prop_assert!(message.contains("err-heddle-invalid-otlp") && message.contains(" column "), "{}", message);
        }
    }
}

#[tokio::test]
async fn start_times_become_created_timestamps_for_a_tenant_that_wants_them() {
    let start = NOW_NS - 60_000_000_000;
    let with_start = |mut m: Metric| {
        match m.data.as_mut() {
            Some(Data::Sum(s)) => s.data_points.iter_mut().for_each(|p| p.start_time_unix_nano = start),
            Some(Data::Gauge(g)) => g.data_points.iter_mut().for_each(|p| p.start_time_unix_nano = start),
            Some(Data::Histogram(h)) => h.data_points.iter_mut().for_each(|p| p.start_time_unix_nano = start),
            _ => unreachable!(),
        }
        m
    };
    let histogram = metric(
        "latency",
        "s",
        Data::Histogram(Histogram {
            data_points: vec![HistogramDataPoint {
                time_unix_nano: NOW_NS,
                count: 2,
                sum: Some(0.5),
                bucket_counts: vec![1, 1],
                explicit_bounds: vec![0.1],
                ..HistogramDataPoint::default()
            }],
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        }),
    );
    let gauge = metric(
        "temperature",
        "",
        Data::Gauge(Gauge {
            data_points: vec![point(20.0)],
        }),
    );
    let body = export_request(vec![
        with_start(counter("requests", 5.0, AggregationTemporality::Cumulative)),
        with_start(histogram),
        with_start(gauge),
    ]);
    for enabled in [false, true] {
        let s = setup(
            Behavior::Accept,
            Limits {
                otel_created_timestamp_zero_ingestion_enabled: enabled,
                ..Limits::default()
            },
        );
        let (status, _, _) = post(&s.app, &[PROTOBUF], body.clone()).await;
        assert_eq!(status, StatusCode::OK);
        let arena = bumpalo::Bump::new();
        let mut created: Vec<(String, i64)> = Vec::new();
        for (_, pushed) in s.fake.pushes() {
            for ts in heddle_proto::decode_write_request(&arena, &pushed).unwrap().timeseries {
                let name = ts.labels.iter().find(|l| l.name == "__name__").unwrap().value;
                let le = ts.labels.iter().find(|l| l.name == "le").map_or("", |l| l.value);
                created.push((format!("{name}{le}"), ts.created));
            }
        }
        created.sort();
        let at = |name: &str, counted: bool| {
            let t = if enabled && counted {
                (start / 1_000_000) as i64
            } else {
                0
            };
            (name.to_owned(), t)
        };
        assert_eq!(
            created,
            [
                at("latency_seconds_bucket+Inf", true),
                at("latency_seconds_bucket0.1", true),
                at("latency_seconds_count", true),
                at("latency_seconds_sum", true),
                at("requests_total", true),
                at("target_info", false),
                at("temperature", false),
            ],
            "enabled {enabled}: counters, histograms and summaries carry their start; gauges and target_info none"
        );
    }
}

/// The promoted attributes, the translation strategy and the name validation scheme are the tenant's limits:
/// a runtime override changes what the next request stores, without a restart.
#[tokio::test(start_paused = true)]
async fn translation_settings_follow_runtime_overrides() {
    let fake = fake(Behavior::Accept);
    let overrides = Arc::new(heddle_limits::Overrides::new(Limits::default()));
    let mut registry = Registry::default();
    let cfg = DistributorConfig {
        max_recv_msg_size: MAX_RECV,
        max_decompressed_size: MAX_DECOMPRESSED,
        ..DistributorConfig::default()
    };
    let d = Distributor::new(cfg, Limits::default(), Arc::new(single(fake.clone())), &mut registry)
        .with_clock(manual_clock())
        .with_overrides(overrides.clone());
    let app = crate::router(Arc::new(d)).layer(Extension(tenant()));
    let body = export_request(vec![metric(
        "system.cpu.utilization",
        "1",
        Data::Gauge(Gauge {
            data_points: vec![point(0.5)],
        }),
    )]);
    let steps = [
        (
            "defaults",
            "overrides: {}\n",
            r#"__name__="system_cpu_utilization_ratio",instance="pod-1",job="api""#,
        ),
        (
            "promoted",
            "overrides:\n  team-a:\n    promote_otel_resource_attributes: [host.name]\n",
            r#"__name__="system_cpu_utilization_ratio",host_name="node-a",instance="pod-1",job="api""#,
        ),
        (
            "utf8",
            "overrides:\n  team-a:\n    promote_otel_resource_attributes: [host.name]\n    \
             otel_translation_strategy: NoUTF8EscapingWithSuffixes\n    name_validation_scheme: utf8\n",
            r#"__name__="system.cpu.utilization_ratio",host.name="node-a",instance="pod-1",job="api""#,
        ),
    ];
    let mut seen = 0;
    for (step, yaml, want) in steps {
        overrides.apply_yaml(yaml).unwrap();
        let (status, _, answer) = post(&app, &[PROTOBUF], body.clone()).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "step {step}: {}",
            String::from_utf8_lossy(&answer)
        );
        assert_eq!(partial_success(&answer), None, "step {step}");
        let stored = stored(&fake);
        let want = format!("{{{want}}} 0.5@{NOW_MS}");
        assert!(
            stored[seen..].contains(&want),
            "step {step}: {want} not in {:?}",
            &stored[seen..]
        );
        seen = stored.len();
    }
}
