//! Bit streams for the XOR chunk: written and read most significant bit first.
//!
//! The writer only ever appends, and the unused low bits of the last byte stay zero: that zero padding is
//! what Prometheus stores at the end of a chunk. Since Prometheus 3.0 (PR #14854) the writer never adds a
//! spare zero byte after a byte-aligned write; older versions sometimes did, and readers ignore it.

/// Appends bits to a byte vector, most significant bit first.
#[derive(Debug, Clone, Default)]
pub(crate) struct BitWriter {
    buf: Vec<u8>,
    /// How many low bits of the last byte are still free (0 = the stream is byte aligned).
    free: u8,
}

/// Bytes a full stream buffer grows by.
const GROW_STEP: usize = 32;

impl BitWriter {
    /// Continues a stream whose last `free` bits (of its last byte) are unused and zero.
    pub(crate) fn resume(buf: Vec<u8>, free: u8) -> Self {
        debug_assert!(free < 8, "free bits {free} must be below 8");
        debug_assert!(free == 0 || !buf.is_empty(), "free bits need a last byte");
        Self { buf, free }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }

    pub(crate) fn into_vec(self) -> Vec<u8> {
        self.buf
    }

    pub(crate) fn write_bit(&mut self, bit: bool) {
        self.write_bits(u64::from(bit), 1);
    }

    /// Writes the `nbits` (at most 64) low bits of `value`, the highest of them first.
    pub(crate) fn write_bits(&mut self, value: u64, nbits: u32) {
        debug_assert!(nbits <= 64, "cannot write {nbits} bits at once");
        let mut remaining = nbits.min(64);
        while remaining > 0 {
            if self.free == 0 {
                if self.buf.len() == self.buf.capacity() {
                    // Grow by small steps: an open chunk lives as long as its series, and doubling would leave
                    // a quarter of its buffer unused on average.
                    self.buf.reserve_exact(GROW_STEP);
                }
                self.buf.push(0);
                self.free = 8;
            }
            let take = remaining.min(u32::from(self.free));
            let part = (value >> (remaining - take)) & ((1u64 << take) - 1);
            if let Some(last) = self.buf.last_mut() {
                // `part` holds at most `free` (<= 8) bits, so it fits the byte after the shift.
                *last |= (part as u8) << (u32::from(self.free) - take);
            }
            self.free -= take as u8;
            remaining -= take;
        }
    }

    pub(crate) fn write_byte(&mut self, byte: u8) {
        self.write_bits(u64::from(byte), 8);
    }
}

/// Reads bits from a byte slice, most significant bit first. Every read checks the bounds: running past the
/// end returns `None`, never panics.
///
/// The XOR decoder reads a sample's variable-length fields (delta-of-delta bucket, value control bits, often
/// the value's bits too) from one [`peek_word`](Self::peek_word), a big-endian word loaded at the current bit and
/// zero-padded past the end of the data, then consumes what it decoded with one bounds check
/// ([`skip`](Self::skip), [`read_bits_after`](Self::read_bits_after)), instead of reading field by field.
#[derive(Debug, Clone)]
pub(crate) struct BitReader<'a> {
    data: &'a [u8],
    /// Position of the next bit to read, counted from the first bit of `data`; never above `len`.
    pos: usize,
    /// Bits in `data`.
    len: usize,
}

/// How many leading bits of a [`BitReader::peek_word`] are always stream bits: 64 minus up to 7 already read
/// from its first byte.
pub(crate) const PEEK_BITS: u32 = 57;

impl<'a> BitReader<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Self {
            data,
            pos: 0,
            len: data.len().saturating_mul(8),
        }
    }

    /// Bits read so far.
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    /// Bits left to read.
    pub(crate) fn remaining(&self) -> usize {
        self.len - self.pos
    }

    /// The 64 bits from the current position, without consuming them: the first [`PEEK_BITS`] are the stream's
    /// (zero past its end), the rest zero or the stream's.
    #[inline(always)]
    pub(crate) fn peek_word(&self) -> u64 {
        let byte = self.pos >> 3;
        let word = match self.data.get(byte..).and_then(<[u8]>::first_chunk::<8>) {
            Some(word) => u64::from_be_bytes(*word),
            None => last_word(self.data, byte),
        };
        word << (self.pos & 7)
    }

    /// Consumes `nbits` bits, or returns `None` (and consumes nothing) when fewer remain.
    #[inline(always)]
    pub(crate) fn skip(&mut self, nbits: u32) -> Option<()> {
        if nbits as usize > self.len - self.pos {
            return None;
        }
        self.pos += nbits as usize;
        Some(())
    }

    #[cfg(test)]
    pub(crate) fn read_bit(&mut self) -> Option<bool> {
        self.read_bits(1).map(|b| b == 1)
    }

    /// Reads `nbits` (at most 64) bits into the low bits of the result.
    #[inline(always)]
    pub(crate) fn read_bits(&mut self, nbits: u32) -> Option<u64> {
        if nbits > 64 {
            return None;
        }
        self.read_bits_after(0, nbits)
    }

    /// Skips `skip` bits, then reads `nbits` (0 to 64) into the low bits of the result; all or nothing.
    #[inline(always)]
    pub(crate) fn read_bits_after(&mut self, skip: u32, nbits: u32) -> Option<u64> {
        debug_assert!(nbits <= 64, "cannot read {nbits} bits at once");
        if skip as usize + nbits as usize > self.len - self.pos {
            return None;
        }
        self.pos += skip as usize;
        let mut word = self.peek_word();
        let offset = (self.pos & 7) as u32;
        if nbits + offset > 64 {
            // The word holds 64 - offset bits; the rest are the top bits of the byte after its 8, which
            // exists since the bounds were checked.
            let next = self.data.get((self.pos >> 3) + 8).copied().unwrap_or(0);
            word |= u64::from(next) >> (8 - offset);
        }
        self.pos += nbits as usize;
        Some(word.checked_shr(64 - nbits).unwrap_or(0))
    }

    #[inline]
    pub(crate) fn read_byte(&mut self) -> Option<u8> {
        self.read_bits(8).map(|b| b as u8)
    }

    /// Reads a Go `binary.Uvarint`. `Err(())` means overflow (more than 64 bits), `Ok(None)` a short read.
    #[inline]
    pub(crate) fn read_uvarint(&mut self) -> Result<Option<u64>, ()> {
        let mut x = 0u64;
        let mut shift = 0u32;
        for i in 0..10 {
            let Some(b) = self.read_byte() else {
                return Ok(None);
            };
            if b < 0x80 {
                if i == 9 && b > 1 {
                    return Err(());
                }
                return Ok(Some(x | (u64::from(b) << shift)));
            }
            x |= u64::from(b & 0x7f) << shift;
            shift += 7;
        }
        Err(())
    }

    /// Reads a Go `binary.Varint` (zigzag-encoded signed integer).
    #[inline]
    pub(crate) fn read_varint(&mut self) -> Result<Option<i64>, ()> {
        Ok(self.read_uvarint()?.map(zigzag_decode))
    }
}

/// The fewer than 8 bytes of `data` from `byte` on, zero-padded to a big-endian word: the last 8 bytes of the
/// data, shifted up. Each chunk's last few samples are read this way, so it is not a rare path for short
/// chunks. It takes the slice rather than the reader so that the reader's address does not escape: a loop
/// over an inlined [`XorIter`] keeps the reader in registers.
///
/// [`XorIter`]: super::XorIter
#[inline]
fn last_word(data: &[u8], byte: usize) -> u64 {
    if let Some(last) = data.last_chunk::<8>() {
        let before = (byte + 8).saturating_sub(data.len()) as u32;
        return u64::from_be_bytes(*last).checked_shl(8 * before).unwrap_or(0);
    }
    let rest = data.get(byte..).unwrap_or_default();
    let word = rest.iter().fold(0u64, |word, b| (word << 8) | u64::from(*b));
    word.checked_shl(64 - 8 * rest.len() as u32).unwrap_or(0)
}

/// Encodes `x` as a Go `binary.PutUvarint` into `buf`, returning the length used.
pub(crate) fn put_uvarint(buf: &mut [u8; 10], mut x: u64) -> usize {
    let mut i = 0;
    while x >= 0x80 {
        buf[i] = (x as u8) | 0x80;
        x >>= 7;
        i += 1;
    }
    buf[i] = x as u8;
    i + 1
}

/// Encodes `x` as a Go `binary.PutVarint` (zigzag) into `buf`, returning the length used.
pub(crate) fn put_varint(buf: &mut [u8; 10], x: i64) -> usize {
    put_uvarint(buf, zigzag_encode(x))
}

fn zigzag_encode(x: i64) -> u64 {
    ((x << 1) ^ (x >> 63)) as u64
}

fn zigzag_decode(ux: u64) -> i64 {
    let x = (ux >> 1) as i64;
    if ux & 1 != 0 { !x } else { x }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn varints_match_go() {
        let mut buf = [0u8; 10];
        for (name, x, want) in [
            ("zero", 0u64, &[0x00][..]),
            ("one byte max", 127, &[0x7f]),
            ("two bytes", 300, &[0xac, 0x02]),
            (
                "max",
                u64::MAX,
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            ),
        ] {
            let n = put_uvarint(&mut buf, x);
            assert_eq!(&buf[..n], want, "case {name}");
        }
        for (name, x, want) in [
            ("zero", 0i64, &[0x00][..]),
            ("minus one", -1, &[0x01]),
            ("one", 1, &[0x02]),
        ] {
            let n = put_varint(&mut buf, x);
            assert_eq!(&buf[..n], want, "case {name}");
        }
    }

    #[test]
    fn uvarint_overflow_is_an_error() {
        let bytes = [0xffu8; 11];
        assert_eq!(BitReader::new(&bytes).read_uvarint(), Err(()));
        let ten = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert_eq!(BitReader::new(&ten).read_uvarint(), Err(()));
        assert_eq!(BitReader::new(&[0x80]).read_uvarint(), Ok(None));
    }

    proptest! {
        #[test]
        fn bits_round_trip(fields in proptest::collection::vec((any::<u64>(), 0u32..=64), 0..64)) {
            let mut w = BitWriter::default();
            for (v, n) in &fields {
                w.write_bits(*v, *n);
            }
            let total: u32 = fields.iter().map(|(_, n)| n).sum();
            prop_assert_eq!(w.bytes().len(), total.div_ceil(8) as usize);
            let bytes = w.into_vec();
            let mut r = BitReader::new(&bytes);
            for (v, n) in &fields {
                let mask = if *n == 64 { u64::MAX } else { (1u64 << n) - 1 };
                prop_assert_eq!(r.read_bits(*n), Some(v & mask));
            }
            prop_assert_eq!(r.position(), total as usize);
            // Only zero padding remains.
            let pad = (8 - total % 8) % 8;
            prop_assert_eq!(r.read_bits(pad), Some(0));
            prop_assert_eq!(r.read_bit(), None);
        }

        #[test]
        fn peeks_and_reads_match_bit_by_bit(
            data in proptest::collection::vec(any::<u8>(), 0..24),
            pos in 0usize..200,
            skip in 0u32..40,
            nbits in 0u32..=64,
        ) {
            let len = data.len() * 8;
            let bit = |i: usize| data.get(i / 8).map_or(0, |b| u64::from(b >> (7 - i % 8)) & 1);
            let bits = |from: usize, n: u32| (0..n as usize).fold(0u64, |v, i| (v << 1) | bit(from + i));
            let pos = pos.min(len);
            let mut r = BitReader::new(&data);
            r.skip(pos as u32).unwrap();
            let word = r.peek_word();
            prop_assert_eq!(word >> (64 - PEEK_BITS), bits(pos, PEEK_BITS), "peek at {}", pos);
            let got = r.read_bits_after(skip, nbits);
            if pos + (skip + nbits) as usize <= len {
                prop_assert_eq!(got, Some(bits(pos + skip as usize, nbits)));
                prop_assert_eq!(r.position(), pos + (skip + nbits) as usize);
            } else {
                prop_assert_eq!(got, None);
                prop_assert_eq!(r.position(), pos, "a failed read consumes nothing");
            }
        }

        #[test]
        fn varints_round_trip(x in any::<i64>(), ux in any::<u64>()) {
            let mut buf = [0u8; 10];
            let n = put_varint(&mut buf, x);
            prop_assert_eq!(BitReader::new(&buf[..n]).read_varint(), Ok(Some(x)));
            let n = put_uvarint(&mut buf, ux);
            prop_assert_eq!(BitReader::new(&buf[..n]).read_uvarint(), Ok(Some(ux)));
        }
    }
}
