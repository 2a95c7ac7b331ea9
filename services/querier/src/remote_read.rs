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

use crate::budget;
use crate::convert::{histogram_to_proto, labels_to_proto, matcher_from_proto};
use crate::error::QuerierError;
use crate::frames;
use crate::limits::QueryLimiter;
use crate::matchers::MatcherCache;
use crate::metrics::Endpoint;
use crate::querier::Querier;
use crate::select::SelectedSeries;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use heddle_model::{MatchType, Matcher, TenantId};
use heddle_proto::prometheus::{
    LabelMatcher, QueryResult, ReadRequest, ReadResponse, Sample as ProtoSample, TimeSeries, read_request::ResponseType,
};
use heddle_server::Reservation;
use prost::Message;
use std::mem::size_of;
use std::sync::Arc;

mod measure;

/// Content type of a streamed remote-read response, as Prometheus' client expects it.
pub const STREAMED_CONTENT_TYPE: &str = "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse";

struct ParsedQuery {
    start: i64,
    end: i64,
    matchers: Vec<Matcher>,
}

/// Answers one remote-read request, its body (snappy-compressed `ReadRequest`) read within
/// `querier.max_body_size`.
///
/// Everything the request allocates in proportion to its body is reserved in the in-flight budget first, in
/// two reservations: one for what decoding holds (the body, its decompressed copy, the decoded request), given
/// back as soon as the queries are parsed; one for what the answer keeps (the parsed queries and their
/// matchers), held until the answer is sent. A large body is decoded off the async runtime.
#[tracing::instrument(skip_all, fields(tenant = %tenant))]
pub(crate) async fn handle(
    q: &Arc<Querier>,
    tenant: &TenantId,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, QuerierError> {
    let cfg = q.config();
    let mut decoding = q.inflight.reserve();
    let body = budget::read_body(body, headers, cfg.max_body_size, cfg.body_read_timeout, &mut decoding).await?;
    let kept = q.inflight.reserve();
    let cache = MatcherCache::new(cfg.max_regex_length, Some(q.metrics.clone()));
    let max_bytes = cfg.max_read_request_bytes;
    let large = snap::raw::decompress_len(&body).is_ok_and(|len| len >= budget::LARGE_INPUT_BYTES);
    let decode = move || decode_and_parse(&body, max_bytes, cache, decoding, kept);
    let (response_type, queries, kept) = if large {
        budget::off_runtime(decode).await??
    } else {
        decode()?
    };
    match response_type {
        ResponseType::Samples => samples_response(q, tenant, &queries, kept).await,
        ResponseType::StreamedXorChunks => streamed_response(Arc::clone(q), tenant.clone(), queries, kept).await,
    }
}

/// The request in `body` decoded and its queries parsed through `cache`, with what that allocates reserved
/// first: decoding in `decoding` (given back when this returns), the parsed queries in `kept` (returned with
/// them).
fn decode_and_parse(
    body: &[u8],
    max_bytes: usize,
    mut cache: MatcherCache,
    mut decoding: Reservation,
    mut kept: Reservation,
) -> Result<(ResponseType, Vec<ParsedQuery>, Reservation), QuerierError> {
    let req = decode_request(body, max_bytes, &mut decoding)?;
    let response_type = negotiate(&req.accepted_response_types)?;
    budget::grow(
        &mut kept,
        parsed_bytes(&req),
        "the remote read request's parsed queries",
    )?;
    let queries = parse_queries(&req, &mut cache)?;
    Ok((response_type, queries, kept))
}

/// Decompresses and decodes `body`: the declared length checked against `max_bytes` and reserved before the
/// copy is made, the decoded request measured ([`measure`]) and reserved before prost decodes it.
fn decode_request(body: &[u8], max_bytes: usize, r: &mut Reservation) -> Result<ReadRequest, QuerierError> {
    let len = snap::raw::decompress_len(body)
        .map_err(|e| QuerierError::BadData(format!("remote read body is not snappy-compressed: {e}")))?;
    if len > max_bytes {
        return Err(QuerierError::BadData(format!(
            "remote read request declares {len} decompressed bytes; the limit is {max_bytes} \
             (querier.max_read_request_bytes)"
        )));
    }
    budget::grow(r, len, "the decompressed remote read request")?;
    let mut raw = vec![0; len];
    snap::raw::Decoder::new()
        .decompress(body, &mut raw)
        .map_err(|e| QuerierError::BadData(format!("remote read body is not valid snappy: {e}")))?;
    let not_a_request = |e: &dyn std::fmt::Display| {
        QuerierError::BadData(format!("remote read body is not a prometheus.ReadRequest: {e}"))
    };
    let decoded = measure::decoded_bytes(&raw).map_err(|e| not_a_request(&e))?;
    budget::grow(r, decoded, "the decoded remote read request")?;
    ReadRequest::decode(raw.as_slice()).map_err(|e| not_a_request(&e))
}

/// What [`parse_queries`] and the answer allocate for the queries of `req` at most: the parsed queries (one
/// result each in a `SAMPLES` answer), their matchers, the request's matcher cache (a key and a matcher per
/// distinct matcher; a clone of the matcher handed out per use), and the compiled regular expressions.
fn parsed_bytes(req: &ReadRequest) -> usize {
    let matcher = size_of::<Matcher>();
    let mut total = budget::vec_bytes(req.queries.len(), size_of::<ParsedQuery>())
        .saturating_add(req.queries.len().saturating_mul(size_of::<QueryResult>()));
    let mut matchers = 0usize;
    for query in &req.queries {
        matchers = matchers.saturating_add(query.matchers.len());
        total = total.saturating_add(budget::vec_bytes(query.matchers.len(), matcher));
        for m in &query.matchers {
            // As the cache's key, as built, as handed out.
            let text = m.name.len() + m.value.len() + 2 * budget::ALLOCATION_HEADROOM;
            total = total.saturating_add(text.saturating_mul(3));
            if matches!(m.r#type, 2 | 3) {
                total = total.saturating_add(budget::regex_bytes(&m.value));
            }
        }
    }
    total.saturating_add(budget::map_bytes(
        matchers,
        size_of::<(MatchType, String, String)>() + matcher,
    ))
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

/// The `SAMPLES` answer; `_kept` holds what the parsed queries take until it is built.
async fn samples_response(
    q: &Querier,
    tenant: &TenantId,
    queries: &[ParsedQuery],
    _kept: Reservation,
) -> Result<Response, QuerierError> {
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

/// The `STREAMED_XOR_CHUNKS` answer; `kept` holds what the parsed queries take until the last frame is sent.
async fn streamed_response(
    q: Arc<Querier>,
    tenant: TenantId,
    queries: Vec<ParsedQuery>,
    kept: Reservation,
) -> Result<Response, QuerierError> {
    let max_frame = q.config().max_bytes_in_frame;
    let mut frames = Frames {
        limiter: q.limiter(&tenant),
        _kept: kept,
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
    /// What the parsed queries take of the in-flight budget, held as long as they are.
    _kept: Reservation,
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

    fn unlimited() -> Reservation {
        heddle_server::InflightBytes::new(0, Default::default(), Default::default()).reserve()
    }

    #[test]
    fn request_decoding_errors() {
        let r = &mut unlimited();
        assert!(decode_request(b"not snappy at all \xff\xff\xff", 1 << 20, r).is_err());
        let big = snap::raw::Encoder::new().compress_vec(&[0u8; 2048]).unwrap();
        let err = decode_request(&big, 1024, r).unwrap_err().to_string();
        assert!(err.contains("querier.max_read_request_bytes"), "{err}");
        let junk = snap::raw::Encoder::new().compress_vec(&[0xff; 16]).unwrap();
        assert!(
            decode_request(&junk, 1024, r)
                .unwrap_err()
                .to_string()
                .contains("prometheus.ReadRequest")
        );
    }

    /// Fifteen million empty queries: 30 MB decompressed, gigabytes decoded. Refused from the measure, before
    /// prost allocates anything, as larger than the whole budget (413), and only the decompressed copy was
    /// ever held.
    #[test]
    fn a_request_decoding_past_the_budget_is_refused_before_decoding() {
        let raw = [0x0a, 0x00].repeat(15_000_000);
        let body = snap::raw::Encoder::new().compress_vec(&raw).unwrap();
        let budget = heddle_server::InflightBytes::new(512 << 20, Default::default(), Default::default());
        let mut r = budget.reserve();
        let peak = heddle_testkit::alloc::peak_of(|| decode_request(&body, 32 << 20, &mut r).map(|_| ()));
        let err = decode_request(&body, 32 << 20, &mut budget.reserve()).unwrap_err();
        assert_eq!(err.status().as_u16(), 413, "{err}");
        let msg = err.to_string();
        assert!(
            msg.starts_with("err-heddle-query-request-too-large:")
                && msg.contains("the decoded remote read request")
                && msg.contains("--querier.max-inflight-requests-bytes"),
            "{msg}"
        );
        assert!(peak <= raw.len() + (1 << 20), "only the decompressed copy: {peak}");
        assert_eq!(r.held(), raw.len(), "the decompressed copy was reserved, nothing more");
    }

    #[test]
    fn what_parsing_the_queries_allocates_is_within_its_bound() {
        use heddle_proto::prometheus::LabelMatcher;
        let matcher = |t: i32, n: &str, v: &str| LabelMatcher {
            r#type: t,
            name: n.into(),
            value: v.into(),
        };
        let query = |matchers: Vec<LabelMatcher>| heddle_proto::prometheus::Query {
            start_timestamp_ms: 0,
            end_timestamp_ms: 1,
            matchers,
            hints: None,
        };
        let cases: Vec<(&str, Vec<heddle_proto::prometheus::Query>)> = vec![
            ("one query", vec![query(vec![matcher(0, "__name__", "up")])]),
            (
                "many equal queries",
                vec![query(vec![matcher(0, "__name__", "up"), matcher(1, "job", "x")]); 3000],
            ),
            (
                "many distinct queries",
                (0..3000)
                    .map(|i| query(vec![matcher(0, "__name__", &format!("m{i}"))]))
                    .collect(),
            ),
            (
                "long values",
                vec![query(vec![matcher(0, "a", &"v".repeat(100_000)), matcher(1, "b", "")]); 3],
            ),
        ];
        for (name, queries) in cases {
            let req = ReadRequest {
                queries,
                accepted_response_types: vec![],
            };
            let peak = heddle_testkit::alloc::peak_of(|| parse_queries(&req, &mut MatcherCache::new(0, None)));
            let bound = parsed_bytes(&req);
            assert!(peak <= bound, "case {name}: peak {peak}, bound {bound}");
        }
    }
}
