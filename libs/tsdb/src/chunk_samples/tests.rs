use heddle_model::histogram::deltas_from_absolute;
use heddle_model::{CounterResetHint, Histogram, Span};

use super::*;
use crate::chunkenc::CounterResetHeader;

/// A counter histogram that grows with `k`: schema 0, a zero bucket and three positive buckets in two spans.
fn counter(k: u64) -> Histogram {
    let buckets = [k as i64, 2 * k as i64, k as i64 + 1];
    Histogram {
        schema: 0,
        zero_threshold: 0.001,
        zero_count: k,
        count: k + buckets.iter().sum::<i64>() as u64,
        sum: k as f64 * 1.5,
        positive_spans: vec![Span::new(0, 2), Span::new(1, 1)],
        positive_buckets: deltas_from_absolute(&buckets),
        ..Histogram::default()
    }
}

fn int(t: i64, k: u64) -> ChunkSample {
    ChunkSample {
        t,
        value: ChunkValue::Histogram(counter(k)),
    }
}

fn float(t: i64, v: f64) -> ChunkSample {
    ChunkSample {
        t,
        value: ChunkValue::Float(v),
    }
}

fn float_hist(t: i64, k: u64) -> ChunkSample {
    ChunkSample {
        t,
        value: ChunkValue::FloatHistogram(counter(k).to_float()),
    }
}

fn decoded(chunks: &[ChunkData]) -> Vec<ChunkSample> {
    chunks.iter().flat_map(|c| decode_chunk(c).expect("decode")).collect()
}

fn without_hints(samples: &[ChunkSample]) -> Vec<ChunkSample> {
    samples
        .iter()
        .cloned()
        .map(|mut s| {
            match &mut s.value {
                ChunkValue::Histogram(h) => h.counter_reset_hint = CounterResetHint::Unknown,
                ChunkValue::FloatHistogram(h) => h.counter_reset_hint = CounterResetHint::Unknown,
                ChunkValue::Float(_) => {}
            }
            s
        })
        .collect()
}

#[test]
fn kinds_get_chunks_of_their_own_and_round_trip() {
    let mut samples: Vec<ChunkSample> = (0..5).map(|i| float(i * 10, i as f64 * 0.5)).collect();
    samples.extend((5..300).map(|i| int(i * 10, i as u64)));
    samples.extend((300..310).map(|i| float_hist(i * 10, i as u64)));
    samples.push(float(3100, 7.0));
    let chunks = encode_chunks(&samples, 120).unwrap();
    let shape: Vec<(Encoding, i64, i64)> = chunks.iter().map(|c| (c.encoding, c.min_time, c.max_time)).collect();
    assert_eq!(
        shape,
        vec![
            (Encoding::Xor, 0, 40),
            (Encoding::Histogram, 50, 1240),
            (Encoding::Histogram, 1250, 2440),
            (Encoding::Histogram, 2450, 2990),
            (Encoding::FloatHistogram, 3000, 3090),
            (Encoding::Xor, 3100, 3100),
        ]
    );
    assert_eq!(without_hints(&decoded(&chunks)), without_hints(&samples));
    // Chunks cut for size follow their predecessor: no reset.
    assert_eq!(
        CounterResetHeader::of_chunk(&chunks[2].data),
        CounterResetHeader::NotCounterReset
    );
    assert_eq!(
        CounterResetHeader::of_chunk(&chunks[1].data),
        CounterResetHeader::Unknown
    );
}

#[test]
fn a_counter_reset_cuts_a_chunk_and_is_found_again_when_re_encoded() {
    let samples: Vec<ChunkSample> = [(0, 5), (10, 6), (20, 1), (30, 2)].map(|(t, k)| int(t, k)).to_vec();
    let chunks = encode_chunks(&samples, 120).unwrap();
    assert_eq!(chunks.len(), 2);
    assert_eq!(
        CounterResetHeader::of_chunk(&chunks[1].data),
        CounterResetHeader::CounterReset
    );
    let hints: Vec<CounterResetHint> = decoded(&chunks)
        .iter()
        .map(|s| match &s.value {
            ChunkValue::Histogram(h) => h.counter_reset_hint,
            other => panic!("not an integer histogram: {other:?}"),
        })
        .collect();
    use CounterResetHint::*;
    assert_eq!(hints, vec![Unknown, NotCounterReset, Unknown, NotCounterReset]);
    // Re-encoding what was decoded keeps the reset where it was.
    let again = encode_chunks(&decoded(&chunks), 120).unwrap();
    assert_eq!(again, chunks);
}

#[test]
fn a_chunk_without_encoding_is_an_error() {
    let chunks = encode_chunks(&[int(0, 1), int(10, 2)], 120).unwrap();
    let none = ChunkData {
        encoding: Encoding::None,
        ..chunks[0].clone()
    };
    assert!(matches!(
        decode_chunk(&none),
        Err(ChunkError::UnknownEncoding { encoding: 0 })
    ));
    assert!(encode_chunks(&[], 120).unwrap().is_empty());
}
