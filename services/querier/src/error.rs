//! The querier's errors and how each maps to an HTTP status and a Prometheus API `errorType`.

use axum::http::StatusCode;

/// Why a query failed. Every variant knows its HTTP status ([`QuerierError::status`]) and the `errorType` the
/// Prometheus JSON API reports for it ([`QuerierError::error_type`]).
#[derive(Debug, thiserror::Error)]
pub enum QuerierError {
    /// The request is malformed: a bad parameter, selector, matcher or body. Not retried by clients.
    #[error("{0}")]
    BadData(String),
    /// The request fetched more of something than a limit allows (all queries of one remote-read request
    /// together).
    #[error(
        "{id}: the query exceeded the maximum number of {what_text} (tenant={tenant}): {fetched} fetched so far \
         and the limit is {limit}; the queries of one remote-read request count together. Narrow the selectors \
         or time range, or raise `{key}` ({flag})",
        id = what.id(),
        what_text = what.text(),
        key = what.key(),
        flag = what.flag()
    )]
    LimitExceeded {
        what: FetchLimit,
        tenant: String,
        fetched: usize,
        limit: usize,
    },
    /// A regular-expression matcher is longer than `querier.max_regex_length`.
    #[error(
        "err-heddle-regex-too-long: the regular expression of the matcher on label {name:?} is {len} bytes; the \
         limit is {limit}: match fewer values, or raise `querier.max_regex_length` (--querier.max-regex-length)"
    )]
    RegexTooLong { name: String, len: usize, limit: usize },
    /// The query ran longer than it may: `query_timeout`, or the request's smaller `timeout`.
    #[error(
        "{id}: query timed out after {timeout_ms}ms (tenant={tenant}): the limit is the request's `timeout` \
         parameter when given, capped by `querier.query_timeout` (--querier.timeout)",
        id = heddle_model::error_id::QUERY_TIMEOUT
    )]
    Timeout { tenant: String, timeout_ms: u128 },
    /// Too many ingesters of the replica set failed to answer.
    #[error("{failed} of {asked} ingesters failed (at most {max_errors} may): {last}")]
    Ingesters {
        failed: usize,
        asked: usize,
        max_errors: usize,
        last: Box<tonic::Status>,
    },
    /// A zone-aware read lost more zones than may fail (an ingester failing fails its zone).
    #[error("ingesters failed in zones {failed} of the {zones} zones asked (at most {max_unavailable} may): {last}")]
    IngesterZones {
        failed: String,
        zones: usize,
        max_unavailable: usize,
        last: Box<tonic::Status>,
    },
    /// The ring cannot name enough healthy ingesters to answer completely (its error, with its stable id).
    #[error("no ingesters to ask: {0}")]
    Ring(String),
    /// An ingester sent data the querier cannot interpret (bad labels, an undecodable chunk).
    #[error("invalid data from an ingester: {0}")]
    InvalidIngesterData(String),
    /// Blocks in the bucket could not be listed or read; the answer would miss older data, so none is given.
    #[error("reading blocks from the bucket failed (tenant={tenant}): {reason}")]
    Store { tenant: String, reason: String },
    /// Ingesters left blocks to the bucket (no longer answer them) that the bucket blocks read do not hold,
    /// even after listing the bucket again: the answer would miss their samples (Mimir's store consistency
    /// check).
    #[error(
        "err-heddle-store-consistency-check-failed: ingesters no longer answer blocks {blocks} (tenant={tenant}), \
         and the bucket blocks this querier reads do not hold them, even after listing the bucket again; the \
         answer would miss their samples, so none is given. Ingesters answer a shipped block for \
         `blocks_storage.bucket_store.sync_interval` + `blocks_storage.bucket_store.bucket_index.max_stale_period` \
         after its upload: give ingesters and queriers the same values \
         (--blocks-storage.bucket-store.sync-interval, --blocks-storage.bucket-store.bucket-index.max-stale-period), \
         and keep the compactor's retention longer than `blocks_storage.tsdb.retention_period`"
    )]
    StoreConsistency { tenant: String, blocks: String },
    /// A fault of the querier itself (a task that panicked).
    #[error("internal querier error: {0}")]
    Internal(String),
    /// The PromQL engine refused or failed the query; it knows its own status and `errorType`.
    #[error(transparent)]
    Promql(heddle_promql::PromqlError),
    /// Evaluating a PromQL query would hold more samples at once than `querier.max_samples`.
    #[error(
        "err-heddle-max-query-samples: query processing would load too many samples into memory in query \
         execution (tenant={tenant}, limit {limit}): narrow the query or its time range, or raise \
         `querier.max_samples` (--querier.max-samples)"
    )]
    TooManySamples { tenant: String, limit: usize },
    /// A range query spans more than the tenant's `limits.max_query_length` (Mimir's message).
    #[error(
        "err-heddle-max-query-length: the query time range exceeds the limit (query length: {length}, limit: \
         {limit}) (tenant={tenant}); shorten the range or raise `limits.max_query_length` (--store.max-query-length)"
    )]
    MaxQueryLength {
        tenant: String,
        length: String,
        limit: String,
    },
    /// The request body is larger than `querier.max_body_size` (413, before or as it arrives).
    #[error(
        "err-heddle-query-request-too-large: the request body is {size} bytes or more; the limit is {limit}: send \
         a smaller request, or raise `querier.max_body_size` (--querier.max-body-size)"
    )]
    BodyTooLarge { size: u64, limit: usize },
    /// What a request would hold in flight is more than the whole in-flight budget: it could never be answered.
    #[error(
        "err-heddle-query-request-too-large: {what} would hold {requested} bytes more (the request holds {held} \
         already), more than the querier's whole in-flight budget of {limit} bytes: send a smaller request, or \
         raise `querier.max_inflight_requests_bytes` (--querier.max-inflight-requests-bytes)"
    )]
    RequestTooLarge {
        what: &'static str,
        requested: usize,
        held: usize,
        limit: usize,
    },
    /// The requests in flight hold so much of the in-flight budget that this one does not fit now.
    #[error(
        "err-heddle-querier-max-inflight-requests-bytes: the querier's in-flight requests hold {in_flight} bytes \
         and {what} needs {requested} more (the request holds {held} already); the limit is {limit}: retry later, \
         or raise `querier.max_inflight_requests_bytes` (--querier.max-inflight-requests-bytes) if the process has \
         the memory"
    )]
    InflightBytes {
        what: &'static str,
        requested: usize,
        held: usize,
        in_flight: usize,
        limit: usize,
    },
    /// Reading the request body failed before it was complete.
    #[error("err-heddle-body-read: reading the request body failed: {detail}")]
    BodyRead { detail: String },
    /// The request body did not arrive in time.
    #[error(
        "err-heddle-body-read-timeout: the request body did not arrive within {timeout_ms} ms ({received} bytes \
         received); raise `server.http_server_read_timeout` (--server.http-server-read-timeout)"
    )]
    BodyReadTimeout { timeout_ms: u128, received: usize },
}

/// What a fetch limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchLimit {
    /// Series fetched (`limits.max_fetched_series_per_query`).
    Series = 0,
    /// Chunks fetched (`limits.max_fetched_chunks_per_query`).
    Chunks = 1,
    /// Chunk bytes fetched (`limits.max_fetched_chunk_bytes_per_query`).
    ChunkBytes = 2,
    /// Samples selected after the replica merge (`querier.max_samples_per_query`).
    Samples = 3,
}

impl FetchLimit {
    /// The stable error id of a refusal by this limit.
    pub fn id(self) -> &'static str {
        use heddle_model::error_id;
        match self {
            FetchLimit::Series => error_id::MAX_SERIES_PER_QUERY,
            FetchLimit::Chunks => error_id::MAX_CHUNKS_PER_QUERY,
            FetchLimit::ChunkBytes => error_id::MAX_CHUNKS_BYTES_PER_QUERY,
            FetchLimit::Samples => error_id::MAX_SAMPLES_PER_QUERY,
        }
    }

    fn text(self) -> &'static str {
        match self {
            FetchLimit::Series => "series fetched",
            FetchLimit::Chunks => "chunks fetched",
            FetchLimit::ChunkBytes => "chunk bytes fetched",
            FetchLimit::Samples => "samples selected",
        }
    }

    fn key(self) -> &'static str {
        match self {
            FetchLimit::Series => "limits.max_fetched_series_per_query",
            FetchLimit::Chunks => "limits.max_fetched_chunks_per_query",
            FetchLimit::ChunkBytes => "limits.max_fetched_chunk_bytes_per_query",
            FetchLimit::Samples => "querier.max_samples_per_query",
        }
    }

    fn flag(self) -> &'static str {
        match self {
            FetchLimit::Series => "--querier.max-fetched-series-per-query",
            FetchLimit::Chunks => "--querier.max-fetched-chunks-per-query",
            FetchLimit::ChunkBytes => "--querier.max-fetched-chunk-bytes-per-query",
            FetchLimit::Samples => "--querier.max-samples-per-query",
        }
    }
}

impl QuerierError {
    /// The HTTP status this error is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            QuerierError::BadData(_)
            | QuerierError::RegexTooLong { .. }
            | QuerierError::MaxQueryLength { .. }
            | QuerierError::BodyRead { .. } => StatusCode::BAD_REQUEST,
            QuerierError::BodyTooLarge { .. } | QuerierError::RequestTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            QuerierError::InflightBytes { .. } | QuerierError::BodyReadTimeout { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            QuerierError::LimitExceeded { .. } | QuerierError::TooManySamples { .. } => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            QuerierError::Promql(e) => {
                StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            }
            QuerierError::Timeout { .. } => StatusCode::SERVICE_UNAVAILABLE,
            QuerierError::Ingesters { last, .. } | QuerierError::IngesterZones { last, .. } => match last.code() {
                tonic::Code::InvalidArgument => StatusCode::BAD_REQUEST,
                tonic::Code::ResourceExhausted => StatusCode::UNPROCESSABLE_ENTITY,
                tonic::Code::DeadlineExceeded | tonic::Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            },
            QuerierError::Ring(_) => StatusCode::SERVICE_UNAVAILABLE,
            QuerierError::InvalidIngesterData(_) | QuerierError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            QuerierError::Store { .. } | QuerierError::StoreConsistency { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// Prometheus' `errorType` for the JSON envelope (`bad_data`, `execution`, `timeout`, ...).
    pub fn error_type(&self) -> &'static str {
        if let QuerierError::Promql(e) = self {
            return e.error_type();
        }
        match self.status() {
            StatusCode::BAD_REQUEST | StatusCode::PAYLOAD_TOO_LARGE => "bad_data",
            StatusCode::UNPROCESSABLE_ENTITY => "execution",
            StatusCode::SERVICE_UNAVAILABLE => match self {
                QuerierError::Timeout { .. } | QuerierError::BodyReadTimeout { .. } => "timeout",
                _ => "unavailable",
            },
            _ => "internal",
        }
    }

    /// Whether the request was refused before its body was read in full (its size, its reservation, a read
    /// that failed or took too long).
    pub(crate) fn body_unread(&self) -> bool {
        match self {
            QuerierError::BodyTooLarge { .. }
            | QuerierError::BodyRead { .. }
            | QuerierError::BodyReadTimeout { .. } => true,
            QuerierError::RequestTooLarge { what, .. } | QuerierError::InflightBytes { what, .. } => {
                *what == crate::budget::BODY
            }
            _ => false,
        }
    }

    /// Whether the caller may retry the same request later.
    pub fn retryable(&self) -> bool {
        self.status().is_server_error()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_types() {
        let ingesters = |code| QuerierError::Ingesters {
            failed: 1,
            asked: 1,
            max_errors: 0,
            last: Box::new(tonic::Status::new(code, "x")),
        };
        let cases = [
            ("bad data", QuerierError::BadData("x".into()), 400, "bad_data"),
            (
                "limit",
                QuerierError::LimitExceeded {
                    what: FetchLimit::Samples,
                    tenant: "t".into(),
                    fetched: 2,
                    limit: 1,
                },
                422,
                "execution",
            ),
            (
                "regex",
                QuerierError::RegexTooLong {
                    name: "job".into(),
                    len: 2,
                    limit: 1,
                },
                400,
                "bad_data",
            ),
            (
                "timeout",
                QuerierError::Timeout {
                    tenant: "t".into(),
                    timeout_ms: 5,
                },
                503,
                "timeout",
            ),
            ("ingester down", ingesters(tonic::Code::Unavailable), 503, "unavailable"),
            (
                "body over the size limit",
                QuerierError::BodyTooLarge { size: 2, limit: 1 },
                413,
                "bad_data",
            ),
            (
                "larger than the whole budget",
                QuerierError::RequestTooLarge {
                    what: "x",
                    requested: 2,
                    held: 0,
                    limit: 1,
                },
                413,
                "bad_data",
            ),
            (
                "budget full",
                QuerierError::InflightBytes {
                    what: "x",
                    requested: 1,
                    held: 0,
                    in_flight: 1,
                    limit: 1,
                },
                503,
                "unavailable",
            ),
            (
                "ingester refuses",
                ingesters(tonic::Code::InvalidArgument),
                400,
                "bad_data",
            ),
            ("ingester bug", ingesters(tonic::Code::Internal), 500, "internal"),
            (
                "ring",
                QuerierError::Ring("err-heddle-ring-empty: the ingester ring has no instances with tokens".into()),
                503,
                "unavailable",
            ),
        ];
        for (name, err, status, kind) in cases {
            assert_eq!(err.status().as_u16(), status, "case {name}");
            assert_eq!(err.error_type(), kind, "case {name}");
            assert_eq!(err.retryable(), status >= 500, "case {name}");
        }
    }
}
