//! Mapping between wire types (`heddle_proto::prometheus`) and the model at the edges, and only here:
//! series from ingester streams become [`SeriesChunks`] once, as they arrive; series go back to the wire
//! once, where a response is encoded. Bucket blocks are read as model types and never pass through here.
//!
//! The matcher and label conversions live in `heddle_proto`; this maps their errors to the querier's.

use crate::error::QuerierError;
use bytes::Bytes;
use heddle_model::{Labels, Matcher};
use heddle_proto::prometheus::{Chunk, ChunkedSeries, Label, LabelMatcher, chunk::Encoding};
use heddle_tsdb::chunkenc::Encoding as ChunkEncoding;
use heddle_tsdb::{ChunkData, SeriesChunks};

pub(crate) use heddle_proto::{histogram_to_proto, labels_to_proto, matcher_to_proto};

/// Converts wire labels (any order) into a [`Labels`] set. An ingester that sends duplicate or empty label
/// names is reported, not trusted.
pub(crate) fn labels_from_proto(labels: &[Label]) -> Result<Labels, QuerierError> {
    Labels::from_unsorted(labels.iter().map(|l| (l.name.as_str(), l.value.as_str())))
        .map_err(|e| QuerierError::InvalidIngesterData(format!("bad label set: {e}")))
}

/// A wire chunk as the model's chunk: XOR, integer or float histogram. Other encodings (`UNKNOWN`, or newer
/// than float histograms) are refused: the querier could not merge them, nor could a remote-read client read
/// them.
pub(crate) fn chunk_from_proto(chunk: Chunk) -> Result<ChunkData, QuerierError> {
    let encoding = match Encoding::try_from(chunk.r#type) {
        Ok(Encoding::Xor) => ChunkEncoding::Xor,
        Ok(Encoding::Histogram) => ChunkEncoding::Histogram,
        Ok(Encoding::FloatHistogram) => ChunkEncoding::FloatHistogram,
        Ok(Encoding::Unknown) | Err(_) => {
            return Err(QuerierError::InvalidIngesterData(format!(
                "chunk [{}, {}] has encoding {}; only XOR (1), HISTOGRAM (2) and FLOAT_HISTOGRAM (3) are \
                 supported",
                chunk.min_time_ms, chunk.max_time_ms, chunk.r#type
            )));
        }
    };
    Ok(ChunkData {
        encoding,
        min_time: chunk.min_time_ms,
        max_time: chunk.max_time_ms,
        data: Bytes::from(chunk.data),
    })
}

/// A series from an ingester's stream as the model's series.
pub(crate) fn series_from_proto(series: ChunkedSeries) -> Result<SeriesChunks, QuerierError> {
    Ok(SeriesChunks {
        labels: labels_from_proto(&series.labels)?,
        chunks: series
            .chunks
            .into_iter()
            .map(chunk_from_proto)
            .collect::<Result<_, _>>()?,
    })
}

/// A model chunk on the wire (remote read's `STREAMED_XOR_CHUNKS` frames), typed by its encoding as
/// Prometheus sends histogram chunks in that response type too.
pub(crate) fn chunk_to_proto(chunk: &ChunkData) -> Chunk {
    let r#type = match chunk.encoding {
        ChunkEncoding::Xor => Encoding::Xor,
        ChunkEncoding::Histogram => Encoding::Histogram,
        ChunkEncoding::FloatHistogram => Encoding::FloatHistogram,
        ChunkEncoding::None => Encoding::Unknown,
    };
    Chunk {
        min_time_ms: chunk.min_time,
        max_time_ms: chunk.max_time,
        r#type: r#type as i32,
        data: chunk.data.to_vec(),
    }
}

/// A remote-read matcher as a model matcher; a bad one is the caller's fault (400).
pub(crate) fn matcher_from_proto(m: &LabelMatcher) -> Result<Matcher, QuerierError> {
    heddle_proto::matcher_from_proto(m).map_err(|e| QuerierError::BadData(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_matchers_are_bad_data() {
        for (name, r#type, value, want) in [
            ("bad regex", 2, "(", r#"invalid regular expression "(" for label "job""#),
            ("unknown type", 9, "x", "unknown label matcher type 9"),
        ] {
            let err = matcher_from_proto(&LabelMatcher {
                r#type,
                name: "job".into(),
                value: value.into(),
            })
            .unwrap_err();
            assert!(matches!(err, QuerierError::BadData(_)), "case {name}");
            assert!(err.to_string().contains(want), "case {name}: {err}");
        }
    }

    #[test]
    fn series_enter_as_model_types_and_leave_unchanged() {
        let wire = ChunkedSeries {
            // Unsorted on the wire; sorted in the model.
            labels: vec![
                Label {
                    name: "job".into(),
                    value: "a".into(),
                },
                Label {
                    name: "__name__".into(),
                    value: "up".into(),
                },
            ],
            chunks: vec![Chunk {
                min_time_ms: 1,
                max_time_ms: 2,
                r#type: Encoding::Xor as i32,
                data: vec![0, 1, 2],
            }],
        };
        let series = series_from_proto(wire.clone()).unwrap();
        assert_eq!(series.labels.to_string(), r#"{__name__="up", job="a"}"#);
        assert_eq!(chunk_to_proto(&series.chunks[0]), wire.chunks[0]);

        let dup = ChunkedSeries {
            labels: vec![
                Label {
                    name: "a".into(),
                    value: "1".into(),
                },
                Label {
                    name: "a".into(),
                    value: "2".into(),
                },
            ],
            chunks: vec![],
        };
        assert!(matches!(
            series_from_proto(dup),
            Err(QuerierError::InvalidIngesterData(_))
        ));
    }
}
