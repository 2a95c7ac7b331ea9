//! OTLP/HTTP metrics: bodies that are small on the wire and huge once decoded or translated, protobuf that
//! hides fields from a careless reader, and CPU bombs. The in-flight push budget is the default 1 GiB; every
//! memory case states its bound as a fraction of it.

use super::case::*;
use heddle_testkit::otlp::gzip_stream;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    Exemplar, Histogram, HistogramDataPoint, Metric, ResourceMetrics, ScopeMetrics, Summary, SummaryDataPoint,
    exemplar, metric::Data, summary_data_point::ValueAtQuantile,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use prost::encoding::encode_varint;

/// The distributor's default in-flight push budget.
const BUDGET: u64 = 1 << 30;
const PATH: &str = "/otlp/v1/metrics";

fn otlp(name: &'static str, body: Vec<u8>) -> Case {
    Case::post(name, PATH, body)
        .header("Content-Type", PROTOBUF)
        .header("Content-Encoding", "gzip")
}

fn json(name: &'static str, body: Vec<u8>) -> Case {
    otlp(name, body).header("Content-Type", "application/json")
}

fn gzip(raw: &[u8]) -> Vec<u8> {
    gzip_stream(|w| w.write_all(raw)).expect("gzip")
}

fn header(field: u32, len: usize, out: &mut Vec<u8>) {
    encode_varint(u64::from(field) << 3 | 2, out);
    encode_varint(len as u64, out);
}

fn request(resource: Vec<KeyValue>, metric: Metric) -> Vec<u8> {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: resource,
                ..Resource::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![metric],
                ..ScopeMetrics::default()
            }],
            ..ResourceMetrics::default()
        }],
    }
    .encode_to_vec()
}

fn kv(key: String, value: Option<any_value::Value>) -> KeyValue {
    KeyValue {
        key,
        value: Some(AnyValue { value }),
        ..KeyValue::default()
    }
}

/// Issue 32's reproduction, at a quarter of its size so that a debug build answers it in time: the 4 bytes
/// of an empty unknown group (field 99), then a gauge of 10 million empty data points, 20 MB inflated from
/// about 20 KB of gzip (3.5 GB once decoded). The group once ended the decoded-size walk while prost skipped
/// it and decoded every point.
fn group_then_points() -> Vec<u8> {
    const POINTS: usize = 10_000_000;
    let gauge = 2 * POINTS;
    let mut metric = vec![0x0A, 0x01, b'g'];
    header(5, gauge, &mut metric);
    let metric_len = metric.len() + gauge;
    let mut scope = Vec::new();
    header(2, metric_len, &mut scope);
    let scope_len = scope.len() + metric_len;
    let mut resource = Vec::new();
    header(2, scope_len, &mut resource);
    let resource_len = resource.len() + scope_len;
    let mut head = vec![0x9B, 0x06, 0x9C, 0x06];
    header(1, resource_len, &mut head);
    head.extend(resource);
    head.extend(scope);
    head.extend(metric);
    gzip_stream(|w| {
        w.write_all(&head)?;
        let chunk = [0x0A, 0x00].repeat(1 << 16);
        for _ in 0..gauge / chunk.len() {
            w.write_all(&chunk)?;
        }
        w.write_all(&chunk[..gauge % chunk.len()])
    })
    .expect("gzip")
}

/// A summary point of 1500 tiny attributes and 15,000 empty quantiles, 45 KB of protobuf: each quantile is
/// a series with a copy of all 1500 labels, about 2 GB once translated.
fn summary_amplification(now: i64) -> Vec<u8> {
    let attributes = (0..1500).map(|i| kv(format!("a{i}"), None)).collect();
    let point = SummaryDataPoint {
        attributes,
        time_unix_nano: now as u64 * 1_000_000,
        quantile_values: vec![ValueAtQuantile::default(); 15_000],
        ..SummaryDataPoint::default()
    };
    let metric = Metric {
        name: "amplified".into(),
        data: Some(Data::Summary(Summary {
            data_points: vec![point],
        })),
        ..Metric::default()
    };
    gzip(&request(vec![], metric))
}

/// A histogram of 10,000 buckets and 10,000 exemplars above every bound: each exemplar was once looked for
/// in every bucket (a hundred million steps, on the runtime thread); it is placed by a binary search now.
fn exemplar_flood(now: i64) -> Vec<u8> {
    const N: usize = 10_000;
    let t = now as u64 * 1_000_000;
    let point = HistogramDataPoint {
        time_unix_nano: t,
        explicit_bounds: (0..N).map(|i| i as f64).collect(),
        bucket_counts: vec![0; N + 1],
        exemplars: vec![
            Exemplar {
                time_unix_nano: t,
                value: Some(exemplar::Value::AsDouble(1e9)),
                ..Exemplar::default()
            };
            N
        ],
        ..HistogramDataPoint::default()
    };
    let metric = Metric {
        name: "flooded".into(),
        data: Some(Data::Histogram(Histogram {
            data_points: vec![point],
            aggregation_temporality: 2,
        })),
        ..Metric::default()
    };
    let service = kv(
        "service.name".into(),
        Some(any_value::Value::StringValue("flood".into())),
    );
    gzip(&request(vec![service], metric))
}

/// OTLP JSON whose one histogram point has 12 million bucket counts (24 MB of `0,`): serde holds the metric's
/// data as its `Content` tree first, 32 bytes a number in a growing list, over a gigabyte before the
/// points are read. The old bound (16 bytes a byte of text) let it through.
fn json_numbers() -> Vec<u8> {
    const COUNTS: usize = 12_000_000;
    gzip_stream(|w| {
        w.write_all(
            br#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"j","histogram":{"aggregationTemporality":2,"dataPoints":[{"bucketCounts":["#,
        )?;
        let chunk = "0,".repeat(1 << 16);
        for _ in 0..COUNTS / (1 << 16) {
            w.write_all(chunk.as_bytes())?;
        }
        w.write_all(&chunk.as_bytes()[..2 * (COUNTS % (1 << 16))])?;
        w.write_all(br#"0]}]}}]}]}]}"#)
    })
    .expect("gzip")
}

fn json_nested(depth: usize) -> Vec<u8> {
    let value = format!(
        r#"{}{{"stringValue":"x"}}{}"#,
        r#"{"arrayValue":{"values":["#.repeat(depth),
        "]}}".repeat(depth)
    );
    gzip(
        format!(r#"{{"resourceMetrics":[{{"resource":{{"attributes":[{{"key":"deep","value":{value}}}]}}}}]}}"#)
            .as_bytes(),
    )
}

/// Groups nested one deeper than prost's recursion limit, before a valid request.
fn deep_groups() -> Vec<u8> {
    let mut body = Vec::new();
    for _ in 0..101 {
        body.extend([0x9B, 0x06]);
    }
    for _ in 0..101 {
        body.extend([0x9C, 0x06]);
    }
    body
}

pub(crate) fn cases(now: i64) -> Vec<Case> {
    let small = request(vec![], Metric::default());
    vec![
        otlp(
            "OTLP: an empty unknown group hides 10 million empty points",
            group_then_points(),
        )
        .want(
            413,
            &[
                "err-heddle-request-too-large",
                "may take up to",
                "once decoded",
                "max_inflight_push_requests_bytes",
            ],
        )
        .peak_growth_below(BUDGET / 4),
        otlp(
            "OTLP: 1500 labels copied onto 15,000 quantile series",
            summary_amplification(now),
        )
        .want(
            413,
            &[
                "err-heddle-request-too-large",
                "translation into Prometheus series",
                "max_inflight_push_requests_bytes",
                "histogram buckets per point",
            ],
        )
        .peak_growth_below(BUDGET / 16),
        otlp("OTLP: 10,000 exemplars above 10,000 buckets", exemplar_flood(now))
            .want(200, &[])
            .peak_growth_below(BUDGET / 4),
        json(
            "OTLP JSON: 12 million bucket counts held as serde Content",
            json_numbers(),
        )
        .want(413, &["err-heddle-request-too-large", "may take up to", "once decoded"])
        .peak_growth_below(BUDGET / 8),
        json("OTLP JSON: attribute values nested 200 arrays deep", json_nested(200)).want(
            400,
            &["err-heddle-invalid-otlp", "recursion limit exceeded", "line 1 column"],
        ),
        otlp("OTLP: an end-group key that does not match its start", {
            let mut body = vec![0x9B, 0x06, 0xA4, 0x06];
            body.extend(&small);
            gzip(&body)
        })
        .want(400, &["err-heddle-invalid-otlp", "does not match its start group"]),
        otlp("OTLP: groups nested past prost's recursion limit", gzip(&deep_groups()))
            .want(400, &["err-heddle-invalid-otlp", "recursion limit"]),
        otlp("OTLP: an end-group key without its group", {
            let mut body = small.clone();
            body.extend([0x9C, 0x06]);
            gzip(&body)
        })
        .want(
            400,
            &["err-heddle-invalid-otlp", "end-group key without its start group"],
        ),
    ]
}
