//! Fan-out to the ingesters of a read set, tolerating the failures the set allows: `max_errors` instances, or
//! with zone awareness whole zones (see [`ReadTracker`]).

use crate::error::QuerierError;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use heddle_model::TenantId;
use heddle_proto::IngesterClient;
use heddle_proto::ingester::{
    ExemplarQueryRequest, LabelNamesRequest, LabelNamesResponse, LabelValuesRequest, LabelValuesResponse,
    MetricsMetadataRequest, SeriesRequest, SeriesResponse,
};
use heddle_proto::prometheus::{MetricMetadata, TimeSeries};
use heddle_ring::{InstanceId, ReadSet, ReadTracker};
use std::future::Future;
use std::sync::Arc;

/// The querier's read set: ingesters with their clients.
pub(crate) type IngesterSet = ReadSet<Arc<dyn IngesterClient>>;

/// One call per ingester of a read set, running concurrently; answers are taken as they come.
///
/// Failures are counted against what the set tolerates (ingesters that could not be asked at all count from
/// the start); one too many fails the whole call with [`QuerierError::Ingesters`] (or
/// [`QuerierError::IngesterZones`]). Every failure counts, whatever its status: an ingester still replaying
/// its WAL answers `Unavailable` and is one failed replica, never an empty answer. Calls not yet answered
/// keep running while the `FanOut` lives and are cancelled when it is dropped, so a caller can take the
/// answers it needs and keep the rest in reserve.
pub(crate) struct FanOut<'a, T> {
    ids: Vec<InstanceId>,
    pending: FuturesUnordered<BoxFuture<'a, (usize, Result<T, tonic::Status>)>>,
    tracker: ReadTracker,
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
            tracker: ReadTracker::new(set),
            last: None,
        };
        for (id, reason) in &set.unreachable {
            tracing::warn!(ingester = %id, reason = %reason, "ingester cannot be asked");
            fan.last = Some(tonic::Status::unavailable(reason.clone()));
        }
        fan
    }

    /// True once the answers standing hold every acknowledged sample: all but `max_errors` ingesters (a write
    /// is acknowledged by a majority of its replicas, and the set tolerates losing `max_errors` of them), or
    /// every ingester of all but the zones that may fail. A frozen ingester then need not hold the query
    /// until its deadline.
    pub(crate) fn complete(&self) -> bool {
        self.tracker.complete()
    }

    /// Counts a failure of the ingester at `index` (from its call, or later, from its stream: its answer no
    /// longer counts).
    pub(crate) fn fail(&mut self, index: usize, status: tonic::Status) -> Result<(), QuerierError> {
        tracing::warn!(ingester = %self.ids[index], code = ?status.code(), message = status.message(), "ingester query failed");
        self.tracker.failed(index);
        self.last = Some(status);
        self.check()
    }

    /// Fails when every call finished without the answers being complete. Unreachable with the tolerance
    /// counted right (each missing answer is a counted failure), kept so a partial answer can never pass as a
    /// whole one.
    pub(crate) fn check_complete(&self) -> Result<(), QuerierError> {
        if self.complete() {
            return Ok(());
        }
        Err(QuerierError::Ingesters {
            failed: self.tracker.failures(),
            asked: self.tracker.asked(),
            max_errors: self.tracker.max_errors(),
            last: Box::new(
                self.last
                    .clone()
                    .unwrap_or_else(|| tonic::Status::unavailable("too few ingesters answered")),
            ),
        })
    }

    fn check(&self) -> Result<(), QuerierError> {
        let Some(last) = self.last.as_ref().filter(|_| !self.tracker.within_tolerance()) else {
            return Ok(());
        };
        let last = Box::new(last.clone());
        Err(match self.tracker.zone_failures() {
            None => QuerierError::Ingesters {
                failed: self.tracker.failures(),
                asked: self.tracker.asked(),
                max_errors: self.tracker.max_errors(),
                last,
            },
            Some((failed, zones, max_unavailable)) => QuerierError::IngesterZones {
                failed: failed.join(","),
                zones,
                max_unavailable,
                last,
            },
        })
    }

    /// The next successful answer, with its ingester's index; `None` once every call has finished.
    pub(crate) async fn next(&mut self) -> Result<Option<(usize, T)>, QuerierError> {
        self.check()?;
        while let Some((i, r)) = self.pending.next().await {
            match r {
                Ok(v) => {
                    self.tracker.answered(i);
                    return Ok(Some((i, v)));
                }
                Err(status) => self.fail(i, status)?,
            }
        }
        Ok(None)
    }
}

/// Calls `call` on every ingester of `set` concurrently and returns the successful answers once they are
/// [`FanOut::complete`]; the calls still running are cancelled.
async fn fan_out<'a, T, F, Fut>(set: &IngesterSet, call: F) -> Result<Vec<T>, QuerierError>
where
    T: Send + 'a,
    F: Fn(Arc<dyn IngesterClient>) -> Fut,
    Fut: Future<Output = Result<T, tonic::Status>> + Send + 'a,
{
    let mut fan = FanOut::start(set, call);
    let mut ok = Vec::with_capacity(set.replicas.len());
    while !fan.complete()
        && let Some((_, v)) = fan.next().await?
    {
        ok.push(v);
    }
    fan.check_complete()?;
    Ok(ok)
}

/// The label sets of matching series, one answer per answering ingester (with the blocks it left to the bucket).
pub(crate) async fn series(
    set: &IngesterSet,
    tenant: &TenantId,
    req: &SeriesRequest,
) -> Result<Vec<SeriesResponse>, QuerierError> {
    fan_out(set, |client| {
        let req = req.clone();
        async move { client.series(tenant, req).await }
    })
    .await
}

/// Label names, one answer per answering ingester (with the blocks it left to the bucket).
pub(crate) async fn label_names(
    set: &IngesterSet,
    tenant: &TenantId,
    req: &LabelNamesRequest,
) -> Result<Vec<LabelNamesResponse>, QuerierError> {
    fan_out(set, |client| {
        let req = req.clone();
        async move { client.label_names(tenant, req).await }
    })
    .await
}

/// Values of one label, one answer per answering ingester (with the blocks it left to the bucket).
pub(crate) async fn label_values(
    set: &IngesterSet,
    tenant: &TenantId,
    req: &LabelValuesRequest,
) -> Result<Vec<LabelValuesResponse>, QuerierError> {
    fan_out(set, |client| {
        let req = req.clone();
        async move { client.label_values(tenant, req).await }
    })
    .await
}

/// Metric metadata, one `Vec` per answering ingester.
pub(crate) async fn metrics_metadata(
    set: &IngesterSet,
    tenant: &TenantId,
    req: &MetricsMetadataRequest,
) -> Result<Vec<Vec<MetricMetadata>>, QuerierError> {
    fan_out(set, |client| {
        let req = req.clone();
        async move { client.metrics_metadata(tenant, req).await.map(|r| r.metadata) }
    })
    .await
}

/// Exemplars of matching series, one `Vec` per answering ingester.
pub(crate) async fn exemplars(
    set: &IngesterSet,
    tenant: &TenantId,
    req: &ExemplarQueryRequest,
) -> Result<Vec<Vec<TimeSeries>>, QuerierError> {
    fan_out(set, |client| {
        let req = req.clone();
        async move { client.query_exemplars(tenant, req).await.map(|r| r.timeseries) }
    })
    .await
}
