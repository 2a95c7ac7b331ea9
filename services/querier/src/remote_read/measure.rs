//! An upper bound of what prost allocates decoding a `prometheus.ReadRequest`, read from its bytes before it
//! is decoded, so the in-flight budget holds it first.
//!
//! Decoded, a read request can be a hundred times its wire size: an empty query is two bytes on the wire and
//! a `Query` of over a hundred bytes in a `Vec` that doubles as it grows, so 30 MB of empty queries became
//! gigabytes. The walk follows the request's schema (`Query`, `LabelMatcher`, `ReadHints`) and counts what
//! prost makes of each field as prost makes it: every repeated field a `Vec` grown one push at a time
//! ([`budget::vec_bytes`]), every string its length (at least eight, `Vec`'s smallest capacity) plus
//! allocator headroom, twice when a field repeats (the string is replaced, and can double its capacity), and
//! nothing for what prost skips: unknown fields and groups, which are walked (groups to their end, nested
//! ones too) so that what follows them is counted. Bytes prost would refuse are refused here, with the
//! reason, before prost is given them.

use crate::budget::{self, ALLOCATION_HEADROOM};
use heddle_proto::prometheus::{LabelMatcher, Query};
use std::mem::size_of;

/// Nesting of groups past which prost refuses a message (its recursion limit).
const MAX_DEPTH: u32 = 100;

/// The message types of a `ReadRequest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Msg {
    Request,
    Query,
    Matcher,
    Hints,
}

impl Msg {
    fn name(self) -> &'static str {
        match self {
            Msg::Request => "prometheus.ReadRequest",
            Msg::Query => "prometheus.Query",
            Msg::Matcher => "prometheus.LabelMatcher",
            Msg::Hints => "prometheus.ReadHints",
        }
    }
}

/// What a known field decodes into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    /// One element of a repeated message field.
    Element(Msg),
    /// A singular message field, held inline in its parent (merged when repeated).
    Inline(Msg),
    /// A string field; `repeated` when each occurrence is another element.
    Text { repeated: bool },
    /// A repeated enum, packed or not.
    Enums,
    /// A scalar held inline.
    Scalar,
}

fn field(msg: Msg, number: u64) -> Option<Field> {
    Some(match (msg, number) {
        (Msg::Request, 1) => Field::Element(Msg::Query),
        (Msg::Request, 2) => Field::Enums,
        (Msg::Query, 1 | 2) => Field::Scalar,
        (Msg::Query, 3) => Field::Element(Msg::Matcher),
        (Msg::Query, 4) => Field::Inline(Msg::Hints),
        (Msg::Matcher, 1) => Field::Scalar,
        (Msg::Matcher, 2 | 3) => Field::Text { repeated: false },
        (Msg::Hints, 1 | 3 | 4 | 6 | 7) => Field::Scalar,
        (Msg::Hints, 2) => Field::Text { repeated: false },
        (Msg::Hints, 5) => Field::Text { repeated: true },
        _ => return None,
    })
}

/// The counts of one message: elements of its repeated fields and the bytes of its strings.
#[derive(Debug, Default)]
struct Counts {
    /// Elements of its repeated message or string field (a message of this schema has at most one), and
    /// their size.
    elements: usize,
    element_size: usize,
    enums: usize,
    bytes: usize,
}

impl Counts {
    /// What the message holds on the heap, its `Vec`s at their peak.
    fn heap_bytes(&self) -> usize {
        budget::vec_bytes(self.elements, self.element_size)
            .saturating_add(budget::vec_bytes(self.enums, size_of::<i32>()))
            .saturating_add(self.bytes)
    }
}

/// An upper bound of the heap bytes `ReadRequest::decode(buf)` allocates, or why prost would refuse `buf`.
pub(crate) fn decoded_bytes(buf: &[u8]) -> Result<usize, String> {
    let mut total = 0usize;
    let mut request = Counts::default();
    walk(buf, Msg::Request, &mut request, &mut total)?;
    Ok(total.saturating_add(request.heap_bytes()))
}

/// Counts the fields of the message `msg` in `buf` into `counts` (merged with earlier occurrences of the same
/// message, as prost merges a repeated singular field), and what its children hold into `total`.
fn walk(mut buf: &[u8], msg: Msg, counts: &mut Counts, total: &mut usize) -> Result<(), String> {
    // The message's one singular message field (a query's hints), every occurrence merged into one.
    let mut inline = Counts::default();
    while !buf.is_empty() {
        let (number, wire, rest) = key(buf, msg)?;
        let known = field(msg, number);
        buf = match wire {
            0 => {
                let rest = varint(rest).ok_or_else(|| truncated(msg, number))?.1;
                match known {
                    None | Some(Field::Scalar) => {}
                    Some(Field::Enums) => counts.enums += 1,
                    Some(_) => return Err(wrong_wire_type(msg, number, wire)),
                }
                rest
            }
            1 | 5 => {
                let width = if wire == 1 { 8 } else { 4 };
                if known.is_some() {
                    // Every known scalar of the schema is a varint.
                    return Err(wrong_wire_type(msg, number, wire));
                }
                rest.get(width..).ok_or_else(|| truncated(msg, number))?
            }
            2 => {
                let (len, rest) = varint(rest).ok_or_else(|| truncated(msg, number))?;
                let (payload, rest) = usize::try_from(len)
                    .ok()
                    .and_then(|l| rest.split_at_checked(l))
                    .ok_or_else(|| truncated(msg, number))?;
                match known {
                    // Unknown: skipped whole.
                    None => {}
                    Some(Field::Element(m)) => {
                        counts.elements += 1;
                        counts.element_size = match m {
                            Msg::Query => size_of::<Query>(),
                            _ => size_of::<LabelMatcher>(),
                        };
                        let mut child = Counts::default();
                        walk(payload, m, &mut child, total)?;
                        *total = total.saturating_add(child.heap_bytes());
                    }
                    Some(Field::Inline(m)) => walk(payload, m, &mut inline, total)?,
                    Some(Field::Text { repeated }) => {
                        if repeated {
                            counts.elements += 1;
                            counts.element_size = size_of::<String>();
                        }
                        // Replaced when it repeats: the new text in a buffer that may double.
                        counts.bytes = counts
                            .bytes
                            .saturating_add(2 * payload.len().max(8) + ALLOCATION_HEADROOM);
                    }
                    Some(Field::Enums) => {
                        if payload.last().is_some_and(|b| b & 0x80 != 0) {
                            return Err(truncated(msg, number));
                        }
                        counts.enums += payload.iter().filter(|&&b| b & 0x80 == 0).count();
                    }
                    Some(Field::Scalar) => return Err(wrong_wire_type(msg, number, wire)),
                }
                rest
            }
            3 => {
                if known.is_some() {
                    return Err(wrong_wire_type(msg, number, wire));
                }
                skip_group(rest, msg, number, 1)?
            }
            4 => return Err(format!("{}: an end-group tag without its group", msg.name())),
            _ => return Err(format!("{}: invalid wire type {wire} (field {number})", msg.name())),
        };
    }
    *total = total.saturating_add(inline.heap_bytes());
    Ok(())
}

/// Skips the group of field `number` that starts at `buf` (its fields, nested groups, its end tag), as prost
/// skips an unknown group; returns what follows it.
fn skip_group(mut buf: &[u8], msg: Msg, number: u64, depth: u32) -> Result<&[u8], String> {
    if depth > MAX_DEPTH {
        return Err(format!("{}: groups nested deeper than {MAX_DEPTH}", msg.name()));
    }
    loop {
        if buf.is_empty() {
            return Err(format!("{}: the group of field {number} has no end", msg.name()));
        }
        let (inner, wire, rest) = key(buf, msg)?;
        buf = match wire {
            0 => varint(rest).ok_or_else(|| truncated(msg, inner))?.1,
            1 => rest.get(8..).ok_or_else(|| truncated(msg, inner))?,
            5 => rest.get(4..).ok_or_else(|| truncated(msg, inner))?,
            2 => {
                let (len, rest) = varint(rest).ok_or_else(|| truncated(msg, inner))?;
                usize::try_from(len)
                    .ok()
                    .and_then(|l| rest.get(l..))
                    .ok_or_else(|| truncated(msg, inner))?
            }
            3 => skip_group(rest, msg, inner, depth + 1)?,
            4 if inner == number => return Ok(rest),
            4 => {
                return Err(format!(
                    "{}: the group of field {number} ends as field {inner}",
                    msg.name()
                ));
            }
            _ => return Err(format!("{}: invalid wire type {wire} (field {inner})", msg.name())),
        };
    }
}

/// A field key: its number, its wire type and what follows it.
fn key(buf: &[u8], msg: Msg) -> Result<(u64, u8, &[u8]), String> {
    let (key, rest) = varint(buf).ok_or_else(|| format!("{}: a truncated field key", msg.name()))?;
    let number = key >> 3;
    if number == 0 || number > u64::from(u32::MAX >> 3) {
        return Err(format!("{}: invalid field number {number}", msg.name()));
    }
    Ok((number, (key & 7) as u8, rest))
}

fn varint(buf: &[u8]) -> Option<(u64, &[u8])> {
    let mut value = 0u64;
    for (i, &b) in buf.iter().enumerate().take(10) {
        if i == 9 && b > 1 {
            return None;
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((value, &buf[i + 1..]));
        }
    }
    None
}

fn truncated(msg: Msg, number: u64) -> String {
    format!("{}: field {number} is truncated", msg.name())
}

fn wrong_wire_type(msg: Msg, number: u64, wire: u8) -> String {
    format!("{}: field {number} has the wrong wire type {wire}", msg.name())
}

#[cfg(test)]
mod tests;
