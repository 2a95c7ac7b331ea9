//! Property tests: the arena decoder agrees with prost on everything prost encodes, re-framing raw series is
//! lossless, and no input (random or a mutated valid encoding) makes the decoder or snappy panic.

use super::wire::put_varint;
use super::*;
use crate::prometheus::{
    BucketSpan, Exemplar, Histogram, Label, MetricMetadata, Sample, TimeSeries, WriteRequest, histogram,
};
use bumpalo::Bump;
use prop::collection::vec;
use proptest::prelude::*;
use prost::Message;

fn any_string() -> impl Strategy<Value = String> {
    // Arbitrary Unicode scalar values, including NUL, newlines and multi-byte characters.
    vec(any::<char>(), 0..12).prop_map(String::from_iter)
}

fn any_label() -> impl Strategy<Value = Label> {
    (any_string(), any_string()).prop_map(|(name, value)| Label { name, value })
}

fn any_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<u64>().prop_map(f64::from_bits),
        Just(f64::from_bits(heddle_model::STALE_NAN_BITS)),
        Just(f64::NAN),
        Just(-0.0),
        Just(f64::INFINITY),
        any::<f64>(),
    ]
}

fn any_sample() -> impl Strategy<Value = Sample> {
    (any_f64(), any::<i64>()).prop_map(|(value, timestamp)| Sample { value, timestamp })
}

fn any_exemplar() -> impl Strategy<Value = Exemplar> {
    (vec(any_label(), 0..3), any_f64(), any::<i64>()).prop_map(|(labels, value, timestamp)| Exemplar {
        labels,
        value,
        timestamp,
    })
}

fn any_histogram() -> impl Strategy<Value = Histogram> {
    (
        any::<u64>(),
        any_f64(),
        -4i32..8,
        vec(any::<i64>(), 0..4),
        vec(any_f64(), 0..3),
        any::<i64>(),
    )
        .prop_map(|(count, sum, schema, deltas, counts, timestamp)| Histogram {
            count: Some(histogram::Count::CountInt(count)),
            sum,
            schema,
            zero_count: Some(histogram::ZeroCount::ZeroCountFloat(0.5)),
            positive_spans: vec![BucketSpan {
                offset: -1,
                length: deltas.len() as u32,
            }],
            positive_deltas: deltas,
            negative_counts: counts,
            timestamp,
            ..Default::default()
        })
}

fn any_series() -> impl Strategy<Value = TimeSeries> {
    (
        vec(any_label(), 0..6),
        vec(any_sample(), 0..6),
        vec(any_exemplar(), 0..2),
        // Histograms only now and then, as in real traffic.
        prop_oneof![6 => Just(vec![]), 1 => vec(any_histogram(), 1..3)],
    )
        .prop_map(|(labels, samples, exemplars, histograms)| TimeSeries {
            labels,
            samples,
            exemplars,
            histograms,
        })
}

fn any_metadata() -> impl Strategy<Value = MetricMetadata> {
    (0i32..8, any_string(), any_string(), any_string()).prop_map(|(t, name, help, unit)| MetricMetadata {
        r#type: t,
        metric_family_name: name,
        help,
        unit,
    })
}

fn any_write_request() -> impl Strategy<Value = WriteRequest> {
    (vec(any_series(), 0..6), vec(any_metadata(), 0..3))
        .prop_map(|(timeseries, metadata)| WriteRequest { timeseries, metadata })
}

/// An unknown field with number `field`, of any wire type (groups included), fully encoded.
fn any_unknown_field(numbers: std::ops::Range<u32>) -> impl Strategy<Value = Vec<u8>> {
    (numbers, 0u8..5, any::<u64>(), vec(any::<u8>(), 0..10)).prop_map(|(field, kind, n, bytes)| {
        let mut out = Vec::new();
        let key = |wire: u8, out: &mut Vec<u8>| put_varint(u64::from(field) << 3 | u64::from(wire), out);
        match kind {
            0 => {
                key(0, &mut out);
                put_varint(n, &mut out);
            }
            1 => {
                key(1, &mut out);
                out.extend(n.to_le_bytes());
            }
            2 => {
                key(2, &mut out);
                put_varint(bytes.len() as u64, &mut out);
                out.extend(&bytes);
            }
            3 => {
                key(5, &mut out);
                out.extend((n as u32).to_le_bytes());
            }
            _ => {
                // A group holding a varint and a nested empty group.
                key(3, &mut out);
                put_varint(1 << 3, &mut out);
                put_varint(n, &mut out);
                put_varint(2 << 3 | 3, &mut out);
                put_varint(2 << 3 | 4, &mut out);
                key(4, &mut out);
            }
        }
        out
    })
}

fn frame(field: u64, payload: &[u8], out: &mut Vec<u8>) {
    put_varint(field << 3 | 2, out);
    put_varint(payload.len() as u64, out);
    out.extend_from_slice(payload);
}

/// Decodes `body` with both decoders and checks every decoded value, bit for bit.
fn assert_agrees_with_prost(body: &[u8]) -> Result<(), TestCaseError> {
    let want = WriteRequest::decode(body).map_err(|e| TestCaseError::fail(format!("prost: {e}")))?;
    let arena = Bump::new();
    let got = decode_write_request(&arena, body).map_err(|e| TestCaseError::fail(format!("arena: {e}")))?;
    prop_assert_eq!(got.metadata, want.metadata.len());
    prop_assert_eq!(got.timeseries.len(), want.timeseries.len());
    for (i, (g, w)) in got.timeseries.iter().zip(&want.timeseries).enumerate() {
        let got_labels: Vec<_> = g.labels.iter().map(|l| (l.name, l.value)).collect();
        let want_labels: Vec<_> = w.labels.iter().map(|l| (l.name.as_str(), l.value.as_str())).collect();
        prop_assert_eq!(got_labels, want_labels, "series {}", i);
        let got_samples: Vec<_> = g.samples.iter().map(|s| (s.t, s.v.to_bits())).collect();
        let want_samples: Vec<_> = w.samples.iter().map(|s| (s.timestamp, s.value.to_bits())).collect();
        prop_assert_eq!(got_samples, want_samples, "series {}", i);
        prop_assert_eq!(g.exemplars as usize, w.exemplars.len(), "series {}", i);
        prop_assert_eq!(g.histograms as usize, w.histograms.len(), "series {}", i);
        // Compare encodings, not values: NaN != NaN.
        let raw = TimeSeries::decode(g.raw).map_err(|e| TestCaseError::fail(format!("raw series {i}: {e}")))?;
        prop_assert_eq!(raw.encode_to_vec(), w.encode_to_vec(), "series {}", i);
    }

    let mut reframed = Vec::new();
    encode_write_request_raw(got.timeseries.iter().map(|t| t.raw), &mut reframed);
    let reframed = WriteRequest::decode(reframed.as_slice()).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let want_series = WriteRequest {
        timeseries: want.timeseries,
        metadata: vec![],
    };
    prop_assert_eq!(reframed.encode_to_vec(), want_series.encode_to_vec());
    Ok(())
}

/// Whatever the decoder accepts, it accepts again after re-framing its raw series, with the same values.
fn assert_reframe_is_stable(body: &[u8]) -> Result<(), TestCaseError> {
    let arena = Bump::new();
    let Ok(first) = decode_write_request(&arena, body) else {
        return Ok(());
    };
    let mut reframed = Vec::new();
    encode_write_request_raw(first.timeseries.iter().map(|t| t.raw), &mut reframed);
    let second = decode_write_request(&arena, &reframed).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(first.timeseries.len(), second.timeseries.len());
    for (a, b) in first.timeseries.iter().zip(&second.timeseries) {
        prop_assert_eq!(a.labels.as_slice(), b.labels.as_slice());
        prop_assert_eq!(a.raw, b.raw);
        prop_assert_eq!((a.exemplars, a.histograms), (b.exemplars, b.histograms));
        prop_assert!(a.samples.iter().zip(&b.samples).all(|(x, y)| x.bit_eq(y)));
    }
    Ok(())
}

#[derive(Debug, Clone)]
enum Mutation {
    FlipBit(usize, u8),
    Truncate(usize),
    Insert(usize, u8),
    Remove(usize),
    Overwrite(usize, u8),
}

fn any_mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(i, b)| Mutation::FlipBit(i, b)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        any::<usize>().prop_map(Mutation::Remove),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Overwrite(i, b)),
    ]
}

fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        let len = bytes.len();
        match *m {
            Mutation::FlipBit(i, bit) if len > 0 => bytes[i % len] ^= 1 << bit,
            Mutation::Truncate(i) => bytes.truncate(i % (len + 1)),
            Mutation::Insert(i, b) => bytes.insert(i % (len + 1), b),
            Mutation::Remove(i) if len > 0 => {
                bytes.remove(i % len);
            }
            Mutation::Overwrite(i, b) if len > 0 => bytes[i % len] = b,
            _ => {}
        }
    }
    bytes
}

proptest! {
    #[test]
    fn agrees_with_prost(req in any_write_request()) {
        let body = req.encode_to_vec();
        assert_agrees_with_prost(&body)?;
        if req.metadata.is_empty() {
            // Re-framing the raw slices reproduces prost's own encoding byte for byte.
            let arena = Bump::new();
            let got = decode_write_request(&arena, &body).unwrap();
            let mut reframed = Vec::new();
            encode_write_request_raw(got.timeseries.iter().map(|t| t.raw), &mut reframed);
            prop_assert_eq!(&reframed, &body);
        }
    }

    #[test]
    fn skips_unknown_fields_like_prost(
        req in any_write_request(),
        series_unknown in vec(any_unknown_field(5..2000), 0..3),
        top_unknown in vec(any_unknown_field(4..2000), 0..3),
        reserved_source in any::<bool>(),
    ) {
        let mut body = Vec::new();
        for u in &top_unknown {
            body.extend(u);
        }
        if reserved_source {
            // Cortex's `source` field, reserved in the schema.
            body.extend([0x10, 1]);
        }
        for ts in &req.timeseries {
            let mut payload = ts.encode_to_vec();
            for u in &series_unknown {
                payload.extend(u);
            }
            frame(1, &payload, &mut body);
        }
        for md in &req.metadata {
            frame(3, &md.encode_to_vec(), &mut body);
        }
        assert_agrees_with_prost(&body)?;
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..256)) {
        let arena = Bump::new();
        let _ = decode_write_request(&arena, &bytes);
        let _ = snappy_decompress_into(&arena, &bytes, 1 << 20);
        assert_reframe_is_stable(&bytes)?;
    }

    #[test]
    fn mutated_encodings_never_panic(req in any_write_request(), mutations in vec(any_mutation(), 1..4)) {
        let body = mutate(req.encode_to_vec(), &mutations);
        let arena = Bump::new();
        let ours = decode_write_request(&arena, &body);
        // prost checks nested messages we only frame-check (exemplars, metadata), so it is at least as strict.
        if WriteRequest::decode(body.as_slice()).is_ok() {
            prop_assert!(ours.is_ok(), "prost accepts what we refuse: {:?}", ours.err());
            assert_agrees_with_prost(&body)?;
        }
        assert_reframe_is_stable(&body)?;
        // Allocation stays proportional to the input.
        prop_assert!(arena.allocated_bytes() <= 4096 + 64 * body.len(), "{} bytes for {}", arena.allocated_bytes(), body.len());

        let compressed = snap::raw::Encoder::new().compress_vec(&req.encode_to_vec()).unwrap();
        let compressed = mutate(compressed, &mutations);
        let _ = snappy_decompress_into(&arena, &compressed, 1 << 20);
    }

    #[test]
    fn snappy_round_trips(req in any_write_request()) {
        let body = req.encode_to_vec();
        let compressed = snap::raw::Encoder::new().compress_vec(&body).unwrap();
        let arena = Bump::new();
        let out = snappy_decompress_into(&arena, &compressed, body.len()).unwrap();
        prop_assert_eq!(out, body.as_slice());
        assert_agrees_with_prost(out)?;
    }
}

#[test]
fn last_occurrence_of_a_label_string_wins_as_in_prost() {
    // Label{name:"a", name:"b", value:"v"}: proto3 keeps the last scalar.
    let label = [0x0a, 1, b'a', 0x0a, 1, b'b', 0x12, 1, b'v'];
    let mut series = Vec::new();
    frame(1, &label, &mut series);
    let mut body = Vec::new();
    frame(1, &series, &mut body);
    proptest::test_runner::TestRunner::default()
        .run(&Just(()), |()| assert_agrees_with_prost(&body))
        .unwrap();
    let arena = Bump::new();
    let req = decode_write_request(&arena, &body).unwrap();
    assert_eq!(
        req.timeseries[0].labels[0],
        heddle_model::LabelRef { name: "b", value: "v" }
    );
}

#[test]
fn pooled_arena_decodes_a_compressed_request() {
    let req = WriteRequest {
        timeseries: vec![TimeSeries {
            labels: vec![Label {
                name: "__name__".into(),
                value: "up".into(),
            }],
            samples: vec![Sample {
                value: 1.0,
                timestamp: 1_700_000_000_000,
            }],
            ..Default::default()
        }],
        metadata: vec![],
    };
    let compressed = snap::raw::Encoder::new().compress_vec(&req.encode_to_vec()).unwrap();
    let pool = ArenaPool::new(1, 1 << 20);
    for _ in 0..3 {
        let arena = pool.get();
        let body = snappy_decompress_into(&arena, &compressed, 1 << 20).unwrap();
        let decoded = decode_write_request(&arena, body).unwrap();
        assert_eq!(decoded.timeseries[0].labels[0].value, "up");
        assert_eq!(decoded.timeseries[0].samples[0].t, 1_700_000_000_000);
    }
    assert_eq!(pool.idle(), 1);
    assert_eq!(pool.arenas_dropped(), 0);
}
