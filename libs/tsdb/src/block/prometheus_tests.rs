//! Prometheus itself reads a block heddle wrote with native histogram chunks: Prometheus 2.42, started with
//! `--enable-feature=native-histograms` on a data directory holding only that block, answers a range selector
//! over its HTTP API with every float and histogram sample as written (count, sum, and every populated bucket
//! with its bounds). `promtool tsdb dump` of 2.42 cannot judge this: it prints float samples only, and stops
//! at a series' first histogram sample. Skipped only where Prometheus is not installed and CI is not set.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use heddle_model::{FloatHistogram, Labels, Span};
use serde_json::Value;

use super::histogram_tests::{series, write};
use crate::chunk_samples::ChunkValue;

/// Stops the process when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `GET path` on 127.0.0.1:`port` (HTTP/1.0, so the body ends with the connection): status and body.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(20))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let (head, body) = buf.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

/// A bucket as Prometheus' JSON lists it: boundary rule (0 open left, 1 open right, 3 closed), lower and upper
/// bound, count.
type Bucket = (u8, f64, f64, f64);

/// The populated buckets of `h`, ordered by bounds as Prometheus lists them: negative ones, the zero bucket,
/// positive ones. Bucket `i` of schema `s` is (2^((i-1)/2^s), 2^(i/2^s)], mirrored on the negative side.
fn buckets(h: &FloatHistogram) -> Vec<Bucket> {
    let upper = |i: i32| 2f64.powf(f64::from(i) * 2f64.powi(-h.schema));
    let indexed = |spans: &[Span], counts: &[f64]| -> Vec<(i32, f64)> {
        let mut out = Vec::new();
        let (mut idx, mut b) = (0i32, 0usize);
        for sp in spans {
            idx += sp.offset;
            for _ in 0..sp.length {
                out.push((idx, counts[b]));
                b += 1;
                idx += 1;
            }
        }
        out
    };
    let mut out: Vec<Bucket> = Vec::new();
    for (i, c) in indexed(&h.negative_spans, &h.negative_buckets) {
        out.push((1, -upper(i), -upper(i - 1), c));
    }
    out.push((3, -h.zero_threshold, h.zero_threshold, h.zero_count));
    for (i, c) in indexed(&h.positive_spans, &h.positive_buckets) {
        out.push((0, upper(i - 1), upper(i), c));
    }
    out.retain(|b| b.3 != 0.0);
    out.sort_by(|a, b| a.1.total_cmp(&b.1));
    out
}

fn num(v: &Value) -> f64 {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a number string: {v}"))
}

fn millis(v: &Value) -> i64 {
    (v.as_f64().unwrap_or_else(|| panic!("not a timestamp: {v}")) * 1000.0).round() as i64
}

/// What a series should read back as: floats (timestamp, value bits) and histograms (timestamp, count, sum
/// bits, buckets).
type Expected = (Vec<(i64, u64)>, Vec<(i64, f64, u64, Vec<Bucket>)>);

fn same_buckets(got: &[Bucket], want: &[Bucket]) -> bool {
    let close = |a: f64, b: f64| a == b || (a - b).abs() <= 1e-12 * a.abs().max(b.abs());
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| g.0 == w.0 && close(g.1, w.1) && close(g.2, w.2) && g.3 == w.3)
}

#[test]
fn prometheus_reads_every_histogram_sample_of_a_heddle_block() {
    if Command::new("prometheus").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "prometheus is required in CI");
        eprintln!("prometheus not installed: skipping");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let written = series();
    write(&data, &written);
    let config = dir.path().join("prometheus.yml");
    std::fs::write(&config, "global:\n  scrape_interval: 1h\n").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _prometheus = Running(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--enable-feature=native-histograms")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while get(port, "/-/ready").is_none_or(|(status, _)| status != 200) {
        assert!(Instant::now() < deadline, "prometheus did not get ready on port {port}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Each series' samples, one per step: the steps fall on its samples (every 15 s), and end at its last one.
    // (A range selector would list every raw sample, but Prometheus 2.42 answers one with every integer
    // histogram point equal to the last: its iterator reuses the histogram it returns.)
    let mut got: BTreeMap<Labels, Expected> = BTreeMap::new();
    for (labels, samples) in &written {
        let (first, last) = (samples[0].t, samples[samples.len() - 1].t);
        assert!(first % 1000 == 0 && last % 1000 == 0, "whole seconds");
        let name = labels.metric_name().unwrap();
        let path = format!(
            "/api/v1/query_range?query=%7B__name__%3D%22{name}%22%7D&start={}&end={}&step=15",
            first / 1000,
            last / 1000
        );
        let (status, body) = get(port, &path).unwrap();
        assert_eq!(status, 200, "{body}");
        let answer: Value = serde_json::from_str(&body).unwrap();
        let result = answer["data"]["result"].as_array().expect("a matrix");
        assert_eq!(result.len(), 1, "{labels}: {body}");
        let entry = got.entry(labels.clone()).or_default();
        for v in result[0]["values"].as_array().into_iter().flatten() {
            entry.0.push((millis(&v[0]), num(&v[1]).to_bits()));
        }
        for h in result[0]["histograms"].as_array().into_iter().flatten() {
            let buckets: Vec<Bucket> = h[1]["buckets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|b| (b[0].as_u64().unwrap() as u8, num(&b[1]), num(&b[2]), num(&b[3])))
                .collect();
            entry
                .1
                .push((millis(&h[0]), num(&h[1]["count"]), num(&h[1]["sum"]).to_bits(), buckets));
        }
    }
    let mut histograms = 0;
    assert_eq!(got.len(), written.len(), "series");
    for (labels, samples) in &written {
        let (floats, hists) = &got[labels];
        let want_floats: Vec<(i64, u64)> = samples
            .iter()
            .filter_map(|s| match s.value {
                ChunkValue::Float(v) => Some((s.t, v.to_bits())),
                _ => None,
            })
            .collect();
        assert_eq!(floats, &want_floats, "{labels}: float samples");
        let want: Vec<(i64, FloatHistogram)> = samples
            .iter()
            .filter_map(|s| match &s.value {
                ChunkValue::Histogram(h) => Some((s.t, h.to_float())),
                ChunkValue::FloatHistogram(h) => Some((s.t, h.clone())),
                ChunkValue::Float(_) => None,
            })
            .collect();
        assert_eq!(hists.len(), want.len(), "{labels}: histogram samples");
        for ((t, count, sum, b), (wt, wh)) in hists.iter().zip(&want) {
            assert_eq!(
                (*t, *count, *sum),
                (*wt, wh.count, wh.sum.to_bits()),
                "{labels} at {wt}"
            );
            assert!(
                same_buckets(b, &buckets(wh)),
                "{labels} at {wt}: buckets {b:?}, want {:?}",
                buckets(wh)
            );
        }
        histograms += hists.len();
    }
    assert_eq!(histograms, 300 + 130 + 80);
}
