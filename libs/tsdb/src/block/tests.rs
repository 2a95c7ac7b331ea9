//! Writer -> reader round trips, segment rollover, ordering checks, corruption detection, and hostile bytes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;
use std::path::Path;

use bytes::Bytes;
use heddle_model::{Labels, MatchType, Matcher};
use proptest::prelude::*;

use super::*;
use crate::chunkenc::{Encoding, XorChunk, decode_xor};
use crate::error::TsdbError;
use crate::head::{ChunkData, SeriesChunks};

const RANGE: i64 = 7_200_000;

/// Chunks of at most `per_chunk` samples, built with the head's XOR appender.
fn chunks_of(samples: &[(i64, f64)], per_chunk: usize) -> Vec<ChunkData> {
    samples
        .chunks(per_chunk.max(1))
        .map(|part| {
            let mut c = XorChunk::new();
            for &(t, v) in part {
                c.append(t, v).expect("append");
            }
            ChunkData {
                encoding: Encoding::Xor,
                min_time: part[0].0,
                max_time: part[part.len() - 1].0,
                data: Bytes::from(c.into_bytes()),
            }
        })
        .collect()
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    Labels::from_unsorted(pairs.iter().copied()).expect("labels")
}

/// Samples of series `i`: `n` of them every 15 s from `start`, values that vary in several ways.
fn samples(i: usize, n: usize, start: i64) -> Vec<(i64, f64)> {
    (0..n)
        .map(|k| {
            let t = start + k as i64 * 15_000 + (i as i64 % 7);
            let v = match i % 3 {
                0 => k as f64,
                1 => (i * 1000 + k) as f64 * 0.25,
                _ => ((k as f64) * 0.37 + i as f64).sin(),
            };
            (t, v)
        })
        .collect()
}

/// Writes `series` (sorted here) into a new block under `parent`; returns its directory and meta.
fn write_block(parent: &Path, series: &BTreeMap<Labels, Vec<ChunkData>>, segment_size: Option<u64>) -> BlockMeta {
    let meta = BlockMeta::new(new_ulid(), 0, RANGE, Some("t"));
    let mut w = match segment_size {
        Some(s) => BlockWriter::with_segment_size(parent, meta, s).expect("writer"),
        None => BlockWriter::new(parent, meta).expect("writer"),
    };
    for (l, c) in series {
        w.add_series(l, c).expect("add series");
    }
    w.finish().expect("finish")
}

fn decoded(s: &SeriesChunks) -> Vec<(i64, u64)> {
    s.chunks
        .iter()
        .flat_map(|c| decode_xor(&c.data).expect("decode"))
        .map(|s| (s.t, s.v.to_bits()))
        .collect()
}

fn matches_all(l: &Labels, ms: &[Matcher]) -> bool {
    ms.iter().all(|m| m.matches(l.get(m.name()).unwrap_or("")))
}

/// Compares every query of `r` with a brute-force evaluation over `series`.
fn check_queries(r: &BlockReader, series: &BTreeMap<Labels, Vec<ChunkData>>, ms: &[Matcher], mint: i64, maxt: i64) {
    let want: Vec<(Labels, Vec<ChunkData>)> = series
        .iter()
        .filter(|(l, _)| matches_all(l, ms))
        .map(|(l, c)| {
            let c: Vec<ChunkData> = c
                .iter()
                .filter(|c| c.min_time <= maxt && c.max_time >= mint)
                .cloned()
                .collect();
            (l.clone(), c)
        })
        .filter(|(_, c)| !c.is_empty())
        .collect();
    let got = r.select(mint, maxt, ms).expect("select");
    let got: Vec<(Labels, Vec<ChunkData>)> = got.into_iter().map(|s| (s.labels, s.chunks)).collect();
    assert_eq!(got.len(), want.len(), "series count for {ms:?} in [{mint}, {maxt}]");
    assert!(got == want, "select {ms:?} [{mint}, {maxt}] differs");
    let labels: Vec<Labels> = want.iter().map(|(l, _)| l.clone()).collect();
    assert_eq!(r.series(mint, maxt, ms).expect("series"), labels, "series {ms:?}");
    let matching: Vec<&Labels> = series.keys().filter(|l| matches_all(l, ms)).collect();
    let names: BTreeSet<String> = if ms.is_empty() {
        series
            .keys()
            .flat_map(|l| l.iter().map(|x| x.name.to_owned()).collect::<Vec<_>>())
            .collect()
    } else {
        matching
            .iter()
            .flat_map(|l| l.iter().map(|x| x.name.to_owned()).collect::<Vec<_>>())
            .collect()
    };
    assert_eq!(
        r.label_names(ms).expect("names"),
        names.iter().cloned().collect::<Vec<_>>(),
        "names {ms:?}"
    );
    for name in names.iter().take(3) {
        let src: Vec<&Labels> = if ms.is_empty() {
            series.keys().collect()
        } else {
            matching.clone()
        };
        let values: BTreeSet<String> = src.iter().filter_map(|l| l.get(name).map(str::to_owned)).collect();
        assert_eq!(
            r.label_values(name, ms).expect("values"),
            values.into_iter().collect::<Vec<_>>(),
            "values of {name} {ms:?}"
        );
    }
}

#[test]
fn round_trip_of_a_large_block() {
    let dir = tempfile::tempdir().unwrap();
    let mut series = BTreeMap::new();
    for i in 0..4000usize {
        let pod = format!("pöd-{i:05}-{}", "x".repeat(i % 40));
        let l = labels(&[
            ("__name__", ["up", "requests_total", "λ_latency"][i % 3]),
            ("job", &format!("job-{}", i % 17)),
            ("pod", &pod),
            ("zone", if i % 5 == 0 { " " } else { "eu" }),
        ]);
        series.insert(l, chunks_of(&samples(i, 30 + i % 300, 1000), 120));
    }
    let meta = write_block(dir.path(), &series, None);
    let block = dir.path().join(&meta.ulid);
    assert!(!dir.path().join(format!("{}{TMP_SUFFIX}", meta.ulid)).exists());
    let samples_total: u64 = series
        .values()
        .flatten()
        .map(|c| u64::from(u16::from_be_bytes([c.data[0], c.data[1]])))
        .sum();
    assert_eq!(meta.stats.num_series, 4000);
    assert_eq!(meta.stats.num_samples, samples_total);
    assert_eq!(
        meta.stats.num_chunks,
        series.values().map(|c| c.len() as u64).sum::<u64>()
    );
    assert_eq!(BlockMeta::read(&block).unwrap(), meta);
    assert_eq!(
        tombstones::count(&std::fs::read(block.join("tombstones")).unwrap()),
        Ok(0)
    );
    let r = BlockReader::open_dir(&block).expect("open");
    let re = |k, n: &str, v: &str| Matcher::new(k, n, v).unwrap();
    let cases: Vec<Vec<Matcher>> = vec![
        vec![],
        vec![Matcher::equal("__name__", "up")],
        vec![Matcher::equal("__name__", "λ_latency"), Matcher::equal("job", "job-3")],
        vec![re(MatchType::RegexMatch, "pod", "pöd-0[01].*")],
        vec![re(MatchType::NotEqual, "zone", "eu")],
        vec![
            re(MatchType::RegexNoMatch, "job", "job-1.*"),
            Matcher::equal("zone", " "),
        ],
        vec![Matcher::equal("job", "nope")],
        vec![Matcher::equal("missing", "")],
        vec![re(MatchType::RegexMatch, "missing", ".+")],
    ];
    for ms in &cases {
        check_queries(&r, &series, ms, i64::MIN, i64::MAX);
        check_queries(&r, &series, ms, 1_000_000, 1_200_000);
    }
    // The samples themselves.
    let all = r.select(i64::MIN, i64::MAX, &[]).unwrap();
    for (s, i) in all.iter().zip(0..) {
        let want: Vec<(i64, u64)> = series[&s.labels]
            .iter()
            .flat_map(|c| decode_xor(&c.data).unwrap())
            .map(|x| (x.t, x.v.to_bits()))
            .collect();
        assert_eq!(decoded(s), want, "series {i}");
    }
    assert_eq!(r.skipped_chunks(), 0);
    assert_eq!(list_local_blocks(dir.path()).unwrap(), vec![(block, meta)]);
}

#[test]
fn chunk_segments_roll_over_at_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut series = BTreeMap::new();
    for i in 0..50usize {
        series.insert(labels(&[("i", &format!("{i:03}"))]), chunks_of(&samples(i, 200, 0), 40));
    }
    let meta = write_block(dir.path(), &series, Some(2000));
    let block = dir.path().join(&meta.ulid);
    let segments = std::fs::read_dir(block.join("chunks")).unwrap().count();
    assert!(segments > 10, "only {segments} segments");
    for seq in 1..=segments {
        let len = std::fs::metadata(block.join(format!("chunks/{seq:06}"))).unwrap().len();
        assert!(len <= 2000, "segment {seq} has {len} bytes");
    }
    let r = BlockReader::open_dir(&block).unwrap();
    check_queries(&r, &series, &[], i64::MIN, i64::MAX);
    check_queries(&r, &series, &[Matcher::equal("i", "049")], 0, RANGE);
}

#[test]
fn misordered_input_is_refused_naming_the_series() {
    let dir = tempfile::tempdir().unwrap();
    let meta = BlockMeta::new(new_ulid(), 0, 1000, None);
    let mut w = BlockWriter::new(dir.path(), meta).unwrap();
    let c = chunks_of(&[(10, 1.0), (20, 2.0)], 10);
    w.add_series(&labels(&[("a", "2")]), &c).unwrap();
    let err = w.add_series(&labels(&[("a", "1")]), &c).unwrap_err().to_string();
    assert!(err.contains(r#"a="1""#) && err.contains(r#"a="2""#), "{err}");
    assert!(w.add_series(&labels(&[("a", "2")]), &c).is_err(), "duplicate accepted");
    let overlapping = [c[0].clone(), c[0].clone()];
    let err = w
        .add_series(&labels(&[("a", "3")]), &overlapping)
        .unwrap_err()
        .to_string();
    assert!(err.contains("overlaps"), "{err}");
    let late = chunks_of(&[(999, 1.0), (1000, 2.0)], 10);
    let err = w.add_series(&labels(&[("a", "4")]), &late).unwrap_err().to_string();
    assert!(err.contains("outside"), "{err}");
    w.add_series(&labels(&[("a", "5")]), &[]).unwrap();
    let meta = w.finish().unwrap();
    assert_eq!(meta.stats.num_series, 1);
    assert_eq!(meta.stats.num_samples, 2);
    let r = BlockReader::open_dir(&dir.path().join(&meta.ulid)).unwrap();
    assert_eq!(r.series(i64::MIN, i64::MAX, &[]).unwrap(), vec![labels(&[("a", "2")])]);
}

#[test]
fn incomplete_blocks_are_removed_and_not_listed() {
    let dir = tempfile::tempdir().unwrap();
    let w = BlockWriter::new(dir.path(), BlockMeta::new(new_ulid(), 0, 10, None)).unwrap();
    drop(w);
    let mut series = BTreeMap::new();
    series.insert(labels(&[("a", "b")]), chunks_of(&[(1, 1.0)], 1));
    let meta = write_block(dir.path(), &series, None);
    std::fs::create_dir(dir.path().join("not-a-block")).unwrap();
    assert_eq!(list_local_blocks(dir.path()).unwrap().len(), 1);
    assert_eq!(remove_incomplete_blocks(dir.path()).unwrap(), 1);
    assert_eq!(remove_incomplete_blocks(dir.path()).unwrap(), 0);
    assert!(dir.path().join(&meta.ulid).is_dir());
}

/// A block with `n` series of two chunks, and the bytes of its files.
pub(super) fn small_block(n: usize) -> (tempfile::TempDir, BlockMeta, BTreeMap<Labels, Vec<ChunkData>>) {
    let dir = tempfile::tempdir().unwrap();
    let mut series = BTreeMap::new();
    for i in 0..n {
        let l = labels(&[
            ("__name__", "m"),
            ("i", &i.to_string()),
            ("odd", if i % 2 == 1 { "y" } else { "" }),
        ]);
        series.insert(l, chunks_of(&samples(i, 20, 0), 10));
    }
    let meta = write_block(dir.path(), &series, None);
    (dir, meta, series)
}

fn flip(path: &Path, at: usize) {
    let mut b = std::fs::read(path).unwrap();
    b[at] ^= 0x5a;
    std::fs::write(path, b).unwrap();
}

pub(super) fn corruption(e: TsdbError) -> String {
    match e {
        TsdbError::Corruption { what, reason } => format!("{what}: {reason}"),
        other => panic!("expected a corruption error, got {other}"),
    }
}

#[test]
fn corrupt_chunk_is_detected_naming_file_and_offset() {
    let (dir, meta, _) = small_block(5);
    let block = dir.path().join(&meta.ulid);
    flip(&block.join("chunks/000001"), 8 + 5);
    let r = BlockReader::open_dir(&block).unwrap();
    let err = corruption(r.select(i64::MIN, i64::MAX, &[]).unwrap_err());
    assert!(
        err.contains("chunks/000001 offset 8") && err.contains("checksum"),
        "{err}"
    );
}

#[test]
fn corrupt_index_sections_are_detected() {
    let (dir, meta, _) = small_block(5);
    let block = dir.path().join(&meta.ulid);
    let index = std::fs::read(block.join("index")).unwrap();
    let toc = index.len() - 52;
    let be = |at: usize| u64::from_be_bytes(index[at..at + 8].try_into().unwrap()) as usize;
    let (symbols, series, postings, table) = (be(toc), be(toc + 8), be(toc + 32), be(toc + 40));
    // Symbols, postings table and TOC are checked at open.
    for (what, at) in [("symbols", symbols + 9), ("table", table + 9), ("toc", toc + 3)] {
        let copy = dir.path().join(format!("copy-{what}"));
        crate::block::tests::copy_block(&block, &copy);
        flip(&copy.join("index"), at);
        let err = corruption(BlockReader::open_dir(&copy).unwrap_err());
        assert!(err.contains("index"), "{what}: {err}");
    }
    // Series entries and postings lists when a query reads them.
    for (what, at) in [("series", series + 2), ("postings", postings + 9)] {
        let copy = dir.path().join(format!("copy-{what}"));
        copy_block(&block, &copy);
        flip(&copy.join("index"), at);
        let r = BlockReader::open_dir(&copy).unwrap();
        let err = corruption(r.select(i64::MIN, i64::MAX, &[]).unwrap_err());
        assert!(
            err.contains("index offset") && err.contains("checksum"),
            "{what}: {err}"
        );
    }
}

fn copy_block(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst.join("chunks")).unwrap();
    for entry in walk(src) {
        let rel = entry.strip_prefix(src).unwrap();
        std::fs::copy(&entry, dst.join(rel)).unwrap();
    }
}

pub(super) fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Block files held in memory, for feeding a reader arbitrary bytes.
#[derive(Debug)]
pub(super) struct MemFiles(pub(super) HashMap<String, Bytes>);

impl BlockFiles for MemFiles {
    fn size(&self, name: &str) -> Result<u64, TsdbError> {
        self.0
            .get(name)
            .map(|b| b.len() as u64)
            .ok_or_else(|| TsdbError::Corruption {
                what: name.to_owned(),
                reason: "no such file".to_owned(),
            })
    }

    fn read(&self, name: &str, range: Range<u64>) -> Result<Bytes, TsdbError> {
        let b = self.0.get(name).ok_or_else(|| TsdbError::Corruption {
            what: name.to_owned(),
            reason: "no such file".to_owned(),
        })?;
        if range.start > range.end || range.end > b.len() as u64 {
            return Err(TsdbError::Corruption {
                what: name.to_owned(),
                reason: format!("range {range:?} outside {} bytes", b.len()),
            });
        }
        Ok(b.slice(range.start as usize..range.end as usize))
    }
}

pub(super) fn mem_files(block: &Path) -> HashMap<String, Bytes> {
    walk(block)
        .into_iter()
        .map(|p| {
            let name = p.strip_prefix(block).unwrap().to_str().unwrap().to_owned();
            (name, Bytes::from(std::fs::read(&p).unwrap()))
        })
        .collect()
}

fn label_set() -> impl Strategy<Value = Labels> {
    let names = prop::sample::select(vec!["__name__", "a", "b", "job", "ü"]);
    let values = prop::sample::select(vec!["x", "y", "xy", " ", "é", "日本", "a b", "0", "1"]);
    prop::collection::btree_map(names, values, 1..5)
        .prop_map(|m| Labels::from_sorted(m.iter().map(|(n, v)| (*n, *v))).unwrap())
}

pub(super) fn matcher() -> impl Strategy<Value = Matcher> {
    let kinds = prop::sample::select(vec![
        MatchType::Equal,
        MatchType::NotEqual,
        MatchType::RegexMatch,
        MatchType::RegexNoMatch,
    ]);
    let names = prop::sample::select(vec!["__name__", "a", "b", "job", "ü", "none"]);
    let values = prop::sample::select(vec!["x", "y", "", " ", "é", "x.*", ".+", "x|日本", "[0-9]", ".*"]);
    (kinds, names, values).prop_map(|(k, n, v)| Matcher::new(k, n, v).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn round_trip_matches_brute_force(
        sets in prop::collection::btree_set(label_set(), 1..120),
        ms in prop::collection::vec(matcher(), 0..3),
        mint in 0i64..3_000_000,
        span in 0i64..3_000_000,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let series: BTreeMap<Labels, Vec<ChunkData>> = sets
            .into_iter()
            .enumerate()
            .map(|(i, l)| (l, chunks_of(&samples(i, 1 + (i * 37) % 400, (i as i64 * 9_000) % 500_000), 1 + i % 130)))
            .collect();
        let meta = write_block(dir.path(), &series, Some(4096));
        let r = BlockReader::open_dir(&dir.path().join(&meta.ulid)).unwrap();
        check_queries(&r, &series, &ms, mint, mint + span);
    }
}
