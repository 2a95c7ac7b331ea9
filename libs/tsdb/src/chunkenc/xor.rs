//! Prometheus' XOR ("Gorilla") float chunk, byte for byte.
//!
//! Layout (`tsdb/chunkenc/xor.go`):
//! ```text
//! u16 BE  number of samples
//! varint  t0                      (zigzag)
//! 64 bits v0
//! uvarint t1 - t0
//! then per sample from the second on: [delta-of-delta of t] (from the third on) + [value XOR]
//! ```
//! Delta-of-delta buckets: `0` -> dod 0; `10` + 14 bits; `110` + 17 bits; `1110` + 20 bits; `1111` + 64 bits,
//! a bucket of n bits holding dods in [-(2^(n-1) - 1), 2^(n-1)] as n-bit two's complement.
//! Value: `0` when the XOR with the previous value is 0; else `1` then either `0` + the bits inside the
//! previous (leading, trailing) window, when the new XOR fits it, or `1` + 5 bits leading zeros (clamped to
//! 31) + 6 bits significant-bit count (64 stored as 0) + the significant bits. A new chunk has no window,
//! so its first non-zero XOR always takes the `11` form. The stream ends zero-padded to a whole byte.
//!
//! All time arithmetic wraps like Go's, so any i64 timestamps round-trip, even decreasing ones (the head
//! rejects those before they get here).

use super::bstream::{BitReader, BitWriter, put_uvarint, put_varint};
use crate::error::ChunkError;
use heddle_model::Sample;

/// Bytes of the sample-count header.
pub const XOR_HEADER_LEN: usize = 2;

/// Marks "no leading/trailing window yet".
const NO_WINDOW: u8 = 0xff;

/// An XOR chunk that owns its bytes and can be appended to.
///
/// The appender state (previous sample, delta, XOR window) lives beside the bytes, so appending never
/// re-reads the chunk. `bytes()` is always a complete, valid chunk.
#[derive(Debug, Clone)]
pub struct XorChunk {
    stream: BitWriter,
    num: u16,
    min_time: i64,
    t: i64,
    v_bits: u64,
    t_delta: u64,
    leading: u8,
    trailing: u8,
}

impl Default for XorChunk {
    fn default() -> Self {
        Self::new()
    }
}

impl XorChunk {
    /// An empty chunk (two zero header bytes).
    pub fn new() -> Self {
        let mut buf = Vec::with_capacity(32);
        buf.extend_from_slice(&[0, 0]);
        Self {
            stream: BitWriter::resume(buf, 0),
            num: 0,
            min_time: i64::MIN,
            t: i64::MIN,
            v_bits: 0,
            t_delta: 0,
            leading: NO_WINDOW,
            trailing: 0,
        }
    }

    /// Takes the bytes of an encoded chunk, decoding all of it to check it and to restore the appender
    /// state, so more samples can be appended.
    ///
    /// The appender state is what Prometheus' `XORChunk.Appender()` restores from its iterator: for a
    /// non-empty chunk whose values never needed a window, the window is (0, 0) rather than unset. Bytes
    /// after the last sample's bits (the spare zero byte that Prometheus before 3.0 sometimes wrote) are
    /// dropped, and the padding bits of the last byte are cleared, so appends continue the bit stream.
    pub fn from_bytes(bytes: impl Into<Vec<u8>>) -> Result<Self, ChunkError> {
        let mut buf: Vec<u8> = bytes.into();
        let mut it = XorIter::new(&buf);
        let mut min_time = i64::MIN;
        for (i, s) in it.by_ref().enumerate() {
            if i == 0 {
                min_time = s.t;
            }
        }
        if let Some(err) = it.error() {
            return Err(err.clone());
        }
        let state = it.state();
        let num = it.total;
        let bits = XOR_HEADER_LEN * 8 + it.reader.position();
        buf.truncate(bits.div_ceil(8));
        let used_in_last = (bits % 8) as u32;
        let free = if used_in_last == 0 { 0 } else { 8 - used_in_last };
        if free > 0
            && let Some(last) = buf.last_mut()
        {
            *last &= !((1u8 << free) - 1);
        }
        Ok(Self {
            stream: BitWriter::resume(buf, free as u8),
            num,
            min_time,
            t: state.t,
            v_bits: state.v_bits,
            t_delta: state.t_delta,
            leading: if num == 0 { NO_WINDOW } else { state.leading },
            trailing: state.trailing,
        })
    }

    /// Number of samples, as the header says.
    pub fn num_samples(&self) -> u16 {
        self.num
    }

    /// True when the chunk holds no sample.
    pub fn is_empty(&self) -> bool {
        self.num == 0
    }

    /// The encoded chunk: header and bit stream.
    pub fn bytes(&self) -> &[u8] {
        self.stream.bytes()
    }

    /// The encoded chunk, consuming it.
    pub fn into_bytes(self) -> Vec<u8> {
        self.stream.into_vec()
    }

    /// Timestamp of the first sample.
    pub fn min_time(&self) -> Option<i64> {
        (self.num > 0).then_some(self.min_time)
    }

    /// Timestamp of the last sample.
    pub fn max_time(&self) -> Option<i64> {
        (self.num > 0).then_some(self.t)
    }

    /// The last sample appended.
    pub fn last(&self) -> Option<Sample> {
        (self.num > 0).then(|| Sample::new(self.t, f64::from_bits(self.v_bits)))
    }

    /// Timestamp and value bits of the last sample appended.
    pub fn last_bits(&self) -> Option<(i64, u64)> {
        (self.num > 0).then_some((self.t, self.v_bits))
    }

    /// Iterates the samples.
    pub fn iter(&self) -> XorIter<'_> {
        XorIter::new(self.bytes())
    }

    /// Appends a sample. The chunk does not check time order (the head does); it fails only when the
    /// 16-bit sample count is exhausted.
    pub fn append(&mut self, t: i64, v: f64) -> Result<(), ChunkError> {
        if self.num == u16::MAX {
            return Err(ChunkError::Full { samples: self.num });
        }
        let mut varint = [0u8; 10];
        let mut t_delta = 0;
        match self.num {
            0 => {
                let n = put_varint(&mut varint, t);
                for b in &varint[..n] {
                    self.stream.write_byte(*b);
                }
                self.stream.write_bits(v.to_bits(), 64);
                self.min_time = t;
            }
            1 => {
                t_delta = t.wrapping_sub(self.t) as u64;
                let n = put_uvarint(&mut varint, t_delta);
                for b in &varint[..n] {
                    self.stream.write_byte(*b);
                }
                self.write_value(v.to_bits());
            }
            _ => {
                t_delta = t.wrapping_sub(self.t) as u64;
                let dod = t_delta.wrapping_sub(self.t_delta) as i64;
                if dod == 0 {
                    self.stream.write_bit(false);
                } else if fits_bits(dod, 14) {
                    self.stream.write_bits(0b10, 2);
                    self.stream.write_bits(dod as u64, 14);
                } else if fits_bits(dod, 17) {
                    self.stream.write_bits(0b110, 3);
                    self.stream.write_bits(dod as u64, 17);
                } else if fits_bits(dod, 20) {
                    self.stream.write_bits(0b1110, 4);
                    self.stream.write_bits(dod as u64, 20);
                } else {
                    self.stream.write_bits(0b1111, 4);
                    self.stream.write_bits(dod as u64, 64);
                }
                self.write_value(v.to_bits());
            }
        }
        self.t = t;
        self.v_bits = v.to_bits();
        self.t_delta = t_delta;
        self.num += 1;
        let header = self.num.to_be_bytes();
        if let Some(h) = self.stream.bytes_mut().get_mut(..XOR_HEADER_LEN) {
            h.copy_from_slice(&header);
        }
        Ok(())
    }

    fn write_value(&mut self, v_bits: u64) {
        let delta = v_bits ^ self.v_bits;
        if delta == 0 {
            self.stream.write_bit(false);
            return;
        }
        self.stream.write_bit(true);
        // Five bits hold at most 31 leading zeros; clamping only wastes a bit or so of precision.
        let leading = (delta.leading_zeros() as u8).min(31);
        let trailing = delta.trailing_zeros() as u8;
        if self.leading != NO_WINDOW && leading >= self.leading && trailing >= self.trailing {
            self.stream.write_bit(false);
            let sig = 64 - u32::from(self.leading) - u32::from(self.trailing);
            self.stream.write_bits(delta >> self.trailing, sig);
            return;
        }
        self.leading = leading;
        self.trailing = trailing;
        self.stream.write_bit(true);
        self.stream.write_bits(u64::from(leading), 5);
        // 64 significant bits do not fit 6 bits: they are written as 0, which can mean nothing else
        // (a zero XOR took the branch above).
        let sig = 64 - u32::from(leading) - u32::from(trailing);
        self.stream.write_bits(u64::from(sig), 6);
        self.stream.write_bits(delta >> trailing, sig);
    }
}

/// Whether `x` fits a delta-of-delta bucket of `nbits`: [-(2^(n-1) - 1), 2^(n-1)].
fn fits_bits(x: i64, nbits: u32) -> bool {
    let half = 1i64 << (nbits - 1);
    -(half - 1) <= x && x <= half
}

#[derive(Debug, Clone, Copy)]
struct IterState {
    t: i64,
    v_bits: u64,
    t_delta: u64,
    leading: u8,
    trailing: u8,
}

/// Decodes the samples of an XOR chunk from borrowed bytes.
///
/// Never panics: on bytes that end early or do not decode it stops, and [`XorIter::error`] says why.
#[derive(Debug, Clone)]
pub struct XorIter<'a> {
    reader: BitReader<'a>,
    total: u16,
    read: u16,
    state: IterState,
    err: Option<ChunkError>,
}

impl<'a> XorIter<'a> {
    /// Starts decoding `bytes`, a whole chunk including its header.
    pub fn new(bytes: &'a [u8]) -> Self {
        let state = IterState {
            t: 0,
            v_bits: 0,
            t_delta: 0,
            leading: 0,
            trailing: 0,
        };
        match bytes {
            [hi, lo, rest @ ..] => Self {
                reader: BitReader::new(rest),
                total: u16::from_be_bytes([*hi, *lo]),
                read: 0,
                state,
                err: None,
            },
            _ => Self {
                reader: BitReader::new(&[]),
                total: 0,
                read: 0,
                state,
                err: Some(ChunkError::TooShort { len: bytes.len() }),
            },
        }
    }

    /// The number of samples the header announces.
    pub fn num_samples(&self) -> u16 {
        self.total
    }

    /// Why decoding stopped early, if it did.
    pub fn error(&self) -> Option<&ChunkError> {
        self.err.as_ref()
    }

    fn state(&self) -> IterState {
        self.state
    }

    fn step(&mut self) -> Result<Sample, ChunkError> {
        let sample = self.read;
        let truncated = ChunkError::Truncated { sample };
        let overflow = ChunkError::VarintOverflow { sample };
        let r = &mut self.reader;
        let st = &mut self.state;
        match self.read {
            0 => {
                st.t = r.read_varint().map_err(|()| overflow)?.ok_or(truncated.clone())?;
                st.v_bits = r.read_bits(64).ok_or(truncated)?;
            }
            1 => {
                st.t_delta = r.read_uvarint().map_err(|()| overflow)?.ok_or(truncated)?;
                st.t = st.t.wrapping_add(st.t_delta as i64);
                read_value(r, st, sample)?;
            }
            _ => {
                let mut prefix = 0u8;
                for _ in 0..4 {
                    prefix <<= 1;
                    if !r.read_bit().ok_or(truncated.clone())? {
                        break;
                    }
                    prefix |= 1;
                }
                let dod = match prefix {
                    0b0 => 0,
                    0b10 => read_signed(r, 14).ok_or(truncated)?,
                    0b110 => read_signed(r, 17).ok_or(truncated)?,
                    0b1110 => read_signed(r, 20).ok_or(truncated)?,
                    _ => r.read_bits(64).ok_or(truncated)? as i64,
                };
                st.t_delta = st.t_delta.wrapping_add(dod as u64);
                st.t = st.t.wrapping_add(st.t_delta as i64);
                read_value(r, st, sample)?;
            }
        }
        self.read += 1;
        Ok(Sample::new(st.t, f64::from_bits(st.v_bits)))
    }
}

/// Reads an `nbits` bucket value: bit patterns above 2^(n-1) are negative.
fn read_signed(r: &mut BitReader<'_>, nbits: u32) -> Option<i64> {
    let bits = r.read_bits(nbits)?;
    let half = 1u64 << (nbits - 1);
    Some(if bits > half {
        bits as i64 - (1i64 << nbits)
    } else {
        bits as i64
    })
}

fn read_value(r: &mut BitReader<'_>, st: &mut IterState, sample: u16) -> Result<(), ChunkError> {
    let truncated = ChunkError::Truncated { sample };
    if !r.read_bit().ok_or(truncated.clone())? {
        return Ok(());
    }
    if r.read_bit().ok_or(truncated.clone())? {
        let leading = r.read_bits(5).ok_or(truncated.clone())? as u8;
        let mut sig = r.read_bits(6).ok_or(truncated.clone())? as u8;
        if sig == 0 {
            sig = 64;
        }
        if u32::from(leading) + u32::from(sig) > 64 {
            return Err(ChunkError::BadWindow { sample, leading, sig });
        }
        st.leading = leading;
        st.trailing = 64 - leading - sig;
    }
    let sig = 64 - u32::from(st.leading) - u32::from(st.trailing);
    let bits = r.read_bits(sig).ok_or(truncated)?;
    st.v_bits ^= bits << st.trailing;
    Ok(())
}

impl Iterator for XorIter<'_> {
    type Item = Sample;

    fn next(&mut self) -> Option<Sample> {
        if self.err.is_some() || self.read >= self.total {
            return None;
        }
        match self.step() {
            Ok(s) => Some(s),
            Err(e) => {
                self.err = Some(e);
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.err.is_some() {
            return (0, Some(0));
        }
        (0, Some(usize::from(self.total - self.read)))
    }
}

/// Decodes every sample of an encoded chunk, or says why it cannot.
pub fn decode_xor(bytes: &[u8]) -> Result<Vec<Sample>, ChunkError> {
    let mut it = XorIter::new(bytes);
    let out: Vec<Sample> = it.by_ref().collect();
    match it.err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}
