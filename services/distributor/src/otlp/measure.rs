//! An upper bound of the memory an OTLP protobuf request takes once prost has decoded it, read from its bytes
//! before it is decoded, so the in-flight budget holds it first.
//!
//! Decoded OTLP is many times its wire size at worst: an empty data point is two bytes on the wire and a
//! struct of about a hundred bytes once decoded, so a 100 MiB body could become gigabytes. The walk below
//! follows the metrics schema (every message type a request can hold, with the field numbers of
//! `opentelemetry-proto`), and counts for each repeated message element [`VEC_FACTOR`] times its struct size,
//! for each string or byte field its length plus allocator headroom, and for each packed or repeated number
//! eight bytes, [`VEC_FACTOR`] times. A field it does not know counts only its wire bytes;
//! malformed bytes end the walk, and prost reports the error.

use opentelemetry_proto::tonic::common::v1::{AnyValue, EntityRef, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    Exemplar, ExponentialHistogramDataPoint, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics,
    ScopeMetrics, SummaryDataPoint, summary_data_point::ValueAtQuantile,
};
use std::mem::size_of;

/// Heap bytes a string or byte field may take beyond its length (allocator rounding and header).
const ALLOCATION_HEADROOM: usize = 16;
/// What a `Vec` grown one push at a time may hold per element at its peak: a first allocation of four
/// elements, and while it doubles from `c` to `2c` both blocks at once (`3c` for `c + 1` elements).
const VEC_FACTOR: usize = 4;
/// Nesting past which the walk stops counting; prost refuses such a request (its limit is 100).
const MAX_DEPTH: usize = 128;

/// The message types of an `ExportMetricsServiceRequest`.
#[derive(Debug, Clone, Copy)]
enum Msg {
    Request,
    ResourceMetrics,
    Resource,
    EntityRef,
    ScopeMetrics,
    Scope,
    Metric,
    /// Gauge and Sum: their points are field 1.
    NumberPoints,
    HistogramPoints,
    ExponentialPoints,
    SummaryPoints,
    NumberPoint,
    HistogramPoint,
    ExponentialPoint,
    Buckets,
    SummaryPoint,
    /// ValueAtQuantile: scalars only.
    Quantile,
    Exemplar,
    KeyValue,
    AnyValue,
    /// ArrayValue (of AnyValue) and KeyValueList (of KeyValue).
    ArrayValue,
    KeyValueList,
}

/// What a field of a message decodes into.
enum Child {
    /// One element of a repeated message field: `size` bytes in its `Vec`.
    Element(Msg, usize),
    /// A singular message field, held inline in its parent.
    Inline(Msg),
    /// A string or bytes field (one element of a repeated string when `size` is not 0).
    Text(usize),
    /// A repeated number, packed or not: eight bytes per element.
    Numbers,
    /// A scalar held inline, or a field the schema does not have.
    Scalar,
}

fn child(msg: Msg, field: u64) -> Child {
    use Child::*;
    match (msg, field) {
        (Msg::Request, 1) => Element(Msg::ResourceMetrics, size_of::<ResourceMetrics>()),
        (Msg::ResourceMetrics, 1) => Inline(Msg::Resource),
        (Msg::ResourceMetrics, 2) => Element(Msg::ScopeMetrics, size_of::<ScopeMetrics>()),
        (Msg::Resource, 1) => Element(Msg::KeyValue, size_of::<KeyValue>()),
        (Msg::Resource, 3) => Element(Msg::EntityRef, size_of::<EntityRef>()),
        (Msg::EntityRef, 1 | 2) => Text(0),
        (Msg::EntityRef, 3 | 4) => Text(size_of::<String>()),
        (Msg::ScopeMetrics, 1) => Inline(Msg::Scope),
        (Msg::ScopeMetrics, 2) => Element(Msg::Metric, size_of::<Metric>()),
        (Msg::Scope, 1 | 2) => Text(0),
        (Msg::Scope, 3) => Element(Msg::KeyValue, size_of::<KeyValue>()),
        (Msg::Metric, 1..=3) => Text(0),
        (Msg::Metric, 5 | 7) => Inline(Msg::NumberPoints),
        (Msg::Metric, 9) => Inline(Msg::HistogramPoints),
        (Msg::Metric, 10) => Inline(Msg::ExponentialPoints),
        (Msg::Metric, 11) => Inline(Msg::SummaryPoints),
        (Msg::Metric, 12) => Element(Msg::KeyValue, size_of::<KeyValue>()),
        (Msg::NumberPoints, 1) => Element(Msg::NumberPoint, size_of::<NumberDataPoint>()),
        (Msg::HistogramPoints, 1) => Element(Msg::HistogramPoint, size_of::<HistogramDataPoint>()),
        (Msg::ExponentialPoints, 1) => Element(Msg::ExponentialPoint, size_of::<ExponentialHistogramDataPoint>()),
        (Msg::SummaryPoints, 1) => Element(Msg::SummaryPoint, size_of::<SummaryDataPoint>()),
        (Msg::NumberPoint, 7) | (Msg::HistogramPoint, 9) | (Msg::ExponentialPoint, 1) | (Msg::SummaryPoint, 7) => {
            Element(Msg::KeyValue, size_of::<KeyValue>())
        }
        (Msg::NumberPoint, 5) | (Msg::HistogramPoint, 8) | (Msg::ExponentialPoint, 11) => {
            Element(Msg::Exemplar, size_of::<Exemplar>())
        }
        (Msg::HistogramPoint, 6 | 7) | (Msg::Buckets, 2) => Numbers,
        (Msg::ExponentialPoint, 8 | 9) => Inline(Msg::Buckets),
        (Msg::SummaryPoint, 6) => Element(Msg::Quantile, size_of::<ValueAtQuantile>()),
        (Msg::Exemplar, 7) => Element(Msg::KeyValue, size_of::<KeyValue>()),
        (Msg::Exemplar, 4 | 5) => Text(0),
        (Msg::KeyValue, 1) => Text(0),
        (Msg::KeyValue, 2) => Inline(Msg::AnyValue),
        (Msg::AnyValue, 1 | 7) => Text(0),
        (Msg::AnyValue, 5) => Inline(Msg::ArrayValue),
        (Msg::AnyValue, 6) => Inline(Msg::KeyValueList),
        (Msg::ArrayValue, 1) => Element(Msg::AnyValue, size_of::<AnyValue>()),
        (Msg::KeyValueList, 1) => Element(Msg::KeyValue, size_of::<KeyValue>()),
        _ => Scalar,
    }
}

/// An upper bound of the bytes `ExportMetricsServiceRequest::decode(buf)` allocates (beyond the request
/// struct itself).
pub(super) fn decoded_bound(buf: &[u8]) -> usize {
    let mut bound = 0usize;
    walk(buf, Msg::Request, 0, &mut bound);
    bound
}

fn walk(mut buf: &[u8], msg: Msg, depth: usize, bound: &mut usize) {
    if depth > MAX_DEPTH {
        return;
    }
    while !buf.is_empty() {
        let Some((key, rest)) = varint(buf) else { return };
        let (field, wire) = (key >> 3, key & 7);
        let rest = match wire {
            0 => match varint(rest) {
                Some((_, rest)) => {
                    if let Child::Numbers = child(msg, field) {
                        add(bound, VEC_FACTOR * size_of::<u64>());
                    }
                    rest
                }
                None => return,
            },
            1 | 5 => {
                let width = if wire == 1 { 8 } else { 4 };
                let Some(rest) = rest.get(width..) else { return };
                if let Child::Numbers = child(msg, field) {
                    add(bound, VEC_FACTOR * size_of::<u64>());
                }
                rest
            }
            2 => {
                let Some((len, rest)) = varint(rest) else { return };
                let Some((payload, rest)) = usize::try_from(len).ok().and_then(|l| rest.split_at_checked(l)) else {
                    return;
                };
                match child(msg, field) {
                    Child::Element(m, size) => {
                        add(bound, VEC_FACTOR * size);
                        walk(payload, m, depth + 1, bound);
                    }
                    Child::Inline(m) => walk(payload, m, depth + 1, bound),
                    Child::Text(size) => add(bound, VEC_FACTOR * size + payload.len() + ALLOCATION_HEADROOM),
                    // Packed: at most one element per byte (varints), eight bytes each.
                    Child::Numbers => add(bound, VEC_FACTOR * size_of::<u64>() * payload.len()),
                    Child::Scalar => add(bound, payload.len()),
                }
                rest
            }
            _ => return,
        };
        buf = rest;
    }
}

/// An upper bound of the bytes serde_json allocates decoding the OTLP JSON `text` into the same structs: each
/// object at most one struct of the largest metrics type in a `Vec`, each string its text plus headroom
/// (counted per quote, so twice), and sixteen times the text for numbers held in `Vec<u64>`/`Vec<f64>` (a
/// number takes at least two bytes with its separator, and up to 32 in a growing `Vec`).
pub(super) fn json_bound(text: &[u8]) -> usize {
    let largest = [
        size_of::<ResourceMetrics>(),
        size_of::<ScopeMetrics>(),
        size_of::<Metric>(),
        size_of::<NumberDataPoint>(),
        size_of::<HistogramDataPoint>(),
        size_of::<ExponentialHistogramDataPoint>(),
        size_of::<SummaryDataPoint>(),
        size_of::<Exemplar>(),
        size_of::<KeyValue>(),
        size_of::<AnyValue>(),
        size_of::<EntityRef>(),
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    let (objects, quotes) = text.iter().fold((0usize, 0usize), |(o, q), &b| {
        (o + usize::from(b == b'{'), q + usize::from(b == b'"'))
    });
    text.len()
        .saturating_mul(16)
        .saturating_add(objects.saturating_mul(VEC_FACTOR * largest))
        .saturating_add(quotes.saturating_mul(size_of::<String>() + ALLOCATION_HEADROOM))
}

fn add(bound: &mut usize, n: usize) {
    *bound = bound.saturating_add(n);
}

fn varint(buf: &[u8]) -> Option<(u64, &[u8])> {
    let mut value = 0u64;
    for (i, &b) in buf.iter().take(10).enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Some((value, &buf[i + 1..]));
        }
    }
    None
}

#[cfg(test)]
mod tests;
