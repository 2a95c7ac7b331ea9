//! Snappy block decompression into the request arena: bounded by the limit before allocating, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

/// Small, so that "declared length over the limit" is exercised as well as real decompression.
const LIMIT: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let arena = bumpalo::Bump::new();
    if let Ok(out) = heddle_proto::snappy_decompress_into(&arena, data, LIMIT) {
        assert!(out.len() <= LIMIT);
        // Whatever decompressed must then decode or be refused cleanly.
        let _ = heddle_proto::decode_write_request(&arena, out);
    }
    assert!(
        arena.allocated_bytes() <= 2 * LIMIT + (1 << 16),
        "allocation not bounded by the limit"
    );
});
