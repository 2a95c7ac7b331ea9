//! Native histograms, with Prometheus' semantics (`model/histogram`): sparse exponential buckets described by
//! spans, or custom bucket bounds (NHCB, schema -53).
//!
//! Two kinds, as in Prometheus: [`Histogram`] holds integer counts, its buckets stored as deltas (each bucket's
//! count minus the previous bucket's, the first one absolute), the form scrapes and integer histogram chunks
//! carry; [`FloatHistogram`] holds absolute float counts, the form rules, queries and float histogram chunks
//! carry. Bucket operations (compaction, resolution reduction, iteration) work on absolute counts, so both kinds
//! share them ([`buckets`]).

mod bounds;
mod buckets;
mod float;
#[cfg(test)]
mod tests;

pub use buckets::{Bucket, BucketIter};
pub use float::FloatHistogram;

/// Lowest exponential schema (each bucket 2^16 times wider than the previous).
pub const EXPONENTIAL_SCHEMA_MIN: i32 = -4;
/// Highest exponential schema Prometheus accepts (2^(1/256) growth per bucket).
pub const EXPONENTIAL_SCHEMA_MAX: i32 = 8;
/// Highest exponential schema a reader must still decode: schemas up to this one are reserved for future
/// resolutions and are reduced to [`EXPONENTIAL_SCHEMA_MAX`] when read.
pub const EXPONENTIAL_SCHEMA_MAX_RESERVED: i32 = 52;
/// Schema of native histograms with custom bucket bounds (NHCB).
pub const CUSTOM_BUCKETS_SCHEMA: i32 = -53;
/// The hard ceiling on a native histogram's size: the most buckets (positive and negative together), and
/// the most spans and custom bounds together, that any histogram may have, whatever a tenant's
/// `max_native_histogram_buckets` says (no configuration raises it). A histogram over it is refused before
/// it is decoded (see [`HistogramSize`]), so decoding, validating, reducing, storing and querying one
/// histogram costs a bounded amount of memory (at most 8 bytes a bucket decoded, 32 in a head chunk's
/// appender state).
///
/// 16,384 buckets at the finest resolution (schema 8, 256 buckets per power of two) cover 64 powers of two:
/// observations from a nanosecond to 584 years, or a ratio of 1.8e19 between the smallest and the largest.
/// No measured quantity spans more, so only a sender mis-encoding or attacking fills more; real instruments
/// stay far below (the OpenTelemetry SDK's default is 160 buckets a side, Mimir's recommended limit 160).
pub const MAX_BUCKETS_CEILING: usize = 16_384;

/// Whether `schema` is a standard exponential schema.
pub fn is_exponential_schema(schema: i32) -> bool {
    (EXPONENTIAL_SCHEMA_MIN..=EXPONENTIAL_SCHEMA_MAX).contains(&schema)
}

/// Whether `schema` is the custom-bucket schema.
pub fn is_custom_buckets_schema(schema: i32) -> bool {
    schema == CUSTOM_BUCKETS_SCHEMA
}

/// A run of consecutive buckets: `offset` is the gap (in bucket indices) to the end of the previous span, or
/// the index of the first bucket for the first span; `length` is the number of buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Span {
    pub offset: i32,
    pub length: u32,
}

impl Span {
    pub fn new(offset: i32, length: u32) -> Self {
        Self { offset, length }
    }
}

/// What the producer knows about a counter reset at this sample (Prometheus' `CounterResetHint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CounterResetHint {
    /// Nothing is known: compare with the previous sample to find out.
    #[default]
    Unknown,
    /// A counter reset happened right before this sample.
    CounterReset,
    /// No counter reset happened since the previous sample.
    NotCounterReset,
    /// A gauge histogram: counts may go up and down, and there are no counter resets.
    Gauge,
}

/// Why a histogram is not valid.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HistogramError {
    /// A schema that is neither exponential (-4..=8) nor custom buckets (-53).
    #[error("invalid histogram schema {0}")]
    InvalidSchema(i32),
    /// The spans of one side describe another number of buckets than that side has.
    #[error("{side} side: spans describe {spans} buckets, but there are {buckets}")]
    SpansBucketsMismatch {
        side: &'static str,
        spans: u64,
        buckets: usize,
    },
    /// A span after the first with a negative offset (buckets out of order).
    #[error("{side} side: span {span} has negative offset {offset}")]
    NegativeSpanOffset {
        side: &'static str,
        span: usize,
        offset: i32,
    },
    /// A bucket with a negative (absolute) count.
    #[error("{side} side: bucket {bucket} has negative count {count}")]
    NegativeBucketCount {
        side: &'static str,
        bucket: usize,
        count: f64,
    },
    /// The count is not the sum of the buckets and the zero bucket (for a NaN sum: smaller than it).
    #[error("{in_buckets} observations found in buckets, but the count field is {count}")]
    CountMismatch { in_buckets: u64, count: u64 },
    /// Integer bucket counts that overflow 64 bits.
    #[error("bucket counts overflow 64 bits")]
    CountOverflow,
    /// A custom-bucket histogram with something only exponential ones have.
    #[error("custom-bucket histogram: {0}")]
    CustomBuckets(&'static str),
    /// Custom bounds that are not strictly increasing, or buckets beyond them.
    #[error("custom-bucket histogram: {0}")]
    CustomBounds(String),
    /// An exponential histogram that carries custom bounds.
    #[error("exponential histogram with custom bounds")]
    ExponentialWithCustomBounds,
    /// Resolution reduction to a schema that is not lower, or of a custom-bucket histogram.
    #[error("cannot reduce schema {from} to {to}")]
    CannotReduce { from: i32, to: i32 },
}

/// A native histogram with integer counts. Bucket counts are deltas: `positive_buckets[0]` is the count of the
/// first positive bucket, each later element the difference to the bucket before it (in span order).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Histogram {
    pub counter_reset_hint: CounterResetHint,
    pub schema: i32,
    /// Observations with absolute value at most this go to the zero bucket.
    pub zero_threshold: f64,
    pub zero_count: u64,
    pub count: u64,
    pub sum: f64,
    pub positive_spans: Vec<Span>,
    pub negative_spans: Vec<Span>,
    pub positive_buckets: Vec<i64>,
    pub negative_buckets: Vec<i64>,
    /// Upper bounds of the buckets of a custom-bucket histogram (schema -53), strictly increasing, `+Inf`
    /// implied after the last; empty otherwise.
    pub custom_values: Vec<f64>,
}

impl Histogram {
    /// Checks Prometheus' invariants (`Histogram.Validate`): a known schema, spans matching bucket counts, span
    /// offsets after the first not negative, no negative bucket count, and `count` equal to the observations in
    /// the buckets and the zero bucket (at least that many when `sum` is NaN: NaN observations land in no
    /// bucket).
    pub fn validate(&self) -> Result<(), HistogramError> {
        validate_layout(
            self.schema,
            self.zero_threshold,
            self.zero_count != 0,
            &self.positive_spans,
            self.positive_buckets.len(),
            &self.negative_spans,
            self.negative_buckets.len(),
            &self.custom_values,
        )?;
        let in_positive = sum_deltas("positive", &self.positive_buckets)?;
        let in_negative = sum_deltas("negative", &self.negative_buckets)?;
        let in_buckets = in_positive
            .checked_add(in_negative)
            .and_then(|n| n.checked_add(self.zero_count))
            .ok_or(HistogramError::CountOverflow)?;
        let ok = if self.sum.is_nan() {
            in_buckets <= self.count
        } else {
            in_buckets == self.count
        };
        if !ok {
            return Err(HistogramError::CountMismatch {
                in_buckets,
                count: self.count,
            });
        }
        Ok(())
    }

    /// The same histogram with float counts (absolute buckets).
    pub fn to_float(&self) -> FloatHistogram {
        FloatHistogram {
            counter_reset_hint: self.counter_reset_hint,
            schema: self.schema,
            zero_threshold: self.zero_threshold,
            zero_count: self.zero_count as f64,
            count: self.count as f64,
            sum: self.sum,
            positive_spans: self.positive_spans.clone(),
            negative_spans: self.negative_spans.clone(),
            positive_buckets: absolute_from_deltas(&self.positive_buckets).map(|c| c as f64).collect(),
            negative_buckets: absolute_from_deltas(&self.negative_buckets).map(|c| c as f64).collect(),
            custom_values: self.custom_values.clone(),
        }
    }

    /// Absolute counts of the positive buckets, in span order.
    pub fn positive_counts(&self) -> Vec<i64> {
        absolute_from_deltas(&self.positive_buckets).collect()
    }

    /// Absolute counts of the negative buckets, in span order.
    pub fn negative_counts(&self) -> Vec<i64> {
        absolute_from_deltas(&self.negative_buckets).collect()
    }

    /// Removes empty buckets and joins spans, as Prometheus' `Compact`: every empty bucket at the edge of a
    /// span goes, runs of more than `max_empty_buckets` empty buckets split a span, and spans closer than that
    /// merge (the gap filled with empty buckets). The result does not depend on the input's span layout.
    pub fn compact(&mut self, max_empty_buckets: u32) {
        let (spans, counts) = buckets::compact(&self.positive_spans, &self.positive_counts(), max_empty_buckets);
        self.positive_spans = spans;
        self.positive_buckets = deltas_from_absolute(&counts);
        let (spans, counts) = buckets::compact(&self.negative_spans, &self.negative_counts(), max_empty_buckets);
        self.negative_spans = spans;
        self.negative_buckets = deltas_from_absolute(&counts);
    }

    /// Lowers the resolution to `target` (a lower exponential schema) by merging each group of 2^(schema -
    /// target) neighbouring buckets into one, as Prometheus' `ReduceResolution`. Mimir uses this to keep a
    /// histogram under a bucket limit. Works in place: it allocates nothing, whatever the bucket count.
    pub fn reduce_resolution(&mut self, target: i32) -> Result<(), HistogramError> {
        check_reduce(self.schema, target)?;
        for (spans, deltas) in [
            (&mut self.positive_spans, &mut self.positive_buckets),
            (&mut self.negative_spans, &mut self.negative_buckets),
        ] {
            buckets::reduce_in_place(spans, deltas, self.schema, target, buckets::Stored::Deltas);
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
    pub fn positive_bucket_iter(&self) -> BucketIter<'_, i64> {
        BucketIter::new(
            self.schema,
            &self.custom_values,
            &self.positive_spans,
            self.positive_counts(),
            true,
        )
    }

    /// The negative buckets, closest to zero first, with their (negative) bounds.
    pub fn negative_bucket_iter(&self) -> BucketIter<'_, i64> {
        BucketIter::new(
            self.schema,
            &self.custom_values,
            &self.negative_spans,
            self.negative_counts(),
            false,
        )
    }
}

/// Checks what both kinds share: schema, zero bucket and custom bounds rules, and that each side's spans
/// describe exactly its buckets.
#[allow(clippy::too_many_arguments)]
pub(crate) fn validate_layout(
    schema: i32,
    zero_threshold: f64,
    has_zero_count: bool,
    positive_spans: &[Span],
    positive_buckets: usize,
    negative_spans: &[Span],
    negative_buckets: usize,
    custom_values: &[f64],
) -> Result<(), HistogramError> {
    if is_custom_buckets_schema(schema) {
        if has_zero_count {
            return Err(HistogramError::CustomBuckets("zero count must be 0"));
        }
        if zero_threshold != 0.0 {
            return Err(HistogramError::CustomBuckets("zero threshold must be 0"));
        }
        if !negative_spans.is_empty() || negative_buckets != 0 {
            return Err(HistogramError::CustomBuckets("must have no negative buckets"));
        }
        check_spans("positive", positive_spans, positive_buckets)?;
        check_custom_bounds(custom_values, positive_spans)?;
    } else if is_exponential_schema(schema) {
        check_spans("positive", positive_spans, positive_buckets)?;
        check_spans("negative", negative_spans, negative_buckets)?;
        if !custom_values.is_empty() {
            return Err(HistogramError::ExponentialWithCustomBounds);
        }
    } else {
        return Err(HistogramError::InvalidSchema(schema));
    }
    Ok(())
}

fn check_spans(side: &'static str, spans: &[Span], buckets: usize) -> Result<(), HistogramError> {
    let mut described = 0u64;
    for (i, s) in spans.iter().enumerate() {
        if i > 0 && s.offset < 0 {
            return Err(HistogramError::NegativeSpanOffset {
                side,
                span: i,
                offset: s.offset,
            });
        }
        described += u64::from(s.length);
    }
    if described != buckets as u64 {
        return Err(HistogramError::SpansBucketsMismatch {
            side,
            spans: described,
            buckets,
        });
    }
    Ok(())
}

/// Custom bounds must increase strictly, and every bucket index must be one of theirs: 0 to `len` (the last,
/// above every bound, being the `+Inf` bucket).
fn check_custom_bounds(bounds: &[f64], spans: &[Span]) -> Result<(), HistogramError> {
    if let Some(i) = bounds
        .windows(2)
        .position(|w| w[0].partial_cmp(&w[1]) != Some(std::cmp::Ordering::Less))
    {
        return Err(HistogramError::CustomBounds(format!(
            "bounds must increase strictly, but bound {} is {} and bound {} is {}",
            i,
            bounds[i],
            i + 1,
            bounds[i + 1]
        )));
    }
    if bounds.last().is_some_and(|b| b.is_nan() || *b == f64::INFINITY) {
        return Err(HistogramError::CustomBounds("the last bound must be finite".into()));
    }
    let mut next = 0i64;
    for (i, s) in spans.iter().enumerate() {
        if i == 0 && s.offset < 0 {
            return Err(HistogramError::CustomBounds(format!(
                "first span offset {} is negative",
                s.offset
            )));
        }
        next += i64::from(s.offset) + i64::from(s.length);
    }
    if next > bounds.len() as i64 + 1 {
        return Err(HistogramError::CustomBounds(format!(
            "buckets reach index {}, but {} bounds allow at most {}",
            next - 1,
            bounds.len(),
            bounds.len()
        )));
    }
    Ok(())
}

/// Sums the absolute counts of delta-encoded buckets, failing on a negative count.
fn sum_deltas(side: &'static str, deltas: &[i64]) -> Result<u64, HistogramError> {
    let mut current = 0i64;
    let mut total = 0u64;
    for (i, d) in deltas.iter().enumerate() {
        current = current.checked_add(*d).ok_or(HistogramError::CountOverflow)?;
        if current < 0 {
            return Err(HistogramError::NegativeBucketCount {
                side,
                bucket: i,
                count: current as f64,
            });
        }
        total = total.checked_add(current as u64).ok_or(HistogramError::CountOverflow)?;
    }
    Ok(total)
}

pub(crate) fn check_reduce(from: i32, to: i32) -> Result<(), HistogramError> {
    if !is_exponential_schema(to)
        || to > from
        || !(EXPONENTIAL_SCHEMA_MIN..=EXPONENTIAL_SCHEMA_MAX_RESERVED).contains(&from)
    {
        return Err(HistogramError::CannotReduce { from, to });
    }
    Ok(())
}

/// Absolute counts from delta-encoded ones (wrapping, like Go's int64 arithmetic, so corrupt input cannot
/// panic).
pub fn absolute_from_deltas(deltas: &[i64]) -> impl Iterator<Item = i64> + '_ {
    deltas.iter().scan(0i64, |current, d| {
        *current = current.wrapping_add(*d);
        Some(*current)
    })
}

/// Delta-encoded counts from absolute ones.
pub fn deltas_from_absolute(counts: &[i64]) -> Vec<i64> {
    let mut prev = 0i64;
    counts
        .iter()
        .map(|c| {
            let d = c.wrapping_sub(prev);
            prev = *c;
            d
        })
        .collect()
}

/// A native histogram value of either kind, as a sample carries it.
#[derive(Debug, Clone, PartialEq)]
pub enum HistogramValue {
    /// Integer counts (scrapes, remote write's `Histogram` with integer counts, OTLP exponential histograms).
    Int(Histogram),
    /// Float counts (recording rules, remote write's `Histogram` with float counts).
    Float(FloatHistogram),
}

impl HistogramValue {
    /// The sum of observations (Prometheus' staleness NaN for a stale marker).
    pub fn sum(&self) -> f64 {
        match self {
            HistogramValue::Int(h) => h.sum,
            HistogramValue::Float(h) => h.sum,
        }
    }

    /// The schema.
    pub fn schema(&self) -> i32 {
        match self {
            HistogramValue::Int(h) => h.schema,
            HistogramValue::Float(h) => h.schema,
        }
    }

    /// Checks Prometheus' invariants ([`Histogram::validate`], [`FloatHistogram::validate`]).
    pub fn validate(&self) -> Result<(), HistogramError> {
        match self {
            HistogramValue::Int(h) => h.validate(),
            HistogramValue::Float(h) => h.validate(),
        }
    }

    /// The value with float counts.
    pub fn to_float(&self) -> FloatHistogram {
        match self {
            HistogramValue::Int(h) => h.to_float(),
            HistogramValue::Float(h) => h.clone(),
        }
    }

    /// Populated (listed) buckets, both sides together.
    pub fn bucket_count(&self) -> usize {
        self.size().buckets
    }

    /// What the histogram holds per bucket, span and bound.
    pub fn size(&self) -> HistogramSize {
        match self {
            HistogramValue::Int(h) => h.size(),
            HistogramValue::Float(h) => h.size(),
        }
    }
}

/// The parts of a native histogram that grow with it: what [`MAX_BUCKETS_CEILING`] bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HistogramSize {
    /// Buckets, positive and negative together (what `max_native_histogram_buckets` limits).
    pub buckets: usize,
    /// Spans, positive and negative together, and custom bounds.
    pub layout: usize,
}

impl HistogramSize {
    /// Whether the histogram is over [`MAX_BUCKETS_CEILING`], in buckets or in spans and bounds.
    pub fn over_ceiling(&self) -> bool {
        self.buckets > MAX_BUCKETS_CEILING || self.layout > MAX_BUCKETS_CEILING
    }
}

impl std::fmt::Display for HistogramSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} buckets and {} spans and custom bounds",
            self.buckets, self.layout
        )
    }
}

/// One native histogram sample: timestamp in milliseconds since the Unix epoch, and value.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSample {
    pub t: i64,
    pub value: HistogramValue,
}
