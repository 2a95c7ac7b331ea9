use super::*;
use crate::record::{Record, decode};
use proptest::prelude::*;

fn any_hint() -> impl Strategy<Value = CounterResetHint> {
    prop_oneof![
        Just(CounterResetHint::Unknown),
        Just(CounterResetHint::CounterReset),
        Just(CounterResetHint::NotCounterReset),
        Just(CounterResetHint::Gauge),
    ]
}

fn any_spans() -> impl Strategy<Value = Vec<Span>> {
    prop::collection::vec(
        (any::<i32>(), any::<u32>()).prop_map(|(offset, length)| Span { offset, length }),
        0..4,
    )
}

/// Any field values, valid histograms or not: the record layer carries what it is given.
fn any_histogram() -> impl Strategy<Value = Histogram> {
    (
        any_hint(),
        prop_oneof![Just(-53), -4..=8i32, any::<i32>()],
        any::<f64>(),
        any::<u64>(),
        any::<u64>(),
        any::<f64>(),
        (any_spans(), any_spans()),
        (
            prop::collection::vec(any::<i64>(), 0..6),
            prop::collection::vec(any::<i64>(), 0..6),
        ),
        prop::collection::vec(any::<f64>(), 0..4),
    )
        .prop_map(|(hint, schema, zt, zc, count, sum, spans, buckets, custom)| Histogram {
            counter_reset_hint: hint,
            schema,
            zero_threshold: zt,
            zero_count: zc,
            count,
            sum,
            positive_spans: spans.0,
            negative_spans: spans.1,
            positive_buckets: buckets.0,
            negative_buckets: buckets.1,
            custom_values: if is_custom_buckets_schema(schema) {
                custom
            } else {
                Vec::new()
            },
        })
}

fn any_samples() -> impl Strategy<Value = Vec<RefHistogramSample>> {
    prop::collection::vec(
        (any::<u64>(), any::<i64>(), any_histogram()).prop_map(|(series_ref, t, h)| RefHistogramSample {
            series_ref,
            t,
            h,
        }),
        0..6,
    )
}

fn floats(samples: &[RefHistogramSample]) -> Vec<RefFloatHistogramSample> {
    samples
        .iter()
        .map(|s| RefFloatHistogramSample {
            series_ref: s.series_ref,
            t: s.t,
            h: FloatHistogram {
                counter_reset_hint: s.h.counter_reset_hint,
                schema: s.h.schema,
                zero_threshold: s.h.zero_threshold,
                zero_count: s.h.zero_count as f64,
                count: s.h.count as f64,
                sum: s.h.sum,
                positive_spans: s.h.positive_spans.clone(),
                negative_spans: s.h.negative_spans.clone(),
                positive_buckets: s.h.positive_buckets.iter().map(|&b| b as f64).collect(),
                negative_buckets: s.h.negative_buckets.iter().map(|&b| b as f64).collect(),
                custom_values: s.h.custom_values.clone(),
            },
        })
        .collect()
}

#[test]
fn a_hand_built_record_has_prometheus_layout() {
    let h = Histogram {
        counter_reset_hint: CounterResetHint::NotCounterReset,
        schema: -1,
        zero_threshold: 0.5,
        zero_count: 2,
        count: 5,
        sum: 1.5,
        positive_spans: vec![Span { offset: -2, length: 2 }],
        negative_spans: vec![],
        positive_buckets: vec![1, -1],
        negative_buckets: vec![],
        custom_values: vec![],
    };
    let mut out = Vec::new();
    encode_histograms(
        &[RefHistogramSample {
            series_ref: 7,
            t: 1000,
            h: h.clone(),
        }],
        &mut out,
    );
    let mut want = vec![TYPE_HISTOGRAM_SAMPLES];
    want.extend(7u64.to_be_bytes());
    want.extend(1000i64.to_be_bytes());
    want.extend([0, 0]); // ref and time deltas
    want.push(2); // not a counter reset
    want.push(1); // schema -1, zigzag
    want.extend(0.5f64.to_bits().to_be_bytes());
    want.extend([2, 5]);
    want.extend(1.5f64.to_bits().to_be_bytes());
    want.extend([1, 3, 2]); // one positive span: offset -2 (zigzag 3), length 2
    want.push(0); // no negative span
    want.extend([2, 2, 1]); // two positive buckets: 1, -1 (zigzag)
    want.push(0); // no negative bucket
    assert_eq!(out, vec![want]);
    let Ok(Record::Histograms(got)) = decode(&out[0]) else {
        panic!("{:?}", decode(&out[0]))
    };
    assert_eq!(
        got,
        vec![RefHistogramSample {
            series_ref: 7,
            t: 1000,
            h
        }]
    );
}

#[test]
fn custom_bucket_histograms_get_their_own_record_type() {
    let exponential = Histogram::default();
    let custom = Histogram {
        schema: -53,
        custom_values: vec![0.1, 1.0],
        positive_spans: vec![Span { offset: 0, length: 3 }],
        positive_buckets: vec![1, 0, 0],
        count: 3,
        ..Histogram::default()
    };
    let samples: Vec<RefHistogramSample> = [exponential, custom.clone(), custom]
        .into_iter()
        .enumerate()
        .map(|(i, h)| RefHistogramSample {
            series_ref: i as u64,
            t: 5,
            h,
        })
        .collect();
    let mut out = Vec::new();
    encode_histograms(&samples, &mut out);
    let types: Vec<u8> = out.iter().map(|r| r[0]).collect();
    assert_eq!(types, [TYPE_HISTOGRAM_SAMPLES, TYPE_CUSTOM_BUCKETS_HISTOGRAM_SAMPLES]);
    let Ok(Record::Histograms(got)) = decode(&out[1]) else {
        panic!()
    };
    assert_eq!(got, samples[1..]);
    let mut float_out = Vec::new();
    encode_float_histograms(&floats(&samples), &mut float_out);
    let types: Vec<u8> = float_out.iter().map(|r| r[0]).collect();
    assert_eq!(
        types,
        [
            TYPE_FLOAT_HISTOGRAM_SAMPLES,
            TYPE_CUSTOM_BUCKETS_FLOAT_HISTOGRAM_SAMPLES
        ]
    );
}

#[test]
fn an_impossible_hint_or_a_huge_count_is_an_error_not_a_panic_or_an_allocation() {
    let mut out = Vec::new();
    encode_histograms(
        &[RefHistogramSample {
            series_ref: 1,
            t: 1,
            h: Histogram::default(),
        }],
        &mut out,
    );
    let mut bad_hint = out[0].clone();
    bad_hint[19] = 9;
    assert!(
        matches!(decode(&bad_hint), Err(RecordError::InvalidHistogram { .. })),
        "{:?}",
        decode(&bad_hint)
    );
    // The positive span count made 2^62: refused by the bytes left, not reserved.
    let mut huge = out[0].clone();
    let spans_at = 19 + 1 + 1 + 8 + 1 + 1 + 8;
    huge.splice(
        spans_at..spans_at + 1,
        [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x3f],
    );
    assert!(
        matches!(decode(&huge), Err(RecordError::Truncated { .. })),
        "{:?}",
        decode(&huge)
    );
}

proptest! {
    /// Any samples encode to records that decode to them and encode again to the same bytes.
    #[test]
    fn records_round_trip(samples in any_samples()) {
        let mut out = Vec::new();
        encode_histograms(&samples, &mut out);
        let mut back = Vec::new();
        for r in &out {
            let Ok(Record::Histograms(got)) = decode(r) else { panic!("{:?}", decode(r)) };
            back.extend(got);
        }
        prop_assert_eq!(back.len(), samples.len());
        let mut again = Vec::new();
        encode_histograms(&back, &mut again);
        // Compared as bytes, so NaN fields compare by their patterns.
        prop_assert_eq!(&out, &again);

        let floats = floats(&samples);
        let mut out = Vec::new();
        encode_float_histograms(&floats, &mut out);
        let mut back = Vec::new();
        for r in &out {
            let Ok(Record::FloatHistograms(got)) = decode(r) else { panic!("{:?}", decode(r)) };
            back.extend(got);
        }
        let mut again = Vec::new();
        encode_float_histograms(&back, &mut again);
        // Compared as bytes, so NaN fields compare by their patterns.
        prop_assert_eq!(&out, &again);
    }

    /// Cut or flipped records decode or fail; they never panic.
    #[test]
    fn mutated_records_never_panic(samples in any_samples(), flips in prop::collection::vec(any::<u32>(), 1..6), cut in any::<u16>()) {
        let mut out = Vec::new();
        encode_histograms(&samples, &mut out);
        encode_float_histograms(&floats(&samples), &mut out);
        for mut r in out {
            for &f in &flips {
                let i = f as usize % r.len();
                r[i] ^= 1 << (f % 8);
            }
            let _ = decode(&r);
            r.truncate(cut as usize % (r.len() + 1));
            let _ = decode(&r);
        }
    }
}
