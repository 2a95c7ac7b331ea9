//! An independent reader and writer of Prometheus XOR (Gorilla) chunks, so tests can check chunks served by
//! heddle (or by Prometheus itself) without trusting heddle's own `chunkenc`.
//!
//! Layout (`tsdb/chunkenc/xor.go`): `u16 BE sample count`, then a bitstream: sample 0 as `varint t | 64-bit v`,
//! sample 1 as `uvarint (t1 - t0)` and an XOR-encoded value, later samples as a delta-of-delta timestamp
//! (`0`, `10`+14, `110`+17, `1110`+20 or `1111`+64 bits) and an XOR-encoded value (`0` same value; `10` reuse the
//! previous leading/trailing window; `11` + 5-bit leading + 6-bit length (64 stored as 0) + the bits).

use crate::TestkitError;
use heddle_model::Sample;

/// Appends bits most-significant first.
#[derive(Debug, Default)]
struct BitWriter {
    bytes: Vec<u8>,
    /// Bits still free in the last byte (0 = start a new byte).
    free: u8,
}

impl BitWriter {
    fn write_bit(&mut self, bit: bool) {
        if self.free == 0 {
            self.bytes.push(0);
            self.free = 8;
        }
        self.free -= 1;
        if bit && let Some(last) = self.bytes.last_mut() {
            *last |= 1 << self.free;
        }
    }

    fn write_bits(&mut self, value: u64, n: u8) {
        for i in (0..n).rev() {
            self.write_bit((value >> i) & 1 == 1);
        }
    }

    fn write_uvarint(&mut self, mut x: u64) {
        while x >= 0x80 {
            self.write_bits((x as u8 | 0x80).into(), 8);
            x >>= 7;
        }
        self.write_bits(x, 8);
    }

    fn write_varint(&mut self, x: i64) {
        // Go's binary.PutVarint: zig-zag.
        self.write_uvarint(((x << 1) ^ (x >> 63)) as u64);
    }
}

/// Builds an XOR chunk sample by sample, with the exact bit choices of Prometheus' appender.
#[derive(Debug)]
pub struct XorEncoder {
    bits: BitWriter,
    count: u16,
    t: i64,
    t_delta: i64,
    v_bits: u64,
    leading: u8,
    trailing: u8,
}

impl Default for XorEncoder {
    fn default() -> Self {
        let mut bits = BitWriter::default();
        bits.write_bits(0, 16);
        Self {
            bits,
            count: 0,
            t: 0,
            t_delta: 0,
            v_bits: 0,
            // 0xff = no window yet, so the first XOR'd value always writes a fresh window.
            leading: 0xff,
            trailing: 0,
        }
    }
}

fn fits(dod: i64, nbits: u32) -> bool {
    let hi = 1i64 << (nbits - 1);
    -(hi - 1) <= dod && dod <= hi
}

impl XorEncoder {
    /// An empty chunk.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of samples appended.
    pub fn len(&self) -> usize {
        usize::from(self.count)
    }

    /// Whether no sample was appended.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Appends a sample. Returns false (and appends nothing) when the chunk already holds `u16::MAX` samples.
    pub fn append(&mut self, t: i64, v: f64) -> bool {
        if self.count == u16::MAX {
            return false;
        }
        let v_bits = v.to_bits();
        match self.count {
            0 => {
                self.bits.write_varint(t);
                self.bits.write_bits(v_bits, 64);
            }
            1 => {
                let delta = t.wrapping_sub(self.t);
                self.bits.write_uvarint(delta as u64);
                self.write_value(v_bits);
                self.t_delta = delta;
            }
            _ => {
                let delta = t.wrapping_sub(self.t);
                let dod = delta.wrapping_sub(self.t_delta);
                if dod == 0 {
                    self.bits.write_bit(false);
                } else if fits(dod, 14) {
                    self.bits.write_bits(0b10, 2);
                    self.bits.write_bits(dod as u64, 14);
                } else if fits(dod, 17) {
                    self.bits.write_bits(0b110, 3);
                    self.bits.write_bits(dod as u64, 17);
                } else if fits(dod, 20) {
                    self.bits.write_bits(0b1110, 4);
                    self.bits.write_bits(dod as u64, 20);
                } else {
                    self.bits.write_bits(0b1111, 4);
                    self.bits.write_bits(dod as u64, 64);
                }
                self.write_value(v_bits);
                self.t_delta = delta;
            }
        }
        self.t = t;
        self.v_bits = v_bits;
        self.count += 1;
        let [hi, lo] = self.count.to_be_bytes();
        self.bits.bytes[0] = hi;
        self.bits.bytes[1] = lo;
        true
    }

    fn write_value(&mut self, v_bits: u64) {
        let delta = v_bits ^ self.v_bits;
        if delta == 0 {
            self.bits.write_bit(false);
            return;
        }
        self.bits.write_bit(true);
        let leading = (delta.leading_zeros() as u8).min(31);
        let trailing = delta.trailing_zeros() as u8;
        if self.leading != 0xff && leading >= self.leading && trailing >= self.trailing {
            self.bits.write_bit(false);
            let sig = 64 - self.leading - self.trailing;
            self.bits.write_bits(delta >> self.trailing, sig);
        } else {
            self.leading = leading;
            self.trailing = trailing;
            self.bits.write_bit(true);
            self.bits.write_bits(leading.into(), 5);
            let sig = 64 - leading - trailing;
            // A 64-bit length is stored as 0 in the 6-bit field.
            self.bits.write_bits(u64::from(sig & 0x3f), 6);
            self.bits.write_bits(delta >> trailing, sig);
        }
    }

    /// The chunk bytes so far.
    pub fn bytes(&self) -> &[u8] {
        &self.bits.bytes
    }

    /// Encodes `samples` into one chunk (at most `u16::MAX` samples are taken).
    pub fn encode(samples: &[Sample]) -> Vec<u8> {
        let mut enc = Self::new();
        for s in samples {
            if !enc.append(s.t, s.v) {
                break;
            }
        }
        enc.bits.bytes
    }
}

/// Reads bits most-significant first; running out of bits is an error, never a panic.
#[derive(Debug)]
pub(crate) struct BitReader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> BitReader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    pub(crate) fn read_bit(&mut self) -> Option<bool> {
        let byte = self.bytes.get(self.pos / 8)?;
        let bit = (byte >> (7 - self.pos % 8)) & 1 == 1;
        self.pos += 1;
        Some(bit)
    }

    pub(crate) fn read_bits(&mut self, n: u8) -> Option<u64> {
        let mut v = 0u64;
        for _ in 0..n {
            v = (v << 1) | u64::from(self.read_bit()?);
        }
        Some(v)
    }

    fn read_uvarint(&mut self) -> Option<u64> {
        let mut x = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.read_bits(8)?;
            if shift == 63 && b > 1 {
                return None;
            }
            x |= (b & 0x7f) << shift;
            if b < 0x80 {
                return Some(x);
            }
        }
        None
    }

    fn read_varint(&mut self) -> Option<i64> {
        let ux = self.read_uvarint()?;
        let x = (ux >> 1) as i64;
        Some(if ux & 1 != 0 { !x } else { x })
    }
}

/// Decodes every sample of an XOR chunk. Malformed or truncated chunks are errors naming the sample index.
pub fn decode_xor_chunk(chunk: &[u8]) -> Result<Vec<Sample>, TestkitError> {
    let err = |detail: String| TestkitError::decode("xor chunk", detail);
    let [hi, lo, ..] = *chunk else {
        return Err(err(format!("{} bytes, shorter than the 2-byte header", chunk.len())));
    };
    let count = usize::from(u16::from_be_bytes([hi, lo]));
    let mut r = BitReader::new(&chunk[2..]);
    let mut out = Vec::with_capacity(count);
    let (mut t, mut t_delta, mut v_bits) = (0i64, 0i64, 0u64);
    let (mut leading, mut trailing) = (0u8, 0u8);
    for i in 0..count {
        let short = || err(format!("truncated at sample {i} of {count}"));
        match i {
            0 => {
                t = r.read_varint().ok_or_else(short)?;
                v_bits = r.read_bits(64).ok_or_else(short)?;
            }
            _ => {
                if i == 1 {
                    t_delta = r.read_uvarint().ok_or_else(short)? as i64;
                } else {
                    let mut prefix = 0u8;
                    for _ in 0..4 {
                        if !r.read_bit().ok_or_else(short)? {
                            break;
                        }
                        prefix += 1;
                    }
                    let dod = match prefix {
                        0 => 0,
                        1..=3 => {
                            let n = [14u8, 17, 20][usize::from(prefix - 1)];
                            let raw = r.read_bits(n).ok_or_else(short)?;
                            // Two's complement in n bits, with Prometheus' asymmetric range.
                            if raw > 1 << (n - 1) {
                                raw as i64 - (1i64 << n)
                            } else {
                                raw as i64
                            }
                        }
                        _ => r.read_bits(64).ok_or_else(short)? as i64,
                    };
                    t_delta = t_delta.wrapping_add(dod);
                }
                t = t.wrapping_add(t_delta);
                if r.read_bit().ok_or_else(short)? {
                    if r.read_bit().ok_or_else(short)? {
                        leading = r.read_bits(5).ok_or_else(short)? as u8;
                        let mut sig = r.read_bits(6).ok_or_else(short)? as u8;
                        if sig == 0 {
                            sig = 64;
                        }
                        trailing = 64u8.checked_sub(leading + sig).ok_or_else(|| {
                            err(format!("sample {i}: leading {leading} + length {sig} exceed 64 bits"))
                        })?;
                    }
                    let sig = 64 - leading - trailing;
                    let bits = r.read_bits(sig).ok_or_else(short)?;
                    v_bits ^= bits.checked_shl(trailing.into()).unwrap_or(0);
                }
            }
        }
        out.push(Sample::new(t, f64::from_bits(v_bits)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn assert_bits_equal(got: &[Sample], want: &[Sample]) {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(g.bit_eq(w), "sample {i}: got {g:?}, want {w:?}");
        }
    }

    #[test]
    fn known_layout_of_first_samples() {
        let mut enc = XorEncoder::new();
        enc.append(1, 1.0);
        // count=1, varint(1)=0x02, then 1.0 = 0x3ff0000000000000.
        assert_eq!(enc.bytes(), &[0, 1, 0x02, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0]);
        enc.append(3, 1.0);
        // uvarint(2) then a single 0 bit for the unchanged value.
        assert_eq!(&enc.bytes()[..2], &[0, 2]);
        assert_eq!(&enc.bytes()[11..], &[0x02, 0x00]);
    }

    #[test]
    fn every_dod_class_round_trips() {
        let mut t = 1_000_000i64;
        let mut samples = vec![Sample::new(t, 0.5)];
        let mut delta = 15_000i64;
        for (i, dod) in [
            0i64,
            1,
            -8191,
            8192,
            8193,
            -65535,
            65536,
            -524287,
            524288,
            524289,
            -10_000_000,
            0,
        ]
        .into_iter()
        .enumerate()
        {
            delta += dod;
            t += delta;
            samples.push(Sample::new(t, i as f64 * 1.25));
        }
        let chunk = XorEncoder::encode(&samples);
        assert_bits_equal(&decode_xor_chunk(&chunk).expect("decode"), &samples);
    }

    #[test]
    fn special_values_round_trip() {
        let vals = [
            0.0,
            -0.0,
            f64::NAN,
            f64::from_bits(heddle_model::STALE_NAN_BITS),
            f64::INFINITY,
            f64::MIN_POSITIVE,
            1e300,
            -1.0,
        ];
        let samples: Vec<_> = vals
            .iter()
            .enumerate()
            .map(|(i, v)| Sample::new(i as i64 * 1000, *v))
            .collect();
        assert_bits_equal(
            &decode_xor_chunk(&XorEncoder::encode(&samples)).expect("decode"),
            &samples,
        );
    }

    #[test]
    fn malformed_chunks_are_errors() {
        assert!(decode_xor_chunk(&[]).is_err());
        assert!(decode_xor_chunk(&[0, 5, 0x02]).is_err());
        let chunk = XorEncoder::encode(&[Sample::new(1, 1.0), Sample::new(2, 2.0), Sample::new(3, 7.0)]);
        for cut in 2..chunk.len() - 1 {
            assert!(decode_xor_chunk(&chunk[..cut]).is_err(), "cut at {cut}");
        }
        assert_eq!(decode_xor_chunk(&[0, 0]).expect("empty chunk"), vec![]);
    }

    proptest! {
        #[test]
        fn round_trip(start in -1i64 << 40..1i64 << 40, steps in proptest::collection::vec((0i64..10_000_000, any::<u64>(), 0u8..4), 0..300)) {
            let mut t = start;
            let mut samples = Vec::new();
            let mut last = 0.0f64;
            for (dt, bits, kind) in steps {
                t += dt;
                let v = match kind {
                    0 => f64::from_bits(bits),
                    1 => last,
                    2 => (bits % 1000) as f64,
                    _ => last + 1.0,
                };
                last = v;
                samples.push(Sample::new(t, v));
            }
            let got = decode_xor_chunk(&XorEncoder::encode(&samples)).expect("decode");
            prop_assert_eq!(got.len(), samples.len());
            for (g, w) in got.iter().zip(&samples) {
                prop_assert!(g.bit_eq(w), "got {:?}, want {:?}", g, w);
            }
        }

        #[test]
        fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_xor_chunk(&bytes);
        }
    }
}
