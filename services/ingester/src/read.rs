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
use heddle_proto::prometheus as pb;
use heddle_proto::{IngesterClient, QueryStream, labels_to_proto, xor_chunked_series};
use heddle_tsdb::SeriesChunks;
use std::collections::BTreeSet;

/// Series per `QueryStreamResponse` message: keeps messages well under gRPC's 4 MiB default.
const SERIES_PER_MESSAGE: usize = 128;

fn chunked(series: SeriesChunks) -> pb::ChunkedSeries {
    xor_chunked_series(
        &series.labels,
        series.chunks.iter().map(|c| (c.min_time, c.max_time, &c.data[..])),
    )
}

#[async_trait::async_trait]
impl IngesterClient for Ingester {
    async fn push(&self, tenant: &TenantId, write_request: Bytes) -> Result<PushResponse, tonic::Status> {
        Ok(self.push_bytes(tenant, write_request).await?)
    }

    async fn query_stream(&self, tenant: &TenantId, req: QueryRequest) -> Result<QueryStream, tonic::Status> {
        let m = matchers(&req.matchers)?;
        let (mint, maxt) = (req.start_timestamp_ms, req.end_timestamp_ms);
        let head = self.head(tenant);
        let blocks = self.blocks_overlapping(tenant, mint, maxt);
        if head.is_none() && blocks.is_empty() {
            return Ok(Box::pin(futures::stream::empty()));
        }
        let t = tenant.clone();
        let selected = tokio::task::spawn_blocking(move || {
            let mut parts = Vec::with_capacity(blocks.len() + 1);
            for b in &blocks {
                parts.push(b.select(mint, maxt, &m).map_err(|source| IngesterError::Tsdb {
                    tenant: t.clone(),
                    source,
                })?);
            }
            if let Some(h) = head {
                parts.push(h.select(mint, maxt, &m));
            }
            Ok::<_, IngesterError>(merge_series(parts))
        })
        .await
        .map_err(|e| IngesterError::Task(e.to_string()))??;
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
        let (mint, maxt) = (req.start_timestamp_ms, req.end_timestamp_ms);
        let mut names: BTreeSet<String> = match self.head(tenant) {
            Some(h) => h.label_names(mint, maxt, &m).into_iter().collect(),
            None => BTreeSet::new(),
        };
        for b in self.blocks_overlapping(tenant, mint, maxt) {
            let m = m.clone();
            names.extend(self.block_call(tenant, move || b.label_names(&m)).await?);
        }
        Ok(LabelNamesResponse {
            names: names.into_iter().collect(),
        })
    }

    async fn label_values(
        &self,
        tenant: &TenantId,
        req: LabelValuesRequest,
    ) -> Result<LabelValuesResponse, tonic::Status> {
        let m = matchers(&req.matchers)?;
        let (mint, maxt) = (req.start_timestamp_ms, req.end_timestamp_ms);
        let mut values: BTreeSet<String> = match self.head(tenant) {
            Some(h) => h.label_values(&req.name, mint, maxt, &m).into_iter().collect(),
            None => BTreeSet::new(),
        };
        for b in self.blocks_overlapping(tenant, mint, maxt) {
            let (name, m) = (req.name.clone(), m.clone());
            values.extend(self.block_call(tenant, move || b.label_values(&name, &m)).await?);
        }
        Ok(LabelValuesResponse {
            values: values.into_iter().collect(),
        })
    }

    async fn series(&self, tenant: &TenantId, req: SeriesRequest) -> Result<SeriesResponse, tonic::Status> {
        let (mint, maxt) = (req.start_timestamp_ms, req.end_timestamp_ms);
        let head = self.head(tenant);
        let blocks = self.blocks_overlapping(tenant, mint, maxt);
        // The union over selectors, de-duplicated and sorted like Prometheus' /api/v1/series.
        let mut all = BTreeSet::new();
        for sel in &req.selectors {
            let m = matchers(&sel.matchers)?;
            if let Some(h) = &head {
                all.extend(h.series(mint, maxt, &m));
            }
            for b in &blocks {
                let (b, m) = (b.clone(), m.clone());
                all.extend(self.block_call(tenant, move || b.series(mint, maxt, &m)).await?);
            }
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

impl Ingester {
    /// Runs a local block read on a blocking thread (it may fault pages in from disk).
    async fn block_call<T: Send + 'static>(
        &self,
        tenant: &TenantId,
        f: impl FnOnce() -> Result<T, heddle_tsdb::TsdbError> + Send + 'static,
    ) -> Result<T, IngesterError> {
        tokio::task::spawn_blocking(f)
            .await
            .map_err(|e| IngesterError::Task(e.to_string()))?
            .map_err(|source| IngesterError::Tsdb {
                tenant: tenant.clone(),
                source,
            })
    }
}

/// Merges series lists (each sorted by labels) from blocks and the head into one sorted list; a series in
/// several parts gets all their chunks, oldest first, with exact duplicates (same range and bytes) dropped.
pub(crate) fn merge_series(parts: Vec<Vec<SeriesChunks>>) -> Vec<SeriesChunks> {
    if parts.len() == 1 {
        return parts.into_iter().next().unwrap_or_default();
    }
    let mut merged: std::collections::BTreeMap<heddle_model::Labels, Vec<heddle_tsdb::ChunkData>> =
        std::collections::BTreeMap::new();
    for part in parts {
        for s in part {
            merged.entry(s.labels).or_default().extend(s.chunks);
        }
    }
    merged
        .into_iter()
        .map(|(labels, mut chunks)| {
            chunks.sort_by_key(|c| (c.min_time, c.max_time));
            chunks.dedup();
            SeriesChunks { labels, chunks }
        })
        .collect()
}
