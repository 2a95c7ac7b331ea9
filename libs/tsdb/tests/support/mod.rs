//! Shared by the tests that read the Prometheus histogram fixtures: `pushed.json` as histograms.

use heddle_model::{CounterResetHint, Histogram, Span};
use serde_json::Value;
use std::collections::BTreeMap;

fn spans(v: &Value) -> Vec<Span> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| Span::new(s[0].as_i64().unwrap() as i32, s[1].as_u64().unwrap() as u32))
        .collect()
}

fn ints(v: &Value) -> Vec<i64> {
    v.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect()
}

/// A histogram of `pushed.json`.
pub fn histogram(s: &Value) -> (i64, Histogram) {
    let hint = match s["hint"].as_str().unwrap() {
        "gauge" => CounterResetHint::Gauge,
        "reset" => CounterResetHint::CounterReset,
        "no" => CounterResetHint::NotCounterReset,
        _ => CounterResetHint::Unknown,
    };
    let h = Histogram {
        counter_reset_hint: hint,
        schema: s["schema"].as_i64().unwrap() as i32,
        zero_threshold: f64::from_bits(s["zero_threshold_bits"].as_u64().unwrap()),
        zero_count: s["zero_count"].as_u64().unwrap(),
        count: s["count"].as_u64().unwrap(),
        sum: f64::from_bits(s["sum_bits"].as_u64().unwrap()),
        positive_spans: spans(&s["positive_spans"]),
        negative_spans: spans(&s["negative_spans"]),
        positive_buckets: ints(&s["positive_deltas"]),
        negative_buckets: ints(&s["negative_deltas"]),
        custom_values: Vec::new(),
    };
    (s["t"].as_i64().unwrap(), h)
}

/// Every series of `pushed.json` by name: its histograms as [`histogram`] reads them, in the order they were sent.
pub fn pushed_series<C: FromIterator<(i64, Histogram)>>(pushed: &Value) -> BTreeMap<String, C> {
    pushed["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let samples = s["samples"].as_array().unwrap().iter().map(histogram).collect();
            (s["name"].as_str().unwrap().to_owned(), samples)
        })
        .collect()
}

/// What a histogram says, whatever its span layout: scalars by their bits, and every non-empty bucket by index.
#[allow(dead_code)] // Shared by test binaries, not all of which compare meanings.
#[derive(Debug, PartialEq)]
pub struct Meaning {
    schema: i32,
    zero_threshold_bits: u64,
    count: u64,
    zero_count: u64,
    sum_bits: u64,
    positive: Vec<(i64, i64)>,
    negative: Vec<(i64, i64)>,
}

#[allow(dead_code)] // As `Meaning`.
pub fn meaning(h: &Histogram) -> Meaning {
    let by_index = |spans: &[Span], counts: Vec<i64>| {
        let mut next = 0i64;
        let idx = spans.iter().flat_map(|s| {
            let start = next + i64::from(s.offset);
            next = start + i64::from(s.length);
            start..next
        });
        idx.zip(counts).filter(|(_, c)| *c != 0).collect::<Vec<_>>()
    };
    Meaning {
        schema: h.schema,
        zero_threshold_bits: h.zero_threshold.to_bits(),
        count: h.count,
        zero_count: h.zero_count,
        sum_bits: h.sum.to_bits(),
        positive: by_index(&h.positive_spans, h.positive_counts()),
        negative: by_index(&h.negative_spans, h.negative_counts()),
    }
}
