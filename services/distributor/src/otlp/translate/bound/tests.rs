//! The bound against what the translation really allocates (the test allocator's peak), for random requests
//! under every strategy and with promoted attributes, and for the amplifying shapes: a histogram of many
//! buckets whose point has many attributes, and many resource attributes promoted onto every series.

use super::super::{Settings, translate};
use super::*;
use crate::otlp::arbitrary;
use heddle_limits::OtelTranslationStrategy;
use heddle_testkit::alloc::peak_with;
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    Gauge, Histogram, HistogramDataPoint, NumberDataPoint, ResourceMetrics, ScopeMetrics,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use proptest::prelude::*;

/// The translation's peak and the bound, checked against each other; returns both.
fn check(req: &ExportMetricsServiceRequest, settings: Settings<'_>) -> Result<(usize, Bound), TestCaseError> {
    let sizes = bound(req, settings);
    let (translated, peak) = peak_with(|| translate(req, settings, &sizes, usize::MAX));
    prop_assert!(
        peak <= sizes.bytes,
        "translating took {peak} bytes, the bound is {}",
        sizes.bytes
    );
    prop_assert!(translated.request.timeseries.len() <= sizes.series);
    prop_assert!(translated.request.metadata.len() <= sizes.metadata);
    Ok((peak, sizes))
}

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.to_owned())),
        }),
        ..KeyValue::default()
    }
}

fn request(resource: Vec<KeyValue>, metric: Metric) -> ExportMetricsServiceRequest {
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
}

const DEFAULT: Settings<'static> = Settings {
    strategy: OtelTranslationStrategy::UnderscoreEscapingWithSuffixes,
    promote: &[],
};

/// One histogram point of 2000 buckets and 30 attributes: 2003 series, each with a copy of every label. The
/// bound holds it, and is not far above it (a bound many times the truth would refuse honest requests).
#[test]
fn a_histogram_of_many_buckets_is_bounded_closely() {
    let attributes: Vec<KeyValue> = (0..30)
        .map(|i| kv(&format!("attr.{i}"), &format!("value-{i}")))
        .collect();
    let buckets = 2000;
    let metric = Metric {
        name: "latency".into(),
        unit: "s".into(),
        data: Some(Data::Histogram(Histogram {
            data_points: vec![HistogramDataPoint {
                attributes,
                explicit_bounds: (0..buckets).map(f64::from).collect(),
                bucket_counts: vec![1; buckets as usize + 1],
                sum: Some(1.0),
                ..HistogramDataPoint::default()
            }],
            aggregation_temporality: 2,
        })),
        ..Metric::default()
    };
    let req = request(vec![kv("service.name", "api")], metric);
    let (peak, sizes) = check(&req, DEFAULT).unwrap();
    assert_eq!(sizes.series, buckets as usize + 3);
    assert!(sizes.bytes < 2 * peak, "bound {} for a peak of {peak}", sizes.bytes);
    // Against the wire size of the request: the amplification the bound is there for.
    let wire = prost::Message::encoded_len(&req);
    assert!(
        sizes.bytes > 50 * wire,
        "bound {} for {wire} bytes of protobuf",
        sizes.bytes
    );
}

/// Promoted resource attributes are copied onto every series of the resource.
#[test]
fn promoted_attributes_are_counted_on_every_series() {
    let resource: Vec<KeyValue> = (0..20).map(|i| kv(&format!("r{i}"), &"v".repeat(50))).collect();
    let promote: Vec<String> = (0..20).map(|i| format!("r{i}")).collect();
    let metric = Metric {
        name: "g".into(),
        data: Some(Data::Gauge(Gauge {
            data_points: vec![
                NumberDataPoint {
                    value: Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsDouble(1.0)),
                    ..NumberDataPoint::default()
                };
                500
            ],
        })),
        ..Metric::default()
    };
    let req = request(resource, metric);
    let settings = Settings {
        promote: &promote,
        ..DEFAULT
    };
    let (peak, sizes) = check(&req, settings).unwrap();
    let (plain_peak, plain) = check(&req, DEFAULT).unwrap();
    assert!(peak > 10 * plain_peak, "promoting costs: {peak} against {plain_peak}");
    assert!(
        sizes.bytes > 5 * plain.bytes,
        "bound {} against {}",
        sizes.bytes,
        plain.bytes
    );
    assert!(sizes.bytes < 2 * peak, "bound {} for a peak of {peak}", sizes.bytes);
}

/// Refusal messages quote names: long ones, full of characters that escape to ten bytes, are cut before
/// they are quoted, and what the messages take stays within the bound.
#[test]
fn refusal_messages_are_bounded() {
    use opentelemetry_proto::tonic::metrics::v1::{Sum, number_data_point::Value};
    let point = |key: String| NumberDataPoint {
        attributes: vec![kv(&key, "v")],
        value: Some(Value::AsDouble(1.0)),
        ..NumberDataPoint::default()
    };
    let metrics = (0..20).map(|i| {
        let data = if i % 2 == 0 {
            // Refused for its temporality: the message quotes the OTLP name.
            Data::Sum(Sum {
                data_points: vec![point("k".into())],
                aggregation_temporality: 1,
                is_monotonic: true,
            })
        } else {
            // Refused for an attribute that escapes to underscores: the message quotes the name and the key.
            Data::Gauge(Gauge {
                data_points: vec![point(".".repeat(3000 + i))],
            })
        };
        Metric {
            name: format!("{i}{}", if i % 2 == 0 { "\u{e0001}" } else { "a" }.repeat(5000)),
            data: Some(data),
            ..Metric::default()
        }
    });
    let req = ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            scope_metrics: vec![ScopeMetrics {
                metrics: metrics.collect(),
                ..ScopeMetrics::default()
            }],
            ..ResourceMetrics::default()
        }],
    };
    check(&req, DEFAULT).unwrap();
    let t = translate(&req, DEFAULT, &bound(&req, DEFAULT), usize::MAX);
    assert_eq!(t.refused_points, 20);
    assert_eq!(t.messages.len(), MAX_REFUSAL_MESSAGES);
    assert!(
        t.messages.iter().all(|m| m.len() < MESSAGE / 2),
        "{:?}",
        t.messages.iter().map(String::len).collect::<Vec<_>>()
    );
}

fn strategy() -> impl Strategy<Value = OtelTranslationStrategy> {
    prop_oneof![
        Just(OtelTranslationStrategy::UnderscoreEscapingWithSuffixes),
        Just(OtelTranslationStrategy::UnderscoreEscapingWithoutSuffixes),
        Just(OtelTranslationStrategy::NoUtf8EscapingWithSuffixes),
        Just(OtelTranslationStrategy::NoTranslation),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_bound_holds(
        req in arbitrary::request(),
        strategy in strategy(),
        promote in prop::collection::vec(prop_oneof![Just("service.name".to_owned()), "[a-z.]{1,6}"], 0..3),
    ) {
        check(&req, Settings { strategy, promote: &promote })?;
    }
}
