//! Tests of the integer and float histogram chunks: hand-derived bytes, Prometheus' appender rules, round
//! trips, and hostile bytes.

use super::*;
use crate::error::ChunkError;
use heddle_model::histogram::{CUSTOM_BUCKETS_SCHEMA, deltas_from_absolute};
use heddle_model::{CounterResetHint, FloatHistogram, Histogram, STALE_NAN_BITS, Span};
use proptest::prelude::*;

/// Packs a human-written bit string ("10 0110 ...", spaces ignored) into bytes, zero-padding the last one.
fn bits(s: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for (n, c) in s.chars().filter(|c| !c.is_whitespace()).enumerate() {
        if n % 8 == 0 {
            out.push(0u8);
        }
        if c == '1' {
            *out.last_mut().unwrap() |= 0x80 >> (n % 8);
        }
    }
    out
}

fn spans(s: &[(i32, u32)]) -> Vec<Span> {
    s.iter().map(|(o, l)| Span::new(*o, *l)).collect()
}

/// A counter histogram on schema 0 with the default zero threshold and absolute positive counts `counts`
/// in one span from `offset`.
fn hist(count: u64, zero_count: u64, sum: f64, offset: i32, counts: &[i64]) -> Histogram {
    Histogram {
        schema: 0,
        zero_threshold: 2f64.powi(-128),
        zero_count,
        count,
        sum,
        positive_spans: spans(&[(offset, counts.len() as u32)]),
        positive_buckets: deltas_from_absolute(counts),
        ..Default::default()
    }
}

fn stale() -> Histogram {
    Histogram {
        sum: f64::from_bits(STALE_NAN_BITS),
        ..Default::default()
    }
}

fn append(c: &mut HistogramChunk, t: i64, h: &Histogram) -> HistogramAppend<HistogramChunk> {
    c.append(t, h, None).expect("append")
}

#[test]
fn golden_integer_chunk() {
    let mut c = HistogramChunk::new();
    assert!(matches!(
        append(&mut c, 1000, &hist(5, 1, 10.0, 0, &[1, 3])),
        HistogramAppend::Appended
    ));
    assert!(matches!(
        append(&mut c, 2000, &hist(8, 1, 15.0, 0, &[2, 4])),
        HistogramAppend::Appended
    ));
    let mut want = vec![0x00, 0x02, 0x00]; // 2 samples, header Unknown
    let mut stream = String::from(concat!(
        "01110100 ",           // zero threshold 2^-128: byte 116
        "0 ",                  // schema 0
        "10 001 ",             // one positive span
        "10 010 0 ",           // length 2, offset 0
        "0 ",                  // no negative span
        "11110 001111101000 ", // t 1000 (12-bit bucket)
        "10 101 ",             // count 5
        "10 001 ",             // zero count 1
    ));
    stream.push_str(&format!("{:064b} ", 10f64.to_bits()));
    stream.push_str(concat!(
        "10 001 10 010 ",        // buckets 1, +2 (delta-encoded)
        "11110 001111101000 ",   // t: dod 1000
        "10 011 ",               // count: dod 3
        "0 ",                    // zero count: dod 0
        "1 1 01100 000011 101 ", // sum 15 ^ 10 = 0x000a..: 12 leading zeros, 3 significant bits
        "10 001 ",               // bucket 0: 1 -> 2, dod 1
        "0",                     // bucket 1: delta +2 -> +2, dod 0
    ));
    want.extend(bits(&stream));
    assert_eq!(c.bytes(), &want[..]);
    let got = decode_histograms(c.bytes()).unwrap();
    assert_eq!(
        got[1].1,
        Histogram {
            counter_reset_hint: CounterResetHint::NotCounterReset,
            ..hist(8, 1, 15.0, 0, &[2, 4])
        }
    );
    assert_eq!(got[0].1.counter_reset_hint, CounterResetHint::Unknown);
}

#[test]
fn golden_float_chunk() {
    let mut c = FloatHistogramChunk::new();
    let h = |count: f64, sum: f64, b: f64| FloatHistogram {
        schema: -53,
        count,
        sum,
        positive_spans: spans(&[(1, 1)]),
        positive_buckets: vec![b],
        custom_values: vec![0.5, 1.0],
        counter_reset_hint: CounterResetHint::Gauge,
        ..Default::default()
    };
    c.append(7, &h(2.0, 1.0, 2.0), None).unwrap();
    c.append(8, &h(2.0, 3.0, 2.0), None).unwrap();
    let mut stream = String::from(concat!(
        "00000000 ",             // zero threshold 0
        "1110 111001011 ",       // schema -53 (9-bit bucket, two's complement)
        "10 001 10 001 10 001 ", // one positive span: length 1, offset 1
        "0 ",                    // no negative span
        "10 010 ",               // two custom bounds
        "1110 111110101 ",       // 0.5 -> 500 + 1
        "11110 001111101001 ",   // 1.0 -> 1000 + 1
        "110 000111 ",           // t 7
    ));
    for v in [2.0f64, 0.0, 1.0, 2.0] {
        stream.push_str(&format!("{:064b} ", v.to_bits())); // count, zero count, sum, bucket
    }
    stream.push_str(concat!(
        "10 001 ",                        // t: dod 1
        "0 0 ",                           // count and zero count unchanged
        "1 1 00001 001100 111111111111 ", // sum 3 ^ 1 = 0x7ff8..: 1 leading zero, 12 significant bits
        "0",                              // bucket unchanged
    ));
    let mut want = vec![0x00, 0x02, 0b1100_0000]; // 2 samples, gauge header
    want.extend(bits(&stream));
    assert_eq!(c.bytes(), &want[..]);
    let got = decode_float_histograms(c.bytes()).unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[1], (8, h(2.0, 3.0, 2.0)));
    assert_eq!(c.counter_reset_header(), CounterResetHeader::Gauge);
}

/// The absolute count of every bucket index with a non-zero count, positive side.
fn positive_by_index(spans: &[Span], counts: impl IntoIterator<Item = f64>) -> Vec<(i64, f64)> {
    let mut next = 0i64;
    let idx = spans.iter().flat_map(|s| {
        let start = next + i64::from(s.offset);
        next = start + i64::from(s.length);
        start..next
    });
    idx.zip(counts).filter(|(_, c)| *c != 0.0).collect::<Vec<_>>()
}

fn int_by_index(h: &Histogram) -> Vec<(i64, f64)> {
    positive_by_index(&h.positive_spans, h.to_float().positive_buckets)
}

/// A check of what an append did.
type CheckFn = dyn Fn(&HistogramAppend<HistogramChunk>) -> bool;

#[test]
fn counter_rules() {
    let base = hist(4, 0, 1.0, 0, &[1, 3]);
    type Check = fn(&HistogramAppend<HistogramChunk>) -> bool;
    let new_chunk = |header: CounterResetHeader| move |r: &HistogramAppend<HistogramChunk>| matches!(r, HistogramAppend::NewChunk(c) if c.counter_reset_header() == header && c.num_samples() == 1);
    let cases: Vec<(&str, Histogram, Box<CheckFn>)> = vec![
        (
            "same layout, counts up",
            hist(6, 0, 2.0, 0, &[2, 4]),
            Box::new((|r| matches!(r, HistogramAppend::Appended)) as Check),
        ),
        (
            "count down",
            hist(3, 0, 2.0, 0, &[1, 2]),
            Box::new(new_chunk(CounterResetHeader::CounterReset)),
        ),
        (
            "bucket down",
            hist(5, 0, 2.0, 0, &[0, 5]),
            Box::new(new_chunk(CounterResetHeader::CounterReset)),
        ),
        (
            "bucket in use gone",
            hist(5, 0, 2.0, 1, &[5]),
            Box::new(new_chunk(CounterResetHeader::CounterReset)),
        ),
        (
            "hint says reset",
            Histogram {
                counter_reset_hint: CounterResetHint::CounterReset,
                ..hist(6, 0, 2.0, 0, &[2, 4])
            },
            Box::new(new_chunk(CounterResetHeader::CounterReset)),
        ),
        (
            "schema change",
            Histogram {
                schema: 1,
                ..hist(6, 0, 2.0, 0, &[2, 4])
            },
            Box::new(new_chunk(CounterResetHeader::Unknown)),
        ),
        (
            "zero threshold change",
            Histogram {
                zero_threshold: 0.5,
                ..hist(6, 0, 2.0, 0, &[2, 4])
            },
            Box::new(new_chunk(CounterResetHeader::Unknown)),
        ),
        (
            "new bucket",
            hist(7, 0, 2.0, 0, &[1, 3, 3]),
            Box::new((|r| matches!(r, HistogramAppend::Recoded)) as Check),
        ),
        (
            "stale marker",
            stale(),
            Box::new((|r| matches!(r, HistogramAppend::Appended)) as Check),
        ),
        (
            "gauge after counters",
            Histogram {
                counter_reset_hint: CounterResetHint::Gauge,
                ..hist(6, 0, 2.0, 0, &[2, 4])
            },
            Box::new(new_chunk(CounterResetHeader::Gauge)),
        ),
    ];
    for (name, next, check) in cases {
        let mut c = HistogramChunk::new();
        append(&mut c, 0, &base);
        let before = c.bytes().to_vec();
        let r = append(&mut c, 10, &next);
        assert!(check(&r), "{name}: got {r:?}");
        if let HistogramAppend::NewChunk(_) = r {
            assert_eq!(c.bytes(), &before[..], "{name}: the full chunk is untouched");
        }
    }
    let mut c = HistogramChunk::new();
    append(&mut c, 0, &hist(5, 1, 1.0, 0, &[1, 3]));
    let r = append(&mut c, 10, &hist(6, 0, 1.0, 0, &[2, 4]));
    assert!(
        new_chunk(CounterResetHeader::CounterReset)(&r),
        "zero count down: got {r:?}"
    );
}

#[test]
fn new_buckets_recode_the_chunk() {
    let mut c = HistogramChunk::new();
    append(&mut c, 0, &hist(4, 0, 1.0, 2, &[1, 3]));
    append(&mut c, 10, &hist(5, 0, 2.0, 2, &[2, 3]));
    // A bucket below and one far above: the chunk takes both, its earlier samples with them empty.
    let mut wide = hist(9, 0, 3.0, 1, &[1, 2, 3]);
    wide.positive_spans.push(Span::new(5, 1));
    wide.positive_buckets = deltas_from_absolute(&[1, 2, 3, 3]);
    assert!(matches!(append(&mut c, 20, &wide), HistogramAppend::Recoded));
    let got = decode_histograms(c.bytes()).unwrap();
    assert_eq!(got.len(), 3);
    for (_, h) in &got {
        assert_eq!(h.positive_spans, wide.positive_spans, "every sample has the new layout");
        h.validate().unwrap();
    }
    assert_eq!(int_by_index(&got[0].1), vec![(2, 1.0), (3, 3.0)]);
    assert_eq!(int_by_index(&got[1].1), vec![(2, 2.0), (3, 3.0)]);
    assert_eq!(int_by_index(&got[2].1), int_by_index(&wide));
    // Byte for byte what appending the widened samples to a new chunk gives.
    let mut fresh = HistogramChunk::new();
    for (t, h) in &got {
        fresh.append(*t, h, None).unwrap();
    }
    assert_eq!(fresh.bytes(), c.bytes());
}

#[test]
fn missing_empty_buckets_are_added_to_the_sample() {
    let mut c = HistogramChunk::new();
    append(&mut c, 0, &hist(3, 0, 1.0, 0, &[0, 3, 0]));
    // The sample lacks the two empty buckets of the chunk: it is widened, no recoding needed.
    assert!(matches!(
        append(&mut c, 10, &hist(4, 0, 1.0, 1, &[4])),
        HistogramAppend::Appended
    ));
    // It lacks one and adds one: both.
    assert!(matches!(
        append(&mut c, 20, &hist(6, 0, 1.0, 1, &[5, 0, 1])),
        HistogramAppend::Recoded
    ));
    let got = decode_histograms(c.bytes()).unwrap();
    assert_eq!(got[2].1.positive_spans, spans(&[(0, 4)]));
    assert_eq!(int_by_index(&got[1].1), vec![(1, 4.0)]);
    assert_eq!(int_by_index(&got[2].1), vec![(1, 5.0), (3, 1.0)]);
}

#[test]
fn a_chunk_layout_never_widens_past_the_ceiling() {
    use heddle_model::histogram::MAX_BUCKETS_CEILING;
    let n = MAX_BUCKETS_CEILING / 2 + 1;
    let gauge = |h: Histogram| Histogram {
        counter_reset_hint: CounterResetHint::Gauge,
        ..h
    };
    // Each sample is within the ceiling, but together their buckets are not: the one that would widen the
    // chunk past it starts a new chunk, a counter one saying there was no reset.
    for (name, kind) in [("counter", None), ("gauge", Some(CounterResetHeader::Gauge))] {
        let at = |offset: i32, counts: &[i64]| {
            let h = hist(0, 0, 1.0, offset, counts);
            if kind.is_some() { gauge(h) } else { h }
        };
        let mut c = HistogramChunk::new();
        append(&mut c, 0, &at(0, &vec![0; n]));
        let next = at(n as i32, &vec![0; n]);
        match append(&mut c, 10, &next) {
            HistogramAppend::NewChunk(new) => {
                let want = kind.unwrap_or(CounterResetHeader::NotCounterReset);
                assert_eq!(new.counter_reset_header(), want, "{name}");
                assert_eq!(
                    decode_histograms(new.bytes()).unwrap()[0].1.positive_spans,
                    next.positive_spans
                );
            }
            other => panic!("{name}: {other:?}"),
        }
        assert_eq!(c.num_samples(), 1, "{name}: the full chunk is unchanged");
        // Under the ceiling, the same move recodes the chunk as Prometheus does.
        let mut c = HistogramChunk::new();
        append(&mut c, 0, &at(0, &vec![0; n - 1]));
        assert!(
            matches!(
                append(&mut c, 10, &at((n - 1) as i32, &vec![0; n - 1])),
                HistogramAppend::Recoded
            ),
            "{name}"
        );
    }
    // The float chunk holds the same line.
    let mut c = FloatHistogramChunk::new();
    c.append(0, &hist(0, 0, 1.0, 0, &vec![0; n]).to_float(), None).unwrap();
    let next = hist(0, 0, 1.0, n as i32, &vec![0; n]).to_float();
    assert!(matches!(
        c.append(10, &next, None).unwrap(),
        HistogramAppend::NewChunk(_)
    ));
}

#[test]
fn gauges_change_freely_within_a_layout() {
    let g = |count: u64, offset: i32, counts: &[i64]| Histogram {
        counter_reset_hint: CounterResetHint::Gauge,
        ..hist(count, 0, 1.0, offset, counts)
    };
    let mut c = HistogramChunk::new();
    append(&mut c, 0, &g(5, 0, &[2, 3]));
    assert_eq!(c.counter_reset_header(), CounterResetHeader::Gauge);
    assert!(
        matches!(append(&mut c, 10, &g(1, 1, &[1])), HistogramAppend::Appended),
        "buckets go"
    );
    assert!(
        matches!(append(&mut c, 20, &g(9, 2, &[9])), HistogramAppend::Recoded),
        "buckets come"
    );
    let counter = hist(9, 0, 1.0, 2, &[9]);
    assert!(
        matches!(append(&mut c, 30, &counter), HistogramAppend::NewChunk(n) if n.counter_reset_header() == CounterResetHeader::NotCounterReset)
    );
    let got = decode_histograms(c.bytes()).unwrap();
    assert!(got.iter().all(|(_, h)| h.counter_reset_hint == CounterResetHint::Gauge));
    assert_eq!(int_by_index(&got[1].1), vec![(1, 1.0)]);
    assert_eq!(int_by_index(&got[2].1), vec![(2, 9.0)]);
}

#[test]
fn stale_markers() {
    let mut c = HistogramChunk::new();
    append(&mut c, 0, &hist(4, 0, 1.0, 0, &[1, 3]));
    append(&mut c, 10, &stale());
    append(&mut c, 20, &stale());
    assert!(
        matches!(append(&mut c, 30, &hist(4, 0, 1.0, 0, &[1, 3])), HistogramAppend::NewChunk(n) if n.counter_reset_header() == CounterResetHeader::Unknown)
    );
    let got = decode_histograms(c.bytes()).unwrap();
    assert_eq!(got.len(), 3);
    for (_, h) in &got[1..] {
        assert_eq!(h.sum.to_bits(), STALE_NAN_BITS);
        assert!(h.positive_buckets.is_empty() && h.count == 0);
    }
    let mut first = HistogramChunk::new();
    append(&mut first, 0, &stale());
    let (_, h) = &decode_histograms(first.bytes()).unwrap()[0];
    assert!(h.positive_spans.is_empty() && h.sum.to_bits() == STALE_NAN_BITS);
}

#[test]
fn header_of_a_chunk_that_follows_another() {
    let mut prev = HistogramChunk::new();
    append(&mut prev, 0, &hist(4, 0, 1.0, 0, &[1, 3]));
    for (name, h, want) in [
        (
            "continues",
            hist(5, 0, 1.0, 0, &[2, 3]),
            CounterResetHeader::NotCounterReset,
        ),
        ("reset", hist(1, 0, 1.0, 0, &[1, 0]), CounterResetHeader::CounterReset),
        (
            "new schema",
            Histogram {
                schema: 2,
                ..hist(5, 0, 1.0, 0, &[2, 3])
            },
            CounterResetHeader::Unknown,
        ),
    ] {
        let mut next = HistogramChunk::new();
        next.append(10, &h, Some(&prev)).unwrap();
        assert_eq!(next.counter_reset_header(), want, "{name}");
    }
    let fh = |count: f64, schema: i32| FloatHistogram {
        count,
        schema,
        ..Default::default()
    };
    let mut fprev = FloatHistogramChunk::new();
    fprev.append(0, &fh(4.0, 0), None).unwrap();
    for (name, h, want) in [
        ("continues", fh(5.0, 0), CounterResetHeader::NotCounterReset),
        ("reset", fh(1.0, 0), CounterResetHeader::CounterReset),
        (
            "new schema: float chunks say not a reset",
            fh(5.0, 2),
            CounterResetHeader::NotCounterReset,
        ),
    ] {
        let mut next = FloatHistogramChunk::new();
        next.append(10, &h, Some(&fprev)).unwrap();
        assert_eq!(next.counter_reset_header(), want, "float: {name}");
    }
}

#[test]
fn float_counter_rules() {
    let f = |count: f64, offset: i32, counts: &[f64]| FloatHistogram {
        count,
        sum: count,
        positive_spans: spans(&[(offset, counts.len() as u32)]),
        positive_buckets: counts.to_vec(),
        ..Default::default()
    };
    let mut c = FloatHistogramChunk::new();
    c.append(0, &f(3.0, 0, &[1.0, 2.0]), None).unwrap();
    assert!(matches!(
        c.append(1, &f(4.0, 0, &[1.5, 2.5]), None).unwrap(),
        HistogramAppend::Appended
    ));
    assert!(matches!(
        c.append(2, &f(5.0, -1, &[0.5, 1.5, 3.0]), None).unwrap(),
        HistogramAppend::Recoded
    ));
    let schema = FloatHistogram {
        schema: 3,
        ..f(6.0, -1, &[0.5, 1.5, 4.0])
    };
    assert!(
        matches!(c.append(3, &schema, None).unwrap(), HistogramAppend::NewChunk(n) if n.counter_reset_header() == CounterResetHeader::Unknown)
    );
    assert!(
        matches!(c.append(3, &f(5.0, -1, &[0.5, 1.0, 3.5]), None).unwrap(), HistogramAppend::NewChunk(n) if n.counter_reset_header() == CounterResetHeader::CounterReset)
    );
    let got = decode_float_histograms(c.bytes()).unwrap();
    assert_eq!(got.len(), 3);
    assert_eq!(
        got[0].1.positive_buckets,
        vec![0.0, 1.0, 2.0],
        "recoded with an empty bucket"
    );
    assert_eq!(got[2].1.positive_buckets, vec![0.5, 1.5, 3.0]);
}

#[test]
fn restored_chunks_continue() {
    let mut c = HistogramChunk::new();
    for i in 0..5u64 {
        append(
            &mut c,
            i as i64 * 15,
            &hist(4 + i, 0, 1.0 + i as f64, 0, &[1, 3 + i as i64]),
        );
    }
    let mut restored = HistogramChunk::from_bytes(c.bytes().to_vec()).unwrap();
    assert_eq!(restored.bytes(), c.bytes());
    let next = hist(20, 0, 9.5, 0, &[2, 18]);
    append(&mut c, 100, &next);
    append(&mut restored, 100, &next);
    assert_eq!(
        restored.bytes(),
        c.bytes(),
        "the sum's window was set, so both write the same bits"
    );
    let mut f = FloatHistogramChunk::new();
    f.append(0, &hist(4, 0, 1.0, 0, &[1, 3]).to_float(), None).unwrap();
    f.append(9, &hist(5, 0, 2.0, 0, &[2, 3]).to_float(), None).unwrap();
    let restored = FloatHistogramChunk::from_bytes(f.bytes().to_vec()).unwrap();
    assert_eq!(
        decode_float_histograms(restored.bytes()).unwrap(),
        decode_float_histograms(f.bytes()).unwrap()
    );
}

#[test]
fn appended_histograms_must_fit_their_spans() {
    let mut bad = hist(4, 0, 1.0, 0, &[1, 3]);
    bad.positive_buckets.push(1);
    let err = HistogramChunk::new().append(0, &bad, None).unwrap_err();
    assert!(matches!(err, ChunkError::HistogramShape { .. }), "{err}");
    let err = HistogramChunk::new()
        .append(
            0,
            &Histogram {
                schema: 9,
                ..Default::default()
            },
            None,
        )
        .unwrap_err();
    assert!(matches!(err, ChunkError::HistogramShape { .. }), "{err}");
}

#[test]
fn unknown_schema_and_reserved_schemas() {
    // A chunk whose layout says schema -5 (between the exponential and custom ones): written by hand.
    let mut c = HistogramChunk::new();
    append(
        &mut c,
        0,
        &Histogram {
            schema: -4,
            count: 1,
            positive_spans: spans(&[(0, 1)]),
            positive_buckets: vec![1],
            ..Default::default()
        },
    );
    let mut bytes = c.bytes().to_vec();
    // zero threshold byte 0, then schema -4 = '10' + '100' (3-bit two's complement of -4 is 100... which is
    // +4's pattern): check the layout first.
    assert_eq!(bytes[3], 0);
    // Rewrite the schema field as -5: '110' + 6 bits 111011, shifting everything after it: simplest is to
    // build the chunk bit by bit.
    bytes.truncate(3);
    let mut stream = String::from("00000000 110 111011 10 001 10 001 0 0 0 10 001 0 ");
    stream.push_str(&format!("{:064b} 10 001", 0f64.to_bits()));
    bytes.extend(bits(&stream));
    assert!(matches!(
        decode_histograms(&bytes),
        Err(ChunkError::UnknownHistogramSchema { schema: -5 })
    ));
    // Schema 10 (reserved for higher resolutions) is read at schema 8: buckets 1..=4 of schema 10 fall in
    // bucket 1 of schema 8.
    let mut bytes = vec![0, 1, 0];
    let mut stream = String::from("00000000 1110 000001010 10 001 10 100 10 001 0 0 10 100 0 ");
    stream.push_str(&format!("{:064b} 10 001 0 0 0", 0f64.to_bits()));
    bytes.extend(bits(&stream));
    let got = decode_histograms(&bytes).unwrap();
    assert_eq!(got[0].1.schema, 8);
    assert_eq!(got[0].1.positive_spans, spans(&[(1, 1)]));
    assert_eq!(got[0].1.positive_counts(), vec![4]);
}

#[test]
fn cutter_follows_prometheus() {
    let range = 7_200_000;
    // 100 bytes a sample every 15 s: a quarter of the target after 3 samples predicts the end.
    let mut cut = HistogramChunkCutter::new(0, range);
    let mut min_time = 0;
    let mut samples = 0u16;
    let mut cuts = Vec::new();
    for i in 1..200i64 {
        let t = i * 15_000;
        if cut.cut_before(t, min_time, t - 15_000, samples, 3 + 100 * samples as usize) {
            cuts.push((t, samples));
            min_time = t;
            samples = 0;
        }
        samples += 1;
    }
    // 1024 bytes per chunk is ~10 samples, 150 s; the range of 480 samples splits into 48 chunks.
    assert!(cuts.len() >= 15, "cuts {cuts:?}");
    assert!(cuts.iter().all(|(_, n)| (10..=21).contains(n)), "cuts {cuts:?}");
    // Huge samples: twice the target is passed at once, but the minimum of 10 samples holds.
    let mut cut = HistogramChunkCutter::new(0, range);
    assert!(!cut.cut_before(10, 0, 9, 9, 50_000));
    assert!(cut.cut_before(11, 0, 10, 10, 55_000));
    // The end of the chunk range cuts even below the minimum.
    let mut cut = HistogramChunkCutter::new(0, range);
    assert!(!cut.cut_before(range - 1, 0, 1, 2, 100));
    assert!(cut.cut_before(range, 0, range - 1, 3, 150));
}

/// A sequence of appends: each histogram derives from the previous by one random change.
fn arb_series() -> impl Strategy<Value = Vec<(i64, Histogram)>> {
    let step = (0u8..12, any::<u64>(), 1i64..100_000);
    (proptest::collection::vec(step, 1..60), any::<bool>()).prop_map(|(steps, gauge)| {
        let mut out = Vec::new();
        let mut t = 1_700_000_000_000i64;
        let mut counts: Vec<(i64, i64)> = vec![(0, 1), (1, 2)]; // (index, absolute count)
        let mut zero = 0u64;
        let mut sum = 0.0f64;
        let mut schema = 0;
        for (kind, r, dt) in steps {
            t += dt;
            let mut hint = if gauge {
                CounterResetHint::Gauge
            } else {
                CounterResetHint::Unknown
            };
            match kind {
                0..=4 => {
                    for c in &mut counts {
                        c.1 += (r % 5) as i64;
                    }
                }
                5 => {
                    let idx = (r % 40) as i64 - 20;
                    if !counts.iter().any(|c| c.0 == idx) {
                        counts.push((idx, (r % 7) as i64));
                        counts.sort();
                    }
                }
                6 if counts.len() > 1 => {
                    counts.remove((r % counts.len() as u64) as usize);
                }
                7 => {
                    for c in &mut counts {
                        c.1 /= 2;
                    }
                }
                8 => zero += r % 3,
                9 => schema = (r % 13) as i32 - 4,
                10 => {
                    out.push((t, stale()));
                    continue;
                }
                11 => hint = CounterResetHint::CounterReset,
                _ => {}
            }
            sum += (r % 1000) as f64 / 8.0;
            let mut spans: Vec<Span> = Vec::new();
            let mut end = 0i64;
            for (idx, _) in &counts {
                match spans.last_mut() {
                    Some(last) if *idx == end => last.length += 1,
                    _ => spans.push(Span::new((*idx - end) as i32, 1)),
                }
                end = idx + 1;
            }
            let abs: Vec<i64> = counts.iter().map(|c| c.1).collect();
            let h = Histogram {
                counter_reset_hint: hint,
                schema,
                zero_threshold: 2f64.powi(-128),
                zero_count: zero,
                count: abs.iter().sum::<i64>() as u64 + zero,
                sum,
                positive_spans: spans,
                positive_buckets: deltas_from_absolute(&abs),
                ..Default::default()
            };
            out.push((t, h));
        }
        out
    })
}

/// Appends every sample, following new chunks as the head would.
fn encode_int(series: &[(i64, Histogram)]) -> Vec<HistogramChunk> {
    let mut chunks = vec![HistogramChunk::new()];
    for (t, h) in series {
        let open = chunks.last_mut().unwrap();
        if let HistogramAppend::NewChunk(next) = open.append(*t, h, None).unwrap() {
            chunks.push(next);
        }
    }
    chunks
}

/// What a sample means, whatever layout its chunk gave it: time, counts per bucket index, sum bits.
fn meaning(t: i64, h: &Histogram) -> (i64, i32, u64, u64, u64, Vec<(i64, f64)>) {
    (t, h.schema, h.count, h.zero_count, h.sum.to_bits(), int_by_index(h))
}

proptest! {
    #[test]
    fn integer_chunks_round_trip(series in arb_series()) {
        let chunks = encode_int(&series);
        let mut decoded = Vec::new();
        for c in &chunks {
            let samples = decode_histograms(c.bytes()).unwrap();
            prop_assert_eq!(samples.len(), usize::from(c.num_samples()));
            for (i, (_, h)) in samples.iter().enumerate() {
                let want = match (c.counter_reset_header(), i) {
                    _ if is_stale(h) => CounterResetHint::Unknown,
                    (CounterResetHeader::Gauge, _) => CounterResetHint::Gauge,
                    (_, 0) => CounterResetHint::Unknown,
                    _ => CounterResetHint::NotCounterReset,
                };
                prop_assert_eq!(h.counter_reset_hint, want);
                if !is_stale(h) {
                    h.validate().unwrap();
                    // Every sample has the chunk's layout, which is read without decoding one.
                    prop_assert_eq!(histogram_chunk_size(c.bytes()), Some(h.size()));
                }
            }
            decoded.extend(samples);
            // Restoring a chunk from its bytes keeps them.
            let restored = HistogramChunk::from_bytes(c.bytes().to_vec()).unwrap();
            prop_assert_eq!(restored.bytes(), c.bytes());
        }
        let want: Vec<_> = series.iter().map(|(t, h)| meaning(*t, h)).collect();
        let got: Vec<_> = decoded.iter().map(|(t, h)| meaning(*t, h)).collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn float_chunks_round_trip(series in arb_series()) {
        let mut chunks = vec![FloatHistogramChunk::new()];
        for (t, h) in &series {
            let f = h.to_float();
            if let HistogramAppend::NewChunk(next) = chunks.last_mut().unwrap().append(*t, &f, None).unwrap() {
                chunks.push(next);
            }
        }
        let mut decoded = Vec::new();
        for c in &chunks {
            let samples = decode_float_histograms(c.bytes()).unwrap();
            prop_assert_eq!(samples.len(), usize::from(c.num_samples()));
            decoded.extend(samples);
            let restored = FloatHistogramChunk::from_bytes(c.bytes().to_vec()).unwrap();
            prop_assert_eq!(restored.bytes(), c.bytes());
        }
        let meaning = |t: i64, h: &FloatHistogram| {
            (t, h.schema, h.count.to_bits(), h.zero_count.to_bits(), h.sum.to_bits(),
             positive_by_index(&h.positive_spans, h.positive_buckets.iter().copied()))
        };
        let want: Vec<_> = series.iter().map(|(t, h)| meaning(*t, &h.to_float())).collect();
        let got: Vec<_> = decoded.iter().map(|(t, h)| meaning(*t, h)).collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn mutated_chunks_never_panic(series in arb_series(), flips in proptest::collection::vec(any::<u32>(), 1..6), cut in any::<u16>()) {
        let chunks = encode_int(&series);
        let mut float = FloatHistogramChunk::new();
        for (t, h) in &series {
            if let Ok(HistogramAppend::NewChunk(_)) = float.append(*t, &h.to_float(), None) {
                break;
            }
        }
        for (bytes, is_float) in [(chunks[0].bytes().to_vec(), false), (float.bytes().to_vec(), true)] {
            let mut mutated = bytes.clone();
            for f in &flips {
                let bit = *f as usize % (mutated.len() * 8);
                mutated[bit / 8] ^= 0x80 >> (bit % 8);
            }
            let _ = decode_histograms(&mutated);
            let _ = decode_float_histograms(&mutated);
            let _ = HistogramChunk::from_bytes(mutated.clone());
            let _ = FloatHistogramChunk::from_bytes(mutated);
            let short = &bytes[..usize::from(cut) % (bytes.len() + 1)];
            let (int_result, float_result) = (decode_histograms(short), decode_float_histograms(short));
            // The last byte always holds bits of the last sample: a chunk cut short does not decode.
            if short.len() < bytes.len() && bytes.len() > HISTOGRAM_HEADER_LEN {
                let failed = if is_float { float_result.is_err() } else { int_result.is_err() };
                prop_assert!(failed, "a chunk of {} bytes cut to {} decodes", bytes.len(), short.len());
            }
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = decode_histograms(&bytes);
        let _ = decode_float_histograms(&bytes);
        if let Ok(mut c) = HistogramChunk::from_bytes(bytes.clone()) {
            let _ = c.append(i64::MAX, &hist(1, 0, 1.0, 0, &[1]), None);
        }
        if let Ok(mut c) = FloatHistogramChunk::from_bytes(bytes) {
            let _ = c.append(i64::MAX, &hist(1, 0, 1.0, 0, &[1]).to_float(), None);
        }
    }
}

fn is_stale(h: &Histogram) -> bool {
    h.sum.to_bits() == STALE_NAN_BITS
}

#[test]
fn custom_bucket_chunks() {
    let h = |count: u64, counts: &[i64], bounds: Vec<f64>| Histogram {
        schema: CUSTOM_BUCKETS_SCHEMA,
        count,
        sum: 1.0,
        positive_spans: spans(&[(0, counts.len() as u32)]),
        positive_buckets: deltas_from_absolute(counts),
        custom_values: bounds,
        ..Default::default()
    };
    let mut c = HistogramChunk::new();
    append(&mut c, 0, &h(3, &[1, 2], vec![0.25, 1e6]));
    assert!(matches!(
        append(&mut c, 1, &h(4, &[1, 3], vec![0.25, 1e6])),
        HistogramAppend::Appended
    ));
    assert!(
        matches!(append(&mut c, 2, &h(5, &[1, 4], vec![0.5, 1e6])), HistogramAppend::NewChunk(n) if n.counter_reset_header() == CounterResetHeader::CounterReset)
    );
    let got = decode_histograms(c.bytes()).unwrap();
    assert_eq!(got[1].1.custom_values, vec![0.25, 1e6]);
    got[1].1.validate().unwrap();
}

#[test]
fn a_chunk_is_weighed_by_its_layout_without_decoding_it() {
    let mut c = HistogramChunk::new();
    assert_eq!(
        histogram_chunk_size(c.bytes()),
        Some(heddle_model::HistogramSize::default()),
        "empty"
    );
    append(
        &mut c,
        0,
        &Histogram {
            schema: CUSTOM_BUCKETS_SCHEMA,
            count: 3,
            sum: 1.0,
            positive_spans: spans(&[(0, 1), (1, 1)]),
            positive_buckets: deltas_from_absolute(&[1, 2]),
            custom_values: vec![0.25, 1.0, 1e6],
            ..Default::default()
        },
    );
    let want = heddle_model::HistogramSize { buckets: 2, layout: 5 };
    assert_eq!(histogram_chunk_size(c.bytes()), Some(want));
    assert_eq!(decode_histograms(c.bytes()).unwrap()[0].1.size(), want);
    let mut f = FloatHistogramChunk::new();
    f.append(0, &hist(4, 0, 1.0, -3, &[1, 0, 3]).to_float(), None).unwrap();
    let want = heddle_model::HistogramSize { buckets: 3, layout: 1 };
    assert_eq!(histogram_chunk_size(f.bytes()), Some(want));
    // Too short for its header or its layout.
    assert_eq!(histogram_chunk_size(&c.bytes()[..2]), None);
    assert_eq!(histogram_chunk_size(&[0, 1, 0]), None);
}
