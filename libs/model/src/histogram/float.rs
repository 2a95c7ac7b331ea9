//! Native histograms with float counts.

use super::buckets::{self, BucketIter};
use super::{CounterResetHint, HistogramError, Span, check_reduce, validate_layout};

/// A native histogram with absolute float counts: the result of rules and queries, and what float histogram
/// chunks store.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FloatHistogram {
    pub counter_reset_hint: CounterResetHint,
    pub schema: i32,
    /// Observations with absolute value at most this go to the zero bucket.
    pub zero_threshold: f64,
    pub zero_count: f64,
    pub count: f64,
    pub sum: f64,
    pub positive_spans: Vec<Span>,
    pub negative_spans: Vec<Span>,
    pub positive_buckets: Vec<f64>,
    pub negative_buckets: Vec<f64>,
    /// Upper bounds of the buckets of a custom-bucket histogram (schema -53); empty otherwise.
    pub custom_values: Vec<f64>,
}

impl FloatHistogram {
    /// Checks Prometheus' invariants (`FloatHistogram.Validate`): a known schema, spans matching bucket counts,
    /// span offsets after the first not negative, no negative bucket count. Unlike integer histograms the count
    /// is not compared with the buckets' sum: float rounding would make that fail on valid data.
    pub fn validate(&self) -> Result<(), HistogramError> {
        validate_layout(
            self.schema,
            self.zero_threshold,
            self.zero_count != 0.0,
            &self.positive_spans,
            self.positive_buckets.len(),
            &self.negative_spans,
            self.negative_buckets.len(),
            &self.custom_values,
        )?;
        for (side, counts) in [
            ("positive", &self.positive_buckets),
            ("negative", &self.negative_buckets),
        ] {
            if let Some((bucket, count)) = counts.iter().enumerate().find(|(_, c)| **c < 0.0) {
                return Err(HistogramError::NegativeBucketCount {
                    side,
                    bucket,
                    count: *count,
                });
            }
        }
        Ok(())
    }

    /// Removes empty buckets and joins spans; see [`super::Histogram::compact`].
    pub fn compact(&mut self, max_empty_buckets: u32) {
        (self.positive_spans, self.positive_buckets) =
            buckets::compact(&self.positive_spans, &self.positive_buckets, max_empty_buckets);
        (self.negative_spans, self.negative_buckets) =
            buckets::compact(&self.negative_spans, &self.negative_buckets, max_empty_buckets);
    }

    /// Lowers the resolution to `target`; see [`super::Histogram::reduce_resolution`].
    pub fn reduce_resolution(&mut self, target: i32) -> Result<(), HistogramError> {
        check_reduce(self.schema, target)?;
        (self.positive_spans, self.positive_buckets) =
            buckets::reduce(&self.positive_spans, &self.positive_buckets, self.schema, target);
        (self.negative_spans, self.negative_buckets) =
            buckets::reduce(&self.negative_spans, &self.negative_buckets, self.schema, target);
        self.schema = target;
        Ok(())
    }

    /// The positive buckets (of custom-bucket histograms: all buckets), lowest first, with their bounds.
    pub fn positive_bucket_iter(&self) -> BucketIter<'_, f64> {
        BucketIter::new(
            self.schema,
            &self.custom_values,
            &self.positive_spans,
            self.positive_buckets.clone(),
            true,
        )
    }

    /// The negative buckets, closest to zero first, with their (negative) bounds.
    pub fn negative_bucket_iter(&self) -> BucketIter<'_, f64> {
        BucketIter::new(
            self.schema,
            &self.custom_values,
            &self.negative_spans,
            self.negative_buckets.clone(),
            false,
        )
    }
}
