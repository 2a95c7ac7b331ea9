//! Prometheus XOR chunk decoding on arbitrary bytes: the iterator and the whole-chunk decoder stop at the
//! announced sample count or at the first error.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut it = heddle_tsdb::chunkenc::XorIter::new(data);
    let announced = it.num_samples();
    let n = it.by_ref().count();
    assert!(n <= usize::from(announced));
    let _ = heddle_tsdb::chunkenc::decode_xor(data);
    let _ = heddle_tsdb::chunkenc::XorChunk::from_bytes(data.to_vec());
});
