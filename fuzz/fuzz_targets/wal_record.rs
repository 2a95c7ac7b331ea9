//! WAL record decoding (series, samples, tombstones, exemplars, native histograms) on arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = heddle_tsdb::record::decode(data);
});
