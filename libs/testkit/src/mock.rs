//! An in-process stand-in for heddle's HTTP API: stores remote-write samples in memory and serves them over
//! remote read (both response types). It lets the load generator and client helpers be tested without the real
//! binary, and can be told to fail the next requests with chosen statuses.

use crate::TestkitError;
use crate::codec::{
    decode_read_request, decode_write_request, decode_write_request_v2, encode_chunked_frame, encode_read_response,
};
use crate::xor::XorEncoder;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use heddle_model::{Labels, MatchType, Matcher, TENANT_HEADER};
use heddle_proto::prometheus::read_request::ResponseType;
use heddle_proto::prometheus::{
    Chunk, ChunkedReadResponse, ChunkedSeries, Label, QueryResult, ReadResponse, Sample as ProtoSample, TimeSeries,
    chunk, label_matcher,
};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

/// Samples per XOR chunk in streamed responses (Prometheus' target size).
const SAMPLES_PER_CHUNK: usize = 120;

type Series = BTreeMap<Labels, BTreeMap<i64, f64>>;
/// Matching series of one query, with their samples in range.
type Selected<'a> = Vec<(&'a Labels, Vec<(i64, f64)>)>;

#[derive(Debug, Default)]
struct MockState {
    require_tenant: bool,
    tenants: BTreeMap<String, Series>,
    faults: VecDeque<u16>,
    push_requests: u64,
}

/// The in-memory receiver. Dropping it stops the server.
#[derive(Debug)]
pub struct MockReceiver {
    addr: SocketAddr,
    state: Arc<Mutex<MockState>>,
    task: tokio::task::JoinHandle<()>,
}

fn lock(state: &Mutex<MockState>) -> MutexGuard<'_, MockState> {
    // A panic while holding the lock only happens in a failing test; keep serving its data.
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl MockReceiver {
    /// Serves on a free 127.0.0.1 port. With `require_tenant`, pushes and reads without `X-Scope-OrgID` get 401;
    /// otherwise they use tenant `anonymous`.
    pub async fn start(require_tenant: bool) -> Result<Self, TestkitError> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| TestkitError::io("binding the mock receiver", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| TestkitError::io("reading the mock receiver address", e))?;
        let state = Arc::new(Mutex::new(MockState {
            require_tenant,
            ..MockState::default()
        }));
        let app = Router::new()
            .route("/ready", get(|| async { "ready" }))
            .route("/api/v1/push", post(push))
            .route("/prometheus/api/v1/read", post(read))
            .with_state(state.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, state, task })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The remote-write URL.
    pub fn push_url(&self) -> String {
        format!("{}/api/v1/push", self.url())
    }

    /// The Prometheus API prefix (remote read is `<this>/api/v1/read`).
    pub fn prometheus_url(&self) -> String {
        format!("{}/prometheus", self.url())
    }

    /// The next pushes answer these statuses, in order, without storing anything.
    pub fn fail_next(&self, statuses: impl IntoIterator<Item = u16>) {
        lock(&self.state).faults.extend(statuses);
    }

    /// Push requests received, including failed ones.
    pub fn push_requests(&self) -> u64 {
        lock(&self.state).push_requests
    }

    /// Samples stored for `tenant`.
    pub fn sample_count(&self, tenant: &str) -> usize {
        lock(&self.state)
            .tenants
            .get(tenant)
            .map_or(0, |s| s.values().map(BTreeMap::len).sum())
    }

    /// Series stored for `tenant`.
    pub fn series_count(&self, tenant: &str) -> usize {
        lock(&self.state).tenants.get(tenant).map_or(0, BTreeMap::len)
    }

    /// Removes one stored sample (simulates data loss); returns whether it existed.
    pub fn remove_sample(&self, tenant: &str, labels: &Labels, t: i64) -> bool {
        lock(&self.state)
            .tenants
            .get_mut(tenant)
            .and_then(|s| s.get_mut(labels))
            .is_some_and(|samples| samples.remove(&t).is_some())
    }

    /// Stores or overwrites one sample (simulates corruption or foreign data).
    pub fn insert_sample(&self, tenant: &str, labels: Labels, t: i64, v: f64) {
        lock(&self.state)
            .tenants
            .entry(tenant.to_owned())
            .or_default()
            .entry(labels)
            .or_default()
            .insert(t, v);
    }
}

impl Drop for MockReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The request's tenant, or `None` when it has none and one is required (answer 401).
fn tenant_of(state: &MockState, headers: &HeaderMap) -> Option<String> {
    match headers.get(TENANT_HEADER).and_then(|v| v.to_str().ok()) {
        Some(t) if !t.is_empty() => Some(t.to_owned()),
        _ if state.require_tenant => None,
        _ => Some(heddle_model::DEFAULT_TENANT.to_owned()),
    }
}

fn no_tenant() -> Response {
    (StatusCode::UNAUTHORIZED, "no org id").into_response()
}

async fn push(State(state): State<Arc<Mutex<MockState>>>, headers: HeaderMap, body: Bytes) -> Response {
    let mut st = lock(&state);
    st.push_requests += 1;
    if let Some(status) = st.faults.pop_front() {
        let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return (code, format!("injected failure {status}")).into_response();
    }
    let Some(tenant) = tenant_of(&st, &headers) else {
        return no_tenant();
    };
    let v2 = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("proto=io.prometheus.write.v2.Request"));
    let decoded = if v2 {
        decode_write_request_v2(&body)
    } else {
        decode_write_request(&body)
    };
    let req = match decoded {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let series = st.tenants.entry(tenant).or_default();
    for ts in req.timeseries {
        let labels = match Labels::from_sorted(ts.labels.iter().map(|l| (l.name.as_str(), l.value.as_str()))) {
            Ok(l) => l,
            Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
        };
        let stored = series.entry(labels).or_default();
        for s in ts.samples {
            stored.insert(s.timestamp, s.value);
        }
    }
    StatusCode::NO_CONTENT.into_response()
}

fn to_matcher(m: &heddle_proto::prometheus::LabelMatcher) -> Result<Matcher, String> {
    let kind = match label_matcher::Type::try_from(m.r#type) {
        Ok(label_matcher::Type::Eq) => MatchType::Equal,
        Ok(label_matcher::Type::Neq) => MatchType::NotEqual,
        Ok(label_matcher::Type::Re) => MatchType::RegexMatch,
        Ok(label_matcher::Type::Nre) => MatchType::RegexNoMatch,
        Err(_) => return Err(format!("unknown matcher type {}", m.r#type)),
    };
    Matcher::new(kind, m.name.clone(), m.value.clone()).map_err(|e| e.to_string())
}

fn proto_labels(labels: &Labels) -> Vec<Label> {
    labels
        .iter()
        .map(|l| Label {
            name: l.name.to_owned(),
            value: l.value.to_owned(),
        })
        .collect()
}

async fn read(State(state): State<Arc<Mutex<MockState>>>, headers: HeaderMap, body: Bytes) -> Response {
    let st = lock(&state);
    let Some(tenant) = tenant_of(&st, &headers) else {
        return no_tenant();
    };
    let req = match decode_read_request(&body) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let empty = Series::new();
    let series = st.tenants.get(&tenant).unwrap_or(&empty);
    let mut results: Vec<Selected<'_>> = Vec::new();
    for q in &req.queries {
        let matchers: Result<Vec<Matcher>, String> = q.matchers.iter().map(to_matcher).collect();
        let matchers = match matchers {
            Ok(m) => m,
            Err(e) => return (StatusCode::BAD_REQUEST, e).into_response(),
        };
        let selected = series
            .iter()
            .filter(|(labels, _)| matchers.iter().all(|m| m.matches(labels.get(m.name()).unwrap_or(""))))
            .map(|(labels, samples)| {
                let in_range = samples
                    .range(q.start_timestamp_ms..=q.end_timestamp_ms)
                    .map(|(t, v)| (*t, *v))
                    .collect::<Vec<_>>();
                (labels, in_range)
            })
            .filter(|(_, s)| !s.is_empty())
            .collect();
        results.push(selected);
    }
    let streamed = req
        .accepted_response_types
        .contains(&(ResponseType::StreamedXorChunks as i32));
    if streamed {
        let mut out = Vec::new();
        for (qi, selected) in results.iter().enumerate() {
            for (labels, samples) in selected {
                let chunks = samples
                    .chunks(SAMPLES_PER_CHUNK)
                    .map(|part| {
                        let mut enc = XorEncoder::new();
                        for (t, v) in part {
                            enc.append(*t, *v);
                        }
                        Chunk {
                            min_time_ms: part.first().map_or(0, |s| s.0),
                            max_time_ms: part.last().map_or(0, |s| s.0),
                            r#type: chunk::Encoding::Xor as i32,
                            data: enc.bytes().to_vec(),
                        }
                    })
                    .collect();
                // One frame per series, like Prometheus does for series under the frame limit.
                out.extend(encode_chunked_frame(&ChunkedReadResponse {
                    chunked_series: vec![ChunkedSeries {
                        labels: proto_labels(labels),
                        chunks,
                    }],
                    query_index: qi as i64,
                }));
            }
        }
        return (
            [(
                header::CONTENT_TYPE,
                "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse",
            )],
            out,
        )
            .into_response();
    }
    let resp = ReadResponse {
        results: results
            .into_iter()
            .map(|selected| QueryResult {
                timeseries: selected
                    .into_iter()
                    .map(|(labels, samples)| TimeSeries {
                        labels: proto_labels(labels),
                        samples: samples
                            .into_iter()
                            .map(|(timestamp, value)| ProtoSample { value, timestamp })
                            .collect(),
                        ..Default::default()
                    })
                    .collect(),
            })
            .collect(),
    };
    match encode_read_response(&resp) {
        Ok(body) => (
            [
                (header::CONTENT_TYPE, "application/x-protobuf"),
                (header::CONTENT_ENCODING, "snappy"),
            ],
            body,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{ReadClient, ReadMode, eq, http_client, push, query};
    use crate::generate::SeriesGen;
    use std::time::Duration;

    #[tokio::test]
    async fn push_then_read_both_modes() {
        let mock = MockReceiver::start(false).await.expect("mock");
        let http = http_client(Duration::from_secs(10)).expect("client");
        let g = SeriesGen::new(5, 40, 4, 1_700_000_000_000);
        for round in 0..130 {
            let out = push(&http, &mock.push_url(), None, &g.write_request(0..40, round..round + 1))
                .await
                .expect("push");
            assert!(out.is_success(), "round {round}: {out:?}");
        }
        assert_eq!(mock.sample_count("anonymous"), 40 * 130);
        let reader = ReadClient::new(http, &mock.prometheus_url(), None);
        let (lo, hi) = g.time_range(130);
        let name = g.metric_name(1);
        for mode in [ReadMode::Samples, ReadMode::StreamedChunks] {
            let res = reader
                .read(
                    mode,
                    vec![
                        query(lo, hi, vec![eq("__name__", &name)]),
                        query(lo, lo, vec![eq("job", "none")]),
                    ],
                )
                .await
                .expect("read");
            assert_eq!(res.len(), 2, "{mode:?}");
            assert_eq!(res[0].len(), 10, "{mode:?}");
            assert!(res[1].is_empty(), "{mode:?}");
            for s in &res[0] {
                let i = g
                    .series_of_metric(1)
                    .find(|i| g.model_labels(*i) == s.labels)
                    .expect("known series");
                let want: Vec<_> = (0..130).map(|r| g.sample(i, r)).collect();
                assert_eq!(s.samples.len(), want.len(), "{mode:?}");
                assert!(
                    s.samples.iter().zip(&want).all(|(a, b)| a.bit_eq(b)),
                    "{mode:?} series {i}"
                );
            }
        }
    }

    #[tokio::test]
    async fn injected_faults_and_tenancy() {
        let mock = MockReceiver::start(true).await.expect("mock");
        let http = http_client(Duration::from_secs(10)).expect("client");
        let req = SeriesGen::new(1, 2, 1, 0).write_request(0..2, 0..1);
        mock.fail_next([503, 429]);
        let a = push(&http, &mock.push_url(), Some("t1"), &req).await.expect("push");
        let b = push(&http, &mock.push_url(), Some("t1"), &req).await.expect("push");
        let c = push(&http, &mock.push_url(), None, &req).await.expect("push");
        let d = push(&http, &mock.push_url(), Some("t1"), &req).await.expect("push");
        assert_eq!([a.status, b.status, c.status, d.status], [503, 429, 401, 204]);
        assert_eq!(mock.push_requests(), 4);
        assert_eq!(mock.sample_count("t1"), 2);
        assert_eq!(mock.sample_count("anonymous"), 0);
    }
}
