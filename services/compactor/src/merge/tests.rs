use super::*;
use bytes::Bytes;
use heddle_model::Sample;
use heddle_tsdb::block::{BlockMeta, new_ulid};
use heddle_tsdb::chunkenc::{XorChunk, decode_xor};

fn samples(ts: impl IntoIterator<Item = i64>) -> Vec<Sample> {
    ts.into_iter().map(|t| Sample::new(t, t as f64 * 0.5)).collect()
}

/// One chunk holding `ts` (any number of samples).
fn chunk(ts: impl IntoIterator<Item = i64>) -> ChunkData {
    let s = samples(ts);
    let mut c = XorChunk::new();
    for x in &s {
        c.append(x.t, x.v).unwrap();
    }
    ChunkData {
        encoding: heddle_tsdb::chunkenc::Encoding::Xor,
        min_time: s[0].t,
        max_time: s[s.len() - 1].t,
        data: Bytes::from(c.into_bytes()),
    }
}

fn all_samples(chunks: &[ChunkData]) -> Vec<Sample> {
    chunks.iter().flat_map(|c| decode_xor(&c.data).unwrap()).collect()
}

#[test]
fn merge_chunks_cases() {
    struct Case {
        name: &'static str,
        input: Vec<ChunkData>,
        want: Vec<Sample>,
        reencoded: u64,
    }
    let cases = [
        Case {
            name: "identical replica chunks kept once, as they are",
            input: vec![chunk(0..120), chunk(0..120), chunk(0..120), chunk(120..200)],
            want: samples(0..200),
            reencoded: 0,
        },
        Case {
            name: "replicas cut at other samples are merged, each timestamp once",
            input: vec![chunk(0..100), chunk(100..200), chunk(0..50), chunk(50..200)],
            want: samples(0..200),
            reencoded: 4,
        },
        Case {
            name: "a replica missing samples adds nothing and loses nothing",
            input: vec![chunk((0..300).step_by(2)), chunk(0..300)],
            want: samples(0..300),
            reencoded: 2,
        },
        Case {
            name: "disjoint chunks pass through",
            input: vec![chunk(200..250), chunk(0..10)],
            want: samples((0..10).chain(200..250)),
            reencoded: 0,
        },
    ];
    for c in cases {
        let input = c.input.clone();
        let (got, reencoded) = merge_chunks(c.input).unwrap();
        assert_eq!(all_samples(&got), c.want, "case {}", c.name);
        assert_eq!(reencoded, c.reencoded, "case {}: re-encoded chunks", c.name);
        assert!(
            got.windows(2).all(|w| w[0].max_time < w[1].min_time),
            "case {}: disjoint",
            c.name
        );
        for g in &got {
            let s = decode_xor(&g.data).unwrap();
            assert_eq!(
                (g.min_time, g.max_time),
                (s[0].t, s[s.len() - 1].t),
                "case {}: bounds",
                c.name
            );
            assert!(
                s.len() <= MAX_SAMPLES_PER_CHUNK || input.contains(g),
                "case {}: only passed-through chunks may hold more than {MAX_SAMPLES_PER_CHUNK} samples",
                c.name
            );
        }
    }
}

#[test]
fn a_tie_keeps_the_first_blocks_sample() {
    let first = chunk([5, 6]);
    let mut second_samples = XorChunk::new();
    second_samples.append(5, 99.0).unwrap();
    second_samples.append(7, 7.0).unwrap();
    let second = ChunkData {
        encoding: heddle_tsdb::chunkenc::Encoding::Xor,
        min_time: 5,
        max_time: 7,
        data: Bytes::from(second_samples.into_bytes()),
    };
    let (got, _) = merge_chunks(vec![first, second]).unwrap();
    assert_eq!(
        all_samples(&got),
        vec![Sample::new(5, 2.5), Sample::new(6, 3.0), Sample::new(7, 7.0)]
    );
}

proptest::proptest! {
    /// Whatever each replica holds and however it cut its chunks, the merge is the union of their samples, each
    /// timestamp once, in disjoint chunks bounded by their first and last sample.
    #[test]
    fn merge_is_the_union_of_replicas(
        base in proptest::collection::btree_set(0i64..5000, 1..600),
        replicas in proptest::collection::vec((proptest::bits::u64::ANY, 1usize..250), 1..4),
    ) {
        let base: Vec<i64> = base.into_iter().collect();
        let mut input = Vec::new();
        let mut want = std::collections::BTreeSet::new();
        for (r, (mask, per_chunk)) in replicas.iter().enumerate() {
            let held: Vec<i64> = base
                .iter()
                .enumerate()
                .filter(|(i, _)| mask.rotate_left((i + r) as u32) & 1 == 1)
                .map(|(_, t)| *t)
                .collect();
            want.extend(held.iter().copied());
            input.extend(held.chunks(*per_chunk).map(|p| chunk(p.iter().copied())));
        }
        let (merged, _) = merge_chunks(input).unwrap();
        proptest::prop_assert!(merged.windows(2).all(|w| w[0].max_time < w[1].min_time));
        proptest::prop_assert_eq!(all_samples(&merged), samples(want));
    }
}

/// Writes a block under `dir` holding, for series `i` in `series`, the samples `ts(i)` cut every `per_chunk`.
fn write_block(
    dir: &std::path::Path,
    series: impl Iterator<Item = usize>,
    ts: impl Fn(usize) -> Vec<i64>,
    per_chunk: usize,
) -> BlockReader {
    let meta = BlockMeta::new(new_ulid(), 0, 1_000_000, Some("t"));
    let mut w = BlockWriter::new(dir, meta).unwrap();
    let mut names: Vec<(Labels, usize)> = series.map(|i| (labels(i), i)).collect();
    names.sort();
    for (l, i) in names {
        let t = ts(i);
        let chunks: Vec<ChunkData> = t.chunks(per_chunk).map(|p| chunk(p.iter().copied())).collect();
        w.add_series(&l, &chunks).unwrap();
    }
    let meta = w.finish().unwrap();
    BlockReader::open_dir(&dir.join(&meta.ulid)).unwrap()
}

fn labels(i: usize) -> Labels {
    Labels::from_sorted([("__name__", "m"), ("i", &format!("{i:05}"))]).unwrap()
}

#[test]
fn three_replicas_become_one_block_with_every_sample_once() {
    let tmp = tempfile::tempdir().unwrap();
    // More series than a batch, so every cursor reads several batches; replicas cut chunks differently, one
    // misses every third sample, and each holds a few series the others lack.
    let n = BATCH * 2 + 37;
    let full = |i: usize| (0..300).map(|k| (k * 1000 + i) as i64).collect::<Vec<_>>();
    let a = write_block(tmp.path(), (0..n).filter(|i| i % 50 != 1), full, 120);
    let b = write_block(tmp.path(), (0..n).filter(|i| i % 50 != 2), full, 100);
    let c = write_block(
        tmp.path(),
        (0..n).filter(|i| i % 50 != 3),
        |i| {
            full(i)
                .into_iter()
                .enumerate()
                .filter(|(k, _)| k % 3 != 0)
                .map(|(_, t)| t)
                .collect()
        },
        120,
    );
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let parents = [a.meta().clone(), b.meta().clone(), c.meta().clone()];
    let mut w = BlockWriter::new(&out, BlockMeta::compacted(new_ulid(), &parents)).unwrap();
    let stats = merge_blocks(&[a, b, c], &mut w).unwrap();
    let meta = w.finish().unwrap();
    assert_eq!(stats.series, n as u64);
    assert_eq!(stats.samples_out, n as u64 * 300);
    assert_eq!(meta.stats.num_samples, n as u64 * 300);
    assert_eq!(meta.compaction.level, 2);
    let merged = BlockReader::open_dir(&out.join(&meta.ulid)).unwrap();
    let all = merged.select(i64::MIN, i64::MAX, &[]).unwrap();
    assert_eq!(all.len(), n);
    for (i, s) in all.iter().enumerate() {
        assert_eq!(s.labels, labels(i), "series order");
        assert_eq!(all_samples(&s.chunks), samples(full(i)), "series {i}");
        assert!(
            s.chunks
                .iter()
                .all(|c| num_samples(c) as usize <= MAX_SAMPLES_PER_CHUNK),
            "series {i}: chunk sizes"
        );
    }
}
