//! An independent reader of Prometheus' native histogram chunks, integer (encoding 2) and float (encoding 3),
//! so tests can check histogram chunks without trusting heddle's own `chunkenc`. It reads bit by bit, as
//! plainly as the format allows.
//!
//! Layout (`tsdb/chunkenc/histogram.go`, `float_histogram.go`, `histogram_meta.go`, `varbit.go`):
//! `u16 BE sample count | flags byte (top two bits: 00 unknown, 10 counter reset, 01 not a reset, 11 gauge)`,
//! then a bit stream. First the layout: zero threshold (byte 0 = 0; byte 255 + 64-bit float; else
//! 2^(byte - 244)), schema (varbit), positive then negative spans (varbit-unsigned count, then per span a
//! varbit-unsigned length and a varbit offset), and for schema -53 the custom bounds (varbit-unsigned count,
//! then each as a varbit-unsigned n: n = 0 is followed by a 64-bit float, else the bound is (n - 1) / 1000).
//! Varbits: `0` is 0, else 1 to 8 one-bits (the first seven ended by a zero) choose 3, 6, 9, 12, 18, 25, 56
//! or 64 payload bits, two's complement with range [-(2^(n-1) - 1), 2^(n-1)] for signed ones.
//!
//! Integer samples: the first is `varbit t | varbit-unsigned count | varbit-unsigned zero count | 64-bit sum |
//! varbit per bucket value` (delta-encoded across buckets); later ones hold deltas of deltas over time of t,
//! count and zero count and of every bucket value, the sum as an XOR value (as in XOR chunks). Float samples:
//! the first is `varbit t` then 64-bit count, zero count, sum and buckets; later ones a delta of delta of t
//! and an XOR value for each of those. A sample whose sum is the staleness NaN has no bucket fields.
//!
//! Beside the reader, [`growing_counter`]: the counter histograms that tests of histogram chunks write.

use crate::TestkitError;
use crate::xor::BitReader;
use heddle_model::histogram::{CUSTOM_BUCKETS_SCHEMA, EXPONENTIAL_SCHEMA_MAX, deltas_from_absolute};
use heddle_model::{CounterResetHint, FloatHistogram, Histogram, STALE_NAN_BITS, Span};

type Res<T> = Result<T, TestkitError>;

/// Value `k` of a counter histogram that grows with `k`: schema 3, a zero bucket and two positive buckets, and
/// from k = `new_bucket_at` on a third one, so a chunk holding values from both sides of it must be recoded.
pub fn growing_counter(k: u64, new_bucket_at: u64) -> Histogram {
    let mut buckets = vec![k as i64 + 1, 2 * k as i64];
    let mut spans = vec![Span::new(1, 2)];
    if k >= new_bucket_at {
        buckets.push((k - new_bucket_at) as i64 + 1);
        spans.push(Span::new(1, 1));
    }
    Histogram {
        schema: 3,
        zero_threshold: 0.001,
        zero_count: k / 2,
        count: k / 2 + buckets.iter().sum::<i64>() as u64,
        sum: k as f64 * 1.25,
        positive_spans: spans,
        positive_buckets: deltas_from_absolute(&buckets),
        ..Histogram::default()
    }
}

fn short() -> TestkitError {
    TestkitError::decode("histogram chunk", "the bit stream ends early")
}

fn varbit_width(r: &mut BitReader<'_>) -> Res<u8> {
    let mut ones = 0;
    while ones < 8 && r.read_bit().ok_or_else(short)? {
        ones += 1;
    }
    Ok([0, 3, 6, 9, 12, 18, 25, 56, 64][ones])
}

fn varbit_uint(r: &mut BitReader<'_>) -> Res<u64> {
    let n = varbit_width(r)?;
    r.read_bits(n).ok_or_else(short)
}

fn varbit_int(r: &mut BitReader<'_>) -> Res<i64> {
    let n = varbit_width(r)?;
    let raw = r.read_bits(n).ok_or_else(short)?;
    if n == 0 || n == 64 || raw <= 1 << (n - 1) {
        Ok(raw as i64)
    } else {
        Ok(raw as i64 - (1i64 << n))
    }
}

fn float64(r: &mut BitReader<'_>) -> Res<f64> {
    r.read_bits(64).map(f64::from_bits).ok_or_else(short)
}

/// An XOR-encoded float and its (leading zeros, trailing zeros) window.
#[derive(Debug, Clone, Copy, Default)]
struct Xor {
    bits: u64,
    leading: u8,
    trailing: u8,
}

impl Xor {
    fn read(&mut self, r: &mut BitReader<'_>) -> Res<()> {
        if !r.read_bit().ok_or_else(short)? {
            return Ok(());
        }
        if r.read_bit().ok_or_else(short)? {
            self.leading = r.read_bits(5).ok_or_else(short)? as u8;
            let sig = match r.read_bits(6).ok_or_else(short)? as u8 {
                0 => 64,
                n => n,
            };
            self.trailing = 64u8
                .checked_sub(self.leading + sig)
                .ok_or_else(|| TestkitError::decode("histogram chunk", "XOR window wider than 64 bits"))?;
        }
        let sig = 64 - self.leading - self.trailing;
        let bits = r.read_bits(sig).ok_or_else(short)?;
        self.bits ^= bits.checked_shl(self.trailing.into()).unwrap_or(0);
        Ok(())
    }
}

struct Layout {
    schema: i32,
    zero_threshold: f64,
    positive: Vec<Span>,
    negative: Vec<Span>,
    custom: Vec<f64>,
}

fn spans(r: &mut BitReader<'_>) -> Res<Vec<Span>> {
    let n = varbit_uint(r)?;
    let mut out = Vec::new();
    for _ in 0..n {
        let length = varbit_uint(r)? as u32;
        let offset = varbit_int(r)? as i32;
        out.push(Span::new(offset, length));
    }
    Ok(out)
}

fn layout(r: &mut BitReader<'_>) -> Res<Layout> {
    let zero_threshold = match r.read_bits(8).ok_or_else(short)? {
        0 => 0.0,
        255 => float64(r)?,
        b => 2f64.powi(b as i32 - 244),
    };
    let schema = varbit_int(r)? as i32;
    let positive = spans(r)?;
    let negative = spans(r)?;
    let mut custom = Vec::new();
    if schema == CUSTOM_BUCKETS_SCHEMA {
        for _ in 0..varbit_uint(r)? {
            custom.push(match varbit_uint(r)? {
                0 => float64(r)?,
                n => (n - 1) as f64 / 1000.0,
            });
        }
    }
    if !(schema == CUSTOM_BUCKETS_SCHEMA || (-4..=52).contains(&schema)) {
        return Err(TestkitError::decode(
            "histogram chunk",
            format!("unknown schema {schema}"),
        ));
    }
    Ok(Layout {
        schema,
        zero_threshold,
        positive,
        negative,
        custom,
    })
}

fn buckets(spans: &[Span]) -> usize {
    spans.iter().map(|s| s.length as usize).sum()
}

/// Splits a chunk into sample count, counter-reset flags and bit stream.
fn header(chunk: &[u8]) -> Res<(usize, u8, BitReader<'_>)> {
    match chunk {
        [hi, lo, flags, rest @ ..] => Ok((
            usize::from(u16::from_be_bytes([*hi, *lo])),
            flags >> 6,
            BitReader::new(rest),
        )),
        _ => Err(TestkitError::decode(
            "histogram chunk",
            format!("{} bytes, shorter than the header", chunk.len()),
        )),
    }
}

/// Prometheus' hint for sample `i` of a chunk with `flags`: gauge chunks hold gauges, samples after the first
/// are not resets, and the first one's is unknown.
fn hint(flags: u8, i: usize) -> CounterResetHint {
    match (flags, i) {
        (0b11, _) => CounterResetHint::Gauge,
        (_, 0) => CounterResetHint::Unknown,
        _ => CounterResetHint::NotCounterReset,
    }
}

fn is_stale(bits: u64) -> bool {
    bits == STALE_NAN_BITS
}

/// Decodes every sample of an integer histogram chunk. Stale markers come back as histograms with only the
/// staleness NaN sum; schemas 9 to 52 are read at schema 8, as Prometheus does.
pub fn decode_histogram_chunk(chunk: &[u8]) -> Result<Vec<(i64, Histogram)>, TestkitError> {
    let (count, flags, mut r) = header(chunk)?;
    let mut out = Vec::with_capacity(count.min(1024));
    if count == 0 {
        return Ok(out);
    }
    let l = layout(&mut r)?;
    let (np, nn) = (buckets(&l.positive), buckets(&l.negative));
    let (mut t, mut n, mut z) = (
        varbit_int(&mut r)?,
        varbit_uint(&mut r)? as i64,
        varbit_uint(&mut r)? as i64,
    );
    let mut sum = Xor {
        bits: r.read_bits(64).ok_or_else(short)?,
        ..Xor::default()
    };
    let mut values = Vec::new();
    for _ in 0..np + nn {
        values.push(varbit_int(&mut r)?);
    }
    let mut deltas = vec![0i64; np + nn];
    let (mut dt, mut dn, mut dz) = (0i64, 0i64, 0i64);
    for i in 0..count {
        if i > 0 {
            dt = dt.wrapping_add(varbit_int(&mut r)?);
            t = t.wrapping_add(dt);
            dn = dn.wrapping_add(varbit_int(&mut r)?);
            n = n.wrapping_add(dn);
            dz = dz.wrapping_add(varbit_int(&mut r)?);
            z = z.wrapping_add(dz);
            sum.read(&mut r)?;
            if !is_stale(sum.bits) {
                for (v, d) in values.iter_mut().zip(deltas.iter_mut()) {
                    *d = d.wrapping_add(varbit_int(&mut r)?);
                    *v = v.wrapping_add(*d);
                }
            }
        }
        if is_stale(sum.bits) {
            out.push((
                t,
                Histogram {
                    sum: f64::from_bits(sum.bits),
                    ..Histogram::default()
                },
            ));
            continue;
        }
        let mut h = Histogram {
            counter_reset_hint: hint(flags, i),
            schema: l.schema,
            zero_threshold: l.zero_threshold,
            zero_count: z as u64,
            count: n as u64,
            sum: f64::from_bits(sum.bits),
            positive_spans: l.positive.clone(),
            negative_spans: l.negative.clone(),
            positive_buckets: values[..np].to_vec(),
            negative_buckets: values[np..].to_vec(),
            custom_values: l.custom.clone(),
        };
        if h.schema > EXPONENTIAL_SCHEMA_MAX {
            h.reduce_resolution(EXPONENTIAL_SCHEMA_MAX)
                .map_err(|e| TestkitError::decode("histogram chunk", e))?;
        }
        out.push((t, h));
    }
    Ok(out)
}

/// Decodes every sample of a float histogram chunk, as [`decode_histogram_chunk`] does.
pub fn decode_float_histogram_chunk(chunk: &[u8]) -> Result<Vec<(i64, FloatHistogram)>, TestkitError> {
    let (count, flags, mut r) = header(chunk)?;
    let mut out = Vec::with_capacity(count.min(1024));
    if count == 0 {
        return Ok(out);
    }
    let l = layout(&mut r)?;
    let (np, nn) = (buckets(&l.positive), buckets(&l.negative));
    let mut t = varbit_int(&mut r)?;
    // count, zero count, sum, then the buckets.
    let mut fields = Vec::new();
    for _ in 0..3 + np + nn {
        fields.push(Xor {
            bits: r.read_bits(64).ok_or_else(short)?,
            ..Xor::default()
        });
    }
    let mut dt = 0i64;
    for i in 0..count {
        if i > 0 {
            dt = dt.wrapping_add(varbit_int(&mut r)?);
            t = t.wrapping_add(dt);
            for f in &mut fields[..3] {
                f.read(&mut r)?;
            }
            if !is_stale(fields[2].bits) {
                for f in &mut fields[3..] {
                    f.read(&mut r)?;
                }
            }
        }
        let v = |f: &Xor| f64::from_bits(f.bits);
        if is_stale(fields[2].bits) {
            out.push((
                t,
                FloatHistogram {
                    sum: v(&fields[2]),
                    ..FloatHistogram::default()
                },
            ));
            continue;
        }
        let mut h = FloatHistogram {
            counter_reset_hint: hint(flags, i),
            schema: l.schema,
            zero_threshold: l.zero_threshold,
            count: v(&fields[0]),
            zero_count: v(&fields[1]),
            sum: v(&fields[2]),
            positive_spans: l.positive.clone(),
            negative_spans: l.negative.clone(),
            positive_buckets: fields[3..3 + np].iter().map(v).collect(),
            negative_buckets: fields[3 + np..].iter().map(v).collect(),
            custom_values: l.custom.clone(),
        };
        if h.schema > EXPONENTIAL_SCHEMA_MAX {
            h.reduce_resolution(EXPONENTIAL_SCHEMA_MAX)
                .map_err(|e| TestkitError::decode("histogram chunk", e))?;
        }
        out.push((t, h));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use heddle_model::histogram::deltas_from_absolute;
    use heddle_tsdb::chunkenc::{
        FloatHistogramChunk, HistogramAppend, HistogramChunk, decode_float_histograms, decode_histograms,
    };
    use proptest::prelude::*;

    /// Samples compared with their sums by bits (a stale marker's NaN is not equal to itself).
    fn by_bits<H: Clone + std::fmt::Debug>(samples: &[(i64, H)], sum: impl Fn(&H) -> f64) -> Vec<(i64, u64, String)> {
        samples
            .iter()
            .map(|(t, h)| (*t, sum(h).to_bits(), format!("{h:?}")))
            .collect()
    }

    /// A histogram series whose buckets come and go, with resets, schema changes and stale markers.
    fn series() -> impl Strategy<Value = Vec<(i64, Histogram)>> {
        let step = (0u8..10, any::<u64>(), 1i64..1_000_000);
        (proptest::collection::vec(step, 1..80), any::<bool>(), -4i32..=8).prop_map(|(steps, gauge, schema)| {
            let mut t = -5_000_000i64;
            let mut pos: Vec<(i64, i64)> = vec![(-3, 4)];
            let mut neg: Vec<(i64, i64)> = vec![];
            let (mut zero, mut sum) = (0u64, 0.0);
            let mut out = Vec::new();
            for (kind, r, dt) in steps {
                t += dt;
                match kind {
                    0..=3 => pos.iter_mut().chain(neg.iter_mut()).for_each(|c| c.1 += (r % 9) as i64),
                    4 => {
                        let side = if r % 2 == 0 { &mut pos } else { &mut neg };
                        let idx = (r % 100) as i64 - 50;
                        if !side.iter().any(|c| c.0 == idx) {
                            side.push((idx, (r >> 8) as i64 % 1000));
                            side.sort();
                        }
                    }
                    5 if pos.len() > 1 => {
                        pos.remove((r % pos.len() as u64) as usize);
                    }
                    6 => zero += r % 100,
                    7 => {
                        out.push((
                            t,
                            Histogram {
                                sum: f64::from_bits(STALE_NAN_BITS),
                                ..Histogram::default()
                            },
                        ));
                        continue;
                    }
                    8 => pos.iter_mut().for_each(|c| c.1 /= 3),
                    _ => {}
                }
                sum += (r % 100_000) as f64 / 8.0 + 0.5;
                let build = |side: &[(i64, i64)]| {
                    let mut spans: Vec<Span> = Vec::new();
                    let mut end = 0i64;
                    for (idx, _) in side {
                        match spans.last_mut() {
                            Some(last) if *idx == end => last.length += 1,
                            _ => spans.push(Span::new((*idx - end) as i32, 1)),
                        }
                        end = idx + 1;
                    }
                    let counts: Vec<i64> = side.iter().map(|c| c.1).collect();
                    (spans, deltas_from_absolute(&counts), counts.iter().sum::<i64>() as u64)
                };
                let (ps, pb, pn) = build(&pos);
                let (ns, nb, nn) = build(&neg);
                out.push((
                    t,
                    Histogram {
                        counter_reset_hint: if gauge {
                            CounterResetHint::Gauge
                        } else {
                            CounterResetHint::Unknown
                        },
                        schema,
                        zero_threshold: [0.0, 2f64.powi(-128), 0.001][(r % 3) as usize * usize::from(gauge)],
                        zero_count: zero,
                        count: pn + nn + zero,
                        sum,
                        positive_spans: ps,
                        negative_spans: ns,
                        positive_buckets: pb,
                        negative_buckets: nb,
                        custom_values: Vec::new(),
                    },
                ));
            }
            out
        })
    }

    proptest! {
        #[test]
        fn reference_reads_what_heddle_writes(samples in series()) {
            let mut int = vec![HistogramChunk::new()];
            let mut float = vec![FloatHistogramChunk::new()];
            for (t, h) in &samples {
                if let HistogramAppend::NewChunk(c) = int.last_mut().unwrap().append(*t, h, None).unwrap() {
                    int.push(c);
                }
                if let HistogramAppend::NewChunk(c) = float.last_mut().unwrap().append(*t, &h.to_float(), None).unwrap() {
                    float.push(c);
                }
            }
            let mut n = 0;
            for c in &int {
                let reference = decode_histogram_chunk(c.bytes()).unwrap();
                let heddle = decode_histograms(c.bytes()).unwrap();
                prop_assert_eq!(by_bits(&reference, |h| h.sum), by_bits(&heddle, |h| h.sum));
                n += reference.len();
            }
            prop_assert_eq!(n, samples.len());
            for c in &float {
                let reference = decode_float_histogram_chunk(c.bytes()).unwrap();
                let heddle = decode_float_histograms(c.bytes()).unwrap();
                prop_assert_eq!(by_bits(&reference, |h| h.sum), by_bits(&heddle, |h| h.sum));
            }
            // Every sample comes back with its counts in its buckets, whatever layout its chunk gave it.
            let decoded: Vec<(i64, Histogram)> = int.iter().flat_map(|c| decode_histogram_chunk(c.bytes()).unwrap()).collect();
            for ((t, want), (got_t, got)) in samples.iter().zip(&decoded) {
                prop_assert_eq!(t, got_t);
                prop_assert_eq!((want.count, want.zero_count, want.sum.to_bits()), (got.count, got.zero_count, got.sum.to_bits()));
                let nonzero = |h: &Histogram| h.positive_bucket_iter().map(|b| (b.index, b.count)).collect::<Vec<_>>();
                prop_assert_eq!(nonzero(want), nonzero(got));
            }
        }

        #[test]
        fn reference_reads_custom_bucket_chunks(
            raw_bounds in proptest::collection::vec(prop_oneof![0u64..40_000_000, any::<u64>()], 1..12),
            steps in proptest::collection::vec((any::<u64>(), 1i64..100_000), 1..50),
        ) {
            // Bounds that are multiples of 0.001 (stored as varbits) and arbitrary finite floats (64 bits).
            let mut bounds: Vec<f64> = raw_bounds
                .iter()
                .map(|b| if *b < 40_000_000 { *b as f64 / 1000.0 } else { f64::from_bits(*b) })
                .filter(|b| b.is_finite())
                .collect();
            bounds.sort_by(f64::total_cmp);
            bounds.dedup();
            prop_assume!(!bounds.is_empty());
            let n = bounds.len() + 1;
            let mut counts = vec![0i64; n];
            let mut chunk = FloatHistogramChunk::new();
            let mut int = HistogramChunk::new();
            let mut t = 0;
            for (r, dt) in steps {
                t += dt;
                counts[(r % n as u64) as usize] += 1 + (r >> 32) as i64 % 4;
                let h = Histogram {
                    schema: CUSTOM_BUCKETS_SCHEMA,
                    count: counts.iter().sum::<i64>() as u64,
                    sum: (r % 1000) as f64,
                    positive_spans: vec![Span::new(0, n as u32)],
                    positive_buckets: deltas_from_absolute(&counts),
                    custom_values: bounds.clone(),
                    ..Histogram::default()
                };
                prop_assert!(matches!(int.append(t, &h, None).unwrap(), HistogramAppend::Appended));
                prop_assert!(matches!(chunk.append(t, &h.to_float(), None).unwrap(), HistogramAppend::Appended));
            }
            let reference = decode_histogram_chunk(int.bytes()).unwrap();
            prop_assert!(reference.iter().all(|(_, h)| h.custom_values == bounds));
            prop_assert_eq!(by_bits(&reference, |h| h.sum), by_bits(&decode_histograms(int.bytes()).unwrap(), |h| h.sum));
            let reference = decode_float_histogram_chunk(chunk.bytes()).unwrap();
            prop_assert_eq!(
                by_bits(&reference, |h| h.sum),
                by_bits(&decode_float_histograms(chunk.bytes()).unwrap(), |h| h.sum)
            );
        }

        #[test]
        fn reference_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = decode_histogram_chunk(&bytes);
            let _ = decode_float_histogram_chunk(&bytes);
        }
    }

    /// Prometheus' own chunks (the fixtures of heddle-tsdb) read the same with both decoders.
    #[test]
    fn reference_reads_prometheus_fixtures() {
        let dir = crate::workspace_root().join("libs/tsdb/tests/fixtures/prometheus-histograms");
        let mut seen = [0usize; 2];
        for file in ["chunks_head-000001", "chunks_head-float-000001"] {
            let bytes = std::fs::read(dir.join(file)).unwrap();
            // chunks_head: 8-byte header, then seriesRef, mint, maxt (u64 each), encoding, uvarint len, data, crc.
            let mut at = 8;
            while at + 26 < bytes.len() && bytes[at..].iter().any(|b| *b != 0) {
                let encoding = bytes[at + 24];
                let (mut len, mut shift, mut p) = (0usize, 0, at + 25);
                while bytes[p] >= 0x80 {
                    len |= usize::from(bytes[p] & 0x7f) << shift;
                    shift += 7;
                    p += 1;
                }
                len |= usize::from(bytes[p]) << shift;
                let data = &bytes[p + 1..p + 1 + len];
                match encoding {
                    2 => {
                        let reference = decode_histogram_chunk(data).unwrap();
                        assert_eq!(
                            by_bits(&reference, |h| h.sum),
                            by_bits(&decode_histograms(data).unwrap(), |h| h.sum)
                        );
                        seen[0] += 1;
                    }
                    3 => {
                        let reference = decode_float_histogram_chunk(data).unwrap();
                        assert_eq!(
                            by_bits(&reference, |h| h.sum),
                            by_bits(&decode_float_histograms(data).unwrap(), |h| h.sum)
                        );
                        seen[1] += 1;
                    }
                    e => panic!("{file}: chunk of encoding {e}"),
                }
                at = p + 1 + len + 4;
            }
        }
        assert!(seen[0] >= 10 && seen[1] >= 1, "chunks read: {seen:?}");
    }
}
