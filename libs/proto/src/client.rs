//! The seam between roles: what a distributor or querier needs from an ingester.
//!
//! One trait, two transports: the ingester implements it in-process (single-process mode calls it directly),
//! and [`crate::GrpcIngesterClient`] implements it over `heddle.ingester.v1.Ingester`. Code above this seam
//! cannot tell the two apart.

use crate::ingester::{
    LabelNamesRequest, LabelNamesResponse, LabelValuesRequest, LabelValuesResponse, PushResponse, QueryRequest,
    QueryStreamResponse, SeriesRequest, SeriesResponse,
};
use bytes::Bytes;
use futures::stream::BoxStream;
use heddle_model::TenantId;

/// A stream of query results; ends after the last series.
pub type QueryStream = BoxStream<'static, Result<QueryStreamResponse, tonic::Status>>;

/// What distributors and queriers call on an ingester. Errors are gRPC statuses so that both transports
/// report failures the same way (`InvalidArgument` = the caller's fault, not retried; `Unavailable` /
/// `ResourceExhausted` = retry later).
#[async_trait::async_trait]
pub trait IngesterClient: Send + Sync + std::fmt::Debug + 'static {
    /// Appends a remote-write request. `write_request` is an encoded, uncompressed `prometheus.WriteRequest`.
    /// Per-series refusals (out-of-order, ...) come back in [`PushResponse::errors`], not as an `Err`.
    async fn push(&self, tenant: &TenantId, write_request: Bytes) -> Result<PushResponse, tonic::Status>;

    /// Streams the chunks of every matching series that overlap the request's time range, each series once and
    /// in label order (`heddle_model::Labels`' order): the querier merges ingesters' streams series by series
    /// and refuses a stream out of order as invalid data.
    async fn query_stream(&self, tenant: &TenantId, req: QueryRequest) -> Result<QueryStream, tonic::Status>;

    async fn label_names(&self, tenant: &TenantId, req: LabelNamesRequest)
    -> Result<LabelNamesResponse, tonic::Status>;

    async fn label_values(
        &self,
        tenant: &TenantId,
        req: LabelValuesRequest,
    ) -> Result<LabelValuesResponse, tonic::Status>;

    async fn series(&self, tenant: &TenantId, req: SeriesRequest) -> Result<SeriesResponse, tonic::Status>;
}
