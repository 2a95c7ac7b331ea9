//! Native histograms through the querier: fake ingesters answer with integer and float histogram chunks (and a
//! series that switches from floats to histograms); remote read returns them in both response types and PromQL
//! reads them, replicas merged.

use crate::QuerierConfig;
use crate::tests::{decode_samples_response, harness, label_string, matcher, query, read_request, send};
use heddle_model::{CounterResetHint, FloatHistogram, Histogram, Labels, Sample, Span};
use heddle_proto::IngesterClient;
use heddle_proto::prometheus::histogram::{Count, ResetHint, ZeroCount};
use heddle_proto::prometheus::{Chunk, ChunkedReadResponse, chunk, label_matcher::Type, read_request::ResponseType};
use heddle_proto::testing::FakeIngester;
use heddle_testkit::codec::decode_chunked_frames;
use heddle_testkit::histogram::{decode_float_histogram_chunk, decode_histogram_chunk, growing_counter};
use heddle_testkit::xor::decode_xor_chunk;
use heddle_tsdb::chunk_samples::{ChunkSample, ChunkValue, encode_chunks};
use std::sync::Arc;

/// A counter histogram growing with `k`; a bucket appears at k = 30, so chunks get recoded.
fn histogram(k: u64) -> Histogram {
    growing_counter(k, 30)
}

/// Sample `k` (at t = 10 k) of a series: `ints` integer histograms, `floats` float histograms, `switching`
/// floats until k = 50, integer histograms after.
fn sample(name: &str, k: usize) -> ChunkSample {
    let value = match name {
        "ints" => ChunkValue::Histogram(histogram(k as u64)),
        "floats" => ChunkValue::FloatHistogram(histogram(k as u64 + 7).to_float()),
        _ if k < 50 => ChunkValue::Float(k as f64 * 0.5),
        _ => ChunkValue::Histogram(histogram(k as u64)),
    };
    ChunkSample {
        t: k as i64 * 10,
        value,
    }
}

const NAMES: [&str; 3] = ["floats", "ints", "switching"];

/// An ingester holding every series with the samples `keep` lets through, cut every `per_chunk`.
fn replica(keep: impl Fn(usize) -> bool, per_chunk: usize) -> Arc<dyn IngesterClient> {
    let mut fake = FakeIngester::new();
    for name in NAMES {
        let samples: Vec<ChunkSample> = (0..200).filter(|k| keep(*k)).map(|k| sample(name, k)).collect();
        let chunks = encode_chunks(&samples, per_chunk)
            .unwrap()
            .iter()
            .map(crate::convert::chunk_to_proto)
            .collect();
        fake = fake.with_series(Labels::from_sorted([("__name__", name), ("job", "h")]).unwrap(), chunks);
    }
    Arc::new(fake)
}

/// Three replicas: identical, cut differently, and one missing samples.
fn replicas() -> Vec<Arc<dyn IngesterClient>> {
    vec![
        replica(|_| true, 120),
        replica(|_| true, 120),
        replica(|k| k % 3 != 0, 45),
    ]
}

/// A value with its empty buckets dropped and its hint cleared, so values compare whatever chunk layout held
/// them.
fn normal(v: ChunkValue) -> ChunkValue {
    match v {
        ChunkValue::Histogram(mut h) => {
            h.compact(0);
            h.counter_reset_hint = CounterResetHint::Unknown;
            ChunkValue::Histogram(h)
        }
        ChunkValue::FloatHistogram(mut h) => {
            h.compact(0);
            h.counter_reset_hint = CounterResetHint::Unknown;
            ChunkValue::FloatHistogram(h)
        }
        f => f,
    }
}

/// What series `name` holds in `[start, end]`, normalized.
fn want(name: &str, start: i64, end: i64) -> Vec<(i64, ChunkValue)> {
    (0..200)
        .map(|k| sample(name, k))
        .filter(|s| s.t >= start && s.t <= end)
        .map(|s| (s.t, normal(s.value)))
        .collect()
}

fn spans(s: &[heddle_proto::prometheus::BucketSpan]) -> Vec<Span> {
    s.iter().map(|s| Span::new(s.offset, s.length)).collect()
}

/// A remote-read histogram back as a model value; its kind from which count it carries.
fn from_proto(h: &heddle_proto::prometheus::Histogram) -> ChunkValue {
    match (h.count, h.zero_count) {
        (Some(Count::CountInt(count)), Some(ZeroCount::ZeroCountInt(zero_count))) => ChunkValue::Histogram(Histogram {
            schema: h.schema,
            zero_threshold: h.zero_threshold,
            zero_count,
            count,
            sum: h.sum,
            positive_spans: spans(&h.positive_spans),
            positive_buckets: h.positive_deltas.clone(),
            negative_spans: spans(&h.negative_spans),
            negative_buckets: h.negative_deltas.clone(),
            ..Histogram::default()
        }),
        (Some(Count::CountFloat(count)), Some(ZeroCount::ZeroCountFloat(zero_count))) => {
            ChunkValue::FloatHistogram(FloatHistogram {
                schema: h.schema,
                zero_threshold: h.zero_threshold,
                zero_count,
                count,
                sum: h.sum,
                positive_spans: spans(&h.positive_spans),
                positive_buckets: h.positive_counts.clone(),
                negative_spans: spans(&h.negative_spans),
                negative_buckets: h.negative_counts.clone(),
                ..FloatHistogram::default()
            })
        }
        other => panic!("counts of mixed kinds: {other:?}"),
    }
}

#[tokio::test]
async fn remote_read_samples_carry_histograms_once_per_timestamp() {
    let h = harness(QuerierConfig::default(), replicas(), 0);
    let (start, end) = (105, 1900);
    let q = query(start, end, vec![matcher(Type::Eq, "job", "h")]);
    let resp = decode_samples_response(&send(&h.app, read_request(vec![q], &[ResponseType::Samples])).await);
    let series = &resp.results[0].timeseries;
    let names: Vec<String> = series.iter().map(|s| label_string(&s.labels)).collect();
    assert_eq!(
        names,
        [
            "__name__=floats,job=h",
            "__name__=ints,job=h",
            "__name__=switching,job=h"
        ]
    );
    for (s, name) in series.iter().zip(NAMES) {
        let mut got: Vec<(i64, ChunkValue)> = s
            .samples
            .iter()
            .map(|x| (x.timestamp, ChunkValue::Float(x.value)))
            .collect();
        got.extend(s.histograms.iter().map(|x| (x.timestamp, normal(from_proto(x)))));
        got.sort_by_key(|x| x.0);
        assert_eq!(got, want(name, start, end), "{name}");
        // Hints as the chunks give them: unknown at a chunk's first sample, "no reset" after it.
        assert!(
            s.histograms
                .iter()
                .all(|x| [ResetHint::Unknown as i32, ResetHint::No as i32].contains(&x.reset_hint)),
            "{name}"
        );
        assert!(
            s.histograms.iter().any(|x| x.reset_hint == ResetHint::No as i32),
            "{name}"
        );
    }
    assert!(
        series[0]
            .histograms
            .iter()
            .all(|x| matches!(x.count, Some(Count::CountFloat(_))))
    );
    assert!(
        series[1]
            .histograms
            .iter()
            .all(|x| matches!(x.count, Some(Count::CountInt(_))))
    );
    assert_eq!(
        (series[2].samples.len(), series[2].histograms.len()),
        (50 - 11, 191 - 50)
    );
}

#[tokio::test]
async fn remote_read_streams_histogram_chunks_typed_by_encoding() {
    let cfg = QuerierConfig {
        max_bytes_in_frame: 2048,
        ..Default::default()
    };
    let h = harness(cfg, replicas(), 0);
    let (start, end) = (0, 1990);
    let q = query(start, end, vec![matcher(Type::Eq, "job", "h")]);
    let a = send(&h.app, read_request(vec![q], &[ResponseType::StreamedXorChunks])).await;
    let frames: Vec<ChunkedReadResponse> = decode_chunked_frames(&a.body).unwrap();
    let mut per_series: Vec<(String, Vec<Chunk>)> = Vec::new();
    for f in &frames {
        assert!(prost::Message::encoded_len(f) <= 2048);
        let s = &f.chunked_series[0];
        let name = label_string(&s.labels);
        match per_series.last_mut() {
            Some((n, acc)) if *n == name => acc.extend(s.chunks.iter().cloned()),
            _ => per_series.push((name, s.chunks.clone())),
        }
    }
    assert_eq!(per_series.len(), 3);
    for ((_, chunks), name) in per_series.iter().zip(NAMES) {
        // Read with the test kit's own decoders, by the type each chunk declares.
        let mut got: Vec<(i64, ChunkValue)> = Vec::new();
        for c in chunks {
            let first = got.len();
            match chunk::Encoding::try_from(c.r#type).unwrap() {
                chunk::Encoding::Xor => got.extend(
                    decode_xor_chunk(&c.data)
                        .unwrap()
                        .into_iter()
                        .map(|s: Sample| (s.t, ChunkValue::Float(s.v))),
                ),
                chunk::Encoding::Histogram => got.extend(
                    decode_histogram_chunk(&c.data)
                        .unwrap()
                        .into_iter()
                        .map(|(t, h)| (t, normal(ChunkValue::Histogram(h)))),
                ),
                chunk::Encoding::FloatHistogram => got.extend(
                    decode_float_histogram_chunk(&c.data)
                        .unwrap()
                        .into_iter()
                        .map(|(t, h)| (t, normal(ChunkValue::FloatHistogram(h)))),
                ),
                chunk::Encoding::Unknown => panic!("{name}: a chunk of unknown type"),
            }
            assert_eq!(
                (c.min_time_ms, c.max_time_ms),
                (got[first].0, got[got.len() - 1].0),
                "{name}"
            );
        }
        assert_eq!(got, want(name, start, end), "{name}");
        let types: Vec<i32> = chunks.iter().map(|c| c.r#type).collect();
        let histogram_type = if name == "floats" {
            chunk::Encoding::FloatHistogram
        } else {
            chunk::Encoding::Histogram
        };
        if name == "switching" {
            assert_eq!(types[0], chunk::Encoding::Xor as i32);
            assert!(types[1..].iter().all(|t| *t == histogram_type as i32), "{types:?}");
        } else {
            assert!(types.iter().all(|t| *t == histogram_type as i32), "{name}: {types:?}");
        }
    }
}

#[tokio::test]
async fn promql_reads_histograms_from_the_chunks() {
    // Replicas cut differently: the engine gets each series' merged samples, histograms beside floats.
    let h = harness(QuerierConfig::default(), replicas(), 0);
    let params = form_urlencoded::Serializer::new(String::new())
        .extend_pairs([("query", r#"{job="h"}"#), ("time", "1.99")])
        .finish();
    let a = send(&h.app, crate::tests::get(&format!("/prometheus/api/v1/query?{params}"))).await;
    let body = crate::tests::json(&a);
    assert_eq!(body["status"], "success", "{body}");
    // At t = 1990 every series' newest sample is the histogram of k = 199.
    let result = body["data"]["result"].as_array().unwrap();
    assert_eq!(result.len(), NAMES.len(), "{body}");
    for r in result {
        let name = r["metric"]["__name__"].as_str().unwrap();
        let (count, sum) = match sample(name, 199).value {
            ChunkValue::Histogram(h) => (h.count as f64, h.sum),
            ChunkValue::FloatHistogram(h) => (h.count, h.sum),
            ChunkValue::Float(_) => panic!("{name}: not a histogram at k = 199"),
        };
        let point = &r["histogram"];
        assert_eq!(point[0].as_f64(), Some(1.99), "{name}: {r}");
        let num = |v: &serde_json::Value| v.as_str().unwrap().parse::<f64>().unwrap();
        assert_eq!(
            (num(&point[1]["count"]), num(&point[1]["sum"])),
            (count, sum),
            "{name}: {r}"
        );
        assert!(r.get("value").is_none(), "{name}: a histogram, not a float: {r}");
    }
}

/// A histogram counts by its size against `querier.max_samples_per_query`, before it is decoded: 100
/// histograms of 1,000 buckets weigh 100 x 511 samples (Prometheus 3's count: 168 bytes plus 8 per bucket and
/// span, one sample per 16), over a limit of 50,000 that 100 samples by count would pass, in every response
/// type and in PromQL; under a limit of 60,000 the same reads succeed.
#[tokio::test]
async fn histograms_count_by_size_against_the_sample_limit() {
    use heddle_model::histogram::deltas_from_absolute;
    let wide = |k: u64| Histogram {
        schema: 8,
        count: 1000 * k,
        sum: k as f64,
        positive_spans: vec![Span::new(0, 1000)],
        positive_buckets: deltas_from_absolute(&vec![k as i64; 1000]),
        ..Histogram::default()
    };
    assert_eq!(crate::chunks::histogram_weight(wide(1).size()), 511);
    assert_eq!(
        crate::chunks::histogram_weight(wide(1).size()),
        (wide(1).to_float().size_bytes() + 8) / 16,
        "as heddle_promql counts it"
    );
    let samples: Vec<ChunkSample> = (1..=100)
        .map(|k| ChunkSample {
            t: k as i64 * 10,
            value: ChunkValue::Histogram(wide(k)),
        })
        .collect();
    let chunks: Vec<Chunk> = encode_chunks(&samples, 120)
        .unwrap()
        .iter()
        .map(crate::convert::chunk_to_proto)
        .collect();
    let ingester = || -> Arc<dyn IngesterClient> {
        Arc::new(FakeIngester::new().with_series(
            Labels::from_sorted([("__name__", "wide"), ("job", "h")]).unwrap(),
            chunks.clone(),
        ))
    };
    let promql = || {
        let params = form_urlencoded::Serializer::new(String::new())
            .extend_pairs([("query", "wide[1m]"), ("time", "1.0")])
            .finish();
        crate::tests::get(&format!("/prometheus/api/v1/query?{params}"))
    };
    let q = || query(0, 1000, vec![matcher(Type::Eq, "__name__", "wide")]);
    for (limit, want) in [(50_000, 422), (60_000, 200)] {
        let cfg = QuerierConfig {
            max_samples_per_query: limit,
            ..QuerierConfig::default()
        };
        let h = harness(cfg, vec![ingester()], 0);
        for (name, req) in [
            ("samples", read_request(vec![q()], &[ResponseType::Samples])),
            ("chunks", read_request(vec![q()], &[ResponseType::StreamedXorChunks])),
            ("promql", promql()),
        ] {
            let a = send(&h.app, req).await;
            let body = String::from_utf8_lossy(&a.body).into_owned();
            assert_eq!(a.status.as_u16(), want, "{name} under {limit}: {body}");
            if want == 422 {
                assert!(
                    body.contains("err-heddle-max-samples-per-query")
                        && body.contains("51100 fetched so far and the limit is 50000"),
                    "{name}: {body}"
                );
            }
        }
    }
}
