//! Byte layout of `chunks_head/` files (Prometheus `tsdb/chunks/head_chunks.go`), all integers big-endian:
//!
//! ```text
//! file   = magic u32 (0x0130BC91) | version u8 (1) | 3 zero bytes | chunk*  [zero padding]
//! chunk  = seriesRef u64 | mint u64 | maxt u64 | encoding u8 | uvarint len | data[len] | crc32c u32
//!          the CRC covers seriesRef through data; encoding bit 7 marks an out-of-order chunk
//! ref    = (file sequence << 32) | byte offset of the chunk in the file
//! ```
//!
//! Prometheus preallocates files, so a file may end with zeros after its last chunk: readers stop there.

/// Magic number opening every file.
pub(crate) const MAGIC: u32 = 0x0130_BC91;
/// Format version byte.
pub(crate) const VERSION: u8 = 1;
/// Bytes of the file header.
pub(crate) const FILE_HEADER_LEN: usize = 8;
/// seriesRef, mint, maxt, encoding.
const FIXED_LEN: usize = 25;
const CRC_LEN: usize = 4;
/// Encoding byte of an XOR chunk.
pub(crate) const ENC_XOR: u8 = 1;
/// The encoding bytes of in-order head chunks: XOR, integer and float histograms.
pub(crate) const HEAD_ENCODINGS: [u8; 3] = [ENC_XOR, 2, 3];
/// Encoding bit marking an out-of-order chunk.
pub(crate) const OOO_FLAG: u8 = 0x80;

/// The file header.
pub(crate) fn file_header() -> [u8; FILE_HEADER_LEN] {
    let mut h = [0u8; FILE_HEADER_LEN];
    h[..4].copy_from_slice(&MAGIC.to_be_bytes());
    h[4] = VERSION;
    h
}

/// Why a file header is unusable.
pub(crate) fn check_file_header(bytes: &[u8]) -> Result<(), String> {
    let Some(h) = bytes.get(..FILE_HEADER_LEN) else {
        return Err(format!(
            "file of {} bytes is shorter than its 8-byte header",
            bytes.len()
        ));
    };
    let magic = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
    if magic != MAGIC {
        return Err(format!("bad magic {magic:#010x}, want {MAGIC:#010x}"));
    }
    if h[4] != VERSION {
        return Err(format!("unsupported version {}", h[4]));
    }
    Ok(())
}

/// Bytes one chunk of `data_len` data bytes takes on disk.
pub(crate) fn encoded_len(data_len: usize) -> usize {
    FIXED_LEN + uvarint_len(data_len as u64) + data_len + CRC_LEN
}

fn uvarint_len(mut x: u64) -> usize {
    let mut n = 1;
    while x >= 0x80 {
        x >>= 7;
        n += 1;
    }
    n
}

/// Appends one encoded chunk to `out`.
pub(crate) fn encode_chunk(out: &mut Vec<u8>, series_ref: u64, mint: i64, maxt: i64, encoding: u8, data: &[u8]) {
    let start = out.len();
    out.extend_from_slice(&series_ref.to_be_bytes());
    out.extend_from_slice(&mint.to_be_bytes());
    out.extend_from_slice(&maxt.to_be_bytes());
    out.push(encoding);
    let mut len = data.len() as u64;
    while len >= 0x80 {
        out.push((len as u8) | 0x80);
        len >>= 7;
    }
    out.push(len as u8);
    out.extend_from_slice(data);
    let crc = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// One chunk read back from a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawChunk<'a> {
    pub(crate) series_ref: u64,
    pub(crate) mint: i64,
    pub(crate) maxt: i64,
    pub(crate) encoding: u8,
    pub(crate) data: &'a [u8],
    /// Bytes the chunk takes, header and CRC included.
    pub(crate) len: usize,
}

fn be64(b: &[u8], at: usize) -> Option<u64> {
    let s: [u8; 8] = b.get(at..at + 8)?.try_into().ok()?;
    Some(u64::from_be_bytes(s))
}

/// Decodes the chunk at the start of `bytes`, checking its CRC. The error says what is wrong.
pub(crate) fn decode_chunk(bytes: &[u8]) -> Result<RawChunk<'_>, String> {
    let (Some(series_ref), Some(mint), Some(maxt), Some(&encoding)) =
        (be64(bytes, 0), be64(bytes, 8), be64(bytes, 16), bytes.get(24))
    else {
        return Err(format!("chunk header cut off after {} bytes", bytes.len()));
    };
    let mut len: u64 = 0;
    let mut at = FIXED_LEN;
    let mut shift = 0;
    loop {
        let Some(&b) = bytes.get(at) else {
            return Err("chunk length cut off".to_owned());
        };
        at += 1;
        if shift >= 64 {
            return Err("chunk length varint overflows".to_owned());
        }
        len |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            break;
        }
        shift += 7;
    }
    let data_end = usize::try_from(len)
        .ok()
        .and_then(|l| at.checked_add(l))
        .filter(|&end| end.saturating_add(CRC_LEN) <= bytes.len())
        .ok_or_else(|| format!("chunk of {len} data bytes runs past the end of the file"))?;
    let data = &bytes[at..data_end];
    let want = u32::from_be_bytes([
        bytes[data_end],
        bytes[data_end + 1],
        bytes[data_end + 2],
        bytes[data_end + 3],
    ]);
    let got = crc32c::crc32c(&bytes[..data_end]);
    if got != want {
        return Err(format!("crc mismatch: stored {want:#010x}, computed {got:#010x}"));
    }
    Ok(RawChunk {
        series_ref,
        mint: mint as i64,
        maxt: maxt as i64,
        encoding,
        data,
        len: data_end + CRC_LEN,
    })
}

/// The chunk reference of offset `offset` in file `seq`.
pub(crate) fn chunk_ref(seq: u32, offset: u32) -> u64 {
    (u64::from(seq) << 32) | u64::from(offset)
}

/// File sequence and offset of a chunk reference.
pub(crate) fn split_ref(r: u64) -> (u32, u32) {
    ((r >> 32) as u32, r as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn chunks_round_trip(series_ref: u64, mint: i64, maxt: i64, enc: u8,
                             data in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let mut buf = vec![7u8; 3];
            encode_chunk(&mut buf, series_ref, mint, maxt, enc, &data);
            prop_assert_eq!(buf.len() - 3, encoded_len(data.len()));
            let c = decode_chunk(&buf[3..]).unwrap();
            prop_assert_eq!(c, RawChunk { series_ref, mint, maxt, encoding: enc, data: &data, len: buf.len() - 3 });
        }

        #[test]
        fn any_flipped_bit_or_cut_is_detected(data in proptest::collection::vec(any::<u8>(), 1..300),
                                               bit in 0usize..10_000, cut in 0usize..10_000) {
            let mut buf = Vec::new();
            encode_chunk(&mut buf, 9, 1, 2, 1, &data);
            let mut flipped = buf.clone();
            let bit = bit % (flipped.len() * 8);
            flipped[bit / 8] ^= 1 << (bit % 8);
            // A flip in the length varint may still decode a shorter chunk, but then its CRC fails.
            prop_assert!(decode_chunk(&flipped).is_err());
            let cut = cut % buf.len();
            prop_assert!(decode_chunk(&buf[..cut]).is_err());
        }
    }

    #[test]
    fn header_and_refs() {
        let h = file_header();
        assert_eq!(h, [0x01, 0x30, 0xBC, 0x91, 1, 0, 0, 0]);
        assert!(check_file_header(&h).is_ok());
        assert!(check_file_header(&h[..7]).is_err());
        assert!(check_file_header(&[0x85, 0xBD, 0x40, 0xDD, 1, 0, 0, 0]).is_err());
        assert!(check_file_header(&[0x01, 0x30, 0xBC, 0x91, 2, 0, 0, 0]).is_err());
        assert_eq!(chunk_ref(3, 8), (3 << 32) | 8);
        assert_eq!(split_ref(chunk_ref(7, 123_456)), (7, 123_456));
    }
}
