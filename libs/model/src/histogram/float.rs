//! Native histograms with float counts.

use super::buckets::{self, Bucket, BucketIter};
use super::{CounterResetHint, HistogramError, HistogramSize, Span, check_reduce, validate_layout};

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

    /// Lowers the resolution to `target`, in place; see [`super::Histogram::reduce_resolution`].
    pub fn reduce_resolution(&mut self, target: i32) -> Result<(), HistogramError> {
        check_reduce(self.schema, target)?;
        for (spans, counts) in [
            (&mut self.positive_spans, &mut self.positive_buckets),
            (&mut self.negative_spans, &mut self.negative_buckets),
        ] {
            buckets::reduce_in_place(spans, counts, self.schema, target, buckets::Stored::Absolute);
        }
        self.schema = target;
        Ok(())
    }

    /// Its buckets, spans and custom bounds.
    pub fn size(&self) -> HistogramSize {
        HistogramSize {
            buckets: self.positive_buckets.len() + self.negative_buckets.len(),
            layout: self.positive_spans.len() + self.negative_spans.len() + self.custom_values.len(),
        }
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

/// Arithmetic, as Prometheus' `FloatHistogram` methods: what PromQL needs for `rate`, `sum`, `avg` and the
/// operators `+`, `-`, `*` and `/`.
impl FloatHistogram {
    /// Whether this is a custom-bucket histogram (schema -53).
    pub fn uses_custom_buckets(&self) -> bool {
        super::is_custom_buckets_schema(self.schema)
    }

    /// Multiplies every count and the sum by `factor` (Prometheus' `Mul`); a negative factor gives negative
    /// counts, as there.
    pub fn mul(&mut self, factor: f64) {
        self.map_counts(|c| c * factor);
    }

    /// Divides every count and the sum by `divisor` (Prometheus' `Div`): dividing by zero gives infinite counts,
    /// and NaN where a count was zero.
    pub fn div(&mut self, divisor: f64) {
        self.map_counts(|c| c / divisor);
    }

    fn map_counts(&mut self, f: impl Fn(f64) -> f64) {
        self.zero_count = f(self.zero_count);
        self.count = f(self.count);
        self.sum = f(self.sum);
        for c in self.positive_buckets.iter_mut().chain(self.negative_buckets.iter_mut()) {
            *c = f(*c);
        }
    }

    /// `self + other` (Prometheus' `Add`): at the lower of the two schemas, with the wider of the two zero
    /// buckets (widened further while it would cut a populated bucket in two). Exponential and custom-bucket
    /// histograms do not mix, and custom-bucket histograms add only with the same bounds.
    pub fn add(&self, other: &FloatHistogram) -> Result<FloatHistogram, HistogramError> {
        self.combine(other, 1.0)
    }

    /// `self - other` (Prometheus' `Sub`), under the rules of [`FloatHistogram::add`]. Counts may become
    /// negative.
    pub fn sub(&self, other: &FloatHistogram) -> Result<FloatHistogram, HistogramError> {
        self.combine(other, -1.0)
    }

    fn combine(&self, other: &FloatHistogram, sign: f64) -> Result<FloatHistogram, HistogramError> {
        if self.uses_custom_buckets() != other.uses_custom_buckets() {
            return Err(HistogramError::CustomBuckets(
                "cannot be combined with an exponential histogram",
            ));
        }
        if self.uses_custom_buckets() && self.custom_values != other.custom_values {
            return Err(HistogramError::CustomBounds(format!(
                "bounds {:?} and {:?} differ",
                self.custom_values, other.custom_values
            )));
        }
        let schema = self.schema.min(other.schema);
        let (mut a, mut b) = (self.clone(), other.clone());
        for h in [&mut a, &mut b] {
            if h.schema != schema {
                h.reduce_resolution(schema)?;
            }
        }
        // Both zero buckets end at the same threshold: widening one may cut a bucket of the other, which then
        // widens again.
        let mut threshold = a.zero_threshold.max(b.zero_threshold);
        loop {
            let wider = a.widen_zero_bucket(threshold).max(b.widen_zero_bucket(threshold));
            if wider == threshold {
                break;
            }
            threshold = wider;
        }
        let mut out = FloatHistogram {
            counter_reset_hint: combined_hint(a.counter_reset_hint, b.counter_reset_hint),
            schema,
            zero_threshold: threshold,
            zero_count: a.zero_count + sign * b.zero_count,
            count: a.count + sign * b.count,
            sum: a.sum + sign * b.sum,
            custom_values: a.custom_values.clone(),
            ..Default::default()
        };
        (out.positive_spans, out.positive_buckets) = merge_side(
            &a.positive_spans,
            &a.positive_buckets,
            &b.positive_spans,
            &b.positive_buckets,
            sign,
        );
        (out.negative_spans, out.negative_buckets) = merge_side(
            &a.negative_spans,
            &a.negative_buckets,
            &b.negative_spans,
            &b.negative_buckets,
            sign,
        );
        Ok(out)
    }

    /// Moves every bucket that reaches below `threshold` (in absolute value) into the zero bucket, which then
    /// ends at `threshold`, or at the upper bound of the widest populated bucket it took in if that is larger:
    /// Prometheus' `zeroCountForLargerThreshold`. Returns the new threshold. Does nothing for custom buckets or
    /// when `threshold` is not above the current one.
    fn widen_zero_bucket(&mut self, threshold: f64) -> f64 {
        if self.uses_custom_buckets() || threshold <= self.zero_threshold {
            return self.zero_threshold;
        }
        let mut new_threshold = threshold;
        for positive in [true, false] {
            let (spans, counts) = if positive {
                (&self.positive_spans, &self.positive_buckets)
            } else {
                (&self.negative_spans, &self.negative_buckets)
            };
            let mut kept = Vec::with_capacity(counts.len());
            for (idx, c) in buckets::indices(spans).zip(counts.iter().copied()) {
                let lower = buckets::exponential_bound(idx - 1, self.schema);
                if lower < threshold {
                    self.zero_count += c;
                    let upper = buckets::exponential_bound(idx, self.schema);
                    if c != 0.0 && upper > new_threshold {
                        new_threshold = upper;
                    }
                } else {
                    kept.push((idx, c));
                }
            }
            let (s, c) = buckets::from_indexed(kept, 0);
            if positive {
                (self.positive_spans, self.positive_buckets) = (s, c);
            } else {
                (self.negative_spans, self.negative_buckets) = (s, c);
            }
        }
        self.zero_threshold = new_threshold;
        new_threshold
    }

    /// Whether a counter reset happened between `previous` and this histogram (Prometheus' `DetectReset`): the
    /// hint says so, or (hint unknown) the count, the zero bucket or any bucket went down, the resolution went
    /// up, the zero bucket shrank, or the two kinds (exponential, custom buckets) or custom bounds differ. A
    /// gauge histogram never resets.
    pub fn detect_reset(&self, previous: &FloatHistogram) -> bool {
        match self.counter_reset_hint {
            CounterResetHint::CounterReset => return true,
            CounterResetHint::NotCounterReset | CounterResetHint::Gauge => return false,
            CounterResetHint::Unknown => {}
        }
        if self.count < previous.count {
            return true;
        }
        if self.uses_custom_buckets() != previous.uses_custom_buckets()
            || (self.uses_custom_buckets() && self.custom_values != previous.custom_values)
        {
            return true;
        }
        if self.schema > previous.schema || self.zero_threshold < previous.zero_threshold {
            return true;
        }
        let mut prev = previous.clone();
        if prev.schema > self.schema && prev.reduce_resolution(self.schema).is_err() {
            return true;
        }
        prev.widen_zero_bucket(self.zero_threshold);
        if prev.zero_threshold != self.zero_threshold || self.zero_count < prev.zero_count {
            return true;
        }
        side_decreased(
            &prev.positive_spans,
            &prev.positive_buckets,
            &self.positive_spans,
            &self.positive_buckets,
        ) || side_decreased(
            &prev.negative_spans,
            &prev.negative_buckets,
            &self.negative_spans,
            &self.negative_buckets,
        )
    }

    /// Every non-empty bucket from the lowest to the highest: negative buckets, the zero bucket (closed at both
    /// ends) and positive buckets, as Prometheus' `AllBucketIterator`.
    pub fn all_buckets(&self) -> Vec<Bucket<f64>> {
        let mut out: Vec<Bucket<f64>> = self.negative_bucket_iter().collect();
        out.reverse();
        if self.zero_count != 0.0 {
            out.push(Bucket {
                lower: -self.zero_threshold,
                upper: self.zero_threshold,
                lower_inclusive: true,
                upper_inclusive: true,
                count: self.zero_count,
                index: 0,
            });
        }
        out.extend(self.positive_bucket_iter());
        out
    }

    /// The bytes Prometheus 3 accounts a float histogram at (`FloatHistogram.Size`): its struct, 168 bytes,
    /// plus 8 per span, bucket and custom bound.
    pub fn size_bytes(&self) -> usize {
        168 + 8
            * (self.positive_spans.len()
                + self.negative_spans.len()
                + self.positive_buckets.len()
                + self.negative_buckets.len()
                + self.custom_values.len())
    }

    /// Whether two histograms hold the same observations in the same layout (Prometheus' `Equals`): the counter
    /// reset hint is ignored, and NaN sums are equal when their bits are.
    pub fn same_as(&self, other: &FloatHistogram) -> bool {
        self.schema == other.schema
            && self.zero_threshold == other.zero_threshold
            && self.zero_count == other.zero_count
            && self.count == other.count
            && (self.sum == other.sum || self.sum.to_bits() == other.sum.to_bits())
            && self.positive_spans == other.positive_spans
            && self.negative_spans == other.negative_spans
            && self.positive_buckets == other.positive_buckets
            && self.negative_buckets == other.negative_buckets
            && self.custom_values == other.custom_values
    }
}

/// The hint of a sum (Prometheus' `Add`): the shared hint, a gauge if either is one, unknown otherwise.
fn combined_hint(a: CounterResetHint, b: CounterResetHint) -> CounterResetHint {
    if a == b {
        a
    } else if a == CounterResetHint::Gauge || b == CounterResetHint::Gauge {
        CounterResetHint::Gauge
    } else {
        CounterResetHint::Unknown
    }
}

/// The buckets of `a` plus `sign` times those of `b`, same schema, by bucket index.
fn merge_side(a_spans: &[Span], a: &[f64], b_spans: &[Span], b: &[f64], sign: f64) -> (Vec<Span>, Vec<f64>) {
    let mut merged: std::collections::BTreeMap<i64, f64> = buckets::indices(a_spans).zip(a.iter().copied()).collect();
    for (idx, c) in buckets::indices(b_spans).zip(b.iter().copied()) {
        *merged.entry(idx).or_insert(0.0) += sign * c;
    }
    buckets::from_indexed(merged, 0)
}

/// Whether any bucket of `prev` is larger than the same bucket of `curr` (missing there: zero).
fn side_decreased(prev_spans: &[Span], prev: &[f64], curr_spans: &[Span], curr: &[f64]) -> bool {
    let now: std::collections::HashMap<i64, f64> = buckets::indices(curr_spans).zip(curr.iter().copied()).collect();
    buckets::indices(prev_spans)
        .zip(prev.iter().copied())
        .any(|(idx, c)| c > now.get(&idx).copied().unwrap_or(0.0))
}
