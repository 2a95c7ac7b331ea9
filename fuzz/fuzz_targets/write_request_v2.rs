//! The arena decoder of remote write 2.0 (`io.prometheus.write.v2.Request`) on arbitrary bytes: it must
//! return a view or an error, never panic; every label it resolves must be a string inside the input (a
//! symbol, borrowed, not copied), every native histogram it accepted must decode, and the reported 1.0 size
//! must bound what the series' labels, samples and histograms hold.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let arena = bumpalo::Bump::new();
    if let Ok(req) = heddle_proto::decode_write_request_v2(&arena, data) {
        let range = data.as_ptr_range();
        let mut text = 0usize;
        for ts in req.timeseries.iter() {
            assert!(ts.raw.is_empty(), "a 2.0 series has no 1.0 bytes");
            for l in ts.labels.iter() {
                assert!(l.name.is_empty() || range.contains(&l.name.as_ptr()));
                assert!(l.value.is_empty() || range.contains(&l.value.as_ptr()));
                text += l.name.len() + l.value.len();
            }
            text += ts.samples.len() * 16;
            for h in ts.histograms.iter() {
                let decoded = h.decode().expect("a histogram the decoder accepted decodes");
                assert_eq!(decoded.t, h.t);
                text += h.raw().len();
            }
        }
        assert!(req.expanded_bytes >= text, "{} < {text}", req.expanded_bytes);
    }
});
