//! OTLP exponential histograms to native histograms with integer counts, as Prometheus' translator does
//! (`exponentialToNativeHistogram` and `convertBucketsLayout` in `otlptranslator`).
//!
//! - The scale is the schema. Below -4 there is no schema: the point is refused. Above 8, groups of
//!   2^(scale - 8) neighbouring buckets are merged into one of schema 8.
//! - OTLP's bucket `i` covers (base^i, base^(i+1)], Prometheus' (base^(i-1), base^i]: every index moves up by
//!   one (after merging, as `(i >> scale_down) + 1`).
//! - Dense OTLP buckets become spans and deltas by client_golang's rule: a run of more than two empty
//!   buckets starts a new span, shorter runs are kept as empty buckets.
//! - The zero bucket's threshold is Prometheus' default (1e-128), as its translator sets it whatever the point
//!   says; the zero count, count and sum are the point's. A point flagged `NoRecordedValue` is the staleness
//!   marker (sum and count the stale NaN's bits).
//! - The counter reset hint is left unknown: the head finds resets by comparing samples.

use super::{PointContext, Translated, exemplar, millis, point_labels, stale};
use heddle_model::STALE_NAN_BITS;
use heddle_proto::prometheus::{BucketSpan, Histogram, TimeSeries, histogram};
use opentelemetry_proto::tonic::metrics::v1::ExponentialHistogramDataPoint;
use opentelemetry_proto::tonic::metrics::v1::exponential_histogram_data_point::Buckets;

/// Lowest and highest exponential schemas of native histograms.
const SCHEMA_MIN: i32 = -4;
const SCHEMA_MAX: i32 = 8;
/// The zero threshold Prometheus' translator gives every converted histogram.
const ZERO_THRESHOLD: f64 = 1e-128;

/// Translates one exponential histogram point of the metric `otel_name` (Prometheus name `name`) into a
/// series of one native histogram sample, or refuses it.
pub(super) fn exponential_point(
    otel_name: &str,
    name: &str,
    p: &ExponentialHistogramDataPoint,
    ctx: PointContext<'_>,
    out: &mut Translated,
) {
    let Some(h) = native_histogram(p) else {
        out.refuse(
            1,
            format!(
                "metric {otel_name:?}: an exponential histogram point has scale {}, below native histograms' \
                 lowest schema {SCHEMA_MIN}; configure the sender's max scale or bucket count so that the scale \
                 stays at {SCHEMA_MIN} or above",
                p.scale
            ),
        );
        return;
    };
    let Some(labels) = point_labels(name, &p.attributes, ctx, out) else {
        return;
    };
    out.push(TimeSeries {
        labels,
        exemplars: p.exemplars.iter().map(exemplar).collect(),
        histograms: vec![h],
        ..TimeSeries::default()
    });
}

/// The native histogram of point `p`, or `None` when its scale is below [`SCHEMA_MIN`].
pub(super) fn native_histogram(p: &ExponentialHistogramDataPoint) -> Option<Histogram> {
    if p.scale < SCHEMA_MIN {
        return None;
    }
    let scale_down = (p.scale - SCHEMA_MAX).max(0);
    let layout = |b: &Option<Buckets>| match b {
        Some(b) => buckets_layout(&b.bucket_counts, b.offset, scale_down),
        None => (Vec::new(), Vec::new()),
    };
    let (positive_spans, positive_deltas) = layout(&p.positive);
    let (negative_spans, negative_deltas) = layout(&p.negative);
    let (sum, count) = if stale(p.flags) {
        (f64::from_bits(STALE_NAN_BITS), STALE_NAN_BITS)
    } else {
        (p.sum.unwrap_or(0.0), p.count)
    };
    Some(Histogram {
        count: Some(histogram::Count::CountInt(count)),
        sum,
        schema: p.scale.min(SCHEMA_MAX),
        zero_threshold: ZERO_THRESHOLD,
        zero_count: Some(histogram::ZeroCount::ZeroCountInt(p.zero_count)),
        negative_spans,
        negative_deltas,
        positive_spans,
        positive_deltas,
        reset_hint: histogram::ResetHint::Unknown.into(),
        timestamp: millis(p.time_unix_nano),
        ..Histogram::default()
    })
}

/// Dense OTLP buckets (`counts` from index `offset`) as Prometheus spans and delta-encoded counts, merging
/// groups of 2^`scale_down` buckets. Step for step Prometheus' `convertBucketsLayout`, so the result is what
/// Prometheus stores; indexes are computed in 64 bits (Go's `int32` arithmetic cannot overflow on the scales
/// OTLP allows) and stored as 32-bit span offsets.
fn buckets_layout(counts: &[u64], offset: i32, scale_down: i32) -> (Vec<BucketSpan>, Vec<i64>) {
    if counts.is_empty() {
        return (Vec::new(), Vec::new());
    }
    // Go saturates shifts of the width or more; Rust's `>>` needs the amount below 64.
    let shift = scale_down.clamp(0, 63) as u32;
    let index = |i: usize| ((i as i64 + i64::from(offset)) >> shift) + 1;
    let mut out = Layout {
        spans: vec![BucketSpan {
            offset: index(0) as i32,
            length: 0,
        }],
        deltas: Vec::with_capacity(counts.len()),
        prev: 0,
    };
    let (mut bucket, mut count) = (index(0), 0i64);
    for (i, &c) in counts.iter().enumerate() {
        let next = index(i);
        // OTLP counts are unsigned; Go converts them to int64 by reinterpreting the bits.
        let c = c as i64;
        if next == bucket {
            count = count.wrapping_add(c);
            continue;
        }
        // An empty (merged) bucket is not appended on its own: the next count is carried instead, and the
        // gap filling writes the empty bucket (or opens a span over it) when that count is appended.
        if count == 0 {
            count = c;
            continue;
        }
        out.bridge(next - bucket - 1);
        out.append(count);
        count = c;
        bucket = next;
    }
    out.bridge(index(counts.len() - 1) - bucket);
    out.append(count);
    (out.spans, out.deltas)
}

/// Spans and deltas being built.
struct Layout {
    spans: Vec<BucketSpan>,
    deltas: Vec<i64>,
    /// The last bucket's count, which the next delta is taken from.
    prev: i64,
}

impl Layout {
    fn append(&mut self, count: i64) {
        if let Some(last) = self.spans.last_mut() {
            last.length += 1;
        }
        self.deltas.push(count.wrapping_sub(self.prev));
        self.prev = count;
    }

    /// Skips `gap` buckets: a new span over more than two (client_golang's rule), empty buckets otherwise.
    fn bridge(&mut self, gap: i64) {
        if gap > 2 {
            self.spans.push(BucketSpan {
                offset: gap as i32,
                length: 0,
            });
        } else {
            for _ in 0..gap.max(0) {
                self.append(0);
            }
        }
    }
}

#[cfg(test)]
mod tests;
