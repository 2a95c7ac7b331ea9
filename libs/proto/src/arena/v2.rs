//! Decoding a remote write 2.0 `io.prometheus.write.v2.Request` into the same borrowed views as 1.0.
//!
//! A 2.0 request carries its strings once, in a symbol table (`symbols`, field 4); each series names its
//! labels as pairs of indexes into it (`labels_refs`, packed `uint32`). The decoder checks every symbol for
//! UTF-8 once, keeps them as `&'a str` slices of the body, and resolves each series' references into the
//! same [`LabelRef`] run a 1.0 series has, so validation, sharding and forwarding see one representation.
//!
//! Each series is read first by the fast path for the shape senders write ([`canonical`]: labels and samples
//! only), then, if that declines (exemplars, metadata, anything else), by the general field walker. Two
//! passes, as for 1.0 ([`super::decode`]): [`measure_write_request_v2`] checks the framing and counts symbols,
//! series, label pairs, samples and exemplars, so the caller can reserve the exact size of the view before it
//! is allocated; [`decode_measured_v2`] fills it.
//!
//! What differs from 1.0:
//! - A series has no 1.0 encoding to forward as is: [`TimeSeriesRef::raw`] is empty, and the distributor
//!   re-encodes every 2.0 series.
//! - One short reference can name a long symbol many times, so the decoded labels can hold many times the
//!   text of the body. [`WriteRequestV2Ref::expanded_bytes`] bounds what the series take once re-encoded as
//!   1.0; the caller must hold it against its own size limit before copying any label text.
//! - Metadata rides on each series (`TimeSeries.metadata`); it becomes one [`MetadataRef`] of the family the
//!   series' `__name__` names, unless it says nothing (unspecified type, no help, no unit).
//! - Histograms are checked and kept encoded as in 1.0 ([`HistogramRef`]); the message is the same, field for
//!   field, so re-encoding a series as 1.0 copies each histogram's bytes as they came.
//! - A series' created timestamp is [`TimeSeriesRef::created`]: its `created_timestamp` (field 6, up to
//!   2.0-rc.3), else its first sample's `start_timestamp` (field 3, 2.0-rc.4 moved it there). A later sample's
//!   different start time (a reset inside one request) is not kept: the first is the one that can precede
//!   everything the request stores.

mod canonical;

use super::decode::{
    DECODED_BYTES_ALLOWANCE, ExemplarSlots, TimeSeriesRef, WriteRequestShape, decode_sample_of, histogram_slots,
    len_payload, next_slot,
};
use super::histogram::{HistogramRef, Version};
use super::wire::{Field, Fields, Value, WIRE_FIXED64, WIRE_VARINT, check_message};
use crate::error::DecodeError;
use bumpalo::Bump;
use heddle_model::{ExemplarRef, LabelRef, METRIC_NAME, MetadataRef, MetricType, Sample};
use std::mem::size_of;

/// The most bytes the decoded view of a 2.0 request may take per input byte: twice 1.0's
/// [`super::MAX_DECODED_BYTES_PER_INPUT_BYTE`], because a label costs 2 bytes on the wire (two one-byte
/// references) for its 32-byte [`LabelRef`]. Requests made mostly of empty series are still refused.
pub const MAX_DECODED_BYTES_PER_INPUT_BYTE_V2: usize = 2 * super::MAX_DECODED_BYTES_PER_INPUT_BYTE;

const REQUEST: &str = "io.prometheus.write.v2.Request";
const TIME_SERIES: &str = "io.prometheus.write.v2.TimeSeries";
const SAMPLE: &str = "io.prometheus.write.v2.Sample";
const LABELS_REFS: &str = "io.prometheus.write.v2.TimeSeries.labels_refs";
const EXEMPLAR: &str = "io.prometheus.write.v2.Exemplar";
const EXEMPLAR_LABELS_REFS: &str = "io.prometheus.write.v2.Exemplar.labels_refs";
const METADATA: &str = "io.prometheus.write.v2.Metadata";

/// Bytes a label can take beyond its text once encoded as a 1.0 `prometheus.Label` inside a series: three
/// keys and three length prefixes of at most 5 bytes each.
const V1_LABEL_OVERHEAD: usize = 18;
/// Bytes a sample can take as a 1.0 `prometheus.Sample` inside a series: key, length, a tagged double, a
/// tagged 10-byte varint.
const V1_SAMPLE_BYTES: usize = 22;
/// Bytes a series can take around its fields as a 1.0 `WriteRequest.timeseries` entry: key and length.
const V1_SERIES_OVERHEAD: usize = 6;
/// Bytes an exemplar can take as a 1.0 `prometheus.Exemplar` inside a series, besides its labels: key and
/// length, a tagged double, a tagged 10-byte varint.
const V1_EXEMPLAR_BYTES: usize = 22;
/// Bytes a histogram can take as a 1.0 `TimeSeries.histograms` entry besides its message (the same bytes in
/// 2.0): key and length.
const V1_HISTOGRAM_OVERHEAD: usize = 6;
/// Bytes a `prometheus.MetricMetadata` can take besides its text: key and length, the tagged type, three keys
/// and length prefixes.
const V1_METADATA_OVERHEAD: usize = 24;

/// A decoded remote write 2.0 request: its series in the 1.0 view, plus what 2.0 adds and is not stored.
#[derive(Debug)]
pub struct WriteRequestV2Ref<'a> {
    /// The series in wire order; each has an empty [`TimeSeriesRef::raw`] (there is no 1.0 encoding to forward).
    pub timeseries: &'a [TimeSeriesRef<'a>],
    /// The metadata series carried, each named by its series' metric name, in wire order; not validated
    /// or deduplicated here (a sender repeats it on every series of a family).
    pub metadata: &'a [MetadataRef<'a>],
    /// An upper bound of the bytes the series and metadata take re-encoded as a 1.0 `WriteRequest`: the text
    /// of every resolved label (of series and exemplars) and metadata entry plus fixed framing per label,
    /// sample, exemplar, metadata entry and series.
    pub expanded_bytes: usize,
}

/// What [`measure_write_request_v2`] found: the counts that size the decoded view.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteRequestV2Shape {
    /// Entries of the symbol table.
    pub symbols: usize,
    /// Series, label pairs and samples, as for 1.0 (its `metadata` is the series carrying metadata).
    pub series: WriteRequestShape,
}

impl WriteRequestV2Shape {
    /// The arena bytes the decoded view takes (symbol table included), exactly.
    pub fn decoded_bytes(&self) -> usize {
        self.symbols
            .saturating_mul(size_of::<&str>())
            .saturating_add(self.series.decoded_bytes())
    }
}

/// A request that passed [`measure_write_request_v2`]: decode it with [`decode_measured_v2`].
#[derive(Debug, Clone, Copy)]
pub struct MeasuredWriteRequestV2<'a> {
    body: &'a [u8],
    shape: WriteRequestV2Shape,
}

impl MeasuredWriteRequestV2<'_> {
    /// The counts and the exact decoded size.
    pub fn shape(&self) -> &WriteRequestV2Shape {
        &self.shape
    }
}

/// Decodes an uncompressed `io.prometheus.write.v2.Request`: [`measure_write_request_v2`] then
/// [`decode_measured_v2`].
pub fn decode_write_request_v2<'a>(arena: &'a Bump, body: &'a [u8]) -> Result<WriteRequestV2Ref<'a>, DecodeError> {
    decode_measured_v2(arena, measure_write_request_v2(body)?)
}

/// The first pass: checks the framing of the request, its series and their label references (each a
/// well-formed varint, an even number per series), refuses the fields 2.0 reserves (a 1.0 body's), counts what the view will hold, and refuses a request
/// whose view would exceed [`MAX_DECODED_BYTES_PER_INPUT_BYTE_V2`] times its size. Allocates nothing.
pub fn measure_write_request_v2(body: &[u8]) -> Result<MeasuredWriteRequestV2<'_>, DecodeError> {
    let mut shape = WriteRequestV2Shape {
        series: WriteRequestShape {
            input_bytes: body.len(),
            ..WriteRequestShape::default()
        },
        ..WriteRequestV2Shape::default()
    };
    // The leading run of well-formed symbols and canonical series, then the general walker for the rest.
    let mut rest = body;
    loop {
        if let Some((_, tail)) = canonical::field(rest, canonical::TAG_SYMBOL) {
            shape.symbols += 1;
            rest = tail;
        } else if let Some((series, tail)) = canonical::field(rest, canonical::TAG_SERIES)
            && let Some((refs, samples)) = canonical::count_series(series)
            && refs % 2 == 0
        {
            shape.series.labels += refs / 2;
            shape.series.samples += samples;
            shape.series.series += 1;
            rest = tail;
        } else {
            break;
        }
    }
    for field in Fields::new(rest, body.len() - rest.len(), REQUEST) {
        let field = field?;
        match field.number {
            4 => {
                len_payload(&field, "io.prometheus.write.v2.Request.symbols")?;
                shape.symbols += 1;
            }
            5 => {
                let (data, offset) = len_payload(&field, "io.prometheus.write.v2.Request.timeseries")?;
                measure_series(data, offset, &mut shape.series)?;
                shape.series.series += 1;
            }
            1..=3 => {
                return Err(DecodeError::ReservedV2Field {
                    field: field.number,
                    offset: field.offset,
                });
            }
            _ => {}
        }
    }
    let limit = body
        .len()
        .saturating_mul(MAX_DECODED_BYTES_PER_INPUT_BYTE_V2)
        .saturating_add(DECODED_BYTES_ALLOWANCE);
    if shape.decoded_bytes() > limit {
        return Err(DecodeError::Degenerate {
            decoded: shape.decoded_bytes(),
            input: body.len(),
            ratio: MAX_DECODED_BYTES_PER_INPUT_BYTE_V2,
            series: shape.series.series,
            labels: shape.series.labels,
            samples: shape.series.samples,
        });
    }
    Ok(MeasuredWriteRequestV2 { body, shape })
}

fn measure_series(raw: &[u8], base: usize, shape: &mut WriteRequestShape) -> Result<(), DecodeError> {
    if let Some((refs, samples)) = canonical::count_series(raw)
        && refs % 2 == 0
    {
        shape.labels += refs / 2;
        shape.samples += samples;
        return Ok(());
    }
    let mut refs = 0usize;
    for field in Fields::new(raw, base, TIME_SERIES) {
        let field = field?;
        match (field.number, field.value) {
            // Packed (what senders write) or one unpacked element: parsers must accept both.
            (1, Value::Len(data, offset)) => refs += count_refs(data, offset)?,
            (1, Value::Varint(_)) => refs += 1,
            (1, _) => return Err(field.wrong_type(LABELS_REFS, WIRE_VARINT)),
            (2, _) => {
                len_payload(&field, "io.prometheus.write.v2.TimeSeries.samples")?;
                shape.samples += 1;
            }
            (3, _) => {
                check_nested(
                    &field,
                    "io.prometheus.write.v2.TimeSeries.histograms",
                    "io.prometheus.write.v2.Histogram",
                )?;
                shape.histograms += 1;
            }
            (4, _) => {
                let (data, offset) = len_payload(&field, "io.prometheus.write.v2.TimeSeries.exemplars")?;
                let mut refs = 0usize;
                for field in Fields::new(data, offset, EXEMPLAR) {
                    let field = field?;
                    refs += count_field_refs(&field, EXEMPLAR_LABELS_REFS)?;
                }
                if refs % 2 == 1 {
                    return Err(DecodeError::OddLabelRefs { count: refs, offset });
                }
                shape.exemplars += 1;
                shape.exemplar_labels += refs / 2;
            }
            (5, _) => {
                check_nested(
                    &field,
                    "io.prometheus.write.v2.TimeSeries.metadata",
                    "io.prometheus.write.v2.Metadata",
                )?;
                shape.metadata += 1;
            }
            (6, Value::Varint(_)) => {}
            (6, _) => return Err(field.wrong_type("io.prometheus.write.v2.TimeSeries.created_timestamp", WIRE_VARINT)),
            _ => {}
        }
    }
    if refs % 2 == 1 {
        return Err(DecodeError::OddLabelRefs {
            count: refs,
            offset: base,
        });
    }
    shape.labels += refs / 2;
    Ok(())
}

/// The label references field 1 of `field`'s message holds (0 for other fields), checked for framing.
fn count_field_refs(field: &Field<'_>, what: &'static str) -> Result<usize, DecodeError> {
    match (field.number, field.value) {
        (1, Value::Len(data, offset)) => count_refs(data, offset),
        (1, Value::Varint(_)) => Ok(1),
        (1, _) => Err(field.wrong_type(what, WIRE_VARINT)),
        _ => Ok(0),
    }
}

fn check_nested(field: &Field<'_>, what: &'static str, message: &'static str) -> Result<(), DecodeError> {
    let (data, offset) = len_payload(field, what)?;
    check_message(data, offset, message)
}

/// The second pass: allocates the view at its measured size in `arena` and fills it. Every symbol must be
/// UTF-8 and the first one empty (the spec requires it); every reference must name a symbol.
///
/// Senders write the symbol table before the series (field order), so one walk usually does: each series is
/// decoded as soon as the whole table is known. Series that come before the last symbol are decoded by a
/// second walk.
pub fn decode_measured_v2<'a>(
    arena: &'a Bump,
    measured: MeasuredWriteRequestV2<'a>,
) -> Result<WriteRequestV2Ref<'a>, DecodeError> {
    let MeasuredWriteRequestV2 { body, shape } = measured;
    let symbols: &'a mut [&'a str] = arena.alloc_slice_fill_copy(shape.symbols, "");
    let mut fill = Fill {
        labels: arena.alloc_slice_fill_copy(shape.series.labels, LabelRef { name: "", value: "" }),
        samples: arena.alloc_slice_fill_copy(shape.series.samples, Sample { t: 0, v: 0.0 }),
        exemplars: ExemplarSlots::new(arena, shape.series.exemplars, shape.series.exemplar_labels),
        histograms: histogram_slots(arena, shape.series.histograms),
        timeseries: bumpalo::collections::Vec::with_capacity_in(shape.series.series, arena),
        metadata: bumpalo::collections::Vec::with_capacity_in(shape.series.metadata, arena),
        out: WriteRequestV2Ref {
            timeseries: &[],
            metadata: &[],
            expanded_bytes: 0,
        },
    };
    let mut filled = 0;
    let mut first_symbol = None;
    // Series decoded by the first walk, and whether one had to wait for the second.
    let (mut decoded, mut deferred) = (0, false);
    // The leading run of UTF-8 symbols and, once the table is complete, canonical series.
    let mut rest = body;
    loop {
        if let Some((data, tail)) = canonical::field(rest, canonical::TAG_SYMBOL)
            && let Ok(symbol) = std::str::from_utf8(data)
            && let Some(slot) = symbols.get_mut(filled)
        {
            first_symbol.get_or_insert((symbol, body.len() - rest.len()));
            *slot = symbol;
            filled += 1;
            rest = tail;
        } else if filled == shape.symbols
            && let Some((series, tail)) = canonical::field(rest, canonical::TAG_SERIES)
            && check_first_symbol(first_symbol).is_ok()
            && fill.canonical_series(&*symbols, series)
        {
            decoded += 1;
            rest = tail;
        } else {
            break;
        }
    }
    for field in Fields::new(rest, body.len() - rest.len(), REQUEST) {
        let field = field?;
        match field.number {
            4 => {
                let (data, start) = len_payload(&field, "io.prometheus.write.v2.Request.symbols")?;
                let symbol = std::str::from_utf8(data).map_err(|e| DecodeError::InvalidUtf8 {
                    field: "io.prometheus.write.v2.Request.symbols",
                    start,
                    offset: start + e.valid_up_to(),
                })?;
                first_symbol.get_or_insert((symbol, field.offset));
                *symbols
                    .get_mut(filled)
                    .ok_or(DecodeError::ShapeChanged { offset: field.offset })? = symbol;
                filled += 1;
            }
            5 if !deferred && filled == shape.symbols => {
                if decoded == 0 {
                    check_first_symbol(first_symbol)?;
                }
                fill.series(&*symbols, &field)?;
                decoded += 1;
            }
            5 => deferred = true,
            _ => {}
        }
    }
    check_first_symbol(first_symbol)?;
    if deferred {
        let series = Fields::new(body, 0, REQUEST).filter(|f| f.as_ref().is_ok_and(|f| f.number == 5));
        for field in series.skip(decoded) {
            fill.series(&*symbols, &field?)?;
        }
    }
    let mut out = fill.out;
    out.timeseries = fill.timeseries.into_bump_slice();
    out.metadata = fill.metadata.into_bump_slice();
    Ok(out)
}

/// The spec requires `symbols[0]` to be the empty string.
fn check_first_symbol(first: Option<(&str, usize)>) -> Result<(), DecodeError> {
    match first {
        Some((first, offset)) if !first.is_empty() => Err(DecodeError::FirstSymbolNotEmpty {
            offset,
            len: first.len(),
        }),
        _ => Ok(()),
    }
}

/// The view being filled: the unfilled rest of the request's label, sample and exemplar slices, the series
/// and metadata so far, and the counts of what 2.0 adds.
struct Fill<'a> {
    labels: &'a mut [LabelRef<'a>],
    samples: &'a mut [Sample],
    exemplars: ExemplarSlots<'a>,
    histograms: &'a mut [HistogramRef<'a>],
    timeseries: bumpalo::collections::Vec<'a, TimeSeriesRef<'a>>,
    metadata: bumpalo::collections::Vec<'a, MetadataRef<'a>>,
    out: WriteRequestV2Ref<'a>,
}

impl<'a> Fill<'a> {
    /// Decodes the series `raw` on the fast path; `false` (nothing taken) when the fast path declines it.
    fn canonical_series(&mut self, symbols: &[&'a str], raw: &[u8]) -> bool {
        let Some(filled) = canonical::fill_series(raw, symbols, self.labels, self.samples) else {
            return false;
        };
        let (labels, labels_rest) = std::mem::take(&mut self.labels).split_at_mut(filled.labels);
        let (samples, samples_rest) = std::mem::take(&mut self.samples).split_at_mut(filled.samples);
        (self.labels, self.samples) = (labels_rest, samples_rest);
        let expanded = V1_SERIES_OVERHEAD
            .saturating_add(filled.text)
            .saturating_add(filled.labels.saturating_mul(V1_LABEL_OVERHEAD))
            .saturating_add(filled.samples.saturating_mul(V1_SAMPLE_BYTES));
        self.out.expanded_bytes = self.out.expanded_bytes.saturating_add(expanded);
        self.timeseries.push(TimeSeriesRef {
            labels,
            samples,
            exemplars: &[],
            histograms: &[],
            created: 0,
            raw: &[],
        });
        true
    }

    /// Decodes the `timeseries` entry `field`, its label references resolved through `symbols`.
    fn series(&mut self, symbols: &[&'a str], field: &Field<'a>) -> Result<(), DecodeError> {
        let (raw, base) = len_payload(field, "io.prometheus.write.v2.Request.timeseries")?;
        if self.canonical_series(symbols, raw) {
            return Ok(());
        }
        let mut series = Series {
            labels: std::mem::take(&mut self.labels),
            samples: std::mem::take(&mut self.samples),
            label_count: 0,
            sample_count: 0,
            exemplars: std::mem::take(&mut self.exemplars.exemplars),
            exemplar_count: 0,
            histograms: std::mem::take(&mut self.histograms),
            histogram_count: 0,
            created: 0,
            first_start: 0,
        };
        let mut series_metadata = None;
        let mut expanded = V1_SERIES_OVERHEAD;
        // Exemplars and metadata: counted apart, as `expanded` is the label closure's.
        let mut extra = 0usize;
        // A name reference waiting for its value: pairs may span packed runs and unpacked fields.
        let mut name = None;
        let mut push_ref = |series: &mut Series<'a>, r: (u64, usize)| -> Result<(), DecodeError> {
            let symbol = resolve(symbols, r)?;
            match name.take() {
                None => name = Some(symbol),
                Some(name) => {
                    expanded = expanded.saturating_add(name.len() + symbol.len() + V1_LABEL_OVERHEAD);
                    series.push_label(LabelRef { name, value: symbol }, r.1)?;
                }
            }
            Ok(())
        };
        for field in Fields::new(raw, base, TIME_SERIES) {
            let field = field?;
            match (field.number, field.value) {
                (1, Value::Len(data, offset)) => {
                    for r in Refs::new(data, offset) {
                        push_ref(&mut series, r?)?;
                    }
                }
                (1, Value::Varint(index)) => push_ref(&mut series, (index, field.offset))?,
                (2, _) => {
                    let (data, offset) = len_payload(&field, "io.prometheus.write.v2.TimeSeries.samples")?;
                    let (sample, start) = decode_sample(data, offset)?;
                    if series.sample_count == 0 {
                        series.first_start = start;
                    }
                    series.push_sample(sample, offset)?;
                }
                (3, _) => {
                    let (data, offset) = len_payload(&field, "io.prometheus.write.v2.TimeSeries.histograms")?;
                    extra = extra.saturating_add(data.len() + V1_HISTOGRAM_OVERHEAD);
                    series.push_histogram(HistogramRef::check(data, offset, Version::V2)?, offset)?;
                }
                (4, _) => {
                    let (data, offset) = len_payload(&field, "io.prometheus.write.v2.TimeSeries.exemplars")?;
                    let exemplar = decode_exemplar(symbols, data, offset, &mut self.exemplars.labels)?;
                    let text: usize = exemplar
                        .labels
                        .iter()
                        .map(|l| l.name.len() + l.value.len() + V1_LABEL_OVERHEAD)
                        .sum();
                    extra = extra.saturating_add(text + V1_EXEMPLAR_BYTES);
                    series.push_exemplar(exemplar, offset)?;
                }
                (5, _) => {
                    let (data, offset) = len_payload(&field, "io.prometheus.write.v2.TimeSeries.metadata")?;
                    series_metadata = decode_metadata(symbols, data, offset)?;
                }
                // int64 is a two's-complement varint: the cast is the protobuf conversion.
                (6, Value::Varint(t)) => series.created = t as i64,
                _ => {}
            }
        }
        if let Some((kind, help, unit)) = series_metadata {
            let labels = &series.labels[..series.label_count];
            if let Some(name) = labels.iter().rev().find(|l| l.name == METRIC_NAME) {
                let m = MetadataRef {
                    family: name.value,
                    kind,
                    help,
                    unit,
                };
                extra = extra.saturating_add(m.text_len() + V1_METADATA_OVERHEAD);
                self.metadata.push(m);
            }
        }
        let samples_bytes = series.sample_count.saturating_mul(V1_SAMPLE_BYTES);
        self.out.expanded_bytes = self
            .out
            .expanded_bytes
            .saturating_add(expanded)
            .saturating_add(extra)
            .saturating_add(samples_bytes);
        let (ts, labels_rest, samples_rest, exemplars_rest, histograms_rest) = series.finish();
        self.histograms = histograms_rest;
        self.timeseries.push(ts);
        self.labels = labels_rest;
        self.samples = samples_rest;
        self.exemplars.exemplars = exemplars_rest;
        Ok(())
    }
}

/// A series' `Metadata` (type 1, help_ref 3, unit_ref 4) resolved, or `None` when it says nothing.
#[allow(clippy::type_complexity)]
fn decode_metadata<'a>(
    symbols: &[&'a str],
    buf: &[u8],
    base: usize,
) -> Result<Option<(MetricType, &'a str, &'a str)>, DecodeError> {
    let (mut kind, mut help, mut unit) = (MetricType::Unknown, "", "");
    for field in Fields::new(buf, base, METADATA) {
        let field = field?;
        match (field.number, field.value) {
            (1, Value::Varint(n)) => kind = MetricType::from_wire(n),
            (3, Value::Varint(r)) => help = resolve(symbols, (r, field.offset))?,
            (4, Value::Varint(r)) => unit = resolve(symbols, (r, field.offset))?,
            (1, _) => return Err(field.wrong_type("io.prometheus.write.v2.Metadata.type", WIRE_VARINT)),
            (3, _) => return Err(field.wrong_type("io.prometheus.write.v2.Metadata.help_ref", WIRE_VARINT)),
            (4, _) => return Err(field.wrong_type("io.prometheus.write.v2.Metadata.unit_ref", WIRE_VARINT)),
            _ => {}
        }
    }
    let says_something = kind != MetricType::Unknown || !help.is_empty() || !unit.is_empty();
    Ok(says_something.then_some((kind, help, unit)))
}

/// An `Exemplar` (labels_refs 1, value 2, timestamp 3) with its labels resolved into the front of `labels`.
fn decode_exemplar<'a>(
    symbols: &[&'a str],
    buf: &[u8],
    base: usize,
    labels: &mut &'a mut [LabelRef<'a>],
) -> Result<ExemplarRef<'a>, DecodeError> {
    let (mut n, mut name) = (0usize, None);
    let (mut value, mut t) = (0.0, 0i64);
    let mut push_ref = |labels: &mut &'a mut [LabelRef<'a>], r: (u64, usize)| -> Result<(), DecodeError> {
        let symbol = resolve(symbols, r)?;
        match name.take() {
            None => name = Some(symbol),
            Some(name) => {
                *labels.get_mut(n).ok_or(DecodeError::ShapeChanged { offset: r.1 })? = LabelRef { name, value: symbol };
                n += 1;
            }
        }
        Ok(())
    };
    for field in Fields::new(buf, base, EXEMPLAR) {
        let field = field?;
        match (field.number, field.value) {
            (1, Value::Len(data, offset)) => {
                for r in Refs::new(data, offset) {
                    push_ref(labels, r?)?;
                }
            }
            (1, Value::Varint(index)) => push_ref(labels, (index, field.offset))?,
            (2, Value::Fixed64(bits)) => value = f64::from_bits(bits),
            (2, _) => return Err(field.wrong_type("io.prometheus.write.v2.Exemplar.value", WIRE_FIXED64)),
            // int64 is a two's-complement varint: the cast is the protobuf conversion.
            (3, Value::Varint(v)) => t = v as i64,
            (3, _) => return Err(field.wrong_type("io.prometheus.write.v2.Exemplar.timestamp", WIRE_VARINT)),
            _ => {}
        }
    }
    let (mine, rest) = std::mem::take(labels).split_at_mut(n);
    *labels = rest;
    Ok(ExemplarRef { labels: mine, value, t })
}

/// One series being filled: the unfilled rest of the request's label and sample slices, and its counts.
struct Series<'a> {
    labels: &'a mut [LabelRef<'a>],
    samples: &'a mut [Sample],
    label_count: usize,
    sample_count: usize,
    exemplars: &'a mut [ExemplarRef<'a>],
    exemplar_count: usize,
    histograms: &'a mut [HistogramRef<'a>],
    histogram_count: usize,
    /// The series' `created_timestamp`, 0 when absent.
    created: i64,
    /// The first sample's `start_timestamp`, 0 when absent.
    first_start: i64,
}

impl<'a> Series<'a> {
    fn push_label(&mut self, label: LabelRef<'a>, at: usize) -> Result<(), DecodeError> {
        let mut rest = &mut self.labels[self.label_count..];
        *next_slot(&mut rest, at)? = label;
        self.label_count += 1;
        Ok(())
    }

    fn push_sample(&mut self, sample: Sample, at: usize) -> Result<(), DecodeError> {
        let mut rest = &mut self.samples[self.sample_count..];
        *next_slot(&mut rest, at)? = sample;
        self.sample_count += 1;
        Ok(())
    }

    fn push_exemplar(&mut self, exemplar: ExemplarRef<'a>, at: usize) -> Result<(), DecodeError> {
        let mut rest = &mut self.exemplars[self.exemplar_count..];
        *next_slot(&mut rest, at)? = exemplar;
        self.exemplar_count += 1;
        Ok(())
    }

    fn push_histogram(&mut self, histogram: HistogramRef<'a>, at: usize) -> Result<(), DecodeError> {
        let mut rest = &mut self.histograms[self.histogram_count..];
        *next_slot(&mut rest, at)? = histogram;
        self.histogram_count += 1;
        Ok(())
    }

    /// The series' view and the rest of the slices for the next series.
    #[allow(clippy::type_complexity)]
    fn finish(
        self,
    ) -> (
        TimeSeriesRef<'a>,
        &'a mut [LabelRef<'a>],
        &'a mut [Sample],
        &'a mut [ExemplarRef<'a>],
        &'a mut [HistogramRef<'a>],
    ) {
        let (labels, labels_rest) = self.labels.split_at_mut(self.label_count);
        let (samples, samples_rest) = self.samples.split_at_mut(self.sample_count);
        let (exemplars, exemplars_rest) = self.exemplars.split_at_mut(self.exemplar_count);
        let (histograms, histograms_rest) = self.histograms.split_at_mut(self.histogram_count);
        let ts = TimeSeriesRef {
            labels,
            samples,
            exemplars,
            histograms,
            created: if self.created != 0 {
                self.created
            } else {
                self.first_start
            },
            raw: &[],
        };
        (ts, labels_rest, samples_rest, exemplars_rest, histograms_rest)
    }
}

/// The symbol a reference names.
fn resolve<'a>(symbols: &[&'a str], (index, offset): (u64, usize)) -> Result<&'a str, DecodeError> {
    usize::try_from(index)
        .ok()
        .and_then(|i| symbols.get(i).copied())
        .ok_or(DecodeError::SymbolOutOfRange {
            index,
            symbols: symbols.len(),
            offset,
        })
}

/// A `Sample` (value 1, timestamp 2, start_timestamp 3) and its start timestamp (0 when absent).
fn decode_sample(buf: &[u8], base: usize) -> Result<(Sample, i64), DecodeError> {
    if let Some(sample) = super::canonical::sample(buf) {
        return Ok((sample, 0));
    }
    decode_sample_of(
        buf,
        base,
        SAMPLE,
        [
            "io.prometheus.write.v2.Sample.value",
            "io.prometheus.write.v2.Sample.timestamp",
        ],
        Some("io.prometheus.write.v2.Sample.start_timestamp"),
    )
}

/// The number of varints in a packed `labels_refs` payload: the bytes without the continuation bit, each the
/// last byte of one varint. A payload whose last varint is cut short gets [`Refs`]' error; an overlong varint
/// is counted here and refused by the fill pass, which decodes each one.
fn count_refs(data: &[u8], offset: usize) -> Result<usize, DecodeError> {
    if data.last().is_some_and(|&b| b >= 0x80)
        && let Some(Err(e)) = Refs::new(data, offset).find(Result::is_err)
    {
        return Err(e);
    }
    Ok(data.iter().filter(|&&b| b < 0x80).count())
}

/// The varints of a packed `labels_refs` payload, each with its absolute offset.
struct Refs<'a> {
    buf: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> Refs<'a> {
    fn new(buf: &'a [u8], base: usize) -> Self {
        Self { buf, pos: 0, base }
    }
}

impl Iterator for Refs<'_> {
    type Item = Result<(u64, usize), DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.buf.len() {
            return None;
        }
        let offset = self.base + self.pos;
        // One or two bytes: every reference into a table of up to 16,384 symbols.
        match self.buf[self.pos..] {
            [b, ..] if b < 0x80 => {
                self.pos += 1;
                return Some(Ok((u64::from(b), offset)));
            }
            [b0, b1, ..] if b1 < 0x80 => {
                self.pos += 2;
                return Some(Ok((u64::from(b0 & 0x7f) | u64::from(b1) << 7, offset)));
            }
            _ => {}
        }
        let mut value = 0u64;
        for i in 0..10 {
            let Some(&byte) = self.buf.get(self.pos) else {
                self.pos = self.buf.len();
                return Some(Err(DecodeError::Truncated {
                    message: TIME_SERIES,
                    field: 1,
                    what: "packed label reference",
                    offset,
                    needed: i + 1,
                    available: i,
                }));
            };
            self.pos += 1;
            if i == 9 && byte > 1 {
                break;
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Some(Ok((value, offset)));
            }
        }
        self.pos = self.buf.len();
        Some(Err(DecodeError::VarintOverflow {
            message: TIME_SERIES,
            what: "packed label reference",
            offset,
        }))
    }
}

#[cfg(test)]
mod tests;
