//! An in-memory `IngesterClient` serving canned series, for driving the querier end to end.

use crate::chunks;
use crate::convert::{labels_to_proto, matcher_from_proto};
use heddle_model::{Labels, Matcher, Sample, TenantId};
use heddle_proto::ingester::{
    LabelNamesRequest, LabelNamesResponse, LabelValuesRequest, LabelValuesResponse, PushResponse, QueryRequest,
    QueryStreamResponse, SeriesRequest, SeriesResponse,
};
use heddle_proto::prometheus::{Chunk, ChunkedSeries, LabelMatcher, Labels as ProtoLabels};
use heddle_proto::{IngesterClient, QueryStream};
use std::sync::Mutex;

/// How the fake answers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Mode {
    Serve,
    /// Every call fails with `Unavailable`.
    Down,
    /// Every call waits forever.
    Hang,
}

#[derive(Debug)]
pub(crate) struct FakeIngester {
    series: Vec<(Labels, Vec<Chunk>)>,
    mode: Mode,
    /// Tenants of the calls received, to check the querier passes the tenant through.
    pub(crate) tenants: Mutex<Vec<String>>,
}

impl FakeIngester {
    pub(crate) fn new(mode: Mode) -> Self {
        Self {
            series: Vec::new(),
            mode,
            tenants: Mutex::new(Vec::new()),
        }
    }

    /// Adds a series whose samples are cut into chunks of `per_chunk` samples (real XOR chunks).
    pub(crate) fn with_series(mut self, labels: &[(&str, &str)], samples: &[Sample], per_chunk: usize) -> Self {
        let chunks = samples
            .chunks(per_chunk)
            .map(|c| chunks::encode_one(c).unwrap())
            .collect();
        self.series
            .push((Labels::from_unsorted(labels.iter().copied()).unwrap(), chunks));
        self
    }

    async fn enter(&self, tenant: &TenantId) -> Result<(), tonic::Status> {
        self.tenants.lock().unwrap().push(tenant.to_string());
        match self.mode {
            Mode::Serve => Ok(()),
            Mode::Down => Err(tonic::Status::unavailable("fake ingester is down")),
            Mode::Hang => futures::future::pending().await,
        }
    }

    fn matching(&self, matchers: &[LabelMatcher]) -> Result<Vec<&(Labels, Vec<Chunk>)>, tonic::Status> {
        let ms: Vec<Matcher> = matchers
            .iter()
            .map(|m| matcher_from_proto(m).map_err(|e| tonic::Status::invalid_argument(e.to_string())))
            .collect::<Result<_, _>>()?;
        Ok(self
            .series
            .iter()
            .filter(|(l, _)| ms.iter().all(|m| m.matches(l.get(m.name()).unwrap_or(""))))
            .collect())
    }
}

#[async_trait::async_trait]
impl IngesterClient for FakeIngester {
    async fn push(&self, _tenant: &TenantId, _write_request: bytes::Bytes) -> Result<PushResponse, tonic::Status> {
        Err(tonic::Status::unimplemented("the fake ingester is read-only"))
    }

    async fn query_stream(&self, tenant: &TenantId, req: QueryRequest) -> Result<QueryStream, tonic::Status> {
        self.enter(tenant).await?;
        let (start, end) = (req.start_timestamp_ms, req.end_timestamp_ms);
        // One response message per series, as a real ingester batching small.
        let responses: Vec<Result<QueryStreamResponse, tonic::Status>> = self
            .matching(&req.matchers)?
            .into_iter()
            .map(|(labels, chunks)| {
                let chunks = chunks
                    .iter()
                    .filter(|c| c.max_time_ms >= start && c.min_time_ms <= end)
                    .cloned()
                    .collect();
                Ok(QueryStreamResponse {
                    series: vec![ChunkedSeries {
                        labels: labels_to_proto(labels),
                        chunks,
                    }],
                })
            })
            .collect();
        Ok(Box::pin(futures::stream::iter(responses)))
    }

    async fn label_names(
        &self,
        tenant: &TenantId,
        req: LabelNamesRequest,
    ) -> Result<LabelNamesResponse, tonic::Status> {
        self.enter(tenant).await?;
        let mut names: Vec<String> = self
            .matching(&req.matchers)?
            .into_iter()
            .flat_map(|(l, _)| l.iter().map(|l| l.name.to_owned()))
            .collect();
        names.sort();
        names.dedup();
        Ok(LabelNamesResponse { names })
    }

    async fn label_values(
        &self,
        tenant: &TenantId,
        req: LabelValuesRequest,
    ) -> Result<LabelValuesResponse, tonic::Status> {
        self.enter(tenant).await?;
        let mut values: Vec<String> = self
            .matching(&req.matchers)?
            .into_iter()
            .filter_map(|(l, _)| l.get(&req.name).map(str::to_owned))
            .collect();
        values.sort();
        values.dedup();
        Ok(LabelValuesResponse { values })
    }

    async fn series(&self, tenant: &TenantId, req: SeriesRequest) -> Result<SeriesResponse, tonic::Status> {
        self.enter(tenant).await?;
        let mut series = Vec::new();
        for sel in &req.selectors {
            for (l, _) in self.matching(&sel.matchers)? {
                series.push(ProtoLabels {
                    labels: labels_to_proto(l),
                });
            }
        }
        Ok(SeriesResponse { series })
    }
}
