use super::buckets::{exponential_bound, indices};
use super::*;
use proptest::prelude::*;

fn spans(s: &[(i32, u32)]) -> Vec<Span> {
    s.iter().map(|(o, l)| Span::new(*o, *l)).collect()
}

/// The example of Prometheus' docs: schema 0, buckets at indices 0, 1, 3, 4 and -1, -2.
fn example() -> Histogram {
    Histogram {
        schema: 0,
        zero_threshold: 0.001,
        zero_count: 2,
        count: 18,
        sum: 42.5,
        positive_spans: spans(&[(0, 2), (1, 2)]),
        positive_buckets: vec![1, 2, -1, 3], // 1 3 2 5
        negative_spans: spans(&[(-2, 2)]),
        negative_buckets: vec![2, 1], // 2 3
        ..Default::default()
    }
}

/// A named invalid histogram and a check of the error it must fail with.
type InvalidCase = (&'static str, Histogram, fn(&HistogramError) -> bool);

#[test]
fn validation() {
    example().validate().expect("example is valid");
    let cases: Vec<InvalidCase> = vec![
        ("schema 9", Histogram { schema: 9, ..example() }, |e| {
            matches!(e, HistogramError::InvalidSchema(9))
        }),
        (
            "schema -5",
            Histogram {
                schema: -5,
                ..example()
            },
            |e| matches!(e, HistogramError::InvalidSchema(-5)),
        ),
        (
            "spans describe 5 buckets",
            Histogram {
                positive_spans: spans(&[(0, 3), (1, 2)]),
                ..example()
            },
            |e| {
                matches!(
                    e,
                    HistogramError::SpansBucketsMismatch {
                        side: "positive",
                        spans: 5,
                        buckets: 4
                    }
                )
            },
        ),
        (
            "negative offset after the first span",
            Histogram {
                positive_spans: spans(&[(0, 2), (-1, 2)]),
                ..example()
            },
            |e| {
                matches!(
                    e,
                    HistogramError::NegativeSpanOffset {
                        span: 1,
                        offset: -1,
                        ..
                    }
                )
            },
        ),
        (
            "negative bucket",
            Histogram {
                negative_buckets: vec![2, -3],
                count: 16,
                ..example()
            },
            |e| {
                matches!(
                    e,
                    HistogramError::NegativeBucketCount {
                        side: "negative",
                        bucket: 1,
                        ..
                    }
                )
            },
        ),
        ("count too big", Histogram { count: 19, ..example() }, |e| {
            matches!(
                e,
                HistogramError::CountMismatch {
                    in_buckets: 18,
                    count: 19
                }
            )
        }),
        (
            "count too small with NaN sum",
            Histogram {
                count: 17,
                sum: f64::NAN,
                ..example()
            },
            |e| {
                matches!(
                    e,
                    HistogramError::CountMismatch {
                        in_buckets: 18,
                        count: 17
                    }
                )
            },
        ),
        (
            "exponential with custom bounds",
            Histogram {
                custom_values: vec![1.0],
                ..example()
            },
            |e| matches!(e, HistogramError::ExponentialWithCustomBounds),
        ),
    ];
    for (name, h, want) in cases {
        let err = h.validate().expect_err(name);
        assert!(want(&err), "{name}: got {err:?}");
    }
    let nan_sum = Histogram {
        count: 25,
        sum: f64::NAN,
        ..example()
    };
    nan_sum
        .validate()
        .expect("a NaN sum allows observations outside the buckets");
}

fn custom() -> Histogram {
    Histogram {
        schema: CUSTOM_BUCKETS_SCHEMA,
        count: 7,
        sum: 10.0,
        positive_spans: spans(&[(0, 1), (1, 2)]),
        positive_buckets: vec![1, 2, 0], // indices 0, 2, 3: (-Inf, 0.5], (2, 10], (10, +Inf]
        custom_values: vec![0.5, 2.0, 10.0],
        ..Default::default()
    }
}

#[test]
fn custom_bucket_validation() {
    custom().validate().expect("custom is valid");
    let cases = [
        (
            "zero count",
            Histogram {
                zero_count: 1,
                count: 8,
                ..custom()
            },
        ),
        (
            "zero threshold",
            Histogram {
                zero_threshold: 0.1,
                ..custom()
            },
        ),
        (
            "negative buckets",
            Histogram {
                negative_spans: spans(&[(0, 1)]),
                negative_buckets: vec![1],
                count: 8,
                ..custom()
            },
        ),
        (
            "bounds not increasing",
            Histogram {
                custom_values: vec![0.5, 0.5, 10.0],
                ..custom()
            },
        ),
        (
            "infinite last bound",
            Histogram {
                custom_values: vec![0.5, 2.0, f64::INFINITY],
                ..custom()
            },
        ),
        (
            "bucket beyond +Inf",
            Histogram {
                positive_spans: spans(&[(0, 1), (2, 2)]),
                ..custom()
            },
        ),
    ];
    for (name, h) in cases {
        assert!(h.validate().is_err(), "{name}: accepted");
    }
}

#[test]
fn to_float_makes_counts_absolute() {
    let f = example().to_float();
    assert_eq!(f.positive_buckets, vec![1.0, 3.0, 2.0, 5.0]);
    assert_eq!(f.negative_buckets, vec![2.0, 3.0]);
    assert_eq!((f.count, f.zero_count, f.sum), (18.0, 2.0, 42.5));
    assert_eq!(f.positive_spans, example().positive_spans);
    f.validate().expect("float is valid");
}

#[test]
fn compaction_cases() {
    // Indices -2..=0 then 2..=6 with counts 0 1 0 | 0 4 0 0 7.
    let cases = [
        ("no empty kept", 0, spans(&[(-1, 1), (3, 1), (2, 1)]), vec![1, 4, 7]),
        ("gaps of 1 filled", 1, spans(&[(-1, 1), (3, 1), (2, 1)]), vec![1, 4, 7]),
        ("gaps of 2 filled", 2, spans(&[(-1, 1), (3, 4)]), vec![1, 4, 0, 0, 7]),
        ("gaps of 3 filled", 3, spans(&[(-1, 8)]), vec![1, 0, 0, 0, 4, 0, 0, 7]),
    ];
    for (name, max_empty, want_spans, want_counts) in cases {
        let mut h = Histogram {
            positive_spans: spans(&[(-2, 3), (1, 5)]),
            positive_buckets: deltas_from_absolute(&[0, 1, 0, 0, 4, 0, 0, 7]),
            count: 12,
            ..Default::default()
        };
        h.compact(max_empty);
        assert_eq!(h.positive_spans, want_spans, "{name}: spans");
        assert_eq!(h.positive_counts(), want_counts, "{name}: counts");
        h.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let mut empty = Histogram {
        positive_spans: spans(&[(3, 2)]),
        positive_buckets: vec![0, 0],
        ..Default::default()
    };
    empty.compact(0);
    assert!(empty.positive_spans.is_empty() && empty.positive_buckets.is_empty());
}

#[test]
fn resolution_reduction_merges_pairs() {
    let mut h = Histogram {
        schema: 1,
        count: 10,
        positive_spans: spans(&[(1, 4)]),
        positive_buckets: deltas_from_absolute(&[1, 2, 3, 4]),
        negative_spans: spans(&[(-1, 2)]), // indices -1 and 0 both merge into 0
        negative_buckets: deltas_from_absolute(&[5, 6]),
        ..Default::default()
    };
    h.count += 11;
    h.reduce_resolution(0).unwrap();
    assert_eq!(h.schema, 0);
    assert_eq!(
        (h.positive_spans.clone(), h.positive_counts()),
        (spans(&[(1, 2)]), vec![3, 7])
    );
    assert_eq!(
        (h.negative_spans.clone(), h.negative_counts()),
        (spans(&[(0, 1)]), vec![11])
    );
    h.validate().unwrap();
    assert!(h.reduce_resolution(1).is_err(), "raising the schema");
    assert!(custom().reduce_resolution(0).is_err(), "custom buckets");
}

#[test]
fn bucket_bounds() {
    let b: Vec<_> = example()
        .positive_bucket_iter()
        .map(|b| (b.lower, b.upper, b.count, b.index))
        .collect();
    assert_eq!(
        b,
        vec![(0.5, 1.0, 1, 0), (1.0, 2.0, 3, 1), (4.0, 8.0, 2, 3), (8.0, 16.0, 5, 4)]
    );
    let n: Vec<_> = example()
        .negative_bucket_iter()
        .map(|b| (b.lower, b.upper, b.lower_inclusive))
        .collect();
    assert_eq!(n, vec![(-0.25, -0.125, true), (-0.5, -0.25, true)]);
    let c: Vec<_> = custom()
        .positive_bucket_iter()
        .map(|b| (b.lower, b.upper, b.count))
        .collect();
    assert_eq!(
        c,
        vec![(f64::NEG_INFINITY, 0.5, 1), (2.0, 10.0, 3), (10.0, f64::INFINITY, 3)]
    );
    assert_eq!(exponential_bound(1, -2), 16.0);
    // Prometheus' table, not 2^(1/2) rounded in f64 (one ulp above).
    assert_eq!(exponential_bound(1, 1), 2.0 * 0.7071067811865475);
    assert_eq!(exponential_bound(-1, 3), 0.9170040432046711);
    assert_eq!(exponential_bound(9, 3), 4.0 * 0.5452538663326288);
    // Every schema's fractions are every 2^(8 - schema)-th of schema 8's, and increase.
    for schema in 0..=8 {
        let n = 1i64 << schema;
        let fracs: Vec<f64> = (0..n).map(|i| exponential_bound(i - n, schema)).collect();
        assert!(fracs.windows(2).all(|w| w[0] < w[1]), "schema {schema}");
        assert!(fracs.iter().all(|f| (0.5..1.0).contains(f)), "schema {schema}");
    }
    assert_eq!(exponential_bound(1024, 0), f64::MAX, "the bucket below +Inf's");
    assert_eq!(exponential_bound(256, -2), f64::MAX);
    assert_eq!(exponential_bound(i64::MAX, 8), f64::INFINITY);
}

fn arb_side() -> impl Strategy<Value = (Vec<Span>, Vec<i64>)> {
    proptest::collection::vec((0i32..4, 1u32..4), 0..6).prop_flat_map(|raw| {
        let mut s: Vec<Span> = raw.iter().map(|(o, l)| Span::new(*o, *l)).collect();
        if let Some(first) = s.first_mut() {
            first.offset -= 3;
        }
        let n: u32 = s.iter().map(|s| s.length).sum();
        (
            Just(s),
            proptest::collection::vec(prop_oneof![Just(0i64), 0i64..20], n as usize),
        )
    })
}

proptest! {
    #[test]
    fn compaction_keeps_every_observation((sp, counts) in arb_side(), max_empty in 0u32..4) {
        let total: i64 = counts.iter().sum();
        let mut h = Histogram {
            positive_spans: sp.clone(),
            positive_buckets: deltas_from_absolute(&counts),
            count: total as u64,
            ..Default::default()
        };
        h.validate().unwrap();
        let before: Vec<(i64, i64)> = indices(&sp).zip(counts.iter().copied()).filter(|(_, c)| *c != 0).collect();
        h.compact(max_empty);
        h.validate().unwrap();
        let after: Vec<(i64, i64)> =
            indices(&h.positive_spans).zip(h.positive_counts()).filter(|(_, c)| *c != 0).collect();
        prop_assert_eq!(&before, &after);
        let counts = h.positive_counts();
        let mut at = 0;
        for (i, s) in h.positive_spans.iter().enumerate() {
            prop_assert!(s.length > 0);
            prop_assert!(counts[at] != 0 && counts[at + s.length as usize - 1] != 0, "empty bucket at a span edge");
            if i > 0 {
                prop_assert!(s.offset > max_empty as i32, "spans {} apart should have merged", s.offset);
            }
            at += s.length as usize;
        }
        let again = { let mut g = h.clone(); g.compact(max_empty); g };
        prop_assert_eq!(again, h);
    }

    #[test]
    fn reduction_keeps_counts_inside_bounds((sp, counts) in arb_side(), from in -2i32..=8, down in 0i32..4) {
        let to = (from - down).max(EXPONENTIAL_SCHEMA_MIN);
        let total: i64 = counts.iter().sum();
        let mut h = Histogram {
            schema: from,
            positive_spans: sp.clone(),
            positive_buckets: deltas_from_absolute(&counts),
            count: total as u64,
            ..Default::default()
        };
        h.reduce_resolution(to).unwrap();
        h.validate().unwrap();
        prop_assert_eq!(h.positive_counts().iter().sum::<i64>(), total);
        let reduced: Vec<i64> = indices(&h.positive_spans).collect();
        for idx in indices(&sp) {
            let t = super::buckets::reduced_index(idx, from, to);
            prop_assert!(reduced.contains(&t));
            prop_assert!(exponential_bound(t - 1, to) <= exponential_bound(idx - 1, from));
            prop_assert!(exponential_bound(idx, from) <= exponential_bound(t, to));
        }
        let mut f = Histogram { schema: from, positive_spans: sp, positive_buckets: deltas_from_absolute(&counts), ..Default::default() }.to_float();
        f.reduce_resolution(to).unwrap();
        prop_assert_eq!(f.positive_spans, h.positive_spans.clone());
    }
}

/// A float histogram of schema `schema` with positive buckets `(index, count)` and a zero bucket.
fn float_hist(schema: i32, zero: (f64, f64), positive: &[(i32, f64)]) -> FloatHistogram {
    let (positive_spans, positive_buckets) = buckets::from_indexed(positive.iter().map(|&(i, c)| (i64::from(i), c)), 0);
    FloatHistogram {
        schema,
        zero_threshold: zero.0,
        zero_count: zero.1,
        count: zero.1 + positive.iter().map(|p| p.1).sum::<f64>(),
        sum: 10.0,
        positive_spans,
        positive_buckets,
        ..Default::default()
    }
}

/// `(index, count)` of the non-empty positive buckets.
fn positive(h: &FloatHistogram) -> Vec<(i32, f64)> {
    h.positive_bucket_iter().map(|b| (b.index, b.count)).collect()
}

#[test]
fn float_addition_reduces_to_the_lower_schema_and_widens_the_zero_bucket() {
    // Schema 1 buckets 1 and 2 ((1, √2], (√2, 2]) are schema 0's bucket 1; 3 ((2, 2√2]) is in schema 0's 2.
    let fine = float_hist(1, (0.0, 0.0), &[(1, 1.0), (2, 2.0), (3, 4.0)]);
    let coarse = float_hist(0, (0.0, 0.0), &[(1, 8.0), (3, 16.0)]);
    let sum = fine.add(&coarse).unwrap();
    assert_eq!(sum.schema, 0);
    assert_eq!(positive(&sum), vec![(1, 11.0), (2, 4.0), (3, 16.0)]);
    assert_eq!((sum.count, sum.sum), (31.0, 20.0));
    let diff = coarse.sub(&fine).unwrap();
    assert_eq!(positive(&diff), vec![(1, 5.0), (2, -4.0), (3, 16.0)]);
    assert_eq!(diff.count, 17.0);

    // A zero bucket of 1.5 cuts (1, 2]: it takes that bucket and ends at 2.
    let wide = float_hist(0, (1.5, 1.0), &[(3, 1.0)]);
    let sum = coarse.add(&wide).unwrap();
    assert_eq!((sum.zero_threshold, sum.zero_count), (2.0, 9.0));
    assert_eq!(positive(&sum), vec![(3, 17.0)]);

    let custom = FloatHistogram {
        schema: CUSTOM_BUCKETS_SCHEMA,
        custom_values: vec![1.0],
        ..Default::default()
    };
    assert!(custom.add(&coarse).is_err(), "exponential and custom buckets");
    let other_bounds = FloatHistogram {
        custom_values: vec![2.0],
        ..custom.clone()
    };
    assert!(custom.add(&other_bounds).is_err(), "other custom bounds");
    assert!(custom.add(&custom).is_ok());
}

#[test]
fn float_scaling_multiplies_and_divides_every_count() {
    let mut h = float_hist(0, (0.1, 1.0), &[(1, 2.0)]);
    h.mul(3.0);
    assert_eq!(
        (h.zero_count, h.count, h.sum, h.positive_buckets.clone()),
        (3.0, 9.0, 30.0, vec![6.0])
    );
    h.div(3.0);
    assert_eq!(
        (h.zero_count, h.count, h.sum, h.positive_buckets.clone()),
        (1.0, 3.0, 10.0, vec![2.0])
    );
    h.div(0.0);
    assert_eq!(h.count, f64::INFINITY);
}

#[test]
fn counter_resets_are_detected_as_prometheus_does() {
    let base = float_hist(1, (0.01, 1.0), &[(1, 1.0), (2, 2.0)]);
    let cases: Vec<(&str, FloatHistogram, bool)> = vec![
        ("same", base.clone(), false),
        (
            "a bucket grew",
            float_hist(1, (0.01, 1.0), &[(1, 1.0), (2, 3.0)]),
            false,
        ),
        (
            "a new bucket",
            float_hist(1, (0.01, 1.0), &[(1, 1.0), (2, 2.0), (5, 1.0)]),
            false,
        ),
        (
            "a bucket shrank",
            float_hist(1, (0.01, 1.0), &[(1, 0.0), (2, 4.0)]),
            true,
        ),
        ("a bucket vanished", float_hist(1, (0.01, 1.0), &[(2, 9.0)]), true),
        (
            "zero bucket shrank",
            float_hist(1, (0.01, 0.0), &[(1, 2.0), (2, 2.0)]),
            true,
        ),
        (
            "zero threshold shrank",
            float_hist(1, (0.001, 1.0), &[(1, 1.0), (2, 2.0)]),
            true,
        ),
        (
            "resolution rose",
            float_hist(2, (0.01, 1.0), &[(2, 1.0), (4, 2.0)]),
            true,
        ),
        // Schema 0's bucket 1 holds schema 1's buckets 1 and 2 (3 observations).
        ("resolution fell", float_hist(0, (0.01, 1.0), &[(1, 3.0)]), false),
        ("resolution fell, fewer", float_hist(0, (0.01, 1.0), &[(1, 2.0)]), true),
    ];
    for (name, h, want) in cases {
        assert_eq!(h.detect_reset(&base), want, "case {name}");
    }
    let hinted = |hint| FloatHistogram {
        counter_reset_hint: hint,
        ..base.clone()
    };
    assert!(hinted(CounterResetHint::CounterReset).detect_reset(&base));
    let shrunk = float_hist(1, (0.01, 0.0), &[]);
    assert!(
        !FloatHistogram {
            counter_reset_hint: CounterResetHint::Gauge,
            ..shrunk.clone()
        }
        .detect_reset(&base)
    );
    assert!(
        !FloatHistogram {
            counter_reset_hint: CounterResetHint::NotCounterReset,
            ..shrunk
        }
        .detect_reset(&base)
    );
}

#[test]
fn all_buckets_run_from_the_lowest_negative_to_the_highest_positive() {
    let h = FloatHistogram {
        negative_spans: spans(&[(1, 2)]),
        negative_buckets: vec![1.0, 2.0],
        ..float_hist(0, (0.5, 3.0), &[(1, 4.0)])
    };
    let got: Vec<(f64, f64, f64)> = h.all_buckets().iter().map(|b| (b.lower, b.upper, b.count)).collect();
    assert_eq!(
        got,
        vec![(-4.0, -2.0, 2.0), (-2.0, -1.0, 1.0), (-0.5, 0.5, 3.0), (1.0, 2.0, 4.0)]
    );
    assert_eq!(h.size_bytes(), 168 + 8 * 5);
}

/// Spans of any shape (offsets that go backwards, empty spans) and bucket values of any number, so that the
/// spans may describe more or fewer buckets than there are: what resolution reduction meets before validation.
fn arb_any_side() -> impl Strategy<Value = (Vec<Span>, Vec<i64>)> {
    (
        proptest::collection::vec((-6i32..6, 0u32..5), 0..8),
        proptest::collection::vec(-3i64..8, 0..30),
    )
        .prop_map(|(raw, values)| (raw.iter().map(|(o, l)| Span::new(*o, *l)).collect(), values))
}

proptest! {
    /// In-place reduction gives what merging into new vectors gives, for deltas and absolute counts alike,
    /// whatever the spans.
    #[test]
    fn in_place_reduction_matches_the_reference((sp, values) in arb_any_side(), from in -4i32..=12, down in 0i32..6) {
        let to = (from - down).max(EXPONENTIAL_SCHEMA_MIN);
        let absolute: Vec<i64> = absolute_from_deltas(&values).collect();
        let (want_spans, want_counts) = buckets::reduce(&sp, &absolute, from, to);
        let (mut spans, mut deltas) = (sp.clone(), values.clone());
        buckets::reduce_in_place(&mut spans, &mut deltas, from, to, buckets::Stored::Deltas);
        prop_assert_eq!(&spans, &want_spans);
        prop_assert_eq!(absolute_from_deltas(&deltas).collect::<Vec<_>>(), want_counts.clone());

        let floats: Vec<f64> = values.iter().map(|v| *v as f64).collect();
        let (want_spans, want_counts) = buckets::reduce(&sp, &floats, from, to);
        let (mut spans, mut counts) = (sp, floats);
        buckets::reduce_in_place(&mut spans, &mut counts, from, to, buckets::Stored::Absolute);
        prop_assert_eq!(spans, want_spans);
        prop_assert_eq!(counts, want_counts);
    }
}

#[test]
fn reduction_works_in_the_vectors_it_was_given() {
    let n = 10_000;
    let mut h = Histogram {
        schema: 8,
        count: n as u64,
        positive_spans: spans(&[(0, n as u32)]),
        positive_buckets: std::iter::once(1).chain(std::iter::repeat_n(0, n - 1)).collect(),
        ..Default::default()
    };
    let (spans_at, buckets_at, capacity) = (
        h.positive_spans.as_ptr(),
        h.positive_buckets.as_ptr(),
        h.positive_buckets.capacity(),
    );
    h.reduce_resolution(0).unwrap();
    assert_eq!(h.positive_spans.as_ptr(), spans_at);
    assert_eq!(
        (h.positive_buckets.as_ptr(), h.positive_buckets.capacity()),
        (buckets_at, capacity)
    );
    // Schema 8's indexes 0 to 9,999 become schema 0's ((i - 1) >> 8) + 1: 0 (index 0), then 1 to 40.
    assert_eq!(h.positive_spans, spans(&[(0, 41)]));
    assert_eq!(h.positive_counts().iter().sum::<i64>(), n as i64);
    h.validate().unwrap();
}

#[test]
fn size_counts_buckets_spans_and_bounds() {
    let size = example().size();
    assert_eq!(size, HistogramSize { buckets: 6, layout: 3 });
    assert!(!size.over_ceiling());
    let big = |buckets, layout| HistogramSize { buckets, layout }.over_ceiling();
    assert!(!big(MAX_BUCKETS_CEILING, MAX_BUCKETS_CEILING), "at the ceiling");
    assert!(big(MAX_BUCKETS_CEILING + 1, 0) && big(0, MAX_BUCKETS_CEILING + 1));
    assert_eq!(HistogramValue::Float(example().to_float()).size(), size);
    assert_eq!(size.to_string(), "6 buckets and 3 spans and custom bounds");
}
