//! Native histogram samples of a series: decoded out of the request, checked against Prometheus' rules and
//! fitted to the tenant's bucket limit, as Mimir's distributor does.
//!
//! A histogram that is kept unchanged is forwarded as the bytes it came as (remote write 1.0 and 2.0 encode
//! it alike); one whose resolution was lowered is re-encoded from its owned form.
//!
//! Memory: the decoder counted each histogram's buckets, spans and bounds, so a histogram is judged by its size
//! before it is decoded. One over the hard ceiling ([`MAX_BUCKETS_CEILING`]) is refused undecoded
//! (`err-heddle-native-histogram-too-large`), never reduced. What is decoded is what the request reserved
//! ([`HistogramRef::decoded_heap_bytes`], exact), and lowering the resolution works in place, so validation
//! allocates nothing beyond it.

use crate::error::InvalidSeries;
use heddle_limits::Limits;
use heddle_model::histogram::{
    EXPONENTIAL_SCHEMA_MAX, EXPONENTIAL_SCHEMA_MAX_RESERVED, EXPONENTIAL_SCHEMA_MIN, MAX_BUCKETS_CEILING,
    is_custom_buckets_schema,
};
use heddle_model::{HistogramError, HistogramSample, HistogramValue, error_id};
use heddle_proto::HistogramRef;

/// A histogram sample that passed validation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KeptHistogram<'a> {
    /// The encoded message as it came, when it is forwarded unchanged; `None` when it was changed (its
    /// resolution lowered) and must be re-encoded from `sample`.
    pub(crate) raw: Option<&'a [u8]>,
    pub(crate) sample: HistogramSample,
}

/// The most buckets a histogram of a tenant with `limits` may keep: its `max_native_histogram_buckets`, or
/// the ceiling when that is 0 (no limit of its own) or above it (`Limits::validate` refuses that, but a
/// value that got past is still held to the ceiling).
pub(crate) fn bucket_limit(limits: &Limits) -> usize {
    match limits.max_native_histogram_buckets {
        0 => MAX_BUCKETS_CEILING,
        n => n.min(MAX_BUCKETS_CEILING),
    }
}

/// Decodes and checks one histogram sample: its size against the ceiling first, undecoded; then a schema above 8 (up to 52, reserved for finer resolutions) is lowered to 8 as
/// Prometheus does on ingestion, Prometheus' rules are checked, and the tenant's bucket limit applied
/// (lowering the resolution one step at a time while it is over, when the tenant allows it).
pub(crate) fn check_histogram<'a>(h: &HistogramRef<'a>, limits: &Limits) -> Result<KeptHistogram<'a>, InvalidSeries> {
    let size = h.size();
    if size.over_ceiling() {
        return Err(InvalidSeries::HistogramTooLarge {
            size,
            ceiling: MAX_BUCKETS_CEILING,
            timestamp_ms: h.t,
        });
    }
    let limit = bucket_limit(limits);
    let too_many = |buckets, reduced| InvalidSeries::TooManyHistogramBuckets {
        buckets,
        limit,
        reduced,
        timestamp_ms: h.t,
    };
    let mut sample = h.decode().map_err(|e| InvalidSeries::InvalidHistogram {
        id: error_id::NATIVE_HISTOGRAM_INVALID,
        detail: e.to_string(),
        timestamp_ms: h.t,
    })?;
    let invalid = |e: HistogramError| InvalidSeries::InvalidHistogram {
        id: histogram_error_id(&e),
        detail: e.to_string(),
        timestamp_ms: h.t,
    };
    let mut changed = false;
    let schema = sample.value.schema();
    if (EXPONENTIAL_SCHEMA_MAX + 1..=EXPONENTIAL_SCHEMA_MAX_RESERVED).contains(&schema) {
        reduce(&mut sample.value, EXPONENTIAL_SCHEMA_MAX).map_err(invalid)?;
        changed = true;
    }
    sample.value.validate().map_err(invalid)?;
    if sample.value.bucket_count() > limit {
        if !limits.reduce_native_histogram_over_max_buckets {
            return Err(too_many(sample.value.bucket_count(), false));
        }
        while sample.value.bucket_count() > limit {
            let schema = sample.value.schema();
            if is_custom_buckets_schema(schema) || schema <= EXPONENTIAL_SCHEMA_MIN {
                return Err(too_many(sample.value.bucket_count(), true));
            }
            reduce(&mut sample.value, schema - 1).map_err(invalid)?;
        }
        changed = true;
    }
    Ok(KeptHistogram {
        raw: (!changed).then(|| h.raw()),
        sample,
    })
}

fn reduce(value: &mut HistogramValue, target: i32) -> Result<(), HistogramError> {
    match value {
        HistogramValue::Int(h) => h.reduce_resolution(target),
        HistogramValue::Float(h) => h.reduce_resolution(target),
    }
}

/// The error id of a broken rule, after Mimir's.
fn histogram_error_id(e: &HistogramError) -> &'static str {
    match e {
        HistogramError::InvalidSchema(_) => error_id::INVALID_NATIVE_HISTOGRAM_SCHEMA,
        HistogramError::CountMismatch { .. } => error_id::NATIVE_HISTOGRAM_COUNT_MISMATCH,
        HistogramError::NegativeBucketCount { .. } => error_id::NATIVE_HISTOGRAM_NEGATIVE_BUCKET_COUNT,
        HistogramError::NegativeSpanOffset { .. } => error_id::NATIVE_HISTOGRAM_SPAN_NEGATIVE_OFFSET,
        HistogramError::SpansBucketsMismatch { .. } => error_id::NATIVE_HISTOGRAM_SPANS_BUCKETS_MISMATCH,
        HistogramError::CountOverflow
        | HistogramError::CustomBuckets(_)
        | HistogramError::CustomBounds(_)
        | HistogramError::ExponentialWithCustomBounds
        | HistogramError::CannotReduce { .. } => error_id::NATIVE_HISTOGRAM_INVALID,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::histogram_body;
    use bumpalo::Bump;
    use heddle_proto::prometheus::{BucketSpan, Histogram, histogram};
    use prost::Message as _;

    /// Eight positive buckets of schema 1 at indexes 0 to 7, counts 1 to 8.
    fn eight_buckets() -> Histogram {
        Histogram {
            count: Some(histogram::Count::CountInt(36)),
            sum: 100.0,
            schema: 1,
            positive_spans: vec![BucketSpan { offset: 0, length: 8 }],
            positive_deltas: vec![1; 8],
            timestamp: 1000,
            ..Histogram::default()
        }
    }

    /// Decodes `h` as the distributor receives it and checks it against `limits`.
    fn check(h: Histogram, limits: &Limits) -> Result<(Option<usize>, HistogramSample), InvalidSeries> {
        let body = histogram_body(h);
        let arena = Bump::new();
        let req = heddle_proto::decode_write_request(&arena, &body).unwrap();
        check_histogram(&req.timeseries[0].histograms[0], limits).map(|k| (k.raw.map(<[u8]>::len), k.sample))
    }

    fn limit(buckets: usize, reduce: bool) -> Limits {
        Limits {
            max_native_histogram_buckets: buckets,
            reduce_native_histogram_over_max_buckets: reduce,
            ..Limits::default()
        }
    }

    #[test]
    fn a_histogram_under_the_limit_is_forwarded_as_it_came() {
        let h = eight_buckets();
        let len = h.encoded_len();
        let (raw, sample) = check(h, &limit(8, true)).unwrap();
        assert_eq!(raw, Some(len));
        assert_eq!(sample.value.bucket_count(), 8);
    }

    #[test]
    fn over_the_limit_the_resolution_is_lowered_until_it_fits() {
        // Bucket i of schema s lands in ((i - 1) >> (s - target)) + 1, so schema 1's indexes 0 to 7 become
        // schema 0's (0), (1 2), (3 4), (5 6), (7): 5 buckets, still over; then schema -1's (0), (1 to 4), (5 to 7).
        let (raw, sample) = check(eight_buckets(), &limit(4, true)).unwrap();
        assert_eq!(raw, None, "changed: re-encoded");
        let HistogramValue::Int(h) = sample.value else {
            panic!("integer histogram expected")
        };
        assert_eq!(h.schema, -1);
        assert_eq!(h.positive_counts(), [1, 2 + 3 + 4 + 5, 6 + 7 + 8]);
        assert_eq!(h.count, 36, "no observation lost");
        h.validate().unwrap();
    }

    #[test]
    fn over_the_limit_it_is_refused_when_reduction_is_off_or_cannot_fit() {
        let cases = [
            ("reduction off", limit(4, false), eight_buckets(), false),
            (
                "one bucket per side at the lowest schema is still two",
                limit(1, true),
                Histogram {
                    count: Some(histogram::Count::CountInt(2)),
                    schema: -4,
                    positive_spans: vec![BucketSpan { offset: 0, length: 1 }],
                    positive_deltas: vec![1],
                    negative_spans: vec![BucketSpan { offset: 0, length: 1 }],
                    negative_deltas: vec![1],
                    ..Histogram::default()
                },
                true,
            ),
            (
                "custom buckets cannot be merged",
                limit(1, true),
                Histogram {
                    count: Some(histogram::Count::CountInt(2)),
                    schema: -53,
                    positive_spans: vec![BucketSpan { offset: 0, length: 2 }],
                    positive_deltas: vec![1, 0],
                    custom_values: vec![1.0],
                    ..Histogram::default()
                },
                true,
            ),
        ];
        for (name, limits, h, want_reduced) in cases {
            match check(h, &limits) {
                Err(InvalidSeries::TooManyHistogramBuckets { limit, reduced, .. }) => {
                    assert_eq!(
                        (limit, reduced),
                        (limits.max_native_histogram_buckets, want_reduced),
                        "case {name}"
                    )
                }
                other => panic!("case {name}: {other:?}"),
            }
        }
    }

    /// Empty positive buckets at schema 8 from index 1, in one span.
    fn wide(buckets: usize) -> Histogram {
        Histogram {
            count: Some(histogram::Count::CountInt(0)),
            schema: 8,
            positive_spans: vec![BucketSpan {
                offset: 1,
                length: buckets as u32,
            }],
            positive_deltas: vec![0; buckets],
            timestamp: 1000,
            ..Histogram::default()
        }
    }

    #[test]
    fn over_the_ceiling_it_is_refused_undecoded_whatever_the_limit() {
        for (name, limits) in [
            ("no limit of its own", limit(0, true)),
            ("the ceiling as its limit", limit(MAX_BUCKETS_CEILING, true)),
            (
                "a limit above the ceiling that got past validation",
                limit(usize::MAX, true),
            ),
            ("the default limit", Limits::default()),
        ] {
            match check(wide(MAX_BUCKETS_CEILING + 1), &limits) {
                Err(e @ InvalidSeries::HistogramTooLarge { .. }) => {
                    assert_eq!(e.id(), error_id::NATIVE_HISTOGRAM_TOO_LARGE, "case {name}");
                    assert_eq!(
                        e.to_string(),
                        "native histogram sample at 1000 ms has 16385 buckets and 1 spans and custom bounds, more \
                         than 16384",
                        "case {name}"
                    );
                    assert!(e.remedy().contains("no limit raises"), "case {name}: {}", e.remedy());
                }
                other => panic!("case {name}: {other:?}"),
            }
        }
        // With no limit of its own, a tenant's histograms are held to the ceiling and kept as they came below it.
        let (raw, sample) = check(wide(MAX_BUCKETS_CEILING), &limit(0, true)).unwrap();
        assert!(raw.is_some(), "unchanged");
        assert_eq!(sample.value.bucket_count(), MAX_BUCKETS_CEILING);
        let h = wide(MAX_BUCKETS_CEILING);
        match check(h, &limit(0, false)) {
            Ok(_) => {}
            other => panic!("at the ceiling with reduction off: {other:?}"),
        }
        let err = check(wide(20_000), &limit(0, false)).unwrap_err();
        assert_eq!(
            err.id(),
            error_id::NATIVE_HISTOGRAM_TOO_LARGE,
            "the ceiling before the limit"
        );
    }

    #[test]
    fn by_default_a_histogram_is_reduced_to_160_buckets() {
        assert_eq!(bucket_limit(&Limits::default()), 160);
        // 1,000 buckets at schema 8 halve to 500, 250, then 125 at schema 5.
        let (raw, sample) = check(
            Histogram {
                count: Some(histogram::Count::CountInt(1000)),
                positive_deltas: std::iter::once(1).chain(std::iter::repeat_n(0, 999)).collect(),
                ..wide(1000)
            },
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(raw, None);
        assert_eq!((sample.value.schema(), sample.value.bucket_count()), (5, 125));
        sample.value.validate().unwrap();
        // Below the ceiling the remedy is to raise the limit; at the ceiling, it does not ask to raise what
        // cannot be raised.
        let err = check(
            Histogram {
                schema: -53,
                custom_values: (0..MAX_BUCKETS_CEILING - 1).map(|i| i as f64).collect(),
                positive_spans: vec![BucketSpan {
                    offset: 0,
                    length: MAX_BUCKETS_CEILING as u32,
                }],
                ..wide(MAX_BUCKETS_CEILING)
            },
            &limit(MAX_BUCKETS_CEILING - 1, true),
        )
        .unwrap_err();
        assert!(
            err.remedy().contains("raise `limits.max_native_histogram_buckets`"),
            "{}",
            err.remedy()
        );
        let err = InvalidSeries::TooManyHistogramBuckets {
            buckets: 2,
            limit: MAX_BUCKETS_CEILING,
            reduced: true,
            timestamp_ms: 0,
        };
        assert!(
            err.remedy().contains("the limit is the hard ceiling"),
            "{}",
            err.remedy()
        );
    }

    #[test]
    fn prometheus_rules_are_checked_with_their_error_ids() {
        let cases = [
            (
                "count mismatch",
                Histogram {
                    count: Some(histogram::Count::CountInt(35)),
                    ..eight_buckets()
                },
                error_id::NATIVE_HISTOGRAM_COUNT_MISMATCH,
                "36 observations found in buckets, but the count field is 35",
            ),
            (
                "spans describe more buckets",
                Histogram {
                    positive_spans: vec![BucketSpan { offset: 0, length: 9 }],
                    ..eight_buckets()
                },
                error_id::NATIVE_HISTOGRAM_SPANS_BUCKETS_MISMATCH,
                "positive side: spans describe 9 buckets, but there are 8",
            ),
            (
                "negative span offset",
                Histogram {
                    positive_spans: vec![
                        BucketSpan { offset: 0, length: 4 },
                        BucketSpan { offset: -1, length: 4 },
                    ],
                    ..eight_buckets()
                },
                error_id::NATIVE_HISTOGRAM_SPAN_NEGATIVE_OFFSET,
                "positive side: span 1 has negative offset -1",
            ),
            (
                "negative bucket",
                Histogram {
                    count: Some(histogram::Count::CountInt(0)),
                    positive_spans: vec![BucketSpan { offset: 0, length: 2 }],
                    positive_deltas: vec![1, -2],
                    ..eight_buckets()
                },
                error_id::NATIVE_HISTOGRAM_NEGATIVE_BUCKET_COUNT,
                "positive side: bucket 1 has negative count -1",
            ),
            (
                "schema",
                Histogram {
                    schema: -5,
                    ..eight_buckets()
                },
                error_id::INVALID_NATIVE_HISTOGRAM_SCHEMA,
                "invalid histogram schema -5",
            ),
        ];
        for (name, h, want_id, want_detail) in cases {
            match check(h, &Limits::default()) {
                Err(InvalidSeries::InvalidHistogram {
                    id,
                    detail,
                    timestamp_ms,
                }) => {
                    assert_eq!(
                        (id, detail.as_str(), timestamp_ms),
                        (want_id, want_detail, 1000),
                        "case {name}"
                    )
                }
                other => panic!("case {name}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_schema_above_8_is_lowered_to_8() {
        let (raw, sample) = check(
            Histogram {
                schema: 10,
                ..eight_buckets()
            },
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(raw, None);
        assert_eq!(sample.value.schema(), 8);
        // Schema 10's indexes 0 to 7 become schema 8's (0), (1 to 4), (5 to 7).
        let HistogramValue::Int(h) = sample.value else {
            panic!("integer histogram expected")
        };
        assert_eq!(h.positive_counts(), [1, 2 + 3 + 4 + 5, 6 + 7 + 8]);
    }
}
