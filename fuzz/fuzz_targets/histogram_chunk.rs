//! Prometheus' native histogram chunks (integer, encoding 2, and float, encoding 3) on arbitrary bytes: the
//! iterators stop at the announced sample count or at the first error, and a chunk that restores takes another
//! sample and still decodes.
#![no_main]

use heddle_model::{CounterResetHint, Histogram, Span};
use heddle_tsdb::chunkenc::{FloatHistogramChunk, FloatHistogramIter, HistogramChunk, HistogramIter};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut it = HistogramIter::new(data);
    let announced = it.num_samples();
    let last = it.by_ref().last();
    let n = HistogramIter::new(data).count();
    assert!(n <= usize::from(announced));
    let mut fit = FloatHistogramIter::new(data);
    let announced = fit.num_samples();
    assert!(fit.by_ref().count() <= usize::from(announced));

    let next = Histogram {
        counter_reset_hint: CounterResetHint::Unknown,
        schema: 0,
        zero_threshold: 1e-128,
        zero_count: 1,
        count: 3,
        sum: 2.5,
        positive_spans: vec![Span::new(0, 2)],
        positive_buckets: vec![1, 0],
        ..Histogram::default()
    };
    let t = last.map_or(0, |(t, _)| t.saturating_add(1));
    if let Ok(mut chunk) = HistogramChunk::from_bytes(data.to_vec()) {
        if let Ok(heddle_tsdb::chunkenc::HistogramAppend::Appended | heddle_tsdb::chunkenc::HistogramAppend::Recoded) =
            chunk.append(t, &next, None)
        {
            assert!(HistogramIter::new(chunk.bytes()).count() == usize::from(chunk.num_samples()));
        }
    }
    if let Ok(mut chunk) = FloatHistogramChunk::from_bytes(data.to_vec()) {
        let _ = chunk.append(t, &next.to_float(), None);
        let _ = FloatHistogramIter::new(chunk.bytes()).count();
    }
});
