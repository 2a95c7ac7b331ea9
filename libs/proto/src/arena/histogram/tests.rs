use super::*;
use crate::arena::{decode_write_request, decode_write_request_v2};
use crate::histogram_to_proto;
use crate::prometheus::{self, BucketSpan, TimeSeries, WriteRequest, histogram};
use bumpalo::Bump;
use proptest::collection::vec;
use proptest::prelude::*;
use prost::Message;

/// A request of one series (`a="b"`) carrying `h` as an encoded 1.0 histogram.
fn v1_body(h: &[u8]) -> Vec<u8> {
    let mut series = vec![0x0a, 6, 0x0a, 1, b'a', 0x12, 1, b'b', 0x22];
    super::super::wire::put_varint(h.len() as u64, &mut series);
    series.extend_from_slice(h);
    let mut body = vec![0x0a];
    super::super::wire::put_varint(series.len() as u64, &mut body);
    body.extend(series);
    body
}

fn int_histogram() -> prometheus::Histogram {
    prometheus::Histogram {
        count: Some(histogram::Count::CountInt(10)),
        sum: 18.4,
        schema: 1,
        zero_threshold: 0.001,
        zero_count: Some(histogram::ZeroCount::ZeroCountInt(2)),
        negative_spans: vec![BucketSpan { offset: 0, length: 1 }],
        negative_deltas: vec![1],
        positive_spans: vec![
            BucketSpan { offset: -2, length: 2 },
            BucketSpan { offset: 1, length: 2 },
        ],
        positive_deltas: vec![1, 1, -1, 2],
        reset_hint: histogram::ResetHint::No.into(),
        timestamp: 1_700_000_000_123,
        ..Default::default()
    }
}

#[test]
fn a_1_0_integer_histogram_decodes_to_the_model() {
    let h = int_histogram();
    let arena = Bump::new();
    let body = v1_body(&h.encode_to_vec());
    let req = decode_write_request(&arena, &body).unwrap();
    let refs = req.timeseries[0].histograms;
    assert_eq!(refs.len(), 1);
    assert_eq!(refs[0].t, 1_700_000_000_123);
    let got = refs[0].decode().unwrap();
    assert_eq!(
        got.value,
        HistogramValue::Int(Histogram {
            counter_reset_hint: CounterResetHint::NotCounterReset,
            schema: 1,
            zero_threshold: 0.001,
            zero_count: 2,
            count: 10,
            sum: 18.4,
            positive_spans: vec![Span::new(-2, 2), Span::new(1, 2)],
            negative_spans: vec![Span::new(0, 1)],
            positive_buckets: vec![1, 1, -1, 2],
            negative_buckets: vec![1],
            custom_values: vec![],
        })
    );
    got.value.validate().unwrap();
    assert_eq!(histogram_to_proto(&got), h);
}

#[test]
fn a_float_histogram_with_custom_buckets_decodes() {
    let h = prometheus::Histogram {
        count: Some(histogram::Count::CountFloat(3.5)),
        sum: 7.0,
        schema: -53,
        zero_count: Some(histogram::ZeroCount::ZeroCountFloat(0.0)),
        positive_spans: vec![BucketSpan { offset: 0, length: 3 }],
        positive_counts: vec![1.0, 0.5, 2.0],
        custom_values: vec![0.1, 1.0],
        reset_hint: histogram::ResetHint::Gauge.into(),
        timestamp: -5,
        ..Default::default()
    };
    let arena = Bump::new();
    let body = v1_body(&h.encode_to_vec());
    let got = decode_write_request(&arena, &body).unwrap().timeseries[0].histograms[0]
        .decode()
        .unwrap();
    assert_eq!(got.t, -5);
    match &got.value {
        HistogramValue::Float(f) => {
            assert_eq!(f.custom_values, [0.1, 1.0]);
            assert_eq!(f.positive_buckets, [1.0, 0.5, 2.0]);
            assert_eq!(f.counter_reset_hint, CounterResetHint::Gauge);
        }
        other => panic!("want a float histogram, got {other:?}"),
    }
    got.value.validate().unwrap();
    assert_eq!(histogram_to_proto(&got), h);
}

#[test]
fn unpacked_repeated_fields_are_read_too() {
    // positive_spans{offset:1 length:2}, positive_deltas 3 and -1 unpacked (zigzag 6 and 1), count_int 5.
    let h = [0x5a, 4, 0x08, 2, 0x10, 2, 0x60, 6, 0x60, 1, 0x08, 5];
    let arena = Bump::new();
    let body = v1_body(&h);
    let got = decode_write_request(&arena, &body).unwrap().timeseries[0].histograms[0]
        .decode()
        .unwrap();
    let HistogramValue::Int(got) = got.value else {
        panic!("integer histogram expected")
    };
    assert_eq!(
        (got.positive_spans, got.positive_buckets, got.count),
        (vec![Span::new(1, 2)], vec![3, -1], 5)
    );
}

#[test]
fn malformed_histograms_are_refused_naming_the_field() {
    // Offsets: the histogram's first byte is at 12 in `v1_body` (series tag and length, 8 label bytes, tag and
    // length).
    let cases: &[(&str, &[u8], DecodeError)] = &[
        (
            "schema out of sint32 range",
            &[0x20, 0x80, 0x80, 0x80, 0x80, 0x20],
            DecodeError::InvalidValue {
                what: "prometheus.Histogram.schema",
                offset: 12,
                reason: "the sint32 value does not fit in 32 bits",
            },
        ),
        (
            "sum as a varint",
            &[0x18, 1],
            DecodeError::WrongWireType {
                what: "prometheus.Histogram.sum",
                offset: 12,
                found: 0,
                expected: 1,
            },
        ),
        (
            "unknown reset hint",
            &[0x70, 4],
            DecodeError::InvalidValue {
                what: "prometheus.Histogram.reset_hint",
                offset: 12,
                reason: "unknown reset hint: expected 0 to 3",
            },
        ),
        (
            "packed doubles cut short",
            &[0x6a, 3, 0, 0, 0, 0x11, 0, 0, 0, 0, 0, 0, 0, 0x40],
            DecodeError::InvalidValue {
                what: "prometheus.Histogram.positive_counts",
                offset: 14,
                reason: "packed doubles whose length is not a multiple of 8 bytes",
            },
        ),
        (
            "packed deltas ending inside a varint",
            &[0x62, 2, 0x02, 0x80],
            DecodeError::InvalidValue {
                what: "prometheus.Histogram.positive_deltas",
                offset: 15,
                reason: "truncated or overlong varint in a packed field",
            },
        ),
        (
            "span length over 32 bits",
            &[0x5a, 7, 0x10, 0x80, 0x80, 0x80, 0x80, 0x10, 0],
            DecodeError::InvalidValue {
                what: "prometheus.BucketSpan.length",
                offset: 14,
                reason: "the uint32 value does not fit in 32 bits",
            },
        ),
        (
            "integer count with float buckets",
            &[0x08, 1, 0x69, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f],
            DecodeError::InvalidValue {
                what: "prometheus.Histogram",
                offset: 14,
                reason: "an integer histogram (count_int or no count) has float bucket counts; send count_float with them",
            },
        ),
        (
            "float count with an integer zero count",
            &[0x11, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0x30, 1],
            DecodeError::InvalidValue {
                what: "prometheus.Histogram",
                offset: 21,
                reason: "a float histogram (count_float) has an integer zero count; send zero_count_float",
            },
        ),
    ];
    let arena = Bump::new();
    for (name, h, want) in cases {
        let body = v1_body(h);
        assert_eq!(decode_write_request(&arena, &body).unwrap_err(), *want, "case {name}");
    }
}

#[test]
fn remote_write_2_0_histograms_decode_the_same_and_name_their_own_fields() {
    use crate::write_v2;
    let h = int_histogram();
    let v2 = write_v2::Histogram {
        count: Some(write_v2::histogram::Count::CountInt(10)),
        sum: h.sum,
        schema: h.schema,
        zero_threshold: h.zero_threshold,
        zero_count: Some(write_v2::histogram::ZeroCount::ZeroCountInt(2)),
        negative_spans: vec![write_v2::BucketSpan { offset: 0, length: 1 }],
        negative_deltas: h.negative_deltas.clone(),
        positive_spans: vec![
            write_v2::BucketSpan { offset: -2, length: 2 },
            write_v2::BucketSpan { offset: 1, length: 2 },
        ],
        positive_deltas: h.positive_deltas.clone(),
        reset_hint: write_v2::histogram::ResetHint::No.into(),
        timestamp: h.timestamp,
        ..Default::default()
    };
    let request = |histograms| write_v2::Request {
        symbols: vec!["".into(), "__name__".into(), "h".into()],
        timeseries: vec![write_v2::TimeSeries {
            labels_refs: vec![1, 2],
            histograms,
            ..Default::default()
        }],
    };
    let body = request(vec![v2.clone()]).encode_to_vec();
    let arena = Bump::new();
    let req = decode_write_request_v2(&arena, &body).unwrap();
    let refs = req.timeseries[0].histograms;
    assert_eq!(refs.len(), 1);
    assert_eq!(refs[0].raw(), v2.encode_to_vec().as_slice(), "the bytes are 1.0's too");
    assert_eq!(histogram_to_proto(&refs[0].decode().unwrap()), h);

    let mut bad = v2;
    bad.reset_hint = 7;
    let body = request(vec![bad]).encode_to_vec();
    match decode_write_request_v2(&arena, &body).unwrap_err() {
        DecodeError::InvalidValue { what, .. } => assert_eq!(what, "io.prometheus.write.v2.Histogram.reset_hint"),
        other => panic!("unexpected error {other:?}"),
    }
}

fn any_spans(buckets: usize) -> impl Strategy<Value = Vec<BucketSpan>> {
    // Split `buckets` into up to three spans with small gaps.
    (vec(0u32..3, 2), -5i32..5, vec(0i32..4, 2)).prop_map(move |(cuts, first, gaps)| {
        let a = (cuts[0] as usize).min(buckets);
        let b = (a + cuts[1] as usize).min(buckets);
        let lengths = [a, b - a, buckets - b];
        lengths
            .iter()
            .enumerate()
            .filter(|(_, l)| **l > 0)
            .enumerate()
            .map(|(n, (i, l))| BucketSpan {
                offset: if n == 0 { first } else { gaps[i.min(1)] },
                length: *l as u32,
            })
            .collect()
    })
}

/// Valid integer histograms of any exponential schema: counts consistent with the buckets.
fn any_int_histogram() -> impl Strategy<Value = prometheus::Histogram> {
    (
        vec(0i64..100, 0..8),
        vec(0i64..100, 0..8),
        -4i32..=8,
        0u64..50,
        any::<i64>(),
        0i32..4,
    )
        .prop_flat_map(|(pos, neg, schema, zero, t, hint)| {
            (any_spans(pos.len()), any_spans(neg.len())).prop_map(move |(ps, ns)| {
                let deltas = |c: &[i64]| {
                    c.iter()
                        .scan(0, |prev, &c| Some(c - std::mem::replace(prev, c)))
                        .collect()
                };
                let count = pos.iter().chain(&neg).sum::<i64>() as u64 + zero;
                prometheus::Histogram {
                    count: Some(histogram::Count::CountInt(count)),
                    sum: count as f64 * 1.5,
                    schema,
                    zero_threshold: 1e-128,
                    zero_count: Some(histogram::ZeroCount::ZeroCountInt(zero)),
                    negative_spans: ns,
                    negative_deltas: deltas(&neg),
                    positive_spans: ps,
                    positive_deltas: deltas(&pos),
                    reset_hint: hint,
                    timestamp: t,
                    ..Default::default()
                }
            })
        })
}

proptest! {
    #[test]
    fn random_valid_histograms_round_trip(hs in vec(any_int_histogram(), 1..5)) {
        let request = WriteRequest {
            timeseries: vec![TimeSeries {
                labels: vec![prometheus::Label { name: "a".into(), value: "b".into() }],
                histograms: hs.clone(),
                ..Default::default()
            }],
            metadata: vec![],
        };
        let body = request.encode_to_vec();
        let arena = Bump::new();
        let req = decode_write_request(&arena, &body).unwrap();
        prop_assert_eq!(req.timeseries[0].histograms.len(), hs.len());
        for (r, want) in req.timeseries[0].histograms.iter().zip(&hs) {
            let got = r.decode().unwrap();
            prop_assert_eq!(got.t, want.timestamp);
            prop_assert!(got.value.validate().is_ok(), "{:?}", got.value.validate());
            prop_assert_eq!(&histogram_to_proto(&got), want);
        }
    }
}

#[test]
fn the_fuzz_seeds_with_histograms_decode_to_valid_histograms() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let arena = Bump::new();
    let v1 = std::fs::read(dir.join("write_request/seed-3")).unwrap();
    let v2 = std::fs::read(dir.join("write_request_v2/seed-3")).unwrap();
    let series = [
        decode_write_request(&arena, &v1).unwrap().timeseries,
        decode_write_request_v2(&arena, &v2).unwrap().timeseries,
    ];
    let mut kinds = Vec::new();
    for ts in series.iter().flat_map(|s| s.iter()) {
        for h in ts.histograms {
            let h = h.decode().unwrap();
            h.value.validate().unwrap_or_else(|e| panic!("{h:?}: {e}"));
            kinds.push((h.value.schema(), matches!(h.value, HistogramValue::Float(_))));
        }
    }
    assert_eq!(
        kinds,
        [
            (3, false),
            (-4, false),
            (-53, true),
            (3, false),
            (3, false),
            (-4, false),
            (-53, true)
        ]
    );
}

#[test]
fn the_view_sizes_the_docs_state() {
    // `decode`'s module docs and the decoded-size bound's reasoning quote these.
    assert_eq!(size_of::<HistogramRef<'_>>(), 40);
    assert_eq!(size_of::<crate::TimeSeriesRef<'_>>(), 88);
}

/// Decoding's allocations are counted, so a test can hold what one call allocates against its bound.
#[global_allocator]
static ALLOCATOR: heddle_testkit::alloc::PerThread<0> = heddle_testkit::alloc::PerThread;

/// The float form of an integer histogram message: absolute float counts, float count and zero count.
fn as_float(h: &prometheus::Histogram) -> prometheus::Histogram {
    let absolute = |d: &[i64]| -> Vec<f64> {
        d.iter()
            .scan(0i64, |c, d| {
                *c += d;
                Some(*c as f64)
            })
            .collect()
    };
    let count = match h.count {
        Some(histogram::Count::CountInt(c)) => c as f64,
        _ => 0.0,
    };
    prometheus::Histogram {
        count: Some(histogram::Count::CountFloat(count)),
        zero_count: Some(histogram::ZeroCount::ZeroCountFloat(1.0)),
        negative_deltas: vec![],
        positive_deltas: vec![],
        negative_counts: absolute(&h.negative_deltas),
        positive_counts: absolute(&h.positive_deltas),
        ..h.clone()
    }
}

proptest! {
    /// The check counts what decoding holds, and decoding allocates exactly what `decoded_heap_bytes` says,
    /// for integer and float histograms, so a caller can reserve it before decoding.
    #[test]
    fn decoding_allocates_exactly_what_the_check_counted(h in any_int_histogram(), float in any::<bool>()) {
        let h = if float { as_float(&h) } else { h };
        let body = v1_body(&h.encode_to_vec());
        let arena = Bump::new();
        let req = decode_write_request(&arena, &body).unwrap();
        let r = req.timeseries[0].histograms[0];
        let (got, peak) = heddle_testkit::alloc::peak_with(|| r.decode().unwrap());
        prop_assert_eq!(r.size(), got.value.size());
        prop_assert_eq!(peak, r.decoded_heap_bytes());
        prop_assert_eq!(peak, 8 * (r.size().buckets + r.size().layout));
    }
}

#[test]
fn unpacked_fields_are_counted_like_packed_ones() {
    // Field 12 (positive_deltas) as three unpacked varints and field 13 absent; two spans.
    let mut raw = prometheus::Histogram {
        count: Some(histogram::Count::CountInt(6)),
        positive_spans: vec![BucketSpan { offset: 0, length: 1 }, BucketSpan { offset: 1, length: 2 }],
        ..Default::default()
    }
    .encode_to_vec();
    for d in [1u8, 2, 0] {
        raw.extend([12 << 3, d]); // sint64 zigzag: 1 -> -1, 2 -> 1, 0 -> 0
    }
    let body = v1_body(&raw);
    let arena = Bump::new();
    let req = decode_write_request(&arena, &body).unwrap();
    let r = req.timeseries[0].histograms[0];
    assert_eq!(r.size(), HistogramSize { buckets: 3, layout: 2 });
    let (got, peak) = heddle_testkit::alloc::peak_with(|| r.decode().unwrap());
    assert_eq!(got.value.size(), r.size());
    assert_eq!(peak, r.decoded_heap_bytes());
}

/// A histogram of `buckets` empty positive buckets at schema 8 in one span, and `spans` empty spans.
fn wide(buckets: usize, spans: usize) -> prometheus::Histogram {
    let mut positive_spans = vec![BucketSpan { offset: 0, length: 0 }; spans];
    positive_spans.push(BucketSpan {
        offset: 0,
        length: buckets as u32,
    });
    prometheus::Histogram {
        count: Some(histogram::Count::CountInt(0)),
        schema: 8,
        positive_spans,
        positive_deltas: vec![0; buckets],
        timestamp: 5,
        ..Default::default()
    }
}

#[test]
fn a_histogram_over_the_ceiling_is_refused_before_anything_is_allocated() {
    let cases = [
        ("buckets", wide(MAX_BUCKETS_CEILING + 1, 0), "16385 buckets and 1 spans"),
        ("spans", wide(1, MAX_BUCKETS_CEILING), "1 buckets and 16385 spans"),
    ];
    for (name, h, words) in cases {
        let body = v1_body(&h.encode_to_vec());
        let arena = Bump::new();
        // The request itself decodes: the refusal is the histogram's, so a distributor can refuse it alone.
        let req = decode_write_request(&arena, &body).unwrap();
        let r = req.timeseries[0].histograms[0];
        assert!(r.size().over_ceiling(), "case {name}");
        assert_eq!(
            r.decoded_heap_bytes(),
            0,
            "case {name}: never decoded, nothing to reserve"
        );
        let (got, peak) = heddle_testkit::alloc::peak_with(|| r.decode());
        let err = got.expect_err(name);
        assert!(
            matches!(err, DecodeError::HistogramTooLarge { .. }),
            "case {name}: {err:?}"
        );
        assert_eq!(r.check_ceiling(), Err(err.clone()), "case {name}");
        let msg = err.to_string();
        assert!(
            msg.starts_with("err-heddle-native-histogram-too-large: "),
            "case {name}: {msg}"
        );
        assert!(
            msg.contains(words) && msg.contains("more than 16384") && msg.contains("timestamp 5 ms"),
            "case {name}: {msg}"
        );
        assert_eq!(peak, 0, "case {name}: refused without allocating");
    }
    // At the ceiling, it decodes.
    let h = wide(MAX_BUCKETS_CEILING, MAX_BUCKETS_CEILING - 1);
    let body = v1_body(&h.encode_to_vec());
    let arena = Bump::new();
    let req = decode_write_request(&arena, &body).unwrap();
    let r = req.timeseries[0].histograms[0];
    assert!(!r.size().over_ceiling());
    assert_eq!(r.decode().unwrap().value.bucket_count(), MAX_BUCKETS_CEILING);
}
