//! Why a query failed, in the classes of Prometheus' HTTP API (`errorType`).

/// A query that could not be parsed or evaluated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PromqlError {
    /// The expression does not parse or does not type-check (`bad_data`, HTTP 400).
    #[error("{0}")]
    BadData(String),
    /// Evaluation failed on the data (many-to-many matching, duplicate label sets...) (`execution`, HTTP 422).
    #[error("{0}")]
    Execution(String),
    /// Evaluation would hold more samples than the query may (`execution`, HTTP 422).
    #[error(
        "query processing would load too many samples into memory in query execution (limit {limit}; \
         -querier.max-samples)"
    )]
    TooManySamples { limit: usize },
    /// The query ran past its deadline (`timeout`, HTTP 503).
    #[error("query timed out in {0}")]
    Timeout(&'static str),
    /// The caller gave up on the query, its client having gone (`canceled`, HTTP 499 as Prometheus answers).
    #[error("query was canceled in {0}")]
    Canceled(&'static str),
    /// A time the query reads (an evaluation time moved by `offset` or `@`, the start of a range or lookback
    /// window, a subquery's steps) is outside what a 64-bit millisecond timestamp holds (`bad_data`, HTTP 400).
    #[error(
        "{id}: the query reads a time outside the range of a 64-bit millisecond timestamp ({0}); use a \
         smaller offset, `@` time, range or subquery range",
        id = heddle_model::error_id::QUERY_TIMESTAMP_OUT_OF_RANGE
    )]
    TimeOutOfRange(String),
}

impl PromqlError {
    /// Prometheus' `errorType` for this error.
    pub fn error_type(&self) -> &'static str {
        match self {
            PromqlError::BadData(_) | PromqlError::TimeOutOfRange(_) => "bad_data",
            PromqlError::Execution(_) | PromqlError::TooManySamples { .. } => "execution",
            PromqlError::Timeout(_) => "timeout",
            PromqlError::Canceled(_) => "canceled",
        }
    }

    /// The HTTP status Prometheus answers this error with.
    pub fn http_status(&self) -> u16 {
        match self {
            PromqlError::BadData(_) | PromqlError::TimeOutOfRange(_) => 400,
            PromqlError::Execution(_) | PromqlError::TooManySamples { .. } => 422,
            PromqlError::Timeout(_) => 503,
            PromqlError::Canceled(_) => 499,
        }
    }
}

pub(crate) fn execution(msg: impl Into<String>) -> PromqlError {
    PromqlError::Execution(msg.into())
}
