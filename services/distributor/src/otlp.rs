//! `POST /otlp/v1/metrics` (Mimir's path): OTLP/HTTP metrics, translated to Prometheus series under the
//! tenant's translation strategy and promoted resource attributes (per-tenant limits) and pushed through the
//! same stages as remote write.
//!
//! The body is an `ExportMetricsServiceRequest` in protobuf (`application/x-protobuf`) or OTLP JSON
//! (`application/json`: proto3's JSON mapping with OTLP's exceptions, trace and span ids in hex and enums as
//! integers, read by `opentelemetry-proto`'s serde mapping, which also takes 64-bit integers as strings or
//! numbers), gzip-compressed or not. [`translate`] turns the request into a remote write 1.0 `WriteRequest`,
//! which [`Distributor::push_framed`] validates, limits, shards and forwards like any other push: one write path,
//! one set of limits.
//!
//! Answers are OTLP's, in the request's encoding: 200 with an `ExportMetricsServiceResponse` whose
//! `partial_success` counts the data points refused (by the translation, such as delta sums, or by validation
//! and ingesters, one per Prometheus sample) and says why; otherwise 400 (malformed body), 413, 415, 429 or 5xx
//! with a `google.rpc.Status` whose message names what was wrong.
//!
//! A small body can decode and translate into gigabytes (empty points, labels copied onto every bucket's
//! series), so each stage reserves what it will allocate in the in-flight budget before allocating it: the
//! inflated body step by step, the decoded request by [`measure`]'s walk of its bytes, the translation by
//! [`translate::bound`], the encoded translation by its length. Those stages run on a blocking thread.

#[cfg(test)]
mod arbitrary;
mod measure;
/// Tests hold the bounds reserved before decoding and translating against what they allocate, each block
/// counted with glibc's overhead as the measure walks count it.
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: heddle_testkit::alloc::PerThread<{ measure::ALLOCATION_OVERHEAD }> = heddle_testkit::alloc::PerThread;
mod translate;

use crate::distributor::{Distributor, Framing, RemoteWriteVersion};
use crate::error::PushError;
use crate::http::{check_declared_length, read_push_body};
use crate::outcome::join_capped;
use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use heddle_limits::Limits;
use heddle_model::TenantId;
use heddle_model::error_id::Scope;
use heddle_proto::encode_write_request_created;
use heddle_server::{InflightBytes, Reservation};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use prost::Message as _;
use std::sync::Arc;

/// How much of a gzip body is inflated at a time, each piece reserved in the in-flight budget first.
const INFLATE_STEP: usize = 64 * 1024;

/// The body's message encoding, from `Content-Type`; the answer uses the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Protobuf,
    Json,
}

/// The body's compression, from `Content-Encoding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compression {
    None,
    Gzip,
}

pub(crate) async fn otlp_handler(
    State(d): State<Arc<Distributor>>,
    tenant: Option<Extension<TenantId>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let start = tokio::time::Instant::now();
    // A body whose encoding is not known is answered in protobuf, OTLP's default.
    let answer_in = encoding(&headers).unwrap_or(Encoding::Protobuf);
    let Some(Extension(tenant)) = tenant else {
        return early_refusal(&d, PushError::NoTenant, start, answer_in);
    };
    let (encoding, compression) = match check_headers(&headers, d.config().max_recv_msg_size) {
        Ok(checked) => checked,
        Err(e) => return early_refusal(&d, e, start, answer_in),
    };
    let mut reservation = d.inflight().reserve();
    let body = match read_push_body(&d, &headers, body, &mut reservation).await {
        Ok(body) => body,
        Err(e) => return early_refusal(&d, e, start, encoding),
    };
    let job = Job {
        body,
        encoding,
        compression,
        max_decompressed: d.config().max_decompressed_size,
        budget: Arc::clone(d.inflight()),
        // Read per request, so a runtime override of the tenant's strategy or promoted attributes applies to
        // the next request without a restart.
        limits: d.limits(&tenant),
        reservation,
    };
    // Inflating, decoding, translating and encoding take CPU and memory in proportion to the body: they run
    // on a blocking thread, the bytes they hold reserved for as long as they hold them.
    let prepared = match tokio::task::spawn_blocking(move || prepare(job)).await {
        Ok(prepared) => prepared,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // The runtime is shutting down.
        Err(_) => return StatusCode::SERVICE_UNAVAILABLE.into_response(),
    };
    match prepared {
        // Refused after the body was read in full: the connection stays usable.
        Err(e) => {
            d.record_early_refusal(&e, start);
            refusal(&e, encoding)
        }
        Ok(prepared) => export(&d, &tenant, prepared, encoding, start)
            .await
            .unwrap_or_else(|e| refusal(&e, encoding)),
    }
}

/// A refusal before the body was read in full: counted, and the connection closed so the rest of the body is
/// not read.
fn early_refusal(d: &Distributor, e: PushError, start: tokio::time::Instant, encoding: Encoding) -> Response {
    d.record_early_refusal(&e, start);
    let mut r = refusal(&e, encoding);
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// What [`prepare`] works on: the body as read, held in `reservation`.
struct Job {
    body: Vec<u8>,
    encoding: Encoding,
    compression: Compression,
    max_decompressed: usize,
    budget: Arc<InflightBytes>,
    limits: Arc<Limits>,
    reservation: Reservation,
}

/// An export request translated and encoded as a remote write 1.0 `WriteRequest`, ready to push.
struct Prepared {
    /// The encoded translation; empty when no point translated to a sample.
    encoded: Vec<u8>,
    /// OTLP data points the translation refused, and why.
    refused_points: i64,
    messages: Vec<String>,
    /// Holds the body's bytes and the encoded translation's.
    reservation: Reservation,
}

/// Decodes the body and translates it, each stage's memory reserved before it is allocated and given back
/// once it is freed: the inflated body until it is decoded, the decoded request until it is translated, the
/// translation until it is encoded. A stage that could never fit in the whole budget beside what the
/// request already holds is refused for good (413); one that does not fit now, for a retry (503).
fn prepare(job: Job) -> Result<Prepared, PushError> {
    let Job {
        body,
        encoding,
        compression,
        max_decompressed,
        budget,
        limits,
        mut reservation,
    } = job;
    let inflight = budget.limit();
    let decode_limits = DecodeLimits {
        decompressed: max_decompressed,
        inflight,
    };
    let (request, decoded) = decode(&body, encoding, compression, decode_limits, &budget, reservation.held())?;
    drop(body);
    let settings = translate::Settings {
        strategy: limits.otel_translation_strategy,
        promote: &limits.promote_otel_resource_attributes,
    };
    let sizes = translate::bound(&request, settings);
    let held = reservation.held().saturating_add(decoded.held());
    if inflight > 0 && held.saturating_add(sizes.bytes) > inflight {
        return Err(PushError::OtlpTranslationTooLarge {
            bound: sizes.bytes,
            limit: inflight,
        });
    }
    let mut translating = budget.reserve();
    translating.grow(sizes.bytes)?;
    let translated = translate::translate(&request, settings, &sizes, max_decompressed);
    drop(request);
    drop(decoded);
    if translated.too_large() {
        return Err(PushError::OtlpTooLarge {
            limit: max_decompressed,
        });
    }
    let encoded = if translated.request.timeseries.is_empty() {
        Vec::new()
    } else {
        // Either encoder allocates once, at most this much.
        let len = translated.request.encoded_len() + 12 * translated.request.timeseries.len();
        reservation.grow(len)?;
        if limits.otel_created_timestamp_zero_ingestion_enabled {
            let created = &translated.created;
            encode_write_request_created(&translated.request, |i| created[i])
        } else {
            // `encode_to_vec` without measuring the request a second time.
            let mut encoded = Vec::with_capacity(len);
            translated.request.encode_raw(&mut encoded);
            encoded
        }
    };
    // The translation goes once it is encoded: only one copy of the series is held during the push.
    let translate::Translated {
        refused_points,
        messages,
        ..
    } = translated;
    drop(translating);
    Ok(Prepared {
        encoded,
        refused_points,
        messages,
        reservation,
    })
}

/// Pushes a prepared export request; the refusals of the translation and of the write path make up
/// `partial_success`.
async fn export(
    d: &Distributor,
    tenant: &TenantId,
    prepared: Prepared,
    encoding: Encoding,
    start: tokio::time::Instant,
) -> Result<Response, PushError> {
    let Prepared {
        encoded,
        refused_points: mut rejected,
        mut messages,
        reservation,
    } = prepared;
    if encoded.is_empty() {
        // Nothing to push (an empty request, or every point refused): counted here; `push_framed` counts the rest.
        d.record_answered_early(StatusCode::OK, start);
    } else {
        let outcome = d
            .push_framed(tenant, RemoteWriteVersion::V1, &encoded, Framing::Plain, reservation)
            .await?;
        if outcome.failure.is_some() {
            // Some series lack a quorum: the sender must retry the whole request, as remote write's would.
            let status = outcome.status();
            return Ok(answer(
                status,
                &RpcStatus::new(grpc_code(status), outcome.body()),
                encoding,
            ));
        }
        // A dropped metadata entry or exemplar is no rejected data point.
        let points = outcome
            .rejections
            .iter()
            .filter(|r| heddle_model::error_id::lookup(&r.reason).is_none_or(|e| e.scope != Scope::Entry))
            .count();
        rejected += i64::try_from(points).unwrap_or(i64::MAX);
        messages.extend(outcome.rejections.into_iter().map(|r| r.message));
    }
    let partial_success = (rejected > 0).then(|| ExportMetricsPartialSuccess {
        rejected_data_points: rejected,
        error_message: join_capped(
            messages.iter().map(String::as_str),
            messages.len(),
            crate::MAX_RESPONSE_BODY,
        )
        .trim_end()
        .to_owned(),
    });
    Ok(answer(
        StatusCode::OK,
        &ExportMetricsServiceResponse { partial_success },
        encoding,
    ))
}

/// `google.rpc.Status`, the body OTLP/HTTP gives every 4xx and 5xx answer (`details` is never filled).
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

impl RpcStatus {
    fn new(code: tonic::Code, message: String) -> Self {
        Self {
            code: code as i32,
            message: message.trim_end().to_owned(),
        }
    }
}

/// An OTLP message in protobuf or its JSON mapping.
trait OtlpMessage: prost::Message {
    fn to_json(&self) -> serde_json::Value;
}

impl OtlpMessage for RpcStatus {
    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "code": self.code, "message": self.message })
    }
}

impl OtlpMessage for ExportMetricsServiceResponse {
    /// proto3's JSON mapping: an absent `partialSuccess` is left out, and the int64 count is a string.
    fn to_json(&self) -> serde_json::Value {
        match &self.partial_success {
            None => serde_json::json!({}),
            Some(p) => serde_json::json!({
                "partialSuccess": {
                    "rejectedDataPoints": p.rejected_data_points.to_string(),
                    "errorMessage": p.error_message,
                }
            }),
        }
    }
}

fn answer(status: StatusCode, msg: &impl OtlpMessage, encoding: Encoding) -> Response {
    let (content_type, body) = match encoding {
        Encoding::Protobuf => ("application/x-protobuf", msg.encode_to_vec()),
        Encoding::Json => ("application/json", msg.to_json().to_string().into_bytes()),
    };
    let mut r = (status, body).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// `e` as OTLP answers it: its HTTP status, and a `google.rpc.Status` with its message.
fn refusal(e: &PushError, encoding: Encoding) -> Response {
    answer(e.status(), &RpcStatus::new(e.grpc_code(), e.to_string()), encoding)
}

/// The gRPC code of an HTTP status, as OTLP/gRPC would have answered.
fn grpc_code(status: StatusCode) -> tonic::Code {
    match status {
        StatusCode::TOO_MANY_REQUESTS | StatusCode::PAYLOAD_TOO_LARGE => tonic::Code::ResourceExhausted,
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::BAD_GATEWAY | StatusCode::GATEWAY_TIMEOUT => {
            tonic::Code::Unavailable
        }
        s if s.is_client_error() => tonic::Code::InvalidArgument,
        _ => tonic::Code::Internal,
    }
}

/// The message encoding `Content-Type` names, if it is one OTLP/HTTP defines.
fn encoding(headers: &HeaderMap) -> Option<Encoding> {
    let content_type = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let media = content_type.split(';').next().unwrap_or("").trim();
    if media.eq_ignore_ascii_case("application/x-protobuf") {
        Some(Encoding::Protobuf)
    } else if media.eq_ignore_ascii_case("application/json") {
        Some(Encoding::Json)
    } else {
        None
    }
}

/// Checks what can refuse a request before its body is read: Content-Length against `max_recv` (413),
/// Content-Encoding (gzip or none, else 415), Content-Type (`application/x-protobuf` or `application/json`,
/// else 415).
fn check_headers(headers: &HeaderMap, max_recv: usize) -> Result<(Encoding, Compression), PushError> {
    check_declared_length(headers, max_recv)?;
    let compression = match headers.get(header::CONTENT_ENCODING) {
        None => Compression::None,
        Some(enc) => {
            let text = enc.to_str().unwrap_or("<not ascii>").trim();
            if text.eq_ignore_ascii_case("gzip") {
                Compression::Gzip
            } else if text.is_empty() || text.eq_ignore_ascii_case("identity") {
                Compression::None
            } else {
                return Err(PushError::OtlpUnsupportedContentEncoding {
                    encoding: text.to_owned(),
                });
            }
        }
    };
    let Some(encoding) = encoding(headers) else {
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .map(|ct| ct.to_str().unwrap_or("<not ascii>"))
            .unwrap_or("");
        return Err(PushError::OtlpUnsupportedContentType {
            content_type: content_type.to_owned(),
        });
    };
    Ok((encoding, compression))
}

/// What bounds the decoding of one request.
#[derive(Debug, Clone, Copy)]
struct DecodeLimits {
    /// `distributor.max_decompressed_size`.
    decompressed: usize,
    /// The in-flight budget of all requests (0: none); a request whose decoded bound exceeds it can never be
    /// decoded, so it is refused for good (413) rather than told to retry (503).
    inflight: usize,
}

/// The export request in `body`, and the reservation that holds what it takes: inflated first when gzip
/// (at most `max_decompressed` bytes, each step of the inflated copy reserved before it is allocated, and
/// given back once decoded), and a bound of the decoded request's memory reserved before it is decoded
/// ([`measure`]). `held` is what the request already holds (its body).
fn decode(
    body: &[u8],
    encoding: Encoding,
    compression: Compression,
    limits: DecodeLimits,
    budget: &Arc<InflightBytes>,
    held: usize,
) -> Result<(ExportMetricsServiceRequest, Reservation), PushError> {
    let mut inflating = budget.reserve();
    let inflated;
    let raw = match compression {
        Compression::None => body,
        Compression::Gzip => {
            inflated = gunzip(body, limits.decompressed, &mut inflating)?;
            &inflated[..]
        }
    };
    // Decoded OTLP can be many times its wire size: what it may take is held in the budget before decoding,
    // and what the walk cannot read is refused before the decoder sees it.
    let bound = match encoding {
        Encoding::Protobuf => measure::decoded_bound(raw).map_err(|m| m.to_string()),
        Encoding::Json => measure::json_bound(raw).map_err(|m| m.in_text(raw)),
    }
    .map_err(|detail| PushError::InvalidOtlp { detail })?;
    let needs = held.saturating_add(inflating.held()).saturating_add(bound);
    if limits.inflight > 0 && needs > limits.inflight {
        return Err(PushError::OtlpDecodedTooLarge {
            bound,
            limit: limits.inflight,
        });
    }
    let mut decoded = budget.reserve();
    decoded.grow(bound)?;
    let request = match encoding {
        Encoding::Protobuf => {
            ExportMetricsServiceRequest::decode(raw).map_err(|e| PushError::InvalidOtlp { detail: e.to_string() })?
        }
        // serde_json stops at 128 levels of nesting, so a deeply nested body is an error, not a stack overflow.
        Encoding::Json => {
            let request = serde_json::from_slice(raw).map_err(|e| PushError::InvalidOtlp { detail: e.to_string() })?;
            check_json_oneofs(&request)?;
            request
        }
    };
    Ok((request, decoded))
}

/// The serde mapping reads a oneof (a metric's data, a number point's value) as a flattened `Option`, which
/// serde leaves `None` when the field is malformed instead of failing. A JSON metric without data or a number
/// point without a value is therefore refused as malformed, not dropped in silence.
fn check_json_oneofs(request: &ExportMetricsServiceRequest) -> Result<(), PushError> {
    use opentelemetry_proto::tonic::metrics::v1::{DataPointFlags, metric::Data};
    let metrics = request
        .resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics);
    for m in metrics {
        let points = match &m.data {
            None => {
                return Err(PushError::InvalidOtlp {
                    detail: format!(
                        "metric {:?} has no gauge, sum, histogram, exponentialHistogram or summary that could be \
                         read (missing or malformed)",
                        m.name
                    ),
                });
            }
            Some(Data::Gauge(g)) => &g.data_points,
            Some(Data::Sum(s)) => &s.data_points,
            Some(_) => continue,
        };
        // A point flagged "no recorded value" (a staleness marker) has no value to read.
        let no_recorded_value = DataPointFlags::NoRecordedValueMask as u32;
        if points
            .iter()
            .any(|p| p.value.is_none() && p.flags & no_recorded_value == 0)
        {
            return Err(PushError::InvalidOtlp {
                detail: format!(
                    "metric {:?} has a data point without an asDouble or asInt that could be read (missing or \
                     malformed)",
                    m.name
                ),
            });
        }
    }
    Ok(())
}

/// Inflates `body` into at most `limit` bytes; every byte of the buffer's capacity is reserved first.
fn gunzip(body: &[u8], limit: usize, reservation: &mut Reservation) -> Result<Vec<u8>, PushError> {
    // MultiGzDecoder: a gzip body may be several members (concatenated gzip files), as HTTP allows.
    let mut decoder = flate2::read::MultiGzDecoder::new(body);
    let mut out = Vec::new();
    loop {
        if out.len() > limit {
            return Err(PushError::GzipTooLarge { limit });
        }
        let step = INFLATE_STEP.min(limit + 1 - out.len());
        let at = out.len();
        if at + step > out.capacity() {
            // Grow as Vec would (doubling), reserving the new capacity before allocating it.
            let capacity = (at + step).max(out.capacity().saturating_mul(2)).min(limit + 1);
            reservation.grow(capacity - out.capacity())?;
            out.reserve_exact(capacity - at);
        }
        out.resize(at + step, 0);
        let n = read_some(&mut decoder, &mut out[at..])?;
        out.truncate(at + n);
        if n == 0 {
            return Ok(out);
        }
    }
}

/// Fills `buf` as far as the decoder goes; 0 only at the end of the stream.
fn read_some(decoder: &mut impl std::io::Read, buf: &mut [u8]) -> Result<usize, PushError> {
    let mut filled = 0;
    while filled < buf.len() {
        match decoder.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(PushError::CorruptGzip { detail: e.to_string() }),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests;
