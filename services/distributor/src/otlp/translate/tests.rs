//! Translation tests: each rule of Prometheus' OTLP translation, with the exact series expected.

use super::text::{base64, float_text};
use super::*;
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use opentelemetry_proto::tonic::common::v1::{ArrayValue, KeyValueList};
use opentelemetry_proto::tonic::metrics::v1::{
    ExponentialHistogram, ExponentialHistogramDataPoint, Gauge, Histogram, Metric, ResourceMetrics, ScopeMetrics, Sum,
    Summary, exponential_histogram_data_point, summary_data_point::ValueAtQuantile,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use proptest::prelude::*;

/// The translation as the endpoint runs it: sized by its bound first.
fn translate(req: &ExportMetricsServiceRequest, settings: Settings<'_>, limit: usize) -> Translated {
    super::translate(req, settings, &bound(req, settings), limit)
}

/// Prometheus' default strategy, nothing promoted.
const DEFAULT: Settings<'static> = Settings {
    strategy: OtelTranslationStrategy::UnderscoreEscapingWithSuffixes,
    promote: &[],
};

fn promoting(promote: &[String]) -> Settings<'_> {
    Settings { promote, ..DEFAULT }
}

const T_NS: u64 = 1_704_067_200_123_456_789;
const T_MS: i64 = 1_704_067_200_123;

fn s(v: &str) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::StringValue(v.into())),
    }
}

fn kv(k: &str, v: AnyValue) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(v),
        ..KeyValue::default()
    }
}

fn attrs(pairs: &[(&str, &str)]) -> Vec<KeyValue> {
    pairs.iter().map(|(k, v)| kv(k, s(v))).collect()
}

fn number(v: f64, attributes: Vec<KeyValue>) -> NumberDataPoint {
    NumberDataPoint {
        attributes,
        time_unix_nano: T_NS,
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

fn request(resource: Vec<KeyValue>, metrics: Vec<Metric>) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: resource,
                ..Resource::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics,
                ..ScopeMetrics::default()
            }],
            ..ResourceMetrics::default()
        }],
    }
}

fn gauge(v: f64, a: Vec<KeyValue>) -> Data {
    Data::Gauge(Gauge {
        data_points: vec![number(v, a)],
    })
}

fn sum(v: f64, monotonic: bool, temporality: AggregationTemporality) -> Data {
    Data::Sum(Sum {
        data_points: vec![number(v, vec![])],
        aggregation_temporality: temporality as i32,
        is_monotonic: monotonic,
    })
}

/// The series as `{name="value",...} value@ts` lines (labels in their sorted order), for exact comparison.
fn lines(t: &Translated) -> Vec<String> {
    t.request
        .timeseries
        .iter()
        .flat_map(|ts| {
            let labels: Vec<String> = ts.labels.iter().map(|l| format!("{}={:?}", l.name, l.value)).collect();
            ts.samples.iter().map(move |x| {
                let v = if x.value.to_bits() == STALE_NAN_BITS {
                    "stale".to_owned()
                } else {
                    x.value.to_string()
                };
                format!("{{{}}} {v}@{}", labels.join(","), x.timestamp)
            })
        })
        .collect()
}

#[test]
fn resource_to_job_instance_and_target_info() {
    let resource = vec![
        kv("service.name", s("api")),
        kv("service.namespace", s("shop")),
        kv("service.instance.id", s("pod-1")),
        kv("host.name", s("node-a")),
        kv("k8s.pod.uid", s("u1")),
    ];
    let req = request(
        resource,
        vec![metric("temp", "", gauge(21.5, attrs(&[("room", "kitchen")])))],
    );
    let got = lines(&translate(&req, promoting(&["host.name".to_owned()]), usize::MAX));
    assert_eq!(
        got,
        vec![
            format!(
                r#"{{__name__="temp",host_name="node-a",instance="pod-1",job="shop/api",room="kitchen"}} 21.5@{T_MS}"#
            ),
            format!(
                r#"{{__name__="target_info",host_name="node-a",instance="pod-1",job="shop/api",k8s_pod_uid="u1"}} 1@{T_MS}"#
            ),
        ]
    );
}

#[test]
fn job_without_namespace_and_no_target_info_without_other_attributes() {
    let req = request(
        vec![kv("service.name", s("api"))],
        vec![metric("up", "", gauge(1.0, vec![]))],
    );
    assert_eq!(
        lines(&translate(&req, DEFAULT, usize::MAX)),
        vec![format!(r#"{{__name__="up",job="api"}} 1@{T_MS}"#)]
    );
}

#[test]
fn each_strategy_on_a_real_world_request() {
    let resource = vec![
        kv("service.name", s("checkout")),
        kv("service.instance.id", s("pod-1")),
        kv("host.name", s("node-a")),
        kv("deployment.environment", s("prod")),
    ];
    let histogram = HistogramDataPoint {
        attributes: attrs(&[("http.response.status_code", "200")]),
        time_unix_nano: T_NS,
        count: 3,
        sum: Some(0.5),
        bucket_counts: vec![1, 2],
        explicit_bounds: vec![0.1],
        ..HistogramDataPoint::default()
    };
    let req = request(
        resource,
        vec![
            metric(
                "http.server.request.duration",
                "s",
                Data::Histogram(Histogram {
                    data_points: vec![histogram],
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                }),
            ),
            metric(
                "system.cpu.utilization",
                "1",
                gauge(0.25, attrs(&[("cpu.mode", "idle")])),
            ),
            metric(
                "http.server.requests",
                "{request}",
                sum(7.0, true, AggregationTemporality::Cumulative),
            ),
        ],
    );
    let promote = ["host.name".to_owned()];
    // (strategy, histogram, gauge and counter names, whether attribute keys keep their dots)
    let cases = [
        (
            OtelTranslationStrategy::UnderscoreEscapingWithSuffixes,
            [
                "http_server_request_duration_seconds",
                "system_cpu_utilization_ratio",
                "http_server_requests_total",
            ],
            false,
        ),
        (
            OtelTranslationStrategy::UnderscoreEscapingWithoutSuffixes,
            [
                "http_server_request_duration",
                "system_cpu_utilization",
                "http_server_requests",
            ],
            false,
        ),
        (
            OtelTranslationStrategy::NoUtf8EscapingWithSuffixes,
            [
                "http.server.request.duration_seconds",
                "system.cpu.utilization_ratio",
                "http.server.requests_total",
            ],
            true,
        ),
        (
            OtelTranslationStrategy::NoTranslation,
            [
                "http.server.request.duration",
                "system.cpu.utilization",
                "http.server.requests",
            ],
            true,
        ),
    ];
    for (strategy, [h, g, c], dots) in cases {
        let key = |k: &str| if dots { k.to_owned() } else { k.replace('.', "_") };
        let (host, status, mode, env) = (
            key("host.name"),
            key("http.response.status_code"),
            key("cpu.mode"),
            key("deployment.environment"),
        );
        let base = format!(r#"{host}="node-a",instance="pod-1",job="checkout""#);
        let point = format!(r#"{host}="node-a",{status}="200",instance="pod-1",job="checkout""#);
        let want = vec![
            format!(r#"{{__name__="{h}_bucket",{point},le="0.1"}} 1@{T_MS}"#),
            format!(r#"{{__name__="{h}_bucket",{point},le="+Inf"}} 3@{T_MS}"#),
            format!(r#"{{__name__="{h}_sum",{point}}} 0.5@{T_MS}"#),
            format!(r#"{{__name__="{h}_count",{point}}} 3@{T_MS}"#),
            format!(r#"{{__name__="{g}",{mode}="idle",{base}}} 0.25@{T_MS}"#),
            format!(r#"{{__name__="{c}",{base}}} 7@{T_MS}"#),
            format!(r#"{{__name__="target_info",{env}="prod",{base}}} 1@{T_MS}"#),
        ];
        let settings = Settings {
            strategy,
            promote: &promote,
        };
        let t = translate(&req, settings, usize::MAX);
        assert_eq!(lines(&t), want, "{}", strategy.as_str());
        assert_eq!(t.refused_points, 0, "{}", strategy.as_str());
        let families: Vec<(&str, &str)> = t
            .request
            .metadata
            .iter()
            .map(|m| (m.metric_family_name.as_str(), m.unit.as_str()))
            .collect();
        assert_eq!(families, [(h, "seconds"), (g, ""), (c, "")], "{}", strategy.as_str());
    }
}

#[test]
fn colliding_and_unnameable_attributes_by_strategy() {
    let a = attrs(&[("a.b", "dot"), ("a_b", "underscore"), ("a-b", "dash")]);
    let req = request(vec![], vec![metric("m", "", gauge(1.0, a))]);
    let escaped = lines(&translate(&req, DEFAULT, usize::MAX));
    assert_eq!(
        escaped,
        vec![format!(r#"{{__name__="m",a_b="dash;dot;underscore"}} 1@{T_MS}"#)],
        "escaped keys collide and are joined in the order of the original keys"
    );
    let utf8 = Settings {
        strategy: OtelTranslationStrategy::NoUtf8EscapingWithSuffixes,
        promote: &[],
    };
    assert_eq!(
        lines(&translate(&req, utf8, usize::MAX)),
        vec![format!(
            r#"{{__name__="m",a-b="dash",a.b="dot",a_b="underscore"}} 1@{T_MS}"#
        )],
        "UTF-8 keys do not collide"
    );

    let req = request(
        vec![],
        vec![
            metric("m", "", gauge(1.0, attrs(&[("...", "x")]))),
            metric("...", "", gauge(2.0, vec![])),
            metric("ok", "", gauge(3.0, vec![])),
        ],
    );
    let t = translate(&req, DEFAULT, usize::MAX);
    assert_eq!(lines(&t), vec![format!(r#"{{__name__="ok"}} 3@{T_MS}"#)]);
    assert_eq!(t.refused_points, 2);
    assert!(t.messages[0].contains(r#"attribute "...""#), "{:?}", t.messages);
    assert!(t.messages[1].contains(r#"metric "...""#), "{:?}", t.messages);
    let t = translate(&req, utf8, usize::MAX);
    assert_eq!(
        lines(&t),
        vec![
            format!(r#"{{...="x",__name__="m"}} 1@{T_MS}"#),
            format!(r#"{{__name__="..."}} 2@{T_MS}"#),
            format!(r#"{{__name__="ok"}} 3@{T_MS}"#),
        ]
    );
    assert_eq!(t.refused_points, 0);
}

#[test]
fn attribute_values_and_collisions() {
    let a = vec![
        kv("a.b", s("dot")),
        kv("a_b", s("underscore")),
        kv(
            "int",
            AnyValue {
                value: Some(any_value::Value::IntValue(-7)),
            },
        ),
        kv(
            "flag",
            AnyValue {
                value: Some(any_value::Value::BoolValue(true)),
            },
        ),
        kv(
            "dbl",
            AnyValue {
                value: Some(any_value::Value::DoubleValue(0.25)),
            },
        ),
        kv(
            "bytes",
            AnyValue {
                value: Some(any_value::Value::BytesValue(b"hi!?".to_vec())),
            },
        ),
        kv(
            "arr",
            AnyValue {
                value: Some(any_value::Value::ArrayValue(ArrayValue {
                    values: vec![
                        s("x\"y"),
                        AnyValue {
                            value: Some(any_value::Value::IntValue(1)),
                        },
                    ],
                })),
            },
        ),
        kv(
            "map",
            AnyValue {
                value: Some(any_value::Value::KvlistValue(KeyValueList {
                    values: vec![kv("k", s("v"))],
                })),
            },
        ),
    ];
    let req = request(vec![], vec![metric("m", "", gauge(1.0, a))]);
    assert_eq!(
        lines(&translate(&req, DEFAULT, usize::MAX)),
        vec![format!(
            r#"{{__name__="m",a_b="dot;underscore",arr="[\"x\\\"y\",1]",bytes="aGkhPw==",dbl="0.25",flag="true",int="-7",map="{{\"k\":\"v\"}}"}} 1@{T_MS}"#
        )]
    );
}

#[test]
fn sums_by_monotonicity_and_temporality() {
    use AggregationTemporality::{Cumulative, Delta};
    let req = request(
        vec![],
        vec![
            metric("requests", "1", sum(5.0, true, Cumulative)),
            metric("queue", "{item}", sum(3.0, false, Cumulative)),
            metric("inflight", "", sum(2.0, false, Delta)),
            metric("deltas", "", sum(9.0, true, Delta)),
        ],
    );
    let t = translate(&req, DEFAULT, usize::MAX);
    assert_eq!(
        lines(&t),
        vec![
            format!(r#"{{__name__="requests_total"}} 5@{T_MS}"#),
            format!(r#"{{__name__="queue"}} 3@{T_MS}"#),
            format!(r#"{{__name__="inflight"}} 2@{T_MS}"#),
        ]
    );
    assert_eq!(t.refused_points, 1);
    assert_eq!(t.messages.len(), 1);
    assert!(
        t.messages[0].contains(r#"metric "deltas""#) && t.messages[0].contains("delta temporality"),
        "{}",
        t.messages[0]
    );
}

#[test]
fn explicit_histograms() {
    let point = HistogramDataPoint {
        attributes: attrs(&[("route", "/a")]),
        time_unix_nano: T_NS,
        count: 10,
        sum: Some(4.5),
        bucket_counts: vec![2, 3, 5],
        explicit_bounds: vec![0.1, 1.0],
        ..HistogramDataPoint::default()
    };
    let no_sum = HistogramDataPoint {
        sum: None,
        bucket_counts: vec![],
        explicit_bounds: vec![],
        count: 4,
        attributes: vec![],
        ..point.clone()
    };
    let hist = |points| {
        Data::Histogram(Histogram {
            data_points: points,
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        })
    };
    let req = request(
        vec![],
        vec![
            metric("http.server.duration", "s", hist(vec![point.clone()])),
            metric("bare", "", hist(vec![no_sum])),
        ],
    );
    let t = translate(&req, DEFAULT, usize::MAX);
    let n = "http_server_duration_seconds";
    assert_eq!(
        lines(&t),
        vec![
            format!(r#"{{__name__="{n}_bucket",le="0.1",route="/a"}} 2@{T_MS}"#),
            format!(r#"{{__name__="{n}_bucket",le="1",route="/a"}} 5@{T_MS}"#),
            format!(r#"{{__name__="{n}_bucket",le="+Inf",route="/a"}} 10@{T_MS}"#),
            format!(r#"{{__name__="{n}_sum",route="/a"}} 4.5@{T_MS}"#),
            format!(r#"{{__name__="{n}_count",route="/a"}} 10@{T_MS}"#),
            format!(r#"{{__name__="bare_bucket",le="+Inf"}} 4@{T_MS}"#),
            format!(r#"{{__name__="bare_count"}} 4@{T_MS}"#),
        ]
    );
    assert_eq!(t.refused_points, 0);

    let bad = HistogramDataPoint {
        bucket_counts: vec![1, 2],
        ..point.clone()
    };
    let delta = Data::Histogram(Histogram {
        data_points: vec![point],
        aggregation_temporality: AggregationTemporality::Delta as i32,
    });
    let req = request(vec![], vec![metric("bad", "", hist(vec![bad])), metric("d", "", delta)]);
    let t = translate(&req, DEFAULT, usize::MAX);
    assert!(t.request.timeseries.is_empty());
    assert_eq!(t.refused_points, 2);
    assert!(
        t.messages[0].contains("2 bucket counts for 2 bounds"),
        "{:?}",
        t.messages
    );
    assert!(
        t.messages[1].contains("a histogram with delta temporality"),
        "{:?}",
        t.messages
    );
}

#[test]
fn summaries() {
    let point = SummaryDataPoint {
        time_unix_nano: T_NS,
        count: 3,
        sum: 1.5,
        quantile_values: vec![
            ValueAtQuantile {
                quantile: 0.5,
                value: 0.4,
            },
            ValueAtQuantile {
                quantile: 0.99,
                value: 0.9,
            },
        ],
        ..SummaryDataPoint::default()
    };
    let req = request(
        vec![],
        vec![metric(
            "rpc.latency",
            "ms",
            Data::Summary(Summary {
                data_points: vec![point],
            }),
        )],
    );
    let n = "rpc_latency_milliseconds";
    assert_eq!(
        lines(&translate(&req, DEFAULT, usize::MAX)),
        vec![
            format!(r#"{{__name__="{n}",quantile="0.5"}} 0.4@{T_MS}"#),
            format!(r#"{{__name__="{n}",quantile="0.99"}} 0.9@{T_MS}"#),
            format!(r#"{{__name__="{n}_sum"}} 1.5@{T_MS}"#),
            format!(r#"{{__name__="{n}_count"}} 3@{T_MS}"#),
        ]
    );
}

#[test]
fn exponential_histograms_become_native_histograms_and_delta_ones_are_refused() {
    let point = |scale| ExponentialHistogramDataPoint {
        attributes: attrs(&[("route", "/a")]),
        time_unix_nano: T_NS,
        count: 3,
        sum: Some(1.5),
        scale,
        zero_count: 1,
        positive: Some(exponential_histogram_data_point::Buckets {
            offset: 0,
            bucket_counts: vec![2],
        }),
        ..ExponentialHistogramDataPoint::default()
    };
    let exponential = |temporality: AggregationTemporality, points| {
        Data::ExponentialHistogram(ExponentialHistogram {
            data_points: points,
            aggregation_temporality: temporality as i32,
        })
    };
    let req = request(
        vec![kv("service.name", s("api"))],
        vec![
            metric(
                "latency",
                "s",
                exponential(AggregationTemporality::Cumulative, vec![point(2), point(-5)]),
            ),
            metric(
                "sizes",
                "By",
                exponential(AggregationTemporality::Delta, vec![point(0)]),
            ),
        ],
    );
    let t = translate(&req, DEFAULT, usize::MAX);
    assert_eq!(t.request.timeseries.len(), 1);
    let ts = &t.request.timeseries[0];
    let labels: Vec<(&str, &str)> = ts.labels.iter().map(|l| (l.name.as_str(), l.value.as_str())).collect();
    assert_eq!(
        labels,
        [("__name__", "latency_seconds"), ("job", "api"), ("route", "/a")]
    );
    assert!(ts.samples.is_empty());
    assert_eq!(ts.histograms.len(), 1);
    let h = &ts.histograms[0];
    assert_eq!((h.schema, h.timestamp, h.sum), (2, T_MS, 1.5));
    assert_eq!(
        h.positive_spans,
        [heddle_proto::prometheus::BucketSpan { offset: 1, length: 1 }]
    );
    assert_eq!(h.positive_deltas, [2]);
    assert_eq!(t.request.metadata[0].metric_family_name, "latency_seconds");
    assert_eq!(t.request.metadata[0].r#type, MetricType::Histogram.wire());
    assert_eq!(t.refused_points, 2);
    assert!(
        t.messages
            .iter()
            .any(|m| m.contains("scale -5, below native histograms' lowest schema -4")),
        "{:?}",
        t.messages
    );
    assert!(
        t.messages
            .iter()
            .any(|m| m.contains(r#"metric "sizes": an exponential histogram with delta temporality is not supported"#)),
        "{:?}",
        t.messages
    );
}

#[test]
fn no_recorded_value_is_a_staleness_marker() {
    let mut p = number(7.0, vec![]);
    p.flags = DataPointFlags::NoRecordedValueMask as u32;
    let mut empty = number(0.0, vec![]);
    empty.value = None;
    empty.flags = p.flags;
    let hist = HistogramDataPoint {
        time_unix_nano: T_NS,
        count: 1,
        sum: Some(1.0),
        flags: p.flags,
        ..HistogramDataPoint::default()
    };
    let req = request(
        vec![],
        vec![
            metric(
                "g",
                "",
                Data::Gauge(Gauge {
                    data_points: vec![p, empty],
                }),
            ),
            metric(
                "h",
                "",
                Data::Histogram(Histogram {
                    data_points: vec![hist],
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                }),
            ),
        ],
    );
    assert_eq!(
        lines(&translate(&req, DEFAULT, usize::MAX)),
        vec![
            format!(r#"{{__name__="g"}} stale@{T_MS}"#),
            format!(r#"{{__name__="g"}} stale@{T_MS}"#),
            format!(r#"{{__name__="h_bucket",le="+Inf"}} stale@{T_MS}"#),
            format!(r#"{{__name__="h_sum"}} stale@{T_MS}"#),
            format!(r#"{{__name__="h_count"}} stale@{T_MS}"#),
        ]
    );
}

#[test]
fn target_info_takes_the_latest_timestamp_and_points_without_value_are_refused() {
    let mut later = number(2.0, vec![]);
    later.time_unix_nano = T_NS + 5_000_000_000;
    let mut none = number(0.0, vec![]);
    none.value = None;
    let req = request(
        vec![kv("host.name", s("h"))],
        vec![metric(
            "g",
            "",
            Data::Gauge(Gauge {
                data_points: vec![number(1.0, vec![]), later, none],
            }),
        )],
    );
    let t = translate(&req, DEFAULT, usize::MAX);
    assert_eq!(
        lines(&t),
        vec![
            format!(r#"{{__name__="g"}} 1@{T_MS}"#),
            format!(r#"{{__name__="g"}} 2@{}"#, T_MS + 5000),
            format!(r#"{{__name__="target_info",host_name="h"}} 1@{}"#, T_MS + 5000),
        ]
    );
    assert_eq!(t.refused_points, 1);
}

#[test]
fn empty_names_and_int_values() {
    let mut int = number(0.0, vec![]);
    int.value = Some(number_data_point::Value::AsInt(42));
    let req = request(
        vec![],
        vec![
            metric("", "", gauge(1.0, vec![])),
            metric("i", "", Data::Gauge(Gauge { data_points: vec![int] })),
        ],
    );
    let t = translate(&req, DEFAULT, usize::MAX);
    assert_eq!(lines(&t), vec![format!(r#"{{__name__="i"}} 42@{T_MS}"#)]);
    assert_eq!(t.refused_points, 1);
    assert_eq!(t.messages, vec!["a metric has an empty name".to_owned()]);
}

#[test]
fn float_text_is_gos_shortest_without_exponent() {
    for (f, want) in [
        (0.1, "0.1"),
        (1.0, "1"),
        (1e21, "1000000000000000000000"),
        (2.5e-7, "0.00000025"),
        (f64::INFINITY, "+Inf"),
        (f64::NEG_INFINITY, "-Inf"),
        (f64::NAN, "NaN"),
        (-3.0, "-3"),
    ] {
        assert_eq!(float_text(f), want, "{f}");
    }
}

#[test]
fn base64_matches_the_standard_alphabet() {
    for (input, want) in [
        (&b""[..], ""),
        (b"f", "Zg=="),
        (b"fo", "Zm8="),
        (b"foo", "Zm9v"),
        (b"\xff\xfe\xfd\xfc", "//79/A=="),
    ] {
        assert_eq!(base64(input), want, "{input:?}");
    }
}

#[test]
fn a_resource_label_copied_onto_many_points_stops_the_translation_at_the_limit() {
    // 1 KiB of service name on 10,000 points: 10 MiB of label text from a request of a few hundred KiB.
    let points: Vec<NumberDataPoint> = (0..10_000).map(|i| number(f64::from(i), vec![])).collect();
    let big = "s".repeat(1024);
    let req = request(
        attrs(&[("service.name", big.as_str())]),
        vec![metric("m", "", Data::Gauge(Gauge { data_points: points }))],
    );
    let t = translate(&req, DEFAULT, 1 << 20);
    assert!(t.too_large());
    assert!(
        t.request.timeseries.len() < 1100,
        "{} series built",
        t.request.timeseries.len()
    );
    assert!(!translate(&req, DEFAULT, 64 << 20).too_large());
}

/// Each metric gets one metadata entry: the Prometheus name, the description as help, the unit's suffix words,
/// the type of what the metric became.
#[test]
fn metadata_per_metric() {
    let with_description = |mut m: Metric, d: &str| {
        m.description = d.into();
        m
    };
    let histogram = Data::Histogram(Histogram {
        data_points: vec![HistogramDataPoint {
            time_unix_nano: T_NS,
            count: 1,
            bucket_counts: vec![1, 0],
            explicit_bounds: vec![1.0],
            ..HistogramDataPoint::default()
        }],
        aggregation_temporality: AggregationTemporality::Cumulative as i32,
    });
    let req = request(
        vec![],
        vec![
            with_description(
                metric("requests", "1", sum(1.0, true, AggregationTemporality::Cumulative)),
                "reqs",
            ),
            with_description(
                metric("queue", "{item}", sum(1.0, false, AggregationTemporality::Cumulative)),
                "",
            ),
            with_description(metric("temp", "Cel", gauge(20.0, vec![])), "temperature"),
            with_description(metric("latency", "s", histogram), "how long"),
            with_description(metric("rate", "By/s", gauge(1.0, vec![])), "throughput"),
        ],
    );
    let got: Vec<(String, i32, String, String)> = translate(&req, DEFAULT, usize::MAX)
        .request
        .metadata
        .into_iter()
        .map(|m| (m.metric_family_name, m.r#type, m.help, m.unit))
        .collect();
    let want = [
        ("requests_total", MetricType::Counter, "reqs", ""),
        ("queue", MetricType::Gauge, "", ""),
        ("temp_celsius", MetricType::Gauge, "temperature", "celsius"),
        ("latency_seconds", MetricType::Histogram, "how long", "seconds"),
        (
            "rate_bytes_per_second",
            MetricType::Gauge,
            "throughput",
            "bytes_per_second",
        ),
    ]
    .map(|(f, t, h, u)| (f.to_owned(), t.wire(), h.to_owned(), u.to_owned()));
    assert_eq!(got, want);
}

/// Exemplars as Prometheus' OTLP receiver writes them: `trace_id` and `span_id` in hex (left out when all
/// zero), then the filtered attributes unless they pass 128 characters; a histogram's on the first bucket
/// whose bound holds the value.
#[test]
fn exemplars_carry_trace_and_span_ids() {
    use opentelemetry_proto::tonic::metrics::v1::{Exemplar as OtlpExemplar, exemplar::Value as ExemplarValue};
    let e = |v: f64, trace: Vec<u8>, attrs: Vec<KeyValue>| OtlpExemplar {
        filtered_attributes: attrs,
        time_unix_nano: T_NS,
        span_id: vec![0xab, 0xcd, 0, 0, 0, 0, 0, 1],
        trace_id: trace,
        value: Some(ExemplarValue::AsDouble(v)),
    };
    let trace = vec![0x01; 16];
    let mut point = number(1.0, vec![]);
    point.exemplars = vec![
        e(0.5, trace.clone(), attrs(&[("user", "u1")])),
        e(0.7, vec![0; 16], attrs(&[("big", &"x".repeat(200))])),
    ];
    let gauge = metric(
        "g",
        "",
        Data::Gauge(Gauge {
            data_points: vec![point],
        }),
    );
    let histogram = metric(
        "h",
        "",
        Data::Histogram(Histogram {
            data_points: vec![HistogramDataPoint {
                time_unix_nano: T_NS,
                count: 3,
                bucket_counts: vec![1, 1, 1],
                explicit_bounds: vec![1.0, 2.0],
                exemplars: vec![e(1.5, trace.clone(), vec![]), e(9.0, trace.clone(), vec![])],
                ..HistogramDataPoint::default()
            }],
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        }),
    );
    let out = translate(&request(vec![], vec![gauge, histogram]), DEFAULT, usize::MAX).request;
    let text = |e: &Exemplar| -> String {
        let labels: Vec<String> = e.labels.iter().map(|l| format!("{}={}", l.name, l.value)).collect();
        format!("{} {}@{}", labels.join(","), e.value, e.timestamp)
    };
    let by_series: Vec<(String, Vec<String>)> = out
        .timeseries
        .iter()
        .filter(|s| !s.exemplars.is_empty())
        .map(|s| {
            let name = s
                .labels
                .iter()
                .map(|l| format!("{}={}", l.name, l.value))
                .collect::<Vec<_>>()
                .join(",");
            (name, s.exemplars.iter().map(text).collect())
        })
        .collect();
    let ids = "trace_id=01010101010101010101010101010101,span_id=abcd000000000001";
    assert_eq!(
        by_series,
        vec![
            (
                "__name__=g".to_owned(),
                vec![
                    format!("{ids},user=u1 0.5@{T_MS}"),
                    format!("span_id=abcd000000000001 0.7@{T_MS}"),
                ]
            ),
            ("__name__=h_bucket,le=2".to_owned(), vec![format!("{ids} 1.5@{T_MS}")]),
            ("__name__=h_bucket,le=+Inf".to_owned(), vec![format!("{ids} 9@{T_MS}")]),
        ]
    );
}

/// The first bucket whose bound holds each value, the way the translation did it before (a scan of the
/// bounds per exemplar), against the binary search over the running maximum: the same answer whatever the
/// bounds' order, NaNs and infinities included.
fn first_holding(bounds: &[f64], v: f64) -> Option<usize> {
    if v.is_nan() {
        return None;
    }
    Some(bounds.iter().position(|b| v <= *b).unwrap_or(bounds.len()))
}

proptest! {
    #[test]
    fn exemplars_go_to_the_first_bucket_that_holds_them(
        bounds in prop::collection::vec(prop_oneof![-5.0..5.0, Just(f64::NAN), Just(f64::INFINITY), Just(f64::NEG_INFINITY)], 0..12),
        values in prop::collection::vec(prop_oneof![-6.0..6.0, Just(f64::NAN), Just(f64::INFINITY), Just(f64::NEG_INFINITY)], 0..12),
    ) {
        let got = buckets_of(&bounds, values.iter().copied());
        let want: Vec<Option<usize>> = values.iter().map(|v| first_holding(&bounds, *v)).collect();
        prop_assert_eq!(got, want, "bounds {:?}", bounds);
    }
}

/// Exemplars keep the order they were sent in within their bucket, and each lands on its bucket's series.
#[test]
fn exemplars_of_a_bucket_keep_their_order() {
    use opentelemetry_proto::tonic::metrics::v1::{Exemplar as OtlpExemplar, exemplar::Value as ExemplarValue};
    let e = |v: f64, t: u64| OtlpExemplar {
        value: Some(ExemplarValue::AsDouble(v)),
        time_unix_nano: t * 1_000_000,
        ..OtlpExemplar::default()
    };
    let point = HistogramDataPoint {
        explicit_bounds: vec![1.0, 2.0],
        bucket_counts: vec![1, 1, 1],
        count: 3,
        exemplars: vec![e(5.0, 1), e(0.5, 2), e(1.5, 3), e(0.1, 4), e(f64::NAN, 5), e(9.0, 6)],
        ..HistogramDataPoint::default()
    };
    let req = request(
        vec![],
        vec![metric(
            "h",
            "",
            Data::Histogram(Histogram {
                data_points: vec![point],
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
            }),
        )],
    );
    let t = translate(&req, DEFAULT, usize::MAX);
    let by_le: Vec<(String, Vec<i64>)> = t
        .request
        .timeseries
        .iter()
        .filter_map(|s| {
            let le = s.labels.iter().find(|l| l.name == "le")?;
            Some((le.value.clone(), s.exemplars.iter().map(|e| e.timestamp).collect()))
        })
        .collect();
    assert_eq!(
        by_le,
        vec![
            ("1".to_owned(), vec![2, 4]),
            ("2".to_owned(), vec![3]),
            ("+Inf".to_owned(), vec![1, 6]),
        ]
    );
}
