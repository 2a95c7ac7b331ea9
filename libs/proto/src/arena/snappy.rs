//! Snappy block-format decompression into a request arena.
//!
//! Remote write bodies are snappy *block* format (not framed): a varint declared length, then literal and
//! copy elements. The declared length is checked against the caller's limit, and against what the compressed
//! size can possibly expand to, before a single byte is allocated, so a tiny hostile body cannot make the
//! server reserve a large buffer.

use crate::error::SnappyError;
use bumpalo::Bump;

/// The most one compressed byte can expand to: a 3-byte copy element yields at most 64 bytes, so no valid
/// snappy block decompresses to more than 22 times its compressed size.
const MAX_EXPANSION: usize = 22;

/// Decompresses a snappy block-format body into the arena, refusing before allocating when the declared
/// length exceeds `max_len` ([`SnappyError::TooLarge`]) or cannot be produced from the input
/// ([`SnappyError::Corrupt`]).
pub fn snappy_decompress_into<'a>(arena: &'a Bump, compressed: &[u8], max_len: usize) -> Result<&'a [u8], SnappyError> {
    let declared = snappy_decompressed_len(compressed, max_len)?;
    let out = arena.alloc_slice_fill_copy(declared, 0u8);
    let written = snap::raw::Decoder::new()
        .decompress(compressed, out)
        .map_err(|e| SnappyError::Corrupt(e.to_string()))?;
    if written != declared {
        return Err(SnappyError::Corrupt(format!(
            "decompressed {written} bytes, the header declared {declared}"
        )));
    }
    Ok(out)
}

/// The decompressed length a snappy block-format body declares, after the checks
/// [`snappy_decompress_into`] makes before allocating: at most `max_len`, and possible for the compressed size.
/// Lets a caller reserve the bytes against a memory budget before decompressing.
pub fn snappy_decompressed_len(compressed: &[u8], max_len: usize) -> Result<usize, SnappyError> {
    if compressed.is_empty() {
        return Err(SnappyError::Corrupt(
            "empty body: a snappy block has at least a length header".into(),
        ));
    }
    let declared = snap::raw::decompress_len(compressed).map_err(|e| SnappyError::Corrupt(e.to_string()))?;
    if declared > max_len {
        return Err(SnappyError::TooLarge {
            declared,
            limit: max_len,
        });
    }
    if declared > compressed.len().saturating_mul(MAX_EXPANSION) {
        return Err(SnappyError::Corrupt(format!(
            "declared length {declared} is impossible for {} compressed bytes",
            compressed.len()
        )));
    }
    Ok(declared)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compress(data: &[u8]) -> Vec<u8> {
        snap::raw::Encoder::new().compress_vec(data).unwrap()
    }

    #[test]
    fn round_trips() {
        let arena = Bump::new();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let out = snappy_decompress_into(&arena, &compress(&data), data.len()).unwrap();
        assert_eq!(out, data.as_slice());
        assert_eq!(snappy_decompress_into(&arena, &compress(&[]), 0).unwrap(), &[] as &[u8]);
    }

    #[test]
    fn declared_length_over_limit_is_refused_before_allocating() {
        let arena = Bump::new();
        let before = arena.allocated_bytes();
        // A 5-byte header declaring 4 GiB - 1, with no data after it.
        let body = [0xff, 0xff, 0xff, 0xff, 0x0f];
        let err = snappy_decompress_into(&arena, &body, 32 << 20).unwrap_err();
        assert_eq!(
            err,
            SnappyError::TooLarge {
                declared: u32::MAX as usize,
                limit: 32 << 20
            }
        );
        assert_eq!(arena.allocated_bytes(), before, "nothing allocated for a refused body");

        let data = vec![7u8; 1000];
        let err = snappy_decompress_into(&arena, &compress(&data), 999).unwrap_err();
        assert_eq!(
            err,
            SnappyError::TooLarge {
                declared: 1000,
                limit: 999
            }
        );
        assert_eq!(arena.allocated_bytes(), before);
    }

    #[test]
    fn impossible_expansion_is_refused_before_allocating() {
        let arena = Bump::new();
        let before = arena.allocated_bytes();
        // Declares 1 MiB within a generous limit, but 3 bytes cannot expand that far.
        let body = [0x80, 0x80, 0x40];
        let err = snappy_decompress_into(&arena, &body, 32 << 20).unwrap_err();
        assert!(
            matches!(&err, SnappyError::Corrupt(m) if m.contains("impossible")),
            "{err}"
        );
        assert_eq!(arena.allocated_bytes(), before);
    }

    #[test]
    fn corrupt_bodies_are_errors() {
        let arena = Bump::new();
        let mut valid = compress(b"hello hello hello hello hello");
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty", vec![]),
            ("header only, data missing", vec![10]),
            ("truncated", valid[..valid.len() - 3].to_vec()),
            ("copy before any literal", vec![4, 0x01, 0x01]),
            ("unterminated header varint", vec![0x80]),
            ("too much data", {
                valid.push(0);
                valid.clone()
            }),
        ];
        for (name, body) in cases {
            let err = snappy_decompress_into(&arena, &body, 1 << 20).unwrap_err();
            assert!(matches!(err, SnappyError::Corrupt(_)), "case {name}: {err}");
        }
    }
}
