//! Shared by the tests that read the Prometheus histogram fixtures: `pushed.json` as histograms.

use heddle_model::{CounterResetHint, Histogram, Span};
use serde_json::Value;

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
