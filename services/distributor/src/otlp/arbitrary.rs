//! Proptest strategies for OTLP export requests, for the tests of the measure walks and the translation's
//! bound: every metric kind, exemplars, resource and point attributes with nested values, odd strings.

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList, any_value,
};
use opentelemetry_proto::tonic::metrics::v1::{
    Exemplar, ExponentialHistogram, ExponentialHistogramDataPoint, Gauge, Histogram, HistogramDataPoint, Metric,
    NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, Summary, SummaryDataPoint, exemplar,
    exponential_histogram_data_point::Buckets, metric::Data, number_data_point, summary_data_point::ValueAtQuantile,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use proptest::prelude::*;

/// Text with the characters that need escaping in JSON and label names.
pub(crate) fn text(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            4 => "[a-z]",
            1 => "[._/ -]",
            1 => "[\"\\\\\n\u{1}]",
            1 => "[é☃𝄞]",
            1 => "[0-9]",
        ],
        0..max,
    )
    .prop_map(|parts| parts.concat())
}

pub(crate) fn any_value() -> impl Strategy<Value = AnyValue> {
    let leaf = prop_oneof![
        text(12).prop_map(any_value::Value::StringValue),
        any::<i64>().prop_map(any_value::Value::IntValue),
        any::<bool>().prop_map(any_value::Value::BoolValue),
        any::<f64>().prop_map(any_value::Value::DoubleValue),
        prop::collection::vec(any::<u8>(), 0..24).prop_map(any_value::Value::BytesValue),
    ]
    .prop_map(|v| AnyValue { value: Some(v) });
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|values| AnyValue {
                value: Some(any_value::Value::ArrayValue(ArrayValue { values })),
            }),
            prop::collection::vec(("[a-z]{0,4}", inner), 0..3).prop_map(|kvs| AnyValue {
                value: Some(any_value::Value::KvlistValue(KeyValueList {
                    values: kvs
                        .into_iter()
                        .map(|(key, v)| KeyValue {
                            key,
                            value: Some(v),
                            ..KeyValue::default()
                        })
                        .collect(),
                })),
            }),
        ]
    })
}

pub(crate) fn attributes(max: usize) -> impl Strategy<Value = Vec<KeyValue>> {
    prop::collection::vec(
        (
            prop_oneof![text(10), "[a-z.]{1,6}", Just("service.name".to_owned())],
            any_value(),
        )
            .prop_map(|(key, value)| KeyValue {
                key,
                value: Some(value),
                ..KeyValue::default()
            }),
        0..max,
    )
}

fn exemplars() -> impl Strategy<Value = Vec<Exemplar>> {
    prop::collection::vec(
        (
            attributes(3),
            prop_oneof![Just(f64::NAN), -5.0..20.0, Just(f64::INFINITY)],
            prop::collection::vec(any::<u8>(), 0..17),
            prop::collection::vec(any::<u8>(), 0..9),
        )
            .prop_map(|(filtered_attributes, v, trace_id, span_id)| Exemplar {
                filtered_attributes,
                time_unix_nano: 1_000_000,
                value: Some(exemplar::Value::AsDouble(v)),
                trace_id,
                span_id,
            }),
        0..4,
    )
}

fn number_point() -> impl Strategy<Value = NumberDataPoint> {
    (attributes(4), any::<f64>(), exemplars(), any::<bool>()).prop_map(|(attributes, v, exemplars, empty)| {
        NumberDataPoint {
            attributes,
            time_unix_nano: 1_000_000,
            value: (!empty).then_some(number_data_point::Value::AsDouble(v)),
            exemplars,
            ..NumberDataPoint::default()
        }
    })
}

fn histogram_point() -> impl Strategy<Value = HistogramDataPoint> {
    (
        attributes(4),
        prop::collection::vec(
            prop_oneof![-10.0..10.0, Just(f64::NAN), Just(1e300), Just(5e-324)],
            0..10,
        ),
        any::<u64>(),
        exemplars(),
        any::<bool>(),
    )
        .prop_map(|(attributes, bounds, seed, exemplars, sum)| HistogramDataPoint {
            attributes,
            bucket_counts: (0..=bounds.len()).map(|i| seed.rotate_left(i as u32) % 7).collect(),
            explicit_bounds: bounds,
            exemplars,
            sum: sum.then_some(1.5),
            ..HistogramDataPoint::default()
        })
}

fn exponential_point() -> impl Strategy<Value = ExponentialHistogramDataPoint> {
    (
        attributes(3),
        -6i32..12,
        prop::collection::vec(0u64..4, 0..20),
        -10i32..10,
        exemplars(),
    )
        .prop_map(
            |(attributes, scale, counts, offset, exemplars)| ExponentialHistogramDataPoint {
                attributes,
                scale,
                positive: Some(Buckets {
                    offset,
                    bucket_counts: counts.clone(),
                }),
                negative: Some(Buckets {
                    offset: -offset,
                    bucket_counts: counts,
                }),
                exemplars,
                ..ExponentialHistogramDataPoint::default()
            },
        )
}

fn summary_point() -> impl Strategy<Value = SummaryDataPoint> {
    (attributes(3), prop::collection::vec(any::<f64>(), 0..5)).prop_map(|(attributes, qs)| SummaryDataPoint {
        attributes,
        quantile_values: qs
            .into_iter()
            .map(|quantile| ValueAtQuantile { quantile, value: 1.0 })
            .collect(),
        ..SummaryDataPoint::default()
    })
}

pub(crate) fn metric() -> impl Strategy<Value = Metric> {
    let temporality = prop_oneof![4 => Just(2), 1 => Just(1)];
    let data = prop_oneof![
        prop::collection::vec(number_point(), 0..5).prop_map(|data_points| Data::Gauge(Gauge { data_points })),
        (
            prop::collection::vec(number_point(), 0..5),
            temporality.clone(),
            any::<bool>()
        )
            .prop_map(|(data_points, aggregation_temporality, is_monotonic)| Data::Sum(Sum {
                data_points,
                aggregation_temporality,
                is_monotonic,
            })),
        (prop::collection::vec(histogram_point(), 0..4), temporality.clone()).prop_map(
            |(data_points, aggregation_temporality)| Data::Histogram(Histogram {
                data_points,
                aggregation_temporality,
            })
        ),
        (prop::collection::vec(exponential_point(), 0..3), temporality).prop_map(
            |(data_points, aggregation_temporality)| Data::ExponentialHistogram(ExponentialHistogram {
                data_points,
                aggregation_temporality,
            })
        ),
        prop::collection::vec(summary_point(), 0..3).prop_map(|data_points| Data::Summary(Summary { data_points })),
    ];
    (
        prop_oneof![3 => "[a-z_.]{1,12}", 1 => text(16)],
        prop_oneof![Just(""), Just("s"), Just("By/s"), Just("1"), Just("{req}"), Just("m")],
        text(20),
        data,
    )
        .prop_map(|(name, unit, description, data)| Metric {
            name,
            unit: unit.to_owned(),
            description,
            data: Some(data),
            ..Metric::default()
        })
}

fn resource_attributes() -> impl Strategy<Value = Vec<KeyValue>> {
    let identity = (
        proptest::option::of("[a-z]{1,6}"),
        proptest::option::of("[a-z]{1,6}"),
        proptest::option::of("[a-z0-9-]{1,8}"),
    )
        .prop_map(|(name, ns, instance)| {
            let kv = |k: &str, v: String| KeyValue {
                key: k.to_owned(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue(v)),
                }),
                ..KeyValue::default()
            };
            [
                name.map(|v| kv("service.name", v)),
                ns.map(|v| kv("service.namespace", v)),
                instance.map(|v| kv("service.instance.id", v)),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
        });
    (identity, attributes(5)).prop_map(|(mut id, rest)| {
        id.extend(rest);
        id
    })
}

pub(crate) fn request() -> impl Strategy<Value = ExportMetricsServiceRequest> {
    prop::collection::vec(
        (
            resource_attributes(),
            prop::collection::vec((text(8), prop::collection::vec(metric(), 0..4)), 0..3),
            text(10),
        ),
        0..3,
    )
    .prop_map(|resources| ExportMetricsServiceRequest {
        resource_metrics: resources
            .into_iter()
            .map(|(attributes, scopes, schema_url)| ResourceMetrics {
                resource: Some(Resource {
                    attributes,
                    ..Resource::default()
                }),
                scope_metrics: scopes
                    .into_iter()
                    .map(|(name, metrics)| ScopeMetrics {
                        scope: Some(InstrumentationScope {
                            name,
                            ..InstrumentationScope::default()
                        }),
                        metrics,
                        schema_url: String::new(),
                    })
                    .collect(),
                schema_url,
            })
            .collect(),
    })
}
