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
            QuerierError::BadData(_) | QuerierError::RegexTooLong { .. } | QuerierError::MaxQueryLength { .. } => {
                StatusCode::BAD_REQUEST
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
            QuerierError::Store { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// Prometheus' `errorType` for the JSON envelope (`bad_data`, `execution`, `timeout`, ...).
    pub fn error_type(&self) -> &'static str {
        if let QuerierError::Promql(e) = self {
            return e.error_type();
        }
        match self.status() {
            StatusCode::BAD_REQUEST => "bad_data",
            StatusCode::UNPROCESSABLE_ENTITY => "execution",
            StatusCode::SERVICE_UNAVAILABLE => match self {
                QuerierError::Timeout { .. } => "timeout",
                _ => "unavailable",
            },
            _ => "internal",
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
