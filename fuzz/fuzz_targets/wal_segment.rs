//! The WAL segment reader (pages, fragments, CRC32C, snappy records) on an arbitrary segment file, then each
//! record through the record decoder: corruption is an error, never a panic or an unbounded allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;

/// More records than a fuzz input of a few KiB can hold; bounds the loop whatever the reader does.
const MAX_RECORDS: usize = 100_000;

fuzz_target!(|data: &[u8]| {
    let mut reader = heddle_wal::SegmentReader::new(0, std::io::Cursor::new(data));
    for _ in 0..MAX_RECORDS {
        match reader.next_record() {
            Ok(Some(rec)) => {
                let _ = heddle_tsdb::record::decode(rec.data);
            }
            Ok(None) | Err(_) => break,
        }
    }
});
