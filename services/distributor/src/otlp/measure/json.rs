//! The JSON walk: the request's text read along the metrics schema as `opentelemetry-proto`'s serde mapping
//! reads it, counting what serde and serde_json allocate, its buffering included.
//!
//! The mapping is not a plain derive. Four types take one field with `#[serde(flatten)]` (`Metric.data`,
//! `NumberDataPoint.value`, `Exemplar.value`, and `AnyValue.value`, which has nothing else): serde reads every
//! member of such an object that is not one of its plain fields into its private `Content` tree first (the
//! whole list of a metric's data points, for one) and decodes the flattened field from that tree. A tree read
//! from the text is new memory; one read out of another tree is moved, except under `AnyValue`, whose
//! custom visitor borrows the tree, so that each nested `AnyValue` (an array in an array) deep-copies its
//! part again: a value nested `d` arrays deep exists `d` times at once. The walk counts, for every value,
//! how many such copies hold it, and charges each copy what `Content` costs:
//! - an array's elements and an object's members are pushed onto a `Vec` one at a time (`n` take at most
//!   `3n + 1` slots at once; a `Content` is 32 bytes, a member's key and value 64), and so are the elements
//!   of every repeated field of the decoded structs;
//! - a string without escapes is borrowed from the text; one with escapes is copied (once per copy of its
//!   tree, and once into serde_json's scratch buffer).
//!
//! A struct without a flattened field can also be read from an array of its fields in declaration order,
//! which serde accepts; the walk follows that too. Text that is not JSON is refused before serde runs (it
//! would be refused by serde); text the walk reads but serde refuses is counted in full, which only
//! over-counts.

use super::{ALLOCATION_OVERHEAD, Malformed};
use opentelemetry_proto::tonic::common::v1::{AnyValue, EntityRef, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    Exemplar, ExponentialHistogramDataPoint, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics,
    ScopeMetrics, SummaryDataPoint, summary_data_point::ValueAtQuantile,
};
use std::borrow::Cow;
use std::mem::size_of;

/// Nesting at which serde_json refuses the text ("recursion limit exceeded"): the 128th container it
/// enters. A value serde skips (an unknown member of a struct without a flattened field) is not entered and
/// may nest deeper; the walk skips it the same way.
const MAX_DEPTH: u32 = 127;
/// Bytes of one serde `Content` (the largest variant is a `Vec` or `String`, plus the tag).
const CONTENT: usize = 32;
/// Bytes of one member of a `Content::Map`, and of one entry serde collects for a flattened field
/// (`Option<(Content, Content)>`).
const CONTENT_ENTRY: usize = 2 * CONTENT;
/// What serde_json may hold when it fails, beyond the value its message quotes.
const ERROR_ALLOWANCE: usize = 1024;

/// The message types of an `ExportMetricsServiceRequest`, as serde reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Msg {
    Request,
    ResourceMetrics,
    Resource,
    EntityRef,
    ScopeMetrics,
    Scope,
    /// Flattened `data`.
    Metric,
    Gauge,
    Sum,
    Histogram,
    ExponentialHistogram,
    Summary,
    /// Flattened `value`.
    NumberPoint,
    HistogramPoint,
    ExponentialPoint,
    Buckets,
    SummaryPoint,
    Quantile,
    /// Flattened `value`.
    Exemplar,
    KeyValue,
    /// Flattened `value`, read by a custom visitor from the collected members.
    AnyValue,
    ArrayValue,
    KeyValueList,
}

/// What a JSON value decodes into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Msg(Msg),
    /// A repeated field: a `Vec` of these.
    Repeated(Elem),
    /// A `String`.
    Str,
    /// Bytes from hex (`traceId`, `spanId`): a `Vec<u8>` of half the text.
    Hex,
    /// Bytes from base64 (`bytesValue`): a `String` of the text, then the decoded `Vec<u8>`.
    Base64,
    /// `intValue` of an `AnyValue`: an untagged number-or-string, tried on a copy.
    IntOrString,
    /// A number, a boolean or a number in a string: nothing on the heap.
    Scalar,
    /// Not decoded (an unknown member, or one serde skips).
    Ignored,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Elem {
    Msg(Msg),
    Str,
    Number,
}

impl Elem {
    fn size(self) -> usize {
        match self {
            Elem::Msg(m) => msg_size(m),
            Elem::Str => size_of::<String>(),
            Elem::Number => size_of::<u64>(),
        }
    }

    fn ty(self) -> Ty {
        match self {
            Elem::Msg(m) => Ty::Msg(m),
            Elem::Str => Ty::Str,
            Elem::Number => Ty::Scalar,
        }
    }
}

fn msg_size(m: Msg) -> usize {
    match m {
        Msg::ResourceMetrics => size_of::<ResourceMetrics>(),
        Msg::ScopeMetrics => size_of::<ScopeMetrics>(),
        Msg::Metric => size_of::<Metric>(),
        Msg::NumberPoint => size_of::<NumberDataPoint>(),
        Msg::HistogramPoint => size_of::<HistogramDataPoint>(),
        Msg::ExponentialPoint => size_of::<ExponentialHistogramDataPoint>(),
        Msg::SummaryPoint => size_of::<SummaryDataPoint>(),
        Msg::Quantile => size_of::<ValueAtQuantile>(),
        Msg::Exemplar => size_of::<Exemplar>(),
        Msg::KeyValue => size_of::<KeyValue>(),
        Msg::AnyValue => size_of::<AnyValue>(),
        Msg::EntityRef => size_of::<EntityRef>(),
        // Never an element of a repeated field.
        _ => 0,
    }
}

const KV: Ty = Ty::Repeated(Elem::Msg(Msg::KeyValue));
const NUMBERS: Ty = Ty::Repeated(Elem::Number);
const S: Ty = Ty::Scalar;

/// A struct's plain (not flattened) fields in declaration order, the order serde reads them from an array.
fn fields(m: Msg) -> &'static [(&'static str, Ty)] {
    match m {
        Msg::Request => &[("resourceMetrics", Ty::Repeated(Elem::Msg(Msg::ResourceMetrics)))],
        Msg::ResourceMetrics => &[
            ("resource", Ty::Msg(Msg::Resource)),
            ("scopeMetrics", Ty::Repeated(Elem::Msg(Msg::ScopeMetrics))),
            ("schemaUrl", Ty::Str),
        ],
        Msg::Resource => &[
            ("attributes", KV),
            ("droppedAttributesCount", S),
            ("entityRefs", Ty::Repeated(Elem::Msg(Msg::EntityRef))),
        ],
        Msg::EntityRef => &[
            ("schemaUrl", Ty::Str),
            ("type", Ty::Str),
            ("idKeys", Ty::Repeated(Elem::Str)),
            ("descriptionKeys", Ty::Repeated(Elem::Str)),
        ],
        Msg::ScopeMetrics => &[
            ("scope", Ty::Msg(Msg::Scope)),
            ("metrics", Ty::Repeated(Elem::Msg(Msg::Metric))),
            ("schemaUrl", Ty::Str),
        ],
        Msg::Scope => &[
            ("name", Ty::Str),
            ("version", Ty::Str),
            ("attributes", KV),
            ("droppedAttributesCount", S),
        ],
        Msg::Metric => &[
            ("name", Ty::Str),
            ("description", Ty::Str),
            ("unit", Ty::Str),
            ("metadata", KV),
        ],
        Msg::Gauge => &[("dataPoints", Ty::Repeated(Elem::Msg(Msg::NumberPoint)))],
        Msg::Sum => &[
            ("dataPoints", Ty::Repeated(Elem::Msg(Msg::NumberPoint))),
            ("aggregationTemporality", S),
            ("isMonotonic", S),
        ],
        Msg::Histogram => &[
            ("dataPoints", Ty::Repeated(Elem::Msg(Msg::HistogramPoint))),
            ("aggregationTemporality", S),
        ],
        Msg::ExponentialHistogram => &[
            ("dataPoints", Ty::Repeated(Elem::Msg(Msg::ExponentialPoint))),
            ("aggregationTemporality", S),
        ],
        Msg::Summary => &[("dataPoints", Ty::Repeated(Elem::Msg(Msg::SummaryPoint)))],
        Msg::NumberPoint => &[
            ("attributes", KV),
            ("startTimeUnixNano", S),
            ("timeUnixNano", S),
            ("exemplars", Ty::Repeated(Elem::Msg(Msg::Exemplar))),
            ("flags", S),
        ],
        Msg::HistogramPoint => &[
            ("attributes", KV),
            ("startTimeUnixNano", S),
            ("timeUnixNano", S),
            ("count", S),
            ("sum", S),
            ("bucketCounts", NUMBERS),
            ("explicitBounds", NUMBERS),
            ("exemplars", Ty::Repeated(Elem::Msg(Msg::Exemplar))),
            ("flags", S),
            ("min", S),
            ("max", S),
        ],
        Msg::ExponentialPoint => &[
            ("attributes", KV),
            ("startTimeUnixNano", S),
            ("timeUnixNano", S),
            ("count", S),
            ("sum", S),
            ("scale", S),
            ("zeroCount", S),
            ("positive", Ty::Msg(Msg::Buckets)),
            ("negative", Ty::Msg(Msg::Buckets)),
            ("flags", S),
            ("exemplars", Ty::Repeated(Elem::Msg(Msg::Exemplar))),
            ("min", S),
            ("max", S),
            ("zeroThreshold", S),
        ],
        Msg::Buckets => &[("offset", S), ("bucketCounts", NUMBERS)],
        Msg::SummaryPoint => &[
            ("attributes", KV),
            ("startTimeUnixNano", S),
            ("timeUnixNano", S),
            ("count", S),
            ("sum", S),
            ("quantileValues", Ty::Repeated(Elem::Msg(Msg::Quantile))),
            ("flags", S),
        ],
        Msg::Quantile => &[("quantile", S), ("value", S)],
        Msg::Exemplar => &[
            ("filteredAttributes", KV),
            ("timeUnixNano", S),
            ("spanId", Ty::Hex),
            ("traceId", Ty::Hex),
        ],
        Msg::KeyValue => &[("key", Ty::Str), ("value", Ty::Msg(Msg::AnyValue)), ("keyStrindex", S)],
        Msg::AnyValue => &[],
        Msg::ArrayValue => &[("values", Ty::Repeated(Elem::Msg(Msg::AnyValue)))],
        Msg::KeyValueList => &[("values", KV)],
    }
}

/// How a struct with a flattened field decodes the members it collected: `None` for a struct without one.
/// The type of the member named `key`, and whether the members are borrowed (`AnyValue`) rather than moved.
fn flattened(m: Msg, key: &[u8]) -> Option<(Ty, bool)> {
    let ty = |known: &[(&str, Ty)]| {
        known
            .iter()
            .find(|(name, _)| name.as_bytes() == key)
            .map_or(Ty::Ignored, |(_, ty)| *ty)
    };
    match m {
        Msg::Metric => Some((
            ty(&[
                ("gauge", Ty::Msg(Msg::Gauge)),
                ("sum", Ty::Msg(Msg::Sum)),
                ("histogram", Ty::Msg(Msg::Histogram)),
                ("exponentialHistogram", Ty::Msg(Msg::ExponentialHistogram)),
                ("summary", Ty::Msg(Msg::Summary)),
            ]),
            false,
        )),
        Msg::NumberPoint | Msg::Exemplar => Some((ty(&[("asDouble", S), ("asInt", S)]), false)),
        Msg::AnyValue => Some((
            ty(&[
                ("stringValue", Ty::Str),
                ("boolValue", S),
                ("intValue", Ty::IntOrString),
                ("doubleValue", S),
                ("arrayValue", Ty::Msg(Msg::ArrayValue)),
                ("kvlistValue", Ty::Msg(Msg::KeyValueList)),
                ("bytesValue", Ty::Base64),
            ]),
            true,
        )),
        _ => None,
    }
}

/// Where serde reads a value from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The text.
    Text,
    /// A `Content` tree it owns: a flattened struct's members are moved out of it.
    Owned,
    /// A `Content` tree it borrows: a flattened struct's members are copied out of it.
    Borrowed,
}

/// An upper bound of the bytes `serde_json::from_slice::<ExportMetricsServiceRequest>(text)` allocates at
/// its peak, or why it would refuse `text`.
pub(crate) fn json_bound(text: &[u8]) -> Result<usize, Malformed> {
    let mut walk = Walk {
        text,
        pos: 0,
        bound: 0,
        transient: 0,
        escaped: 0,
        longest: 0,
    };
    walk.ws();
    walk.value(Ty::Msg(Msg::Request), 0, Source::Text, 0)?;
    walk.ws();
    if walk.pos != text.len() {
        return Err(walk.malformed("text after the request"));
    }
    // serde_json's scratch buffer holds the longest escaped string (or a byte per level of a skipped value),
    // grown by doubling; an error may quote
    // the longest string, escaped (`\u{...}` for a control character: up to ten bytes for one).
    let scratch = grown(walk.escaped, 1);
    let error = block(walk.longest.saturating_mul(10).saturating_add(ERROR_ALLOWANCE));
    Ok(walk
        .bound
        .saturating_add(walk.transient)
        .saturating_add(scratch)
        .saturating_add(error))
}

struct Walk<'a> {
    text: &'a [u8],
    pos: usize,
    bound: usize,
    /// The largest allocation serde makes and frees again before the next (a key, an untagged copy).
    transient: usize,
    /// The longest escaped string, or the deepest skipped value: what serde_json's scratch buffer holds.
    escaped: usize,
    /// The longest string, which an error message may quote.
    longest: usize,
}

/// A JSON string: where its text is, and whether it has escapes.
struct Text {
    start: usize,
    end: usize,
    escaped: bool,
}

fn block(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        n.saturating_add(ALLOCATION_OVERHEAD)
    }
}

/// A `Vec` of `n` elements of `size` bytes pushed one at a time, at its peak: `3n + 1` slots in two blocks.
fn grown(n: usize, size: usize) -> usize {
    if n == 0 {
        0
    } else {
        n.saturating_mul(3)
            .saturating_add(1)
            .saturating_mul(size)
            .saturating_add(2 * ALLOCATION_OVERHEAD)
    }
}

impl<'a> Walk<'a> {
    fn add(&mut self, n: usize) {
        self.bound = self.bound.saturating_add(n);
    }

    fn malformed(&self, what: &'static str) -> Malformed {
        Malformed { at: self.pos, what }
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.text.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        self.ws();
        if self.peek() == Some(b) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// One value, decoded as `ty` from `source`, held by `copies` `Content` trees.
    fn value(&mut self, ty: Ty, copies: usize, source: Source, depth: u32) -> Result<(), Malformed> {
        self.ws();
        if ty == Ty::Ignored && copies == 0 {
            // serde skips it (`IgnoredAny`) without building anything or counting its depth.
            return self.skip();
        }
        match self.peek() {
            Some(b'{') => {
                if depth >= MAX_DEPTH {
                    return Err(self.malformed("recursion limit exceeded"));
                }
                self.pos += 1;
                match ty {
                    Ty::Msg(m) => self.object(m, copies, source, depth + 1),
                    _ => self.object_untyped(copies, depth + 1),
                }
            }
            Some(b'[') => {
                if depth >= MAX_DEPTH {
                    return Err(self.malformed("recursion limit exceeded"));
                }
                self.pos += 1;
                self.array(ty, copies, source, depth + 1)
            }
            Some(b'"') => {
                let s = self.string()?;
                let len = s.end - s.start;
                if s.escaped {
                    self.add(block(len).saturating_mul(copies));
                }
                match ty {
                    Ty::Str | Ty::Hex => self.add(block(len)),
                    Ty::Base64 => self.add(block(len).saturating_mul(2)),
                    Ty::IntOrString => self.transient = self.transient.max(block(len).saturating_mul(2)),
                    _ => {}
                }
                Ok(())
            }
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(b'-' | b'0'..=b'9') => {
                while let Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') = self.peek() {
                    self.pos += 1;
                }
                Ok(())
            }
            _ => Err(self.malformed("a character that starts no JSON value")),
        }
    }

    /// A value serde skips, as serde_json's `ignore_value` does: a scalar, or a container to its matching
    /// end, at any depth (serde_json keeps one byte per level in its scratch buffer). Read loosely (the
    /// separators are not checked): what serde refuses in it, serde refuses.
    fn skip(&mut self) -> Result<(), Malformed> {
        let mut depth = 0usize;
        loop {
            self.ws();
            match self.peek() {
                Some(b'{' | b'[') => {
                    depth += 1;
                    self.escaped = self.escaped.max(depth);
                    self.pos += 1;
                }
                Some(b'}' | b']') if depth > 0 => {
                    depth -= 1;
                    self.pos += 1;
                }
                Some(b',' | b':') if depth > 0 => self.pos += 1,
                Some(b'"') => {
                    self.string()?;
                }
                Some(b't') => self.literal(b"true")?,
                Some(b'f') => self.literal(b"false")?,
                Some(b'n') => self.literal(b"null")?,
                Some(b'-' | b'0'..=b'9') => {
                    while let Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') = self.peek() {
                        self.pos += 1;
                    }
                }
                _ => return Err(self.malformed("a character that starts no JSON value")),
            }
            if depth == 0 {
                return Ok(());
            }
        }
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), Malformed> {
        if self.text[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(())
        } else {
            Err(self.malformed("an invalid literal"))
        }
    }

    /// The members of an object decoded as `m` (the `{` read).
    fn object(&mut self, m: Msg, copies: usize, source: Source, depth: u32) -> Result<(), Malformed> {
        let mut members = 0usize;
        let mut collected = 0usize;
        if !self.eat(b'}') {
            loop {
                self.ws();
                if self.peek() != Some(b'"') {
                    return Err(self.malformed("an object key that is not a string"));
                }
                let key = self.string()?;
                if key.escaped {
                    self.add(block(key.end - key.start).saturating_mul(copies));
                }
                if !self.eat(b':') {
                    return Err(self.malformed("an object key without ':'"));
                }
                members += 1;
                let name = self.key(&key);
                let name = name.as_deref();
                let plain = fields(m).iter().find(|(f, _)| Some(f.as_bytes()) == name);
                match (plain, flattened(m, name.unwrap_or(b""))) {
                    (Some((_, ty)), _) => self.value(*ty, copies, source, depth)?,
                    (None, Some((ty, borrowed))) => {
                        // Collected into a `Content` entry: a new tree unless it is moved out of one.
                        collected += 1;
                        let copies = if source == Source::Owned { copies } else { copies + 1 };
                        if key.escaped && source != Source::Owned {
                            self.add(block(key.end - key.start));
                        }
                        if m == Msg::AnyValue {
                            // The visitor reads each key into a `String` of its own.
                            self.transient = self.transient.max(block(key.end - key.start));
                        }
                        let from = if borrowed { Source::Borrowed } else { Source::Owned };
                        self.value(ty, copies, from, depth)?;
                    }
                    (None, None) => self.value(Ty::Ignored, copies, source, depth)?,
                }
                if self.eat(b'}') {
                    break;
                }
                if !self.eat(b',') {
                    return Err(self.malformed("object members without ',' between them"));
                }
            }
        }
        self.add(grown(members, CONTENT_ENTRY).saturating_mul(copies));
        self.add(grown(collected, CONTENT_ENTRY));
        Ok(())
    }

    /// An object that decodes into nothing (or that serde refuses): only its copies count.
    fn object_untyped(&mut self, copies: usize, depth: u32) -> Result<(), Malformed> {
        let mut members = 0usize;
        if !self.eat(b'}') {
            loop {
                self.ws();
                if self.peek() != Some(b'"') {
                    return Err(self.malformed("an object key that is not a string"));
                }
                let key = self.string()?;
                if key.escaped {
                    self.add(block(key.end - key.start).saturating_mul(copies));
                }
                if !self.eat(b':') {
                    return Err(self.malformed("an object key without ':'"));
                }
                members += 1;
                self.value(Ty::Ignored, copies, Source::Text, depth)?;
                if self.eat(b'}') {
                    break;
                }
                if !self.eat(b',') {
                    return Err(self.malformed("object members without ',' between them"));
                }
            }
        }
        self.add(grown(members, CONTENT_ENTRY).saturating_mul(copies));
        Ok(())
    }

    /// The elements of an array decoded as `ty` (the `[` read): a repeated field's elements, or a struct
    /// without a flattened field read from its fields in order.
    fn array(&mut self, ty: Ty, copies: usize, source: Source, depth: u32) -> Result<(), Malformed> {
        let element = |i: usize| match ty {
            Ty::Repeated(e) => e.ty(),
            Ty::Msg(m) if flattened(m, b"").is_none() => fields(m).get(i).map_or(Ty::Ignored, |(_, t)| *t),
            _ => Ty::Ignored,
        };
        let mut n = 0usize;
        if !self.eat(b']') {
            loop {
                self.value(element(n), copies, source, depth)?;
                n += 1;
                if self.eat(b']') {
                    break;
                }
                if !self.eat(b',') {
                    return Err(self.malformed("array elements without ',' between them"));
                }
            }
        }
        self.add(grown(n, CONTENT).saturating_mul(copies));
        if let Ty::Repeated(e) = ty {
            self.add(grown(n, e.size()));
        }
        Ok(())
    }

    /// A string (at its `"`): its raw text, which is never shorter than what it decodes to.
    fn string(&mut self) -> Result<Text, Malformed> {
        let start = self.pos + 1;
        let mut i = start;
        let mut escaped = false;
        loop {
            match self.text.get(i) {
                None => return Err(self.malformed("an unterminated string")),
                Some(b'"') => break,
                Some(b'\\') => {
                    escaped = true;
                    i += 2;
                }
                Some(_) => i += 1,
            }
        }
        self.pos = i + 1;
        self.longest = self.longest.max(i - start);
        if escaped {
            self.escaped = self.escaped.max(i - start);
        }
        Ok(Text { start, end: i, escaped })
    }

    /// A key as serde compares it with field names: its text, unescaped; `None` when it cannot be one.
    fn key(&self, key: &Text) -> Option<Cow<'a, [u8]>> {
        let text: &'a [u8] = self.text;
        let raw = &text[key.start..key.end];
        // No field name is longer, even with each character escaped: a longer key is unknown whatever it says.
        if raw.len() > 32 * "\\u0000".len() {
            return None;
        }
        if !key.escaped {
            return Some(Cow::Borrowed(raw));
        }
        let quoted = [b"\"", raw, b"\""].concat();
        serde_json::from_slice::<String>(&quoted)
            .ok()
            .map(|k| Cow::Owned(k.into_bytes()))
    }
}

#[cfg(test)]
mod tests;
