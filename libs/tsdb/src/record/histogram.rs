//! Native-histogram WAL records, byte-compatible with Prometheus (`tsdb/record`: `HistogramSamples`,
//! `FloatHistogramSamples`, and their custom-bucket twins).
//!
//! ```text
//! record:     type u8 | firstRef u64 | firstT i64 | ( varint(ref - firstRef) | varint(t - firstT) | hist )*
//! integer:    hint u8 | varint schema | zeroThreshold f64 | uvarint zeroCount | uvarint count | sum f64
//!             | spans(positive) | spans(negative) | uvarint n | varint bucket* (positive, delta-encoded)
//!             | uvarint n | varint bucket* (negative) | [custom]
//! float:      hint u8 | varint schema | zeroThreshold f64 | zeroCount f64 | count f64 | sum f64
//!             | spans(positive) | spans(negative) | uvarint n | f64 bucket* | uvarint n | f64 bucket* | [custom]
//! spans:      uvarint n | ( varint offset | uvarint length )*
//! custom:     uvarint n | f64 bound*                          only for schema -53 (custom buckets)
//! ```
//!
//! Floats are their 64-bit patterns, big-endian, as every fixed-width field. The hint is Prometheus'
//! `CounterResetHint` (0 unknown, 1 reset, 2 not a reset, 3 gauge). Prometheus writes custom-bucket
//! histograms (schema -53) into their own record types (9 and 10) with the same layout; the encoders here do
//! the same, so a batch with both kinds becomes two records.

use super::{Decoder, RecordError, put_uvarint, put_varint};
use heddle_model::histogram::is_custom_buckets_schema;
use heddle_model::{CounterResetHint, FloatHistogram, Histogram, Span};

/// Record type byte of a HistogramSamples record (integer histograms with exponential buckets).
pub const TYPE_HISTOGRAM_SAMPLES: u8 = 7;
/// Record type byte of a FloatHistogramSamples record.
pub const TYPE_FLOAT_HISTOGRAM_SAMPLES: u8 = 8;
/// Record type byte of a CustomBucketsHistogramSamples record (integer histograms of schema -53).
pub const TYPE_CUSTOM_BUCKETS_HISTOGRAM_SAMPLES: u8 = 9;
/// Record type byte of a CustomBucketsFloatHistogramSamples record.
pub const TYPE_CUSTOM_BUCKETS_FLOAT_HISTOGRAM_SAMPLES: u8 = 10;

/// An integer histogram sample of the series with ref `series_ref`.
#[derive(Debug, Clone, PartialEq)]
pub struct RefHistogramSample {
    pub series_ref: u64,
    pub t: i64,
    pub h: Histogram,
}

/// A float histogram sample of the series with ref `series_ref`.
#[derive(Debug, Clone, PartialEq)]
pub struct RefFloatHistogramSample {
    pub series_ref: u64,
    pub t: i64,
    pub h: FloatHistogram,
}

/// Appends the records of `samples` to `out`: one HistogramSamples record of the exponential-bucket ones and,
/// if any, one CustomBucketsHistogramSamples record of the custom-bucket ones (Prometheus' split). Nothing is
/// appended for no samples.
pub fn encode_histograms(samples: &[RefHistogramSample], out: &mut Vec<Vec<u8>>) {
    let refs: Vec<_> = samples.iter().map(|s| (s.series_ref, s.t, &s.h)).collect();
    encode_histogram_refs(&refs, out);
}

/// [`encode_histograms`] of borrowed histograms, `(series ref, t, histogram)`: an append logs the batch's
/// histograms without copying them.
pub fn encode_histogram_refs(samples: &[(u64, i64, &Histogram)], out: &mut Vec<Vec<u8>>) {
    encode_split(
        samples,
        [TYPE_HISTOGRAM_SAMPLES, TYPE_CUSTOM_BUCKETS_HISTOGRAM_SAMPLES],
        |h| h.schema,
        put_histogram,
        out,
    );
}

/// [`encode_histograms`] for float histograms (record types 8 and 10).
pub fn encode_float_histograms(samples: &[RefFloatHistogramSample], out: &mut Vec<Vec<u8>>) {
    let refs: Vec<_> = samples.iter().map(|s| (s.series_ref, s.t, &s.h)).collect();
    encode_float_histogram_refs(&refs, out);
}

/// [`encode_histogram_refs`] for float histograms.
pub fn encode_float_histogram_refs(samples: &[(u64, i64, &FloatHistogram)], out: &mut Vec<Vec<u8>>) {
    encode_split(
        samples,
        [
            TYPE_FLOAT_HISTOGRAM_SAMPLES,
            TYPE_CUSTOM_BUCKETS_FLOAT_HISTOGRAM_SAMPLES,
        ],
        |h| h.schema,
        put_float_histogram,
        out,
    );
}

/// One record of type `types[0]` of the exponential-bucket samples, then one of type `types[1]` of the
/// custom-bucket ones.
fn encode_split<H>(
    samples: &[(u64, i64, &H)],
    types: [u8; 2],
    schema: impl Fn(&H) -> i32,
    put: impl Fn(&mut Vec<u8>, &H),
    out: &mut Vec<Vec<u8>>,
) {
    for (typ, custom) in [(types[0], false), (types[1], true)] {
        let mut part = samples
            .iter()
            .filter(|(_, _, h)| is_custom_buckets_schema(schema(h)) == custom);
        if let Some(&(first_ref, first_t, h)) = part.next() {
            let mut buf = record_head(typ, first_ref, first_t);
            put_deltas(&mut buf, first_ref, first_t, first_ref, first_t);
            put(&mut buf, h);
            for &(series_ref, t, h) in part {
                put_deltas(&mut buf, series_ref, t, first_ref, first_t);
                put(&mut buf, h);
            }
            out.push(buf);
        }
    }
}

fn record_head(typ: u8, first_ref: u64, first_t: i64) -> Vec<u8> {
    let mut buf = Vec::with_capacity(64);
    buf.push(typ);
    buf.extend_from_slice(&first_ref.to_be_bytes());
    buf.extend_from_slice(&first_t.to_be_bytes());
    buf
}

fn put_deltas(buf: &mut Vec<u8>, series_ref: u64, t: i64, first_ref: u64, first_t: i64) {
    put_varint(buf, (series_ref as i64).wrapping_sub(first_ref as i64));
    put_varint(buf, t.wrapping_sub(first_t));
}

fn hint_byte(h: CounterResetHint) -> u8 {
    match h {
        CounterResetHint::Unknown => 0,
        CounterResetHint::CounterReset => 1,
        CounterResetHint::NotCounterReset => 2,
        CounterResetHint::Gauge => 3,
    }
}

fn put_f64(buf: &mut Vec<u8>, v: f64) {
    buf.extend_from_slice(&v.to_bits().to_be_bytes());
}

fn put_spans(buf: &mut Vec<u8>, spans: &[Span]) {
    put_uvarint(buf, spans.len() as u64);
    for s in spans {
        put_varint(buf, i64::from(s.offset));
        put_uvarint(buf, u64::from(s.length));
    }
}

fn put_custom_values(buf: &mut Vec<u8>, schema: i32, values: &[f64]) {
    if is_custom_buckets_schema(schema) {
        put_uvarint(buf, values.len() as u64);
        for &v in values {
            put_f64(buf, v);
        }
    }
}

pub(super) fn put_histogram(buf: &mut Vec<u8>, h: &Histogram) {
    buf.push(hint_byte(h.counter_reset_hint));
    put_varint(buf, i64::from(h.schema));
    put_f64(buf, h.zero_threshold);
    put_uvarint(buf, h.zero_count);
    put_uvarint(buf, h.count);
    put_f64(buf, h.sum);
    put_spans(buf, &h.positive_spans);
    put_spans(buf, &h.negative_spans);
    for buckets in [&h.positive_buckets, &h.negative_buckets] {
        put_uvarint(buf, buckets.len() as u64);
        for &b in buckets {
            put_varint(buf, b);
        }
    }
    put_custom_values(buf, h.schema, &h.custom_values);
}

pub(super) fn put_float_histogram(buf: &mut Vec<u8>, h: &FloatHistogram) {
    buf.push(hint_byte(h.counter_reset_hint));
    put_varint(buf, i64::from(h.schema));
    put_f64(buf, h.zero_threshold);
    put_f64(buf, h.zero_count);
    put_f64(buf, h.count);
    put_f64(buf, h.sum);
    put_spans(buf, &h.positive_spans);
    put_spans(buf, &h.negative_spans);
    for buckets in [&h.positive_buckets, &h.negative_buckets] {
        put_uvarint(buf, buckets.len() as u64);
        for &b in buckets {
            put_f64(buf, b);
        }
    }
    put_custom_values(buf, h.schema, &h.custom_values);
}

impl Decoder<'_> {
    /// The samples of a histogram record of either integer type (7 or 9).
    pub(super) fn histograms(&mut self) -> Result<Vec<RefHistogramSample>, RecordError> {
        self.histogram_samples(|d| d.histogram()).map(|v| {
            v.into_iter()
                .map(|(series_ref, t, h)| RefHistogramSample { series_ref, t, h })
                .collect()
        })
    }

    /// The samples of a float histogram record (type 8 or 10).
    pub(super) fn float_histograms(&mut self) -> Result<Vec<RefFloatHistogramSample>, RecordError> {
        self.histogram_samples(|d| d.float_histogram()).map(|v| {
            v.into_iter()
                .map(|(series_ref, t, h)| RefFloatHistogramSample { series_ref, t, h })
                .collect()
        })
    }

    fn histogram_samples<H>(
        &mut self,
        mut one: impl FnMut(&mut Self) -> Result<H, RecordError>,
    ) -> Result<Vec<(u64, i64, H)>, RecordError> {
        let mut out = Vec::new();
        if self.is_empty() {
            return Ok(out);
        }
        let first_ref = self.be64("first ref")?;
        let first_t = self.be64("first timestamp")? as i64;
        while !self.is_empty() {
            let dref = self.varint("ref delta")?;
            let dt = self.varint("timestamp delta")?;
            let h = one(self)?;
            out.push((
                (first_ref as i64).wrapping_add(dref) as u64,
                first_t.wrapping_add(dt),
                h,
            ));
        }
        Ok(out)
    }

    fn invalid(&self, reason: String) -> RecordError {
        RecordError::InvalidHistogram {
            record_type: self.typ,
            offset: self.pos,
            reason,
        }
    }

    fn hint(&mut self) -> Result<CounterResetHint, RecordError> {
        match self.bytes(1, "counter reset hint")?[0] {
            0 => Ok(CounterResetHint::Unknown),
            1 => Ok(CounterResetHint::CounterReset),
            2 => Ok(CounterResetHint::NotCounterReset),
            3 => Ok(CounterResetHint::Gauge),
            other => Err(self.invalid(format!("counter reset hint {other} is none of 0 to 3"))),
        }
    }

    fn schema(&mut self) -> Result<i32, RecordError> {
        let s = self.varint("schema")?;
        i32::try_from(s).map_err(|_| self.invalid(format!("schema {s} is out of range")))
    }

    fn f64(&mut self, field: &'static str) -> Result<f64, RecordError> {
        Ok(f64::from_bits(self.be64(field)?))
    }

    /// A count of items each taking at least `min_bytes`, checked against the bytes left so that a corrupt
    /// count cannot make the decoder reserve memory the record cannot fill.
    fn count(&mut self, field: &'static str, min_bytes: usize) -> Result<usize, RecordError> {
        let n = self.uvarint(field)?;
        let left = self.buf.len().saturating_sub(self.pos);
        usize::try_from(n)
            .ok()
            .filter(|&n| n.saturating_mul(min_bytes) <= left)
            .ok_or_else(|| self.truncated(field))
    }

    fn spans(&mut self) -> Result<Vec<Span>, RecordError> {
        let n = self.count("span count", 2)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let offset = self.varint("span offset")?;
            let length = self.uvarint("span length")?;
            let offset = i32::try_from(offset).map_err(|_| self.invalid(format!("span offset {offset}")))?;
            let length = u32::try_from(length).map_err(|_| self.invalid(format!("span length {length}")))?;
            out.push(Span { offset, length });
        }
        Ok(out)
    }

    fn custom_values(&mut self, schema: i32) -> Result<Vec<f64>, RecordError> {
        if !is_custom_buckets_schema(schema) {
            return Ok(Vec::new());
        }
        let n = self.count("custom value count", 8)?;
        (0..n).map(|_| self.f64("custom value")).collect()
    }

    pub(super) fn histogram(&mut self) -> Result<Histogram, RecordError> {
        let counter_reset_hint = self.hint()?;
        let schema = self.schema()?;
        let zero_threshold = self.f64("zero threshold")?;
        let zero_count = self.uvarint("zero count")?;
        let count = self.uvarint("count")?;
        let sum = self.f64("sum")?;
        let positive_spans = self.spans()?;
        let negative_spans = self.spans()?;
        let mut buckets = || -> Result<Vec<i64>, RecordError> {
            let n = self.count("bucket count", 1)?;
            (0..n).map(|_| self.varint("bucket")).collect()
        };
        let positive_buckets = buckets()?;
        let negative_buckets = buckets()?;
        let custom_values = self.custom_values(schema)?;
        Ok(Histogram {
            counter_reset_hint,
            schema,
            zero_threshold,
            zero_count,
            count,
            sum,
            positive_spans,
            negative_spans,
            positive_buckets,
            negative_buckets,
            custom_values,
        })
    }

    pub(super) fn float_histogram(&mut self) -> Result<FloatHistogram, RecordError> {
        let counter_reset_hint = self.hint()?;
        let schema = self.schema()?;
        let zero_threshold = self.f64("zero threshold")?;
        let zero_count = self.f64("zero count")?;
        let count = self.f64("count")?;
        let sum = self.f64("sum")?;
        let positive_spans = self.spans()?;
        let negative_spans = self.spans()?;
        let mut buckets = || -> Result<Vec<f64>, RecordError> {
            let n = self.count("bucket count", 8)?;
            (0..n).map(|_| self.f64("bucket")).collect()
        };
        let positive_buckets = buckets()?;
        let negative_buckets = buckets()?;
        let custom_values = self.custom_values(schema)?;
        Ok(FloatHistogram {
            counter_reset_hint,
            schema,
            zero_threshold,
            zero_count,
            count,
            sum,
            positive_spans,
            negative_spans,
            positive_buckets,
            negative_buckets,
            custom_values,
        })
    }
}

#[cfg(test)]
mod tests;
