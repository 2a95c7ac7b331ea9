//! What integer and float histogram chunks share (`tsdb/chunkenc/histogram_meta.go`): the 3-byte header, the
//! layout written once at the start of the stream, and the bucket-layout arithmetic of the appenders.
//!
//! Header: `u16 BE` sample count, then a flags byte whose top two bits are the [`CounterResetHeader`]. The
//! bit stream starts after it with the layout of the first sample:
//! ```text
//! zero threshold   1 byte, or byte 255 + 64 bits (see varbit::put_zero_threshold)
//! schema           varbit int
//! positive spans   varbit uint count, then per span: varbit uint length, varbit int offset
//! negative spans   the same
//! custom bounds    only for schema -53: varbit uint count, then each bound (see varbit::put_custom_bound)
//! ```
//! Every later sample of the chunk has this layout: a sample with new buckets makes the appender rewrite the
//! chunk with the wider layout (the existing samples get empty buckets), or start a new chunk.

use super::bstream::{BitReader, BitWriter};
use super::varbit::{
    Short, put_custom_bound, put_varbit_int, put_varbit_uint, put_zero_threshold, read_custom_bound, read_varbit_int,
    read_varbit_uint, read_zero_threshold,
};
use crate::error::ChunkError;
use heddle_model::histogram::{
    CUSTOM_BUCKETS_SCHEMA, CounterResetHint, EXPONENTIAL_SCHEMA_MAX_RESERVED, EXPONENTIAL_SCHEMA_MIN,
    MAX_BUCKETS_CEILING, is_exponential_schema,
};
use heddle_model::{HistogramSize, Span};

/// Bytes before the bit stream: sample count and flags.
pub const HISTOGRAM_HEADER_LEN: usize = 3;
/// Position of the flags byte.
const FLAGS_POS: usize = 2;
const COUNTER_RESET_MASK: u8 = 0b1100_0000;

/// What the chunk's first sample says about counter resets, in the top two bits of the flags byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CounterResetHeader {
    /// Not known whether the chunk was cut because of a counter reset: detect it at query time.
    Unknown = 0b0000_0000,
    /// The chunk was cut because of a counter reset.
    CounterReset = 0b1000_0000,
    /// The chunk was cut for another reason; there was no counter reset.
    NotCounterReset = 0b0100_0000,
    /// The chunk holds gauge histograms.
    Gauge = 0b1100_0000,
}

impl CounterResetHeader {
    /// The header of a chunk, from its flags byte.
    pub fn of_chunk(bytes: &[u8]) -> Self {
        match bytes.get(FLAGS_POS).map_or(0, |b| b & COUNTER_RESET_MASK) {
            0b1000_0000 => Self::CounterReset,
            0b0100_0000 => Self::NotCounterReset,
            0b1100_0000 => Self::Gauge,
            _ => Self::Unknown,
        }
    }

    /// Sets the header bits of `bytes` (a chunk of at least [`HISTOGRAM_HEADER_LEN`] bytes), keeping the
    /// others.
    pub(crate) fn write_to(self, bytes: &mut [u8]) {
        if let Some(flags) = bytes.get_mut(FLAGS_POS) {
            *flags = (*flags & !COUNTER_RESET_MASK) | self as u8;
        }
    }

    /// The hint a sample read from a chunk carries: gauge chunks hold gauges; after the first sample there is
    /// no reset inside a chunk; the first sample's is unknown even when the header says why the chunk was cut,
    /// since the chunk before it may be gone or may have been written later (out of order, backfill).
    pub fn hint_for_sample(self, index: u16) -> CounterResetHint {
        match self {
            Self::Gauge => CounterResetHint::Gauge,
            _ if index > 0 => CounterResetHint::NotCounterReset,
            _ => CounterResetHint::Unknown,
        }
    }
}

/// The layout of every sample in a chunk: written once, by the first sample.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Layout {
    pub(crate) schema: i32,
    pub(crate) zero_threshold: f64,
    pub(crate) positive_spans: Vec<Span>,
    pub(crate) negative_spans: Vec<Span>,
    pub(crate) custom_values: Vec<f64>,
}

impl Layout {
    pub(crate) fn write(&self, w: &mut BitWriter) {
        put_zero_threshold(w, self.zero_threshold);
        put_varbit_int(w, i64::from(self.schema));
        for spans in [&self.positive_spans, &self.negative_spans] {
            put_varbit_uint(w, spans.len() as u64);
            for s in spans {
                put_varbit_uint(w, u64::from(s.length));
                put_varbit_int(w, i64::from(s.offset));
            }
        }
        if self.schema == CUSTOM_BUCKETS_SCHEMA {
            put_varbit_uint(w, self.custom_values.len() as u64);
            for b in &self.custom_values {
                put_custom_bound(w, *b);
            }
        }
    }

    /// Reads a layout. Widths wrap as Go's conversions do (`int32(v)`, `uint32(v)`); vectors grow one read
    /// element at a time, so a corrupt count runs out of bits long before it runs out of memory.
    pub(crate) fn read(r: &mut BitReader<'_>) -> Result<Self, Short> {
        let zero_threshold = read_zero_threshold(r)?;
        let schema = read_varbit_int(r)? as i32;
        let mut sides = [Vec::new(), Vec::new()];
        for spans in &mut sides {
            let n = read_varbit_uint(r)?;
            for _ in 0..n {
                let length = read_varbit_uint(r)? as u32;
                let offset = read_varbit_int(r)? as i32;
                spans.push(Span::new(offset, length));
            }
        }
        let mut custom_values = Vec::new();
        if schema == CUSTOM_BUCKETS_SCHEMA {
            let n = read_varbit_uint(r)?;
            for _ in 0..n {
                custom_values.push(read_custom_bound(r)?);
            }
        }
        let [positive_spans, negative_spans] = sides;
        Ok(Self {
            schema,
            zero_threshold,
            positive_spans,
            negative_spans,
            custom_values,
        })
    }
}

/// What each sample of an integer or float histogram chunk holds once decoded (every sample has the chunk's
/// layout: its buckets, spans and custom bounds), read from the layout alone, without decoding a sample or
/// allocating. For weighing a chunk before it is decoded (a query's sample limit counts a histogram by its
/// size). `None` for a chunk too short to hold its header or layout; an empty chunk holds nothing. A corrupt
/// count is capped at the bits left, which each element takes at least one of.
pub fn histogram_chunk_size(bytes: &[u8]) -> Option<HistogramSize> {
    let (Some(&[hi, lo]), Some(stream)) = (bytes.get(..2), bytes.get(HISTOGRAM_HEADER_LEN..)) else {
        return None;
    };
    if u16::from_be_bytes([hi, lo]) == 0 {
        return Some(HistogramSize::default());
    }
    let r = &mut BitReader::new(stream);
    read_zero_threshold(r).ok()?;
    let schema = read_varbit_int(r).ok()?;
    let mut size = HistogramSize::default();
    for _side in 0..2 {
        let n = read_varbit_uint(r).ok()?;
        for _ in 0..n {
            let length = read_varbit_uint(r).ok()? as u32;
            read_varbit_int(r).ok()?;
            size.buckets = size.buckets.saturating_add(length as usize);
            size.layout += 1;
        }
    }
    if schema == i64::from(CUSTOM_BUCKETS_SCHEMA) {
        let n = read_varbit_uint(r).ok()?;
        let n = usize::try_from(n).unwrap_or(usize::MAX).min(r.remaining());
        size.layout = size.layout.saturating_add(n);
    }
    Some(size)
}

/// Whether a reader knows `schema`: exponential (including the resolutions above 8 reserved for later,
/// which are read at 8) or custom buckets.
pub(crate) fn is_known_schema(schema: i32) -> bool {
    schema == CUSTOM_BUCKETS_SCHEMA || (EXPONENTIAL_SCHEMA_MIN..=EXPONENTIAL_SCHEMA_MAX_RESERVED).contains(&schema)
}

/// An appended histogram must have a schema Prometheus writes and as many buckets as its spans describe:
/// the chunk writes one field per bucket, so anything else would be unreadable.
pub(crate) fn check_shape(
    schema: i32,
    positive_spans: &[Span],
    positive: usize,
    negative_spans: &[Span],
    negative: usize,
) -> Result<(), ChunkError> {
    if !is_exponential_schema(schema) && schema != CUSTOM_BUCKETS_SCHEMA {
        return Err(ChunkError::HistogramShape {
            reason: format!("schema {schema} is neither exponential (-4..=8) nor custom buckets (-53)"),
        });
    }
    let (want_positive, want_negative) = (span_buckets(positive_spans), span_buckets(negative_spans));
    if want_positive != positive as u64 || want_negative != negative as u64 {
        return Err(ChunkError::HistogramShape {
            reason: format!(
                "spans describe {want_positive} positive and {want_negative} negative buckets, but there are \
                 {positive} and {negative}"
            ),
        });
    }
    Ok(())
}

/// Buckets the spans describe (`u64`: corrupt spans can describe more than memory holds).
pub(crate) fn span_buckets(spans: &[Span]) -> u64 {
    spans.iter().map(|s| u64::from(s.length)).sum()
}

/// Whether a chunk layout of these spans would be over [`MAX_BUCKETS_CEILING`], in buckets or spans. The
/// appenders cut a new chunk rather than widen a chunk's layout past it: every sample of a chunk has the
/// chunk's layout, and the appender keeps 32 bytes a bucket, so samples that each fit the ceiling but keep
/// moving their buckets would otherwise widen one chunk to several times it. Prometheus has no such bound;
/// no histogram a real instrument sends comes near it.
pub(crate) fn wider_than_ceiling(positive: &[Span], negative: &[Span]) -> bool {
    span_buckets(positive) + span_buckets(negative) > MAX_BUCKETS_CEILING as u64
        || positive.len() + negative.len() > MAX_BUCKETS_CEILING
}

/// The bucket indices the spans describe, in order.
pub(crate) fn bucket_indices(spans: &[Span]) -> Vec<i64> {
    let mut out = Vec::with_capacity(span_buckets(spans).min(1 << 16) as usize);
    let mut next = 0i64;
    for s in spans {
        let start = next + i64::from(s.offset);
        next = start + i64::from(s.length);
        out.extend(start..next);
    }
    out
}

/// Canonical spans for increasing bucket indices: one span per run of consecutive indices.
pub(crate) fn spans_of_indices(indices: &[i64]) -> Vec<Span> {
    let mut spans: Vec<Span> = Vec::new();
    let mut end = 0i64;
    for &idx in indices {
        match spans.last_mut() {
            Some(last) if idx == end => last.length += 1,
            _ => spans.push(Span::new((idx - end) as i32, 1)),
        }
        end = idx + 1;
    }
    spans
}

/// How a counter histogram's buckets relate to the chunk's (Prometheus' `expandIntSpansAndBuckets` and
/// `expandFloatSpansAndBuckets`): `None` on a counter reset (a bucket count went down, or a bucket in use
/// disappeared); else whether the chunk lacks buckets the sample has (`forward`) and whether the sample lacks
/// empty buckets the chunk has (`backward`). `chunk` and `sample` are absolute counts in span order.
pub(crate) fn expand_counter<T: Copy + PartialOrd + Default>(
    chunk_spans: &[Span],
    chunk: &[T],
    sample_spans: &[Span],
    sample: &[T],
) -> Option<(bool, bool)> {
    let a = bucket_indices(chunk_spans);
    let b = bucket_indices(sample_spans);
    let (mut i, mut j) = (0, 0);
    let (mut forward, mut backward) = (false, false);
    let zero = T::default();
    loop {
        match (a.get(i), b.get(j)) {
            (Some(ai), Some(bi)) if ai == bi => {
                // Written as Go compares: a NaN count never counts as a reset here.
                if chunk.get(i)? > sample.get(j)? {
                    return None;
                }
                i += 1;
                j += 1;
            }
            (Some(ai), bi) if bi.is_none_or(|bi| ai < bi) => {
                if *chunk.get(i)? != zero {
                    return None;
                }
                backward = true;
                i += 1;
            }
            (_, Some(_)) => {
                forward = true;
                j += 1;
            }
            _ => return Some((forward, backward)),
        }
    }
}

/// For gauge histograms (Prometheus' `expandSpansBothWays`): whether the chunk lacks buckets of the sample,
/// whether the sample lacks buckets of the chunk, and the canonical spans of all their buckets.
pub(crate) fn expand_gauge(chunk_spans: &[Span], sample_spans: &[Span]) -> (bool, bool, Vec<Span>) {
    let a = bucket_indices(chunk_spans);
    let b = bucket_indices(sample_spans);
    let mut union = Vec::with_capacity(a.len().max(b.len()));
    let (mut i, mut j) = (0, 0);
    let (mut forward, mut backward) = (false, false);
    loop {
        match (a.get(i), b.get(j)) {
            (Some(ai), Some(bi)) if ai == bi => {
                union.push(*ai);
                i += 1;
                j += 1;
            }
            (Some(ai), bi) if bi.is_none_or(|bi| ai < bi) => {
                union.push(*ai);
                backward = true;
                i += 1;
            }
            (_, Some(bi)) => {
                union.push(*bi);
                forward = true;
                j += 1;
            }
            _ => return (forward, backward, spans_of_indices(&union)),
        }
    }
}

/// How a sample relates to a chunk's layout: whether the chunk lacks buckets of the sample (it must be
/// recoded), whether the sample lacks buckets of the chunk (it must be widened), and the (positive, negative)
/// spans to widen it to.
pub(crate) type Expansion = (bool, bool, Option<(Vec<Span>, Vec<Span>)>);

/// The canonical spans of the union of two layouts' buckets.
pub(crate) fn union_spans(a: &[Span], b: &[Span]) -> Vec<Span> {
    expand_gauge(a, b).2
}

/// Moves absolute counts from the buckets of `from` to those of `to`, which must hold all of them; buckets
/// only `to` has are empty.
pub(crate) fn remap<T: Copy + Default>(from: &[Span], counts: &[T], to: &[Span]) -> Vec<T> {
    let to_idx = bucket_indices(to);
    let mut out = vec![T::default(); to_idx.len()];
    let mut j = 0;
    for (idx, c) in bucket_indices(from).into_iter().zip(counts) {
        while to_idx.get(j).is_some_and(|t| *t < idx) {
            j += 1;
        }
        if let Some(slot) = out.get_mut(j) {
            *slot = *c;
        }
    }
    out
}

/// Prometheus' rules for cutting histogram head chunks (`histogramsAppendPreprocessor`). Histogram samples
/// vary too much in size for a sample target: the chunk aims at [`HISTOGRAM_CHUNK_TARGET_BYTES`], with at
/// least [`HISTOGRAM_CHUNK_MIN_SAMPLES`] samples unless the chunk range ends first.
///
/// Once the chunk holds a quarter of the target bytes, its end time is predicted so that the rest of the
/// chunk range splits into chunks of about the target size at the observed rate; it is cut at that time, or
/// at twice the target bytes when the rate or the bucket count grew since the prediction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistogramChunkCutter {
    range_ms: i64,
    /// When the open chunk must end at the latest.
    next_at: i64,
    /// Whether `next_at` is a prediction rather than the end of the chunk range.
    end_predicted: bool,
}

/// Size a histogram chunk aims at (`TargetBytesPerHistogramChunk`).
pub const HISTOGRAM_CHUNK_TARGET_BYTES: usize = 1024;
/// Fewest samples in a histogram chunk cut for size (`MinSamplesPerHistogramChunk`).
pub const HISTOGRAM_CHUNK_MIN_SAMPLES: u16 = 10;

impl HistogramChunkCutter {
    /// The cutter of a chunk opened at `min_time` in chunk ranges of `range_ms`.
    pub fn new(min_time: i64, range_ms: i64) -> Self {
        let range_ms = range_ms.max(1);
        Self {
            range_ms,
            next_at: range_end(min_time, range_ms),
            end_predicted: false,
        }
    }

    /// Before appending a sample at `t` to the open chunk (first sample at `min_time`, last at `max_time`,
    /// `samples` samples in `bytes` bytes): whether to cut a new chunk for it. After a cut the cutter serves
    /// the new chunk.
    pub fn cut_before(&mut self, t: i64, min_time: i64, max_time: i64, samples: u16, bytes: usize) -> bool {
        // Computed before any prediction, as Prometheus does: until a prediction is made, next_at is the
        // range end (or a snapshot's cut request), and either lifts the minimum sample count.
        let range_start = if self.end_predicted {
            range_end(min_time, self.range_ms)
        } else {
            self.next_at
        };
        if !self.end_predicted && bytes >= HISTOGRAM_CHUNK_TARGET_BYTES / 4 {
            let ratio_to_full = HISTOGRAM_CHUNK_TARGET_BYTES as f64 / bytes as f64;
            self.next_at = predict_chunk_end(min_time, max_time, self.next_at, ratio_to_full);
            self.end_predicted = true;
        }
        let cut = (t >= self.next_at || bytes >= 2 * HISTOGRAM_CHUNK_TARGET_BYTES)
            && (samples >= HISTOGRAM_CHUNK_MIN_SAMPLES || t >= range_start);
        if cut {
            *self = Self::new(t, self.range_ms);
        }
        cut
    }
}

/// First timestamp of the chunk range after the one holding `t`.
fn range_end(t: i64, range_ms: i64) -> i64 {
    t.div_euclid(range_ms).saturating_add(1).saturating_mul(range_ms)
}

/// Prometheus' `computeChunkEndTime`: the chunk from `start` to `cur` is 1/`ratio_to_full` full; split
/// [start, max) into equal chunks at that rate and end this one after the first.
fn predict_chunk_end(start: i64, cur: i64, max: i64, ratio_to_full: f64) -> i64 {
    let n = (max as f64 - start as f64) / ((cur as f64 - start as f64 + 1.0) * ratio_to_full);
    if n <= 1.0 {
        return max;
    }
    (start as f64 + (max as f64 - start as f64) / n.floor()) as i64
}
