//! Wire encodings of remote write and remote read: snappy block format around protobuf, and the framing of
//! `STREAMED_XOR_CHUNKS` responses.

use crate::TestkitError;
use heddle_proto::prometheus::{
    ChunkedReadResponse, Label, ReadRequest, ReadResponse, Sample, TimeSeries, WriteRequest,
};
use heddle_proto::write_v2;
use prost::Message;
use std::collections::HashMap;

/// An uncompressed `WriteRequest` of one series holding `n` empty labels: 2 bytes each on the wire and a
/// label pair each once decoded, the most a body can grow when it is decoded.
pub fn empty_labels_request(n: usize) -> Vec<u8> {
    let mut series = Vec::with_capacity(2 * n);
    for _ in 0..n {
        series.extend([0x0a, 0x00]);
    }
    let mut out = vec![0x0a];
    prost::encoding::encode_varint(series.len() as u64, &mut out);
    out.extend(series);
    out
}

/// Compresses with snappy *block* format (what remote write/read use; not the framed stream format). Fails
/// only for inputs over snappy's ~4 GiB block limit.
pub fn snappy_compress(raw: &[u8]) -> Result<Vec<u8>, TestkitError> {
    snap::raw::Encoder::new()
        .compress_vec(raw)
        .map_err(|e| TestkitError::Encode {
            what: "snappy block",
            detail: format!("{} bytes: {e}", raw.len()),
        })
}

/// Decompresses a snappy block.
pub fn snappy_decompress(compressed: &[u8]) -> Result<Vec<u8>, TestkitError> {
    snap::raw::Decoder::new()
        .decompress_vec(compressed)
        .map_err(|e| TestkitError::decode("snappy block", e))
}

/// A remote-write body: `snappy(protobuf(req))`.
pub fn encode_write_request(req: &WriteRequest) -> Result<Vec<u8>, TestkitError> {
    snappy_compress(&req.encode_to_vec())
}

/// The remote write 2.0 request carrying the same series and samples as `req`: label names and values
/// interned into the symbol table (`""` first, as the spec requires) in first-use order, with their exemplars
/// and native histograms, and, on each series, the metadata entry of its metric name (2.0 has no
/// request-level metadata).
pub fn write_request_v2(req: &WriteRequest) -> write_v2::Request {
    // Sized for every label string being distinct; the index borrows from `req`, so each distinct string is
    // copied once (into `symbols`). A load generator builds one of these per request: this is its cost.
    let strings: usize = req.timeseries.iter().map(|ts| 2 * ts.labels.len()).sum::<usize>() + 1;
    let mut symbols = Vec::with_capacity(strings);
    symbols.push(String::new());
    let mut index: HashMap<&str, u32> = HashMap::with_capacity(strings);
    index.insert("", 0);
    let mut intern = |s| intern_symbol(&mut index, &mut symbols, s);
    let timeseries = req
        .timeseries
        .iter()
        .map(|ts| write_v2::TimeSeries {
            labels_refs: ts
                .labels
                .iter()
                .flat_map(|l| [intern(&l.name), intern(&l.value)])
                .collect(),
            samples: ts
                .samples
                .iter()
                .map(|s| write_v2::Sample {
                    value: s.value,
                    timestamp: s.timestamp,
                    start_timestamp: 0,
                })
                .collect(),
            exemplars: ts
                .exemplars
                .iter()
                .map(|e| write_v2::Exemplar {
                    labels_refs: e
                        .labels
                        .iter()
                        .flat_map(|l| [intern(&l.name), intern(&l.value)])
                        .collect(),
                    value: e.value,
                    timestamp: e.timestamp,
                })
                .collect(),
            histograms: ts.histograms.iter().map(same_message).collect(),
            // 2.0 carries a family's metadata on its series: the entry naming the series' metric name.
            metadata: ts
                .labels
                .iter()
                .find(|l| l.name == "__name__")
                .and_then(|name| req.metadata.iter().find(|m| m.metric_family_name == name.value))
                .map(|m| write_v2::Metadata {
                    r#type: m.r#type,
                    help_ref: intern(&m.help),
                    unit_ref: intern(&m.unit),
                }),
            ..write_v2::TimeSeries::default()
        })
        .collect();
    write_v2::Request { symbols, timeseries }
}

/// A message as the other remote write version's type of the same fields (`Histogram` and `BucketSpan` have
/// the same numbers and types in 1.0 and 2.0), by re-decoding its encoding; unknown fields cannot occur.
fn same_message<A: Message, B: Message + Default>(m: &A) -> B {
    B::decode(m.encode_to_vec().as_slice()).unwrap_or_default()
}

/// The index of `s` in `symbols`, appended when new.
fn intern_symbol<'a>(index: &mut HashMap<&'a str, u32>, symbols: &mut Vec<String>, s: &'a str) -> u32 {
    *index.entry(s).or_insert_with(|| {
        // A request with 2^32 distinct strings is far over any body-size limit.
        let i = u32::try_from(symbols.len()).unwrap_or(u32::MAX);
        symbols.push(s.to_owned());
        i
    })
}

/// A remote write 2.0 body of the series of `req`: `snappy(protobuf(write_request_v2(req)))`.
pub fn encode_write_request_v2(req: &WriteRequest) -> Result<Vec<u8>, TestkitError> {
    snappy_compress(&write_request_v2(req).encode_to_vec())
}

/// Inverse of [`encode_write_request_v2`], as the 1.0 request of the same series: each label reference
/// resolved through the symbol table (an out-of-range reference or an odd count is an error).
pub fn decode_write_request_v2(body: &[u8]) -> Result<WriteRequest, TestkitError> {
    let req = write_v2::Request::decode(snappy_decompress(body)?.as_slice())
        .map_err(|e| TestkitError::decode("io.prometheus.write.v2.Request", e))?;
    let symbol = |r: u32| {
        req.symbols
            .get(r as usize)
            .cloned()
            .ok_or_else(|| TestkitError::Encode {
                what: "io.prometheus.write.v2.Request",
                detail: format!("label reference {r} past {} symbols", req.symbols.len()),
            })
    };
    let mut timeseries = Vec::with_capacity(req.timeseries.len());
    for ts in &req.timeseries {
        if ts.labels_refs.len() % 2 == 1 {
            return Err(TestkitError::Encode {
                what: "io.prometheus.write.v2.Request",
                detail: format!("a series has {} label references, an odd number", ts.labels_refs.len()),
            });
        }
        let labels = ts
            .labels_refs
            .chunks_exact(2)
            .map(|pair| {
                Ok(Label {
                    name: symbol(pair[0])?,
                    value: symbol(pair[1])?,
                })
            })
            .collect::<Result<_, TestkitError>>()?;
        let samples = ts
            .samples
            .iter()
            .map(|s| Sample {
                value: s.value,
                timestamp: s.timestamp,
            })
            .collect();
        timeseries.push(TimeSeries {
            labels,
            samples,
            histograms: ts.histograms.iter().map(same_message).collect(),
            ..TimeSeries::default()
        });
    }
    Ok(WriteRequest {
        timeseries,
        ..WriteRequest::default()
    })
}

/// Inverse of [`encode_write_request`].
pub fn decode_write_request(body: &[u8]) -> Result<WriteRequest, TestkitError> {
    WriteRequest::decode(snappy_decompress(body)?.as_slice()).map_err(|e| TestkitError::decode("WriteRequest", e))
}

/// A remote-read request body: `snappy(protobuf(req))`.
pub fn encode_read_request(req: &ReadRequest) -> Result<Vec<u8>, TestkitError> {
    snappy_compress(&req.encode_to_vec())
}

/// Inverse of [`encode_read_request`].
pub fn decode_read_request(body: &[u8]) -> Result<ReadRequest, TestkitError> {
    ReadRequest::decode(snappy_decompress(body)?.as_slice()).map_err(|e| TestkitError::decode("ReadRequest", e))
}

/// A `SAMPLES` remote-read response body: `snappy(protobuf(resp))`.
pub fn encode_read_response(resp: &ReadResponse) -> Result<Vec<u8>, TestkitError> {
    snappy_compress(&resp.encode_to_vec())
}

/// Inverse of [`encode_read_response`].
pub fn decode_read_response(body: &[u8]) -> Result<ReadResponse, TestkitError> {
    ReadResponse::decode(snappy_decompress(body)?.as_slice()).map_err(|e| TestkitError::decode("ReadResponse", e))
}

/// One `STREAMED_XOR_CHUNKS` frame: `uvarint(len) | u32 big-endian CRC32C(message) | message`.
pub fn encode_chunked_frame(msg: &ChunkedReadResponse) -> Vec<u8> {
    let payload = msg.encode_to_vec();
    let mut out = Vec::with_capacity(payload.len() + 14);
    prost::encoding::encode_varint(payload.len() as u64, &mut out);
    out.extend_from_slice(&crc32c::crc32c(&payload).to_be_bytes());
    out.extend_from_slice(&payload);
    out
}

/// Splits a whole `STREAMED_XOR_CHUNKS` body into its messages, checking every frame's CRC32C. A truncated
/// frame, a bad CRC or an undecodable message is an error naming the frame and its byte offset.
pub fn decode_chunked_frames(mut body: &[u8]) -> Result<Vec<ChunkedReadResponse>, TestkitError> {
    let total = body.len();
    let mut out = Vec::new();
    while !body.is_empty() {
        let offset = total - body.len();
        let frame = out.len();
        let ctx =
            |what: &str| TestkitError::decode("chunked read frame", format!("frame {frame} at byte {offset}: {what}"));
        let len = prost::encoding::decode_varint(&mut body).map_err(|e| ctx(&format!("bad length varint: {e}")))?;
        let len = usize::try_from(len).map_err(|_| ctx(&format!("length {len} does not fit in memory")))?;
        if body.len() < 4 + len {
            return Err(ctx(&format!("needs {} bytes, {} left", 4 + len, body.len())));
        }
        let (crc_bytes, rest) = body.split_at(4);
        let (payload, rest) = rest.split_at(len);
        let want = u32::from_be_bytes([crc_bytes[0], crc_bytes[1], crc_bytes[2], crc_bytes[3]]);
        let got = crc32c::crc32c(payload);
        if want != got {
            return Err(ctx(&format!(
                "crc mismatch: frame says {want:#010x}, payload has {got:#010x}"
            )));
        }
        out.push(ChunkedReadResponse::decode(payload).map_err(|e| ctx(&format!("protobuf: {e}")))?);
        body = rest;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SeriesGen;
    use heddle_proto::prometheus::{Chunk, ChunkedSeries};
    use proptest::prelude::*;

    /// The 2.0 encoding carries the same series: through the prost types and through the distributor's
    /// arena decoder, and its symbol table holds each string once.
    #[test]
    fn write_request_v2_round_trip() {
        let req = SeriesGen::new(1, 50, 5, 1_000).write_request(0..50, 0..3);
        let body = encode_write_request_v2(&req).expect("encode");
        assert_eq!(decode_write_request_v2(&body).expect("decode"), req);

        let v2 = write_request_v2(&req);
        assert_eq!(v2.symbols[0], "");
        let distinct: std::collections::HashSet<&String> = v2.symbols.iter().collect();
        assert_eq!(distinct.len(), v2.symbols.len(), "each symbol once");
        let raw = snappy_decompress(&body).expect("snappy");
        let arena = bumpalo::Bump::new();
        let decoded = heddle_proto::decode_write_request_v2(&arena, &raw).expect("arena decode");
        assert_eq!(decoded.timeseries.len(), req.timeseries.len());
        for (got, want) in decoded.timeseries.iter().zip(&req.timeseries) {
            let got_labels: Vec<(&str, &str)> = got.labels.iter().map(|l| (l.name, l.value)).collect();
            let want_labels: Vec<(&str, &str)> = want
                .labels
                .iter()
                .map(|l| (l.name.as_str(), l.value.as_str()))
                .collect();
            assert_eq!(got_labels, want_labels);
            let got_samples: Vec<(i64, u64)> = got.samples.iter().map(|s| (s.t, s.v.to_bits())).collect();
            let want_samples: Vec<(i64, u64)> = want.samples.iter().map(|s| (s.timestamp, s.value.to_bits())).collect();
            assert_eq!(got_samples, want_samples);
        }
    }

    #[test]
    fn write_request_v2_decoding_refuses_bad_references() {
        for (name, labels_refs) in [("out of range", vec![0, 9]), ("odd count", vec![0])] {
            let req = write_v2::Request {
                symbols: vec![String::new()],
                timeseries: vec![write_v2::TimeSeries {
                    labels_refs,
                    ..write_v2::TimeSeries::default()
                }],
            };
            let body = snappy_compress(&req.encode_to_vec()).expect("snappy");
            assert!(decode_write_request_v2(&body).is_err(), "case {name}");
        }
    }

    #[test]
    fn write_request_round_trip() {
        let req = SeriesGen::new(1, 50, 5, 1_000).write_request(0..50, 0..3);
        assert_eq!(
            decode_write_request(&encode_write_request(&req).expect("encode")).expect("decode"),
            req
        );
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(decode_write_request(b"not snappy at all").is_err());
        assert!(snappy_decompress(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x0f]).is_err());
    }

    fn frame(query_index: i64, name: &str, data: Vec<u8>) -> ChunkedReadResponse {
        ChunkedReadResponse {
            chunked_series: vec![ChunkedSeries {
                labels: vec![Label {
                    name: "__name__".into(),
                    value: name.into(),
                }],
                chunks: vec![Chunk {
                    min_time_ms: 1,
                    max_time_ms: 2,
                    r#type: 1,
                    data,
                }],
            }],
            query_index,
        }
    }

    #[test]
    fn corrupt_frames_are_rejected() {
        let mut body = encode_chunked_frame(&frame(0, "up", vec![1, 2, 3]));
        let good = body.clone();
        let last = body.len() - 1;
        body[last] ^= 0x40;
        let err = decode_chunked_frames(&body).expect_err("crc");
        assert!(err.to_string().contains("crc mismatch"), "{err}");
        let err = decode_chunked_frames(&good[..good.len() - 1]).expect_err("short");
        assert!(err.to_string().contains("frame 0 at byte 0"), "{err}");
    }

    proptest! {
        #[test]
        fn frames_round_trip(frames in proptest::collection::vec((0i64..4, "[a-z_]{1,12}", proptest::collection::vec(any::<u8>(), 0..300)), 0..8)) {
            let msgs: Vec<_> = frames.into_iter().map(|(q, n, d)| frame(q, &n, d)).collect();
            let body: Vec<u8> = msgs.iter().flat_map(encode_chunked_frame).collect();
            prop_assert_eq!(decode_chunked_frames(&body).expect("decode"), msgs);
        }
    }
}
