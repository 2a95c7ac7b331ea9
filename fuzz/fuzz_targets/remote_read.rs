//! Remote read request decoding as the querier does it: snappy (declared length checked first), then
//! `prometheus.ReadRequest`, then its matchers (regexes compiled) into model matchers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message as _;

const MAX_BYTES: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Ok(len) = snap::raw::decompress_len(data) else {
        return;
    };
    if len > MAX_BYTES {
        return;
    }
    let Ok(raw) = snap::raw::Decoder::new().decompress_vec(data) else {
        return;
    };
    let Ok(req) = heddle_proto::prometheus::ReadRequest::decode(raw.as_slice()) else {
        return;
    };
    for q in &req.queries {
        let _ = heddle_proto::matchers_from_proto(&q.matchers);
    }
});
