//! Chunk snapshot records (Prometheus `tsdb/head_wal.go`, `memory_snapshot.md`), written with the WAL writer
//! into `chunk_snapshot.%06d.%010d/` on graceful shutdown. All fixed-width integers big-endian.
//!
//! ```text
//! Series (1):     type u8 | ref u64 | uvarint nLabels | (uvarint len, name, uvarint len, value)* | i64 0
//!                 | uvarint exists | [ mint i64 | maxt i64 | encoding u8 | uvarint len | chunk bytes
//!                                     | 3 x (i64 0 | f64 0) | i64 0 | f64 lastValue ]      (XOR chunks)
//!                                     | histogram ]               (encoding 2: the newest sample, as in a
//!                                                                 WAL histogram record, without ref and t)
//!                                     | float histogram ]         (encoding 3, likewise)
//! Tombstones (2): type u8 | uvarint len | tombstones encoding (version byte 1, then per interval
//!                 uvarint ref | varint mint | varint maxt)
//! Exemplars (3):  type u8 | body of a WAL exemplars record
//! ```
//! The i64 0 after the labels was once the chunk range; the four (t, v) pairs were once a sample buffer of
//! which only the last value is still read.

use heddle_model::{FloatHistogram, Histogram, LabelRef, LabelsError};

use super::histogram::{put_float_histogram, put_histogram};
use super::{Decoder, RecordError, RefExemplar, encode_exemplars_body, put_uvarint};

/// Record type byte of a snapshot Series record.
pub const SNAPSHOT_SERIES: u8 = 1;
/// Record type byte of a snapshot Tombstones record.
pub const SNAPSHOT_TOMBSTONES: u8 = 2;
/// Record type byte of a snapshot Exemplars record.
pub const SNAPSHOT_EXEMPLARS: u8 = 3;
/// Version byte of the tombstones encoding.
const TOMBSTONES_V1: u8 = 1;

/// The value of the newest sample of a snapshot's open chunk, of the chunk's kind.
#[derive(Debug, Clone, PartialEq)]
pub enum LastValue {
    /// An XOR chunk's.
    Float(f64),
    /// An integer histogram chunk's (encoding 2).
    Histogram(Box<Histogram>),
    /// A float histogram chunk's (encoding 3).
    FloatHistogram(Box<FloatHistogram>),
}

/// The open chunk of a series in a snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotChunk<'a> {
    pub min_time: i64,
    pub max_time: i64,
    pub encoding: u8,
    pub data: &'a [u8],
    /// Value of the newest sample.
    pub last: LastValue,
}

/// A series in a snapshot, borrowed from the record.
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotSeries<'a> {
    pub series_ref: u64,
    /// Sorted by name.
    pub labels: Vec<LabelRef<'a>>,
    pub chunk: Option<SnapshotChunk<'a>>,
}

/// A decoded snapshot record.
#[derive(Debug, Clone, PartialEq)]
pub enum SnapshotRecord<'a> {
    Series(SnapshotSeries<'a>),
    /// The tombstones encoding (Heddle writes none: the version byte alone).
    Tombstones(&'a [u8]),
    Exemplars(Vec<RefExemplar>),
    /// A record type the head does not load, by its type byte.
    Other(u8),
}

/// Appends a snapshot Series record to `buf`.
pub fn encode_series<'a>(
    buf: &mut Vec<u8>,
    series_ref: u64,
    labels: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
    chunk: Option<SnapshotChunk<'_>>,
) {
    buf.push(SNAPSHOT_SERIES);
    buf.extend_from_slice(&series_ref.to_be_bytes());
    put_uvarint(buf, labels.len() as u64);
    for (name, value) in labels {
        put_uvarint(buf, name.len() as u64);
        buf.extend_from_slice(name.as_bytes());
        put_uvarint(buf, value.len() as u64);
        buf.extend_from_slice(value.as_bytes());
    }
    buf.extend_from_slice(&0i64.to_be_bytes());
    let Some(c) = chunk else {
        put_uvarint(buf, 0);
        return;
    };
    put_uvarint(buf, 1);
    buf.extend_from_slice(&c.min_time.to_be_bytes());
    buf.extend_from_slice(&c.max_time.to_be_bytes());
    buf.push(c.encoding);
    put_uvarint(buf, c.data.len() as u64);
    buf.extend_from_slice(c.data);
    match &c.last {
        LastValue::Float(v) => {
            buf.extend_from_slice(&[0u8; 3 * 16 + 8]);
            buf.extend_from_slice(&v.to_bits().to_be_bytes());
        }
        LastValue::Histogram(h) => put_histogram(buf, h),
        LastValue::FloatHistogram(h) => put_float_histogram(buf, h),
    }
}

/// Appends a snapshot Tombstones record with no tombstones to `buf`.
pub fn encode_empty_tombstones(buf: &mut Vec<u8>) {
    buf.push(SNAPSHOT_TOMBSTONES);
    put_uvarint(buf, 1);
    buf.push(TOMBSTONES_V1);
}

/// Appends a snapshot Exemplars record of `exemplars` to `buf` (Prometheus writes at most 10,000 a record).
pub fn encode_exemplars(buf: &mut Vec<u8>, exemplars: &[RefExemplar]) {
    buf.push(SNAPSHOT_EXEMPLARS);
    encode_exemplars_body(exemplars, buf);
}

/// Decodes one snapshot record.
pub fn decode(rec: &[u8]) -> Result<SnapshotRecord<'_>, RecordError> {
    let Some(&typ) = rec.first() else {
        return Err(RecordError::Empty);
    };
    let mut d = Decoder { buf: rec, pos: 1, typ };
    match typ {
        SNAPSHOT_SERIES => {
            let s = decode_series(&mut d)?;
            if !d.is_empty() {
                return Err(d.truncated("end of series record (trailing bytes)"));
            }
            Ok(SnapshotRecord::Series(s))
        }
        SNAPSHOT_TOMBSTONES => {
            let len = d.uvarint("tombstones length")?;
            let len = usize::try_from(len).map_err(|_| d.truncated("tombstones"))?;
            Ok(SnapshotRecord::Tombstones(d.bytes(len, "tombstones")?))
        }
        SNAPSHOT_EXEMPLARS => d.exemplars().map(SnapshotRecord::Exemplars),
        other => Ok(SnapshotRecord::Other(other)),
    }
}

fn decode_series<'a>(d: &mut Decoder<'a>) -> Result<SnapshotSeries<'a>, RecordError> {
    let series_ref = d.be64("series ref")?;
    let n = d.uvarint("label count")?;
    let mut labels: Vec<LabelRef<'a>> = Vec::with_capacity(n.min(64) as usize);
    d.labels(series_ref, n, &mut labels)?;
    let mut prev: Option<&str> = None;
    for l in &labels {
        let problem = match prev.map(|p| p.cmp(l.name)) {
            _ if l.name.is_empty() => Some(LabelsError::EmptyName),
            Some(std::cmp::Ordering::Equal) => Some(LabelsError::Duplicate(l.name.to_owned())),
            Some(std::cmp::Ordering::Greater) => Some(LabelsError::Unsorted {
                prev: prev.unwrap_or_default().to_owned(),
                next: l.name.to_owned(),
            }),
            _ => None,
        };
        if let Some(source) = problem {
            return Err(RecordError::Labels { series_ref, source });
        }
        prev = Some(l.name);
    }
    d.be64("chunk range")?;
    let chunk = match d.uvarint("chunk exists")? {
        0 => None,
        _ => {
            let min_time = d.be64("chunk mint")? as i64;
            let max_time = d.be64("chunk maxt")? as i64;
            let encoding = d.bytes(1, "chunk encoding")?[0];
            let len = d.uvarint("chunk length")?;
            let len = usize::try_from(len).map_err(|_| d.truncated("chunk bytes"))?;
            let data = d.bytes(len, "chunk bytes")?;
            let last = match encoding {
                2 => LastValue::Histogram(Box::new(d.histogram()?)),
                3 => LastValue::FloatHistogram(Box::new(d.float_histogram()?)),
                _ => {
                    d.bytes(3 * 16 + 8, "sample buffer")?;
                    LastValue::Float(f64::from_bits(d.be64("last value")?))
                }
            };
            Some(SnapshotChunk {
                min_time,
                max_time,
                encoding,
                data,
                last,
            })
        }
    };
    Ok(SnapshotSeries {
        series_ref,
        labels,
        chunk,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn series_records_round_trip(series_ref: u64, n in 0usize..6, mint: i64, maxt: i64, last: u64,
                                     data in proptest::collection::vec(any::<u8>(), 0..300), has_chunk: bool,
                                     kind in 0u8..3) {
            let names: Vec<String> = (0..n).map(|i| format!("l{i}")).collect();
            let values: Vec<String> = (0..n).map(|i| format!("v{}", i * 7)).collect();
            let h = Histogram {
                schema: 1,
                count: last % 1000 + 3,
                zero_count: last % 1000,
                sum: f64::from_bits(last),
                positive_spans: vec![heddle_model::Span::new(-2, 2)],
                positive_buckets: vec![2, -1],
                ..Histogram::default()
            };
            let (encoding, last) = match kind {
                0 => (1, LastValue::Float(f64::from_bits(last))),
                1 => (2, LastValue::Histogram(Box::new(h))),
                _ => (3, LastValue::FloatHistogram(Box::new(h.to_float()))),
            };
            let chunk = has_chunk.then_some(SnapshotChunk { min_time: mint, max_time: maxt, encoding, data: &data, last });
            let mut buf = Vec::new();
            encode_series(&mut buf, series_ref, names.iter().map(String::as_str).zip(values.iter().map(String::as_str)), chunk.clone());
            let SnapshotRecord::Series(s) = decode(&buf).unwrap() else { panic!("not a series record") };
            prop_assert_eq!(s.series_ref, series_ref);
            prop_assert_eq!(s.labels.len(), n);
            // Compared by bits: a NaN sum or value must survive as it was.
            let bits = |c: SnapshotChunk<'_>| (c.min_time, c.max_time, c.encoding, c.data.to_vec(), format!("{:?}", c.last));
            prop_assert_eq!(s.chunk.map(bits), chunk.map(bits));
            // Every cut is an error, never a panic.
            for cut in 0..buf.len() {
                prop_assert!(decode(&buf[..cut]).is_err(), "cut at {}", cut);
            }
        }
    }

    #[test]
    fn layout_matches_prometheus() {
        let mut buf = Vec::new();
        encode_series(&mut buf, 5, [("a", "b")].into_iter(), None);
        let mut want = vec![1, 0, 0, 0, 0, 0, 0, 0, 5, 1, 1, b'a', 1, b'b'];
        want.extend_from_slice(&[0; 8]);
        want.push(0);
        assert_eq!(buf, want);
        let mut t = Vec::new();
        encode_empty_tombstones(&mut t);
        assert_eq!(t, vec![2, 1, 1]);
        assert_eq!(decode(&t).unwrap(), SnapshotRecord::Tombstones(&[1]));
        // Exemplars: type 3, then a WAL Exemplars record's body (base ref and time, then deltas, value, labels).
        let e = RefExemplar {
            series_ref: 5,
            t: 7,
            v: 1.0,
            labels: vec![heddle_model::Label {
                name: "a".into(),
                value: "b".into(),
            }],
        };
        let mut x = Vec::new();
        encode_exemplars(&mut x, std::slice::from_ref(&e));
        let mut want = vec![3];
        want.extend(5u64.to_be_bytes());
        want.extend(7i64.to_be_bytes());
        want.extend([0, 0]);
        want.extend(1.0f64.to_bits().to_be_bytes());
        want.extend([1, 1, b'a', 1, b'b']);
        assert_eq!(x, want);
        assert_eq!(decode(&x).unwrap(), SnapshotRecord::Exemplars(vec![e]));
        assert!(decode(&[3, 9, 9]).is_err(), "a truncated exemplars record");
        assert_eq!(decode(&[9, 9]).unwrap(), SnapshotRecord::Other(9));
    }
}
