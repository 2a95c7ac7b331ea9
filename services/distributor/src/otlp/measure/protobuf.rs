//! The protobuf walk: the request's bytes read as prost reads them, field by field along the metrics schema,
//! counting what each field makes prost allocate.
//!
//! The walk accepts exactly what prost accepts and goes on wherever prost goes on: a field the schema does
//! not have is skipped as `prost::encoding::skip_field` skips it, whatever its wire type (a group is read to
//! its matching end-group key, groups nested in it too, under the same recursion limit), and counting goes
//! on after it. Where prost would fail (a truncated field, a bad key or varint, an end-group without its
//! start, a schema field of the wrong wire type, nesting past prost's limit), the walk fails too and the
//! request is refused before prost runs: an input the walk cannot read is never under-counted.
//!
//! What is counted, from prost 0.14's decoding:
//! - an element of a repeated field (message, string or number) is pushed onto a `Vec` one at a time: `n`
//!   elements hold at most `3n + 1` element slots at once (a first block of four, then while the `Vec`
//!   doubles from `c` to `2c` both blocks at once, `3c` for `c + 1` elements), in two blocks;
//! - a string field reserves its length once; a bytes field (`trace_id`, `span_id`, `bytesValue`) first
//!   copies its payload into a `Bytes`, then into the field: twice its length. A singular field sent again
//!   in the same message replaces the value in place, and may grow its buffer to twice the new length
//!   while the old one (counted where it was first sent) is still held;
//! - a singular message field is held inline in its parent, and a second occurrence merges into the first
//!   (so its strings count as repeats);
//! - every allocation may cost [`super::ALLOCATION_OVERHEAD`] beyond its size.

use super::{ALLOCATION_OVERHEAD, Malformed};
use opentelemetry_proto::tonic::common::v1::{AnyValue, EntityRef, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    Exemplar, ExponentialHistogramDataPoint, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics,
    ScopeMetrics, SummaryDataPoint, summary_data_point::ValueAtQuantile,
};
use std::mem::size_of;

/// prost's recursion limit (`prost::RECURSION_LIMIT`, private): a message nested deeper, or a group nested
/// deeper inside a message, is refused.
pub(super) const RECURSION_LIMIT: u32 = 100;

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
    /// ArrayValue (of AnyValue).
    ArrayValue,
    /// KeyValueList (of KeyValue).
    KeyValueList,
}

/// How a repeated number is sent unpacked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NumberWire {
    /// `uint64`: wire type 0, at least one byte each when packed.
    Varint,
    /// `fixed64` and `double`: wire type 1, eight bytes each.
    Fixed64,
}

/// What a field of a message decodes into.
#[derive(Debug, Clone, Copy)]
enum Child {
    /// One element of a repeated message field: `size` bytes in its `Vec`.
    Element(Msg, usize),
    /// A singular message field (or a oneof's message), held inline in its parent.
    Inline(Msg),
    /// A singular string field.
    Str,
    /// A singular bytes field.
    Bytes,
    /// One element of a repeated string field.
    StrElement,
    /// A repeated number, packed or not: eight bytes per element.
    Numbers(NumberWire),
    /// A scalar held inline: decoding it allocates nothing.
    Scalar,
    /// A field the schema does not have: skipped.
    Unknown,
}

/// The schema: fields of `opentelemetry-proto`'s generated metrics types (0.33).
fn child(msg: Msg, field: u32) -> Child {
    use Child::*;
    match (msg, field) {
        (Msg::Request, 1) => Element(Msg::ResourceMetrics, size_of::<ResourceMetrics>()),
        (Msg::ResourceMetrics, 1) => Inline(Msg::Resource),
        (Msg::ResourceMetrics, 2) => Element(Msg::ScopeMetrics, size_of::<ScopeMetrics>()),
        (Msg::ResourceMetrics, 3) => Str,
        (Msg::Resource, 1) => Element(Msg::KeyValue, size_of::<KeyValue>()),
        (Msg::Resource, 2) => Scalar,
        (Msg::Resource, 3) => Element(Msg::EntityRef, size_of::<EntityRef>()),
        (Msg::EntityRef, 1 | 2) => Str,
        (Msg::EntityRef, 3 | 4) => StrElement,
        (Msg::ScopeMetrics, 1) => Inline(Msg::Scope),
        (Msg::ScopeMetrics, 2) => Element(Msg::Metric, size_of::<Metric>()),
        (Msg::ScopeMetrics, 3) => Str,
        (Msg::Scope, 1 | 2) => Str,
        (Msg::Scope, 3) => Element(Msg::KeyValue, size_of::<KeyValue>()),
        (Msg::Scope, 4) => Scalar,
        (Msg::Metric, 1..=3) => Str,
        (Msg::Metric, 5 | 7) => Inline(Msg::NumberPoints),
        (Msg::Metric, 9) => Inline(Msg::HistogramPoints),
        (Msg::Metric, 10) => Inline(Msg::ExponentialPoints),
        (Msg::Metric, 11) => Inline(Msg::SummaryPoints),
        (Msg::Metric, 12) => Element(Msg::KeyValue, size_of::<KeyValue>()),
        (Msg::NumberPoints, 1) => Element(Msg::NumberPoint, size_of::<NumberDataPoint>()),
        (Msg::HistogramPoints, 1) => Element(Msg::HistogramPoint, size_of::<HistogramDataPoint>()),
        (Msg::ExponentialPoints, 1) => Element(Msg::ExponentialPoint, size_of::<ExponentialHistogramDataPoint>()),
        (Msg::SummaryPoints, 1) => Element(Msg::SummaryPoint, size_of::<SummaryDataPoint>()),
        // Sum's temporality and monotonicity, the histograms' temporality.
        (Msg::NumberPoints | Msg::HistogramPoints | Msg::ExponentialPoints, 2 | 3) => Scalar,
        (Msg::NumberPoint, 7) | (Msg::HistogramPoint, 9) | (Msg::ExponentialPoint, 1) | (Msg::SummaryPoint, 7) => {
            Element(Msg::KeyValue, size_of::<KeyValue>())
        }
        (Msg::NumberPoint, 5) | (Msg::HistogramPoint, 8) | (Msg::ExponentialPoint, 11) => {
            Element(Msg::Exemplar, size_of::<Exemplar>())
        }
        (Msg::NumberPoint, 2 | 3 | 4 | 6 | 8) => Scalar,
        (Msg::HistogramPoint, 6 | 7) => Numbers(NumberWire::Fixed64),
        (Msg::HistogramPoint, 2..=5 | 10..=12) => Scalar,
        (Msg::ExponentialPoint, 8 | 9) => Inline(Msg::Buckets),
        (Msg::ExponentialPoint, 2..=7 | 10 | 12..=14) => Scalar,
        (Msg::Buckets, 1) => Scalar,
        (Msg::Buckets, 2) => Numbers(NumberWire::Varint),
        (Msg::SummaryPoint, 6) => Element(Msg::Quantile, size_of::<ValueAtQuantile>()),
        (Msg::SummaryPoint, 2..=5 | 8) => Scalar,
        (Msg::Quantile, 1 | 2) => Scalar,
        (Msg::Exemplar, 7) => Element(Msg::KeyValue, size_of::<KeyValue>()),
        (Msg::Exemplar, 4 | 5) => Bytes,
        (Msg::Exemplar, 2 | 3 | 6) => Scalar,
        (Msg::KeyValue, 1) => Str,
        (Msg::KeyValue, 2) => Inline(Msg::AnyValue),
        (Msg::KeyValue, 3) => Scalar,
        (Msg::AnyValue, 1) => Str,
        (Msg::AnyValue, 7) => Bytes,
        (Msg::AnyValue, 2 | 3 | 4 | 8) => Scalar,
        (Msg::AnyValue, 5) => Inline(Msg::ArrayValue),
        (Msg::AnyValue, 6) => Inline(Msg::KeyValueList),
        (Msg::ArrayValue, 1) => Element(Msg::AnyValue, size_of::<AnyValue>()),
        (Msg::KeyValueList, 1) => Element(Msg::KeyValue, size_of::<KeyValue>()),
        _ => Unknown,
    }
}

/// An upper bound of the bytes `ExportMetricsServiceRequest::decode(buf)` allocates at its peak, or why
/// prost would refuse `buf`.
pub(crate) fn decoded_bound(buf: &[u8]) -> Result<usize, Malformed> {
    let mut walk = Walk { buf, bound: 0 };
    walk.message(0, buf.len(), Msg::Request, RECURSION_LIMIT, false)?;
    Ok(walk.bound)
}

struct Walk<'a> {
    buf: &'a [u8],
    bound: usize,
}

/// A field key as prost's `decode_key` reads it.
struct Key {
    field: u32,
    wire: u8,
}

/// Field numbers below this are tracked per message (every field of the schema is).
const TRACKED_FIELDS: u32 = 64;

impl Walk<'_> {
    fn add(&mut self, n: usize) {
        self.bound = self.bound.saturating_add(n);
    }

    /// What one more element of `size` bytes adds to a `Vec` pushed one at a time: three slots, and for its
    /// first element a fourth and the two blocks it holds while it grows.
    fn slots(size: usize, first: bool) -> usize {
        if first {
            4 * size + 2 * ALLOCATION_OVERHEAD
        } else {
            3 * size
        }
    }

    /// Heap bytes of one allocation of `n` bytes (none when `n` is 0).
    fn block(n: usize) -> usize {
        if n == 0 {
            0
        } else {
            n.saturating_add(ALLOCATION_OVERHEAD)
        }
    }

    /// The message `msg` in `buf[start..end]`, its fields decoded with prost's recursion budget `ctx`.
    /// `merged`: the message is a singular field sent again, merged into the earlier one, so each of its
    /// singular strings replaces one that is already there.
    fn message(&mut self, start: usize, end: usize, msg: Msg, ctx: u32, merged: bool) -> Result<(), Malformed> {
        // Fields already seen in this message: the first element of a `Vec` costs one more slot, and a
        // singular field seen again replaces (or merges into) the first.
        let mut seen = 0u64;
        let mut pos = start;
        while pos < end {
            let (key, after) = self.key(pos, end)?;
            let first = key.field >= TRACKED_FIELDS || seen & (1 << key.field) == 0;
            if key.field < TRACKED_FIELDS {
                seen |= 1 << key.field;
            }
            pos = match child(msg, key.field) {
                Child::Element(m, size) => {
                    let (payload, next) = self.delimited(key.wire, after, end)?;
                    self.add(Self::slots(size, first));
                    self.nested(payload, next, m, ctx, false)?;
                    next
                }
                Child::Inline(m) => {
                    let (payload, next) = self.delimited(key.wire, after, end)?;
                    self.nested(payload, next, m, ctx, merged || !first)?;
                    next
                }
                Child::Str => {
                    let (payload, next) = self.delimited(key.wire, after, end)?;
                    let len = next - payload;
                    self.add(Self::block(if first && !merged { len } else { len.saturating_mul(2) }));
                    next
                }
                Child::Bytes => {
                    let (payload, next) = self.delimited(key.wire, after, end)?;
                    let len = next - payload;
                    let field = if first && !merged { len } else { len.saturating_mul(2) };
                    self.add(Self::block(len).saturating_add(Self::block(field)));
                    next
                }
                Child::StrElement => {
                    let (payload, next) = self.delimited(key.wire, after, end)?;
                    self.add(Self::slots(size_of::<String>(), first) + Self::block(next - payload));
                    next
                }
                Child::Numbers(unpacked) => self.numbers(key.wire, unpacked, after, end, first)?,
                Child::Scalar => self.scalar(key.wire, after, end)?,
                Child::Unknown => self.skip(key, after, end, ctx)?,
            };
        }
        Ok(())
    }

    /// A nested message in `buf[start..end]`, as prost's `message::merge` enters it: refused at the
    /// recursion limit.
    fn nested(&mut self, start: usize, end: usize, msg: Msg, ctx: u32, merged: bool) -> Result<(), Malformed> {
        if ctx == 0 {
            return Err(Malformed {
                at: start,
                what: "messages nested past the recursion limit",
            });
        }
        self.message(start, end, msg, ctx - 1, merged)
    }

    /// A repeated number field: packed (any number of elements) or one unpacked element.
    fn numbers(
        &mut self,
        wire: u8,
        unpacked: NumberWire,
        at: usize,
        end: usize,
        first: bool,
    ) -> Result<usize, Malformed> {
        let slot = size_of::<u64>();
        let extra = if first { slot + 2 * ALLOCATION_OVERHEAD } else { 0 };
        if wire == 2 {
            let (payload, next) = self.delimited(wire, at, end)?;
            let elements = match unpacked {
                NumberWire::Varint => next - payload,
                NumberWire::Fixed64 => (next - payload).div_ceil(8),
            };
            if elements > 0 {
                self.add(elements.saturating_mul(3 * slot).saturating_add(extra));
            }
            return Ok(next);
        }
        let want = match unpacked {
            NumberWire::Varint => 0,
            NumberWire::Fixed64 => 1,
        };
        if wire != want {
            return Err(Malformed {
                at,
                what: "a repeated number field of the wrong wire type",
            });
        }
        self.add(3 * slot + extra);
        self.scalar(wire, at, end)
    }

    /// The end of a scalar schema field of wire type `wire` starting at `at`. A scalar of the wrong
    /// (non-group) wire type is one prost refuses; it is read as what it says it is, so the walk goes on.
    fn scalar(&self, wire: u8, at: usize, end: usize) -> Result<usize, Malformed> {
        match wire {
            0 => Ok(self.varint(at, end)?.1),
            1 => self.fixed(at, end, 8),
            2 => Ok(self.delimited(wire, at, end)?.1),
            5 => self.fixed(at, end, 4),
            3 => Err(Malformed {
                at,
                what: "a group where the schema has a scalar field",
            }),
            _ => Err(Malformed {
                at,
                what: "an end-group key without its start group",
            }),
        }
    }

    /// `prost::encoding::skip_field`: the end of an unknown field whose value starts at `at`.
    fn skip(&self, key: Key, at: usize, end: usize, ctx: u32) -> Result<usize, Malformed> {
        if ctx == 0 {
            return Err(Malformed {
                at,
                what: "groups nested past the recursion limit",
            });
        }
        match key.wire {
            0 => Ok(self.varint(at, end)?.1),
            1 => self.fixed(at, end, 8),
            5 => self.fixed(at, end, 4),
            2 => {
                let (len, after) = self.varint(at, end)?;
                self.span(after, len, end)
            }
            3 => {
                let mut pos = at;
                loop {
                    let (inner, after) = self.key(pos, end)?;
                    if inner.wire == 4 {
                        if inner.field != key.field {
                            return Err(Malformed {
                                at: pos,
                                what: "an end-group key that does not match its start group",
                            });
                        }
                        return Ok(after);
                    }
                    pos = self.skip(inner, after, end, ctx - 1)?;
                }
            }
            _ => Err(Malformed {
                at,
                what: "an end-group key without its start group",
            }),
        }
    }

    /// A length-delimited field's payload `(start, end)`; the field must be of wire type 2.
    fn delimited(&self, wire: u8, at: usize, end: usize) -> Result<(usize, usize), Malformed> {
        if wire != 2 {
            return Err(Malformed {
                at,
                what: "a message, string or bytes field that is not length-delimited",
            });
        }
        let (len, after) = self.varint(at, end)?;
        Ok((after, self.span(after, len, end)?))
    }

    fn span(&self, at: usize, len: u64, end: usize) -> Result<usize, Malformed> {
        match usize::try_from(len).ok().and_then(|l| at.checked_add(l)) {
            Some(next) if next <= end => Ok(next),
            _ => Err(Malformed {
                at,
                what: "a length past the end of its message",
            }),
        }
    }

    fn fixed(&self, at: usize, end: usize, width: usize) -> Result<usize, Malformed> {
        if end - at < width {
            return Err(Malformed {
                at,
                what: "a fixed-width field past the end of its message",
            });
        }
        Ok(at + width)
    }

    /// `prost::encoding::decode_key`.
    fn key(&self, at: usize, end: usize) -> Result<(Key, usize), Malformed> {
        let (key, after) = self.varint(at, end)?;
        let bad = |what| Err(Malformed { at, what });
        if key > u64::from(u32::MAX) {
            return bad("a field key above 32 bits");
        }
        let wire = (key & 7) as u8;
        if wire > 5 {
            return bad("an invalid wire type (6 or 7)");
        }
        let field = (key >> 3) as u32;
        if field == 0 {
            return bad("field number 0");
        }
        Ok((Key { field, wire }, after))
    }

    /// `prost::encoding::decode_varint`: at most ten bytes, the tenth at most 1.
    fn varint(&self, at: usize, end: usize) -> Result<(u64, usize), Malformed> {
        let mut value = 0u64;
        for (i, &b) in self.buf[at..end].iter().take(10).enumerate() {
            if i == 9 && b > 1 {
                break;
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok((value, at + i + 1));
            }
        }
        Err(Malformed {
            at,
            what: "a truncated or overlong varint",
        })
    }
}

#[cfg(test)]
mod tests;
