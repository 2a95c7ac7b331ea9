//! Test helpers shared by the unit tests: the shared fake ingester set up per behaviour, fixed rings, a manual
//! clock, request builders.

use bytes::Bytes;
pub(crate) use heddle_model::ManualClock;
use heddle_model::TenantId;
use heddle_proto::IngesterClient;
use heddle_proto::prometheus::{Histogram, Label, Sample, TimeSeries, WriteRequest};
pub(crate) use heddle_proto::testing::FakeIngester;
use heddle_proto::testing::{Fault, PushAnswer};
pub(crate) use heddle_ring::{FixedReplicas, ReadSet, Replicas, RingError, WriteSet};
use prometheus_client::registry::Registry;
use prost::Message as _;
use std::sync::Arc;
use std::time::Duration;

/// Wall-clock "now" used by tests: 2024-01-01T00:00:00Z.
pub(crate) const NOW_MS: i64 = 1_704_067_200_000;

/// What a test ingester does with a push; [`fake`] builds `heddle_proto`'s shared fake from it.
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

/// The shared fake ingester (`heddle_proto::testing`), answering pushes as `behavior` says.
pub(crate) fn fake(behavior: Behavior) -> Arc<FakeIngester> {
    let f = FakeIngester::new();
    Arc::new(match behavior {
        Behavior::Accept => f,
        Behavior::Fail(code) => f.with_fault(Fault::Fail(tonic::Status::new(code, "fake ingester failure"))),
        Behavior::Slow(d) => f.with_fault(Fault::Delay(d)),
        Behavior::RefuseMetric(metric) => f.with_push_answer(PushAnswer::RefuseMetric(metric.to_owned())),
    })
}

/// What tests ask of a fake: the raw bodies it was pushed, in order.
pub(crate) trait PushedBodies {
    fn pushed_bodies(&self) -> Vec<Bytes>;
}

impl PushedBodies for FakeIngester {
    fn pushed_bodies(&self) -> Vec<Bytes> {
        self.pushes().into_iter().map(|(_, body)| body).collect()
    }
}

/// A ring of one ingester, `i`, owning every token (the single-process shape).
pub(crate) fn single(fake: Arc<FakeIngester>) -> FixedReplicas<Arc<dyn IngesterClient>> {
    FixedReplicas::single("i", fake as Arc<dyn IngesterClient>)
}

/// Test rings only serve writes; the distributor never asks for a read set.
pub(crate) fn no_read_set() -> Result<ReadSet<Arc<dyn IngesterClient>>, RingError> {
    Err(RingError::Empty)
}

/// Every token owned by the same replicas, which tests can inspect.
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
                .map(|(i, b)| (format!("ingester-{i}"), fake(b.clone())))
                .collect(),
            min_success: WriteSet::<()>::quorum(behaviors.len()),
        })
    }
}

impl Replicas<Arc<dyn IngesterClient>> for StaticRing {
    fn for_write(&self, _token: u32) -> WriteSet<Arc<dyn IngesterClient>> {
        WriteSet {
            replicas: self
                .ingesters
                .iter()
                .map(|(id, c)| (id.clone(), Arc::clone(c) as Arc<dyn IngesterClient>))
                .collect(),
            min_success: self.min_success,
            unavailable: None,
        }
    }

    fn for_read(&self) -> Result<ReadSet<Arc<dyn IngesterClient>>, RingError> {
        no_read_set()
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

/// The encoded write request of one series, `h`, holding the one native histogram `h`: for tests that decode a
/// histogram as the distributor receives it.
pub(crate) fn histogram_body(h: Histogram) -> Vec<u8> {
    WriteRequest {
        timeseries: vec![TimeSeries {
            histograms: vec![h],
            ..series(&[("__name__", "h")], &[])
        }],
        metadata: vec![],
    }
    .encode_to_vec()
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

/// A snappy block header declaring `len` decompressed bytes, followed by junk that is never reached.
pub(crate) fn declared_length(len: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut v = len;
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
    out.extend_from_slice(&[0u8; 8]);
    out
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

/// A reservation in a budget without a limit, for tests that call the decode stage directly.
pub(crate) fn unlimited_reservation() -> heddle_server::Reservation {
    heddle_server::InflightBytes::new(0, Default::default(), Default::default()).reserve()
}

/// Encodes and snappy-compresses the remote write 2.0 request of these series (labels interned into the
/// symbol table in first-use order); a series listed in `histograms` also carries those native histograms.
pub(crate) fn v2_body(
    timeseries: &[TimeSeries],
    histograms: &[(usize, Vec<heddle_proto::write_v2::Histogram>)],
) -> Vec<u8> {
    let mut request = heddle_testkit::codec::write_request_v2(&WriteRequest {
        timeseries: timeseries.to_vec(),
        ..WriteRequest::default()
    });
    for (series, h) in histograms {
        request.timeseries[*series].histograms.extend(h.iter().cloned());
    }
    snappy(&request.encode_to_vec())
}
