//! The seam to `heddle_tsdb`'s chunk codecs: decoding chunks of every encoding (XOR floats, integer and float
//! native histograms) into samples and encoding samples back into chunks of their kind. Nothing else in the
//! crate touches the codecs, so no chunk is ever decoded by another encoding than its own. Chunks are the
//! model's [`ChunkData`] (wire encodings are checked where chunks enter, in `convert`).
//!
//! A chunk is weighed before it is decoded ([`weight`]): the query sample limits count a native histogram by
//! its size, as Prometheus 3's engine does, and every sample of a histogram chunk has the chunk's layout, which
//! its header gives without decoding. Callers check the weight against the request's budget first, then
//! decode, off the async runtime when the weight is large ([`off_runtime`]).

use crate::error::QuerierError;
use heddle_model::{HistogramSample, HistogramSize, HistogramValue, Sample};
use heddle_tsdb::ChunkData;
use heddle_tsdb::chunk_samples::{ChunkSample, ChunkValue, decode_chunk, encode_chunks};
use heddle_tsdb::chunkenc::{Encoding, histogram_chunk_size};

/// The most a chunk decode may weigh ([`weight`]) on the async runtime: about 8,000 float samples decode in
/// tens of microseconds; more, or histograms of that size, go to a blocking thread.
pub(crate) const INLINE_DECODE_WEIGHT: usize = 8_192;

/// Samples per re-encoded chunk: Prometheus' target chunk size, small enough to stay near 1 KiB.
pub(crate) const SAMPLES_PER_CHUNK: usize = 120;

/// The number of samples in a chunk, read from its 2-byte big-endian header (every encoding opens with it)
/// without decoding it.
pub(crate) fn num_samples(chunk: &ChunkData) -> Result<usize, QuerierError> {
    match chunk.data.get(..2) {
        Some(&[hi, lo]) => Ok(usize::from(u16::from_be_bytes([hi, lo]))),
        _ => Err(QuerierError::InvalidIngesterData(format!(
            "chunk [{}, {}] is {} bytes long, shorter than the 2-byte chunk header",
            chunk.min_time,
            chunk.max_time,
            chunk.data.len()
        ))),
    }
}

/// What a native histogram counts for against the sample limits: one sample per 16 bytes of its size (168
/// bytes, plus 8 per bucket, span and custom bound, Prometheus 3's `FloatHistogram.Size`), rounded, as
/// `heddle_promql` counts it against `querier.max_samples`: 11 for the smallest.
pub(crate) fn histogram_weight(size: HistogramSize) -> usize {
    let bytes = 8usize
        .saturating_mul(size.buckets.saturating_add(size.layout))
        .saturating_add(168);
    bytes.saturating_add(8) / 16
}

/// What a chunk counts for against the sample limits, read from its header and (for histograms) its layout,
/// without decoding a sample: one per float sample, [`histogram_weight`] per histogram. An upper bound of
/// what its samples inside a query range count for.
pub(crate) fn weight(chunk: &ChunkData) -> Result<usize, QuerierError> {
    let n = num_samples(chunk)?;
    match chunk.encoding {
        Encoding::Xor | Encoding::None => Ok(n),
        Encoding::Histogram | Encoding::FloatHistogram => histogram_chunk_size(&chunk.data)
            .map(|size| n.saturating_mul(histogram_weight(size)))
            .ok_or_else(|| {
                QuerierError::InvalidIngesterData(format!(
                    "histogram chunk [{}, {}] is {} bytes long, too short for its layout",
                    chunk.min_time,
                    chunk.max_time,
                    chunk.data.len()
                ))
            }),
    }
}

/// What a decoded sample counts for against the sample limits (see [`weight`]).
pub(crate) fn sample_weight(s: &ChunkSample) -> usize {
    match &s.value {
        ChunkValue::Float(_) => 1,
        ChunkValue::Histogram(h) => histogram_weight(h.size()),
        ChunkValue::FloatHistogram(h) => histogram_weight(h.size()),
    }
}

/// Runs `decode`, work of `weight` ([`weight`]), inline when that is small and on a blocking thread otherwise,
/// so decoding a long range or big histograms never holds a runtime thread.
pub(crate) async fn off_runtime<T: Send + 'static>(
    weight: usize,
    decode: impl FnOnce() -> Result<T, QuerierError> + Send + 'static,
) -> Result<T, QuerierError> {
    if weight <= INLINE_DECODE_WEIGHT {
        return decode();
    }
    tokio::task::spawn_blocking(decode)
        .await
        .map_err(|e| QuerierError::Internal(format!("decoding chunks failed: {e}")))?
}

/// Every sample of a chunk, decoded by its encoding, in time order.
pub(crate) fn decode(chunk: &ChunkData) -> Result<Vec<ChunkSample>, QuerierError> {
    decode_chunk(chunk).map_err(|e| {
        QuerierError::InvalidIngesterData(format!(
            "chunk [{}, {}] ({:?}) does not decode: {e}",
            chunk.min_time, chunk.max_time, chunk.encoding
        ))
    })
}

/// Encodes time-ordered samples with strictly increasing timestamps into chunks of at most
/// [`SAMPLES_PER_CHUNK`] samples each, one kind of sample per chunk.
pub(crate) fn encode(samples: &[ChunkSample]) -> Result<Vec<ChunkData>, QuerierError> {
    encode_at_most(samples, SAMPLES_PER_CHUNK)
}

/// [`encode`] with `max_samples` per chunk.
pub(crate) fn encode_at_most(samples: &[ChunkSample], max_samples: usize) -> Result<Vec<ChunkData>, QuerierError> {
    encode_chunks(samples, max_samples).map_err(|e| {
        QuerierError::InvalidIngesterData(format!(
            "cannot re-encode samples from t={}: {e}",
            samples.first().map_or(0, |s| s.t)
        ))
    })
}

/// Samples split by kind: floats, and histograms of either kind, each in time order.
pub(crate) fn split(samples: Vec<ChunkSample>) -> (Vec<Sample>, Vec<HistogramSample>) {
    let mut floats = Vec::new();
    let mut histograms = Vec::new();
    for s in samples {
        match s.value {
            ChunkValue::Float(v) => floats.push(Sample::new(s.t, v)),
            ChunkValue::Histogram(h) => histograms.push(HistogramSample {
                t: s.t,
                value: HistogramValue::Int(h),
            }),
            ChunkValue::FloatHistogram(h) => histograms.push(HistogramSample {
                t: s.t,
                value: HistogramValue::Float(h),
            }),
        }
    }
    (floats, histograms)
}

/// Float samples as chunk samples.
#[cfg(test)]
pub(crate) fn from_floats(samples: &[Sample]) -> Vec<ChunkSample> {
    samples
        .iter()
        .map(|s| ChunkSample {
            t: s.t,
            value: ChunkValue::Float(s.v),
        })
        .collect()
}

/// Float samples of a float chunk (panics on histograms: tests only).
#[cfg(test)]
pub(crate) fn decode_floats(chunk: &ChunkData) -> Result<Vec<Sample>, QuerierError> {
    let (floats, histograms) = split(decode(chunk)?);
    assert!(histograms.is_empty(), "a float chunk was expected");
    Ok(floats)
}

/// Time-ordered float samples with strictly increasing timestamps as one XOR chunk.
#[cfg(test)]
pub(crate) fn encode_one(samples: &[Sample]) -> Result<ChunkData, QuerierError> {
    let mut chunks = encode_at_most(&from_floats(samples), usize::from(u16::MAX))?;
    match (chunks.pop(), chunks.is_empty()) {
        (Some(c), true) => Ok(c),
        _ => Err(QuerierError::InvalidIngesterData("cannot encode an empty chunk".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use heddle_tsdb::chunkenc::Encoding;

    #[test]
    fn encode_decode_round_trip_cuts_chunks() {
        let samples: Vec<Sample> = (0..250).map(|i| Sample::new(i * 15_000, i as f64 * 0.5)).collect();
        let chunks = encode(&from_floats(&samples)).unwrap();
        assert_eq!(chunks.len(), 3);
        assert_eq!(chunks[0].min_time, 0);
        assert_eq!(chunks[0].max_time, 119 * 15_000);
        assert_eq!(num_samples(&chunks[2]).unwrap(), 10);
        let back: Vec<Sample> = chunks.iter().flat_map(|c| decode_floats(c).unwrap()).collect();
        assert_eq!(back, samples);
    }

    #[test]
    fn unknown_and_short_chunks_are_errors() {
        // Chunks of unknown encodings are refused where they enter from the wire.
        let mut c = crate::convert::chunk_to_proto(&encode_one(&[Sample::new(1, 1.0)]).unwrap());
        c.r#type = heddle_proto::prometheus::chunk::Encoding::Unknown as i32;
        assert!(crate::convert::chunk_from_proto(c).is_err());
        let short = ChunkData {
            encoding: Encoding::Xor,
            min_time: 0,
            max_time: 0,
            data: Bytes::from_static(&[0]),
        };
        assert!(num_samples(&short).is_err());
        assert!(encode_one(&[]).is_err());
    }
}
