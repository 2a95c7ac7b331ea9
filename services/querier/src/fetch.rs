//! Fan-out to the ingesters of a read set, tolerating up to `max_errors` failures.

use crate::error::QuerierError;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use heddle_model::TenantId;
use heddle_proto::IngesterClient;
use heddle_proto::ingester::{LabelNamesRequest, LabelValuesRequest, SeriesRequest};
use heddle_proto::prometheus::Labels as ProtoLabels;
use heddle_ring::{InstanceId, ReadSet};
use std::future::Future;
use std::sync::Arc;

/// The querier's read set: ingesters with their clients.
pub(crate) type IngesterSet = ReadSet<Arc<dyn IngesterClient>>;

/// One call per ingester of a read set, running concurrently; answers are taken as they come.
///
/// Failures are counted against the set's `max_errors` (ingesters that could not be asked at all count from
/// the start); one too many fails the whole call with [`QuerierError::Ingesters`]. Calls not yet answered
/// keep running while the `FanOut` lives and are cancelled when it is dropped, so a caller can take the
/// answers it needs and keep the rest in reserve.
pub(crate) struct FanOut<'a, T> {
    ids: Vec<InstanceId>,
    pending: FuturesUnordered<BoxFuture<'a, (usize, Result<T, tonic::Status>)>>,
    asked: usize,
    max_errors: usize,
    failed: usize,
    last: Option<tonic::Status>,
}

impl<'a, T: Send + 'a> FanOut<'a, T> {
    /// Starts `call` on every ingester of `set`. Answers carry the ingester's index in `set.replicas`.
    pub(crate) fn start<F, Fut>(set: &IngesterSet, call: F) -> Self
    where
        F: Fn(Arc<dyn IngesterClient>) -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>> + Send + 'a,
    {
        let pending = set
            .replicas
            .iter()
            .enumerate()
            .map(|(i, (_, c))| call(Arc::clone(c)).map(move |r| (i, r)).boxed())
            .collect();
        let mut fan = Self {
            ids: set.replicas.iter().map(|(id, _)| id.clone()).collect(),
            pending,
            asked: set.len(),
            max_errors: set.max_errors,
            failed: 0,
            last: None,
        };
        for (id, reason) in &set.unreachable {
            tracing::warn!(ingester = %id, reason = %reason, "ingester cannot be asked");
            fan.failed += 1;
            fan.last = Some(tonic::Status::unavailable(reason.clone()));
        }
        fan
    }

    /// Answers needed for a complete result: all but `max_errors`. That many answers already hold every
    /// acknowledged sample (a write is acknowledged by a majority of its replicas, and the set tolerates
    /// losing `max_errors` of them), so a frozen ingester need not hold the query until its deadline.
    pub(crate) fn enough(&self) -> usize {
        self.asked.saturating_sub(self.max_errors)
    }

    /// Counts a failure of the ingester at `index` (from its call, or later, from its stream).
    pub(crate) fn fail(&mut self, index: usize, status: tonic::Status) -> Result<(), QuerierError> {
        tracing::warn!(ingester = %self.ids[index], code = ?status.code(), message = status.message(), "ingester query failed");
        self.failed += 1;
        self.last = Some(status);
        self.check()
    }

    fn check(&self) -> Result<(), QuerierError> {
        match &self.last {
            Some(last) if self.failed > self.max_errors => Err(QuerierError::Ingesters {
                failed: self.failed,
                asked: self.asked,
                max_errors: self.max_errors,
                last: Box::new(last.clone()),
            }),
            _ => Ok(()),
        }
    }

    /// The next successful answer, with its ingester's index; `None` once every call has finished.
    pub(crate) async fn next(&mut self) -> Result<Option<(usize, T)>, QuerierError> {
        self.check()?;
        while let Some((i, r)) = self.pending.next().await {
            match r {
                Ok(v) => return Ok(Some((i, v))),
                Err(status) => self.fail(i, status)?,
            }
        }
        Ok(None)
    }
}

/// Calls `call` on every ingester of `set` concurrently and returns the successful answers once
/// [`FanOut::enough`] of them arrived; the calls still running are cancelled.
async fn fan_out<'a, T, F, Fut>(set: &IngesterSet, call: F) -> Result<Vec<T>, QuerierError>
where
    T: Send + 'a,
    F: Fn(Arc<dyn IngesterClient>) -> Fut,
    Fut: Future<Output = Result<T, tonic::Status>> + Send + 'a,
{
    let mut fan = FanOut::start(set, call);
    let enough = fan.enough();
    let mut ok = Vec::with_capacity(enough);
    while ok.len() < enough
        && let Some((_, v)) = fan.next().await?
    {
        ok.push(v);
    }
    Ok(ok)
}

/// The label sets of matching series, one `Vec` per answering ingester.
pub(crate) async fn series(
    set: &IngesterSet,
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
    set: &IngesterSet,
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
    set: &IngesterSet,
    tenant: &TenantId,
    req: &LabelValuesRequest,
) -> Result<Vec<Vec<String>>, QuerierError> {
    fan_out(set, |client| {
        let req = req.clone();
        async move { client.label_values(tenant, req).await.map(|r| r.values) }
    })
    .await
}
