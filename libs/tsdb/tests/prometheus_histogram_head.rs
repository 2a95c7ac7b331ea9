//! A head directory Prometheus wrote with native histograms opens in heddle's head with every histogram it
//! was sent: its WAL (Series and HistogramSamples records) and its `chunks_head/` file (completed histogram
//! chunks, whose samples the replay then skips), as after Prometheus was stopped and heddle started on its
//! directory.
//!
//! The fixtures (`tests/fixtures/prometheus-histograms/`, made by its `generate.py`) are the WAL segment and
//! `chunks_head` file of one Prometheus 2.42 run that received three histogram series over remote write;
//! `pushed.json` holds every histogram as it was sent.

use heddle_model::{CounterResetHint, Histogram};
use heddle_tsdb::chunkenc::{Encoding, HistogramIter};
use heddle_tsdb::{Head, HeadOptions};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use support::{meaning, pushed_series};

mod support;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/prometheus-histograms")
        .join(name)
}

#[test]
fn a_prometheus_head_directory_replays_every_pushed_histogram() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("wal")).unwrap();
    std::fs::create_dir_all(dir.path().join("chunks_head")).unwrap();
    std::fs::copy(fixture("wal-00000000"), dir.path().join("wal/00000000")).unwrap();
    std::fs::copy(fixture("chunks_head-000001"), dir.path().join("chunks_head/000001")).unwrap();
    let (head, stats) = Head::open(dir.path(), HeadOptions::default()).unwrap();
    assert_eq!(stats.undecodable_records, 0, "{stats:?}");
    assert!(
        stats.mmapped_chunks >= 3,
        "Prometheus' histogram chunks are mapped: {stats:?}"
    );
    assert!(stats.samples_in_mmapped_chunks > 0, "{stats:?}");
    assert!(
        stats.histogram_samples > 0,
        "the open chunks' samples come from the WAL: {stats:?}"
    );
    assert_eq!(stats.orphan_mmapped_chunks, 0, "{stats:?}");

    let pushed: Value = serde_json::from_slice(&std::fs::read(fixture("pushed.json")).unwrap()).unwrap();
    let pushed: BTreeMap<String, Vec<(i64, Histogram)>> = pushed_series(&pushed);
    let series = head.select(i64::MIN, i64::MAX, &[]);
    assert_eq!(series.len(), pushed.len(), "every pushed series");
    for s in series {
        let name = s.labels.get("series").unwrap_or_default().to_owned();
        let mut got = Vec::new();
        for c in &s.chunks {
            assert_eq!(c.encoding, Encoding::Histogram, "{name}");
            got.extend(HistogramIter::new(&c.data));
        }
        let want = &pushed[&name];
        assert_eq!(got.len(), want.len(), "{name}: samples");
        for (i, ((gt, g), (wt, w))) in got.iter().zip(want).enumerate() {
            assert_eq!(gt, wt, "{name} sample {i}: timestamp");
            assert_eq!(meaning(g), meaning(w), "{name} sample {i} at {gt}");
            if w.counter_reset_hint == CounterResetHint::Gauge {
                assert_eq!(g.counter_reset_hint, CounterResetHint::Gauge, "{name} sample {i}");
            }
        }
    }
}
