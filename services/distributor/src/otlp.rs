//! `POST /otlp/v1/metrics` (Mimir's path): OTLP/HTTP metrics, translated to Prometheus series and pushed
//! through the same stages as remote write.
//!
//! The body is an `ExportMetricsServiceRequest` in protobuf (`application/x-protobuf`), gzip-compressed or not.
//! OTLP JSON is refused with 415: the `opentelemetry-proto` crate's serde mapping is not the OTLP JSON
//! encoding (it does not read 64-bit integers sent as strings, for one), and a half-right JSON reader would
//! misread data silently. [`translate`] turns the request into a remote write 1.0 `WriteRequest`, which
//! [`Distributor::push_framed`] validates, limits, shards and forwards like any other push: one write path,
//! one set of limits.
//!
//! The answer is OTLP's: 200 with an `ExportMetricsServiceResponse` whose `partial_success` counts the data
//! points refused (by the translation, such as delta sums, or by validation and ingesters, one per Prometheus
//! sample) and says why; 400 (malformed body), 413, 415, 429 and 5xx with a text message otherwise.

mod translate;

use crate::distributor::{Distributor, Framing, RemoteWriteVersion};
use crate::error::PushError;
use crate::http::{early_refusal, read_push_body};
use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use heddle_model::TenantId;
use heddle_model::error_id::Scope;
use heddle_server::Reservation;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use prost::Message as _;
use std::sync::Arc;

/// How much of a gzip body is inflated at a time, each piece reserved in the in-flight budget first.
const INFLATE_STEP: usize = 64 * 1024;

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
    let Some(Extension(tenant)) = tenant else {
        return early_refusal(&d, PushError::NoTenant, start);
    };
    let compression = match check_headers(&headers, d.config().max_recv_msg_size) {
        Ok(c) => c,
        Err(e) => return early_refusal(&d, e, start),
    };
    let cfg = d.config();
    let mut reservation = d.inflight().reserve();
    let body = match read_push_body(&d, &headers, body, &mut reservation).await {
        Ok(body) => body,
        Err(e) => return early_refusal(&d, e, start),
    };
    let request = match decode(&body, compression, cfg.max_decompressed_size, &mut reservation) {
        Ok(request) => request,
        Err(e) => {
            // Refused after the body was read in full: the connection stays usable.
            d.record_early_refusal(&e, start);
            return e.into_response();
        }
    };
    drop(body);
    export(&d, &tenant, request, reservation, start)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// Decodes, translates and pushes one export request; the refusals of the translation and of the write path
/// make up `partial_success`.
async fn export(
    d: &Distributor,
    tenant: &TenantId,
    request: ExportMetricsServiceRequest,
    reservation: Reservation,
    start: tokio::time::Instant,
) -> Result<Response, PushError> {
    let limit = d.config().max_decompressed_size;
    let translated = translate::translate(&request, &d.config().otel_promote_resource_attributes, limit);
    drop(request);
    if translated.too_large() {
        return Err(PushError::OtlpTooLarge { limit });
    }
    let mut rejected = translated.refused_points;
    let mut messages = translated.messages;
    if translated.request.timeseries.is_empty() {
        // Nothing to push (an empty request, or every point refused): counted here; `push_framed` counts the rest.
        d.record_answered_early(StatusCode::OK, start);
    } else {
        // The translation goes once it is encoded: only one copy of the series is held during the push.
        let encoded = translated.request.encode_to_vec();
        drop(translated.request);
        let outcome = d
            .push_framed(tenant, RemoteWriteVersion::V1, &encoded, Framing::Plain, reservation)
            .await?;
        if outcome.failure.is_some() {
            // Some series lack a quorum: the sender must retry the whole request, as remote write's would.
            return Ok(outcome.into_response());
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
        error_message: join_messages(&messages),
    });
    Ok(protobuf_response(ExportMetricsServiceResponse { partial_success }))
}

/// The messages, one per line, capped at [`crate::MAX_RESPONSE_BODY`] bytes.
fn join_messages(messages: &[String]) -> String {
    let mut out = String::new();
    for (i, m) in messages.iter().enumerate() {
        if i > 0 && out.len() + m.len() + 1 > crate::MAX_RESPONSE_BODY {
            out.push_str(&format!("\nand {} more", messages.len() - i));
            break;
        }
        if i > 0 {
            out.push('\n');
        }
        out.push_str(m);
    }
    out
}

fn protobuf_response(msg: ExportMetricsServiceResponse) -> Response {
    let mut r = (StatusCode::OK, msg.encode_to_vec()).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-protobuf"));
    r
}

/// Checks what can refuse a request before its body is read: Content-Length against `max_recv` (413),
/// Content-Encoding (gzip or none, else 415), Content-Type (`application/x-protobuf`, else 415).
fn check_headers(headers: &HeaderMap, max_recv: usize) -> Result<Compression, PushError> {
    if let Some(len) = headers.get(header::CONTENT_LENGTH)
        && let Some(len) = len.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok())
        && len > max_recv as u64
    {
        return Err(PushError::BodyTooLarge {
            size: len,
            limit: max_recv,
        });
    }
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
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .map(|ct| ct.to_str().unwrap_or("<not ascii>"))
        .unwrap_or("");
    let media = content_type.split(';').next().unwrap_or("").trim();
    if !media.eq_ignore_ascii_case("application/x-protobuf") {
        return Err(PushError::OtlpUnsupportedContentType {
            content_type: content_type.to_owned(),
        });
    }
    Ok(compression)
}

/// The export request in `body`: inflated first when gzip, at most `max_decompressed` bytes, each step of
/// the inflated copy reserved before it is allocated.
fn decode(
    body: &[u8],
    compression: Compression,
    max_decompressed: usize,
    reservation: &mut Reservation,
) -> Result<ExportMetricsServiceRequest, PushError> {
    let inflated;
    let raw = match compression {
        Compression::None => body,
        Compression::Gzip => {
            inflated = gunzip(body, max_decompressed, reservation)?;
            &inflated[..]
        }
    };
    ExportMetricsServiceRequest::decode(raw).map_err(|e| PushError::InvalidOtlp { detail: e.to_string() })
}

fn gunzip(body: &[u8], limit: usize, reservation: &mut Reservation) -> Result<Vec<u8>, PushError> {
    // MultiGzDecoder: a gzip body may be several members (concatenated gzip files), as HTTP allows.
    let mut decoder = flate2::read::MultiGzDecoder::new(body);
    let mut out = Vec::new();
    loop {
        if out.len() > limit {
            return Err(PushError::GzipTooLarge { limit });
        }
        let step = INFLATE_STEP.min(limit + 1 - out.len());
        reservation.grow(step)?;
        let at = out.len();
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
