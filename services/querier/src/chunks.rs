//! The seam to `heddle_tsdb::chunkenc`: decoding XOR chunks into samples and encoding samples back into
//! XOR chunks. Nothing else in the crate touches the codec. Chunks are the model's [`ChunkData`] (XOR only:
//! the wire encoding is checked where chunks enter, in `convert`).

use crate::error::QuerierError;
use bytes::Bytes;
use heddle_model::Sample;
use heddle_tsdb::ChunkData;
use heddle_tsdb::chunkenc::{XorChunk, decode_xor};

/// Samples per re-encoded chunk: Prometheus' target chunk size, small enough to stay near 1 KiB.
pub(crate) const SAMPLES_PER_CHUNK: usize = 120;

/// The number of samples in an XOR chunk, read from its 2-byte big-endian header without decoding it.
pub(crate) fn num_samples(chunk: &ChunkData) -> Result<usize, QuerierError> {
    match chunk.data.get(..2) {
        Some(&[hi, lo]) => Ok(usize::from(u16::from_be_bytes([hi, lo]))),
        _ => Err(QuerierError::InvalidIngesterData(format!(
            "chunk [{}, {}] is {} bytes long, shorter than the 2-byte XOR header",
            chunk.min_time,
            chunk.max_time,
            chunk.data.len()
        ))),
    }
}

/// Every sample of an XOR chunk, in time order.
pub(crate) fn decode(chunk: &ChunkData) -> Result<Vec<Sample>, QuerierError> {
    decode_xor(&chunk.data).map_err(|e| {
        QuerierError::InvalidIngesterData(format!(
            "chunk [{}, {}] does not decode: {e}",
            chunk.min_time, chunk.max_time
        ))
    })
}

/// Encodes time-ordered samples with strictly increasing timestamps into XOR chunks of at most
/// [`SAMPLES_PER_CHUNK`] samples each.
pub(crate) fn encode(samples: &[Sample]) -> Result<Vec<ChunkData>, QuerierError> {
    samples.chunks(SAMPLES_PER_CHUNK).map(encode_one).collect()
}

/// Encodes time-ordered samples with strictly increasing timestamps into one XOR chunk.
pub(crate) fn encode_one(samples: &[Sample]) -> Result<ChunkData, QuerierError> {
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return Err(QuerierError::InvalidIngesterData("cannot encode an empty chunk".into()));
    };
    debug_assert!(
        samples.windows(2).all(|w| w[0].t < w[1].t),
        "samples must be strictly increasing"
    );
    let mut xor = XorChunk::new();
    for s in samples {
        xor.append(s.t, s.v)
            .map_err(|e| QuerierError::InvalidIngesterData(format!("cannot re-encode sample at t={}: {e}", s.t)))?;
    }
    Ok(ChunkData {
        encoding: heddle_tsdb::chunkenc::Encoding::Xor,
        min_time: first.t,
        max_time: last.t,
        data: Bytes::from(xor.into_bytes()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip_cuts_chunks() {
        let samples: Vec<Sample> = (0..250).map(|i| Sample::new(i * 15_000, i as f64 * 0.5)).collect();
        let chunks = encode(&samples).unwrap();
        assert_eq!(chunks.len(), 3);
        assert_eq!(chunks[0].min_time, 0);
        assert_eq!(chunks[0].max_time, 119 * 15_000);
        assert_eq!(num_samples(&chunks[2]).unwrap(), 10);
        let back: Vec<Sample> = chunks.iter().flat_map(|c| decode(c).unwrap()).collect();
        assert_eq!(back, samples);
    }

    #[test]
    fn non_xor_and_short_chunks_are_errors() {
        // Non-XOR chunks are refused where they enter from the wire.
        let mut c = crate::convert::chunk_to_proto(&encode_one(&[Sample::new(1, 1.0)]).unwrap());
        c.r#type = heddle_proto::prometheus::chunk::Encoding::Histogram as i32;
        assert!(crate::convert::chunk_from_proto(c).is_err());
        let short = ChunkData {
            encoding: heddle_tsdb::chunkenc::Encoding::Xor,
            min_time: 0,
            max_time: 0,
            data: Bytes::from_static(&[0]),
        };
        assert!(num_samples(&short).is_err());
        assert!(encode_one(&[]).is_err());
    }
}
