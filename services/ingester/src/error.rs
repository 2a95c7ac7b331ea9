//! Ingester errors and their gRPC status.

use heddle_model::TenantId;

/// What can go wrong in the ingester outside per-sample rejections (those are data in `PushResponse`).
#[derive(Debug, thiserror::Error)]
pub enum IngesterError {
    #[error("malformed write request: {0}")]
    Decode(#[from] heddle_proto::DecodeError),
    #[error("invalid matcher: {0}")]
    Matcher(#[from] heddle_proto::MatcherConvertError),
    #[error("tsdb of tenant {tenant}: {source}")]
    Tsdb {
        tenant: TenantId,
        source: heddle_tsdb::TsdbError,
    },
    #[error("ingester is not ready: {0}")]
    NotReady(String),
    #[error("ingester is shutting down")]
    Stopping,
    #[error(
        "err-heddle-ingester-instance-limit: this ingester reached its limit `ingester.instance_limits.{limit}` \
         of {value}; retry with backoff, or raise the limit (--ingester.instance-limits.{flag}) or add ingesters",
        flag = limit.replace('_', "-")
    )]
    InstanceLimit { limit: &'static str, value: String },
    #[error("shipping blocks of tenant {tenant}: {source}")]
    Bucket {
        tenant: TenantId,
        source: Box<heddle_bucket::BucketError>,
    },
    #[error(
        "block {block} of tenant {tenant} was written but not uploaded: {reason}; it stays local and ships on the next try"
    )]
    ShipFailed {
        tenant: TenantId,
        block: String,
        reason: String,
    },
    #[error("internal task failed: {0}")]
    Task(String),
}

impl IngesterError {
    /// The gRPC status a caller sees: caller mistakes are `InvalidArgument` (not retried), everything else
    /// is `Unavailable` or `Internal` so the distributor answers 5xx and the sender retries.
    pub fn to_status(&self) -> tonic::Status {
        let msg = self.to_string();
        match self {
            IngesterError::Decode(_) | IngesterError::Matcher(_) => tonic::Status::invalid_argument(msg),
            IngesterError::NotReady(_) | IngesterError::Stopping | IngesterError::InstanceLimit { .. } => {
                tonic::Status::unavailable(msg)
            }
            IngesterError::Bucket { source, .. } if source.is_retryable() => tonic::Status::unavailable(msg),
            IngesterError::ShipFailed { .. } => tonic::Status::unavailable(msg),
            IngesterError::Tsdb { .. } | IngesterError::Bucket { .. } | IngesterError::Task(_) => {
                tonic::Status::internal(msg)
            }
        }
    }
}

impl From<IngesterError> for tonic::Status {
    fn from(e: IngesterError) -> Self {
        e.to_status()
    }
}
