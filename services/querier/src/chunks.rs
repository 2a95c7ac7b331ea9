//! The seam to `heddle_tsdb`'s chunk codecs: decoding chunks of every encoding (XOR floats, integer and float
//! native histograms) into samples and encoding samples back into chunks of their kind. Nothing else in the
//! crate touches the codecs, so no chunk is ever decoded by another encoding than its own. Chunks are the
//! model's [`ChunkData`] (wire encodings are checked where chunks enter, in `convert`).

use crate::error::QuerierError;
use heddle_model::{HistogramSample, HistogramValue, Sample};
use heddle_tsdb::ChunkData;
use heddle_tsdb::chunk_samples::{ChunkSample, ChunkValue, decode_chunk, encode_chunks};

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
