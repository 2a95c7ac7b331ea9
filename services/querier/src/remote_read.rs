//! `POST /prometheus/api/v1/read`: Prometheus remote read, in both response types.
//!
//! - `SAMPLES`: one snappy-compressed `ReadResponse` (`application/x-protobuf`, `Content-Encoding: snappy`).
//! - `STREAMED_XOR_CHUNKS`: framed `ChunkedReadResponse` messages (see [`crate::frames`]), produced series by
//!   series as the merge yields them and the client reads the body: a series is pulled from the ingesters,
//!   merged, converted and framed only when the previous one has been sent. The status line waits until a
//!   frame's worth of bytes (`max_bytes_in_frame`) is ready or the answer is complete, so a failure early in
//!   the answer (an ingester, a limit, the timeout) still gets its own status; a failure after that cuts the
//!   body short, which the client detects (as with Prometheus' own server).
//!
//! Either way each series is converted to the wire once, here.
//!
//! As in Prometheus, the response type is the first of the request's `accepted_response_types` that the
//! server supports, and `SAMPLES` when the list is empty.

use crate::convert::{histogram_to_proto, labels_to_proto, matcher_from_proto};
use crate::error::QuerierError;
use crate::frames;
use crate::limits::QueryLimiter;
use crate::matchers::MatcherCache;
use crate::metrics::Endpoint;
use crate::querier::Querier;
use crate::select::SelectedSeries;
use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use heddle_model::{MatchType, Matcher, TenantId};
use heddle_proto::prometheus::{
    LabelMatcher, QueryResult, ReadRequest, ReadResponse, Sample as ProtoSample, TimeSeries, read_request::ResponseType,
};
use prost::Message;
use std::sync::Arc;

/// Content type of a streamed remote-read response, as Prometheus' client expects it.
pub const STREAMED_CONTENT_TYPE: &str = "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse";

struct ParsedQuery {
    start: i64,
    end: i64,
    matchers: Vec<Matcher>,
}

/// Answers one remote-read request body (snappy-compressed `ReadRequest`).
#[tracing::instrument(skip_all, fields(tenant = %tenant))]
pub(crate) async fn handle(q: &Arc<Querier>, tenant: &TenantId, body: &[u8]) -> Result<Response, QuerierError> {
    let req = decode_request(body, q.config().max_read_request_bytes)?;
    let mut matchers = MatcherCache::new(q.config().max_regex_length, Some(q.metrics.clone()));
    let queries = parse_queries(&req, &mut matchers)?;
    match negotiate(&req.accepted_response_types)? {
        ResponseType::Samples => samples_response(q, tenant, &queries).await,
        ResponseType::StreamedXorChunks => streamed_response(Arc::clone(q), tenant.clone(), queries).await,
    }
}

fn decode_request(body: &[u8], max_bytes: usize) -> Result<ReadRequest, QuerierError> {
    let len = snap::raw::decompress_len(body)
        .map_err(|e| QuerierError::BadData(format!("remote read body is not snappy-compressed: {e}")))?;
    if len > max_bytes {
        return Err(QuerierError::BadData(format!(
            "remote read request declares {len} decompressed bytes; the limit is {max_bytes} \
             (querier.max_read_request_bytes)"
        )));
    }
    let raw = snap::raw::Decoder::new()
        .decompress_vec(body)
        .map_err(|e| QuerierError::BadData(format!("remote read body is not valid snappy: {e}")))?;
    ReadRequest::decode(raw.as_slice())
        .map_err(|e| QuerierError::BadData(format!("remote read body is not a prometheus.ReadRequest: {e}")))
}

/// The request's queries, their matchers built through `cache`: identical matchers across queries share one
/// compiled regex.
fn parse_queries(req: &ReadRequest, cache: &mut MatcherCache) -> Result<Vec<ParsedQuery>, QuerierError> {
    req.queries
        .iter()
        .enumerate()
        .map(|(i, query)| {
            if query.matchers.is_empty() {
                return Err(QuerierError::BadData(format!(
                    "remote read query {i} has no label matchers; at least one is required"
                )));
            }
            let matchers = query
                .matchers
                .iter()
                .map(|m| cache_matcher(cache, m))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| match e {
                    QuerierError::BadData(reason) => QuerierError::BadData(format!("remote read query {i}: {reason}")),
                    other => other,
                })?;
            Ok(ParsedQuery {
                start: query.start_timestamp_ms,
                end: query.end_timestamp_ms,
                matchers,
            })
        })
        .collect()
}

/// A wire matcher through the request's cache; its type is checked as `matcher_from_proto` does.
fn cache_matcher(cache: &mut MatcherCache, m: &LabelMatcher) -> Result<Matcher, QuerierError> {
    use heddle_proto::prometheus::label_matcher::Type;
    let kind = match Type::try_from(m.r#type) {
        Ok(Type::Eq) => MatchType::Equal,
        Ok(Type::Neq) => MatchType::NotEqual,
        Ok(Type::Re) => MatchType::RegexMatch,
        Ok(Type::Nre) => MatchType::RegexNoMatch,
        // The conversion's own error names the bad type.
        Err(_) => return matcher_from_proto(m),
    };
    cache.get(kind, &m.name, &m.value)
}

fn negotiate(accepted: &[i32]) -> Result<ResponseType, QuerierError> {
    if accepted.is_empty() {
        return Ok(ResponseType::Samples);
    }
    accepted
        .iter()
        .find_map(|t| ResponseType::try_from(*t).ok())
        .ok_or_else(|| {
            QuerierError::BadData(format!(
                "server does not support any of the requested response types: {accepted:?}; supported: \
                 SAMPLES (0), STREAMED_XOR_CHUNKS (1)"
            ))
        })
}

async fn samples_response(q: &Querier, tenant: &TenantId, queries: &[ParsedQuery]) -> Result<Response, QuerierError> {
    let mut results = Vec::with_capacity(queries.len());
    let (mut series_count, mut sample_count) = (0, 0);
    // One budget for every query of the request.
    let limiter = q.limiter(tenant);
    for query in queries {
        let series = q
            .select_limited(&limiter, query.start, query.end, &query.matchers)
            .await?;
        series_count += series.len();
        let timeseries = series
            .into_iter()
            .map(|s| {
                sample_count += s.samples.len() + s.histograms.len();
                TimeSeries {
                    labels: labels_to_proto(&s.labels),
                    samples: s
                        .samples
                        .iter()
                        .map(|x| ProtoSample {
                            value: x.v,
                            timestamp: x.t,
                        })
                        .collect(),
                    histograms: s.histograms.iter().map(histogram_to_proto).collect(),
                    ..Default::default()
                }
            })
            .collect();
        results.push(QueryResult { timeseries });
    }
    q.metrics.returned(Endpoint::RemoteRead, series_count, sample_count);
    let raw = ReadResponse { results }.encode_to_vec();
    let compressed = snap::raw::Encoder::new()
        .compress_vec(&raw)
        .map_err(|e| QuerierError::InvalidIngesterData(format!("cannot snappy-compress the response: {e}")))?;
    Ok((
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("application/x-protobuf")),
            (header::CONTENT_ENCODING, HeaderValue::from_static("snappy")),
        ],
        compressed,
    )
        .into_response())
}

async fn streamed_response(
    q: Arc<Querier>,
    tenant: TenantId,
    queries: Vec<ParsedQuery>,
) -> Result<Response, QuerierError> {
    let max_frame = q.config().max_bytes_in_frame;
    let mut frames = Frames {
        limiter: q.limiter(&tenant),
        q,
        queries: queries.into_iter().enumerate(),
        current: None,
    };
    // Before the status line: one body chunk per series, until a frame's worth is ready.
    let mut ready = Vec::new();
    let mut ready_bytes = 0;
    let mut done = false;
    while ready_bytes < max_frame {
        match frames.next().await? {
            Some(series) => {
                ready_bytes += series.bytes.len();
                ready.push(series);
            }
            None => {
                done = true;
                break;
            }
        }
    }
    for series in &ready {
        frames.q.metrics.returned(Endpoint::RemoteRead, 1, series.samples);
    }
    let ready = futures::stream::iter(ready.into_iter().map(|s| Ok::<_, QuerierError>(s.bytes)));
    let rest = futures::stream::unfold((!done).then_some(frames), |frames| async move {
        let mut frames = frames?;
        match frames.next().await {
            Ok(Some(series)) => {
                frames.q.metrics.returned(Endpoint::RemoteRead, 1, series.samples);
                Some((Ok(series.bytes), Some(frames)))
            }
            Ok(None) => None,
            // The status line is gone by now: a failure can only cut the body short, which the client detects.
            Err(err) => {
                tracing::warn!(error = %err, "streamed remote read aborted");
                Some((Err(err), None))
            }
        }
    });
    let body = Body::from_stream(ready.chain(rest));
    Ok((
        [(header::CONTENT_TYPE, HeaderValue::from_static(STREAMED_CONTENT_TYPE))],
        body,
    )
        .into_response())
}

/// One series of a streamed answer: all its frames, and the samples they hold.
struct SeriesFrames {
    bytes: bytes::Bytes,
    samples: usize,
}

/// The frames of every query of a streamed answer, one series at a time; a query is opened when the one
/// before it is finished.
struct Frames {
    q: Arc<Querier>,
    /// One budget for every query of the request.
    limiter: Arc<QueryLimiter>,
    queries: std::iter::Enumerate<std::vec::IntoIter<ParsedQuery>>,
    current: Option<(i64, SelectedSeries)>,
}

impl Frames {
    async fn next(&mut self) -> Result<Option<SeriesFrames>, QuerierError> {
        let max_frame = self.q.config().max_bytes_in_frame;
        loop {
            let (index, selected) = match &mut self.current {
                Some(current) => current,
                None => {
                    let Some((index, query)) = self.queries.next() else {
                        return Ok(None);
                    };
                    let selected = self
                        .q
                        .select_chunks_limited(&self.limiter, query.start, query.end, &query.matchers)
                        .await?;
                    self.current
                        .insert((i64::try_from(index).unwrap_or(i64::MAX), selected))
                }
            };
            let Some(series) = selected.next().await? else {
                self.current = None;
                continue;
            };
            let labels = labels_to_proto(&series.labels);
            if !frames::fits_in_frame(&labels, *index, max_frame) {
                return Err(QuerierError::BadData(format!(
                    "the labels of series {} do not fit in a remote-read frame of {max_frame} bytes; raise \
                     querier.max_bytes_in_frame",
                    series.labels
                )));
            }
            let mut samples = 0;
            for c in &series.chunks {
                samples += crate::chunks::num_samples(c)?;
            }
            let bytes = frames::series_frames(labels, series.chunks, *index, max_frame)?;
            return Ok(Some(SeriesFrames { bytes, samples }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_follows_prometheus() {
        let s = ResponseType::Samples as i32;
        let x = ResponseType::StreamedXorChunks as i32;
        assert_eq!(negotiate(&[]).unwrap(), ResponseType::Samples);
        assert_eq!(negotiate(&[x]).unwrap(), ResponseType::StreamedXorChunks);
        assert_eq!(negotiate(&[s, x]).unwrap(), ResponseType::Samples);
        assert_eq!(negotiate(&[7, x]).unwrap(), ResponseType::StreamedXorChunks);
        assert!(negotiate(&[7]).unwrap_err().to_string().contains("[7]"));
    }

    #[test]
    fn request_decoding_errors() {
        assert!(decode_request(b"not snappy at all \xff\xff\xff", 1 << 20).is_err());
        let big = snap::raw::Encoder::new().compress_vec(&[0u8; 2048]).unwrap();
        let err = decode_request(&big, 1024).unwrap_err().to_string();
        assert!(err.contains("querier.max_read_request_bytes"), "{err}");
        let junk = snap::raw::Encoder::new().compress_vec(&[0xff; 16]).unwrap();
        assert!(
            decode_request(&junk, 1024)
                .unwrap_err()
                .to_string()
                .contains("prometheus.ReadRequest")
        );
    }
}
