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

use super::bstream::{BitReader, BitWriter, PEEK_BITS, put_uvarint, put_varint};
use crate::error::ChunkError;
use heddle_model::Sample;

/// Bytes of the sample-count header.
pub const XOR_HEADER_LEN: usize = 2;

/// Marks "no leading/trailing window yet".
const NO_WINDOW: u8 = 0xff;
/// Marks a chunk restored from its bytes whose appender state is not decoded yet ([`XorChunk::restore`]).
const PENDING: u8 = 0xfe;

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
        let buf: Vec<u8> = bytes.into();
        let decoded = decode_all(&buf)?;
        Ok(Self::resumed(buf, &decoded))
    }

    /// The chunk of `buf` once [`decode_all`] decoded it.
    fn resumed(mut buf: Vec<u8>, d: &Decoded) -> Self {
        buf.truncate(d.bits.div_ceil(8));
        let used_in_last = (d.bits % 8) as u32;
        let free = if used_in_last == 0 { 0 } else { 8 - used_in_last };
        if free > 0
            && let Some(last) = buf.last_mut()
        {
            *last &= !((1u8 << free) - 1);
        }
        Self {
            stream: BitWriter::resume(buf, free as u8),
            num: d.num,
            min_time: d.min_time,
            t: d.state.t,
            v_bits: d.state.v_bits,
            t_delta: d.state.t_delta,
            leading: if d.num == 0 { NO_WINDOW } else { d.state.leading },
            trailing: d.state.trailing,
        }
    }

    /// Takes the bytes of an encoded chunk whose newest sample is known (a chunk snapshot records its time
    /// and value), decoding only its first sample: the rest is decoded by [`XorChunk::resume`], which the
    /// first [`XorChunk::append`] calls. Until then the chunk reads, iterates and writes out as its bytes
    /// are. A restart restores a million open chunks and appends to each at most once per scrape interval
    /// after; decoding them all up front was half the CPU of a million-series snapshot load.
    ///
    /// Fails when the first sample does not decode. Chunks of at most two samples are decoded at once, with
    /// the check [`XorChunk::resume`] makes of longer ones at their first append.
    pub fn restore(bytes: Vec<u8>, max_time: i64, last_bits: u64) -> Result<Self, ChunkError> {
        let mut it = XorIter::new(&bytes);
        let first = it.next();
        if let Some(err) = it.error() {
            return Err(err.clone());
        }
        let (num, min_time) = (it.num_samples(), first.map_or(i64::MIN, |s| s.t));
        let mut chunk = Self {
            stream: BitWriter::resume(bytes, 0),
            num,
            min_time,
            t: max_time,
            v_bits: last_bits,
            t_delta: 0,
            leading: PENDING,
            trailing: 0,
        };
        if num <= 2 {
            chunk.resume()?;
        }
        Ok(chunk)
    }

    /// Whether the appender state of a [`XorChunk::restore`]d chunk is still to be decoded.
    pub fn is_pending(&self) -> bool {
        self.leading == PENDING
    }

    /// Decodes the appender state of a [`XorChunk::restore`]d chunk (nothing to do for any other). Fails,
    /// leaving the chunk as it was, when its bytes do not decode or do not end in the sample it was restored
    /// with (an empty chunk ends in none).
    pub fn resume(&mut self) -> Result<(), ChunkError> {
        if !self.is_pending() {
            return Ok(());
        }
        let d = decode_all(self.stream.bytes())?;
        if d.num == 0
            || (d.num, d.min_time, d.state.t, d.state.v_bits) != (self.num, self.min_time, self.t, self.v_bits)
        {
            return Err(ChunkError::NotAsRestored {
                samples: d.num,
                t: d.state.t,
                v_bits: d.state.v_bits,
                want_samples: self.num,
                want_t: self.t,
                want_v_bits: self.v_bits,
            });
        }
        let buf = std::mem::take(&mut self.stream).into_vec();
        *self = Self::resumed(buf, &d);
        Ok(())
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
        self.resume()?;
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

/// What decoding a whole chunk tells.
struct Decoded {
    num: u16,
    /// Timestamp of the first sample (`i64::MIN` without samples).
    min_time: i64,
    /// The appender state after the last sample.
    state: IterState,
    /// Bits the header and samples take.
    bits: usize,
}

/// Decodes every sample of `buf`, keeping what an appender needs.
fn decode_all(buf: &[u8]) -> Result<Decoded, ChunkError> {
    let mut it = XorIter::new(buf);
    let min_time = it.next().map_or(i64::MIN, |s| s.t);
    for _ in it.by_ref() {}
    if let Some(err) = it.error() {
        return Err(err.clone());
    }
    Ok(Decoded {
        num: it.total,
        min_time,
        state: it.state(),
        bits: XOR_HEADER_LEN * 8 + it.reader.position(),
    })
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
///
/// Decoding is the hot loop of head restores, queries and compaction. [`Iterator::next`] and everything it
/// calls are inlined into the caller's loop, and none takes the reader or the state by reference out of line,
/// so the compiler keeps them in registers; storing and reloading them for every sample would put a memory
/// round trip on the chain from one sample's bit position to the next.
#[derive(Debug, Clone)]
pub struct XorIter<'a> {
    reader: BitReader<'a>,
    total: u16,
    read: u16,
    /// Where decoding stops: `total`, or the sample that failed to decode.
    end: u16,
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
            [hi, lo, rest @ ..] => {
                let total = u16::from_be_bytes([*hi, *lo]);
                Self {
                    reader: BitReader::new(rest),
                    total,
                    read: 0,
                    end: total,
                    state,
                    err: None,
                }
            }
            _ => Self {
                reader: BitReader::new(&[]),
                total: 0,
                read: 0,
                end: 0,
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

    /// Decodes the first or the second sample, whose times are varints.
    #[inline]
    fn read_first_two(&mut self) -> Result<(), Malformed> {
        let r = &mut self.reader;
        let st = &mut self.state;
        if self.read == 0 {
            st.t = r
                .read_varint()
                .map_err(|()| Malformed::VarintOverflow)?
                .ok_or(Malformed::Truncated)?;
            st.v_bits = r.read_bits(64).ok_or(Malformed::Truncated)?;
        } else {
            st.t_delta = r
                .read_uvarint()
                .map_err(|()| Malformed::VarintOverflow)?
                .ok_or(Malformed::Truncated)?;
            st.t = st.t.wrapping_add(st.t_delta as i64);
            let w = r.peek_word();
            read_value(r, st, w, 0)?;
        }
        Ok(())
    }

    /// Records why sample `read` does not decode, and stops there.
    #[inline]
    fn fail(&mut self, why: Malformed) {
        self.err = Some(why.at(self.read));
        self.end = self.read;
    }
}

impl Iterator for XorIter<'_> {
    type Item = Sample;

    #[inline]
    fn next(&mut self) -> Option<Sample> {
        if self.read >= self.end {
            return None;
        }
        let decoded = if self.read >= 2 {
            read_sample(&mut self.reader, &mut self.state)
        } else {
            self.read_first_two()
        };
        match decoded {
            Ok(()) => {
                self.read += 1;
                Some(Sample::new(self.state.t, f64::from_bits(self.state.v_bits)))
            }
            Err(why) => {
                self.fail(why);
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(usize::from(self.end - self.read)))
    }
}

/// Why a sample does not decode: [`XorIter`] turns it into a [`ChunkError`] with the sample's index, so the
/// decoding itself never builds one.
#[derive(Debug, Clone, Copy)]
enum Malformed {
    Truncated,
    VarintOverflow,
    BadWindow { leading: u8, sig: u8 },
}

impl Malformed {
    fn at(self, sample: u16) -> ChunkError {
        match self {
            Self::Truncated => ChunkError::Truncated { sample },
            Self::VarintOverflow => ChunkError::VarintOverflow { sample },
            Self::BadWindow { leading, sig } => ChunkError::BadWindow { sample, leading, sig },
        }
    }
}

/// Decodes a sample from the third on: the delta of delta of its time, then its value.
///
/// The bucket prefix, its payload and the value's control bits (at most 4 + 20 + 13 bits) all lie in one
/// peeked word, so one bounds check covers them. The prefix bits are tested one at a time, most likely first:
/// each test resolves its branch right after the load, which costs less when it is mispredicted than counting
/// leading ones first (measured).
#[inline(always)]
fn read_sample(r: &mut BitReader<'_>, st: &mut IterState) -> Result<(), Malformed> {
    let w = r.peek_word();
    let (used, dod) = if w >> 63 == 0 {
        (1, 0)
    } else if w >> 62 == 0b10 {
        (2 + 14, dod_bucket(w, 2, 14))
    } else if w >> 61 == 0b110 {
        (3 + 17, dod_bucket(w, 3, 17))
    } else if w >> 60 == 0b1110 {
        (4 + 20, dod_bucket(w, 4, 20))
    } else {
        return read_wide_sample(r, st);
    };
    st.t_delta = st.t_delta.wrapping_add(dod as u64);
    st.t = st.t.wrapping_add(st.t_delta as i64);
    read_value(r, st, w, used)
}

/// [`read_sample`] for a delta of delta in the 64-bit bucket, which does not fit a peeked word. Rare, but
/// inlined too: see [`XorIter`].
#[inline]
fn read_wide_sample(r: &mut BitReader<'_>, st: &mut IterState) -> Result<(), Malformed> {
    r.skip(4).ok_or(Malformed::Truncated)?;
    let dod = r.read_bits(64).ok_or(Malformed::Truncated)?;
    st.t_delta = st.t_delta.wrapping_add(dod);
    st.t = st.t.wrapping_add(st.t_delta as i64);
    let w = r.peek_word();
    read_value(r, st, w, 0)
}

/// The delta of delta in an `nbits` bucket after a `prefix`-bit prefix at the top of `w`. A bucket holds
/// [-(2^(n-1) - 1), 2^(n-1)]: bit patterns above 2^(n-1) are negative.
#[inline(always)]
fn dod_bucket(w: u64, prefix: u32, nbits: u32) -> i64 {
    let bits = (w << prefix) >> (64 - nbits);
    if bits > 1 << (nbits - 1) {
        bits as i64 - (1i64 << nbits)
    } else {
        bits as i64
    }
}

/// Reads a value whose control bits (`0`, `10`, or `11` + 5 bits leading zeros + 6 bits significant bits)
/// start `used` bits (at most 24) into `w`, the word peeked at the reader's position; consumes those `used`
/// bits too.
#[inline(always)]
fn read_value(r: &mut BitReader<'_>, st: &mut IterState, w: u64, used: u32) -> Result<(), Malformed> {
    debug_assert!(used + 13 <= PEEK_BITS, "control bits beyond the peeked word");
    let control = w << used;
    if control >> 63 == 0 {
        // The value repeats.
        return r.skip(used + 1).ok_or(Malformed::Truncated);
    }
    let head = if control >> 62 == 0b10 {
        used + 2
    } else {
        let leading = ((control >> 57) & 0x1f) as u8;
        let sig = match ((control >> 51) & 0x3f) as u8 {
            0 => 64,
            sig => sig,
        };
        if leading + sig > 64 {
            // Counts read in full that do not fit 64 bits are corrupt; counts cut short are truncated, as
            // they were when read field by field.
            r.skip(used + 13).ok_or(Malformed::Truncated)?;
            return Err(Malformed::BadWindow { leading, sig });
        }
        st.leading = leading;
        st.trailing = 64 - leading - sig;
        used + 13
    };
    let sig = 64 - u32::from(st.leading) - u32::from(st.trailing);
    // Small XORs (counters) are often still in the peeked word: that saves a load.
    let bits = if head + sig <= PEEK_BITS {
        r.skip(head + sig).ok_or(Malformed::Truncated)?;
        (w << head) >> (64 - sig)
    } else {
        r.read_bits_after(head, sig).ok_or(Malformed::Truncated)?
    };
    st.v_bits ^= bits << st.trailing;
    Ok(())
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
