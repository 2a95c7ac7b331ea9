//! Upper bounds of the memory an OTLP request takes while it is decoded, read from its bytes before it is
//! decoded, so the in-flight budget holds it first.
//!
//! Decoded OTLP is many times its wire size at worst: an empty data point is two bytes of protobuf and a
//! struct of about a hundred bytes once decoded, and serde reads some JSON objects into a tree of its own
//! before decoding them. Each walk follows the metrics schema as its decoder does ([`protobuf`] as prost,
//! [`json`] as `opentelemetry-proto`'s serde mapping), counts what that decoder allocates (struct sizes,
//! `Vec` growth, copies), and refuses what the decoder would refuse: the decoder only ever runs on input
//! the walk read to its end.

mod json;
mod protobuf;

pub(super) use json::json_bound;
pub(super) use protobuf::decoded_bound;

/// What glibc's malloc takes beyond the bytes asked for, at most: a chunk is the size rounded up to 16 plus
/// an 8-byte header, and never under 32 bytes.
pub(crate) const ALLOCATION_OVERHEAD: usize = 32;

/// Why a walk could not read the request; its decoder would refuse it too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Malformed {
    /// Offset in the request's bytes.
    pub(crate) at: usize,
    pub(crate) what: &'static str,
}

impl Malformed {
    /// Where it is in `text`, as serde_json says it: line and column, both from 1.
    pub(crate) fn in_text(&self, text: &[u8]) -> String {
        let before = &text[..self.at.min(text.len())];
        let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
        let column = 1 + before.iter().rev().take_while(|&&b| b != b'\n').count();
        format!("{} at line {line} column {column}", self.what)
    }
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at byte {}", self.what, self.at)
    }
}
