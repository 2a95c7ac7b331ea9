//! The framing of streamed remote-read responses (`STREAMED_XOR_CHUNKS`), as Prometheus'
//! `storage/remote/chunked.go` reads it:
//!
//! ```text
//! frame = uvarint(len(message)) | u32 BE CRC32C(message) | message
//! message = ChunkedReadResponse{ chunked_series: [exactly one series], query_index }
//! ```
//!
//! Prometheus' client reads only the first series of each frame, so every frame carries one series; a series
//! whose chunks do not fit in one frame continues in the next frames with the same labels (as Prometheus'
//! server does). Each message is at most `max_bytes_in_frame` bytes: chunks are packed greedily, and a single
//! chunk too big for a frame is split by re-encoding halves of its samples.

use crate::chunks;
use crate::convert::chunk_to_proto;
use crate::error::QuerierError;
use bytes::{BufMut, Bytes, BytesMut};
use heddle_proto::prometheus::{Chunk, ChunkedReadResponse, ChunkedSeries, Label};
use heddle_tsdb::ChunkData;
use prost::Message;
use prost::encoding::encoded_len_varint;

/// Bytes a length-delimited field with tag < 16 takes: key byte, length varint, payload.
fn field_len(payload: usize) -> usize {
    1 + encoded_len_varint(payload as u64) + payload
}

/// Size of the `ChunkedReadResponse` holding one series whose fields (labels and chunks) take `series_body`
/// bytes.
fn message_len(series_body: usize, query_index: i64) -> usize {
    let index = if query_index == 0 {
        0
    } else {
        1 + encoded_len_varint(query_index as u64)
    };
    field_len(series_body) + index
}

/// The bytes the labels of a series take in every frame of it.
pub(crate) fn labels_len(labels: &[Label]) -> usize {
    labels.iter().map(|l| field_len(l.encoded_len())).sum()
}

/// Whether a series with these labels can be sent at all: its labels plus a one-sample chunk must fit.
pub(crate) fn fits_in_frame(labels: &[Label], query_index: i64, max_bytes_in_frame: usize) -> bool {
    // A one-sample XOR chunk: 2-byte count, varint t, 8-byte value; times and type add at most 25 bytes.
    const ONE_SAMPLE_CHUNK: usize = 2 + 10 + 8 + 25;
    message_len(labels_len(labels) + field_len(ONE_SAMPLE_CHUNK), query_index) <= max_bytes_in_frame
}

/// Appends one frame holding `msg` to `out`.
pub(crate) fn write_frame(msg: &ChunkedReadResponse, out: &mut BytesMut) {
    let body = msg.encode_to_vec();
    let mut len = [0u8; 10];
    let n = put_uvarint(&mut len, body.len() as u64);
    out.reserve(n + 4 + body.len());
    out.put_slice(&len[..n]);
    out.put_u32(crc32c::crc32c(&body));
    out.put_slice(&body);
}

fn put_uvarint(buf: &mut [u8; 10], mut v: u64) -> usize {
    let mut i = 0;
    while v >= 0x80 {
        buf[i] = (v as u8) | 0x80;
        v >>= 7;
        i += 1;
    }
    buf[i] = v as u8;
    i + 1
}

/// Every frame of one series: its chunks, already sorted and disjoint, packed into as few frames of at most
/// `max_bytes_in_frame` message bytes as possible. Returns the frames concatenated. This is where a merged
/// series becomes wire messages: each chunk is converted once, as it is packed.
pub(crate) fn series_frames(
    labels: Vec<Label>,
    chunks: Vec<ChunkData>,
    query_index: i64,
    max_bytes_in_frame: usize,
) -> Result<Bytes, QuerierError> {
    let labels_bytes = labels_len(&labels);
    let mut out = BytesMut::new();
    let mut pending: Vec<Chunk> = Vec::new();
    let mut pending_bytes = labels_bytes;

    let flush = |pending: &mut Vec<Chunk>, out: &mut BytesMut| {
        let msg = ChunkedReadResponse {
            chunked_series: vec![ChunkedSeries {
                labels: labels.clone(),
                chunks: std::mem::take(pending),
            }],
            query_index,
        };
        debug_assert!(msg.encoded_len() <= max_bytes_in_frame || msg.chunked_series[0].chunks.len() == 1);
        write_frame(&msg, out);
    };

    let mut queue: std::collections::VecDeque<ChunkData> = chunks.into();
    while let Some(model) = queue.pop_front() {
        let chunk = chunk_to_proto(&model);
        let size = field_len(chunk.encoded_len());
        // The varint length of the series field grows with the series, so check against the exact total.
        if message_len(pending_bytes + size, query_index) <= max_bytes_in_frame {
            pending_bytes += size;
            pending.push(chunk);
            continue;
        }
        if !pending.is_empty() {
            flush(&mut pending, &mut out);
            pending_bytes = labels_bytes;
            queue.push_front(model);
            continue;
        }
        // Alone in a frame and still too big: split it. A single sample always fits once `fits_in_frame`
        // held, so this ends; if it did not hold, send the oversized sample rather than lose it.
        let samples = chunks::decode(&model)?;
        if samples.len() <= 1 {
            pending_bytes += size;
            pending.push(chunk);
            continue;
        }
        let (a, b) = samples.split_at(samples.len() / 2);
        // Each half is one chunk of the kind it was (a chunk holds one kind, and its samples fit one appender).
        for half in [b, a] {
            for c in chunks::encode_at_most(half, half.len())?.into_iter().rev() {
                queue.push_front(c);
            }
        }
    }
    if !pending.is_empty() {
        flush(&mut pending, &mut out);
    }
    Ok(out.freeze())
}

/// Decodes a stream of frames back into messages, checking lengths and CRCs.
#[cfg(test)]
pub(crate) fn decode_frames(mut buf: &[u8]) -> Result<Vec<ChunkedReadResponse>, String> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let (len, n) = read_uvarint(buf).ok_or("truncated frame length")?;
        buf = &buf[n..];
        let len = usize::try_from(len).map_err(|_| "frame length overflows usize")?;
        let (crc, rest) = buf.split_first_chunk::<4>().ok_or("truncated frame checksum")?;
        let body = rest
            .get(..len)
            .ok_or_else(|| format!("frame of {len} bytes is truncated"))?;
        if crc32c::crc32c(body) != u32::from_be_bytes(*crc) {
            return Err("frame checksum mismatch".into());
        }
        out.push(ChunkedReadResponse::decode(body).map_err(|e| e.to_string())?);
        buf = &rest[len..];
    }
    Ok(out)
}

#[cfg(test)]
fn read_uvarint(buf: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, b) in buf.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use heddle_model::Sample;
    use proptest::prelude::*;

    fn labels(n: usize) -> Vec<Label> {
        (0..n)
            .map(|i| Label {
                name: format!("l{i:03}"),
                value: "v".repeat(20),
            })
            .collect()
    }

    fn decode_proto(c: &Chunk) -> Vec<Sample> {
        chunks::decode_floats(&crate::convert::chunk_from_proto(c.clone()).unwrap()).unwrap()
    }

    fn samples(n: i64) -> Vec<Sample> {
        (0..n).map(|i| Sample::new(i * 15_000, (i * i) as f64 / 7.0)).collect()
    }

    #[test]
    fn frame_layout_matches_prometheus() {
        let msg = ChunkedReadResponse {
            chunked_series: vec![ChunkedSeries {
                labels: labels(1),
                chunks: vec![],
            }],
            query_index: 3,
        };
        let mut out = BytesMut::new();
        write_frame(&msg, &mut out);
        let body = msg.encode_to_vec();
        assert!(body.len() < 128, "one-byte length in this test");
        assert_eq!(out[0] as usize, body.len());
        assert_eq!(&out[1..5], &crc32c::crc32c(&body).to_be_bytes());
        assert_eq!(&out[5..], &body[..]);
        // A corrupt byte is caught by the CRC.
        let mut bad = out.to_vec();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert_eq!(decode_frames(&bad).unwrap_err(), "frame checksum mismatch");
    }

    #[test]
    fn big_series_split_over_frames_within_limit() {
        let chunks = chunks::encode(&chunks::from_floats(&samples(2000))).unwrap();
        let max = 4096;
        let frames = series_frames(labels(3), chunks.clone(), 1, max).unwrap();
        let msgs = decode_frames(&frames).unwrap();
        assert!(msgs.len() > 1, "split over frames");
        let mut got = Vec::new();
        for m in &msgs {
            assert!(m.encoded_len() <= max, "frame of {} bytes", m.encoded_len());
            assert_eq!(m.query_index, 1);
            assert_eq!(m.chunked_series.len(), 1);
            assert_eq!(m.chunked_series[0].labels, labels(3));
            got.extend(m.chunked_series[0].chunks.iter().cloned());
        }
        let want: Vec<Chunk> = chunks.iter().map(chunk_to_proto).collect();
        assert_eq!(got, want, "chunks in order, untouched");
    }

    #[test]
    fn oversized_chunk_is_split_by_re_encoding() {
        // 1000 samples with noisy values make one chunk far over the limit.
        let big: Vec<Sample> = (0..1000)
            .map(|i| Sample::new(i * 1000, (i as f64).sin() * 1e6))
            .collect();
        let chunk = chunks::encode_one(&big).unwrap();
        let max = 1024;
        assert!(chunk_to_proto(&chunk).encoded_len() > max);
        let msgs = decode_frames(&series_frames(labels(2), vec![chunk], 0, max).unwrap()).unwrap();
        let mut got = Vec::new();
        for m in &msgs {
            assert!(m.encoded_len() <= max, "frame of {} bytes", m.encoded_len());
            for c in &m.chunked_series[0].chunks {
                got.extend(decode_proto(c));
            }
        }
        assert_eq!(got, big);
    }

    #[test]
    fn oversized_histogram_chunk_is_split_into_histogram_chunks() {
        use heddle_tsdb::chunk_samples::{ChunkSample, ChunkValue};
        use heddle_tsdb::chunkenc::Encoding;
        let big: Vec<ChunkSample> = (0..400u64)
            .map(|i| ChunkSample {
                t: i as i64 * 1000,
                value: ChunkValue::FloatHistogram(heddle_model::FloatHistogram {
                    count: i as f64 * 3.5,
                    sum: (i as f64).sin() * 1e6,
                    positive_spans: vec![heddle_model::Span::new(0, 2)],
                    positive_buckets: vec![i as f64 * 1.5, i as f64 * 2.0],
                    ..Default::default()
                }),
            })
            .collect();
        let chunk = chunks::encode_at_most(&big, big.len()).unwrap();
        assert_eq!(chunk.len(), 1);
        let max = 1024;
        assert!(chunk_to_proto(&chunk[0]).encoded_len() > max);
        let msgs = decode_frames(&series_frames(labels(2), chunk, 0, max).unwrap()).unwrap();
        let mut got = Vec::new();
        for m in &msgs {
            assert!(m.encoded_len() <= max, "frame of {} bytes", m.encoded_len());
            for c in &m.chunked_series[0].chunks {
                let c = crate::convert::chunk_from_proto(c.clone()).unwrap();
                assert_eq!(c.encoding, Encoding::FloatHistogram);
                got.extend(chunks::decode(&c).unwrap());
            }
        }
        let strip = |s: Vec<ChunkSample>| -> Vec<(i64, u64, u64)> {
            s.into_iter()
                .map(|s| match s.value {
                    ChunkValue::FloatHistogram(h) => (s.t, h.count.to_bits(), h.sum.to_bits()),
                    other => panic!("not a float histogram: {other:?}"),
                })
                .collect()
        };
        assert_eq!(strip(got), strip(big));
    }

    #[test]
    fn fits_in_frame_checks_labels() {
        assert!(fits_in_frame(&labels(3), 0, 4096));
        assert!(!fits_in_frame(&labels(200), 0, 4096));
    }

    proptest! {
        #[test]
        fn frames_round_trip(n in 1i64..600, max in 200usize..5000, nlabels in 0usize..4, index in 0i64..300) {
            let chunks = chunks::encode(&chunks::from_floats(&samples(n))).unwrap();
            let bytes = series_frames(labels(nlabels), chunks, index, max).unwrap();
            let msgs = decode_frames(&bytes).unwrap();
            let mut got = Vec::new();
            for m in &msgs {
                prop_assert!(m.encoded_len() <= max);
                prop_assert_eq!(m.query_index, index);
                for c in &m.chunked_series[0].chunks {
                    got.extend(decode_proto(c));
                }
            }
            prop_assert_eq!(got, samples(n));
        }
    }
}
