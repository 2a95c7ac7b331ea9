//! Admin errors and the gRPC status / HTTP status each maps to.

/// What an admin call can fail with; every message says what the operator can do about it.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("this process runs --target={target} and has no ingester; send {call} to an ingester process")]
    NoIngester { target: String, call: &'static str },
    #[error("invalid tenant id {tenant:?}: {reason}")]
    InvalidTenant { tenant: String, reason: String },
    #[error("tenant {tenant} has no head on this ingester; `heddlectl tenants` lists the tenants it holds")]
    UnknownTenant { tenant: String },
    #[error("ring member {id:?} is not in the ring; `heddlectl ring` lists the members")]
    UnknownMember { id: String },
    #[error("ring member {id:?} is this process; stop it (`heddlectl shutdown`) instead of forgetting it")]
    ForgetSelf { id: String },
    #[error("the ring refused the change: {0}")]
    Ring(String),
    #[error("flush failed: {0}; check the ingester's disk and logs, then retry")]
    Flush(String),
    #[error("the process is already shutting down")]
    ShuttingDown,
}

impl AdminError {
    /// The gRPC status code of this error.
    pub fn code(&self) -> tonic::Code {
        match self {
            AdminError::NoIngester { .. } | AdminError::ForgetSelf { .. } => tonic::Code::FailedPrecondition,
            AdminError::InvalidTenant { .. } => tonic::Code::InvalidArgument,
            AdminError::UnknownTenant { .. } | AdminError::UnknownMember { .. } => tonic::Code::NotFound,
            AdminError::Ring(_) | AdminError::ShuttingDown => tonic::Code::Unavailable,
            AdminError::Flush(_) => tonic::Code::Internal,
        }
    }

    /// The HTTP status of this error on the Mimir-compatible endpoints.
    pub fn http_status(&self) -> http::StatusCode {
        match self.code() {
            tonic::Code::InvalidArgument => http::StatusCode::BAD_REQUEST,
            tonic::Code::NotFound => http::StatusCode::NOT_FOUND,
            tonic::Code::FailedPrecondition => http::StatusCode::CONFLICT,
            tonic::Code::Unavailable => http::StatusCode::SERVICE_UNAVAILABLE,
            _ => http::StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<AdminError> for tonic::Status {
    fn from(e: AdminError) -> Self {
        tonic::Status::new(e.code(), e.to_string())
    }
}
