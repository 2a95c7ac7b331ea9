//! Test doubles shared by the unit tests: fake ingesters, a fixed ring, a manual clock, request builders.

use crate::ring::{IngesterRing, ReplicaSet};
use bytes::Bytes;
pub(crate) use heddle_model::ManualClock;
use heddle_model::TenantId;
use heddle_proto::IngesterClient;
use heddle_proto::QueryStream;
use heddle_proto::ingester::{
    LabelNamesRequest, LabelNamesResponse, LabelValuesRequest, LabelValuesResponse, PushResponse, QueryRequest,
    SeriesError, SeriesRequest, SeriesResponse,
};
use heddle_proto::prometheus::{Label, Sample, TimeSeries, WriteRequest};
use prometheus_client::registry::Registry;
use prost::Message as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Wall-clock "now" used by tests: 2024-01-01T00:00:00Z.
pub(crate) const NOW_MS: i64 = 1_704_067_200_000;

/// What a [`FakeIngester`] does with a push.
#[derive(Debug, Clone)]
pub(crate) enum Behavior {
    /// Accepts everything.
    Accept,
    /// Fails the whole push with this code.
    Fail(tonic::Code),
    /// Answers `Accept` after sleeping this long (tokio time).
    Slow(Duration),
    /// Refuses series with this metric name as out-of-order, accepts the rest.
    RefuseMetric(&'static str),
}

/// An in-memory ingester that records what it was sent.
#[derive(Debug)]
pub(crate) struct FakeIngester {
    behavior: Behavior,
    bodies: Mutex<Vec<Bytes>>,
}

impl FakeIngester {
    pub(crate) fn new(behavior: Behavior) -> Arc<Self> {
        Arc::new(Self {
            behavior,
            bodies: Mutex::new(Vec::new()),
        })
    }

    /// Raw bodies received, in order.
    pub(crate) fn bodies(&self) -> Vec<Bytes> {
        self.bodies.lock().unwrap().clone()
    }

    /// Every series received, decoded, in order.
    pub(crate) fn series(&self) -> Vec<TimeSeries> {
        self.bodies()
            .iter()
            .flat_map(|b| {
                WriteRequest::decode(b.clone())
                    .expect("distributor sent a valid WriteRequest")
                    .timeseries
            })
            .collect()
    }
}

#[async_trait::async_trait]
impl IngesterClient for FakeIngester {
    async fn push(&self, _tenant: &TenantId, write_request: Bytes) -> Result<PushResponse, tonic::Status> {
        let req = WriteRequest::decode(write_request.clone())
            .map_err(|e| tonic::Status::invalid_argument(format!("fake ingester: {e}")))?;
        self.bodies.lock().unwrap().push(write_request);
        let total: u64 = req.timeseries.iter().map(|s| s.samples.len() as u64).sum();
        match &self.behavior {
            Behavior::Accept => {}
            Behavior::Fail(code) => return Err(tonic::Status::new(*code, "fake ingester failure")),
            Behavior::Slow(d) => tokio::time::sleep(*d).await,
            Behavior::RefuseMetric(metric) => {
                let mut errors = Vec::new();
                let mut rejected = 0;
                for (i, s) in req.timeseries.iter().enumerate() {
                    if s.labels.iter().any(|l| l.name == "__name__" && l.value == *metric) {
                        rejected += s.samples.len() as u64;
                        errors.push(SeriesError {
                            series_index: i as u32,
                            reason: "err-heddle-sample-out-of-order".into(),
                            message: format!("err-heddle-sample-out-of-order: sample out of order (metric={metric})"),
                            samples_rejected: s.samples.len() as u32,
                        });
                    }
                }
                return Ok(PushResponse {
                    samples_ingested: total - rejected,
                    errors,
                });
            }
        }
        Ok(PushResponse {
            samples_ingested: total,
            errors: Vec::new(),
        })
    }

    async fn query_stream(&self, _: &TenantId, _: QueryRequest) -> Result<QueryStream, tonic::Status> {
        Err(tonic::Status::unimplemented("fake ingester"))
    }

    async fn label_names(&self, _: &TenantId, _: LabelNamesRequest) -> Result<LabelNamesResponse, tonic::Status> {
        Err(tonic::Status::unimplemented("fake ingester"))
    }

    async fn label_values(&self, _: &TenantId, _: LabelValuesRequest) -> Result<LabelValuesResponse, tonic::Status> {
        Err(tonic::Status::unimplemented("fake ingester"))
    }

    async fn series(&self, _: &TenantId, _: SeriesRequest) -> Result<SeriesResponse, tonic::Status> {
        Err(tonic::Status::unimplemented("fake ingester"))
    }
}

/// Every token owned by the same replicas.
#[derive(Debug)]
pub(crate) struct StaticRing {
    pub(crate) ingesters: Vec<(String, Arc<FakeIngester>)>,
    pub(crate) min_success: usize,
}

impl StaticRing {
    /// Replicas `ingester-0..` with the given behaviours and a majority quorum.
    pub(crate) fn new(behaviors: &[Behavior]) -> Arc<Self> {
        Arc::new(Self {
            ingesters: behaviors
                .iter()
                .enumerate()
                .map(|(i, b)| (format!("ingester-{i}"), FakeIngester::new(b.clone())))
                .collect(),
            min_success: ReplicaSet::quorum(behaviors.len()),
        })
    }
}

impl IngesterRing for StaticRing {
    fn replica_set(&self, _token: u32) -> ReplicaSet {
        ReplicaSet {
            ingesters: self
                .ingesters
                .iter()
                .map(|(id, c)| (id.clone(), Arc::clone(c) as Arc<dyn IngesterClient>))
                .collect(),
            min_success: self.min_success,
            unavailable: None,
        }
    }
}

/// Wall clock fixed at [`NOW_MS`] until a test moves it; monotonic time is tokio's (pause it to control it).
pub(crate) fn manual_clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(NOW_MS))
}

/// A series with these labels (in the given order) and samples `(t, v)`.
pub(crate) fn series(labels: &[(&str, &str)], samples: &[(i64, f64)]) -> TimeSeries {
    TimeSeries {
        labels: labels
            .iter()
            .map(|&(n, v)| Label {
                name: n.into(),
                value: v.into(),
            })
            .collect(),
        samples: samples
            .iter()
            .map(|&(timestamp, value)| Sample { value, timestamp })
            .collect(),
        ..TimeSeries::default()
    }
}

/// `{__name__=name, job="a"}` with one sample at [`NOW_MS`].
pub(crate) fn up(name: &str) -> TimeSeries {
    series(&[("__name__", name), ("job", "a")], &[(NOW_MS, 1.0)])
}

/// Encodes and snappy-compresses a WriteRequest of these series.
pub(crate) fn body(timeseries: Vec<TimeSeries>) -> Vec<u8> {
    snappy(
        &WriteRequest {
            timeseries,
            metadata: Vec::new(),
        }
        .encode_to_vec(),
    )
}

pub(crate) fn snappy(raw: &[u8]) -> Vec<u8> {
    snap::raw::Encoder::new()
        .compress_vec(raw)
        .expect("snappy compresses any input")
}

pub(crate) fn tenant() -> TenantId {
    TenantId::new("team-a").unwrap()
}

/// The registry's exposition text.
pub(crate) fn exposition(registry: &Registry) -> String {
    heddle_server::encode_metrics(registry)
}
