//! Property tests: the arena decoder agrees with prost on everything prost encodes, re-framing raw series is
//! lossless, no input (random or a mutated valid encoding) makes the decoder or snappy panic, and no input
//! decodes to more than the amplification bound.

use super::wire::put_varint;
use super::*;
use crate::error::DecodeError;
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

/// Histograms of either kind, as the wire allows them (counts need not add up: that is validation's job).
fn any_histogram() -> impl Strategy<Value = Histogram> {
    (
        any::<u64>(),
        any_f64(),
        -4i32..8,
        vec(any::<i64>(), 0..4),
        vec(any_f64(), 0..3),
        any::<i64>(),
        any::<bool>(),
    )
        .prop_map(|(count, sum, schema, deltas, counts, timestamp, float)| {
            let int = Histogram {
                count: Some(histogram::Count::CountInt(count)),
                sum,
                schema,
                zero_count: Some(histogram::ZeroCount::ZeroCountInt(1)),
                positive_spans: vec![BucketSpan {
                    offset: -1,
                    length: deltas.len() as u32,
                }],
                positive_deltas: deltas,
                timestamp,
                ..Default::default()
            };
            if !float {
                return int;
            }
            Histogram {
                count: Some(histogram::Count::CountFloat(count as f64)),
                zero_count: Some(histogram::ZeroCount::ZeroCountFloat(0.5)),
                positive_spans: vec![],
                positive_deltas: vec![],
                negative_spans: vec![BucketSpan {
                    offset: 3,
                    length: counts.len() as u32,
                }],
                negative_counts: counts,
                ..int
            }
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
    let got_metadata: Vec<_> = got
        .metadata
        .iter()
        .map(|m| (m.kind.wire(), m.family, m.help, m.unit))
        .collect();
    let want_metadata: Vec<_> = want
        .metadata
        .iter()
        .map(|m| {
            // A type no version defines reads as unknown (0), as Prometheus reads it.
            let kind = if (0..8).contains(&m.r#type) { m.r#type } else { 0 };
            (kind, m.metric_family_name.as_str(), m.help.as_str(), m.unit.as_str())
        })
        .collect();
    prop_assert_eq!(got_metadata, want_metadata);
    prop_assert_eq!(got.timeseries.len(), want.timeseries.len());
    for (i, (g, w)) in got.timeseries.iter().zip(&want.timeseries).enumerate() {
        let got_labels: Vec<_> = g.labels.iter().map(|l| (l.name, l.value)).collect();
        let want_labels: Vec<_> = w.labels.iter().map(|l| (l.name.as_str(), l.value.as_str())).collect();
        prop_assert_eq!(got_labels, want_labels, "series {}", i);
        let got_samples: Vec<_> = g.samples.iter().map(|s| (s.t, s.v.to_bits())).collect();
        let want_samples: Vec<_> = w.samples.iter().map(|s| (s.timestamp, s.value.to_bits())).collect();
        prop_assert_eq!(got_samples, want_samples, "series {}", i);
        let got_exemplars: Vec<_> = g
            .exemplars
            .iter()
            .map(|e| {
                let labels: Vec<_> = e.labels.iter().map(|l| (l.name, l.value)).collect();
                (labels, e.t, e.value.to_bits())
            })
            .collect();
        let want_exemplars: Vec<_> = w
            .exemplars
            .iter()
            .map(|e| {
                let labels: Vec<_> = e.labels.iter().map(|l| (l.name.as_str(), l.value.as_str())).collect();
                (labels, e.timestamp, e.value.to_bits())
            })
            .collect();
        prop_assert_eq!(got_exemplars, want_exemplars, "series {}", i);
        let histograms: Vec<_> = g
            .histograms
            .iter()
            .map(|h| h.decode().map(|h| crate::histogram_to_proto(&h).encode_to_vec()))
            .collect::<Result<_, _>>()
            .map_err(|e| TestCaseError::fail(format!("histogram of series {i}: {e}")))?;
        let want_histograms: Vec<_> = w.histograms.iter().map(|h| h.encode_to_vec()).collect();
        prop_assert_eq!(histograms, want_histograms, "series {}", i);
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
    for (a, b) in first.timeseries.iter().zip(second.timeseries) {
        prop_assert_eq!(a.labels, b.labels);
        prop_assert_eq!(a.raw, b.raw);
        prop_assert_eq!(a.exemplars.len(), b.exemplars.len());
        fn histograms<'a>(s: &TimeSeriesRef<'a>) -> Vec<(i64, &'a [u8])> {
            s.histograms.iter().map(|h| (h.t, h.raw())).collect()
        }
        prop_assert_eq!(histograms(a), histograms(b));
        prop_assert!(a.samples.iter().zip(b.samples).all(|(x, y)| x.bit_eq(y)));
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
        // Where prost accepts, so do we, except for a histogram value that its wire type allows but the message
        // cannot mean (integer and float counts mixed, an unknown reset hint), which prost does not look at.
        if WriteRequest::decode(body.as_slice()).is_ok() {
            match &ours {
                Ok(_) => assert_agrees_with_prost(&body)?,
                Err(DecodeError::InvalidValue { what, .. }) => {
                    prop_assert!(what.starts_with("prometheus.Histogram") || what.starts_with("prometheus.BucketSpan"), "refused {}", what)
                }
                Err(e) => prop_assert!(false, "prost accepts what we refuse: {:?}", e),
            }
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

/// Appends the wire encoding of a `TimeSeries` field (`WriteRequest` field 1) holding `series`.
fn series_field(series: &[u8], out: &mut Vec<u8>) {
    frame(1, series, out);
}

/// A request of `n` copies of the series `series`, and one of a single series holding `n` copies of
/// `entry` as field `field` (1 labels, 2 samples) after a `__name__` label.
fn repeated(series: &[u8], n: usize) -> Vec<u8> {
    let mut body = Vec::new();
    for _ in 0..n {
        series_field(series, &mut body);
    }
    body
}

fn one_series_of(field: u64, entry: &[u8], n: usize) -> Vec<u8> {
    let mut series = Vec::new();
    frame(
        1,
        &[0x0a, 8, b'_', b'_', b'n', b'a', b'm', b'e', b'_', b'_', 0x12, 1, b'x'],
        &mut series,
    );
    for _ in 0..n {
        frame(field, entry, &mut series);
    }
    let mut body = Vec::new();
    series_field(&series, &mut body);
    body
}

/// Arena bytes in use (the capacity bumpalo reserved but never handed out is untouched, not resident).
fn used(arena: &mut Bump) -> usize {
    arena.iter_allocated_chunks().map(|c| c.len()).sum()
}

/// Decodes `body` into a fresh arena; asserts the decoded view stays within [`max_decoded_bytes`] of the
/// input, or that a refused request allocated nothing. Returns whether it was accepted.
fn assert_bounded(name: &str, body: &[u8]) -> Result<bool, TestCaseError> {
    let mut arena = Bump::new();
    let accepted = match decode_write_request(&arena, body) {
        Ok(_) => true,
        Err(DecodeError::Degenerate { decoded, input, .. }) => {
            prop_assert_eq!(input, body.len(), "case {}", name);
            prop_assert!(decoded > max_decoded_bytes(body.len()), "case {}", name);
            false
        }
        Err(e) => return Err(TestCaseError::fail(format!("case {name}: {e}"))),
    };
    let in_use = used(&mut arena);
    let bound = max_decoded_bytes(body.len());
    prop_assert!(
        in_use <= bound,
        "case {}: {} bytes of input decoded into {} arena bytes, over {}",
        name,
        body.len(),
        in_use,
        bound
    );
    if !accepted {
        prop_assert_eq!(
            arena.allocated_bytes(),
            0,
            "case {}: a refused request allocates nothing",
            name
        );
    }
    Ok(accepted)
}

#[test]
fn adversarial_requests_decode_within_the_bound() {
    const N: usize = 300_000;
    let mut real_label = Vec::new();
    frame(1, b"a", &mut real_label);
    frame(2, b"b", &mut real_label);
    let mut sample = vec![0x09];
    sample.extend(1.5f64.to_le_bytes());
    sample.extend([0x10, 0x80, 0x80, 0x80, 0x80, 0x80, 0x32]);
    let mut tiny_series = Vec::new();
    frame(1, &real_label, &mut tiny_series);
    frame(2, &sample, &mut tiny_series);
    // name, body, accepted
    let cases: Vec<(&str, Vec<u8>, bool)> = vec![
        ("empty labels", one_series_of(1, &[], N), false),
        ("empty series", repeated(&[], N), false),
        ("series of one empty label", repeated(&[0x0a, 0], N), false),
        (
            "empty samples: 8 bytes each per 2, the ratio itself",
            one_series_of(2, &[], N),
            true,
        ),
        ("one-character labels", one_series_of(1, &real_label, N), true),
        ("many tiny samples with timestamps", one_series_of(2, &sample, N), true),
        (
            "tiny series of one label and one sample",
            repeated(&tiny_series, N),
            true,
        ),
        ("a tiny request is never refused", repeated(&[], 100), true),
    ];
    for (name, body, want) in cases {
        let accepted = assert_bounded(name, &body).unwrap();
        assert_eq!(accepted, want, "case {name}");
    }
}

fn degenerate_piece() -> impl Strategy<Value = Vec<u8>> {
    let real_label = {
        let mut l = Vec::new();
        frame(1, b"a", &mut l);
        frame(2, b"b", &mut l);
        l
    };
    prop_oneof![
        // an empty series
        Just(vec![0x0a, 0]),
        // a series of empty labels and empty samples
        (0usize..64, 0usize..64).prop_map(|(labels, samples)| {
            let mut s = Vec::new();
            for _ in 0..labels {
                frame(1, &[], &mut s);
            }
            for _ in 0..samples {
                frame(2, &[], &mut s);
            }
            let mut out = Vec::new();
            series_field(&s, &mut out);
            out
        }),
        // a series of short real labels
        (1usize..16).prop_map(move |labels| {
            let mut s = Vec::new();
            for _ in 0..labels {
                frame(1, &real_label, &mut s);
            }
            let mut out = Vec::new();
            series_field(&s, &mut out);
            out
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever mix of empty and tiny messages a request holds, its decoded view stays within
    /// `MAX_DECODED_BYTES_PER_INPUT_BYTE * input + DECODED_BYTES_ALLOWANCE` arena bytes, or it is refused
    /// before anything is allocated.
    #[test]
    fn decoded_view_is_bounded_by_the_input(pieces in vec(degenerate_piece(), 1..200), repeat in 1usize..400) {
        let once: Vec<u8> = pieces.concat();
        let body = once.repeat(repeat);
        assert_bounded("generated", &body)?;
    }
}

// The canonical fast path against the general walker: on every input, the same view or the same error.

/// A field of a message being encoded: a known field, re-encodable with longer keys and lengths, or bytes
/// written as they are (an unknown field).
#[derive(Debug, Clone)]
enum WireField {
    /// Field `number` of wire type 2 with `payload`; `pad` extra bytes in its key and `len_pad` in its length.
    Len {
        number: u64,
        payload: Vec<u8>,
        pad: usize,
        len_pad: usize,
    },
    /// Field `number` of wire type `wire` whose encoded value is `value`.
    Scalar {
        number: u64,
        wire: u8,
        value: Vec<u8>,
        pad: usize,
    },
    Verbatim(Vec<u8>),
}

/// `value` as a varint of its minimal length plus `pad` bytes (non-minimal, which decoders accept), at most 10.
fn put_padded_varint(value: u64, pad: usize, out: &mut Vec<u8>) {
    let minimal = (64 - value.leading_zeros() as usize).div_ceil(7).max(1);
    let len = (minimal + pad).min(10);
    for i in 0..len {
        let group = (value >> (7 * i).min(63)) as u8 & 0x7f;
        let group = if i >= minimal { 0 } else { group };
        out.push(if i + 1 < len { group | 0x80 } else { group });
    }
}

fn encode_fields(fields: &[WireField]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in fields {
        match f {
            WireField::Len {
                number,
                payload,
                pad,
                len_pad,
            } => {
                put_padded_varint(number << 3 | 2, *pad, &mut out);
                put_padded_varint(payload.len() as u64, *len_pad, &mut out);
                out.extend(payload);
            }
            WireField::Scalar {
                number,
                wire,
                value,
                pad,
            } => {
                put_padded_varint(number << 3 | u64::from(*wire), *pad, &mut out);
                out.extend(value);
            }
            WireField::Verbatim(bytes) => out.extend(bytes),
        }
    }
    out
}

/// Which message a perturbation applies to.
#[derive(Debug, Clone, Copy)]
enum Level {
    Label,
    Sample,
    Series,
    Request,
}

/// One way of moving an encoding away from the canonical form, applied to the messages of `level` whose
/// index is `which` modulo 3 (so that a request mixes perturbed and canonical messages).
#[derive(Debug, Clone)]
enum Perturbation {
    Unknown(Level, usize, Vec<u8>, usize),
    Reverse(Level, usize),
    Duplicate(Level, usize, usize),
    LongKey(Level, usize, usize, usize),
    LongLength(Level, usize, usize, usize),
    ExplicitEmptyName(usize),
}

fn any_level() -> impl Strategy<Value = Level> {
    prop_oneof![
        Just(Level::Label),
        Just(Level::Sample),
        Just(Level::Series),
        Just(Level::Request)
    ]
}

fn any_perturbation() -> impl Strategy<Value = Perturbation> {
    prop_oneof![
        (any_level(), 0usize..3, any_unknown_field(3..40), any::<usize>())
            .prop_map(|(l, w, f, at)| Perturbation::Unknown(l, w, f, at)),
        (any_level(), 0usize..3).prop_map(|(l, w)| Perturbation::Reverse(l, w)),
        (any_level(), 0usize..3, any::<usize>()).prop_map(|(l, w, i)| Perturbation::Duplicate(l, w, i)),
        (any_level(), 0usize..3, any::<usize>(), 1usize..4).prop_map(|(l, w, i, p)| Perturbation::LongKey(l, w, i, p)),
        (any_level(), 0usize..3, any::<usize>(), 1usize..4)
            .prop_map(|(l, w, i, p)| Perturbation::LongLength(l, w, i, p)),
        (0usize..3).prop_map(Perturbation::ExplicitEmptyName),
    ]
}

/// Applies the perturbations meant for message `index` of `level` to its fields.
fn perturb(fields: &mut Vec<WireField>, level: Level, index: usize, perturbations: &[Perturbation]) {
    let applies =
        |l: Level, which: usize| std::mem::discriminant(&l) == std::mem::discriminant(&level) && index % 3 == which;
    for p in perturbations {
        match p {
            Perturbation::Unknown(l, w, bytes, at) if applies(*l, *w) => {
                fields.insert(at % (fields.len() + 1), WireField::Verbatim(bytes.clone()));
            }
            Perturbation::Reverse(l, w) if applies(*l, *w) => fields.reverse(),
            Perturbation::Duplicate(l, w, i) if applies(*l, *w) && !fields.is_empty() => {
                let i = i % fields.len();
                fields.insert(i + 1, fields[i].clone());
            }
            Perturbation::LongKey(l, w, i, extra) if applies(*l, *w) && !fields.is_empty() => {
                let i = i % fields.len();
                if let WireField::Len { pad, .. } | WireField::Scalar { pad, .. } = &mut fields[i] {
                    *pad = *extra;
                }
            }
            Perturbation::LongLength(l, w, i, extra) if applies(*l, *w) && !fields.is_empty() => {
                let i = i % fields.len();
                if let WireField::Len { len_pad, .. } = &mut fields[i] {
                    *len_pad = *extra;
                }
            }
            Perturbation::ExplicitEmptyName(w)
                if matches!(level, Level::Label)
                    && index % 3 == *w
                    && !matches!(fields.first(), Some(WireField::Len { number: 1, .. })) =>
            {
                fields.insert(0, len_field(1, Vec::new()));
            }
            _ => {}
        }
    }
}

fn len_field(number: u64, payload: Vec<u8>) -> WireField {
    WireField::Len {
        number,
        payload,
        pad: 0,
        len_pad: 0,
    }
}

/// `req` encoded field by field as prost does (the canonical form), with `perturbations` applied on the way.
fn encode_perturbed(req: &WriteRequest, perturbations: &[Perturbation]) -> Vec<u8> {
    let (mut label_index, mut sample_index) = (0, 0);
    let mut request = Vec::new();
    for (series_index, ts) in req.timeseries.iter().enumerate() {
        let mut series = Vec::new();
        for l in &ts.labels {
            let mut fields = Vec::new();
            if !l.name.is_empty() {
                fields.push(len_field(1, l.name.clone().into_bytes()));
            }
            if !l.value.is_empty() {
                fields.push(len_field(2, l.value.clone().into_bytes()));
            }
            perturb(&mut fields, Level::Label, label_index, perturbations);
            label_index += 1;
            series.push(len_field(1, encode_fields(&fields)));
        }
        for s in &ts.samples {
            let mut fields = Vec::new();
            if s.value != 0.0 {
                fields.push(WireField::Scalar {
                    number: 1,
                    wire: 1,
                    value: s.value.to_le_bytes().to_vec(),
                    pad: 0,
                });
            }
            if s.timestamp != 0 {
                let mut value = Vec::new();
                put_varint(s.timestamp as u64, &mut value);
                fields.push(WireField::Scalar {
                    number: 2,
                    wire: 0,
                    value,
                    pad: 0,
                });
            }
            perturb(&mut fields, Level::Sample, sample_index, perturbations);
            sample_index += 1;
            series.push(len_field(2, encode_fields(&fields)));
        }
        series.extend(ts.exemplars.iter().map(|e| len_field(3, e.encode_to_vec())));
        series.extend(ts.histograms.iter().map(|h| len_field(4, h.encode_to_vec())));
        perturb(&mut series, Level::Series, series_index, perturbations);
        request.push(len_field(1, encode_fields(&series)));
    }
    request.extend(req.metadata.iter().map(|m| len_field(3, m.encode_to_vec())));
    perturb(&mut request, Level::Request, 0, perturbations);
    encode_fields(&request)
}

/// Label strings as real senders write them: short ASCII names and values, some long enough for a two-byte
/// length, and now and then arbitrary Unicode.
fn any_realistic_label() -> impl Strategy<Value = Label> {
    let text = prop_oneof![
        6 => "[a-zA-Z0-9_:./-]{0,24}",
        1 => "[a-z]{100,200}",
        1 => any_string(),
    ];
    ("[a-zA-Z_][a-zA-Z0-9_]{0,12}", text).prop_map(|(name, value)| Label { name, value })
}

fn any_realistic_request() -> impl Strategy<Value = WriteRequest> {
    let series = (vec(any_realistic_label(), 0..9), vec(any_sample(), 0..3)).prop_map(|(labels, samples)| TimeSeries {
        labels,
        samples,
        ..Default::default()
    });
    vec(series, 0..8).prop_map(|timeseries| WriteRequest {
        timeseries,
        metadata: vec![],
    })
}

/// Decodes `body` along both paths and checks they agree: the same shape and the same view (every string
/// the same slice of the body, every sample bit for bit), or the same error.
fn assert_paths_agree(body: &[u8]) -> Result<(), TestCaseError> {
    use super::decode::{Path, fill, measure};
    let (fast, general) = (measure(body, Path::Canonical), measure(body, Path::General));
    let (fast, general) = match (fast, general) {
        (Ok(f), Ok(g)) => (f, g),
        (f, g) => {
            prop_assert_eq!(f.err(), g.err());
            return Ok(());
        }
    };
    prop_assert_eq!(fast.shape(), general.shape());
    let (fast_arena, general_arena) = (Bump::new(), Bump::new());
    let (fast, general) = match (
        fill(&fast_arena, fast, Path::Canonical),
        fill(&general_arena, general, Path::General),
    ) {
        (Ok(f), Ok(g)) => (f, g),
        (f, g) => {
            prop_assert_eq!(f.err(), g.err());
            return Ok(());
        }
    };
    prop_assert_eq!(fast.metadata, general.metadata);
    prop_assert_eq!(fast.timeseries.len(), general.timeseries.len());
    let same_slice = |a: &[u8], b: &[u8]| a.as_ptr() == b.as_ptr() && a.len() == b.len();
    for (i, (f, g)) in fast.timeseries.iter().zip(general.timeseries).enumerate() {
        prop_assert!(same_slice(f.raw, g.raw), "series {} raw", i);
        prop_assert_eq!(f.labels, g.labels, "series {}", i);
        for (a, b) in f.labels.iter().zip(g.labels) {
            prop_assert!(
                same_slice(a.name.as_bytes(), b.name.as_bytes()),
                "series {} name {}",
                i,
                a.name
            );
            prop_assert!(
                same_slice(a.value.as_bytes(), b.value.as_bytes()),
                "series {} value {}",
                i,
                a.value
            );
        }
        prop_assert_eq!(f.samples.len(), g.samples.len(), "series {}", i);
        prop_assert!(
            f.samples.iter().zip(g.samples).all(|(a, b)| a.bit_eq(b)),
            "series {}",
            i
        );
        // Compare bits, not values: NaN != NaN.
        fn bits<'a>(e: &[heddle_model::ExemplarRef<'a>]) -> Vec<(Vec<heddle_model::LabelRef<'a>>, i64, u64)> {
            e.iter().map(|e| (e.labels.to_vec(), e.t, e.value.to_bits())).collect()
        }
        prop_assert_eq!(bits(f.exemplars), bits(g.exemplars), "series {}", i);
        prop_assert_eq!(f.histograms, g.histograms, "series {}", i);
    }
    Ok(())
}

proptest! {
    #[test]
    fn fast_and_general_paths_agree(
        req in prop_oneof![any_realistic_request(), any_write_request()],
        perturbations in vec(any_perturbation(), 0..4),
        mutations in vec(any_mutation(), 0..3),
    ) {
        let canonical = req.encode_to_vec();
        assert_paths_agree(&canonical)?;
        let perturbed = encode_perturbed(&req, &perturbations);
        if perturbations.is_empty() {
            prop_assert_eq!(&perturbed, &canonical, "the test encoder writes prost's encoding");
        }
        assert_paths_agree(&perturbed)?;
        assert_paths_agree(&mutate(perturbed.clone(), &mutations))?;
        for cut in [1, 2, 7, perturbed.len() / 2] {
            assert_paths_agree(&perturbed[..perturbed.len().saturating_sub(cut)])?;
        }
    }

    #[test]
    fn prost_encodings_take_the_fast_path(req in any_realistic_request()) {
        // Every series prost writes (no exemplars or histograms) is read by the fast path, not declined.
        for ts in &req.timeseries {
            let raw = ts.encode_to_vec();
            let counts = (ts.labels.len(), ts.samples.len());
            prop_assert_eq!(super::canonical::count_series(&raw), Some(counts));
            let mut labels = vec![heddle_model::LabelRef { name: "", value: "" }; counts.0];
            let mut samples = vec![heddle_model::Sample { t: 0, v: 0.0 }; counts.1];
            prop_assert_eq!(super::canonical::fill_series(&raw, &mut labels, &mut samples), Some(counts));
        }
    }
}

#[test]
fn paths_agree_on_hand_picked_corner_cases() {
    let cases: &[(&str, &[u8])] = &[
        ("empty", &[]),
        ("series length past the end", &[0x0a, 9, 0x0a]),
        (
            "invalid utf-8 before a framing error",
            &[0x0a, 5, 0x0a, 3, 0x0a, 1, 0xff, 0x0a, 9],
        ),
        ("label after sample", &[0x0a, 4, 0x12, 0, 0x0a, 0]),
        ("two-byte series key", &[0x8a, 0x00, 2, 0x0a, 0]),
        ("metadata then series", &[0x1a, 0, 0x0a, 2, 0x0a, 0]),
        ("sample value as varint", &[0x0a, 4, 0x12, 2, 0x08, 1]),
        (
            "overlong timestamp",
            &[
                0x0a, 13, 0x12, 11, 0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
            ],
        ),
    ];
    for (name, body) in cases {
        proptest::test_runner::TestRunner::default()
            .run(&Just(()), |()| assert_paths_agree(body))
            .unwrap_or_else(|e| panic!("case {name}: {e}"));
    }
}
