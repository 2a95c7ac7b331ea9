//! Decoding a `prometheus.WriteRequest` into borrowed views.
//!
//! Two passes. [`measure_write_request`] walks the request and its series (not the labels' and samples'
//! insides), checks their framing and counts series, labels and samples: the exact size of the decoded view,
//! known before a byte of it is allocated, so a caller can reserve it against a memory budget first. The
//! second pass allocates three arena slices at their final size (series, all labels, all samples) and fills
//! them; each series borrows its run of labels and samples.
//!
//! Each pass starts on the fast path for the canonical encoding ([`super::canonical`]) and hands a series,
//! or the rest of the request, to the general [`Fields`] walker at the first byte the fast path declines, so
//! the view and every error are the general walker's own. The measure pass still checks all framing before
//! the fill pass looks inside a label, so which error a bad request gets does not depend on the path.
//!
//! # Bounded amplification
//!
//! The decoded view costs [`TimeSeriesRef`] (88 bytes) per series, [`LabelRef`] (32) per label,
//! [`Sample`] (16) per sample and [`HistogramRef`] (40) per native histogram, on a 64-bit target, against at
//! least 2 bytes of input each (an empty message is a tag and a zero length). A request of empty labels or
//! empty series would therefore decode to 16 or 44 times its size. [`measure_write_request`] refuses ([`DecodeError::Degenerate`]) a request whose view
//! would exceed [`MAX_DECODED_BYTES_PER_INPUT_BYTE`] times its input (plus a small
//! [`DECODED_BYTES_ALLOWANCE`] so tiny requests always pass), before anything is allocated. Real
//! requests stay far below: a label of one-character name and value is 8 bytes on the wire for 32 decoded (4x), a
//! sample with a timestamp at least 9 bytes for 16 (under 2x), so the bound only refuses requests made mostly
//! of empty messages, which carry nothing a series could be built from.

use super::canonical;
use super::histogram::{HistogramRef, Version};
use super::wire::{Field, Fields, Value, WIRE_FIXED64, WIRE_LEN, WIRE_VARINT, check_message};
use crate::error::DecodeError;
use bumpalo::Bump;
use heddle_model::{ExemplarRef, LabelRef, MetadataRef, MetricType, Sample};
use std::mem::size_of;

/// The most bytes the decoded view of a request may take per byte of (decompressed) input. With the input
/// itself, a decoded request holds at most `1 + MAX_DECODED_BYTES_PER_INPUT_BYTE` times its decompressed
/// size in its arena. 8 is what a series of empty samples costs (16 bytes for 2); anything denser in decoded
/// bytes is made of empty labels or empty series.
pub const MAX_DECODED_BYTES_PER_INPUT_BYTE: usize = 8;

/// Decoded bytes every request may use whatever its size, so that a tiny request (one series of one short
/// label is 10 bytes on the wire and 88 decoded) is never refused; the ratio matters for large ones.
pub const DECODED_BYTES_ALLOWANCE: usize = 64 * 1024;

/// The most decoded-view bytes [`measure_write_request`] lets a request of `input_bytes` (decompressed) take:
/// `MAX_DECODED_BYTES_PER_INPUT_BYTE * input_bytes + DECODED_BYTES_ALLOWANCE`.
pub fn max_decoded_bytes(input_bytes: usize) -> usize {
    input_bytes
        .saturating_mul(MAX_DECODED_BYTES_PER_INPUT_BYTE)
        .saturating_add(DECODED_BYTES_ALLOWANCE)
}

/// A decoded remote-write request whose strings and raw series bytes borrow from the request body.
#[derive(Debug)]
pub struct WriteRequestRef<'a> {
    /// The series, in wire order.
    pub timeseries: &'a [TimeSeriesRef<'a>],
    /// The `MetricMetadata` entries, in wire order; not validated here.
    pub metadata: &'a [MetadataRef<'a>],
}

/// One decoded series of a [`WriteRequestRef`].
#[derive(Debug, Clone, Copy)]
pub struct TimeSeriesRef<'a> {
    /// Labels in wire order, pointing into the body; not sorted, deduplicated or validated here.
    pub labels: &'a [LabelRef<'a>],
    /// Samples in wire order, values bit-exact (stale-marker NaNs survive).
    pub samples: &'a [Sample],
    /// Exemplars in wire order; their labels are neither sorted nor validated here.
    pub exemplars: &'a [ExemplarRef<'a>],
    /// Native histograms in wire order, checked but still encoded: [`HistogramRef::decode`] gives the owned
    /// sample.
    pub histograms: &'a [HistogramRef<'a>],
    /// When the series' counter (or histogram, or summary) started, in milliseconds; 0 when the sender said
    /// nothing. Remote write 2.0's created timestamp (a `TimeSeries.created_timestamp`, or since 2.0-rc.4
    /// the first sample's `start_timestamp`), OTLP's start time; in 1.0 bodies `TimeSeries` field 6 (an
    /// `int64`, the field Mimir's internal `TimeSeries` gives it), which Prometheus' own 1.0 schema leaves
    /// free: it is how the distributor forwards the timestamp to the ingesters.
    pub created: i64,
    /// The encoded `TimeSeries` message: the payload of the `WriteRequest.timeseries` field, without its tag
    /// and length. Forward it with [`super::encode_write_request_raw`] to avoid re-encoding. Empty for a
    /// series decoded from a remote write 2.0 request, which has no 1.0 encoding: such a series must be
    /// re-encoded (an empty 1.0 series has no labels, so it never reaches forwarding).
    pub raw: &'a [u8],
}

/// What [`measure_write_request`] found: the counts that size the decoded view.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteRequestShape {
    /// `TimeSeries` messages.
    pub series: usize,
    /// `Label` messages, all series together.
    pub labels: usize,
    /// `Sample` messages, all series together.
    pub samples: usize,
    /// `MetricMetadata` messages.
    pub metadata: usize,
    /// `Exemplar` messages, all series together.
    pub exemplars: usize,
    /// Labels of exemplars, all exemplars together.
    pub exemplar_labels: usize,
    /// Native histograms, all series together.
    pub histograms: usize,
    /// Bytes of the measured (decompressed) input.
    pub input_bytes: usize,
}

impl WriteRequestShape {
    /// The arena bytes the decoded view takes: exact, not an estimate (plus at most a few bytes of
    /// alignment per slice).
    pub fn decoded_bytes(&self) -> usize {
        self.series
            .saturating_mul(size_of::<TimeSeriesRef<'_>>())
            .saturating_add(self.labels.saturating_mul(size_of::<LabelRef<'_>>()))
            .saturating_add(self.samples.saturating_mul(size_of::<Sample>()))
            .saturating_add(self.exemplars.saturating_mul(size_of::<ExemplarRef<'_>>()))
            .saturating_add(self.exemplar_labels.saturating_mul(size_of::<LabelRef<'_>>()))
            .saturating_add(self.metadata.saturating_mul(size_of::<MetadataRef<'_>>()))
            .saturating_add(self.histograms.saturating_mul(size_of::<HistogramRef<'_>>()))
    }
}

/// A request that passed [`measure_write_request`]: decode it with [`decode_measured`].
#[derive(Debug, Clone, Copy)]
pub struct MeasuredWriteRequest<'a> {
    body: &'a [u8],
    shape: WriteRequestShape,
}

impl MeasuredWriteRequest<'_> {
    /// The counts and the exact decoded size.
    pub fn shape(&self) -> &WriteRequestShape {
        &self.shape
    }
}

const WRITE_REQUEST: &str = "prometheus.WriteRequest";
const TIME_SERIES: &str = "prometheus.TimeSeries";
const LABEL: &str = "prometheus.Label";
const SAMPLE: &str = "prometheus.Sample";
const EXEMPLAR: &str = "prometheus.Exemplar";
const METADATA: &str = "prometheus.MetricMetadata";
/// `TimeSeries.created_timestamp` (see [`TimeSeriesRef::created`]), which the distributor writes when it
/// re-encodes a series.
pub const CREATED_TIMESTAMP_FIELD: u32 = 6;

/// Decodes an uncompressed `prometheus.WriteRequest`: [`measure_write_request`] then [`decode_measured`].
pub fn decode_write_request<'a>(arena: &'a Bump, body: &'a [u8]) -> Result<WriteRequestRef<'a>, DecodeError> {
    decode_measured(arena, measure_write_request(body)?)
}

/// The first pass: checks the framing of the request and of its series (unknown fields of any wire type are
/// skipped; known fields with a wrong wire type and malformed framing are errors) and counts what the decoded
/// view will hold, allocating nothing. A request whose view would exceed [`max_decoded_bytes`]
/// times its size is refused with [`DecodeError::Degenerate`].
pub fn measure_write_request(body: &[u8]) -> Result<MeasuredWriteRequest<'_>, DecodeError> {
    measure(body, Path::Canonical)
}

/// Which reader a pass starts with: the canonical fast path (the general walker takes over at the first
/// series or field it declines), or the general walker alone. Both give the same answer on every input; the
/// general-only path exists so that tests can prove it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Path {
    Canonical,
    // Only tests take the general path alone.
    #[cfg_attr(not(test), allow(dead_code))]
    General,
}

pub(crate) fn measure(body: &[u8], path: Path) -> Result<MeasuredWriteRequest<'_>, DecodeError> {
    let mut shape = WriteRequestShape {
        input_bytes: body.len(),
        ..WriteRequestShape::default()
    };
    let general_from = match path {
        Path::Canonical => measure_canonical(body, &mut shape)?,
        Path::General => 0,
    };
    let rest = body.get(general_from..).unwrap_or_default();
    for field in Fields::new(rest, general_from, WRITE_REQUEST) {
        let field = field?;
        match field.number {
            1 => {
                let (data, offset) = len_payload(&field, "prometheus.WriteRequest.timeseries")?;
                measure_series(data, offset, &mut shape)?;
                shape.series += 1;
            }
            3 => {
                let (data, offset) = len_payload(&field, "prometheus.WriteRequest.metadata")?;
                check_message(data, offset, "prometheus.MetricMetadata")?;
                shape.metadata += 1;
            }
            _ => {}
        }
    }
    if shape.decoded_bytes() > max_decoded_bytes(body.len()) {
        return Err(DecodeError::Degenerate {
            decoded: shape.decoded_bytes(),
            input: body.len(),
            ratio: MAX_DECODED_BYTES_PER_INPUT_BYTE,
            series: shape.series,
            labels: shape.labels,
            samples: shape.samples,
        });
    }
    Ok(MeasuredWriteRequest { body, shape })
}

/// The measure pass's fast path: counts the leading run of canonical `timeseries` fields of `body` into
/// `shape` and returns the offset of the first field it leaves to the general walker (`body.len()` when
/// none). A series whose own fields are not canonical is measured by the general walker on the spot, with the
/// same result (and the same error) the general walk would have reached at that series.
fn measure_canonical(body: &[u8], shape: &mut WriteRequestShape) -> Result<usize, DecodeError> {
    let mut rest = body;
    while let [canonical::TAG_1_LEN, tail @ ..] = rest {
        let Some((series, tail)) = canonical::length_delimited(tail) else {
            break;
        };
        match canonical::count_series(series) {
            Some((labels, samples)) => {
                shape.labels += labels;
                shape.samples += samples;
            }
            None => measure_series(series, body.len() - tail.len() - series.len(), shape)?,
        }
        shape.series += 1;
        rest = tail;
    }
    Ok(body.len() - rest.len())
}

/// The second pass: allocates the view at its measured size in `arena` and fills it. Label strings must be
/// UTF-8; samples must have their declared wire types.
pub fn decode_measured<'a>(
    arena: &'a Bump,
    measured: MeasuredWriteRequest<'a>,
) -> Result<WriteRequestRef<'a>, DecodeError> {
    fill(arena, measured, Path::Canonical)
}

pub(crate) fn fill<'a>(
    arena: &'a Bump,
    measured: MeasuredWriteRequest<'a>,
    path: Path,
) -> Result<WriteRequestRef<'a>, DecodeError> {
    let MeasuredWriteRequest { body, shape } = measured;
    let mut labels: &'a mut [LabelRef<'a>] =
        arena.alloc_slice_fill_copy(shape.labels, LabelRef { name: "", value: "" });
    let mut samples: &'a mut [Sample] = arena.alloc_slice_fill_copy(shape.samples, Sample { t: 0, v: 0.0 });
    let mut exemplars = ExemplarSlots::new(arena, shape.exemplars, shape.exemplar_labels);
    let mut histograms = histogram_slots(arena, shape.histograms);
    let mut timeseries = bumpalo::collections::Vec::with_capacity_in(shape.series, arena);
    let mut metadata = bumpalo::collections::Vec::with_capacity_in(shape.metadata, arena);

    // The fast path, over the leading run of `timeseries` fields; a series it declines is decoded by the
    // general walker in its place.
    let mut rest = body;
    if path == Path::Canonical {
        while let [canonical::TAG_1_LEN, tail @ ..] = rest {
            let Some((raw, tail)) = canonical::length_delimited(tail) else {
                break;
            };
            let (series, labels_rest, samples_rest) = match canonical::fill_series(raw, labels, samples) {
                Some((label_count, sample_count)) => {
                    let (mine, labels_rest) = labels.split_at_mut(label_count);
                    let (my_samples, samples_rest) = samples.split_at_mut(sample_count);
                    let series = TimeSeriesRef {
                        labels: mine,
                        samples: my_samples,
                        exemplars: &[],
                        histograms: &[],
                        created: 0,
                        raw,
                    };
                    (series, labels_rest, samples_rest)
                }
                None => decode_series(
                    raw,
                    body.len() - tail.len() - raw.len(),
                    labels,
                    samples,
                    &mut exemplars,
                    &mut histograms,
                )?,
            };
            labels = labels_rest;
            samples = samples_rest;
            timeseries.push(series);
            rest = tail;
        }
    }

    let general_from = body.len() - rest.len();
    for field in Fields::new(rest, general_from, WRITE_REQUEST) {
        let field = field?;
        match field.number {
            1 => {
                let (data, offset) = len_payload(&field, "prometheus.WriteRequest.timeseries")?;
                let (series, labels_rest, samples_rest) =
                    decode_series(data, offset, labels, samples, &mut exemplars, &mut histograms)?;
                labels = labels_rest;
                samples = samples_rest;
                timeseries.push(series);
            }
            3 => {
                let (data, offset) = len_payload(&field, "prometheus.WriteRequest.metadata")?;
                metadata.push(decode_metadata(data, offset)?);
            }
            _ => {}
        }
    }
    debug_assert_eq!(timeseries.len(), shape.series);
    debug_assert!(
        labels.is_empty() && samples.is_empty() && exemplars.is_empty() && histograms.is_empty(),
        "the fill pass used what the measure pass counted"
    );
    Ok(WriteRequestRef {
        timeseries: timeseries.into_bump_slice(),
        metadata: metadata.into_bump_slice(),
    })
}

/// The unfilled rest of a request's exemplar and exemplar-label slices.
pub(super) struct ExemplarSlots<'a> {
    pub(super) exemplars: &'a mut [ExemplarRef<'a>],
    pub(super) labels: &'a mut [LabelRef<'a>],
}

impl<'a> ExemplarSlots<'a> {
    pub(super) fn new(arena: &'a Bump, exemplars: usize, labels: usize) -> Self {
        Self {
            exemplars: arena.alloc_slice_fill_copy(
                exemplars,
                ExemplarRef {
                    labels: &[],
                    value: 0.0,
                    t: 0,
                },
            ),
            labels: arena.alloc_slice_fill_copy(labels, LabelRef { name: "", value: "" }),
        }
    }

    fn is_empty(&self) -> bool {
        self.exemplars.is_empty() && self.labels.is_empty()
    }
}

/// The request's histogram slots, to be filled in order; an empty slot is never read.
pub(super) fn histogram_slots(arena: &Bump, n: usize) -> &mut [HistogramRef<'_>] {
    arena.alloc_slice_fill_copy(n, HistogramRef::EMPTY)
}

/// Decodes a `prometheus.Exemplar` (labels 1, value 2, timestamp 3; also remote write 2.0's labels-less
/// layout once its labels are resolved), its labels taken from the front of `labels`.
pub(super) fn decode_exemplar<'a>(
    buf: &'a [u8],
    base: usize,
    labels: &mut &'a mut [LabelRef<'a>],
) -> Result<ExemplarRef<'a>, DecodeError> {
    let mut n = 0usize;
    let (mut value, mut t) = (0.0, 0i64);
    for field in Fields::new(buf, base, EXEMPLAR) {
        let field = field?;
        match (field.number, field.value) {
            (1, _) => {
                let (data, offset) = len_payload(&field, "prometheus.Exemplar.labels")?;
                *labels.get_mut(n).ok_or(DecodeError::ShapeChanged { offset })? = decode_label(data, offset)?;
                n += 1;
            }
            (2, Value::Fixed64(bits)) => value = f64::from_bits(bits),
            (2, _) => return Err(field.wrong_type("prometheus.Exemplar.value", WIRE_FIXED64)),
            // int64 is a two's-complement varint: the cast is the protobuf conversion.
            (3, Value::Varint(v)) => t = v as i64,
            (3, _) => return Err(field.wrong_type("prometheus.Exemplar.timestamp", WIRE_VARINT)),
            _ => {}
        }
    }
    let (mine, rest) = std::mem::take(labels).split_at_mut(n);
    *labels = rest;
    Ok(ExemplarRef { labels: mine, value, t })
}

fn decode_metadata(buf: &[u8], base: usize) -> Result<MetadataRef<'_>, DecodeError> {
    let mut m = MetadataRef {
        family: "",
        kind: MetricType::Unknown,
        help: "",
        unit: "",
    };
    for field in Fields::new(buf, base, METADATA) {
        let field = field?;
        match (field.number, field.value) {
            (1, Value::Varint(n)) => m.kind = MetricType::from_wire(n),
            (1, _) => return Err(field.wrong_type("prometheus.MetricMetadata.type", WIRE_VARINT)),
            (2, _) => m.family = utf8(&field, "prometheus.MetricMetadata.metric_family_name")?,
            (4, _) => m.help = utf8(&field, "prometheus.MetricMetadata.help")?,
            (5, _) => m.unit = utf8(&field, "prometheus.MetricMetadata.unit")?,
            _ => {}
        }
    }
    Ok(m)
}

/// The payload of a length-delimited field, or the wrong-wire-type error naming it.
pub(super) fn len_payload<'a>(field: &Field<'a>, what: &'static str) -> Result<(&'a [u8], usize), DecodeError> {
    match field.value {
        Value::Len(data, offset) => Ok((data, offset)),
        _ => Err(field.wrong_type(what, WIRE_LEN)),
    }
}

fn measure_series(raw: &[u8], base: usize, shape: &mut WriteRequestShape) -> Result<(), DecodeError> {
    for field in Fields::new(raw, base, TIME_SERIES) {
        let field = field?;
        match field.number {
            1 => {
                len_payload(&field, "prometheus.TimeSeries.labels")?;
                shape.labels += 1;
            }
            2 => {
                len_payload(&field, "prometheus.TimeSeries.samples")?;
                shape.samples += 1;
            }
            3 => {
                let (data, offset) = len_payload(&field, "prometheus.TimeSeries.exemplars")?;
                for field in Fields::new(data, offset, EXEMPLAR) {
                    if field?.number == 1 {
                        shape.exemplar_labels += 1;
                    }
                }
                shape.exemplars += 1;
            }
            4 => {
                let (data, offset) = len_payload(&field, "prometheus.TimeSeries.histograms")?;
                check_message(data, offset, "prometheus.Histogram")?;
                shape.histograms += 1;
            }
            _ => {}
        }
    }
    Ok(())
}

/// The series fields' ways of filling a slot: the measure pass counted the slots, so running out means the
/// body changed between the passes, which the borrow of the body rules out; it is an error, not a panic.
pub(super) fn next_slot<'s, T>(rest: &mut &'s mut [T], at: usize) -> Result<&'s mut T, DecodeError> {
    let (first, tail) = std::mem::take(rest)
        .split_first_mut()
        .ok_or(DecodeError::ShapeChanged { offset: at })?;
    *rest = tail;
    Ok(first)
}

type DecodedSeries<'a> = (TimeSeriesRef<'a>, &'a mut [LabelRef<'a>], &'a mut [Sample]);

fn decode_series<'a>(
    raw: &'a [u8],
    base: usize,
    labels: &'a mut [LabelRef<'a>],
    samples: &'a mut [Sample],
    exemplars: &mut ExemplarSlots<'a>,
    histograms: &mut &'a mut [HistogramRef<'a>],
) -> Result<DecodedSeries<'a>, DecodeError> {
    let (mut label_rest, mut sample_rest) = (&mut *labels, &mut *samples);
    let (mut label_count, mut sample_count, mut exemplar_count) = (0usize, 0usize, 0usize);
    let mut histogram_count = 0usize;
    let mut created = 0i64;
    for field in Fields::new(raw, base, TIME_SERIES) {
        let field = field?;
        match field.number {
            1 => {
                let (data, offset) = len_payload(&field, "prometheus.TimeSeries.labels")?;
                *next_slot(&mut label_rest, offset)? = decode_label(data, offset)?;
                label_count += 1;
            }
            2 => {
                let (data, offset) = len_payload(&field, "prometheus.TimeSeries.samples")?;
                *next_slot(&mut sample_rest, offset)? = decode_sample(data, offset)?;
                sample_count += 1;
            }
            3 => {
                let (data, offset) = len_payload(&field, "prometheus.TimeSeries.exemplars")?;
                let exemplar = decode_exemplar(data, offset, &mut exemplars.labels)?;
                *exemplars
                    .exemplars
                    .get_mut(exemplar_count)
                    .ok_or(DecodeError::ShapeChanged { offset })? = exemplar;
                exemplar_count += 1;
            }
            4 => {
                let (data, offset) = len_payload(&field, "prometheus.TimeSeries.histograms")?;
                *histograms
                    .get_mut(histogram_count)
                    .ok_or(DecodeError::ShapeChanged { offset })? = HistogramRef::check(data, offset, Version::V1)?;
                histogram_count += 1;
            }
            // int64 is a two's-complement varint: the cast is the protobuf conversion. Prometheus' 1.0 schema has
            // no field 6, so one of another wire type is skipped, as prost skips it.
            CREATED_TIMESTAMP_FIELD => {
                if let Value::Varint(t) = field.value {
                    created = t as i64;
                }
            }
            _ => {}
        }
    }
    let (mine, label_rest) = labels.split_at_mut(label_count);
    let (my_samples, sample_rest) = samples.split_at_mut(sample_count);
    let (my_exemplars, exemplar_rest) = std::mem::take(&mut exemplars.exemplars).split_at_mut(exemplar_count);
    exemplars.exemplars = exemplar_rest;
    let (my_histograms, histogram_rest) = std::mem::take(histograms).split_at_mut(histogram_count);
    *histograms = histogram_rest;
    let series = TimeSeriesRef {
        labels: mine,
        samples: my_samples,
        exemplars: my_exemplars,
        histograms: my_histograms,
        created,
        raw,
    };
    Ok((series, label_rest, sample_rest))
}

fn decode_label(buf: &[u8], base: usize) -> Result<LabelRef<'_>, DecodeError> {
    // Proto3 semantics: an absent string is "", a repeated scalar field keeps its last occurrence.
    let mut label = LabelRef { name: "", value: "" };
    for field in Fields::new(buf, base, LABEL) {
        let field = field?;
        match field.number {
            1 => label.name = utf8(&field, "prometheus.Label.name")?,
            2 => label.value = utf8(&field, "prometheus.Label.value")?,
            _ => {}
        }
    }
    Ok(label)
}

fn utf8<'a>(field: &Field<'a>, what: &'static str) -> Result<&'a str, DecodeError> {
    let (data, start) = len_payload(field, what)?;
    std::str::from_utf8(data).map_err(|e| DecodeError::InvalidUtf8 {
        field: what,
        start,
        offset: start + e.valid_up_to(),
    })
}

fn decode_sample(buf: &[u8], base: usize) -> Result<Sample, DecodeError> {
    let (sample, _) = decode_sample_of(
        buf,
        base,
        SAMPLE,
        ["prometheus.Sample.value", "prometheus.Sample.timestamp"],
        None,
    )?;
    Ok(sample)
}

/// A float sample (`value` = 1, double; `timestamp` = 2, int64: the same fields in remote write 1.0 and 2.0) of
/// the message `kind`, whose two fields are named `names` in messages; with `start` (the name of 2.0's
/// `start_timestamp`, field 3), also that field, 0 when absent.
pub(super) fn decode_sample_of(
    buf: &[u8],
    base: usize,
    kind: &'static str,
    names: [&'static str; 2],
    start: Option<&'static str>,
) -> Result<(Sample, i64), DecodeError> {
    let (mut sample, mut start_t) = (Sample { t: 0, v: 0.0 }, 0);
    for field in Fields::new(buf, base, kind) {
        let field = field?;
        // int64 is a two's-complement varint: the casts are the protobuf conversion.
        match (field.number, field.value, start) {
            (1, Value::Fixed64(bits), _) => sample.v = f64::from_bits(bits),
            (1, ..) => return Err(field.wrong_type(names[0], WIRE_FIXED64)),
            (2, Value::Varint(t), _) => sample.t = t as i64,
            (2, ..) => return Err(field.wrong_type(names[1], WIRE_VARINT)),
            (3, Value::Varint(t), Some(_)) => start_t = t as i64,
            (3, _, Some(name)) => return Err(field.wrong_type(name, WIRE_VARINT)),
            _ => {}
        }
    }
    Ok((sample, start_t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_a_hand_built_request() {
        // Label{name:"a", value:"b"}, Sample{value:1.5, timestamp:-1}, unknown field 9 varint in the series.
        let label = [0x0a, 1, b'a', 0x12, 1, b'b'];
        let mut sample = vec![0x09];
        sample.extend(1.5f64.to_le_bytes());
        sample.extend([0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        let mut series = vec![0x0a, label.len() as u8];
        series.extend(label);
        series.extend([0x12, sample.len() as u8]);
        series.extend(&sample);
        series.extend([0x48, 7]);
        let mut body = vec![0x0a, series.len() as u8];
        body.extend(&series);
        body.extend([0x1a, 0]);

        let arena = Bump::new();
        let req = decode_write_request(&arena, &body).unwrap();
        assert_eq!(req.metadata.len(), 1);
        assert_eq!(req.metadata[0].family, "");
        assert_eq!(req.timeseries.len(), 1);
        let ts = &req.timeseries[0];
        assert_eq!(ts.labels, &[LabelRef { name: "a", value: "b" }]);
        assert_eq!(ts.samples.len(), 1);
        assert!(ts.samples[0].bit_eq(&Sample { t: -1, v: 1.5 }));
        assert_eq!(ts.raw, series.as_slice());
    }

    #[test]
    fn a_created_timestamp_is_field_6_of_the_series() {
        // timeseries{labels{"a"="b"}, created_timestamp: -2 (ten-byte varint), sample{}} and one without.
        let mut series = vec![0x0a, 6, 0x0a, 1, b'a', 0x12, 1, b'b'];
        series.extend([0x30, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        series.extend([0x12, 0]);
        let mut body = vec![0x0a, series.len() as u8];
        body.extend(&series);
        body.extend([0x0a, 10, 0x0a, 6, 0x0a, 1, b'a', 0x12, 1, b'b', 0x12, 0]);
        let arena = Bump::new();
        let req = decode_write_request(&arena, &body).unwrap();
        let created: Vec<i64> = req.timeseries.iter().map(|t| t.created).collect();
        assert_eq!(created, [-2, 0]);
        assert_eq!(
            req.timeseries[0].raw,
            series.as_slice(),
            "forwarded as it came, field 6 included"
        );

        // Field 6 of another wire type is not Heddle's: skipped, as prost skips an unknown field.
        let other = [0x0a, 2, 0x32, 0];
        assert_eq!(decode_write_request(&arena, &other).unwrap().timeseries[0].created, 0);
    }

    #[test]
    fn errors_name_the_field_and_offset() {
        let arena = Bump::new();
        let cases: &[(&str, &[u8], DecodeError)] = &[
            (
                "bad utf-8 in label value",
                // timeseries{labels{name:"a", value:[0xff]}}
                &[0x0a, 8, 0x0a, 6, 0x0a, 1, b'a', 0x12, 1, 0xff],
                DecodeError::InvalidUtf8 {
                    field: "prometheus.Label.value",
                    start: 9,
                    offset: 9,
                },
            ),
            (
                "sample value as varint",
                &[0x0a, 4, 0x12, 2, 0x08, 1],
                DecodeError::WrongWireType {
                    what: "prometheus.Sample.value",
                    offset: 4,
                    found: 0,
                    expected: 1,
                },
            ),
            (
                "timeseries as varint",
                &[0x08, 1],
                DecodeError::WrongWireType {
                    what: "prometheus.WriteRequest.timeseries",
                    offset: 0,
                    found: 0,
                    expected: 2,
                },
            ),
            (
                "truncated series",
                &[0x0a, 9, 0x0a],
                DecodeError::LengthOverflow {
                    message: "prometheus.WriteRequest",
                    field: 1,
                    offset: 1,
                    len: 9,
                    available: 1,
                },
            ),
            (
                "label length past the series end",
                &[0x0a, 4, 0x0a, 3, 0, 0],
                DecodeError::LengthOverflow {
                    message: "prometheus.TimeSeries",
                    field: 1,
                    offset: 3,
                    len: 3,
                    available: 2,
                },
            ),
        ];
        for (name, body, want) in cases {
            assert_eq!(decode_write_request(&arena, body).unwrap_err(), *want, "case {name}");
        }
    }

    #[test]
    fn empty_body_is_an_empty_request() {
        let arena = Bump::new();
        let req = decode_write_request(&arena, &[]).unwrap();
        assert!(req.timeseries.is_empty());
        assert!(req.metadata.is_empty());
    }
}
