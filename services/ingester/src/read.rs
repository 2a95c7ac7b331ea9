//! Read calls and the [`IngesterClient`] implementation that serves in-process callers and gRPC alike.

use crate::convert::matchers;
use crate::error::IngesterError;
use crate::ingester::Ingester;
use bytes::Bytes;
use heddle_model::TenantId;
use heddle_proto::ingester::{
    LabelNamesRequest, LabelNamesResponse, LabelValuesRequest, LabelValuesResponse, PushResponse, QueryRequest,
    QueryStreamResponse, SeriesRequest, SeriesResponse,
};
use heddle_proto::prometheus::{self as pb, chunk::Encoding};
use heddle_proto::{IngesterClient, QueryStream, labels_to_proto};
use heddle_tsdb::SeriesChunks;
use std::collections::BTreeSet;

/// Series per `QueryStreamResponse` message: keeps messages well under gRPC's 4 MiB default.
const SERIES_PER_MESSAGE: usize = 128;

fn chunked(series: SeriesChunks) -> pb::ChunkedSeries {
    pb::ChunkedSeries {
        labels: labels_to_proto(&series.labels),
        chunks: series
            .chunks
            .into_iter()
            .map(|c| pb::Chunk {
                min_time_ms: c.min_time,
                max_time_ms: c.max_time,
                r#type: Encoding::Xor as i32,
                data: c.data.to_vec(),
            })
            .collect(),
    }
}

#[async_trait::async_trait]
impl IngesterClient for Ingester {
    async fn push(&self, tenant: &TenantId, write_request: Bytes) -> Result<PushResponse, tonic::Status> {
        Ok(self.push_bytes(tenant, write_request).await?)
    }

    async fn query_stream(&self, tenant: &TenantId, req: QueryRequest) -> Result<QueryStream, tonic::Status> {
        let m = matchers(&req.matchers)?;
        let Some(head) = self.head(tenant) else {
            return Ok(Box::pin(futures::stream::empty()));
        };
        let (mint, maxt) = (req.start_timestamp_ms, req.end_timestamp_ms);
        let selected = tokio::task::spawn_blocking(move || head.select(mint, maxt, &m))
            .await
            .map_err(|e| IngesterError::Task(e.to_string()))?;
        let mut messages = Vec::with_capacity(selected.len().div_ceil(SERIES_PER_MESSAGE));
        let mut it = selected.into_iter().peekable();
        while it.peek().is_some() {
            let series = it.by_ref().take(SERIES_PER_MESSAGE).map(chunked).collect();
            messages.push(Ok(QueryStreamResponse { series }));
        }
        Ok(Box::pin(futures::stream::iter(messages)))
    }

    async fn label_names(
        &self,
        tenant: &TenantId,
        req: LabelNamesRequest,
    ) -> Result<LabelNamesResponse, tonic::Status> {
        let m = matchers(&req.matchers)?;
        let names = match self.head(tenant) {
            Some(h) => h.label_names(req.start_timestamp_ms, req.end_timestamp_ms, &m),
            None => Vec::new(),
        };
        Ok(LabelNamesResponse { names })
    }

    async fn label_values(
        &self,
        tenant: &TenantId,
        req: LabelValuesRequest,
    ) -> Result<LabelValuesResponse, tonic::Status> {
        let m = matchers(&req.matchers)?;
        let values = match self.head(tenant) {
            Some(h) => h.label_values(&req.name, req.start_timestamp_ms, req.end_timestamp_ms, &m),
            None => Vec::new(),
        };
        Ok(LabelValuesResponse { values })
    }

    async fn series(&self, tenant: &TenantId, req: SeriesRequest) -> Result<SeriesResponse, tonic::Status> {
        let Some(head) = self.head(tenant) else {
            return Ok(SeriesResponse::default());
        };
        // The union over selectors, de-duplicated and sorted like Prometheus' /api/v1/series.
        let mut all = BTreeSet::new();
        for sel in &req.selectors {
            let m = matchers(&sel.matchers)?;
            all.extend(head.series(req.start_timestamp_ms, req.end_timestamp_ms, &m));
        }
        Ok(SeriesResponse {
            series: all
                .iter()
                .map(|l| pb::Labels {
                    labels: labels_to_proto(l),
                })
                .collect(),
        })
    }
}
