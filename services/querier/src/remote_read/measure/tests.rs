//! The bound against what prost really allocates (a counting allocator), and the walk against prost on what
//! it accepts: random requests with unknown fields, groups and repeated singular fields, and random bytes.

use super::*;
use heddle_proto::prometheus::{ReadHints, ReadRequest};
use heddle_testkit::alloc::peak_of;
use proptest::prelude::*;
use prost::Message as _;

/// The bound and prost's peak for `raw`, when prost decodes it; the walk must accept what prost accepts.
fn check(raw: &[u8]) -> Result<(), TestCaseError> {
    let mut decoded = None;
    let peak = peak_of(|| {
        decoded = Some(ReadRequest::decode(raw).is_ok());
    });
    let measured = decoded_bytes(raw);
    if decoded == Some(true) {
        let bound = measured.map_err(|e| TestCaseError::fail(format!("prost decodes what the walk refuses: {e}")))?;
        prop_assert!(peak <= bound, "prost allocated {peak}, the bound is {bound}");
    }
    Ok(())
}

fn key(number: u64, wire: u8, out: &mut Vec<u8>) {
    prost::encoding::encode_varint((number << 3) | u64::from(wire), out);
}

fn len_field(number: u64, payload: &[u8], out: &mut Vec<u8>) {
    key(number, 2, out);
    prost::encoding::encode_varint(payload.len() as u64, out);
    out.extend_from_slice(payload);
}

/// A field the schema does not have (or has, with another number): varints, fixed widths, bytes, groups.
fn unknown_field() -> impl Strategy<Value = Vec<u8>> {
    let leaf = prop_oneof![
        (8u64..40, any::<u64>()).prop_map(|(n, v)| {
            let mut out = Vec::new();
            key(n, 0, &mut out);
            prost::encoding::encode_varint(v, &mut out);
            out
        }),
        (8u64..40, any::<[u8; 8]>()).prop_map(|(n, v)| {
            let mut out = Vec::new();
            key(n, 1, &mut out);
            out.extend_from_slice(&v);
            out
        }),
        (8u64..40, any::<[u8; 4]>()).prop_map(|(n, v)| {
            let mut out = Vec::new();
            key(n, 5, &mut out);
            out.extend_from_slice(&v);
            out
        }),
        (8u64..40, prop::collection::vec(any::<u8>(), 0..20)).prop_map(|(n, v)| {
            let mut out = Vec::new();
            len_field(n, &v, &mut out);
            out
        }),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        (1u64..40, prop::collection::vec(inner, 0..4)).prop_map(|(n, fields)| {
            let mut out = Vec::new();
            key(n, 3, &mut out);
            for f in fields {
                out.extend(f);
            }
            key(n, 4, &mut out);
            out
        })
    })
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[a-z]{1,8}", "[a-z]{20,200}"]
}

fn matcher() -> impl Strategy<Value = Vec<u8>> {
    (0i32..4, text(), text(), prop::collection::vec(unknown_field(), 0..2)).prop_map(|(t, n, v, unknown)| {
        let mut out = LabelMatcher {
            r#type: t,
            name: n,
            value: v,
        }
        .encode_to_vec();
        for u in unknown {
            out.extend(u);
        }
        out
    })
}

fn hints() -> impl Strategy<Value = Vec<u8>> {
    (text(), prop::collection::vec(text(), 0..6), any::<i64>()).prop_map(|(func, grouping, step_ms)| {
        ReadHints {
            step_ms,
            func,
            grouping,
            ..ReadHints::default()
        }
        .encode_to_vec()
    })
}

fn query() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<i64>(),
        prop::collection::vec(matcher(), 0..8),
        prop::collection::vec(hints(), 0..3),
        prop::collection::vec(unknown_field(), 0..3),
    )
        .prop_map(|(start, matchers, hints, unknown)| {
            let mut out = Query {
                start_timestamp_ms: start,
                ..Query::default()
            }
            .encode_to_vec();
            for m in matchers {
                len_field(3, &m, &mut out);
            }
            // Repeated: prost merges them into one.
            for h in hints {
                len_field(4, &h, &mut out);
            }
            for u in unknown {
                out.extend(u);
            }
            out
        })
}

fn request() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(query(), 0..40),
        prop::collection::vec(0i32..3, 0..6),
        any::<bool>(),
        prop::collection::vec(unknown_field(), 0..4),
    )
        .prop_map(|(queries, types, packed, unknown)| {
            let mut out = Vec::new();
            for (i, q) in queries.iter().enumerate() {
                if let Some(u) = unknown.get(i) {
                    out.extend(u);
                }
                len_field(1, q, &mut out);
            }
            if packed {
                let mut payload = Vec::new();
                for t in &types {
                    prost::encoding::encode_varint(*t as u64, &mut payload);
                }
                len_field(2, &payload, &mut out);
            } else {
                for t in &types {
                    key(2, 0, &mut out);
                    prost::encoding::encode_varint(*t as u64, &mut out);
                }
            }
            out
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn the_bound_holds_for_random_requests(raw in request()) {
        check(&raw)?;
    }

    #[test]
    fn the_bound_holds_for_random_bytes(raw in prop::collection::vec(any::<u8>(), 0..200)) {
        check(&raw)?;
    }
}

#[test]
fn the_bound_holds_for_degenerate_requests() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty queries", [0x0a, 0x00].repeat(100_000)),
        ("empty matchers", {
            let mut q = Vec::new();
            for _ in 0..50_000 {
                len_field(3, &[], &mut q);
            }
            let mut out = Vec::new();
            len_field(1, &q, &mut out);
            out
        }),
        ("unpacked response types", [0x10, 0x01].repeat(100_000)),
        ("packed response types", {
            let mut out = Vec::new();
            len_field(2, &[1; 100_000], &mut out);
            out
        }),
        ("empty grouping strings", {
            let mut h = Vec::new();
            for _ in 0..50_000 {
                len_field(5, &[], &mut h);
            }
            let mut q = Vec::new();
            len_field(4, &h, &mut q);
            len_field(4, &h, &mut q);
            let mut out = Vec::new();
            len_field(1, &q, &mut out);
            out
        }),
        ("one long string repeated", {
            let mut m = Vec::new();
            for n in [10, 1000, 100_000, 50] {
                len_field(3, &vec![b'a'; n], &mut m);
            }
            let mut q = Vec::new();
            len_field(3, &m, &mut q);
            let mut out = Vec::new();
            len_field(1, &q, &mut out);
            out
        }),
    ];
    for (name, raw) in cases {
        let mut ok = false;
        let peak = peak_of(|| ok = ReadRequest::decode(raw.as_slice()).is_ok());
        assert!(ok, "case {name}: prost decodes it");
        let bound = decoded_bytes(&raw).unwrap_or_else(|e| panic!("case {name}: {e}"));
        assert!(
            peak <= bound,
            "case {name}: prost allocated {peak}, the bound is {bound}"
        );
        assert!(
            bound <= 4 * peak + 1024,
            "case {name}: the bound {bound} is far above {peak}"
        );
    }
}

/// A group before the queries, which prost skips (and so must the walk, to count what follows): the fault
/// the OTLP measure had.
#[test]
fn groups_are_walked_past_and_what_follows_is_counted() {
    let mut raw = Vec::new();
    key(99, 3, &mut raw);
    key(98, 3, &mut raw);
    key(98, 4, &mut raw);
    key(99, 4, &mut raw);
    raw.extend([0x0a, 0x00].repeat(10_000));
    assert!(ReadRequest::decode(raw.as_slice()).is_ok());
    let bound = decoded_bytes(&raw).unwrap();
    assert!(bound >= 10_000 * size_of::<Query>(), "{bound}");
    let refused: &[(&str, &[u8])] = &[
        ("a group without its end", &[0x9b, 0x06]),
        ("an end without its group", &[0x9c, 0x06]),
        ("a group ending as another field", &[0x9b, 0x06, 0xa4, 0x06]),
        ("a query with the wrong wire type", &[0x08, 0x01]),
        ("a truncated length", &[0x0a, 0x05, 0x00]),
        ("field number 0", &[0x00, 0x00]),
        ("wire type 7", &[0x0f]),
    ];
    for (name, raw) in refused {
        assert!(decoded_bytes(raw).is_err(), "case {name}");
        assert!(ReadRequest::decode(*raw).is_err(), "case {name}: prost refuses it too");
    }
}
