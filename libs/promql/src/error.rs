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
}

impl PromqlError {
    /// Prometheus' `errorType` for this error.
    pub fn error_type(&self) -> &'static str {
        match self {
            PromqlError::BadData(_) => "bad_data",
            PromqlError::Execution(_) | PromqlError::TooManySamples { .. } => "execution",
            PromqlError::Timeout(_) => "timeout",
        }
    }

    /// The HTTP status Prometheus answers this error with.
    pub fn http_status(&self) -> u16 {
        match self {
            PromqlError::BadData(_) => 400,
            PromqlError::Execution(_) | PromqlError::TooManySamples { .. } => 422,
            PromqlError::Timeout(_) => 503,
        }
    }
}

pub(crate) fn execution(msg: impl Into<String>) -> PromqlError {
    PromqlError::Execution(msg.into())
}
