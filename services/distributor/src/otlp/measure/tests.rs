//! The bounds against what decoding really allocates: a counting allocator records, per thread, the peak of
//! bytes allocated while one request is decoded.

use super::*;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{ArrayValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    Gauge, Histogram, ScopeMetrics, Summary, metric::Data, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use proptest::prelude::*;
use prost::Message as _;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn grew(n: usize) {
    let live = LIVE.get() + n;
    LIVE.set(live);
    PEAK.set(PEAK.get().max(live));
}

// SAFETY: every call is forwarded to `System` unchanged; the counters only read the sizes.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.set(LIVE.get().saturating_sub(layout.size()));
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Counted as a new block beside the old one, as a moving realloc holds both for a moment.
        grew(new_size);
        LIVE.set(LIVE.get().saturating_sub(layout.size()));
        // SAFETY: forwarded with the caller's pointer, layout and size.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The most bytes `f` had allocated at once on this thread, beyond what was live before it.
fn peak_of<T>(f: impl FnOnce() -> T) -> usize {
    let before = LIVE.get();
    PEAK.set(before);
    let value = f();
    let peak = PEAK.get() - before;
    drop(value);
    peak
}

fn request(metrics: Vec<Metric>, attributes: Vec<KeyValue>) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes,
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

fn gauge(name: &str, points: Vec<NumberDataPoint>) -> Metric {
    Metric {
        name: name.to_owned(),
        data: Some(Data::Gauge(Gauge { data_points: points })),
        ..Metric::default()
    }
}

fn check(req: &ExportMetricsServiceRequest) -> Result<(), TestCaseError> {
    let wire = req.encode_to_vec();
    let peak = peak_of(|| ExportMetricsServiceRequest::decode(&wire[..]).unwrap());
    let bound = decoded_bound(&wire);
    prop_assert!(peak <= bound, "protobuf: decoding took {peak} bytes, bound {bound}");
    let json = serde_json::to_vec(req).unwrap();
    let peak = peak_of(|| serde_json::from_slice::<ExportMetricsServiceRequest>(&json).unwrap());
    let bound = json_bound(&json);
    prop_assert!(peak <= bound, "json: decoding took {peak} bytes, bound {bound}");
    Ok(())
}

/// Empty data points, two bytes each on the wire, are the worst case of the protobuf encoding: the bound
/// covers them, at about a hundred times the body.
#[test]
fn empty_points_are_bounded() {
    let req = request(vec![gauge("g", vec![NumberDataPoint::default(); 50_000])], vec![]);
    check(&req).unwrap();
    let wire = req.encode_to_vec();
    let ratio = decoded_bound(&wire) / wire.len();
    assert!((50..200).contains(&ratio), "bound {ratio} times the body");
}

fn any_value() -> impl Strategy<Value = AnyValue> {
    let leaf = prop_oneof![
        "\\PC{0,12}".prop_map(any_value::Value::StringValue),
        any::<i64>().prop_map(any_value::Value::IntValue),
        any::<bool>().prop_map(any_value::Value::BoolValue),
        prop::collection::vec(any::<u8>(), 0..8).prop_map(any_value::Value::BytesValue),
    ]
    .prop_map(|v| AnyValue { value: Some(v) });
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop::collection::vec(inner, 0..4).prop_map(|values| AnyValue {
            value: Some(any_value::Value::ArrayValue(ArrayValue { values })),
        })
    })
}

fn attributes() -> impl Strategy<Value = Vec<KeyValue>> {
    prop::collection::vec(
        ("[a-z.]{0,10}", any_value()).prop_map(|(key, value)| KeyValue {
            key,
            value: Some(value),
            ..KeyValue::default()
        }),
        0..4,
    )
}

fn metric() -> impl Strategy<Value = Metric> {
    let number = (attributes(), any::<f64>()).prop_map(|(attributes, v)| NumberDataPoint {
        attributes,
        time_unix_nano: 1,
        value: Some(number_data_point::Value::AsDouble(v)),
        ..NumberDataPoint::default()
    });
    let histogram = (attributes(), prop::collection::vec(any::<u64>(), 0..12)).prop_map(|(attributes, counts)| {
        HistogramDataPoint {
            attributes,
            explicit_bounds: (0..counts.len().saturating_sub(1)).map(|i| i as f64).collect(),
            bucket_counts: counts,
            ..HistogramDataPoint::default()
        }
    });
    let summary = (attributes(), 0usize..6).prop_map(|(attributes, n)| SummaryDataPoint {
        attributes,
        quantile_values: vec![ValueAtQuantile::default(); n],
        ..SummaryDataPoint::default()
    });
    let data = prop_oneof![
        prop::collection::vec(number, 0..6).prop_map(|data_points| Data::Gauge(Gauge { data_points })),
        prop::collection::vec(histogram, 0..4).prop_map(|data_points| Data::Histogram(Histogram {
            data_points,
            aggregation_temporality: 2,
        })),
        prop::collection::vec(summary, 0..4).prop_map(|data_points| Data::Summary(Summary { data_points })),
    ];
    ("[a-z_.]{1,12}", "\\PC{0,20}", data).prop_map(|(name, description, data)| Metric {
        name,
        description,
        data: Some(data),
        ..Metric::default()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Random bytes never panic the walk, and whatever prost decodes from them stays within the bound (plus
    /// a kilobyte for the error prost builds when it refuses them).
    #[test]
    fn arbitrary_bytes_are_walked_safely(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let bound = decoded_bound(&bytes);
        let _ = json_bound(&bytes);
        let peak = peak_of(|| ExportMetricsServiceRequest::decode(&bytes[..]));
        prop_assert!(peak <= bound.max(1024), "decoding took {} bytes, bound {}", peak, bound);
    }

    /// Whatever a request holds, decoding it (protobuf or JSON) never allocates more than the bound.
    #[test]
    fn the_bound_holds(metrics in prop::collection::vec(metric(), 0..6), attributes in attributes()) {
        check(&request(metrics, attributes))?;
    }
}
