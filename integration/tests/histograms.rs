//! Native histograms from a bucket block through remote read: a `heddle --target=all` process reads a block
//! holding integer and float histogram chunks (and a series switching from floats to histograms) from its
//! bucket, and answers remote read with every sample, in both response types: `SAMPLES` with
//! `TimeSeries.histograms`, `STREAMED_XOR_CHUNKS` with chunks typed by their encoding (decoded here with the
//! test kit's own readers).
//!
//! Then Prometheus 2.42 (`--enable-feature=native-histograms`), with heddle as its only `remote_read` source,
//! reads the same series. Its remote-read client drops native histograms (a series holding only histograms
//! comes back empty, without an error; later releases read them), so what it can judge is that an answer
//! carrying histograms is read without error and the float samples beside them come through exactly.
//!
//! Last, histograms pushed with remote write come back through remote read from the ingester's head.
//!
//! Needs `/usr/bin/prometheus` (Debian package `prometheus`; `PROMETHEUS_BIN` overrides the path). Without it the
//! test is skipped with a message, unless `CI` is set.

use heddle_bucket::{Bucket, BucketConfig, FilesystemConfig};
use heddle_model::histogram::deltas_from_absolute;
use heddle_model::{FloatHistogram, Histogram, HistogramSample, HistogramValue, Labels, Span, TenantId};
use heddle_proto::prometheus::histogram::Count;
use heddle_proto::prometheus::{ReadRequest, chunk, read_request::ResponseType};
use heddle_testkit::codec::{decode_chunked_frames, decode_read_response, encode_read_request};
use heddle_testkit::histogram::{decode_float_histogram_chunk, decode_histogram_chunk};
use heddle_testkit::xor::decode_xor_chunk;
use heddle_testkit::{
    HeddleOptions, HeddleProcess, ManagedProcess, eq, free_port, http_client, now_ms, prometheus_tool, push, query,
};
use heddle_tsdb::block::{BlockMeta, BlockWriter, new_ulid};
use heddle_tsdb::chunk_samples::{ChunkSample, ChunkValue, encode_chunks};
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

const RANGE: i64 = 2 * 3600 * 1000;
const STEP: i64 = 15_000;
const SAMPLES: i64 = 200;

/// A counter histogram growing with `k`; a bucket appears at k = 60, so chunks get recoded.
fn histogram(k: u64) -> Histogram {
    let mut buckets = vec![k as i64 + 2, 3 * k as i64];
    let mut spans = vec![Span::new(-2, 2)];
    if k >= 60 {
        buckets.push(k as i64 - 59);
        spans.push(Span::new(4, 1));
    }
    Histogram {
        schema: 0,
        zero_threshold: 2f64.powi(-128),
        zero_count: k / 5,
        count: k / 5 + buckets.iter().sum::<i64>() as u64,
        sum: k as f64 * 3.5 + 0.25,
        positive_spans: spans,
        positive_buckets: deltas_from_absolute(&buckets),
        ..Histogram::default()
    }
}

/// Sample `k` of series `name` at `start + k * STEP`: integer histograms (`hist_ints`), float histograms
/// (`hist_floats`), or floats until k = 80 then integer histograms (`hist_switching`).
fn sample(name: &str, start: i64, k: i64) -> ChunkSample {
    let value = match name {
        "hist_ints" => ChunkValue::Histogram(histogram(k as u64)),
        "hist_floats" => ChunkValue::FloatHistogram(histogram(k as u64 * 2 + 1).to_float()),
        _ if k < 80 => ChunkValue::Float(k as f64 * 0.75),
        _ => ChunkValue::Histogram(histogram(k as u64)),
    };
    ChunkSample {
        t: start + k * STEP,
        value,
    }
}

const NAMES: [&str; 3] = ["hist_floats", "hist_ints", "hist_switching"];

fn labels(name: &str) -> Labels {
    Labels::from_sorted([("__name__", name), ("job", "hist")]).unwrap()
}

/// One point as Prometheus' API answers it: a float's bits, or a histogram's count and sum bits.
#[derive(Debug, PartialEq)]
enum Point {
    Float(u64),
    Histogram(f64, u64),
}

fn expected(name: &str, start: i64) -> Vec<(i64, Point)> {
    (0..SAMPLES)
        .map(|k| {
            let s = sample(name, start, k);
            let p = match s.value {
                ChunkValue::Float(v) => Point::Float(v.to_bits()),
                ChunkValue::Histogram(h) => Point::Histogram(h.count as f64, h.sum.to_bits()),
                ChunkValue::FloatHistogram(FloatHistogram { count, sum, .. }) => Point::Histogram(count, sum.to_bits()),
            };
            (s.t, p)
        })
        .collect()
}

fn num(v: &Value) -> f64 {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a number string: {v}"))
}

fn millis(v: &Value) -> i64 {
    (v.as_f64().unwrap_or_else(|| panic!("not a timestamp: {v}")) * 1000.0).round() as i64
}

/// Points of a one-series `query_range` answer, floats and histograms merged by time.
fn points(answer: &Value) -> Vec<(i64, Point)> {
    let mut out = Vec::new();
    for s in answer["data"]["result"].as_array().into_iter().flatten() {
        for v in s["values"].as_array().into_iter().flatten() {
            out.push((millis(&v[0]), Point::Float(num(&v[1]).to_bits())));
        }
        for h in s["histograms"].as_array().into_iter().flatten() {
            out.push((
                millis(&h[0]),
                Point::Histogram(num(&h[1]["count"]), num(&h[1]["sum"]).to_bits()),
            ));
        }
    }
    out.sort_by_key(|p| p.0);
    out
}

/// Heddle's remote-read answer for series `name` over `[start, end]` in `mode`, as points.
async fn read(
    http: &reqwest::Client,
    heddle: &HeddleProcess,
    mode: ResponseType,
    name: &str,
    start: i64,
    end: i64,
) -> Vec<(i64, Point)> {
    let req = ReadRequest {
        queries: vec![query(start, end, vec![eq("__name__", name)])],
        accepted_response_types: vec![mode as i32],
    };
    let resp = http
        .post(heddle.read_url())
        .header("Content-Encoding", "snappy")
        .header("Content-Type", "application/x-protobuf")
        .header("X-Prometheus-Remote-Read-Version", "0.1.0")
        .body(encode_read_request(&req).unwrap())
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{name} {mode:?}: {}", resp.status());
    let body = resp.bytes().await.unwrap();
    let mut out = Vec::new();
    match mode {
        ResponseType::Samples => {
            for ts in &decode_read_response(&body).unwrap().results[0].timeseries {
                out.extend(
                    ts.samples
                        .iter()
                        .map(|s| (s.timestamp, Point::Float(s.value.to_bits()))),
                );
                out.extend(ts.histograms.iter().map(|h| {
                    let count = match h.count {
                        Some(Count::CountInt(c)) => c as f64,
                        Some(Count::CountFloat(c)) => c,
                        None => panic!("{name}: a histogram without count"),
                    };
                    (h.timestamp, Point::Histogram(count, h.sum.to_bits()))
                }));
            }
        }
        ResponseType::StreamedXorChunks => {
            for frame in decode_chunked_frames(&body).unwrap() {
                for c in frame.chunked_series.iter().flat_map(|s| &s.chunks) {
                    match chunk::Encoding::try_from(c.r#type).unwrap() {
                        chunk::Encoding::Xor => out.extend(
                            decode_xor_chunk(&c.data)
                                .unwrap()
                                .into_iter()
                                .map(|s| (s.t, Point::Float(s.v.to_bits()))),
                        ),
                        chunk::Encoding::Histogram => out.extend(
                            decode_histogram_chunk(&c.data)
                                .unwrap()
                                .into_iter()
                                .map(|(t, h)| (t, Point::Histogram(h.count as f64, h.sum.to_bits()))),
                        ),
                        chunk::Encoding::FloatHistogram => out.extend(
                            decode_float_histogram_chunk(&c.data)
                                .unwrap()
                                .into_iter()
                                .map(|(t, h)| (t, Point::Histogram(h.count, h.sum.to_bits()))),
                        ),
                        chunk::Encoding::Unknown => panic!("{name}: a chunk of unknown type"),
                    }
                }
            }
        }
    }
    out.sort_by_key(|p| p.0);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histograms_of_a_bucket_block_through_remote_read() {
    let Some(bin) = prometheus_tool("PROMETHEUS_BIN", "prometheus", "histograms") else {
        return;
    };
    // A 2 h range of the past that only the bucket answers (query-store-after 1 h).
    let block_start = (now_ms() - 3 * RANGE).div_euclid(RANGE) * RANGE;
    let start = block_start + 60_000;
    let heddle = HeddleProcess::start(HeddleOptions {
        args: [
            "--blocks-storage.bucket-store.sync-interval=200ms",
            "--querier.query-store-after=1h",
            "--compactor.first-level-compaction-wait-period=24h",
        ]
        .map(String::from)
        .to_vec(),
        ..HeddleOptions::default()
    })
    .expect("heddle starts");

    let scratch = tempfile::tempdir().unwrap();
    let meta = BlockMeta::new(new_ulid(), block_start, block_start + RANGE, Some("anonymous"));
    let mut w = BlockWriter::new(scratch.path(), meta).unwrap();
    for name in NAMES {
        let samples: Vec<ChunkSample> = (0..SAMPLES).map(|k| sample(name, start, k)).collect();
        w.add_series(&labels(name), &encode_chunks(&samples, 120).unwrap())
            .unwrap();
    }
    let meta = w.finish().unwrap();
    let bucket = Bucket::new(
        &BucketConfig {
            filesystem: FilesystemConfig {
                dir: heddle.root_dir().join("blocks"),
            },
            ..BucketConfig::default()
        },
        &mut prometheus_client::registry::Registry::default(),
    )
    .unwrap();
    bucket
        .upload_block(&TenantId::new("anonymous").unwrap(), &scratch.path().join(&meta.ulid))
        .await
        .unwrap();

    let http = http_client(Duration::from_secs(30)).unwrap();
    let end = start + (SAMPLES - 1) * STEP;
    // Until the querier has loaded the block (bounded by its 200 ms sync): then every sample, in both modes.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while read(&http, &heddle, ResponseType::Samples, "hist_ints", start, end)
        .await
        .is_empty()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the querier never read the bucket block"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for name in NAMES {
        for mode in [ResponseType::Samples, ResponseType::StreamedXorChunks] {
            let got = read(&http, &heddle, mode, name, start, end).await;
            assert_eq!(got, expected(name, start), "{name}: remote read {mode:?}");
        }
    }

    let dir = tempfile::tempdir().unwrap();
    let port = free_port().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1h\nremote_read:\n  - url: {}\n    read_recent: true\n",
            heddle.read_url()
        ),
    )
    .unwrap();
    let mut cmd = Command::new(&bin);
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--enable-feature=native-histograms");
    let mut prometheus = ManagedProcess::spawn("prometheus", cmd, dir.path()).expect("spawn prometheus");
    prometheus
        .wait_http_ok(([127, 0, 0, 1], port).into(), "/-/ready", Duration::from_secs(60))
        .expect("prometheus ready");

    // The floats of the switching series, one step per sample, up to its last float (after it, the lookback
    // would repeat that float where Prometheus 2.42 drops the histograms).
    let floats: Vec<(i64, Point)> = expected("hist_switching", start)
        .into_iter()
        .filter(|p| matches!(p.1, Point::Float(_)))
        .collect();
    let last_float = floats.last().unwrap().0;
    let url = format!(
        "http://127.0.0.1:{port}/api/v1/query_range?query=hist_switching&start={}&end={}&step=15",
        start / 1000,
        last_float / 1000
    );
    let resp = http.get(url).send().await.unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    let answer: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    assert_eq!(answer["status"], "success", "{answer}");
    assert_eq!(
        points(&answer),
        floats,
        "the switching series' floats through Prometheus' remote read"
    );
}

/// Histograms pushed with remote write come back through remote read from the ingester's head, in both
/// response types: the head's chunks of integer histograms, typed as such, and `TimeSeries.histograms`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushed_histograms_come_back_through_remote_read() {
    let heddle = tokio::task::spawn_blocking(|| HeddleProcess::start(HeddleOptions::default()).expect("heddle starts"))
        .await
        .expect("join");
    let http = http_client(Duration::from_secs(30)).unwrap();
    let start = (now_ms() - 55 * 60_000).div_euclid(1000) * 1000;
    let samples: Vec<ChunkSample> = (0..SAMPLES).map(|k| sample("hist_ints", start, k)).collect();
    let mut series = heddle_testkit::timeseries(&[("__name__", "hist_ints"), ("job", "hist")], &[]);
    series.histograms = samples
        .iter()
        .map(|s| {
            let ChunkValue::Histogram(h) = &s.value else {
                unreachable!("hist_ints holds integer histograms")
            };
            heddle_proto::histogram_to_proto(&HistogramSample {
                t: s.t,
                value: HistogramValue::Int(h.clone()),
            })
        })
        .collect();
    let req = heddle_proto::prometheus::WriteRequest {
        timeseries: vec![series],
        metadata: vec![],
    };
    let out = push(&http, &heddle.push_url(), None, &req).await.expect("push");
    assert!(out.is_success(), "{}: {}", out.status, out.body);
    let end = start + (SAMPLES - 1) * STEP;
    for mode in [ResponseType::Samples, ResponseType::StreamedXorChunks] {
        let got = read(&http, &heddle, mode, "hist_ints", start, end).await;
        assert_eq!(got, expected("hist_ints", start), "remote read {mode:?} of the head");
    }
}
