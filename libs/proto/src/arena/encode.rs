//! Re-framing already-encoded series as a `WriteRequest`.

use super::wire::put_varint;

/// Re-frames already-encoded `TimeSeries` messages as a `WriteRequest` (field 1, length-delimited each),
/// appending to `out` without re-encoding them. Each item is a message payload such as
/// [`super::TimeSeriesRef::raw`].
pub fn encode_write_request_raw<'b>(series: impl IntoIterator<Item = &'b [u8]>, out: &mut Vec<u8>) {
    for raw in series {
        // Field 1, wire type 2.
        out.push(0x0a);
        put_varint(raw.len() as u64, out);
        out.extend_from_slice(raw);
    }
}
