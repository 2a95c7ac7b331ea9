//! Decoding a `prometheus.WriteRequest` into borrowed views.
//!
//! Each message is walked twice: a first pass counts the repeated fields (and checks framing), so the arena
//! vectors are allocated once at their final size; the second pass fills them. Allocation is therefore bounded
//! by a constant factor of the input: every counted entry occupies at least 2 bytes of input.

use super::wire::{Field, Fields, Value, WIRE_FIXED64, WIRE_LEN, WIRE_VARINT, check_message};
use crate::error::DecodeError;
use bumpalo::Bump;
use bumpalo::collections::Vec as BumpVec;
use heddle_model::{LabelRef, Sample};

/// A decoded remote-write request whose strings and raw series bytes borrow from the request body.
#[derive(Debug)]
pub struct WriteRequestRef<'a> {
    /// The series, in wire order.
    pub timeseries: BumpVec<'a, TimeSeriesRef<'a>>,
    /// How many `MetricMetadata` entries the request carried; they are checked for framing, not decoded.
    pub metadata: usize,
}

/// One decoded series of a [`WriteRequestRef`].
#[derive(Debug)]
pub struct TimeSeriesRef<'a> {
    /// Labels in wire order, pointing into the body; not sorted, deduplicated or validated here.
    pub labels: BumpVec<'a, LabelRef<'a>>,
    /// Samples in wire order, values bit-exact (stale-marker NaNs survive).
    pub samples: BumpVec<'a, Sample>,
    /// Number of exemplars (framing checked, contents not decoded).
    pub exemplars: u32,
    /// Number of native histograms (framing checked, contents not decoded).
    pub histograms: u32,
    /// The encoded `TimeSeries` message: the payload of the `WriteRequest.timeseries` field, without its tag
    /// and length. Forward it with [`super::encode_write_request_raw`] to avoid re-encoding.
    pub raw: &'a [u8],
}

const WRITE_REQUEST: &str = "prometheus.WriteRequest";
const TIME_SERIES: &str = "prometheus.TimeSeries";
const LABEL: &str = "prometheus.Label";
const SAMPLE: &str = "prometheus.Sample";

/// Decodes an uncompressed `prometheus.WriteRequest`. Unknown fields of any wire type are skipped; known
/// fields with a wrong wire type, malformed framing and non-UTF-8 label strings are errors.
pub fn decode_write_request<'a>(arena: &'a Bump, body: &'a [u8]) -> Result<WriteRequestRef<'a>, DecodeError> {
    let mut series_count = 0usize;
    let mut metadata = 0usize;
    for field in Fields::new(body, 0, WRITE_REQUEST) {
        let field = field?;
        match field.number {
            1 => {
                len_payload(&field, "prometheus.WriteRequest.timeseries")?;
                series_count += 1;
            }
            3 => {
                let (data, offset) = len_payload(&field, "prometheus.WriteRequest.metadata")?;
                check_message(data, offset, "prometheus.MetricMetadata")?;
                metadata += 1;
            }
            _ => {}
        }
    }

    let mut timeseries = BumpVec::with_capacity_in(series_count, arena);
    for field in Fields::new(body, 0, WRITE_REQUEST) {
        let field = field?;
        if field.number == 1 {
            let (data, offset) = len_payload(&field, "prometheus.WriteRequest.timeseries")?;
            timeseries.push(decode_series(arena, data, offset)?);
        }
    }
    debug_assert_eq!(timeseries.len(), series_count);
    Ok(WriteRequestRef { timeseries, metadata })
}

/// The payload of a length-delimited field, or the wrong-wire-type error naming it.
fn len_payload<'a>(field: &Field<'a>, what: &'static str) -> Result<(&'a [u8], usize), DecodeError> {
    match field.value {
        Value::Len(data, offset) => Ok((data, offset)),
        _ => Err(field.wrong_type(what, WIRE_LEN)),
    }
}

fn decode_series<'a>(arena: &'a Bump, raw: &'a [u8], base: usize) -> Result<TimeSeriesRef<'a>, DecodeError> {
    let (mut labels, mut samples) = (0usize, 0usize);
    let (mut exemplars, mut histograms) = (0u32, 0u32);
    for field in Fields::new(raw, base, TIME_SERIES) {
        let field = field?;
        match field.number {
            1 => {
                len_payload(&field, "prometheus.TimeSeries.labels")?;
                labels += 1;
            }
            2 => {
                len_payload(&field, "prometheus.TimeSeries.samples")?;
                samples += 1;
            }
            3 => {
                let (data, offset) = len_payload(&field, "prometheus.TimeSeries.exemplars")?;
                check_message(data, offset, "prometheus.Exemplar")?;
                exemplars = exemplars.saturating_add(1);
            }
            4 => {
                let (data, offset) = len_payload(&field, "prometheus.TimeSeries.histograms")?;
                check_message(data, offset, "prometheus.Histogram")?;
                histograms = histograms.saturating_add(1);
            }
            _ => {}
        }
    }

    let mut series = TimeSeriesRef {
        labels: BumpVec::with_capacity_in(labels, arena),
        samples: BumpVec::with_capacity_in(samples, arena),
        exemplars,
        histograms,
        raw,
    };
    for field in Fields::new(raw, base, TIME_SERIES) {
        let field = field?;
        match field.number {
            1 => {
                let (data, offset) = len_payload(&field, "prometheus.TimeSeries.labels")?;
                series.labels.push(decode_label(data, offset)?);
            }
            2 => {
                let (data, offset) = len_payload(&field, "prometheus.TimeSeries.samples")?;
                series.samples.push(decode_sample(data, offset)?);
            }
            _ => {}
        }
    }
    Ok(series)
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
    let mut sample = Sample { t: 0, v: 0.0 };
    for field in Fields::new(buf, base, SAMPLE) {
        let field = field?;
        match (field.number, field.value) {
            (1, Value::Fixed64(bits)) => sample.v = f64::from_bits(bits),
            (1, _) => return Err(field.wrong_type("prometheus.Sample.value", WIRE_FIXED64)),
            // int64 is a two's-complement varint: the cast is the protobuf conversion.
            (2, Value::Varint(t)) => sample.t = t as i64,
            (2, _) => return Err(field.wrong_type("prometheus.Sample.timestamp", WIRE_VARINT)),
            _ => {}
        }
    }
    Ok(sample)
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
        assert_eq!(req.metadata, 1);
        assert_eq!(req.timeseries.len(), 1);
        let ts = &req.timeseries[0];
        assert_eq!(ts.labels.as_slice(), &[LabelRef { name: "a", value: "b" }]);
        assert_eq!(ts.samples.len(), 1);
        assert!(ts.samples[0].bit_eq(&Sample { t: -1, v: 1.5 }));
        assert_eq!(ts.raw, series.as_slice());
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
        assert_eq!(req.metadata, 0);
    }
}
