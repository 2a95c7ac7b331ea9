//! The judge of heddle's persistent blocks: Prometheus' own tools read what heddle writes, and heddle reads
//! what Prometheus writes, sample for sample.
//!
//! 1. heddle writes a block (200 series, several XOR chunks each, built with heddle-tsdb's appender);
//!    `promtool tsdb analyze` must accept it and count the series, and `promtool tsdb dump` must list exactly
//!    every sample written, nothing else.
//! 2. `promtool tsdb create-blocks-from openmetrics` turns an OpenMetrics file into blocks; heddle's
//!    `BlockReader` must read back exactly the samples of the file.
//!
//! Needs `/usr/bin/promtool` (Debian package `prometheus`; `PROMTOOL_BIN` overrides the path). Without it the
//! tests are skipped with a message, unless `CI` is set, in which case a missing tool fails them.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use heddle_model::{Labels, MatchType, Matcher};
use heddle_testkit::promtool::{Dump, parse_dump};
use heddle_testkit::{prometheus_tool, run_bounded, splitmix64};
use heddle_tsdb::block::{BlockMeta, BlockReader, BlockWriter, list_local_blocks, new_ulid};
use heddle_tsdb::chunkenc::{XorChunk, decode_xor};
use heddle_tsdb::head::ChunkData;

const PROMTOOL_TIMEOUT: Duration = Duration::from_secs(120);
/// Start of the block: a multiple of 2 h, as Prometheus aligns blocks.
const BLOCK_START: i64 = 1_699_999_200_000;
const BLOCK_RANGE: i64 = 7_200_000;
const SERIES: usize = 200;
const SCRAPE_MS: i64 = 15_000;
const SAMPLES_PER_CHUNK: usize = 120;

/// Series to `(timestamp, value bits)` in time order.
type Samples = Dump;

fn promtool(args: &[&str]) -> String {
    let Some(bin) = prometheus_tool("PROMTOOL_BIN", "promtool", "blocks") else {
        return String::new();
    };
    let mut cmd = Command::new(bin);
    cmd.args(args);
    let out = run_bounded(cmd, PROMTOOL_TIMEOUT).unwrap_or_else(|e| panic!("promtool {args:?}: {e}"));
    assert!(
        out.status.success(),
        "promtool {args:?} exited with {}:\nstdout:\n{}\nstderr:\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
    out.stdout
}

fn labels_of(i: usize) -> Labels {
    let name = format!("heddle_block_metric_{}", i % 10);
    let instance = format!("host-{i:03}");
    let le = format!("{}", (i % 4) as f64 * 0.5);
    Labels::from_unsorted([
        ("__name__", name.as_str()),
        ("instance", instance.as_str()),
        ("job", "blocks"),
        ("le", le.as_str()),
    ])
    .expect("labels")
}

/// The samples of series `i`: every 15 s (with a per-series offset and some jitter) across the block, with
/// counters, gauges with full-precision values, and a few special values.
fn workload() -> Samples {
    let mut out = Samples::new();
    for i in 0..SERIES {
        let mut samples = Vec::new();
        let mut t = BLOCK_START + (i as i64 * 37) % SCRAPE_MS;
        let mut counter = 0.0;
        let mut k = 0u64;
        while t < BLOCK_START + BLOCK_RANGE {
            let r = splitmix64((i as u64) << 32 | k);
            counter += (r % 100) as f64;
            let v = match i % 4 {
                0 => counter,
                1 => f64::from_bits(r >> 2) % 1e6,
                2 => (r % 7) as f64 - 3.5,
                _ if k % 50 == 7 => f64::INFINITY,
                _ => (k as f64 * 0.1).sin() * 1e-9,
            };
            samples.push((t, v.to_bits()));
            k += 1;
            t += SCRAPE_MS + (r % 3) as i64 - 1;
        }
        out.insert(labels_of(i), samples);
    }
    out
}

fn chunks_of(samples: &[(i64, u64)]) -> Vec<ChunkData> {
    samples
        .chunks(SAMPLES_PER_CHUNK)
        .map(|part| {
            let mut c = XorChunk::new();
            for &(t, v) in part {
                c.append(t, f64::from_bits(v)).expect("append");
            }
            ChunkData {
                encoding: heddle_tsdb::chunkenc::Encoding::Xor,
                min_time: part[0].0,
                max_time: part[part.len() - 1].0,
                data: c.into_bytes().into(),
            }
        })
        .collect()
}

/// Every sample of every block under `dir`, read with heddle's reader.
fn read_blocks(dir: &Path) -> (Samples, usize) {
    let blocks = list_local_blocks(dir).expect("list blocks");
    let mut out = Samples::new();
    let all = [Matcher::new(MatchType::RegexMatch, "__name__", ".+").expect("matcher")];
    for (path, meta) in &blocks {
        let r = BlockReader::open_dir(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        let series = r.select(meta.min_time, meta.max_time, &all).expect("select");
        assert_eq!(
            series.len() as u64,
            meta.stats.num_series,
            "series of block {}",
            meta.ulid
        );
        for s in series {
            let samples = out.entry(s.labels).or_default();
            for c in &s.chunks {
                let decoded = decode_xor(&c.data).unwrap_or_else(|e| panic!("chunk of block {}: {e}", meta.ulid));
                samples.extend(decoded.into_iter().map(|x| (x.t, x.v.to_bits())));
            }
        }
    }
    (out, blocks.len())
}

/// The first lines where two sample sets differ.
fn differences(got: &Samples, want: &Samples) -> String {
    let mut out = Vec::new();
    for (l, w) in want {
        match got.get(l) {
            None => out.push(format!("missing series {l}")),
            Some(g) if g != w => {
                let at = g
                    .iter()
                    .zip(w)
                    .position(|(a, b)| a != b)
                    .unwrap_or(g.len().min(w.len()));
                out.push(format!(
                    "series {l}: {} samples, want {}; first difference at {at}: {:?} vs {:?}",
                    g.len(),
                    w.len(),
                    g.get(at),
                    w.get(at)
                ));
            }
            Some(_) => {}
        }
    }
    out.extend(
        got.keys()
            .filter(|l| !want.contains_key(*l))
            .map(|l| format!("unexpected series {l}")),
    );
    out.truncate(10);
    out.join("\n")
}

#[test]
fn promtool_reads_every_sample_of_a_heddle_block() {
    if prometheus_tool("PROMTOOL_BIN", "promtool", "blocks").is_none() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    std::fs::create_dir_all(data.join("wal")).expect("wal dir");
    let want = workload();
    let meta = BlockMeta::new(new_ulid(), BLOCK_START, BLOCK_START + BLOCK_RANGE, Some("tenant-a"));
    let mut w = BlockWriter::new(&data, meta).expect("block writer");
    for (labels, samples) in &want {
        w.add_series(labels, &chunks_of(samples)).expect("add series");
    }
    let meta = w.finish().expect("finish block");
    let samples: usize = want.values().map(Vec::len).sum();
    assert_eq!(meta.stats.num_samples, samples as u64);
    assert_eq!(meta.stats.num_series, SERIES as u64);

    let block = data.join(&meta.ulid);
    let size = |p: &Path| std::fs::metadata(p).expect("size").len();
    let chunk_bytes: u64 = std::fs::read_dir(block.join("chunks"))
        .expect("chunks dir")
        .map(|e| size(&e.expect("entry").path()))
        .sum();
    let index_bytes = size(&block.join("index"));
    eprintln!(
        "block {}: {samples} samples, {} chunks, index {index_bytes} B + chunks {chunk_bytes} B = {:.3} bytes/sample",
        meta.ulid,
        meta.stats.num_chunks,
        (index_bytes + chunk_bytes) as f64 / samples as f64
    );

    let data_arg = data.to_str().expect("utf-8 path");
    let analyze = promtool(&["tsdb", "analyze", data_arg, &meta.ulid]);
    assert!(
        analyze.contains(&format!("Block ID: {}", meta.ulid)),
        "analyze output:\n{analyze}"
    );
    assert!(
        analyze.contains(&format!("Series: {SERIES}")),
        "analyze output:\n{analyze}"
    );
    assert!(analyze.contains("Label names: 4"), "analyze output:\n{analyze}");

    let dump = parse_dump(&promtool(&["tsdb", "dump", data_arg])).expect("promtool dump output");
    let diff = differences(&dump, &want);
    assert!(
        diff.is_empty(),
        "promtool's dump differs from what was written:\n{diff}"
    );

    // heddle's own reader agrees.
    let (read, blocks) = read_blocks(&data);
    assert_eq!(blocks, 1);
    let diff = differences(&read, &want);
    assert!(diff.is_empty(), "BlockReader differs from what was written:\n{diff}");
}

#[test]
fn heddle_reads_every_sample_of_a_prometheus_block() {
    if prometheus_tool("PROMTOOL_BIN", "promtool", "blocks").is_none() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    // 5 hours of data: promtool cuts it into several 2-hour blocks.
    let start = BLOCK_START;
    let end = start + 5 * 3_600_000;
    let mut want = Samples::new();
    let mut text = String::new();
    for m in 0..3 {
        let name = format!("om_metric_{m}");
        text.push_str(&format!("# TYPE {name} gauge\n"));
        for s in 0..8 {
            let instance = format!("i-{s}");
            let labels =
                Labels::from_unsorted([("__name__", name.as_str()), ("instance", instance.as_str())]).expect("labels");
            let samples = want.entry(labels).or_default();
            let mut t = start + s * 1000;
            let mut k = 0u64;
            while t < end {
                let r = splitmix64(((m * 100 + s) as u64) << 32 | k);
                let v = match s % 3 {
                    0 => k as f64,
                    1 => (r % 1_000_000) as f64 / 1000.0 - 400.0,
                    _ => f64::from_bits(r >> 12 | 0x3ff0_0000_0000_0000),
                };
                text.push_str(&format!(
                    "{name}{{instance=\"{instance}\"}} {v} {}.{:03}\n",
                    t / 1000,
                    t % 1000
                ));
                samples.push((t, v.to_bits()));
                k += 1;
                t += 30_000 + (r % 5) as i64;
            }
        }
    }
    text.push_str("# EOF\n");
    let input = tmp.path().join("input.om");
    std::fs::write(&input, &text).expect("write input");
    let out = tmp.path().join("blocks");
    std::fs::create_dir_all(&out).expect("out dir");
    promtool(&[
        "tsdb",
        "create-blocks-from",
        "openmetrics",
        input.to_str().expect("utf-8 path"),
        out.to_str().expect("utf-8 path"),
    ]);
    let (got, blocks) = read_blocks(&out);
    assert!(blocks >= 3, "promtool wrote {blocks} blocks for 5 hours");
    let diff = differences(&got, &want);
    assert!(
        diff.is_empty(),
        "BlockReader differs from the OpenMetrics input:\n{diff}"
    );
}
