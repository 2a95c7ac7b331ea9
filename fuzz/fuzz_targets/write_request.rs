//! The arena decoder of `prometheus.WriteRequest` (both hops: distributor and ingester Push) on arbitrary
//! bytes: it must return a view or an error, never panic, every borrowed string must be valid UTF-8 and
//! lie inside the input, and every native histogram it accepted must decode.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let arena = bumpalo::Bump::new();
    if let Ok(req) = heddle_proto::decode_write_request(&arena, data) {
        let range = data.as_ptr_range();
        for ts in req.timeseries.iter() {
            assert!(range.contains(&ts.raw.as_ptr()) || ts.raw.is_empty());
            for l in ts.labels.iter() {
                // A zero-copy string must point into the body (or be empty).
                assert!(l.name.is_empty() || range.contains(&l.name.as_ptr()));
                assert!(l.value.is_empty() || range.contains(&l.value.as_ptr()));
            }
            let _ = ts.samples.iter().map(|s| s.t).max();
            for h in ts.histograms.iter() {
                assert!(range.contains(&h.raw().as_ptr()) || h.raw().is_empty());
                let decoded = h.decode().expect("a histogram the decoder accepted decodes");
                assert_eq!(decoded.t, h.t);
            }
        }
    }
});
