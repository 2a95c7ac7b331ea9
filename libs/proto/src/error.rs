//! Errors of the wire layer: remote-write decoding and snappy decompression.
//!
//! Both are the sender's fault: they map to HTTP 400 / gRPC `InvalidArgument` (or 413 / `ResourceExhausted`
//! for an oversized body) and must not be retried with the same bytes.

/// Why a `prometheus.WriteRequest` (or a remote write 2.0 `io.prometheus.write.v2.Request`) could not be decoded. Byte offsets count from the start of the decoded
/// body (the decompressed `WriteRequest`), so they point at the same byte in every nested message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The input ends inside a field key.
    #[error("truncated input: field key at byte offset {offset} in {message} runs past the end")]
    TruncatedKey { message: &'static str, offset: usize },
    /// The input ends inside a varint value, a fixed-width value or a length prefix.
    #[error(
        "truncated input: {what} of field {field} in {message} at byte offset {offset} needs {needed} bytes, \
         {available} remain"
    )]
    Truncated {
        message: &'static str,
        field: u32,
        what: &'static str,
        offset: usize,
        needed: usize,
        available: usize,
    },
    /// A varint longer than 10 bytes, or whose 10th byte carries bits beyond 64.
    #[error("invalid varint ({what}) at byte offset {offset} in {message}: it overflows 64 bits")]
    VarintOverflow {
        message: &'static str,
        what: &'static str,
        offset: usize,
    },
    /// A length-delimited field whose length prefix runs past the end of the enclosing message.
    #[error(
        "truncated input: field {field} in {message} at byte offset {offset} declares {len} bytes, {available} \
         remain"
    )]
    LengthOverflow {
        message: &'static str,
        field: u32,
        offset: usize,
        len: u64,
        available: usize,
    },
    /// A field key with field number 0 or above 2^29-1, or a key that does not fit in 32 bits.
    #[error("invalid field key {key} at byte offset {offset} in {message}: field number must be 1..=536870911")]
    InvalidFieldNumber {
        message: &'static str,
        key: u64,
        offset: usize,
    },
    /// Wire types 6 and 7 do not exist.
    #[error("invalid wire type {wire_type} for field {field} at byte offset {offset} in {message}")]
    InvalidWireType {
        message: &'static str,
        field: u32,
        wire_type: u8,
        offset: usize,
    },
    /// A known field carried with a wire type its declared type cannot have.
    #[error("{what} at byte offset {offset} has wire type {found}, expected {expected}")]
    WrongWireType {
        what: &'static str,
        offset: usize,
        found: u8,
        expected: u8,
    },
    /// A label name or value that is not UTF-8.
    #[error("invalid utf-8 in {field} at byte offset {offset} (the string starts at byte offset {start})")]
    InvalidUtf8 {
        field: &'static str,
        start: usize,
        offset: usize,
    },
    /// An end-group tag with no open group, or one closing a different field than the open group.
    #[error("unexpected end-group tag for field {field} at byte offset {offset} in {message}")]
    UnexpectedEndGroup {
        message: &'static str,
        field: u32,
        offset: usize,
    },
    /// A start-group tag whose group never ends before the enclosing message does.
    #[error("unterminated group for field {field} starting at byte offset {offset} in {message}")]
    UnterminatedGroup {
        message: &'static str,
        field: u32,
        offset: usize,
    },
    /// The decoded view would be more than [`crate::arena::MAX_DECODED_BYTES_PER_INPUT_BYTE`] times the
    /// input: the request is made mostly of empty labels or empty series. Refused before allocating.
    #[error(
        "degenerate write request: its {input} bytes would decode to {decoded} bytes ({series} series, {labels} \
         labels, {samples} samples), more than {ratio} per input byte (plus 64 KiB); empty labels and empty series carry no data"
    )]
    Degenerate {
        decoded: usize,
        input: usize,
        ratio: usize,
        series: usize,
        labels: usize,
        samples: usize,
    },
    /// The fill pass found more labels or samples than the measure pass counted. The body is borrowed
    /// between the passes, so this cannot happen; it is an error rather than a panic all the same.
    #[error("internal decoder error: the request changed between its two passes (byte offset {offset})")]
    ShapeChanged { offset: usize },
    /// A remote write 2.0 label reference past the end of the request's symbol table.
    #[error(
        "label reference {index} at byte offset {offset} is out of range: the request has {symbols} symbols \
         (io.prometheus.write.v2.Request.symbols)"
    )]
    SymbolOutOfRange { index: u64, symbols: usize, offset: usize },
    /// A remote write 2.0 series whose label references are not (name, value) pairs.
    #[error(
        "series at byte offset {offset} has {count} label references, an odd number: labels_refs holds (name, \
         value) pairs"
    )]
    OddLabelRefs { count: usize, offset: usize },
    /// A remote write 2.0 symbol table whose first entry is not the empty string, as the spec requires.
    #[error(
        "the first symbol (byte offset {offset}) is {len} bytes long: remote write 2.0 requires symbols[0] to be \
         the empty string"
    )]
    FirstSymbolNotEmpty { offset: usize, len: usize },
    /// A remote write 2.0 request with a field 2.0 reserves (1 to 3), which a 1.0 `WriteRequest` uses for its
    /// series and metadata: a 1.0 body sent with the 2.0 content type would otherwise decode as an empty
    /// request and be acknowledged without a sample stored.
    #[error(
        "field {field} at byte offset {offset} is reserved in io.prometheus.write.v2.Request; it is a remote write \
         1.0 WriteRequest field: send 1.0 bodies with Content-Type application/x-protobuf (or \
         proto=prometheus.WriteRequest)"
    )]
    ReservedV2Field { field: u32, offset: usize },
    /// A field whose wire encoding is right but whose value the message cannot have (a native histogram's
    /// `sint32` out of range, an unknown reset hint, integer and float counts mixed, a packed field cut short).
    #[error("invalid {what} at byte offset {offset}: {reason}")]
    InvalidValue {
        what: &'static str,
        offset: usize,
        reason: &'static str,
    },
    /// A native histogram over [`heddle_model::histogram::MAX_BUCKETS_CEILING`]: refused before it is decoded.
    #[error(
        "{id}: native histogram ({what}) at byte offset {offset} (timestamp {t} ms) has {buckets} buckets and \
         {layout} spans and custom bounds; no histogram may have more than {ceiling} of either (a hard ceiling, \
         which no limit raises): lower the sender's resolution (a smaller schema, or a bucket limit such as the \
         scrape config's native_histogram_bucket_limit)"
    )]
    HistogramTooLarge {
        id: &'static str,
        what: &'static str,
        offset: usize,
        t: i64,
        buckets: usize,
        layout: usize,
        ceiling: usize,
    },
    /// Groups nested deeper than [`crate::arena::MAX_GROUP_DEPTH`].
    #[error("groups nested deeper than {limit} at byte offset {offset} in {message}")]
    GroupTooDeep {
        message: &'static str,
        limit: usize,
        offset: usize,
    },
}

/// Why a snappy block-format body could not be decompressed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnappyError {
    /// The declared decompressed length is over the caller's limit; nothing was allocated.
    #[error("snappy body declares {declared} decompressed bytes; the limit is {limit}")]
    TooLarge { declared: usize, limit: usize },
    /// Not valid snappy block format (bad header, bad copy offset, length mismatch...).
    #[error("corrupt snappy body: {0}")]
    Corrupt(String),
}

impl DecodeError {
    /// The HTTP status of a push refused for this error: 400, the sender's fault.
    pub fn http_status(&self) -> http::StatusCode {
        http::StatusCode::BAD_REQUEST
    }

    /// The gRPC code of a push refused for this error.
    pub fn grpc_code(&self) -> tonic::Code {
        tonic::Code::InvalidArgument
    }

    /// Whether sending the same bytes again could succeed: never.
    pub fn retryable(&self) -> bool {
        false
    }
}

impl SnappyError {
    /// 413 for an oversized body, 400 for a corrupt one; neither is worth retrying.
    pub fn http_status(&self) -> http::StatusCode {
        match self {
            SnappyError::TooLarge { .. } => http::StatusCode::PAYLOAD_TOO_LARGE,
            SnappyError::Corrupt(_) => http::StatusCode::BAD_REQUEST,
        }
    }

    /// `ResourceExhausted` for an oversized body, `InvalidArgument` for a corrupt one.
    pub fn grpc_code(&self) -> tonic::Code {
        match self {
            SnappyError::TooLarge { .. } => tonic::Code::ResourceExhausted,
            SnappyError::Corrupt(_) => tonic::Code::InvalidArgument,
        }
    }

    /// Whether sending the same bytes again could succeed: never.
    pub fn retryable(&self) -> bool {
        false
    }
}

impl From<DecodeError> for tonic::Status {
    fn from(e: DecodeError) -> Self {
        tonic::Status::new(e.grpc_code(), format!("decoding write request: {e}"))
    }
}

impl From<SnappyError> for tonic::Status {
    fn from(e: SnappyError) -> Self {
        tonic::Status::new(e.grpc_code(), e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_statuses() {
        let decode = DecodeError::TruncatedKey {
            message: "prometheus.WriteRequest",
            offset: 7,
        };
        let status = tonic::Status::from(decode.clone());
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            status.message(),
            "decoding write request: truncated input: field key at byte offset 7 in prometheus.WriteRequest runs \
             past the end"
        );
        assert_eq!(decode.http_status(), http::StatusCode::BAD_REQUEST);
        let large = SnappyError::TooLarge { declared: 10, limit: 5 };
        assert_eq!(large.http_status(), http::StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(tonic::Status::from(large).code(), tonic::Code::ResourceExhausted);
        assert!(!SnappyError::Corrupt("x".into()).retryable());
    }
}
