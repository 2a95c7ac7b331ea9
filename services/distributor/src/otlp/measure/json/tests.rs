//! The JSON walk against serde itself: on any text, a walk that fails means serde fails, a decode that
//! succeeds means the walk succeeded, and what decoding allocated (counted by the test allocator) is never
//! above the bound. Inputs: valid requests written with random escapes and unknown members at every depth,
//! structs written as arrays, deeply nested attribute values, arbitrary JSON and mutated text.

use super::*;
use crate::otlp::arbitrary;
use heddle_testkit::alloc::peak_of;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use proptest::prelude::*;
use serde_json::Value;
use std::fmt::Write as _;

fn agree(text: &[u8]) -> Result<(), TestCaseError> {
    let walked = json_bound(text);
    let mut decoded = None;
    let peak = peak_of(|| {
        decoded = Some(serde_json::from_slice::<ExportMetricsServiceRequest>(text).is_ok());
    });
    match (walked, decoded == Some(true)) {
        (Ok(bound), _) => prop_assert!(peak <= bound, "decoding took {peak} bytes, the bound is {bound}"),
        (Err(m), true) => prop_assert!(false, "serde decodes what the walk refused ({m})"),
        (Err(_), false) => {}
    }
    Ok(())
}

fn decodes(text: &str) -> bool {
    serde_json::from_str::<ExportMetricsServiceRequest>(text).is_ok()
}

/// JSON text of `v`, choices driven by `seed`: some characters of strings and keys written as `\u` escapes,
/// and unknown members (from `junk`) added to some objects.
fn write(v: &Value, junk: &[Value], seed: &mut u64, out: &mut String) {
    let string = |s: &str, escape: bool, out: &mut String| {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if (c as u32) < 0x20 || (escape && c.is_ascii_alphabetic()) => {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                }
                c => out.push(c),
            }
        }
        out.push('"');
    };
    match v {
        Value::Object(map) => {
            out.push('{');
            let mut first = true;
            for (k, v) in map {
                if !first {
                    out.push(',');
                }
                first = false;
                string(k, next(seed).is_multiple_of(7), out);
                out.push(':');
                write(v, junk, seed, out);
            }
            if !junk.is_empty() && next(seed).is_multiple_of(3) {
                if !first {
                    out.push(',');
                }
                let j = &junk[(next(seed) % junk.len() as u64) as usize];
                string(&format!("unknown{}", next(seed) % 100), false, out);
                out.push(':');
                write(j, &[], seed, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(v, junk, seed, out);
            }
            out.push(']');
        }
        Value::String(s) => string(s, next(seed).is_multiple_of(5), out),
        other => {
            let _ = write!(out, "{other}");
        }
    }
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        arbitrary::text(10).prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(("[a-zA-Z]{1,12}", inner), 0..6)
                .prop_map(|kvs| Value::Object(kvs.into_iter().collect())),
        ]
    })
}

/// A histogram of `n` buckets written as JSON numbers: serde holds the metric's whole data as `Content`
/// (32 bytes a number, in a growing `Vec`) before decoding it, many times the text.
#[test]
fn bucket_counts_held_as_content_are_counted() {
    let zeros = vec!["0"; 20_000].join(",");
    let text = format!(
        r#"{{"resourceMetrics":[{{"scopeMetrics":[{{"metrics":[{{"name":"h","histogram":{{"aggregationTemporality":2,
        "dataPoints":[{{"bucketCounts":[{zeros},0],"explicitBounds":[{zeros}]}}]}}}}]}}]}}]}}"#
    );
    assert!(decodes(&text));
    let peak = peak_of(|| serde_json::from_str::<ExportMetricsServiceRequest>(&text).unwrap());
    assert!(
        peak > 16 * text.len(),
        "serde took {peak} bytes for {} of text",
        text.len()
    );
    agree(text.as_bytes()).unwrap();
}

/// An attribute value nested arrays deep: each nested `AnyValue` copies the part of the tree below it, so
/// the string at the bottom is held once per level.
#[test]
fn nested_values_are_counted_once_per_copy() {
    let big = "x\\n".repeat(2000);
    for depth in [1, 5, 20, 40] {
        let mut v = format!(r#"{{"stringValue":"{big}"}}"#);
        for _ in 0..depth {
            v = format!(r#"{{"arrayValue":{{"values":[{v}]}}}}"#);
        }
        let text = format!(r#"{{"resourceMetrics":[{{"resource":{{"attributes":[{{"key":"k","value":{v}}}]}}}}]}}"#);
        assert!(decodes(&text), "depth {depth}");
        agree(text.as_bytes()).unwrap();
    }
}

/// serde reads a struct without a flattened field from an array of its fields in order; the walk does too.
#[test]
fn structs_written_as_arrays_are_counted() {
    let point = r#"{"attributes":[["k",{"stringValue":"v"}]],"asDouble":1}"#;
    let text = format!(
        r#"{{"resourceMetrics":[[{{"attributes":[["a",{{"stringValue":"b"}}]]}},[[["scope"],[{{"name":"m","gauge":[[{point},{point}]]}}]]]]]}}"#
    );
    assert!(decodes(&text), "serde reads it");
    agree(text.as_bytes()).unwrap();
    let bound = json_bound(text.as_bytes()).unwrap();
    let as_objects = r#"{"resourceMetrics":[{"resource":{"attributes":[]}}]}"#;
    assert!(
        bound > json_bound(as_objects.as_bytes()).unwrap(),
        "the array's contents are counted"
    );
}

/// Around serde_json's recursion limit, the walk refuses what serde refuses; a member serde skips may nest
/// deeper (serde does not count it), and the walk skips it too.
#[test]
fn nesting_is_refused_where_serde_refuses_it() {
    for depth in 118..132 {
        let inner = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        // Attribute values nested in arrays: three levels each, under seven.
        let mut value = r#"{"stringValue":"x"}"#.to_owned();
        for _ in 0..(depth - 7) / 3 {
            value = format!(r#"{{"arrayValue":{{"values":[{value}]}}}}"#);
        }
        for text in [
            format!(r#"{{"resourceMetrics":[{{"resource":{{"attributes":[{{"key":"k","value":{value}}}]}}}}]}}"#),
            // Held as `Content` by a metric.
            format!(r#"{{"resourceMetrics":[{{"scopeMetrics":[{{"metrics":[{{"name":"m","unknown":{inner}}}]}}]}}]}}"#),
            // Skipped by a resource.
            format!(r#"{{"resourceMetrics":[{{"resource":{{"unknown":{inner}}}}}]}}"#),
        ] {
            assert_eq!(
                json_bound(text.as_bytes()).is_ok(),
                decodes(&text),
                "depth {depth}: {}",
                &text[..80]
            );
            agree(text.as_bytes()).unwrap();
        }
    }
    let deep = format!(
        r#"{{"resourceMetrics":[{{"resource":{{"unknown":{}{}}}}}]}}"#,
        "[".repeat(5000),
        "]".repeat(5000)
    );
    assert!(decodes(&deep));
    agree(deep.as_bytes()).unwrap();
}

#[test]
fn text_that_is_not_json_is_refused() {
    for (name, text) in [
        ("empty", ""),
        ("trailing", "{} x"),
        ("unterminated string", r#"{"resourceMetrics"#),
        ("key without value", r#"{"a"}"#),
        ("bare word", "{\"a\":nope}"),
        ("missing comma", r#"[1 2]"#),
        ("unclosed", "{\"a\":[1,2"),
    ] {
        assert!(json_bound(text.as_bytes()).is_err(), "{name}");
        assert!(!decodes(text), "{name}: serde refuses it too");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Valid requests written with escapes and unknown members anywhere.
    #[test]
    fn requests_agree_with_serde(
        req in arbitrary::request(),
        junk in prop::collection::vec(json_value(), 0..4),
        seed in 1u64..,
    ) {
        let value = serde_json::to_value(&req).unwrap();
        let mut text = String::new();
        let mut seed = seed;
        write(&value, &junk, &mut seed, &mut text);
        agree(text.as_bytes())?;
    }

    /// Arbitrary JSON, alone and as the request's resource metrics.
    #[test]
    fn arbitrary_json_agrees_with_serde(v in json_value(), seed in 1u64..) {
        let mut text = String::new();
        let mut seed = seed;
        write(&v, &[], &mut seed, &mut text);
        agree(text.as_bytes())?;
        let wrapped = format!(r#"{{"resourceMetrics":[{{"scopeMetrics":[{{"metrics":[{{"name":"x","gauge":{text}}}]}}]}}]}}"#);
        agree(wrapped.as_bytes())?;
    }

    /// Cutting a request's text anywhere or changing a byte never makes the walk disagree.
    #[test]
    fn mutated_text_agrees_with_serde(
        req in arbitrary::request(),
        cut in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let mut text = serde_json::to_vec(&req).unwrap();
        let i = at.index(text.len());
        text[i] = byte;
        agree(&text)?;
        agree(&text[..cut.index(text.len() + 1)])?;
    }
}

/// A xorshift step: the test's own choices, reproducible from the seed proptest drew.
fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}
