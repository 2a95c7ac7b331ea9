//! Native histograms in the head: stored in Prometheus' histogram chunks beside float ones, judged like
//! floats, and back after a crash (WAL and `chunks_head/`), a graceful stop (snapshot) and a checkpoint.

use heddle_model::{
    CounterResetHint, FloatHistogram, Histogram, HistogramSample, HistogramValue, LabelRef, Sample, Span,
};

use super::*;
use crate::chunkenc::{Encoding, FloatHistogramIter, HistogramIter, XorIter};

/// Small segments and chunk ranges, so chunks are cut and records span segments.
fn opts() -> HeadOptions {
    HeadOptions {
        wal_segment_size: 64 * 1024,
        chunk_range_ms: 600_000,
        ..HeadOptions::default()
    }
}

/// A counter histogram at step `i` with `buckets` populated buckets (every bucket grows by its index + 1).
fn counter(i: u64, buckets: u32) -> Histogram {
    let counts: Vec<i64> = (0..buckets).map(|b| ((b as u64 + 1) * (i + 1)) as i64).collect();
    let zero_count = i;
    let count = counts.iter().sum::<i64>() as u64 + zero_count;
    Histogram {
        counter_reset_hint: CounterResetHint::Unknown,
        schema: 3,
        zero_threshold: 1e-128,
        zero_count,
        count,
        sum: i as f64 * 1.5,
        positive_spans: vec![Span::new(-(buckets as i32) / 2, buckets)],
        positive_buckets: heddle_model::histogram::deltas_from_absolute(&counts),
        ..Histogram::default()
    }
}

fn int(t: i64, h: Histogram) -> HistogramSample {
    HistogramSample {
        t,
        value: HistogramValue::Int(h),
    }
}

fn float(t: i64, h: FloatHistogram) -> HistogramSample {
    HistogramSample {
        t,
        value: HistogramValue::Float(h),
    }
}

fn labels(name: &str) -> Vec<LabelRef<'_>> {
    vec![LabelRef {
        name: "__name__",
        value: name,
    }]
}

/// One series' samples as the head serves them, in chunk order: floats as (t, value bits), histograms as
/// (t, value with its counter-reset hint cleared), with each chunk's encoding.
#[derive(Debug, PartialEq)]
enum Stored {
    Float(i64, u64),
    Hist(i64, HistogramValue),
}

fn stored(head: &Head, name: &str) -> (Vec<Encoding>, Vec<Stored>) {
    let m = heddle_model::Matcher::new(heddle_model::MatchType::Equal, "__name__", name).unwrap();
    let chunks: Vec<ChunkData> = head
        .select(i64::MIN, i64::MAX, &[m])
        .into_iter()
        .flat_map(|s| s.chunks)
        .collect();
    decoded(&chunks)
}

/// The encodings of `chunks` and their samples, as [`stored`] lists them.
fn decoded(chunks: &[ChunkData]) -> (Vec<Encoding>, Vec<Stored>) {
    let mut encodings = Vec::new();
    let mut out = Vec::new();
    for c in chunks {
        encodings.push(c.encoding);
        match c.encoding {
            Encoding::Xor => out.extend(XorIter::new(&c.data).map(|s| Stored::Float(s.t, s.v.to_bits()))),
            Encoding::Histogram => out.extend(HistogramIter::new(&c.data).map(|(t, mut h)| {
                h.counter_reset_hint = CounterResetHint::Unknown;
                Stored::Hist(t, HistogramValue::Int(h))
            })),
            Encoding::FloatHistogram => out.extend(FloatHistogramIter::new(&c.data).map(|(t, mut h)| {
                h.counter_reset_hint = CounterResetHint::Unknown;
                Stored::Hist(t, HistogramValue::Float(h))
            })),
            Encoding::None => panic!("a chunk without encoding"),
        }
    }
    (encodings, out)
}

fn want(samples: &[HistogramSample]) -> Vec<Stored> {
    samples.iter().map(|s| Stored::Hist(s.t, s.value.clone())).collect()
}

/// 300 samples 15 s apart (75 minutes, over several 10-minute chunk ranges) of an integer counter with 40
/// buckets, and of a float histogram series.
fn workload() -> (Vec<HistogramSample>, Vec<HistogramSample>) {
    let ints: Vec<HistogramSample> = (0..300).map(|i| int(i as i64 * 15_000, counter(i, 40))).collect();
    let floats: Vec<HistogramSample> = (0..300)
        .map(|i| float(i as i64 * 15_000, counter(i, 12).to_float()))
        .collect();
    (ints, floats)
}

fn push(head: &Head, ints: &[HistogramSample], floats: &[HistogramSample]) -> AppendOutcome {
    let (a, b) = (labels("ints"), labels("floats"));
    // In rounds of 10 samples, as a sender batches them.
    let mut total = AppendOutcome::default();
    for (ci, cf) in ints.chunks(10).zip(floats.chunks(10)) {
        let out = head
            .append(&[
                AppendSeries {
                    labels: &a,
                    samples: &[],
                    created: None,
                    histograms: ci,
                },
                AppendSeries {
                    labels: &b,
                    samples: &[],
                    created: None,
                    histograms: cf,
                },
            ])
            .unwrap();
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        total.histograms_appended += out.histograms_appended;
        total.series_created += out.series_created;
    }
    total
}

fn assert_all_there(head: &Head, ints: &[HistogramSample], floats: &[HistogramSample]) {
    let (enc, got) = stored(head, "ints");
    assert!(enc.iter().all(|e| *e == Encoding::Histogram), "{enc:?}");
    assert!(enc.len() > 1, "the chunk ranges cut the series into several chunks");
    assert_eq!(got, want(ints));
    let (enc, got) = stored(head, "floats");
    assert!(enc.iter().all(|e| *e == Encoding::FloatHistogram), "{enc:?}");
    assert_eq!(got, want(floats));
}

#[test]
fn histograms_are_stored_in_histogram_chunks_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = Head::open(dir.path(), opts()).unwrap();
    let (ints, floats) = workload();
    let out = push(&head, &ints, &floats);
    assert_eq!(out.histograms_appended, 600);
    assert_eq!(out.series_created, 2);
    assert_all_there(&head, &ints, &floats);
    assert_eq!(head.stats().samples_appended, 600);
}

#[test]
fn histograms_come_back_after_a_crash_and_after_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let (ints, floats) = workload();
    {
        let (head, _) = Head::open(dir.path(), opts()).unwrap();
        push(&head, &ints, &floats);
        head.sync().unwrap();
        // Dropped without a close: the WAL and `chunks_head/` are all there is, as after kill -9.
    }
    let (head, stats) = Head::open(dir.path(), opts()).unwrap();
    assert!(
        stats.mmapped_chunks > 0,
        "completed histogram chunks were mapped: {stats:?}"
    );
    assert!(stats.samples_in_mmapped_chunks > 0, "{stats:?}");
    assert_eq!(stats.skipped_samples, 0, "{stats:?}");
    assert_all_there(&head, &ints, &floats);
    // The replayed head takes the next samples where it left off.
    let next = [int(300 * 15_000, counter(300, 40))];
    let more = head
        .append(&[AppendSeries {
            labels: &labels("ints"),
            samples: &[],
            created: None,
            histograms: &next,
        }])
        .unwrap();
    assert_eq!(more.histograms_appended, 1);
    let ints: Vec<HistogramSample> = ints.into_iter().chain(next).collect();
    head.close_with_snapshot().unwrap().expect("a snapshot");
    drop(head);
    let (head, stats) = Head::open(dir.path(), opts()).unwrap();
    assert!(stats.snapshot.is_some(), "{stats:?}");
    assert_eq!(stats.snapshot_series, 2);
    assert_eq!(stats.samples, 0, "nothing left to replay: {stats:?}");
    assert_all_there(&head, &ints, &floats);
    // The restored open chunks take appends.
    let next = [int(301 * 15_000, counter(301, 40))];
    head.append(&[AppendSeries {
        labels: &labels("ints"),
        samples: &[],
        created: None,
        histograms: &next,
    }])
    .unwrap();
    let ints: Vec<HistogramSample> = ints.into_iter().chain(next).collect();
    assert_all_there(&head, &ints, &floats);
}

#[test]
fn a_checkpoint_keeps_the_histograms_after_its_time() {
    let dir = tempfile::tempdir().unwrap();
    let (ints, floats) = workload();
    let mint = 150 * 15_000;
    {
        let (head, _) = Head::open(dir.path(), opts()).unwrap();
        push(&head, &ints, &floats);
        let truncated = head.truncate(mint).unwrap();
        assert!(
            truncated.checkpoint.is_some(),
            "the WAL spans several segments: {truncated:?}"
        );
        head.sync().unwrap();
    }
    // Without `chunks_head/`, the checkpoint and the WAL segments after it are all that hold the samples.
    std::fs::remove_dir_all(dir.path().join(crate::chunks_head::CHUNKS_HEAD_DIR)).unwrap();
    let (head, stats) = Head::open(
        dir.path(),
        HeadOptions {
            min_valid_time: mint,
            ..opts()
        },
    )
    .unwrap();
    assert_eq!(stats.undecodable_records, 0, "{stats:?}");
    let keep = |s: &[HistogramSample]| -> Vec<Stored> {
        want(s)
            .into_iter()
            .filter(|x| matches!(x, Stored::Hist(t, _) if *t >= mint))
            .collect()
    };
    let (_, got) = stored(&head, "ints");
    let got: Vec<Stored> = got
        .into_iter()
        .filter(|x| matches!(x, Stored::Hist(t, _) if *t >= mint))
        .collect();
    assert_eq!(got, keep(&ints));
    let (_, got) = stored(&head, "floats");
    let got: Vec<Stored> = got
        .into_iter()
        .filter(|x| matches!(x, Stored::Hist(t, _) if *t >= mint))
        .collect();
    assert_eq!(got, keep(&floats));
}

#[test]
fn a_series_switching_between_floats_and_histograms_gets_a_chunk_per_switch() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = Head::open(dir.path(), opts()).unwrap();
    let l = labels("mixed");
    let append = |samples: &[Sample], histograms: &[HistogramSample]| {
        let out = head
            .append(&[AppendSeries {
                labels: &l,
                samples,
                created: None,
                histograms,
            }])
            .unwrap();
        assert!(out.errors.is_empty(), "{:?}", out.errors);
    };
    append(
        &[Sample::new(1_000, 1.0), Sample::new(2_000, 2.0)],
        &[int(3_000, counter(1, 4))],
    );
    append(&[], &[float(4_000, counter(2, 4).to_float())]);
    append(&[Sample::new(5_000, 5.0)], &[]);
    let (enc, got) = stored(&head, "mixed");
    assert_eq!(
        enc,
        vec![
            Encoding::Xor,
            Encoding::Histogram,
            Encoding::FloatHistogram,
            Encoding::Xor
        ]
    );
    assert_eq!(
        got,
        vec![
            Stored::Float(1_000, 1f64.to_bits()),
            Stored::Float(2_000, 2f64.to_bits()),
            Stored::Hist(3_000, HistogramValue::Int(counter(1, 4))),
            Stored::Hist(4_000, HistogramValue::Float(counter(2, 4).to_float())),
            Stored::Float(5_000, 5f64.to_bits()),
        ]
    );
    // The same after a crash: the WAL holds each kind in its own record type.
    drop(head);
    let (head, _) = Head::open(dir.path(), opts()).unwrap();
    assert_eq!(stored(&head, "mixed").1, got);
}

#[test]
fn histogram_samples_are_judged_like_floats() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = Head::open(dir.path(), opts()).unwrap();
    let l = labels("judged");
    let append = |histograms: &[HistogramSample]| {
        head.append(&[AppendSeries {
            labels: &l,
            samples: &[],
            created: None,
            histograms,
        }])
        .unwrap()
    };
    assert_eq!(append(&[int(10_000, counter(5, 4))]).histograms_appended, 1);
    // The same histogram again: accepted, not stored twice.
    let again = append(&[int(10_000, counter(5, 4))]);
    assert_eq!((again.histograms_appended, again.samples_deduplicated), (0, 1));
    assert!(again.errors.is_empty());
    let cases = [
        (
            "another value at the newest timestamp",
            int(10_000, counter(6, 4)),
            AppendErrorKind::DuplicateTimestamp,
        ),
        ("older", int(9_000, counter(4, 4)), AppendErrorKind::OutOfOrder),
        (
            "a float histogram at the newest timestamp",
            float(10_000, counter(5, 4).to_float()),
            AppendErrorKind::DuplicateTimestamp,
        ),
        (
            "spans that do not match the buckets",
            int(
                11_000,
                Histogram {
                    positive_spans: vec![Span::new(0, 3)],
                    ..counter(7, 4)
                },
            ),
            AppendErrorKind::InvalidHistogram,
        ),
        (
            // The ingester's gRPC port refuses these before decoding; the head holds the line for any caller.
            "more buckets than the ceiling",
            int(
                11_000,
                counter(7, heddle_model::histogram::MAX_BUCKETS_CEILING as u32 + 1),
            ),
            AppendErrorKind::HistogramTooLarge,
        ),
    ];
    for (name, sample, reason) in cases {
        let out = append(&[sample]);
        assert_eq!(out.histograms_appended, 0, "{name}");
        assert_eq!(out.errors.len(), 1, "{name}");
        assert_eq!(out.errors[0].reason, reason, "{name}");
        assert_eq!(out.errors[0].samples_rejected, 1, "{name}");
    }
    let invalid = append(&[int(
        12_000,
        Histogram {
            count: 1,
            ..counter(7, 4)
        },
    )]);
    let message = invalid.errors[0].to_string();
    assert!(
        message.starts_with("err-heddle-native-histogram-invalid: 1 native histogram sample(s)")
            && message.contains("observations found in buckets, but the count field is 1"),
        "{message}"
    );
    let wide = append(&[int(12_000, counter(7, 20_000))]);
    let message = wide.errors[0].to_string();
    assert!(
        message.starts_with("err-heddle-native-histogram-too-large: 1 native histogram sample(s) over the ceiling")
            && message.contains("20000 buckets and 1 spans"),
        "{message}"
    );
    assert_eq!(stored(&head, "judged").1, want(&[int(10_000, counter(5, 4))]));
}

#[test]
fn a_float_series_costs_no_more_for_histograms() {
    // The open chunk enum takes the XOR chunk's size: histogram chunks are boxed.
    assert_eq!(
        std::mem::size_of::<super::series::OpenChunk>(),
        std::mem::size_of::<crate::chunkenc::XorChunk>()
    );
}

#[test]
fn a_created_timestamp_stores_a_zero_histogram_before_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = Head::open(dir.path(), opts()).unwrap();
    let l = labels("created");
    let push = |created: i64, histograms: &[HistogramSample]| {
        head.append(&[AppendSeries {
            labels: &l,
            samples: &[],
            created: Some(created),
            histograms,
        }])
        .unwrap()
    };
    let first = [int(10_000, counter(1, 4)), int(25_000, counter(2, 4))];
    let out = push(5_000, &first);
    assert_eq!((out.created_zero_samples, out.histograms_appended), (1, 2));
    // The same start again: nothing new.
    let again = [int(40_000, counter(3, 4))];
    let out = push(5_000, &again);
    assert_eq!((out.created_zero_samples, out.histograms_appended), (0, 1));
    // The zero histogram has no buckets; the next sample's recode of the chunk gives it that sample's, empty.
    let zero = Histogram {
        schema: 3,
        zero_threshold: 1e-128,
        positive_spans: vec![Span::new(-2, 4)],
        positive_buckets: vec![0; 4],
        ..Histogram::default()
    };
    let mut expected = vec![int(5_000, zero)];
    expected.extend(first);
    expected.extend(again);
    let m = heddle_model::Matcher::new(heddle_model::MatchType::Equal, "__name__", "created").unwrap();
    let chunk = &head.select(i64::MIN, i64::MAX, &[m])[0].chunks[0];
    assert_eq!(
        crate::chunkenc::CounterResetHeader::of_chunk(&chunk.data),
        crate::chunkenc::CounterResetHeader::CounterReset,
        "the zero histogram marks the counter's start"
    );
    let (encodings, got) = stored(&head, "created");
    assert_eq!(
        encodings,
        vec![Encoding::Histogram],
        "the zero histogram shares the chunk"
    );
    assert_eq!(got, want(&expected));
}

/// The widest legal layouts (bucket indices two billion apart, a schema whose buckets are 2^16 wide) are
/// stored and read back like any other: nothing in the head walks the gaps between spans.
#[test]
fn buckets_billions_of_indices_apart_are_stored_as_sent() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = Head::open(dir.path(), opts()).unwrap();
    let l = labels("hostile");
    let sample = |t: i64, extra: bool| {
        let mut positive_spans = vec![Span::new(-2_000_000_000, 1), Span::new(2_000_000_000, 1)];
        let mut positive_buckets = vec![1, 0];
        if extra {
            positive_spans.push(Span::new(2_000_000_000, 1));
            positive_buckets.push(0);
        }
        let count = positive_buckets.len() as u64;
        int(
            t,
            Histogram {
                schema: -4,
                count,
                positive_spans,
                positive_buckets,
                ..Histogram::default()
            },
        )
    };
    // A new far bucket recodes the chunk; the next sample without it is widened to the chunk's layout.
    let sent: Vec<HistogramSample> = [false, true, false]
        .iter()
        .enumerate()
        .map(|(i, &e)| sample(i as i64 * 1000, e))
        .collect();
    for s in &sent {
        let out = head
            .append(&[AppendSeries {
                labels: &l,
                samples: &[],
                created: None,
                histograms: std::slice::from_ref(s),
            }])
            .unwrap();
        assert_eq!((out.histograms_appended, out.errors.len()), (1, 0));
    }
    let (_, got) = stored(&head, "hostile");
    let counts: Vec<u64> = got
        .iter()
        .map(|s| match s {
            Stored::Hist(_, HistogramValue::Int(h)) => h.count,
            other => panic!("not an integer histogram: {other:?}"),
        })
        .collect();
    assert_eq!(counts, vec![2, 3, 2]);
}

/// Compaction writes the head's histogram chunks into a block that reads back every histogram sample, with the
/// chunks' encodings.
#[test]
fn compaction_writes_histogram_chunks_into_the_block() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = Head::open(dir.path(), opts()).unwrap();
    let (ints, floats) = workload();
    push(&head, &ints, &floats);
    let blocks_dir = dir.path().join("blocks");
    let out = head.compact(&blocks_dir, 7_200_000, None, true).unwrap();
    assert_eq!(out.blocks.len(), 1, "{out:?}");
    assert!(
        head.select(i64::MIN, i64::MAX, &[]).is_empty(),
        "a forced compaction empties the head"
    );
    let blocks = crate::block::list_local_blocks(&blocks_dir).unwrap();
    let block = crate::block::BlockReader::open_dir(&blocks[0].0).unwrap();
    for (name, sent, encoding) in [
        ("ints", &ints, Encoding::Histogram),
        ("floats", &floats, Encoding::FloatHistogram),
    ] {
        let m = heddle_model::Matcher::new(heddle_model::MatchType::Equal, "__name__", name).unwrap();
        let series = block.select(i64::MIN, i64::MAX, &[m]).unwrap();
        assert_eq!(series.len(), 1, "{name}");
        let (encodings, got) = decoded(&series[0].chunks);
        assert!(encodings.iter().all(|e| *e == encoding), "{name}: {encodings:?}");
        assert_eq!(got, want(sent), "{name}");
    }
}

/// Timestamps at both edges of i64 (a created timestamp of i64::MIN among them) are stored, and come back
/// through a snapshot: the cut rules and chunk deltas saturate or wrap as Prometheus' do, never overflow.
#[test]
fn timestamps_at_the_edges_of_i64() {
    let dir = tempfile::tempdir().unwrap();
    let (head, _) = Head::open(dir.path(), opts()).unwrap();
    let l = labels("edge");
    let sent = [
        int(i64::MIN + 1, counter(1, 4)),
        int(-1, counter(2, 4)),
        int(i64::MAX - 1, counter(3, 4)),
        int(i64::MAX, counter(4, 4)),
    ];
    for s in &sent {
        let out = head
            .append(&[AppendSeries {
                labels: &l,
                samples: &[],
                created: Some(i64::MIN),
                histograms: std::slice::from_ref(s),
            }])
            .unwrap();
        assert_eq!((out.histograms_appended, out.errors.len()), (1, 0));
    }
    let before = stored(&head, "edge").1;
    assert_eq!(before.len(), 5, "the four, and the zero histogram at i64::MIN");
    head.close_with_snapshot().unwrap();
    drop(head);
    let (head, _) = Head::open(dir.path(), opts()).unwrap();
    assert_eq!(stored(&head, "edge").1, before);
}

/// A head whose chunks cross the block boundary (a chunk range longer than the block range): compaction clips
/// each histogram chunk to the block, and the block holds exactly the samples before the boundary.
#[test]
fn compaction_clips_histogram_chunks_to_the_block_range() {
    let dir = tempfile::tempdir().unwrap();
    let wide = HeadOptions {
        chunk_range_ms: 4 * 7_200_000,
        ..opts()
    };
    let (head, _) = Head::open(dir.path(), wide).unwrap();
    // Two hours and a half at one sample a minute, 10 buckets: chunks of a few dozen samples.
    let ints: Vec<HistogramSample> = (0..150).map(|i| int(i as i64 * 60_000, counter(i, 10))).collect();
    let floats: Vec<HistogramSample> = (0..150)
        .map(|i| float(i as i64 * 60_000, counter(i, 3).to_float()))
        .collect();
    push(&head, &ints, &floats);
    for s in head.select(i64::MIN, i64::MAX, &[]) {
        assert!(
            s.chunks
                .iter()
                .any(|c| c.min_time < 7_200_000 && c.max_time >= 7_200_000),
            "{}: a chunk crosses the block boundary",
            s.labels
        );
    }
    let blocks_dir = dir.path().join("blocks");
    let block = head
        .write_block(&blocks_dir, 0, 7_200_000, None)
        .unwrap()
        .expect("a block");
    assert_eq!((block.min_time, block.max_time), (0, 7_200_000));
    let blocks = crate::block::list_local_blocks(&blocks_dir).unwrap();
    let reader = crate::block::BlockReader::open_dir(&blocks[0].0).unwrap();
    for (name, sent) in [("ints", &ints), ("floats", &floats)] {
        let m = heddle_model::Matcher::new(heddle_model::MatchType::Equal, "__name__", name).unwrap();
        let series = reader.select(i64::MIN, i64::MAX, &[m]).unwrap();
        let (_, got) = decoded(&series[0].chunks);
        let before: Vec<HistogramSample> = sent.iter().filter(|s| s.t < 7_200_000).cloned().collect();
        assert_eq!(got, want(&before), "{name}");
    }
}
