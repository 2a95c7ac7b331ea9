//! Stage 1, decode: the snappy body is decompressed into the request arena and decoded there into borrowed
//! series views (DESIGN.md §2 step 2).
//!
//! The declared decompressed length is checked against `distributor.max_decompressed_size` before anything is
//! allocated. Everything returned borrows from the arena, so nothing of the request can outlive it.

use crate::error::PushError;
use bumpalo::Bump;
use heddle_proto::{SnappyError, TimeSeriesRef, decode_write_request, snappy_decompress_into};

/// The series of the snappy-compressed `prometheus.WriteRequest` in `body`, decoded into `arena`. Metadata
/// entries are checked for framing and dropped (the distributor does not forward them).
pub(crate) fn decode<'a>(
    arena: &'a Bump,
    body: &[u8],
    max_decompressed: usize,
) -> Result<&'a [TimeSeriesRef<'a>], PushError> {
    let raw = snappy_decompress_into(arena, body, max_decompressed).map_err(|e| match e {
        SnappyError::TooLarge { declared, limit } => PushError::DecompressedTooLarge { declared, limit },
        SnappyError::Corrupt(detail) => PushError::CorruptSnappy { detail },
    })?;
    let request = decode_write_request(arena, raw).map_err(|e| PushError::InvalidProtobuf { detail: e.to_string() })?;
    Ok(request.timeseries.into_bump_slice())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{body, declared_length, snappy, up};

    #[test]
    fn decodes_series_with_their_raw_bytes() {
        let arena = Bump::new();
        let sent = vec![up("a"), up("b")];
        let series = decode(&arena, &body(sent.clone()), 1 << 20).unwrap();
        assert_eq!(series.len(), 2);
        for (got, want) in series.iter().zip(&sent) {
            assert_eq!(got.labels[0].value, want.labels[0].value);
            assert_eq!(got.samples.len(), 1);
            assert_eq!(
                got.raw,
                prost::Message::encode_to_vec(want).as_slice(),
                "raw bytes kept"
            );
        }
    }

    #[test]
    fn refusals_table() {
        let mut truncated = body(vec![up("up")]);
        truncated.truncate(truncated.len() - 5);
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "declared size over limit",
                declared_length(1 << 30),
                "err-heddle-decompressed-too-large",
            ),
            ("corrupt snappy", truncated, "err-heddle-corrupt-snappy"),
            (
                "invalid protobuf",
                snappy(&[0x0a, 0x05, 0x01]),
                "err-heddle-invalid-protobuf",
            ),
        ];
        for (name, input, id) in cases {
            let arena = Bump::new();
            let err = decode(&arena, &input, 4096).expect_err(name);
            assert_eq!(err.id(), id, "case {name}: {err}");
        }
    }

    #[test]
    fn the_size_check_comes_before_any_allocation() {
        let arena = Bump::new();
        let before = arena.allocated_bytes();
        assert!(decode(&arena, &declared_length(1 << 30), 4096).is_err());
        assert_eq!(arena.allocated_bytes(), before, "nothing allocated for a refused body");
    }
}
