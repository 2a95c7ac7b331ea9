//! The protobuf walk against prost itself: on any input, a walk that fails means prost fails, a decode that
//! succeeds means the walk succeeded, and what decoding allocated (counted by the test allocator) is never
//! above the bound. Inputs: valid requests, the same with unknown fields of every wire type (groups nested
//! in groups) and repeated singular fields spliced in at every depth, and arbitrary bytes.

use super::*;
use crate::otlp::arbitrary;
use heddle_testkit::alloc::peak_of;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{ArrayValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{Gauge, metric::Data};
use proptest::prelude::*;
use prost::Message as _;
use prost::encoding::encode_varint;

/// prost's verdict on `bytes` against the walk's, and the bound against what decoding allocated.
fn agree(bytes: &[u8]) -> Result<(), TestCaseError> {
    let walked = decoded_bound(bytes);
    let mut decoded = None;
    let peak = peak_of(|| decoded = Some(ExportMetricsServiceRequest::decode(bytes).is_ok()));
    match (walked, decoded == Some(true)) {
        (Ok(bound), _) => prop_assert!(peak <= bound, "decoding took {peak} bytes, the bound is {bound}"),
        (Err(m), true) => prop_assert!(false, "prost decodes what the walk refused ({m})"),
        (Err(_), false) => {}
    }
    Ok(())
}

fn key(field: u32, wire: u8, out: &mut Vec<u8>) {
    encode_varint(u64::from(field) << 3 | u64::from(wire), out);
}

fn delimited(field: u32, payload: &[u8], out: &mut Vec<u8>) {
    key(field, 2, out);
    encode_varint(payload.len() as u64, out);
    out.extend_from_slice(payload);
}

fn gauge(points: usize) -> Vec<u8> {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "g".into(),
                    data: Some(Data::Gauge(Gauge {
                        data_points: vec![NumberDataPoint::default(); points],
                    })),
                    ..Metric::default()
                }],
                ..ScopeMetrics::default()
            }],
            ..ResourceMetrics::default()
        }],
    }
    .encode_to_vec()
}

/// The reproduction of issue 32: an empty group (field 99) before a gauge of empty points used to end the
/// walk, so the points went uncounted while prost decoded them.
#[test]
fn a_group_before_the_points_does_not_hide_them() {
    let points = 20_000;
    let mut body = vec![0x9B, 0x06, 0x9C, 0x06];
    body.extend(gauge(points));
    let bound = decoded_bound(&body).expect("prost reads it");
    assert!(
        bound >= points * 3 * size_of::<NumberDataPoint>(),
        "bound {bound} for {points} points"
    );
    agree(&body).unwrap();
}

/// Empty data points, two bytes each on the wire, are the worst case of the protobuf encoding: the bound
/// covers them at about a hundred and fifty times the body.
#[test]
fn empty_points_are_bounded() {
    let wire = gauge(50_000);
    agree(&wire).unwrap();
    let ratio = decoded_bound(&wire).unwrap() / wire.len();
    assert!((100..200).contains(&ratio), "bound {ratio} times the body");
}

/// Unknown fields of each wire type, before and inside each level of the request, are skipped and what
/// follows them counted.
#[test]
fn unknown_fields_of_every_wire_type_are_skipped() {
    let mut group = Vec::new();
    key(1, 0, &mut group);
    group.push(7);
    key(2, 3, &mut group); // a group in the group
    key(3, 1, &mut group);
    group.extend([0; 8]);
    key(2, 4, &mut group);
    delimited(4, b"in a group", &mut group);
    let unknowns: Vec<(&str, Vec<u8>)> = vec![
        ("varint", [0xA8, 0x06, 0x96, 0x01].to_vec()),
        ("fixed64", [0xA9, 0x06, 1, 2, 3, 4, 5, 6, 7, 8].to_vec()),
        ("fixed32", [0xAD, 0x06, 1, 2, 3, 4].to_vec()),
        ("delimited", [0xAA, 0x06, 2, 0xFF, 0xFF].to_vec()),
        ("empty group", [0xAB, 0x06, 0xAC, 0x06].to_vec()),
        ("nested group", {
            let mut g = vec![0xAB, 0x06];
            g.extend(&group);
            g.extend([0xAC, 0x06]);
            g
        }),
    ];
    let plain = decoded_bound(&gauge(1000)).unwrap();
    for (name, unknown) in &unknowns {
        let mut body = unknown.clone();
        body.extend(gauge(1000));
        body.extend(unknown);
        assert_eq!(decoded_bound(&body), Ok(plain), "{name}");
        assert!(
            ExportMetricsServiceRequest::decode(&body[..]).is_ok(),
            "{name}: prost reads it"
        );
    }
}

/// What prost refuses the walk refuses, with where and why.
#[test]
fn malformed_input_is_refused() {
    let mut deep_groups = Vec::new();
    for _ in 0..=RECURSION_LIMIT {
        key(99, 3, &mut deep_groups);
    }
    for _ in 0..=RECURSION_LIMIT {
        key(99, 4, &mut deep_groups);
    }
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("end group without start", vec![0x9C, 0x06], "end-group key without"),
        ("mismatched end group", vec![0x9B, 0x06, 0xA4, 0x06], "does not match"),
        ("unterminated group", vec![0x9B, 0x06, 0x08, 0x01], "truncated"),
        ("wire type 6", vec![0x0E], "wire type"),
        ("wire type 7", vec![0x0F], "wire type"),
        ("field 0", vec![0x02, 0x00], "field number 0"),
        ("key past 32 bits", vec![0x80, 0x80, 0x80, 0x80, 0x80, 0x01], "32 bits"),
        (
            "overlong varint",
            vec![0x78, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x02],
            "varint",
        ),
        ("length past the end", vec![0x0A, 0x05, 0x00], "past the end"),
        ("resource metrics as a varint", vec![0x08, 0x01], "not length-delimited"),
        ("groups past the recursion limit", deep_groups, "recursion limit"),
    ];
    for (name, body, why) in cases {
        let err = decoded_bound(&body).expect_err(name);
        assert!(err.to_string().contains(why), "{name}: {err}");
        assert!(
            ExportMetricsServiceRequest::decode(&body[..]).is_err(),
            "{name}: prost refuses it too"
        );
    }
}

/// A request whose attribute value nests arrays `depth` deep.
fn nested(depth: usize) -> Vec<u8> {
    let mut v = AnyValue {
        value: Some(any_value::Value::StringValue("x".into())),
    };
    for _ in 0..depth {
        v = AnyValue {
            value: Some(any_value::Value::ArrayValue(ArrayValue { values: vec![v] })),
        };
    }
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(opentelemetry_proto::tonic::resource::v1::Resource {
                attributes: vec![KeyValue {
                    key: "k".into(),
                    value: Some(v),
                    ..KeyValue::default()
                }],
                ..Default::default()
            }),
            ..ResourceMetrics::default()
        }],
    }
    .encode_to_vec()
}

/// Around prost's recursion limit, the walk refuses exactly what prost refuses.
#[test]
fn nesting_is_refused_where_prost_refuses_it() {
    for depth in 40..52 {
        let body = nested(depth);
        let prost = ExportMetricsServiceRequest::decode(&body[..]).is_ok();
        assert_eq!(decoded_bound(&body).is_ok(), prost, "depth {depth}");
        agree(&body).unwrap();
    }
}

/// A field key, value and what the key says its value is.
#[derive(Debug, Clone)]
enum Junk {
    Varint(u32, u64),
    Fixed64(u32),
    Fixed32(u32),
    Delimited(u32, Vec<u8>),
    Group(u32, Vec<Junk>),
}

impl Junk {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Junk::Varint(f, v) => {
                key(*f, 0, out);
                encode_varint(*v, out);
            }
            Junk::Fixed64(f) => {
                key(*f, 1, out);
                out.extend([0xAB; 8]);
            }
            Junk::Fixed32(f) => {
                key(*f, 5, out);
                out.extend([0xCD; 4]);
            }
            Junk::Delimited(f, bytes) => delimited(*f, bytes, out),
            Junk::Group(f, inner) => {
                key(*f, 3, out);
                for j in inner {
                    j.encode(out);
                }
                key(*f, 4, out);
            }
        }
    }
}

/// Unknown fields: numbers above every schema field (the schema's go up to 14).
fn junk() -> impl Strategy<Value = Junk> {
    let field = 15u32..3000;
    let leaf = prop_oneof![
        (field.clone(), any::<u64>()).prop_map(|(f, v)| Junk::Varint(f, v)),
        field.clone().prop_map(Junk::Fixed64),
        field.clone().prop_map(Junk::Fixed32),
        (field.clone(), prop::collection::vec(any::<u8>(), 0..12)).prop_map(|(f, b)| Junk::Delimited(f, b)),
    ];
    leaf.prop_recursive(4, 16, 4, move |inner| {
        (field.clone(), prop::collection::vec(inner, 0..4)).prop_map(|(f, js)| Junk::Group(f, js))
    })
}

/// The fields of `buf` when it reads as a message: `(key, value)` byte ranges, the value of a delimited field
/// being its payload.
fn fields(buf: &[u8]) -> Option<Vec<(u64, u8, std::ops::Range<usize>)>> {
    let mut out = Vec::new();
    let mut pos = 0;
    let varint = |pos: &mut usize| -> Option<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = *buf.get(*pos)?;
            *pos += 1;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Some(v);
            }
        }
        None
    };
    while pos < buf.len() {
        let k = varint(&mut pos)?;
        let wire = (k & 7) as u8;
        let start = pos;
        match wire {
            0 => {
                varint(&mut pos)?;
            }
            1 => pos += 8,
            5 => pos += 4,
            2 => {
                let len = varint(&mut pos)? as usize;
                let s = pos;
                pos = pos.checked_add(len)?;
                if pos > buf.len() {
                    return None;
                }
                out.push((k >> 3, wire, s..pos));
                continue;
            }
            _ => return None,
        }
        if pos > buf.len() || k >> 3 == 0 {
            return None;
        }
        out.push((k >> 3, wire, start..pos));
    }
    Some(out)
}

/// `buf` with `junk` spliced between its fields and into every delimited field that reads as a message,
/// and some delimited fields sent twice (the second time longer), choices driven by `seed`.
fn splice(buf: &[u8], junk: &[Junk], seed: &mut u64, depth: usize) -> Vec<u8> {
    let Some(fields) = fields(buf).filter(|_| depth < 12) else {
        return buf.to_vec();
    };
    let mut out = Vec::new();
    for (field, wire, range) in fields {
        if !junk.is_empty() && next(seed).is_multiple_of(3) {
            junk[(next(seed) % junk.len() as u64) as usize].encode(&mut out);
        }
        if wire == 2 {
            let payload = &buf[range];
            let inner = splice(payload, junk, seed, depth + 1);
            delimited(field as u32, &inner, &mut out);
            if next(seed).is_multiple_of(5) && fields_are_strings(payload) {
                let mut longer = payload.to_vec();
                longer.extend(std::iter::repeat_n(b'z', (next(seed) % 40) as usize));
                delimited(field as u32, &longer, &mut out);
            }
        } else {
            encode_varint(field << 3 | u64::from(wire), &mut out);
            out.extend_from_slice(&buf[range]);
        }
    }
    out
}

/// Whether `payload` is text rather than a message (a repeat of it must stay valid UTF-8 to decode).
fn fields_are_strings(payload: &[u8]) -> bool {
    std::str::from_utf8(payload).is_ok_and(|s| s.chars().all(|c| !c.is_control()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random bytes: the walk never panics and agrees with prost.
    #[test]
    fn arbitrary_bytes_agree_with_prost(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        agree(&bytes)?;
    }

    /// Valid requests, with unknown fields of every wire type and nested groups spliced in at every depth
    /// and string fields sent twice: the walk agrees with prost and bounds what it allocates.
    #[test]
    fn spliced_requests_agree_with_prost(
        req in arbitrary::request(),
        junk in prop::collection::vec(junk(), 0..6),
        seed in 1u64..,
    ) {
        let wire = req.encode_to_vec();
        agree(&wire)?;
        let mut seed = seed;
        let spliced = splice(&wire, &junk, &mut seed, 0);
        agree(&spliced)?;
    }

    /// Cutting a spliced request anywhere, or changing one byte, never makes the walk disagree.
    #[test]
    fn mutated_requests_agree_with_prost(
        req in arbitrary::request(),
        junk in prop::collection::vec(junk(), 0..4),
        seed in 1u64..,
        cut in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let mut seed = seed;
        let mut body = splice(&req.encode_to_vec(), &junk, &mut seed, 0);
        if !body.is_empty() {
            let i = at.index(body.len());
            body[i] = byte;
            let cut = cut.index(body.len() + 1);
            agree(&body[..cut])?;
        }
        agree(&body)?;
    }
}

/// A xorshift step: the test's own choices, reproducible from the seed proptest drew.
fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}
