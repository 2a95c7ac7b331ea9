//! The one fake ingester for tests (feature `test-util`): an in-memory [`IngesterClient`] that records every
//! call, serves queries from the series it is given, and fails, hangs or breaks its streams on request.
//!
//! Writers' tests check what was pushed ([`FakeIngester::pushes`], [`FakeIngester::pushed_series`]) and
//! script refusals ([`PushAnswer`]); readers' tests give it series ([`FakeIngester::with_series`]) and
//! faults ([`Fault`]), per call or per tenant.

use crate::client::{IngesterClient, QueryStream};
use crate::convert::{labels_to_proto, matchers_from_proto};
use crate::ingester::{
    ExemplarQueryRequest, ExemplarQueryResponse, LabelNamesRequest, LabelNamesResponse, LabelValuesRequest,
    LabelValuesResponse, MetricsMetadataRequest, MetricsMetadataResponse, PushResponse, QueryRequest,
    QueryStreamResponse, SeriesError, SeriesRequest, SeriesResponse,
};
use crate::prometheus::{
    Chunk, ChunkedSeries, Exemplar, LabelMatcher, Labels as ProtoLabels, MetricMetadata, TimeSeries, WriteRequest,
};
use bytes::Bytes;
use futures::StreamExt;
use heddle_model::{Labels, Matcher, TenantId};
use prost::Message;
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How a call goes wrong. Every fault applies after the call is recorded.
#[derive(Debug, Clone, Default)]
pub enum Fault {
    /// Answers normally.
    #[default]
    None,
    /// Every call fails with this status.
    Fail(tonic::Status),
    /// Every call waits forever (a frozen ingester).
    Hang,
    /// Every call answers normally after this long (tokio time, so paused clocks control it).
    Delay(Duration),
    /// `query_stream` sends `after` messages, then this error; other calls answer normally.
    BreakStream { after: usize, error: tonic::Status },
    /// `query_stream` sends `after` messages, then never another; other calls answer normally.
    StallStream { after: usize },
}

/// A custom push answer: the tenant and the body as received.
pub type PushFn = Arc<dyn Fn(&TenantId, &Bytes) -> Result<PushResponse, tonic::Status> + Send + Sync>;

/// What a push is answered with (when no [`Fault`] applies).
#[derive(Clone, Default)]
pub enum PushAnswer {
    /// Decodes the `WriteRequest` (refusing one that does not decode with `InvalidArgument`) and ingests
    /// every sample.
    #[default]
    Accept,
    /// As `Accept`, but refuses the series with this metric name as out-of-order (per-series errors).
    RefuseMetric(String),
    /// Whatever the function says.
    Custom(PushFn),
}

impl fmt::Debug for PushAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Accept => f.write_str("Accept"),
            Self::RefuseMetric(m) => f.debug_tuple("RefuseMetric").field(m).finish(),
            Self::Custom(_) => f.write_str("Custom"),
        }
    }
}

/// One call the fake received, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    Push(TenantId, Bytes),
    QueryStream(TenantId, QueryRequest),
    LabelNames(TenantId, LabelNamesRequest),
    LabelValues(TenantId, LabelValuesRequest),
    Series(TenantId, SeriesRequest),
    MetricsMetadata(TenantId, MetricsMetadataRequest),
    QueryExemplars(TenantId, ExemplarQueryRequest),
}

impl Call {
    /// The tenant the call was made for.
    pub fn tenant(&self) -> &TenantId {
        match self {
            Self::Push(t, _)
            | Self::QueryStream(t, _)
            | Self::LabelNames(t, _)
            | Self::LabelValues(t, _)
            | Self::Series(t, _)
            | Self::MetricsMetadata(t, _)
            | Self::QueryExemplars(t, _) => t,
        }
    }
}

/// An in-memory ingester; see the module docs.
#[derive(Debug)]
pub struct FakeIngester {
    /// Served series, sorted by labels as a real ingester streams them.
    series: Vec<(Labels, Vec<Chunk>)>,
    /// Served metadata, answered in the order given (the caller orders it), only the requested family when
    /// one is named; the limits are not applied.
    metadata: Vec<MetricMetadata>,
    /// Served exemplars per series, sorted by labels.
    exemplars: Vec<(Labels, Vec<Exemplar>)>,
    fault: Fault,
    tenant_faults: HashMap<String, Fault>,
    push: PushAnswer,
    series_per_message: usize,
    calls: Mutex<Vec<Call>>,
    /// Claims to be in the caller's process: [`IngesterClient::takes_batches`] is true, and a batch is
    /// recorded as the `Push` of its encoding.
    takes_batches: bool,
    /// `query_stream` messages the callers took from their streams (not those built and never read).
    streamed: Arc<AtomicUsize>,
    /// ULIDs every read answer names as left to the bucket (`blocks_left_to_bucket`).
    left_to_bucket: Vec<String>,
}

impl Default for FakeIngester {
    fn default() -> Self {
        Self {
            series: Vec::new(),
            metadata: Vec::new(),
            exemplars: Vec::new(),
            fault: Fault::None,
            tenant_faults: HashMap::new(),
            push: PushAnswer::Accept,
            series_per_message: 1,
            calls: Mutex::new(Vec::new()),
            takes_batches: false,
            streamed: Arc::default(),
            left_to_bucket: Vec::new(),
        }
    }
}

impl FakeIngester {
    /// A healthy ingester holding nothing that accepts every valid push.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also serves `metadata` (after what it serves already); a request naming a family gets only its entries,
    /// whatever the request's limits.
    pub fn with_metadata(mut self, metadata: MetricMetadata) -> Self {
        self.metadata.push(metadata);
        self
    }

    /// Also serves `exemplars` of `labels` (those inside a query's range).
    pub fn with_exemplars(mut self, labels: Labels, exemplars: Vec<Exemplar>) -> Self {
        let at = self.exemplars.partition_point(|(l, _)| *l < labels);
        self.exemplars.insert(at, (labels, exemplars));
        self
    }

    /// Also serves `labels` with `chunks` (sent as they are, those overlapping a query's range).
    pub fn with_series(mut self, labels: Labels, chunks: Vec<Chunk>) -> Self {
        let at = self.series.partition_point(|(l, _)| *l < labels);
        self.series.insert(at, (labels, chunks));
        self
    }

    /// Every read answer names `ulids` as blocks this ingester leaves to the bucket (in the first message of a
    /// `query_stream`, sent even without series), as an ingester does for blocks shipped past its grace.
    pub fn with_blocks_left_to_bucket(mut self, ulids: &[&str]) -> Self {
        self.left_to_bucket = ulids.iter().map(|u| (*u).to_owned()).collect();
        self
    }

    /// Every call meets `fault` (unless its tenant has its own).
    pub fn with_fault(mut self, fault: Fault) -> Self {
        self.fault = fault;
        self
    }

    /// Calls for `tenant` meet `fault`.
    pub fn with_tenant_fault(mut self, tenant: &str, fault: Fault) -> Self {
        self.tenant_faults.insert(tenant.to_owned(), fault);
        self
    }

    /// Pushes are answered by `answer`.
    pub fn with_push_answer(mut self, answer: PushAnswer) -> Self {
        self.push = answer;
        self
    }

    /// `query_stream` messages carry up to `n` series each (default 1).
    /// Takes pushes as [`heddle_model::SeriesBatch`]es, as an ingester in the caller's process does; each is
    /// recorded (and answered) as the push of its encoding.
    pub fn taking_batches(mut self) -> Self {
        self.takes_batches = true;
        self
    }

    pub fn with_series_per_message(mut self, n: usize) -> Self {
        self.series_per_message = n.max(1);
        self
    }

    /// `query_stream` messages callers took from their streams so far: what they actually fetched.
    pub fn streamed_messages(&self) -> usize {
        self.streamed.load(Ordering::Relaxed)
    }

    /// Every call received, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The tenant of every call received, in order.
    pub fn tenants(&self) -> Vec<String> {
        self.calls().iter().map(|c| c.tenant().to_string()).collect()
    }

    /// Every push received: tenant and raw body, in order.
    pub fn pushes(&self) -> Vec<(TenantId, Bytes)> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Push(t, b) => Some((t, b)),
                _ => None,
            })
            .collect()
    }

    /// Every series pushed, decoded, in order. Panics on a body that is not a `WriteRequest`: a test asking
    /// what was pushed must not pass on garbage.
    pub fn pushed_series(&self) -> Vec<crate::prometheus::TimeSeries> {
        self.pushes()
            .into_iter()
            .flat_map(|(_, b)| {
                WriteRequest::decode(b)
                    .expect("a pushed body is a valid WriteRequest")
                    .timeseries
            })
            .collect()
    }

    fn fault_for(&self, tenant: &TenantId) -> &Fault {
        self.tenant_faults.get(tenant.as_str()).unwrap_or(&self.fault)
    }

    /// Records `call`, then applies the call-level fault.
    async fn enter(&self, call: Call) -> Result<&Fault, tonic::Status> {
        let fault = self.fault_for(call.tenant());
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).push(call);
        match fault {
            Fault::Fail(status) => Err(status.clone()),
            Fault::Hang => futures::future::pending().await,
            Fault::Delay(d) => {
                tokio::time::sleep(*d).await;
                Ok(fault)
            }
            _ => Ok(fault),
        }
    }

    fn matching(&self, matchers: &[LabelMatcher]) -> Result<Vec<&(Labels, Vec<Chunk>)>, tonic::Status> {
        let ms: Vec<Matcher> =
            matchers_from_proto(matchers).map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
        Ok(self
            .series
            .iter()
            .filter(|(l, _)| ms.iter().all(|m| m.matches(l.get(m.name()).unwrap_or(""))))
            .collect())
    }

    fn answer_push(&self, tenant: &TenantId, body: &Bytes) -> Result<PushResponse, tonic::Status> {
        let refused_metric = match &self.push {
            PushAnswer::Custom(f) => return f(tenant, body),
            PushAnswer::Accept => None,
            PushAnswer::RefuseMetric(m) => Some(m.as_str()),
        };
        let req = WriteRequest::decode(body.clone())
            .map_err(|e| tonic::Status::invalid_argument(format!("fake ingester: {e}")))?;
        let mut out = PushResponse::default();
        for (i, s) in req.timeseries.iter().enumerate() {
            let n = s.samples.len() as u64;
            let refused = refused_metric.filter(|m| s.labels.iter().any(|l| l.name == "__name__" && l.value == *m));
            match refused {
                Some(metric) => out.errors.push(SeriesError {
                    series_index: i as u32,
                    reason: "err-heddle-sample-out-of-order".into(),
                    message: format!("err-heddle-sample-out-of-order: sample out of order (metric={metric})"),
                    samples_rejected: n as u32,
                }),
                None => out.samples_ingested += n,
            }
        }
        Ok(out)
    }
}

#[async_trait::async_trait]
impl IngesterClient for FakeIngester {
    fn takes_batches(&self) -> bool {
        self.takes_batches
    }

    async fn push(&self, tenant: &TenantId, write_request: Bytes) -> Result<PushResponse, tonic::Status> {
        self.enter(Call::Push(tenant.clone(), write_request.clone())).await?;
        self.answer_push(tenant, &write_request)
    }

    async fn query_stream(&self, tenant: &TenantId, req: QueryRequest) -> Result<QueryStream, tonic::Status> {
        let fault = self.enter(Call::QueryStream(tenant.clone(), req.clone())).await?;
        let (start, end) = (req.start_timestamp_ms, req.end_timestamp_ms);
        let series: Vec<ChunkedSeries> = self
            .matching(&req.matchers)?
            .into_iter()
            .map(|(labels, chunks)| ChunkedSeries {
                labels: labels_to_proto(labels),
                chunks: chunks
                    .iter()
                    .filter(|c| c.max_time_ms >= start && c.min_time_ms <= end)
                    .cloned()
                    .collect(),
            })
            .collect();
        let streamed = Arc::clone(&self.streamed);
        let mut messages: Vec<Result<QueryStreamResponse, tonic::Status>> = series
            .chunks(self.series_per_message)
            .map(|s| {
                Ok(QueryStreamResponse {
                    series: s.to_vec(),
                    ..Default::default()
                })
            })
            .collect();
        if !self.left_to_bucket.is_empty() {
            if messages.is_empty() {
                messages.push(Ok(QueryStreamResponse::default()));
            }
            if let Some(Ok(first)) = messages.first_mut() {
                first.blocks_left_to_bucket.clone_from(&self.left_to_bucket);
            }
        }
        let counted = move |m| {
            streamed.fetch_add(1, Ordering::Relaxed);
            m
        };
        match fault {
            Fault::BreakStream { after, error } => {
                messages.truncate(*after);
                messages.push(Err(error.clone()));
            }
            Fault::StallStream { after } => {
                messages.truncate(*after);
                return Ok(futures::stream::iter(messages)
                    .map(counted)
                    .chain(futures::stream::pending())
                    .boxed());
            }
            _ => {}
        }
        Ok(futures::stream::iter(messages).map(counted).boxed())
    }

    async fn label_names(
        &self,
        tenant: &TenantId,
        req: LabelNamesRequest,
    ) -> Result<LabelNamesResponse, tonic::Status> {
        self.enter(Call::LabelNames(tenant.clone(), req.clone())).await?;
        let names: BTreeSet<String> = self
            .matching(&req.matchers)?
            .into_iter()
            .flat_map(|(l, _)| l.iter().map(|l| l.name.to_owned()))
            .collect();
        Ok(LabelNamesResponse {
            names: names.into_iter().collect(),
            blocks_left_to_bucket: self.left_to_bucket.clone(),
        })
    }

    async fn label_values(
        &self,
        tenant: &TenantId,
        req: LabelValuesRequest,
    ) -> Result<LabelValuesResponse, tonic::Status> {
        self.enter(Call::LabelValues(tenant.clone(), req.clone())).await?;
        let values: BTreeSet<String> = self
            .matching(&req.matchers)?
            .into_iter()
            .filter_map(|(l, _)| l.get(&req.name).map(str::to_owned))
            .collect();
        Ok(LabelValuesResponse {
            values: values.into_iter().collect(),
            blocks_left_to_bucket: self.left_to_bucket.clone(),
        })
    }

    async fn series(&self, tenant: &TenantId, req: SeriesRequest) -> Result<SeriesResponse, tonic::Status> {
        self.enter(Call::Series(tenant.clone(), req.clone())).await?;
        // The union over selectors, sorted and unique, as a real ingester answers.
        let mut all = BTreeSet::new();
        for sel in &req.selectors {
            all.extend(self.matching(&sel.matchers)?.into_iter().map(|(l, _)| l));
        }
        Ok(SeriesResponse {
            series: all
                .into_iter()
                .map(|l| ProtoLabels {
                    labels: labels_to_proto(l),
                })
                .collect(),
            blocks_left_to_bucket: self.left_to_bucket.clone(),
        })
    }

    async fn metrics_metadata(
        &self,
        tenant: &TenantId,
        req: MetricsMetadataRequest,
    ) -> Result<MetricsMetadataResponse, tonic::Status> {
        let metric = req.metric.clone();
        self.enter(Call::MetricsMetadata(tenant.clone(), req)).await?;
        Ok(MetricsMetadataResponse {
            metadata: self
                .metadata
                .iter()
                .filter(|m| metric.is_empty() || m.metric_family_name == metric)
                .cloned()
                .collect(),
        })
    }

    async fn query_exemplars(
        &self,
        tenant: &TenantId,
        req: ExemplarQueryRequest,
    ) -> Result<ExemplarQueryResponse, tonic::Status> {
        self.enter(Call::QueryExemplars(tenant.clone(), req.clone())).await?;
        let selectors = req
            .selectors
            .iter()
            .map(|s| matchers_from_proto(&s.matchers))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| tonic::Status::invalid_argument(format!("fake ingester: {e}")))?;
        let mut timeseries = Vec::new();
        for (labels, exemplars) in &self.exemplars {
            let matched = selectors
                .iter()
                .any(|ms| ms.iter().all(|m| m.matches(labels.get(m.name()).unwrap_or(""))));
            let inside: Vec<Exemplar> = exemplars
                .iter()
                .filter(|e| (req.start_timestamp_ms..=req.end_timestamp_ms).contains(&e.timestamp))
                .cloned()
                .collect();
            if matched && !inside.is_empty() {
                timeseries.push(TimeSeries {
                    labels: labels_to_proto(labels),
                    exemplars: inside,
                    ..TimeSeries::default()
                });
            }
        }
        Ok(ExemplarQueryResponse { timeseries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prometheus::{Label, Sample, TimeSeries, label_matcher::Type};

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        Labels::from_unsorted(pairs.iter().copied()).unwrap()
    }

    fn chunk(min: i64, max: i64) -> Chunk {
        Chunk {
            min_time_ms: min,
            max_time_ms: max,
            r#type: crate::prometheus::chunk::Encoding::Xor as i32,
            data: vec![0, 1],
        }
    }

    fn tenant(t: &str) -> TenantId {
        TenantId::new(t).unwrap()
    }

    fn body(metrics: &[&str]) -> Bytes {
        let timeseries = metrics
            .iter()
            .map(|m| TimeSeries {
                labels: vec![Label {
                    name: "__name__".into(),
                    value: (*m).into(),
                }],
                samples: vec![Sample {
                    value: 1.0,
                    timestamp: 1,
                }],
                ..Default::default()
            })
            .collect();
        Bytes::from(
            WriteRequest {
                timeseries,
                metadata: vec![],
            }
            .encode_to_vec(),
        )
    }

    #[tokio::test]
    async fn serves_matching_series_in_label_order_trimmed_to_the_range() {
        let fake = FakeIngester::new()
            .with_series(
                labels(&[("__name__", "up"), ("job", "b")]),
                vec![chunk(0, 9), chunk(10, 19)],
            )
            .with_series(labels(&[("__name__", "up"), ("job", "a")]), vec![chunk(0, 9)])
            .with_series(labels(&[("__name__", "other")]), vec![chunk(0, 9)])
            .with_series_per_message(2);
        let req = QueryRequest {
            start_timestamp_ms: 12,
            end_timestamp_ms: 30,
            matchers: vec![LabelMatcher {
                r#type: Type::Eq as i32,
                name: "__name__".into(),
                value: "up".into(),
            }],
        };
        let msgs: Vec<QueryStreamResponse> = fake
            .query_stream(&tenant("t"), req.clone())
            .await
            .unwrap()
            .map(Result::unwrap)
            .collect()
            .await;
        assert_eq!(msgs.len(), 1, "two series per message");
        let jobs: Vec<(&str, usize)> = msgs[0]
            .series
            .iter()
            .map(|s| (s.labels[1].value.as_str(), s.chunks.len()))
            .collect();
        assert_eq!(
            jobs,
            [("a", 0), ("b", 1)],
            "sorted by labels, chunks outside the range left out"
        );
        assert_eq!(fake.calls(), [Call::QueryStream(tenant("t"), req)]);

        let names = fake.label_names(&tenant("t"), Default::default()).await.unwrap();
        assert_eq!(names.names, ["__name__", "job"]);
        let values = fake
            .label_values(
                &tenant("t"),
                LabelValuesRequest {
                    name: "job".into(),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(values.values, ["a", "b"]);
        let series = fake
            .series(
                &tenant("u"),
                SeriesRequest {
                    selectors: vec![Default::default(); 2],
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(series.series.len(), 3, "the union of selectors, unique");
        assert_eq!(fake.tenants(), ["t", "t", "t", "u"]);
    }

    #[tokio::test]
    async fn records_pushes_and_answers_them_as_told() {
        let fake = FakeIngester::new().with_push_answer(PushAnswer::RefuseMetric("bad".into()));
        let resp = fake.push(&tenant("t"), body(&["good", "bad", "good"])).await.unwrap();
        assert_eq!(resp.samples_ingested, 2);
        assert_eq!(resp.errors.len(), 1);
        assert_eq!(resp.errors[0].series_index, 1);
        assert_eq!(resp.errors[0].reason, "err-heddle-sample-out-of-order");
        assert_eq!(fake.pushed_series().len(), 3, "series by series");
        let err = fake.push(&tenant("t"), Bytes::from_static(&[0xff])).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert_eq!(fake.pushes().len(), 2, "every push is recorded");
    }

    #[tokio::test]
    #[should_panic(expected = "a pushed body is a valid WriteRequest")]
    async fn pushed_series_refuses_to_read_garbage() {
        let fake = FakeIngester::new();
        let _ = fake.push(&tenant("t"), Bytes::from_static(&[0xff])).await;
        fake.pushed_series();
    }

    #[tokio::test(start_paused = true)]
    async fn faults_per_call_and_per_tenant() {
        let fake = FakeIngester::new()
            .with_series(labels(&[("a", "1")]), vec![chunk(0, 1)])
            .with_series(labels(&[("a", "2")]), vec![chunk(0, 1)])
            .with_fault(Fault::Fail(tonic::Status::unavailable("down")))
            .with_tenant_fault("hang", Fault::Hang)
            .with_tenant_fault("slow", Fault::Delay(Duration::from_secs(5)))
            .with_tenant_fault(
                "break",
                Fault::BreakStream {
                    after: 1,
                    error: tonic::Status::internal("corrupt"),
                },
            )
            .with_tenant_fault("stall", Fault::StallStream { after: 1 });
        let all = QueryRequest {
            end_timestamp_ms: 10,
            ..Default::default()
        };
        let err = fake.label_names(&tenant("t"), Default::default()).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unavailable);
        let hang = tenant("hang");
        let hung = tokio::time::timeout(Duration::from_secs(60), fake.series(&hang, Default::default()));
        assert!(hung.await.is_err(), "a hung call never answers");
        let started = tokio::time::Instant::now();
        fake.push(&tenant("slow"), body(&["x"])).await.unwrap();
        assert_eq!(started.elapsed(), Duration::from_secs(5));

        let mut s = fake.query_stream(&tenant("break"), all.clone()).await.unwrap();
        assert!(s.next().await.unwrap().is_ok());
        assert_eq!(s.next().await.unwrap().unwrap_err().message(), "corrupt");
        assert!(s.next().await.is_none());
        let mut s = fake.query_stream(&tenant("stall"), all).await.unwrap();
        assert!(s.next().await.unwrap().is_ok());
        let next = tokio::time::timeout(Duration::from_secs(60), s.next()).await;
        assert!(next.is_err(), "stalled");
        assert_eq!(fake.calls().len(), 5, "failed calls are recorded too");
    }
}
