//! Native histograms of a decoded series: the `Histogram` message of remote write 1.0 (`prometheus.Histogram`)
//! and 2.0 (`io.prometheus.write.v2.Histogram`), which share every field number and type.
//!
//! The fill pass checks each histogram completely ([`check`]: wire types, value ranges, packed framing, the
//! integer/float oneofs agreeing) but keeps only a [`HistogramRef`], the message's bytes and timestamp, in the
//! arena: spans and buckets would need owned vectors, and the arena never runs `Drop`. A caller that wants the
//! histogram decodes it into an owned [`HistogramSample`] with [`HistogramRef::decode`], on the heap, for as
//! long as it needs it. So the arena holds 40 bytes per histogram whatever its bucket count, which the measure
//! pass counts like any other slot: a histogram Prometheus sends takes 18 bytes on the wire at least (a
//! timestamp and a sum), so the decoded-size bound refuses only requests made mostly of empty ones.
//!
//! The check also counts what decoding would allocate ([`HistogramRef::size`]: buckets, spans and custom
//! bounds), so a caller knows a histogram's size before anything of that size exists: a histogram over
//! [`heddle_model::histogram::MAX_BUCKETS_CEILING`] is never decoded ([`HistogramRef::decode`] refuses it),
//! and one within it decodes into vectors allocated at their exact size, [`HistogramRef::decoded_heap_bytes`].

use super::canonical;
use super::wire::{Field, Fields, Value, WIRE_FIXED64, WIRE_LEN, WIRE_VARINT};
use crate::error::DecodeError;
use heddle_model::histogram::MAX_BUCKETS_CEILING;
use heddle_model::{
    CounterResetHint, FloatHistogram, Histogram, HistogramSample, HistogramSize, HistogramValue, Span, error_id,
};

/// One native histogram of a series, checked by the decoder, still encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistogramRef<'a> {
    /// The histogram's timestamp, in milliseconds.
    pub t: i64,
    /// The encoded `Histogram` message.
    raw: &'a [u8],
    /// Absolute offset of `raw[0]` in the request body, for errors. 32 bits keep the view at 40 bytes: a body
    /// is a decompressed snappy block or a gRPC message, both under 4 GiB.
    offset: u32,
    /// Buckets (positive and negative), saturated at `u32::MAX`.
    buckets: u32,
    /// Spans (positive and negative) and custom bounds, saturated at `u32::MAX`.
    layout: u32,
    version: Version,
}

impl<'a> HistogramRef<'a> {
    /// A placeholder for the arena's unfilled slots.
    pub(super) const EMPTY: HistogramRef<'static> = HistogramRef {
        t: 0,
        raw: &[],
        offset: 0,
        buckets: 0,
        layout: 0,
        version: Version::V1,
    };

    /// The encoded `Histogram` message (the same bytes in remote write 1.0 and 2.0).
    pub fn raw(&self) -> &'a [u8] {
        self.raw
    }

    /// Its buckets, spans and custom bounds, counted by the check: what the decoded histogram will hold.
    pub fn size(&self) -> HistogramSize {
        HistogramSize {
            buckets: self.buckets as usize,
            layout: self.layout as usize,
        }
    }

    /// The heap bytes [`HistogramRef::decode`] allocates for this histogram, besides the sample itself: 8 per
    /// span, bucket and bound, in vectors of exactly that size; nothing for a histogram over the ceiling,
    /// which is refused undecoded. For reserving the decoded samples of a request in a memory budget before
    /// decoding them.
    pub fn decoded_heap_bytes(&self) -> usize {
        let size = self.size();
        if size.over_ceiling() {
            return 0;
        }
        8 * (size.buckets + size.layout)
    }

    /// Refuses a histogram over [`MAX_BUCKETS_CEILING`] (`err-heddle-native-histogram-too-large`); a caller
    /// that decodes it anyway gets the same refusal from [`HistogramRef::decode`] before anything is allocated.
    pub fn check_ceiling(&self) -> Result<(), DecodeError> {
        let size = self.size();
        if !size.over_ceiling() {
            return Ok(());
        }
        Err(DecodeError::HistogramTooLarge {
            id: error_id::NATIVE_HISTOGRAM_TOO_LARGE,
            what: self.version.name(0),
            offset: self.offset as usize,
            t: self.t,
            buckets: size.buckets,
            layout: size.layout,
            ceiling: MAX_BUCKETS_CEILING,
        })
    }

    /// The histogram as an owned sample, its vectors allocated at their final size. Refused when it is over
    /// [`MAX_BUCKETS_CEILING`]; otherwise the decoder checked these bytes already, so this does not fail: the
    /// error is kept so that a decoder bug would be a refused request, not a panic.
    pub fn decode(&self) -> Result<HistogramSample, DecodeError> {
        self.check_ceiling()?;
        let offset = self.offset as usize;
        // A second walk to size each vector: cheap beside the allocation growth it saves, and it makes
        // `decoded_heap_bytes` exact.
        let counts = parse(self.raw, offset, self.version, None)?.counts;
        let mut parts = Parts::with_capacity(&counts);
        let scalars = parse(self.raw, offset, self.version, Some(&mut parts))?;
        debug_assert_eq!(scalars.counts, counts);
        Ok(scalars.into_sample(parts))
    }

    /// Checks the encoded histogram `raw` (at absolute `offset` of the body) of the protocol `version`.
    pub(super) fn check(raw: &'a [u8], offset: usize, version: Version) -> Result<Self, DecodeError> {
        let scalars = parse(raw, offset, version, None)?;
        let size = scalars.counts.size();
        let narrow = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Ok(Self {
            t: scalars.t,
            raw,
            offset: narrow(offset),
            buckets: narrow(size.buckets),
            layout: narrow(size.layout),
            version,
        })
    }
}

/// Which protocol's message names errors use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Version {
    V1,
    V2,
}

/// Field names of the `Histogram` message, by field number (index 0 is the message itself).
const NAMES_V1: [&str; 17] = [
    "prometheus.Histogram",
    "prometheus.Histogram.count_int",
    "prometheus.Histogram.count_float",
    "prometheus.Histogram.sum",
    "prometheus.Histogram.schema",
    "prometheus.Histogram.zero_threshold",
    "prometheus.Histogram.zero_count_int",
    "prometheus.Histogram.zero_count_float",
    "prometheus.Histogram.negative_spans",
    "prometheus.Histogram.negative_deltas",
    "prometheus.Histogram.negative_counts",
    "prometheus.Histogram.positive_spans",
    "prometheus.Histogram.positive_deltas",
    "prometheus.Histogram.positive_counts",
    "prometheus.Histogram.reset_hint",
    "prometheus.Histogram.timestamp",
    "prometheus.Histogram.custom_values",
];

const NAMES_V2: [&str; 17] = [
    "io.prometheus.write.v2.Histogram",
    "io.prometheus.write.v2.Histogram.count_int",
    "io.prometheus.write.v2.Histogram.count_float",
    "io.prometheus.write.v2.Histogram.sum",
    "io.prometheus.write.v2.Histogram.schema",
    "io.prometheus.write.v2.Histogram.zero_threshold",
    "io.prometheus.write.v2.Histogram.zero_count_int",
    "io.prometheus.write.v2.Histogram.zero_count_float",
    "io.prometheus.write.v2.Histogram.negative_spans",
    "io.prometheus.write.v2.Histogram.negative_deltas",
    "io.prometheus.write.v2.Histogram.negative_counts",
    "io.prometheus.write.v2.Histogram.positive_spans",
    "io.prometheus.write.v2.Histogram.positive_deltas",
    "io.prometheus.write.v2.Histogram.positive_counts",
    "io.prometheus.write.v2.Histogram.reset_hint",
    "io.prometheus.write.v2.Histogram.timestamp",
    "io.prometheus.write.v2.Histogram.custom_values",
];

const SPAN_V1: [&str; 3] = [
    "prometheus.BucketSpan",
    "prometheus.BucketSpan.offset",
    "prometheus.BucketSpan.length",
];
const SPAN_V2: [&str; 3] = [
    "io.prometheus.write.v2.BucketSpan",
    "io.prometheus.write.v2.BucketSpan.offset",
    "io.prometheus.write.v2.BucketSpan.length",
];

impl Version {
    fn name(self, field: u32) -> &'static str {
        let names = match self {
            Version::V1 => &NAMES_V1,
            Version::V2 => &NAMES_V2,
        };
        names.get(field as usize).copied().unwrap_or(names[0])
    }

    fn span(self, field: usize) -> &'static str {
        match self {
            Version::V1 => SPAN_V1[field],
            Version::V2 => SPAN_V2[field],
        }
    }
}

/// A count of a `oneof` that is either an integer or a float.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Count {
    Int(u64),
    Float(f64),
}

/// How many elements each repeated field of a histogram holds, counted by every walk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    negative_spans: usize,
    negative_deltas: usize,
    negative_counts: usize,
    positive_spans: usize,
    positive_deltas: usize,
    positive_counts: usize,
    custom_values: usize,
}

impl Counts {
    fn size(&self) -> HistogramSize {
        HistogramSize {
            buckets: self.negative_deltas + self.negative_counts + self.positive_deltas + self.positive_counts,
            layout: self.negative_spans + self.positive_spans + self.custom_values,
        }
    }

    /// The counter of field `number` (a repeated one).
    fn of(&mut self, number: u32) -> &mut usize {
        match number {
            8 => &mut self.negative_spans,
            9 => &mut self.negative_deltas,
            10 => &mut self.negative_counts,
            11 => &mut self.positive_spans,
            12 => &mut self.positive_deltas,
            13 => &mut self.positive_counts,
            _ => &mut self.custom_values,
        }
    }
}

/// The scalar fields of a histogram, and how many elements its repeated ones hold.
#[derive(Debug, Clone, Copy)]
struct Scalars {
    t: i64,
    counts: Counts,
    count: Option<(Count, usize)>,
    zero_count: Option<(Count, usize)>,
    sum: f64,
    schema: i32,
    zero_threshold: f64,
    hint: CounterResetHint,
}

/// The repeated fields of a histogram, filled only when decoding (not when checking).
#[derive(Debug, Default)]
struct Parts {
    negative_spans: Vec<Span>,
    negative_deltas: Vec<i64>,
    negative_counts: Vec<f64>,
    positive_spans: Vec<Span>,
    positive_deltas: Vec<i64>,
    positive_counts: Vec<f64>,
    custom_values: Vec<f64>,
}

impl Parts {
    fn with_capacity(c: &Counts) -> Self {
        Self {
            negative_spans: Vec::with_capacity(c.negative_spans),
            negative_deltas: Vec::with_capacity(c.negative_deltas),
            negative_counts: Vec::with_capacity(c.negative_counts),
            positive_spans: Vec::with_capacity(c.positive_spans),
            positive_deltas: Vec::with_capacity(c.positive_deltas),
            positive_counts: Vec::with_capacity(c.positive_counts),
            custom_values: Vec::with_capacity(c.custom_values),
        }
    }
}

impl Scalars {
    fn is_float(&self) -> bool {
        matches!(self.count, Some((Count::Float(_), _)))
    }

    fn into_sample(self, p: Parts) -> HistogramSample {
        let value = if self.is_float() {
            let count = |c: Option<(Count, usize)>| match c {
                Some((Count::Float(v), _)) => v,
                _ => 0.0,
            };
            HistogramValue::Float(FloatHistogram {
                counter_reset_hint: self.hint,
                schema: self.schema,
                zero_threshold: self.zero_threshold,
                zero_count: count(self.zero_count),
                count: count(self.count),
                sum: self.sum,
                positive_spans: p.positive_spans,
                negative_spans: p.negative_spans,
                positive_buckets: p.positive_counts,
                negative_buckets: p.negative_counts,
                custom_values: p.custom_values,
            })
        } else {
            let count = |c: Option<(Count, usize)>| match c {
                Some((Count::Int(v), _)) => v,
                _ => 0,
            };
            HistogramValue::Int(Histogram {
                counter_reset_hint: self.hint,
                schema: self.schema,
                zero_threshold: self.zero_threshold,
                zero_count: count(self.zero_count),
                count: count(self.count),
                sum: self.sum,
                positive_spans: p.positive_spans,
                negative_spans: p.negative_spans,
                positive_buckets: p.positive_deltas,
                negative_buckets: p.negative_deltas,
                custom_values: p.custom_values,
            })
        };
        HistogramSample { t: self.t, value }
    }
}

fn invalid(what: &'static str, offset: usize, reason: &'static str) -> DecodeError {
    DecodeError::InvalidValue { what, offset, reason }
}

/// Walks a `Histogram` message, checking every field; with `parts`, also collects the repeated ones.
fn parse(buf: &[u8], base: usize, version: Version, mut parts: Option<&mut Parts>) -> Result<Scalars, DecodeError> {
    let mut scalars = Scalars {
        t: 0,
        counts: Counts::default(),
        count: None,
        zero_count: None,
        sum: 0.0,
        schema: 0,
        zero_threshold: 0.0,
        hint: CounterResetHint::Unknown,
    };
    // Which repeated fields were seen, to check that integer and float bucket counts are not mixed.
    let (mut deltas_at, mut counts_at) = (None, None);
    for field in Fields::new(buf, base, version.name(0)) {
        let field = field?;
        let name = version.name(field.number);
        match (field.number, field.value) {
            // A oneof keeps its last member, as protobuf parsers do.
            (1, Value::Varint(v)) => scalars.count = Some((Count::Int(v), field.offset)),
            (2, Value::Fixed64(bits)) => scalars.count = Some((Count::Float(f64::from_bits(bits)), field.offset)),
            (3, Value::Fixed64(bits)) => scalars.sum = f64::from_bits(bits),
            (4, Value::Varint(v)) => {
                scalars.schema = i32::try_from(zigzag(v))
                    .map_err(|_| invalid(name, field.offset, "the sint32 value does not fit in 32 bits"))?
            }
            (5, Value::Fixed64(bits)) => scalars.zero_threshold = f64::from_bits(bits),
            (6, Value::Varint(v)) => scalars.zero_count = Some((Count::Int(v), field.offset)),
            (7, Value::Fixed64(bits)) => {
                scalars.zero_count = Some((Count::Float(f64::from_bits(bits)), field.offset));
            }
            (8 | 11, _) => {
                let (data, offset) = payload(&field, name)?;
                let span = parse_span(data, offset, version)?;
                *scalars.counts.of(field.number) += 1;
                if let Some(p) = parts.as_deref_mut() {
                    if field.number == 8 {
                        &mut p.negative_spans
                    } else {
                        &mut p.positive_spans
                    }
                    .push(span);
                }
            }
            (9 | 12, _) => {
                deltas_at.get_or_insert(field.offset);
                let out = parts.as_deref_mut().map(|p| {
                    if field.number == 9 {
                        &mut p.negative_deltas
                    } else {
                        &mut p.positive_deltas
                    }
                });
                *scalars.counts.of(field.number) += sint64s(&field, name, out)?;
            }
            (10 | 13 | 16, _) => {
                if field.number != 16 {
                    counts_at.get_or_insert(field.offset);
                }
                let out = parts.as_deref_mut().map(|p| match field.number {
                    10 => &mut p.negative_counts,
                    13 => &mut p.positive_counts,
                    _ => &mut p.custom_values,
                });
                *scalars.counts.of(field.number) += doubles(&field, name, out)?;
            }
            (14, Value::Varint(v)) => {
                scalars.hint = match v {
                    0 => CounterResetHint::Unknown,
                    1 => CounterResetHint::CounterReset,
                    2 => CounterResetHint::NotCounterReset,
                    3 => CounterResetHint::Gauge,
                    _ => return Err(invalid(name, field.offset, "unknown reset hint: expected 0 to 3")),
                }
            }
            // int64 is a two's-complement varint: the cast is the protobuf conversion.
            (15, Value::Varint(v)) => scalars.t = v as i64,
            (1 | 4 | 6 | 14 | 15, _) => return Err(field.wrong_type(name, WIRE_VARINT)),
            (2 | 3 | 5 | 7, _) => return Err(field.wrong_type(name, WIRE_FIXED64)),
            _ => {}
        }
    }
    // Prometheus tells the two kinds apart by the `count` oneof; bucket counts or a zero count of the other
    // kind would be silently ignored by it, losing observations, so they are refused here.
    let float = scalars.is_float();
    let what = version.name(0);
    match (float, deltas_at, counts_at, scalars.zero_count) {
        (true, Some(at), ..) => Err(invalid(
            what,
            at,
            "a float histogram (count_float) has integer bucket deltas; send positive_counts/negative_counts",
        )),
        (false, _, Some(at), _) => Err(invalid(
            what,
            at,
            "an integer histogram (count_int or no count) has float bucket counts; send count_float with them",
        )),
        (true, _, _, Some((Count::Int(_), at))) => Err(invalid(
            what,
            at,
            "a float histogram (count_float) has an integer zero count; send zero_count_float",
        )),
        (false, _, _, Some((Count::Float(_), at))) => Err(invalid(
            what,
            at,
            "an integer histogram (count_int or no count) has a float zero count; send zero_count_int",
        )),
        _ => Ok(scalars),
    }
}

fn payload<'a>(field: &Field<'a>, name: &'static str) -> Result<(&'a [u8], usize), DecodeError> {
    match field.value {
        Value::Len(data, offset) => Ok((data, offset)),
        _ => Err(field.wrong_type(name, WIRE_LEN)),
    }
}

fn parse_span(buf: &[u8], base: usize, version: Version) -> Result<Span, DecodeError> {
    let mut span = Span::default();
    for field in Fields::new(buf, base, version.span(0)) {
        let field = field?;
        match (field.number, field.value) {
            (1, Value::Varint(v)) => {
                span.offset = i32::try_from(zigzag(v)).map_err(|_| {
                    invalid(
                        version.span(1),
                        field.offset,
                        "the sint32 value does not fit in 32 bits",
                    )
                })?;
            }
            (2, Value::Varint(v)) => {
                span.length = u32::try_from(v).map_err(|_| {
                    invalid(
                        version.span(2),
                        field.offset,
                        "the uint32 value does not fit in 32 bits",
                    )
                })?;
            }
            (1 | 2, _) => return Err(field.wrong_type(version.span(field.number as usize), WIRE_VARINT)),
            _ => {}
        }
    }
    Ok(span)
}

fn zigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// A repeated `sint64` field, packed or not, into `out` when given; returns how many values it holds.
fn sint64s(field: &Field<'_>, name: &'static str, mut out: Option<&mut Vec<i64>>) -> Result<usize, DecodeError> {
    match field.value {
        Value::Varint(v) => {
            if let Some(out) = out {
                out.push(zigzag(v));
            }
            Ok(1)
        }
        Value::Len(data, base) => {
            let (mut pos, mut n) = (0, 0);
            while pos < data.len() {
                let (v, read) = canonical::varint(&data[pos..])
                    .ok_or_else(|| invalid(name, base + pos, "truncated or overlong varint in a packed field"))?;
                pos += read;
                n += 1;
                if let Some(out) = out.as_deref_mut() {
                    out.push(zigzag(v));
                }
            }
            Ok(n)
        }
        _ => Err(field.wrong_type(name, WIRE_LEN)),
    }
}

/// A repeated double field, packed or not, into `out` when given; returns how many values it holds.
fn doubles(field: &Field<'_>, name: &'static str, out: Option<&mut Vec<f64>>) -> Result<usize, DecodeError> {
    match field.value {
        Value::Fixed64(bits) => {
            if let Some(out) = out {
                out.push(f64::from_bits(bits));
            }
            Ok(1)
        }
        Value::Len(data, base) => {
            if data.len() % 8 != 0 {
                return Err(invalid(
                    name,
                    base,
                    "packed doubles whose length is not a multiple of 8 bytes",
                ));
            }
            if let Some(out) = out {
                out.extend(
                    data.chunks_exact(8)
                        .map(|c| f64::from_le_bytes(c.try_into().unwrap_or_default())),
                );
            }
            Ok(data.len() / 8)
        }
        _ => Err(field.wrong_type(name, WIRE_FIXED64)),
    }
}

#[cfg(test)]
mod tests;
