//! Async HTTP clients for the remote-write and remote-read endpoints, as tests and the load generator use them.

use crate::TestkitError;
use crate::codec::{decode_chunked_frames, decode_read_response, encode_read_request, encode_write_request};
use crate::xor::decode_xor_chunk;
use heddle_model::{Labels, Sample, TENANT_HEADER};
use heddle_proto::prometheus::label_matcher::Type as MatcherType;
use heddle_proto::prometheus::read_request::ResponseType;
use heddle_proto::prometheus::{ChunkedSeries, LabelMatcher, Query, ReadRequest, TimeSeries, WriteRequest, chunk};
use std::collections::BTreeMap;
use std::time::Duration;

/// The answer to one remote-write request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushOutcome {
    /// HTTP status code.
    pub status: u16,
    /// Response body (the error message for 4xx/5xx).
    pub body: String,
    /// The `Retry-After` header, when given in seconds.
    pub retry_after: Option<Duration>,
}

impl PushOutcome {
    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// Builds a `reqwest` client with connect and request timeouts, for tests (no proxies, no TLS).
pub fn http_client(timeout: Duration) -> Result<reqwest::Client, TestkitError> {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(Duration::from_secs(5))
        .no_proxy()
        .build()
        .map_err(|e| TestkitError::Http {
            url: String::new(),
            detail: format!("building the http client: {e}"),
        })
}

/// Like [`http_client`], but every request opens a fresh connection: after an early refusal (a 413 before the
/// body is read) a server may close the connection, and a pooled one would fail the next request with a broken
/// pipe. For tables of bad requests, where that is not what is checked.
pub fn http_client_unpooled(timeout: Duration) -> Result<reqwest::Client, TestkitError> {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(0)
        .no_proxy()
        .build()
        .map_err(|e| TestkitError::Http {
            url: String::new(),
            detail: format!("building the http client: {e}"),
        })
}

/// A remote write protocol version, as a sender announces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RemoteWriteProtocol {
    /// Remote write 1.0: a `prometheus.WriteRequest`.
    #[default]
    V1,
    /// Remote write 2.0: an `io.prometheus.write.v2.Request`.
    V2,
}

impl RemoteWriteProtocol {
    /// The `Content-Type` and `X-Prometheus-Remote-Write-Version` headers Prometheus sends for it.
    pub fn headers(self) -> (&'static str, &'static str) {
        match self {
            RemoteWriteProtocol::V1 => ("application/x-protobuf", "0.1.0"),
            RemoteWriteProtocol::V2 => ("application/x-protobuf;proto=io.prometheus.write.v2.Request", "2.0.0"),
        }
    }
}

/// Sends an already encoded remote write 1.0 body (snappy block of a `WriteRequest`); see [`push_body_as`].
pub async fn push_body(
    client: &reqwest::Client,
    url: &str,
    tenant: Option<&str>,
    body: Vec<u8>,
) -> Result<PushOutcome, TestkitError> {
    push_body_as(client, url, tenant, RemoteWriteProtocol::V1, body).await
}

/// Sends an already encoded remote-write body of `protocol` with the headers Prometheus sends, plus
/// `X-Scope-OrgID` when `tenant` is set. Transport failures are errors; any HTTP status is an outcome.
pub async fn push_body_as(
    client: &reqwest::Client,
    url: &str,
    tenant: Option<&str>,
    protocol: RemoteWriteProtocol,
    body: Vec<u8>,
) -> Result<PushOutcome, TestkitError> {
    let (content_type, version) = protocol.headers();
    let mut req = client
        .post(url)
        .header("Content-Encoding", "snappy")
        .header("Content-Type", content_type)
        .header("User-Agent", "heddle-testkit")
        .header("X-Prometheus-Remote-Write-Version", version)
        .body(body);
    if let Some(t) = tenant {
        req = req.header(TENANT_HEADER, t);
    }
    let resp = req.send().await.map_err(|e| TestkitError::Http {
        url: url.to_owned(),
        detail: error_chain(&e),
    })?;
    let status = resp.status().as_u16();
    let retry_after = retry_after(resp.headers());
    let body = resp.text().await.unwrap_or_default();
    Ok(PushOutcome {
        status,
        body,
        retry_after,
    })
}

/// The `Retry-After` header, when given in seconds.
pub(crate) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

/// Encodes and sends `req`; see [`push_body`].
pub async fn push(
    client: &reqwest::Client,
    url: &str,
    tenant: Option<&str>,
    req: &WriteRequest,
) -> Result<PushOutcome, TestkitError> {
    push_body(client, url, tenant, encode_write_request(req)?).await
}

/// `reqwest` errors hide the cause (connection refused, ...) in their source chain.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

/// Wall-clock milliseconds since the Unix epoch (0 before 1970), for sample timestamps "now".
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A remote-write series with `labels` (in the given order) and `(timestamp, value)` samples.
pub fn timeseries(labels: &[(&str, &str)], samples: &[(i64, f64)]) -> TimeSeries {
    TimeSeries {
        labels: labels
            .iter()
            .map(|&(name, value)| heddle_proto::prometheus::Label {
                name: name.to_owned(),
                value: value.to_owned(),
            })
            .collect(),
        samples: samples
            .iter()
            .map(|&(timestamp, value)| heddle_proto::prometheus::Sample { value, timestamp })
            .collect(),
        ..TimeSeries::default()
    }
}

/// An equality matcher.
pub fn eq(name: &str, value: &str) -> LabelMatcher {
    matcher(MatcherType::Eq, name, value)
}

/// A matcher of any type.
pub fn matcher(kind: MatcherType, name: &str, value: &str) -> LabelMatcher {
    LabelMatcher {
        r#type: kind as i32,
        name: name.to_owned(),
        value: value.to_owned(),
    }
}

/// A remote-read query over the inclusive range `[start_ms, end_ms]`.
pub fn query(start_ms: i64, end_ms: i64, matchers: Vec<LabelMatcher>) -> Query {
    Query {
        start_timestamp_ms: start_ms,
        end_timestamp_ms: end_ms,
        matchers,
        hints: None,
    }
}

/// How to ask for remote-read results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    /// One snappy `ReadResponse` with raw samples.
    Samples,
    /// Framed `ChunkedReadResponse` messages with XOR chunks.
    StreamedChunks,
}

/// One series read back: labels and samples in time order.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesSamples {
    pub labels: Labels,
    pub samples: Vec<Sample>,
}

/// A remote-read client for `<base>/api/v1/read`, where `base` is a Prometheus-API prefix such as
/// `http://127.0.0.1:8080/prometheus` (heddle) or `http://127.0.0.1:9090` (Prometheus itself).
#[derive(Debug, Clone)]
pub struct ReadClient {
    http: reqwest::Client,
    url: String,
    tenant: Option<String>,
}

impl ReadClient {
    /// A client for `<base>/api/v1/read`, sending `X-Scope-OrgID: tenant` when set.
    pub fn new(http: reqwest::Client, base: &str, tenant: Option<&str>) -> Self {
        Self {
            http,
            url: format!("{}/api/v1/read", base.trim_end_matches('/')),
            tenant: tenant.map(str::to_owned),
        }
    }

    /// The remote-read URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Runs `queries` and returns, per query in order, the series with their samples. With
    /// [`ReadMode::StreamedChunks`] the XOR chunks are decoded with this crate's own decoder, the frames of one
    /// series are joined, and only samples inside the query range are kept (chunks may overhang it).
    pub async fn read(&self, mode: ReadMode, queries: Vec<Query>) -> Result<Vec<Vec<SeriesSamples>>, TestkitError> {
        let n = queries.len();
        let ranges: Vec<(i64, i64)> = queries
            .iter()
            .map(|q| (q.start_timestamp_ms, q.end_timestamp_ms))
            .collect();
        let accepted = match mode {
            ReadMode::Samples => ResponseType::Samples,
            ReadMode::StreamedChunks => ResponseType::StreamedXorChunks,
        };
        let body = encode_read_request(&ReadRequest {
            queries,
            accepted_response_types: vec![accepted as i32],
        })?;
        let mut req = self
            .http
            .post(&self.url)
            .header("Content-Encoding", "snappy")
            .header("Content-Type", "application/x-protobuf")
            .header("X-Prometheus-Remote-Read-Version", "0.1.0")
            .body(body);
        if let Some(t) = &self.tenant {
            req = req.header(TENANT_HEADER, t);
        }
        let http_err = |e: reqwest::Error| TestkitError::Http {
            url: self.url.clone(),
            detail: error_chain(&e),
        };
        let resp = req.send().await.map_err(http_err)?;
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = resp.bytes().await.map_err(http_err)?;
        if status != 200 {
            return Err(TestkitError::Status {
                url: self.url.clone(),
                status,
                body: String::from_utf8_lossy(&bytes).into_owned(),
            });
        }
        if content_type.starts_with("application/x-streamed-protobuf") {
            chunked_to_series(&decode_chunked_frames(&bytes)?, &ranges)
        } else if mode == ReadMode::StreamedChunks {
            Err(TestkitError::decode(
                "remote read response",
                format!("asked for STREAMED_XOR_CHUNKS, got content-type {content_type:?}"),
            ))
        } else {
            let resp = decode_read_response(&bytes)?;
            if resp.results.len() != n {
                return Err(TestkitError::decode(
                    "remote read response",
                    format!("{} results for {n} queries", resp.results.len()),
                ));
            }
            resp.results
                .iter()
                .map(|r| r.timeseries.iter().map(timeseries_to_series).collect())
                .collect()
        }
    }
}

fn to_labels(labels: &[heddle_proto::prometheus::Label]) -> Result<Labels, TestkitError> {
    Labels::from_sorted(labels.iter().map(|l| (l.name.as_str(), l.value.as_str())))
        .map_err(|e| TestkitError::decode("series labels", e))
}

fn timeseries_to_series(ts: &TimeSeries) -> Result<SeriesSamples, TestkitError> {
    Ok(SeriesSamples {
        labels: to_labels(&ts.labels)?,
        samples: ts.samples.iter().map(|s| Sample::new(s.timestamp, s.value)).collect(),
    })
}

/// Joins streamed frames into per-query series. Frames of one query arrive in series order, and a series may be
/// split over consecutive frames.
pub fn chunked_to_series(
    frames: &[heddle_proto::prometheus::ChunkedReadResponse],
    ranges: &[(i64, i64)],
) -> Result<Vec<Vec<SeriesSamples>>, TestkitError> {
    let mut per_query: Vec<BTreeMap<Labels, Vec<Sample>>> = vec![BTreeMap::new(); ranges.len()];
    for frame in frames {
        let q = usize::try_from(frame.query_index)
            .ok()
            .filter(|q| *q < ranges.len())
            .ok_or_else(|| {
                TestkitError::decode(
                    "chunked read frame",
                    format!("query_index {} for {} queries", frame.query_index, ranges.len()),
                )
            })?;
        let (lo, hi) = ranges[q];
        for series in &frame.chunked_series {
            let samples = decode_series_chunks(series)?;
            per_query[q]
                .entry(to_labels(&series.labels)?)
                .or_default()
                .extend(samples.into_iter().filter(|s| (lo..=hi).contains(&s.t)));
        }
    }
    Ok(per_query
        .into_iter()
        .map(|m| {
            m.into_iter()
                .map(|(labels, samples)| SeriesSamples { labels, samples })
                .collect()
        })
        .collect())
}

/// Decodes every XOR chunk of a streamed series, checking each chunk's declared time bounds.
pub fn decode_series_chunks(series: &ChunkedSeries) -> Result<Vec<Sample>, TestkitError> {
    let mut out = Vec::new();
    for (i, c) in series.chunks.iter().enumerate() {
        if c.r#type != chunk::Encoding::Xor as i32 {
            return Err(TestkitError::decode(
                "chunk",
                format!("chunk {i} has encoding {}, want XOR", c.r#type),
            ));
        }
        let samples = decode_xor_chunk(&c.data)?;
        if let (Some(first), Some(last)) = (samples.first(), samples.last())
            && (first.t != c.min_time_ms || last.t != c.max_time_ms)
        {
            return Err(TestkitError::decode(
                "chunk",
                format!(
                    "chunk {i} declares [{}, {}] but holds [{}, {}]",
                    c.min_time_ms, c.max_time_ms, first.t, last.t
                ),
            ));
        }
        out.extend(samples);
    }
    Ok(out)
}
