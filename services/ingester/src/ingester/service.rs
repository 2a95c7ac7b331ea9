//! The ingester's API entry points: the instance checks, then the tenant's push or read, and the
//! [`IngesterClient`] implementation that serves in-process callers and gRPC alike.

use super::Ingester;
use crate::error::IngesterError;
use crate::push::{PushBody, PushContext};
use bytes::Bytes;
use heddle_model::{SeriesBatch, TenantId};
use heddle_proto::ingester::{
    ExemplarQueryRequest, ExemplarQueryResponse, LabelNamesRequest, LabelNamesResponse, LabelValuesRequest,
    LabelValuesResponse, MetricsMetadataRequest, MetricsMetadataResponse, PushResponse, QueryRequest, SeriesRequest,
    SeriesResponse,
};
use heddle_proto::{IngesterClient, QueryStream};
use std::sync::Arc;

impl Ingester {
    /// Appends an encoded `WriteRequest` to the tenant; see [`Ingester::push_body`].
    pub(crate) async fn push_bytes(&self, tenant: &TenantId, body: Bytes) -> Result<PushResponse, IngesterError> {
        self.push_body(tenant, PushBody::Encoded(body)).await
    }

    /// Appends an encoded `WriteRequest`, or a batch of series from a distributor in this process, to the tenant
    /// (opened on its first push).
    ///
    /// Order of checks, cheapest first: instance limits (in-flight, rate, tenants) before the body is decoded;
    /// then the tenant's head judges each series (out of bounds, too far in the future, too old for an empty
    /// head, series limits, the instance series limit).
    #[tracing::instrument(skip_all, fields(tenant = %tenant))]
    pub(crate) async fn push_body(&self, tenant: &TenantId, body: PushBody) -> Result<PushResponse, IngesterError> {
        self.check_accepting()?;
        let instance = &self.limits.instance;
        let _inflight = instance.start_push()?;
        // Held until the push returns; the decoded view is added to it before it is allocated.
        let reservation = instance.reserve_push_bytes(body.len())?;
        instance.check_rate(tokio::time::Instant::now())?;
        if self.tenant(tenant).is_none() {
            instance.check_new_tenant(self.read_tenants().len())?;
        }
        let t = self.tenant_or_open(tenant).await?;
        let ctx = PushContext {
            arenas: self.arenas.clone(),
            metrics: self.metrics.clone(),
            discarded: self.discarded.clone(),
            bounds: self.append_bounds(tenant),
            entry_limits: self.limits.local_entry_limits(tenant),
            now_ms: self.now_ms(),
        };
        let max_series = instance.max_series();
        // The only batch the admission hook refuses whole: the instance's series limit (counted when refused).
        let refused = move |_id, _message| IngesterError::InstanceLimit {
            limit: "max_series",
            value: max_series.to_string(),
        };
        let first = crate::push::push(t, ctx.clone(), body.clone(), reservation, refused).await;
        let (response, appended) = match first {
            // Closed as idle between the lookup and the append, which stored nothing: append to it reopened.
            Err(IngesterError::Tsdb {
                source: heddle_tsdb::TsdbError::Closed,
                ..
            }) if self.is_running() => {
                let t = self.tenant_or_open(tenant).await?;
                let reservation = instance.reserve_push_bytes(body.len())?;
                crate::push::push(t, ctx, body, reservation, refused).await?
            }
            other => other?,
        };
        instance.record_samples(appended, tokio::time::Instant::now());
        Ok(response)
    }
}

#[async_trait::async_trait]
impl IngesterClient for Ingester {
    async fn push(&self, tenant: &TenantId, write_request: Bytes) -> Result<PushResponse, tonic::Status> {
        Ok(self.push_bytes(tenant, write_request).await?)
    }

    fn takes_batches(&self) -> bool {
        true
    }

    async fn push_batch(&self, tenant: &TenantId, batch: SeriesBatch) -> Result<PushResponse, tonic::Status> {
        Ok(self.push_body(tenant, PushBody::Batch(Arc::new(batch))).await?)
    }

    async fn query_stream(&self, tenant: &TenantId, req: QueryRequest) -> Result<QueryStream, tonic::Status> {
        self.check_readable()?;
        Ok(crate::read::query_stream(self.tenant(tenant), self.shipped_blocks_grace(), req).await?)
    }

    async fn label_names(
        &self,
        tenant: &TenantId,
        req: LabelNamesRequest,
    ) -> Result<LabelNamesResponse, tonic::Status> {
        self.check_readable()?;
        Ok(crate::read::label_names(self.tenant(tenant), self.shipped_blocks_grace(), req).await?)
    }

    async fn label_values(
        &self,
        tenant: &TenantId,
        req: LabelValuesRequest,
    ) -> Result<LabelValuesResponse, tonic::Status> {
        self.check_readable()?;
        Ok(crate::read::label_values(self.tenant(tenant), self.shipped_blocks_grace(), req).await?)
    }

    async fn series(&self, tenant: &TenantId, req: SeriesRequest) -> Result<SeriesResponse, tonic::Status> {
        self.check_readable()?;
        Ok(crate::read::series(self.tenant(tenant), self.shipped_blocks_grace(), req).await?)
    }

    async fn metrics_metadata(
        &self,
        tenant: &TenantId,
        req: MetricsMetadataRequest,
    ) -> Result<MetricsMetadataResponse, tonic::Status> {
        self.check_readable()?;
        Ok(crate::read::metrics_metadata(self.tenant(tenant).as_deref(), &req))
    }

    async fn query_exemplars(
        &self,
        tenant: &TenantId,
        req: ExemplarQueryRequest,
    ) -> Result<ExemplarQueryResponse, tonic::Status> {
        self.check_readable()?;
        Ok(crate::read::query_exemplars(self.tenant(tenant), req).await?)
    }
}
