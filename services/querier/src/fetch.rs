//! Fan-out to the ingesters of a replication set, tolerating up to `max_errors` failures.

use crate::error::QuerierError;
use crate::source::ReplicationSet;
use futures::stream::FuturesUnordered;
use futures::{StreamExt, TryStreamExt};
use heddle_model::TenantId;
use heddle_proto::IngesterClient;
use heddle_proto::ingester::{LabelNamesRequest, LabelValuesRequest, QueryRequest, SeriesRequest};
use heddle_proto::prometheus::{ChunkedSeries, Labels as ProtoLabels};
use std::future::Future;
use std::sync::Arc;

/// Calls `call` on every ingester of `set` concurrently and returns the successful answers. Fails when more than
/// `set.max_errors` ingesters fail, reporting the last failure.
///
/// Returns as soon as all but `max_errors` ingesters have answered: that many answers already hold every
/// acknowledged sample (a write is acknowledged by a majority of its replicas, and the set tolerates losing
/// `max_errors` of them), so a frozen ingester does not hold the query until its deadline. The calls still
/// running are dropped (cancelled).
async fn fan_out<T, F, Fut>(set: &ReplicationSet, call: F) -> Result<Vec<T>, QuerierError>
where
    F: Fn(Arc<dyn IngesterClient>) -> Fut,
    Fut: Future<Output = Result<T, tonic::Status>>,
{
    let asked = set.ingesters.len();
    let enough = asked.saturating_sub(set.max_errors);
    let mut pending: FuturesUnordered<_> = set
        .ingesters
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let fut = call(Arc::clone(c));
            async move { (i, fut.await) }
        })
        .collect();
    let mut ok = Vec::with_capacity(asked);
    let mut failed = 0;
    let mut last = None;
    while ok.len() < enough
        && failed <= set.max_errors
        && let Some((i, r)) = pending.next().await
    {
        match r {
            Ok(v) => ok.push(v),
            Err(status) => {
                tracing::warn!(ingester = ?set.ingesters[i], code = ?status.code(), message = status.message(), "ingester query failed");
                failed += 1;
                last = Some(status);
            }
        }
    }
    match last {
        Some(last) if failed > set.max_errors => Err(QuerierError::Ingesters {
            failed,
            asked,
            max_errors: set.max_errors,
            last: Box::new(last),
        }),
        _ => Ok(ok),
    }
}

/// Every series (with its chunks) that each ingester holds for the request; one `Vec` per answering ingester.
pub(crate) async fn query_stream(
    set: &ReplicationSet,
    tenant: &TenantId,
    req: &QueryRequest,
) -> Result<Vec<Vec<ChunkedSeries>>, QuerierError> {
    fan_out(set, |client| {
        let req = req.clone();
        async move {
            let stream = client.query_stream(tenant, req).await?;
            stream
                .try_fold(Vec::new(), |mut acc, resp| async move {
                    acc.extend(resp.series);
                    Ok(acc)
                })
                .await
        }
    })
    .await
}

/// The label sets of matching series, one `Vec` per answering ingester.
pub(crate) async fn series(
    set: &ReplicationSet,
    tenant: &TenantId,
    req: &SeriesRequest,
) -> Result<Vec<Vec<ProtoLabels>>, QuerierError> {
    fan_out(set, |client| {
        let req = req.clone();
        async move { client.series(tenant, req).await.map(|r| r.series) }
    })
    .await
}

/// Label names, one `Vec` per answering ingester.
pub(crate) async fn label_names(
    set: &ReplicationSet,
    tenant: &TenantId,
    req: &LabelNamesRequest,
) -> Result<Vec<Vec<String>>, QuerierError> {
    fan_out(set, |client| {
        let req = req.clone();
        async move { client.label_names(tenant, req).await.map(|r| r.names) }
    })
    .await
}

/// Values of one label, one `Vec` per answering ingester.
pub(crate) async fn label_values(
    set: &ReplicationSet,
    tenant: &TenantId,
    req: &LabelValuesRequest,
) -> Result<Vec<Vec<String>>, QuerierError> {
    fan_out(set, |client| {
        let req = req.clone();
        async move { client.label_values(tenant, req).await.map(|r| r.values) }
    })
    .await
}
