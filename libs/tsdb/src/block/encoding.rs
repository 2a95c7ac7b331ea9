//! Byte helpers shared by the block formats: big-endian integers and Go-style varints, written into a `Vec`
//! and read back through a bounds-checked cursor that never panics on short or hostile input.

/// Appends `x` as an unsigned LEB128 varint (Go's `PutUvarint`).
pub(crate) fn put_uvarint(out: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        out.push((x as u8) | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
}

/// Appends `x` as a zigzag varint (Go's `PutVarint`).
pub(crate) fn put_varint(out: &mut Vec<u8>, x: i64) {
    put_uvarint(out, ((x << 1) ^ (x >> 63)) as u64);
}

/// Appends a uvarint length and the bytes of `s`.
pub(crate) fn put_uvarint_str(out: &mut Vec<u8>, s: &str) {
    put_uvarint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// Bytes `x` takes as a uvarint.
pub(crate) fn uvarint_len(mut x: u64) -> usize {
    let mut n = 1;
    while x >= 0x80 {
        x >>= 7;
        n += 1;
    }
    n
}

/// CRC32 Castagnoli, big-endian, as every block file stores it.
pub(crate) fn put_crc(out: &mut Vec<u8>, covered: &[u8]) {
    out.extend_from_slice(&crc32c::crc32c(covered).to_be_bytes());
}

/// Why a read ran off its bytes.
pub(crate) type DecodeResult<T> = Result<T, String>;

/// A cursor over bytes whose every read is checked.
#[derive(Debug, Clone)]
pub(crate) struct Dec<'a> {
    b: &'a [u8],
    /// Bytes consumed, for error messages.
    at: usize,
}

impl<'a> Dec<'a> {
    pub(crate) fn new(b: &'a [u8]) -> Self {
        Self { b, at: 0 }
    }

    /// Bytes left.
    pub(crate) fn len(&self) -> usize {
        self.b.len()
    }

    /// Bytes consumed so far.
    pub(crate) fn pos(&self) -> usize {
        self.at
    }

    pub(crate) fn bytes(&mut self, n: usize) -> DecodeResult<&'a [u8]> {
        if n > self.b.len() {
            return Err(format!(
                "{n} bytes wanted at byte {}, only {} left",
                self.at,
                self.b.len()
            ));
        }
        let (head, tail) = self.b.split_at(n);
        self.b = tail;
        self.at += n;
        Ok(head)
    }

    pub(crate) fn u8(&mut self) -> DecodeResult<u8> {
        Ok(self.bytes(1)?[0])
    }

    pub(crate) fn be32(&mut self) -> DecodeResult<u32> {
        let b = self.bytes(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn be64(&mut self) -> DecodeResult<u64> {
        let b = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    pub(crate) fn uvarint(&mut self) -> DecodeResult<u64> {
        let mut x: u64 = 0;
        for i in 0..10 {
            let Some(&b) = self.b.get(i) else {
                return Err(format!("varint cut off at byte {}", self.at + i));
            };
            if i == 9 && b > 1 {
                return Err(format!("varint overflows 64 bits at byte {}", self.at));
            }
            x |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                self.b = &self.b[i + 1..];
                self.at += i + 1;
                return Ok(x);
            }
        }
        Err(format!("varint overflows 64 bits at byte {}", self.at))
    }

    pub(crate) fn varint(&mut self) -> DecodeResult<i64> {
        let u = self.uvarint()?;
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }

    /// A uvarint that must fit in 32 bits (symbol references).
    pub(crate) fn uvarint32(&mut self) -> DecodeResult<u32> {
        let at = self.at;
        let v = self.uvarint()?;
        u32::try_from(v).map_err(|_| format!("value {v} at byte {at} does not fit 32 bits"))
    }

    /// A uvarint length and that many bytes.
    pub(crate) fn uvarint_bytes(&mut self) -> DecodeResult<&'a [u8]> {
        let n = self.uvarint()?;
        let n = usize::try_from(n).map_err(|_| format!("length {n} too large"))?;
        self.bytes(n)
    }

    /// A uvarint-prefixed UTF-8 string.
    pub(crate) fn uvarint_str(&mut self) -> DecodeResult<&'a str> {
        let at = self.at;
        let b = self.uvarint_bytes()?;
        std::str::from_utf8(b).map_err(|_| format!("string at byte {at} is not UTF-8"))
    }
}

/// Checks the big-endian CRC32C stored right after `covered`.
pub(crate) fn check_crc(covered: &[u8], stored: &[u8]) -> DecodeResult<()> {
    let Ok(stored) = <[u8; 4]>::try_from(stored) else {
        return Err("checksum cut off".to_owned());
    };
    let want = u32::from_be_bytes(stored);
    let got = crc32c::crc32c(covered);
    if got == want {
        Ok(())
    } else {
        Err(format!("checksum mismatch: stored {want:#010x}, computed {got:#010x}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varints_round_trip(u in any::<u64>(), i in any::<i64>()) {
            let mut b = Vec::new();
            put_uvarint(&mut b, u);
            prop_assert_eq!(b.len(), uvarint_len(u));
            put_varint(&mut b, i);
            let mut d = Dec::new(&b);
            prop_assert_eq!(d.uvarint().unwrap(), u);
            prop_assert_eq!(d.varint().unwrap(), i);
            prop_assert_eq!(d.len(), 0);
        }

        #[test]
        fn garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..24)) {
            let mut d = Dec::new(&b);
            let _ = d.uvarint();
            let _ = d.varint();
            let _ = d.uvarint_str();
            let _ = d.be64();
            let _ = d.be32();
        }
    }
}
