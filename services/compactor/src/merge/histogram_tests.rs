//! Native histograms through a merge: replicas of integer and float histogram chunks, and a series that
//! switches from floats to histograms.

use super::*;
use heddle_model::Histogram;
use heddle_testkit::histogram::growing_counter;
use heddle_tsdb::block::{BlockMeta, new_ulid};
use heddle_tsdb::chunk_samples::ChunkValue;
use heddle_tsdb::chunkenc::Encoding;

/// A counter histogram growing with `k`; a bucket appears at k = 40, so chunks get recoded.
fn histogram(k: u64) -> Histogram {
    growing_counter(k, 40)
}

/// Sample `k` of series `name`: `ints` and `floats` hold integer and float histograms, `switching` floats
/// until k = 100 then integer histograms.
fn sample(name: &str, k: usize) -> ChunkSample {
    let t = k as i64 * 15_000;
    let value = match name {
        "ints" => ChunkValue::Histogram(histogram(k as u64)),
        "floats" => ChunkValue::FloatHistogram(histogram(k as u64 * 2).to_float()),
        _ if k < 100 => ChunkValue::Float(k as f64 * 0.5),
        _ => ChunkValue::Histogram(histogram(k as u64)),
    };
    ChunkSample { t, value }
}

const NAMES: [&str; 3] = ["floats", "ints", "switching"];

fn labels(name: &str) -> Labels {
    Labels::from_sorted([("__name__", name), ("job", "h")]).unwrap()
}

/// A replica block: every series with the samples `keep` lets through, cut every `per_chunk` samples.
fn replica(dir: &std::path::Path, keep: impl Fn(usize) -> bool, per_chunk: usize) -> BlockReader {
    let mut w = BlockWriter::new(dir, BlockMeta::new(new_ulid(), 0, 7_200_000, Some("t"))).unwrap();
    for name in NAMES {
        let samples: Vec<ChunkSample> = (0..300).filter(|k| keep(*k)).map(|k| sample(name, k)).collect();
        w.add_series(&labels(name), &encode_chunks(&samples, per_chunk).unwrap())
            .unwrap();
    }
    let meta = w.finish().unwrap();
    BlockReader::open_dir(&dir.join(&meta.ulid)).unwrap()
}

/// Merges `blocks` into a new block; returns its series and the merge's stats.
fn merged(dir: &std::path::Path, blocks: Vec<BlockReader>) -> (Vec<SeriesChunks>, MergeStats) {
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let parents: Vec<BlockMeta> = blocks.iter().map(|b| b.meta().clone()).collect();
    let mut w = BlockWriter::new(&out, BlockMeta::compacted(new_ulid(), &parents)).unwrap();
    let stats = merge_blocks(&blocks, &mut w).unwrap();
    let meta = w.finish().unwrap();
    assert_eq!(meta.stats.num_samples, stats.samples_out);
    let r = BlockReader::open_dir(&out.join(&meta.ulid)).unwrap();
    (r.select(i64::MIN, i64::MAX, &[]).unwrap(), stats)
}

fn decoded(chunks: &[ChunkData]) -> Vec<ChunkSample> {
    chunks.iter().flat_map(|c| decode_chunk(c).unwrap()).collect()
}

/// The samples as a merge must give them back: each once, with its value, hints and empty buckets aside (a
/// chunk's first sample reads back with an unknown hint; a recoded chunk lists buckets its earlier samples
/// have empty).
fn comparable(samples: Vec<ChunkSample>) -> Vec<(i64, ChunkValue)> {
    samples
        .into_iter()
        .map(|s| {
            let mut v = s.value;
            match &mut v {
                ChunkValue::Histogram(h) => {
                    h.counter_reset_hint = Default::default();
                    h.compact(0);
                }
                ChunkValue::FloatHistogram(h) => {
                    h.counter_reset_hint = Default::default();
                    h.compact(0);
                }
                ChunkValue::Float(_) => {}
            }
            (s.t, v)
        })
        .collect()
}

#[test]
fn identical_replica_histogram_chunks_are_kept_once_as_they_are() {
    let tmp = tempfile::tempdir().unwrap();
    let blocks: Vec<BlockReader> = (0..3).map(|_| replica(tmp.path(), |_| true, 120)).collect();
    let want: Vec<Vec<ChunkData>> = blocks[0]
        .select(i64::MIN, i64::MAX, &[])
        .unwrap()
        .into_iter()
        .map(|s| s.chunks)
        .collect();
    let (got, stats) = merged(tmp.path(), blocks);
    assert_eq!(stats.chunks_reencoded, 0);
    assert_eq!(stats.samples_out, 3 * 300);
    let got_chunks: Vec<Vec<ChunkData>> = got.iter().map(|s| s.chunks.clone()).collect();
    assert_eq!(got_chunks, want, "one copy of each chunk, byte for byte");
    for (s, name) in got.iter().zip(NAMES) {
        let want: Vec<ChunkSample> = (0..300).map(|k| sample(name, k)).collect();
        assert_eq!(comparable(decoded(&s.chunks)), comparable(want), "{name}");
    }
}

#[test]
fn replicas_cut_differently_merge_into_histogram_chunks_with_each_sample_once() {
    let tmp = tempfile::tempdir().unwrap();
    let blocks = vec![
        replica(tmp.path(), |_| true, 120),
        replica(tmp.path(), |k| k % 3 != 0, 70),
        replica(tmp.path(), |k| k < 250, 100),
    ];
    let (got, stats) = merged(tmp.path(), blocks);
    assert!(stats.chunks_reencoded > 0);
    assert_eq!(stats.samples_out, 3 * 300);
    assert_eq!(got.len(), NAMES.len());
    for (s, name) in got.iter().zip(NAMES) {
        assert_eq!(s.labels, labels(name));
        let want: Vec<ChunkSample> = (0..300).map(|k| sample(name, k)).collect();
        assert_eq!(
            comparable(decoded(&s.chunks)),
            comparable(want),
            "{name}: every sample once"
        );
        for c in &s.chunks {
            let samples = decode_chunk(c).unwrap();
            assert!(
                samples.len() <= MAX_SAMPLES_PER_CHUNK,
                "{name}: chunk of {}",
                samples.len()
            );
            assert!(
                samples.iter().all(|x| x.value.encoding() == c.encoding),
                "{name}: a chunk holds one kind of sample"
            );
            assert_eq!((c.min_time, c.max_time), (samples[0].t, samples[samples.len() - 1].t));
        }
        let encodings: Vec<Encoding> = s.chunks.iter().map(|c| c.encoding).collect();
        let want_encodings = match name {
            "floats" => vec![Encoding::FloatHistogram; 3],
            "ints" => vec![Encoding::Histogram; 3],
            _ => vec![Encoding::Xor, Encoding::Histogram, Encoding::Histogram],
        };
        assert_eq!(encodings, want_encodings, "{name}");
    }
}
