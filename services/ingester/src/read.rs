//! The read calls of one tenant: its head and the local blocks the bucket does not have yet.
//!
//! Blocks already shipped are left to the querier, which reads them from the bucket, once `grace` (the querier's
//! block list refresh) has passed since their upload ([`Tenant::queryable_blocks`]); answering them here too
//! would read the same block twice.
//!
//! Every read takes the head first and the list of local blocks after it: a head compaction adds the blocks it
//! writes before it truncates the head (`crate::blocks::compact`), so a sample the head no longer had when it
//! was read is in a block of the list taken after it. In the other order a read could take the list just
//! before a new block joins it and the head just after its samples left.

use crate::convert::matchers;
use crate::error::IngesterError;
use crate::metadata::MetadataQuery;
use crate::tenant::Tenant;
use heddle_proto::ingester::{
    ExemplarQueryRequest, ExemplarQueryResponse, LabelNamesRequest, LabelNamesResponse, LabelValuesRequest,
    LabelValuesResponse, MetricsMetadataRequest, MetricsMetadataResponse, QueryRequest, QueryStreamResponse,
    SeriesRequest, SeriesResponse,
};
use heddle_proto::prometheus as pb;
use heddle_proto::{QueryStream, chunked_series, labels_to_proto};
use heddle_tsdb::SeriesChunks;
use heddle_tsdb::chunkenc::Encoding;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// Series per `QueryStreamResponse` message: keeps messages well under gRPC's 4 MiB default.
const SERIES_PER_MESSAGE: usize = 128;

/// A series on the wire, each chunk typed by its encoding: the querier decodes histogram chunks as such.
fn chunked(series: SeriesChunks) -> pb::ChunkedSeries {
    let encoding = |e: Encoding| match e {
        Encoding::Xor => pb::chunk::Encoding::Xor,
        Encoding::Histogram => pb::chunk::Encoding::Histogram,
        Encoding::FloatHistogram => pb::chunk::Encoding::FloatHistogram,
        Encoding::None => pb::chunk::Encoding::Unknown,
    };
    chunked_series(
        &series.labels,
        series
            .chunks
            .iter()
            .map(|c| (c.min_time, c.max_time, encoding(c.encoding), &c.data[..])),
    )
}

/// The series and chunks of `[start, end]` matching the request, from the head and unshipped local blocks.
pub(crate) async fn query_stream(
    tenant: Option<Arc<Tenant>>,
    grace: Duration,
    req: QueryRequest,
) -> Result<QueryStream, IngesterError> {
    let m = matchers(&req.matchers)?;
    let Some(tenant) = tenant else {
        return Ok(Box::pin(futures::stream::empty()));
    };
    let (mint, maxt) = (req.start_timestamp_ms, req.end_timestamp_ms);
    let selected = tokio::task::spawn_blocking(move || {
        // The head before the blocks: see the module docs.
        let head = tenant.head().select(mint, maxt, &m);
        let (blocks, left) = tenant.queryable_blocks(mint, maxt, grace);
        let mut parts = Vec::with_capacity(blocks.len() + 1);
        for b in &blocks {
            parts.push(b.select(mint, maxt, &m).map_err(|source| IngesterError::Tsdb {
                tenant: tenant.id().clone(),
                source,
            })?);
        }
        parts.push(head);
        Ok::<_, IngesterError>((merge_series(parts), left))
    })
    .await
    .map_err(|e| IngesterError::Task(e.to_string()))??;
    let (selected, mut left) = selected;
    let mut messages = Vec::with_capacity(selected.len().div_ceil(SERIES_PER_MESSAGE).max(1));
    let mut it = selected.into_iter().peekable();
    // The blocks left to the bucket go in the first message, which is sent even without series.
    while it.peek().is_some() || !left.is_empty() {
        let series = it.by_ref().take(SERIES_PER_MESSAGE).map(chunked).collect();
        messages.push(Ok(QueryStreamResponse {
            series,
            blocks_left_to_bucket: std::mem::take(&mut left),
        }));
    }
    Ok(Box::pin(futures::stream::iter(messages)))
}

/// The exemplars in the request's range of the series matching any of its selectors, from the head's ring
/// (exemplars are not in blocks), series in label order.
pub(crate) async fn query_exemplars(
    tenant: Option<Arc<Tenant>>,
    req: ExemplarQueryRequest,
) -> Result<ExemplarQueryResponse, IngesterError> {
    let selectors = req
        .selectors
        .iter()
        .map(|s| matchers(&s.matchers))
        .collect::<Result<Vec<_>, _>>()?;
    let Some(tenant) = tenant else {
        return Ok(ExemplarQueryResponse::default());
    };
    // Work in proportion to the tenant's ring (matching, copying, converting): off the async runtime. The
    // ring's lock is taken a bounded amount of work at a time, so pushes of the tenant keep going meanwhile.
    let (mint, maxt) = (req.start_timestamp_ms, req.end_timestamp_ms);
    tokio::task::spawn_blocking(move || {
        let found = tenant.head().select_exemplars(mint, maxt, &selectors);
        let label = |l: &heddle_model::Label| pb::Label {
            name: l.name.clone(),
            value: l.value.clone(),
        };
        let timeseries = found
            .into_iter()
            .map(|(labels, exemplars)| pb::TimeSeries {
                labels: labels_to_proto(&labels),
                exemplars: exemplars
                    .iter()
                    .map(|e| pb::Exemplar {
                        labels: e.labels.iter().map(label).collect(),
                        value: e.value,
                        timestamp: e.t,
                    })
                    .collect(),
                ..pb::TimeSeries::default()
            })
            .collect();
        ExemplarQueryResponse { timeseries }
    })
    .await
    .map_err(|e| IngesterError::Task(e.to_string()))
}

/// The tenant's metric metadata within the request's limits (negative: none), families in name order.
pub(crate) fn metrics_metadata(tenant: Option<&Tenant>, req: &MetricsMetadataRequest) -> MetricsMetadataResponse {
    let Some(tenant) = tenant else {
        return MetricsMetadataResponse::default();
    };
    let query = MetadataQuery {
        limit: usize::try_from(req.limit).ok(),
        limit_per_metric: usize::try_from(req.limit_per_metric).ok(),
        metric: Some(req.metric.as_str()).filter(|m| !m.is_empty()),
    };
    let metadata = tenant
        .metadata()
        .query(query)
        .into_iter()
        .map(|m| pb::MetricMetadata {
            r#type: m.kind.wire(),
            metric_family_name: m.family,
            help: m.help,
            unit: m.unit,
        })
        .collect();
    MetricsMetadataResponse { metadata }
}

/// Label names in `[start, end]` of the series matching the request.
pub(crate) async fn label_names(
    tenant: Option<Arc<Tenant>>,
    grace: Duration,
    req: LabelNamesRequest,
) -> Result<LabelNamesResponse, IngesterError> {
    let m = matchers(&req.matchers)?;
    let mut names = BTreeSet::new();
    let mut left = Vec::new();
    if let Some(tenant) = tenant {
        let (mint, maxt) = (req.start_timestamp_ms, req.end_timestamp_ms);
        names.extend(tenant.head().label_names(mint, maxt, &m));
        let blocks;
        (blocks, left) = tenant.queryable_blocks(mint, maxt, grace);
        for b in blocks {
            let m = m.clone();
            names.extend(block_call(&tenant, move || b.label_names(&m)).await?);
        }
    }
    Ok(LabelNamesResponse {
        names: names.into_iter().collect(),
        blocks_left_to_bucket: left,
    })
}

/// Values of one label in `[start, end]` of the series matching the request.
pub(crate) async fn label_values(
    tenant: Option<Arc<Tenant>>,
    grace: Duration,
    req: LabelValuesRequest,
) -> Result<LabelValuesResponse, IngesterError> {
    let m = matchers(&req.matchers)?;
    let mut values = BTreeSet::new();
    let mut left = Vec::new();
    if let Some(tenant) = tenant {
        let (mint, maxt) = (req.start_timestamp_ms, req.end_timestamp_ms);
        values.extend(tenant.head().label_values(&req.name, mint, maxt, &m));
        let blocks;
        (blocks, left) = tenant.queryable_blocks(mint, maxt, grace);
        for b in blocks {
            let (name, m) = (req.name.clone(), m.clone());
            values.extend(block_call(&tenant, move || b.label_values(&name, &m)).await?);
        }
    }
    Ok(LabelValuesResponse {
        values: values.into_iter().collect(),
        blocks_left_to_bucket: left,
    })
}

/// The label sets in `[start, end]` matching any selector of the request.
pub(crate) async fn series(
    tenant: Option<Arc<Tenant>>,
    grace: Duration,
    req: SeriesRequest,
) -> Result<SeriesResponse, IngesterError> {
    let (mint, maxt) = (req.start_timestamp_ms, req.end_timestamp_ms);
    let selectors = req
        .selectors
        .iter()
        .map(|sel| matchers(&sel.matchers))
        .collect::<Result<Vec<_>, _>>()?;
    // The union over selectors, de-duplicated and sorted like Prometheus' /api/v1/series; the head before the
    // blocks (see the module docs).
    let mut all = BTreeSet::new();
    let Some(tenant) = &tenant else {
        return Ok(SeriesResponse::default());
    };
    for m in &selectors {
        all.extend(tenant.head().series(mint, maxt, m));
    }
    let (blocks, left) = tenant.queryable_blocks(mint, maxt, grace);
    for m in selectors {
        for b in &blocks {
            let (b, m) = (b.clone(), m.clone());
            all.extend(block_call(tenant, move || b.series(mint, maxt, &m)).await?);
        }
    }
    Ok(SeriesResponse {
        series: all
            .iter()
            .map(|l| pb::Labels {
                labels: labels_to_proto(l),
            })
            .collect(),
        blocks_left_to_bucket: left,
    })
}

/// Runs a local block read on a blocking thread (it may fault pages in from disk).
async fn block_call<T: Send + 'static>(
    tenant: &Tenant,
    f: impl FnOnce() -> Result<T, heddle_tsdb::TsdbError> + Send + 'static,
) -> Result<T, IngesterError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| IngesterError::Task(e.to_string()))?
        .map_err(|source| IngesterError::Tsdb {
            tenant: tenant.id().clone(),
            source,
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use heddle_model::Labels;
    use heddle_tsdb::ChunkData;

    #[test]
    fn chunks_go_on_the_wire_typed_by_their_encoding() {
        let labels = Labels::from_sorted([("__name__", "h")]).unwrap();
        let chunk = |min_time: i64, encoding: Encoding| ChunkData {
            min_time,
            max_time: min_time + 10,
            encoding,
            data: Bytes::from(vec![0, 1, encoding as u8]),
        };
        let series = SeriesChunks {
            labels,
            chunks: vec![
                chunk(0, Encoding::Xor),
                chunk(20, Encoding::Histogram),
                chunk(40, Encoding::FloatHistogram),
            ],
        };
        let wire = chunked(series.clone());
        let types: Vec<i32> = wire.chunks.iter().map(|c| c.r#type).collect();
        assert_eq!(
            types,
            [
                pb::chunk::Encoding::Xor as i32,
                pb::chunk::Encoding::Histogram as i32,
                pb::chunk::Encoding::FloatHistogram as i32
            ]
        );
        for (w, c) in wire.chunks.iter().zip(&series.chunks) {
            assert_eq!(
                (w.min_time_ms, w.max_time_ms, &w.data[..]),
                (c.min_time, c.max_time, &c.data[..])
            );
        }
    }
}
