//! Native histogram chunks through a block: written with their encoding byte, read back with it, counted in
//! `meta.json`, and read by Prometheus itself.

use std::collections::BTreeMap;

use heddle_model::histogram::deltas_from_absolute;
use heddle_model::{Histogram, Labels, Span};

use super::*;
use crate::chunk_samples::{ChunkSample, ChunkValue, decode_chunk, encode_chunks};
use crate::chunkenc::Encoding;
use crate::head::ChunkData;

const RANGE: i64 = 7_200_000;

/// A counter histogram that grows with `k`, with a negative bucket and buckets that fill in over time.
pub(crate) fn histogram(k: u64) -> Histogram {
    let mut positive = vec![k as i64, 2 * k as i64];
    let mut spans = vec![Span::new(-1, 2)];
    if k >= 50 {
        positive.push(k as i64 - 49);
        spans.push(Span::new(2, 1));
    }
    let negative = [k as i64 / 2];
    Histogram {
        schema: 1,
        zero_threshold: 0.001,
        zero_count: k / 3,
        count: k / 3 + positive.iter().chain(&negative).sum::<i64>() as u64,
        sum: k as f64 * 2.25 - 3.0,
        positive_spans: spans,
        positive_buckets: deltas_from_absolute(&positive),
        negative_spans: vec![Span::new(0, 1)],
        negative_buckets: deltas_from_absolute(&negative),
        ..Histogram::default()
    }
}

fn labels(name: &str) -> Labels {
    Labels::from_unsorted([("__name__", name), ("job", "hist")]).expect("labels")
}

/// Four series: floats only, integer histograms, float histograms, and one that switches from floats to
/// integer histograms; samples every 15 s from 60 s on.
pub(crate) fn series() -> BTreeMap<Labels, Vec<ChunkSample>> {
    let t = |i: i64| 60_000 + i * 15_000;
    let mut out = BTreeMap::new();
    out.insert(
        labels("floats"),
        (0..200)
            .map(|i| ChunkSample {
                t: t(i),
                value: ChunkValue::Float(i as f64 / 4.0),
            })
            .collect(),
    );
    out.insert(
        labels("ints"),
        (0..300)
            .map(|i| ChunkSample {
                t: t(i),
                value: ChunkValue::Histogram(histogram(i as u64)),
            })
            .collect(),
    );
    out.insert(
        labels("float_hists"),
        (0..130)
            .map(|i| ChunkSample {
                t: t(i),
                value: ChunkValue::FloatHistogram(histogram(i as u64 * 3).to_float()),
            })
            .collect(),
    );
    out.insert(
        labels("switching"),
        (0..150)
            .map(|i| ChunkSample {
                t: t(i),
                value: if i < 70 {
                    ChunkValue::Float(i as f64)
                } else {
                    ChunkValue::Histogram(histogram(i as u64))
                },
            })
            .collect(),
    );
    out
}

/// Writes `series` as a block under `parent`, chunks cut at 120 samples.
pub(crate) fn write(
    parent: &std::path::Path,
    series: &BTreeMap<Labels, Vec<ChunkSample>>,
) -> (BlockMeta, BTreeMap<Labels, Vec<ChunkData>>) {
    let mut w = BlockWriter::new(parent, BlockMeta::new(new_ulid(), 0, RANGE, Some("t"))).expect("writer");
    let mut chunks = BTreeMap::new();
    for (l, samples) in series {
        let c = encode_chunks(samples, 120).expect("encode");
        w.add_series(l, &c).expect("add series");
        chunks.insert(l.clone(), c);
    }
    (w.finish().expect("finish"), chunks)
}

#[test]
fn histogram_chunks_round_trip_with_their_encoding() {
    let dir = tempfile::tempdir().unwrap();
    let series = series();
    let (meta, written) = write(dir.path(), &series);
    let encodings: Vec<Vec<Encoding>> = written
        .values()
        .map(|c| c.iter().map(|c| c.encoding).collect())
        .collect();
    use Encoding::*;
    // Sorted by name: float_hists, floats, ints, switching.
    assert_eq!(
        encodings,
        vec![
            vec![FloatHistogram, FloatHistogram],
            vec![Xor, Xor],
            vec![Histogram, Histogram, Histogram],
            vec![Xor, Histogram],
        ]
    );
    assert_eq!(meta.stats.num_float_samples, 200 + 70);
    assert_eq!(meta.stats.num_histogram_samples, 300 + 130 + 80);
    assert_eq!(meta.stats.num_samples, 200 + 70 + 300 + 130 + 80);
    let json = String::from_utf8(meta.to_json()).unwrap();
    assert!(
        json.contains(r#""numHistogramSamples": 510"#) || json.contains(r#""numHistogramSamples":510"#),
        "{json}"
    );

    let r = BlockReader::open_dir(&dir.path().join(&meta.ulid)).unwrap();
    let got: BTreeMap<Labels, Vec<ChunkData>> = r
        .select(i64::MIN, i64::MAX, &[])
        .unwrap()
        .into_iter()
        .map(|s| (s.labels, s.chunks))
        .collect();
    assert_eq!(got, written);
    assert_eq!(r.skipped_chunks(), 0);
    let ids = r.series_ids().unwrap();
    let streamed: BTreeMap<Labels, Vec<ChunkData>> = r
        .read_series(&ids)
        .unwrap()
        .into_iter()
        .map(|s| (s.labels, s.chunks))
        .collect();
    assert_eq!(streamed, written);
    for (l, chunks) in &got {
        let samples: Vec<ChunkSample> = chunks.iter().flat_map(|c| decode_chunk(c).unwrap()).collect();
        let ts: Vec<i64> = samples.iter().map(|s| s.t).collect();
        let want: Vec<i64> = series[l].iter().map(|s| s.t).collect();
        assert_eq!(ts, want, "{l}");
    }
}

#[test]
fn a_chunk_without_encoding_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = encode_chunks(&series()[&labels("ints")][..3], 120).unwrap();
    c[0].encoding = Encoding::None;
    let mut w = BlockWriter::new(dir.path(), BlockMeta::new(new_ulid(), 0, RANGE, Some("t"))).unwrap();
    let err = w.add_series(&labels("ints"), &c).unwrap_err();
    assert!(err.to_string().contains("has no encoding"), "{err}");
}
