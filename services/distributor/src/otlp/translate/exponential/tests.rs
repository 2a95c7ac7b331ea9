use super::*;
use crate::testutil::histogram_body;
use heddle_model::{HistogramSample, HistogramValue};

fn span(offset: i32, length: u32) -> BucketSpan {
    BucketSpan { offset, length }
}

fn point(scale: i32, positive: (i32, &[u64]), negative: (i32, &[u64])) -> ExponentialHistogramDataPoint {
    let buckets = |(offset, counts): (i32, &[u64])| {
        Some(Buckets {
            offset,
            bucket_counts: counts.to_vec(),
        })
    };
    let count = positive.1.iter().chain(negative.1).sum::<u64>() + 2;
    ExponentialHistogramDataPoint {
        time_unix_nano: 1_700_000_000_500_000_000,
        count,
        sum: Some(12.5),
        scale,
        zero_count: 2,
        positive: buckets(positive),
        negative: buckets(negative),
        ..ExponentialHistogramDataPoint::default()
    }
}

#[test]
fn layouts_match_prometheus_translator() {
    // (name, counts, offset, scale_down, spans, deltas); the expected values are what Prometheus'
    // convertBucketsLayout gives for the same input.
    type Case = (&'static str, &'static [u64], i32, i32, Vec<BucketSpan>, Vec<i64>);
    let cases: Vec<Case> = vec![
        ("empty", &[], 0, 0, vec![], vec![]),
        (
            "index moves up by one",
            &[4, 3, 2, 1],
            0,
            0,
            vec![span(1, 4)],
            vec![4, -1, -1, -1],
        ),
        ("negative offset", &[1, 1], -3, 0, vec![span(-2, 2)], vec![1, 0]),
        (
            "gaps of up to two are empty buckets, longer ones new spans",
            &[1, 0, 0, 2, 0, 0, 0, 3],
            0,
            0,
            vec![span(1, 4), span(3, 1)],
            vec![1, -1, 0, 2, 1],
        ),
        (
            "a leading empty bucket is kept",
            &[0, 5],
            0,
            0,
            vec![span(1, 2)],
            vec![0, 5],
        ),
        (
            "scale 10 to 8: four buckets merge into one",
            &[1, 2, 3, 4, 5, 6, 7, 8],
            0,
            2,
            vec![span(1, 2)],
            vec![1 + 2 + 3 + 4, 16],
        ),
        (
            "merging with a negative offset",
            &[1, 1, 1, 1, 1, 1],
            -3,
            1,
            vec![span(-1, 4)],
            vec![1, 1, 0, -1],
        ),
    ];
    for (name, counts, offset, scale_down, spans, deltas) in cases {
        assert_eq!(
            buckets_layout(counts, offset, scale_down),
            (spans, deltas),
            "case {name}"
        );
    }
}

/// The converted point as the model reads it, checked against Prometheus' rules.
fn valid(p: &ExponentialHistogramDataPoint) -> heddle_model::Histogram {
    let h = native_histogram(p).expect("a convertible scale");
    let body = histogram_body(h);
    let arena = bumpalo::Bump::new();
    let req = heddle_proto::decode_write_request(&arena, &body).unwrap();
    let HistogramSample { value, .. } = req.timeseries[0].histograms[0].decode().unwrap();
    value.validate().unwrap();
    match value {
        HistogramValue::Int(h) => h,
        HistogramValue::Float(_) => panic!("OTLP histograms have integer counts"),
    }
}

#[test]
fn a_point_converts_with_both_sides_and_the_zero_bucket() {
    let h = valid(&point(3, (-2, &[1, 0, 4]), (0, &[2, 2])));
    assert_eq!(h.schema, 3);
    assert_eq!((h.count, h.zero_count, h.sum, h.zero_threshold), (11, 2, 12.5, 1e-128));
    assert_eq!(h.positive_spans, [heddle_model::Span::new(-1, 3)]);
    assert_eq!(h.positive_counts(), [1, 0, 4]);
    assert_eq!(h.negative_spans, [heddle_model::Span::new(1, 2)]);
    assert_eq!(h.negative_counts(), [2, 2]);
}

#[test]
fn scale_10_is_reduced_to_schema_8_by_merging_buckets() {
    // OTLP scale 10's indexes 3 to 10 land in schema 8's (i >> 2) + 1: 1 for 3, 2 for 4 to 7, 3 for 8 to 10.
    let h = valid(&point(10, (3, &[1, 2, 3, 4, 5, 6, 7, 8]), (0, &[])));
    assert_eq!(h.schema, 8);
    assert_eq!(h.positive_spans, [heddle_model::Span::new(1, 3)]);
    assert_eq!(h.positive_counts(), [1, 2 + 3 + 4 + 5, 6 + 7 + 8]);
    assert_eq!(h.count, 36 + 2);
}

#[test]
fn no_recorded_value_is_the_stale_marker_and_low_scales_are_refused() {
    let mut p = point(0, (0, &[1]), (0, &[]));
    p.flags = opentelemetry_proto::tonic::metrics::v1::DataPointFlags::NoRecordedValueMask as u32;
    let h = native_histogram(&p).unwrap();
    assert_eq!(h.sum.to_bits(), STALE_NAN_BITS);
    assert_eq!(h.count, Some(histogram::Count::CountInt(STALE_NAN_BITS)));
    assert!(native_histogram(&point(-5, (0, &[1]), (0, &[]))).is_none());
    assert_eq!(
        native_histogram(&point(-4, (0, &[1]), (0, &[]))).map(|h| h.schema),
        Some(-4)
    );
}
