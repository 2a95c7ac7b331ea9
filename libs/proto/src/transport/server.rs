//! [`ingester_service`]: serves an [`IngesterClient`] as `heddle.ingester.v1.Ingester`.

use super::trace::rpc_span;
use super::{DEFAULT_MAX_MESSAGE_BYTES, TENANT_METADATA};
use crate::client::{IngesterClient, QueryStream};
use crate::ingester::ingester_server::{Ingester, IngesterServer};
use crate::ingester::{
    ExemplarQueryRequest, ExemplarQueryResponse, LabelNamesRequest, LabelNamesResponse, LabelValuesRequest,
    LabelValuesResponse, MetricsMetadataRequest, MetricsMetadataResponse, PushResponse, QueryRequest, SeriesRequest,
    SeriesResponse,
};
use bytes::Bytes;
use heddle_model::TenantId;
use std::sync::Arc;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};
use tracing::Instrument as _;

/// Serves `ingester` as the `heddle.ingester.v1.Ingester` gRPC service, taking each call's tenant from its
/// `x-scope-orgid` metadata. Messages up to [`DEFAULT_MAX_MESSAGE_BYTES`] are accepted and sent; chain
/// `max_decoding_message_size` on the result to change that.
pub fn ingester_service(ingester: Arc<dyn IngesterClient>) -> IngesterServer<IngesterAdapter> {
    IngesterServer::new(IngesterAdapter { inner: ingester })
        .max_decoding_message_size(DEFAULT_MAX_MESSAGE_BYTES)
        .max_encoding_message_size(DEFAULT_MAX_MESSAGE_BYTES)
}

/// The generated service trait implemented over an [`IngesterClient`]; build it with [`ingester_service`].
#[derive(Debug, Clone)]
pub struct IngesterAdapter {
    inner: Arc<dyn IngesterClient>,
}

/// The tenant of a gRPC call: the single `x-scope-orgid` metadata value, validated as a [`TenantId`].
/// Missing => `Unauthenticated`; repeated, non-ASCII or invalid => `InvalidArgument`.
pub fn tenant_from_metadata(metadata: &MetadataMap) -> Result<TenantId, Status> {
    let mut values = metadata.get_all(TENANT_METADATA).iter();
    let Some(value) = values.next() else {
        return Err(Status::unauthenticated(format!(
            "no tenant id: the request has no {TENANT_METADATA} metadata"
        )));
    };
    let extra = values.count();
    if extra > 0 {
        return Err(Status::invalid_argument(format!(
            "{TENANT_METADATA} metadata has {} values; exactly one tenant id is allowed",
            extra + 1
        )));
    }
    let value = value
        .to_str()
        .map_err(|_| Status::invalid_argument(format!("{TENANT_METADATA} metadata is not visible ascii")))?;
    TenantId::new(value)
        .map_err(|e| Status::invalid_argument(format!("invalid tenant id in {TENANT_METADATA} metadata: {e}")))
}

fn record_tenant(tenant: &TenantId) {
    tracing::Span::current().record("tenant", tenant.as_str());
}

#[tonic::async_trait]
impl Ingester for IngesterAdapter {
    async fn push(&self, request: Request<Bytes>) -> Result<Response<PushResponse>, Status> {
        let span = rpc_span!("push", "Push", request.metadata());
        async move {
            let tenant = tenant_from_metadata(request.metadata())?;
            record_tenant(&tenant);
            self.inner.push(&tenant, request.into_inner()).await.map(Response::new)
        }
        .instrument(span)
        .await
    }

    type QueryStreamStream = QueryStream;

    async fn query_stream(&self, request: Request<QueryRequest>) -> Result<Response<QueryStream>, Status> {
        let span = rpc_span!("query_stream", "QueryStream", request.metadata());
        async move {
            let tenant = tenant_from_metadata(request.metadata())?;
            record_tenant(&tenant);
            self.inner
                .query_stream(&tenant, request.into_inner())
                .await
                .map(Response::new)
        }
        .instrument(span)
        .await
    }

    async fn label_names(&self, request: Request<LabelNamesRequest>) -> Result<Response<LabelNamesResponse>, Status> {
        let span = rpc_span!("label_names", "LabelNames", request.metadata());
        async move {
            let tenant = tenant_from_metadata(request.metadata())?;
            record_tenant(&tenant);
            self.inner
                .label_names(&tenant, request.into_inner())
                .await
                .map(Response::new)
        }
        .instrument(span)
        .await
    }

    async fn label_values(
        &self,
        request: Request<LabelValuesRequest>,
    ) -> Result<Response<LabelValuesResponse>, Status> {
        let span = rpc_span!("label_values", "LabelValues", request.metadata());
        async move {
            let tenant = tenant_from_metadata(request.metadata())?;
            record_tenant(&tenant);
            self.inner
                .label_values(&tenant, request.into_inner())
                .await
                .map(Response::new)
        }
        .instrument(span)
        .await
    }

    async fn series(&self, request: Request<SeriesRequest>) -> Result<Response<SeriesResponse>, Status> {
        let span = rpc_span!("series", "Series", request.metadata());
        async move {
            let tenant = tenant_from_metadata(request.metadata())?;
            record_tenant(&tenant);
            self.inner
                .series(&tenant, request.into_inner())
                .await
                .map(Response::new)
        }
        .instrument(span)
        .await
    }

    async fn metrics_metadata(
        &self,
        request: Request<MetricsMetadataRequest>,
    ) -> Result<Response<MetricsMetadataResponse>, Status> {
        let span = rpc_span!("metrics_metadata", "MetricsMetadata", request.metadata());
        async move {
            let tenant = tenant_from_metadata(request.metadata())?;
            record_tenant(&tenant);
            self.inner
                .metrics_metadata(&tenant, request.into_inner())
                .await
                .map(Response::new)
        }
        .instrument(span)
        .await
    }

    async fn query_exemplars(
        &self,
        request: Request<ExemplarQueryRequest>,
    ) -> Result<Response<ExemplarQueryResponse>, Status> {
        let span = rpc_span!("query_exemplars", "QueryExemplars", request.metadata());
        async move {
            let tenant = tenant_from_metadata(request.metadata())?;
            record_tenant(&tenant);
            self.inner
                .query_exemplars(&tenant, request.into_inner())
                .await
                .map(Response::new)
        }
        .instrument(span)
        .await
    }
}
