//! Native-histogram WAL records written by Prometheus itself decode to exactly the histograms it was sent, and
//! heddle's encoder, given what it decoded, writes each record back byte for byte.
//!
//! The fixtures (`tests/fixtures/prometheus-histograms/`, made by its `generate.py`) are the WAL segments of
//! the two Prometheus 2.42 runs whose head chunks `prometheus_histogram_chunks.rs` reads:
//! - `wal-00000000`: Series records and HistogramSamples (type 7) records of the three histogram series
//!   pushed over remote write; `pushed.json` holds every histogram as it was sent.
//! - `wal-float-00000000`: the rule input's HistogramSamples and the recording rule's FloatHistogramSamples
//!   (type 8) records.

use heddle_model::Histogram;
use heddle_tsdb::record::{self, Record, RefFloatHistogramSample, RefHistogramSample};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use support::pushed_series;

mod support;

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/prometheus-histograms")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every record of a WAL segment, as logged (decompressed).
fn records(segment: &[u8]) -> Vec<Vec<u8>> {
    let mut reader = heddle_wal::SegmentReader::new(0, std::io::Cursor::new(segment));
    let mut out = Vec::new();
    while let Some(r) = reader.next_record().expect("a readable segment") {
        out.push(r.data.to_vec());
    }
    out
}

/// What Prometheus logged: per series (its `series` label, or its metric name), the histogram samples in
/// order, and the float histogram samples; every histogram record is checked to re-encode to its own bytes.
#[derive(Default)]
struct Logged {
    histograms: BTreeMap<String, Vec<RefHistogramSample>>,
    floats: BTreeMap<String, Vec<RefFloatHistogramSample>>,
    records: [usize; 2],
}

fn logged(segment: &[u8]) -> Logged {
    let mut names: HashMap<u64, String> = HashMap::new();
    let mut out = Logged::default();
    for raw in records(segment) {
        match record::decode(&raw).unwrap_or_else(|e| panic!("record type {}: {e}", raw[0])) {
            Record::Series(series) => {
                for s in series {
                    let name = s.labels.get("series").unwrap_or(s.labels.get("__name__").unwrap_or(""));
                    names.insert(s.series_ref, name.to_owned());
                }
            }
            Record::Histograms(samples) => {
                let mut again = Vec::new();
                record::encode_histograms(&samples, &mut again);
                assert_eq!(
                    again,
                    vec![raw.clone()],
                    "a HistogramSamples record re-encodes to its bytes"
                );
                out.records[0] += 1;
                for s in samples {
                    out.histograms.entry(names[&s.series_ref].clone()).or_default().push(s);
                }
            }
            Record::FloatHistograms(samples) => {
                let mut again = Vec::new();
                record::encode_float_histograms(&samples, &mut again);
                assert_eq!(
                    again,
                    vec![raw.clone()],
                    "a FloatHistogramSamples record re-encodes to its bytes"
                );
                out.records[1] += 1;
                for s in samples {
                    out.floats.entry(names[&s.series_ref].clone()).or_default().push(s);
                }
            }
            _ => {}
        }
    }
    out
}

/// A histogram as comparable bits: the stale marker's sum is a NaN, which `==` would never match.
fn bits(t: i64, h: &Histogram) -> (i64, Histogram, u64, u64) {
    let plain = Histogram {
        sum: 0.0,
        zero_threshold: 0.0,
        ..h.clone()
    };
    (t, plain, h.sum.to_bits(), h.zero_threshold.to_bits())
}

#[test]
fn prometheus_histogram_records_decode_to_what_was_pushed() {
    let got = logged(&fixture("wal-00000000"));
    assert!(got.records[0] > 0, "the fixture has HistogramSamples records");
    let pushed: BTreeMap<String, Vec<(i64, Histogram)>> =
        pushed_series(&serde_json::from_slice(&fixture("pushed.json")).unwrap());
    assert_eq!(got.histograms.len(), pushed.len(), "every pushed series was logged");
    for (name, samples) in &pushed {
        let want: Vec<_> = samples.iter().map(|(t, h)| bits(*t, h)).collect();
        let logged: Vec<_> = got.histograms[name].iter().map(|s| bits(s.t, &s.h)).collect();
        assert_eq!(logged.len(), want.len(), "{name}: samples logged");
        for (i, (g, w)) in logged.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "{name}: sample {i}");
        }
    }
}

#[test]
fn prometheus_float_histogram_records_decode_and_re_encode() {
    let got = logged(&fixture("wal-float-00000000"));
    assert!(got.records[1] > 0, "the fixture has FloatHistogramSamples records");
    let rule = &got.floats["fixture:sum"];
    assert!(rule.len() > 10, "the rule's evaluations were logged: {}", rule.len());
    // The rule sums one integer series: each float count is a count that series had.
    let inputs: Vec<u64> = got.histograms["input"].iter().map(|s| s.h.count).collect();
    for s in rule {
        assert!(
            s.h.count.fract() == 0.0 && inputs.contains(&(s.h.count as u64)),
            "a rule output count {} is no input's",
            s.h.count
        );
    }
}
