//! WAL record encoding, byte-compatible with Prometheus (`tsdb/record`).
//!
//! A record is what one [`heddle_wal::Wal::log`] entry holds; this module knows nothing of files, pages or
//! segments. All fixed-width integers are big-endian; `uvarint` is LEB128, `varint` is zigzag LEB128 (Go's
//! `binary.PutVarint`).
//!
//! ```text
//! Series (1):     type u8 | ( ref u64 | uvarint nLabels | (uvarint len, name, uvarint len, value)* )*
//! Samples (2):    type u8 | firstRef u64 | firstT i64 |
//!                 ( varint(ref - firstRef) | varint(t - firstT) | value f64 bits u64 )*   first sample included
//! Tombstones (3): type u8 | ( ref u64 | varint mint | varint maxt )*                       one per interval
//! Exemplars (4):  type u8 | firstRef u64 | firstT i64 |
//!                 ( varint(ref - firstRef) | varint(t - firstT) | value f64 bits u64
//!                   | uvarint nLabels | (uvarint len, name, uvarint len, value)* )*     first exemplar included
//! ```
//!
//! Native-histogram records (types 7 to 10) are in [`histogram`]. A Samples or Exemplars record with none is
//! the type byte alone. Other record types (metadata, mmap markers) decode to [`Record::Unknown`] so a replay
//! can skip them. Deltas wrap like Go's int64
//! arithmetic, so any refs and timestamps round-trip.

use heddle_model::{Label, LabelRef, Labels, LabelsError};

pub mod histogram;

pub use histogram::{
    RefFloatHistogramSample, RefHistogramSample, TYPE_CUSTOM_BUCKETS_FLOAT_HISTOGRAM_SAMPLES,
    TYPE_CUSTOM_BUCKETS_HISTOGRAM_SAMPLES, TYPE_FLOAT_HISTOGRAM_SAMPLES, TYPE_HISTOGRAM_SAMPLES,
    encode_float_histogram_refs, encode_float_histograms, encode_histogram_refs, encode_histograms,
};

/// Record type byte of a Series record.
pub const TYPE_SERIES: u8 = 1;
/// Record type byte of a Samples record.
pub const TYPE_SAMPLES: u8 = 2;
/// Record type byte of a Tombstones record.
pub const TYPE_TOMBSTONES: u8 = 3;
/// Record type byte of an Exemplars record.
pub const TYPE_EXEMPLARS: u8 = 4;

/// A series and the ref it is known by in the WAL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefSeries {
    pub series_ref: u64,
    pub labels: Labels,
}

/// A float sample of the series with ref `series_ref`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RefSample {
    pub series_ref: u64,
    pub t: i64,
    pub v: f64,
}

/// An exemplar of the series with ref `series_ref`: its own labels (in the order given), value and time.
#[derive(Debug, Clone, PartialEq)]
pub struct RefExemplar {
    pub series_ref: u64,
    pub t: i64,
    pub v: f64,
    pub labels: Vec<Label>,
}

/// A deleted interval `[mint, maxt]` of one series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tombstone {
    pub series_ref: u64,
    pub mint: i64,
    pub maxt: i64,
}

/// A decoded WAL record.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Series(Vec<RefSeries>),
    Samples(Vec<RefSample>),
    Tombstones(Vec<Tombstone>),
    Exemplars(Vec<RefExemplar>),
    /// Integer histogram samples (record type 7, or 9 for custom buckets).
    Histograms(Vec<RefHistogramSample>),
    /// Float histogram samples (record type 8, or 10 for custom buckets).
    FloatHistograms(Vec<RefFloatHistogramSample>),
    /// A record type Heddle does not decode, by its type byte.
    Unknown(u8),
}

/// Why a record did not decode. The WAL's CRCs make these rare: they mean a bug in a writer, or a record type
/// whose layout changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Not even a type byte.
    #[error("empty wal record")]
    Empty,
    /// The record ends inside a field.
    #[error("wal record (type {record_type}) truncated in {field} at byte {offset}")]
    Truncated {
        record_type: u8,
        field: &'static str,
        offset: usize,
    },
    /// A varint longer than 64 bits.
    #[error("wal record (type {record_type}) has a varint overflowing 64 bits at byte {offset}")]
    VarintOverflow { record_type: u8, offset: usize },
    /// A histogram field whose value no histogram has (a counter reset hint past 3, a schema or span out of
    /// range).
    #[error("wal record (type {record_type}) has an invalid histogram at byte {offset}: {reason}")]
    InvalidHistogram {
        record_type: u8,
        offset: usize,
        reason: String,
    },
    /// A label name or value that is not UTF-8.
    #[error("wal record has a label that is not utf-8 at byte {offset} (series ref {series_ref})")]
    InvalidUtf8 { series_ref: u64, offset: usize },
    /// The labels of a series are not a valid label set (unsorted, duplicate or empty names).
    #[error("wal series record has invalid labels for series ref {series_ref}: {source}")]
    Labels {
        series_ref: u64,
        #[source]
        source: LabelsError,
    },
}

/// Appends a Series record of `series` (ref, labels in sorted order) to `buf`.
pub fn encode_series<'a, I, L>(series: I, buf: &mut Vec<u8>)
where
    I: IntoIterator<Item = (u64, L)>,
    L: IntoIterator<Item = LabelRef<'a>>,
{
    buf.push(TYPE_SERIES);
    for (series_ref, labels) in series {
        buf.extend_from_slice(&series_ref.to_be_bytes());
        // The count comes first but is only known after the labels; a one-byte count (< 128 labels) is the
        // case that matters, so reserve one byte and shift the labels only for larger counts.
        let count_at = buf.len();
        buf.push(0);
        let mut count: u64 = 0;
        for l in labels {
            put_uvarint(buf, l.name.len() as u64);
            buf.extend_from_slice(l.name.as_bytes());
            put_uvarint(buf, l.value.len() as u64);
            buf.extend_from_slice(l.value.as_bytes());
            count += 1;
        }
        let mut tmp = Vec::with_capacity(10);
        put_uvarint(&mut tmp, count);
        buf.splice(count_at..count_at + 1, tmp);
    }
}

/// Appends a Samples record of `samples` to `buf`.
pub fn encode_samples(samples: &[RefSample], buf: &mut Vec<u8>) {
    buf.push(TYPE_SAMPLES);
    let Some(first) = samples.first() else { return };
    buf.reserve(16 + samples.len() * 12);
    buf.extend_from_slice(&first.series_ref.to_be_bytes());
    buf.extend_from_slice(&first.t.to_be_bytes());
    for s in samples {
        put_varint(buf, (s.series_ref as i64).wrapping_sub(first.series_ref as i64));
        put_varint(buf, s.t.wrapping_sub(first.t));
        buf.extend_from_slice(&s.v.to_bits().to_be_bytes());
    }
}

/// Appends a Tombstones record of `tombstones` to `buf`.
pub fn encode_tombstones(tombstones: &[Tombstone], buf: &mut Vec<u8>) {
    buf.push(TYPE_TOMBSTONES);
    for t in tombstones {
        buf.extend_from_slice(&t.series_ref.to_be_bytes());
        put_varint(buf, t.mint);
        put_varint(buf, t.maxt);
    }
}

/// Appends an Exemplars record of `exemplars` to `buf`.
pub fn encode_exemplars(exemplars: &[RefExemplar], buf: &mut Vec<u8>) {
    buf.push(TYPE_EXEMPLARS);
    encode_exemplars_body(exemplars, buf);
}

/// An Exemplars record without its type byte: what a chunk snapshot's exemplars record carries too.
pub(crate) fn encode_exemplars_body(exemplars: &[RefExemplar], buf: &mut Vec<u8>) {
    let Some(first) = exemplars.first() else { return };
    buf.extend_from_slice(&first.series_ref.to_be_bytes());
    buf.extend_from_slice(&first.t.to_be_bytes());
    for e in exemplars {
        put_varint(buf, (e.series_ref as i64).wrapping_sub(first.series_ref as i64));
        put_varint(buf, e.t.wrapping_sub(first.t));
        buf.extend_from_slice(&e.v.to_bits().to_be_bytes());
        put_uvarint(buf, e.labels.len() as u64);
        for l in &e.labels {
            put_uvarint(buf, l.name.len() as u64);
            buf.extend_from_slice(l.name.as_bytes());
            put_uvarint(buf, l.value.len() as u64);
            buf.extend_from_slice(l.value.as_bytes());
        }
    }
}

/// Decodes a record. Never panics: any byte sequence yields a record or an error.
pub fn decode(rec: &[u8]) -> Result<Record, RecordError> {
    let (&typ, _) = rec.split_first().ok_or(RecordError::Empty)?;
    let mut d = Decoder { buf: rec, pos: 1, typ };
    match typ {
        TYPE_SERIES => d.series().map(Record::Series),
        TYPE_SAMPLES => d.samples().map(Record::Samples),
        TYPE_TOMBSTONES => d.tombstones().map(Record::Tombstones),
        TYPE_EXEMPLARS => d.exemplars().map(Record::Exemplars),
        TYPE_HISTOGRAM_SAMPLES | TYPE_CUSTOM_BUCKETS_HISTOGRAM_SAMPLES => d.histograms().map(Record::Histograms),
        TYPE_FLOAT_HISTOGRAM_SAMPLES | TYPE_CUSTOM_BUCKETS_FLOAT_HISTOGRAM_SAMPLES => {
            d.float_histograms().map(Record::FloatHistograms)
        }
        other => Ok(Record::Unknown(other)),
    }
}

/// The record type byte of `rec`, if any, without decoding it.
pub fn record_type(rec: &[u8]) -> Option<u8> {
    rec.first().copied()
}

fn put_uvarint(buf: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        buf.push((x as u8) | 0x80);
        x >>= 7;
    }
    buf.push(x as u8);
}

fn put_varint(buf: &mut Vec<u8>, x: i64) {
    put_uvarint(buf, ((x << 1) ^ (x >> 63)) as u64);
}

/// Splits a run of labels that [`Decoder::short_label_run`] found and that is valid UTF-8 into `out`; false if
/// it does not split (it always does: every length byte is ASCII, so a char boundary).
fn slice_label_run<'a>(mut text: &'a str, out: &mut Vec<LabelRef<'a>>) -> bool {
    let next = |text: &mut &'a str| {
        let len = usize::from(*text.as_bytes().first()?);
        let s = text.get(1..1 + len)?;
        *text = text.get(1 + len..)?;
        Some(s)
    };
    while !text.is_empty() {
        let (Some(name), Some(value)) = (next(&mut text), next(&mut text)) else {
            return false;
        };
        out.push(LabelRef { name, value });
    }
    true
}

/// A cursor over one record.
struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
    typ: u8,
}

impl<'a> Decoder<'a> {
    fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn truncated(&self, field: &'static str) -> RecordError {
        RecordError::Truncated {
            record_type: self.typ,
            field,
            offset: self.pos,
        }
    }

    fn bytes(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], RecordError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return Err(self.truncated(field));
        };
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn be64(&mut self, field: &'static str) -> Result<u64, RecordError> {
        let b = self.bytes(8, field)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    /// Go's `binary.Uvarint`: at most 10 bytes, the 10th at most 1.
    fn uvarint(&mut self, field: &'static str) -> Result<u64, RecordError> {
        let start = self.pos;
        let mut x: u64 = 0;
        for i in 0..10 {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(self.truncated(field));
            };
            self.pos += 1;
            if i == 9 && b > 1 {
                break;
            }
            x |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(x);
            }
        }
        Err(RecordError::VarintOverflow {
            record_type: self.typ,
            offset: start,
        })
    }

    fn varint(&mut self, field: &'static str) -> Result<i64, RecordError> {
        let u = self.uvarint(field)?;
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }

    fn string(&mut self, series_ref: u64, field: &'static str) -> Result<&'a str, RecordError> {
        let len = self.uvarint(field)?;
        let len = usize::try_from(len).map_err(|_| self.truncated(field))?;
        let offset = self.pos;
        let b = self.bytes(len, field)?;
        std::str::from_utf8(b).map_err(|_| RecordError::InvalidUtf8 { series_ref, offset })
    }

    /// Reads `n` labels (length-prefixed name and value) into `out`, in record order.
    ///
    /// Label strings are short and many (16 a series), and checking each for UTF-8 on its own cost more than
    /// the rest of decoding a snapshot record. Where every length fits one varint byte, that byte is ASCII,
    /// and ASCII bytes only ever stand alone in UTF-8: if the whole run of labels is valid UTF-8, each string
    /// between those bytes is too, so the run is checked once and sliced. Anything else (a long string, a
    /// run that is not UTF-8) takes the string-by-string path, which names the string at fault.
    fn labels(&mut self, series_ref: u64, n: u64, out: &mut Vec<LabelRef<'a>>) -> Result<(), RecordError> {
        out.clear();
        let start = self.pos;
        if let Some(run) = self.short_label_run(n)
            && let Ok(text) = std::str::from_utf8(run)
            && slice_label_run(text, out)
        {
            self.pos = start + run.len();
            return Ok(());
        }
        out.clear();
        self.pos = start;
        for _ in 0..n {
            // Each label takes at least two bytes, so a huge count runs out of bytes quickly.
            let name = self.string(series_ref, "label name")?;
            let value = self.string(series_ref, "label value")?;
            out.push(LabelRef { name, value });
        }
        Ok(())
    }

    /// The bytes of the next `n` labels if each of their strings is shorter than 128 bytes (a one-byte
    /// length) and all are there; `None` otherwise. Does not move the cursor.
    fn short_label_run(&self, n: u64) -> Option<&'a [u8]> {
        let mut end = self.pos;
        for _ in 0..n.checked_mul(2)? {
            let len = *self.buf.get(end)?;
            if len >= 0x80 {
                return None;
            }
            end = end.checked_add(1 + usize::from(len)).filter(|&e| e <= self.buf.len())?;
        }
        self.buf.get(self.pos..end)
    }

    fn series(&mut self) -> Result<Vec<RefSeries>, RecordError> {
        let mut out = Vec::new();
        let mut pairs: Vec<LabelRef<'a>> = Vec::new();
        while !self.is_empty() {
            let series_ref = self.be64("series ref")?;
            let n = self.uvarint("label count")?;
            self.labels(series_ref, n, &mut pairs)?;
            let labels = Labels::from_sorted(pairs.iter().map(|l| (l.name, l.value)))
                .map_err(|source| RecordError::Labels { series_ref, source })?;
            out.push(RefSeries { series_ref, labels });
        }
        Ok(out)
    }

    fn samples(&mut self) -> Result<Vec<RefSample>, RecordError> {
        if self.is_empty() {
            return Ok(Vec::new());
        }
        let first_ref = self.be64("first ref")?;
        let first_t = self.be64("first timestamp")? as i64;
        // Every sample takes at least 10 bytes.
        let mut out = Vec::with_capacity((self.buf.len() - self.pos) / 10);
        while !self.is_empty() {
            let dref = self.varint("ref delta")?;
            let dt = self.varint("timestamp delta")?;
            let v = f64::from_bits(self.be64("value")?);
            out.push(RefSample {
                series_ref: (first_ref as i64).wrapping_add(dref) as u64,
                t: first_t.wrapping_add(dt),
                v,
            });
        }
        Ok(out)
    }

    /// The exemplars of the rest of the record (an Exemplars record's body).
    pub(crate) fn exemplars(&mut self) -> Result<Vec<RefExemplar>, RecordError> {
        if self.is_empty() {
            return Ok(Vec::new());
        }
        let first_ref = self.be64("first ref")?;
        let first_t = self.be64("first timestamp")? as i64;
        let mut out = Vec::new();
        let mut pairs = Vec::new();
        while !self.is_empty() {
            let dref = self.varint("ref delta")?;
            let dt = self.varint("timestamp delta")?;
            let v = f64::from_bits(self.be64("value")?);
            let series_ref = (first_ref as i64).wrapping_add(dref) as u64;
            let n = self.uvarint("label count")?;
            self.labels(series_ref, n, &mut pairs)?;
            out.push(RefExemplar {
                series_ref,
                t: first_t.wrapping_add(dt),
                v,
                labels: pairs
                    .iter()
                    .map(|l| Label {
                        name: l.name.to_owned(),
                        value: l.value.to_owned(),
                    })
                    .collect(),
            });
        }
        Ok(out)
    }

    fn tombstones(&mut self) -> Result<Vec<Tombstone>, RecordError> {
        let mut out = Vec::new();
        while !self.is_empty() {
            let series_ref = self.be64("series ref")?;
            let mint = self.varint("mint")?;
            let maxt = self.varint("maxt")?;
            out.push(Tombstone { series_ref, mint, maxt });
        }
        Ok(out)
    }
}

pub mod snapshot;

#[cfg(test)]
mod compat_tests;
#[cfg(test)]
mod tests;
