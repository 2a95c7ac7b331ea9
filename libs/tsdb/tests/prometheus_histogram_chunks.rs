//! Histogram chunks written by Prometheus itself decode to exactly the histograms it was sent, and heddle's
//! appender, given the same samples, writes the same bytes.
//!
//! The fixtures (`tests/fixtures/prometheus-histograms/`, made by its `generate.py`) are `chunks_head` files of
//! Prometheus 2.42:
//! - `chunks_head-000001`, after it received three histogram series over remote write: a counter whose
//!   buckets fill in (recoded chunks), then reset, then change schema; a gauge whose buckets come and go; a
//!   sparse counter at schema 8 ending in a stale marker. `pushed.json` holds every histogram as it was sent.
//! - `chunks_head-float-000001`: float histogram chunks of a recording rule (`sum` of one series, evaluated
//!   every 100 ms), beside the integer chunk of that series; `rule_input.json` holds what was sent.

use heddle_model::FloatHistogram;
use heddle_model::{CounterResetHint, Histogram};
use heddle_tsdb::chunkenc::{
    CounterResetHeader, FloatHistogramChunk, HistogramAppend, HistogramChunk, decode_float_histograms,
    decode_histograms,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use support::{histogram, meaning, pushed_series};

mod support;

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/prometheus-histograms")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One chunk of a `chunks_head` file.
struct FileChunk {
    mint: i64,
    maxt: i64,
    encoding: u8,
    data: Vec<u8>,
}

/// The chunks of a `chunks_head` file: `seriesRef u64 | mint u64 | maxt u64 | encoding u8 | uvarint len |
/// data | crc32c u32` after the 8-byte header, until the zeros Prometheus preallocates.
fn file_chunks(bytes: &[u8]) -> Vec<FileChunk> {
    assert_eq!(&bytes[..5], &[0x01, 0x30, 0xBC, 0x91, 1], "chunks_head header");
    let be = |at: usize| u64::from_be_bytes(bytes[at..at + 8].try_into().unwrap());
    let mut out = Vec::new();
    let mut at = 8;
    while at + 25 < bytes.len() && bytes[at..].iter().any(|b| *b != 0) {
        let (mint, maxt, encoding) = (be(at + 8) as i64, be(at + 16) as i64, bytes[at + 24]);
        let (mut len, mut shift, mut p) = (0usize, 0, at + 25);
        loop {
            let b = bytes[p];
            p += 1;
            len |= usize::from(b & 0x7f) << shift;
            shift += 7;
            if b < 0x80 {
                break;
            }
        }
        let data = bytes[p..p + len].to_vec();
        let crc = u32::from_be_bytes(bytes[p + len..p + len + 4].try_into().unwrap());
        assert_eq!(crc32c::crc32c(&bytes[at..p + len]), crc, "crc of the chunk at {at}");
        out.push(FileChunk {
            mint,
            maxt,
            encoding,
            data,
        });
        at = p + len + 4;
    }
    out
}

struct Fixture {
    /// Chunks per series name, in time order.
    chunks: BTreeMap<String, Vec<FileChunk>>,
    /// Pushed samples per series name, by timestamp.
    pushed: BTreeMap<String, BTreeMap<i64, Histogram>>,
}

fn load() -> Fixture {
    let pushed: Value = serde_json::from_slice(&fixture("pushed.json")).unwrap();
    let (start, step) = (pushed["start"].as_i64().unwrap(), pushed["step"].as_i64().unwrap());
    let names: Vec<String> = pushed["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect();
    let mut chunks: BTreeMap<String, Vec<FileChunk>> = BTreeMap::new();
    for c in file_chunks(&fixture("chunks_head-000001")) {
        // Series i starts i ms after the others.
        let name = names[((c.mint - start) % step) as usize].clone();
        chunks.entry(name).or_default().push(c);
    }
    Fixture {
        chunks,
        pushed: pushed_series(&pushed),
    }
}

#[test]
fn prometheus_chunks_decode_to_what_was_pushed() {
    let f = load();
    assert_eq!(f.chunks.len(), 3, "chunks of every series");
    for (name, chunks) in &f.chunks {
        let pushed = &f.pushed[name];
        let mut decoded_samples = 0;
        for (i, c) in chunks.iter().enumerate() {
            assert_eq!(c.encoding, 2, "{name} chunk {i}: integer histogram encoding");
            let samples = decode_histograms(&c.data).unwrap_or_else(|e| panic!("{name} chunk {i}: {e}"));
            assert_eq!(
                samples.first().map(|s| s.0),
                Some(c.mint),
                "{name} chunk {i}: first timestamp"
            );
            assert_eq!(
                samples.last().map(|s| s.0),
                Some(c.maxt),
                "{name} chunk {i}: last timestamp"
            );
            let header = CounterResetHeader::of_chunk(&c.data);
            for (j, (t, h)) in samples.iter().enumerate() {
                let want = &pushed[t];
                assert_eq!(meaning(h), meaning(want), "{name} chunk {i} sample {j} at {t}");
                let hint = match (header, j) {
                    (CounterResetHeader::Gauge, _) => CounterResetHint::Gauge,
                    (_, 0) => CounterResetHint::Unknown,
                    _ => CounterResetHint::NotCounterReset,
                };
                assert_eq!(h.counter_reset_hint, hint, "{name} chunk {i} sample {j}: hint");
            }
            decoded_samples += samples.len();
        }
        assert!(
            decoded_samples >= 300,
            "{name}: only {decoded_samples} samples in full chunks"
        );
    }
    let headers: Vec<_> = f.chunks["counter"]
        .iter()
        .map(|c| CounterResetHeader::of_chunk(&c.data))
        .collect();
    assert_eq!(
        headers,
        [
            CounterResetHeader::Unknown,
            CounterResetHeader::NotCounterReset,
            CounterResetHeader::NotCounterReset,
            CounterResetHeader::CounterReset
        ],
        "the counter's chunks: first, cut at 120 samples twice, then the reset"
    );
}

#[test]
fn heddle_writes_prometheus_bytes() {
    let f = load();
    for (name, chunks) in &f.chunks {
        let pushed = &f.pushed[name];
        let mut prev: Option<HistogramChunk> = None;
        for (i, c) in chunks.iter().enumerate() {
            // Prometheus 2.42 cut these chunks at 120 samples or at a reset: start a chunk where it did, with
            // the chunk before as `prev`, and append the samples it was sent in that range.
            let mut chunk = HistogramChunk::new();
            for (t, h) in pushed.range(c.mint..=c.maxt) {
                match chunk.append(*t, h, prev.as_ref().filter(|_| chunk.is_empty())).unwrap() {
                    HistogramAppend::Appended | HistogramAppend::Recoded => {}
                    HistogramAppend::NewChunk(_) => panic!("{name} chunk {i}: heddle cut a chunk at {t}"),
                }
            }
            assert_eq!(chunk.bytes(), &c.data[..], "{name} chunk {i}: bytes");
            prev = Some(chunk);
        }
    }
}

/// A float histogram's meaning, compared by bits.
fn float_meaning(h: &FloatHistogram) -> (i32, u64, u64, u64, u64, Vec<(i64, u64)>) {
    let mut next = 0i64;
    let idx = h.positive_spans.iter().flat_map(|s| {
        let start = next + i64::from(s.offset);
        next = start + i64::from(s.length);
        start..next
    });
    let positive = idx
        .zip(&h.positive_buckets)
        .filter(|(_, c)| **c != 0.0)
        .map(|(i, c)| (i, c.to_bits()))
        .collect();
    (
        h.schema,
        h.zero_threshold.to_bits(),
        h.count.to_bits(),
        h.zero_count.to_bits(),
        h.sum.to_bits(),
        positive,
    )
}

#[test]
fn prometheus_float_chunks_hold_the_rule_results() {
    let input: Value = serde_json::from_slice(&fixture("rule_input.json")).unwrap();
    let input: BTreeMap<i64, Histogram> = input["series"][0]["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(histogram)
        .collect();
    let chunks = file_chunks(&fixture("chunks_head-float-000001"));
    let float: Vec<&FileChunk> = chunks.iter().filter(|c| c.encoding == 3).collect();
    assert!(!float.is_empty(), "no float histogram chunk in the fixture");
    for (i, c) in float.iter().enumerate() {
        let samples = decode_float_histograms(&c.data).unwrap_or_else(|e| panic!("float chunk {i}: {e}"));
        assert!(samples.len() >= 100, "float chunk {i}: {} samples", samples.len());
        let header = CounterResetHeader::of_chunk(&c.data);
        for (t, h) in &samples {
            // `sum` of one series at time t is that series' latest sample at or before t.
            let (_, latest) = input
                .range(..=*t)
                .next_back()
                .unwrap_or_else(|| panic!("no input before {t}"));
            assert_eq!(
                float_meaning(h),
                float_meaning(&latest.to_float()),
                "float chunk {i} at {t}"
            );
            assert_eq!(
                h.counter_reset_hint == CounterResetHint::Gauge,
                header == CounterResetHeader::Gauge
            );
        }
        // Appending what was decoded to a new chunk writes Prometheus' bytes: every sample already has the
        // chunk's final layout, which Prometheus' recoding gave the earlier ones too.
        let mut again = FloatHistogramChunk::new();
        for (t, h) in &samples {
            assert!(
                matches!(again.append(*t, h, None).unwrap(), HistogramAppend::Appended),
                "at {t}"
            );
        }
        assert_eq!(again.bytes(), &c.data[..], "float chunk {i}: bytes");
    }
    // The rule read an integer histogram series: its chunk is in the same file.
    for c in chunks.iter().filter(|c| c.encoding == 2) {
        for (t, h) in decode_histograms(&c.data).unwrap() {
            assert_eq!(meaning(&h), meaning(&input[&t]), "rule input at {t}");
        }
    }
}
