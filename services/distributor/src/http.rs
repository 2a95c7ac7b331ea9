//! The remote-write HTTP endpoints: `POST /api/v1/push` (Mimir's path) and `POST /api/v1/write`.
//!
//! Both remote write versions arrive on the same paths and are told apart by content type, as the 2.0 spec
//! says: `application/x-protobuf` alone or with `proto=prometheus.WriteRequest` is 1.0,
//! `proto=io.prometheus.write.v2.Request` is 2.0, any other `proto` is 415 (the sender may then fall back).
//! A 2.0 response carries the `X-Prometheus-Remote-Write-{Samples,Histograms,Exemplars}-Written` headers
//! (histograms are not stored yet, so that one is always 0; exemplars count those of series a quorum acknowledged), errors included, so a sender
//! knows what of a partly refused request was written.
//!
//! The edge of the write path (DESIGN.md §2 step 1), and the only place the distributor reads HTTP: the
//! handler refuses what it can before reading the body (declared length, encoding, type), reads the body
//! with the size limit enforced as it streams in, and hands the tenant and the body to
//! [`Distributor::push`]. The tenant comes from the `TenantId` extension that `heddle_server::tenant_layer`
//! adds; this router does not read `X-Scope-OrgID` itself.

use crate::config::DistributorConfig;
use crate::distributor::{Distributor, RemoteWriteVersion};
use crate::error::PushError;
use crate::outcome::PushOutcome;
use axum::Router;
use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::StreamExt;
use heddle_model::TenantId;
use std::sync::Arc;

/// Remote-write and OTLP routes, with `d` as their state. Wrap the result in `heddle_server::tenant_layer`.
pub fn router(d: Arc<Distributor>) -> Router {
    Router::new()
        .route("/api/v1/push", post(push_handler))
        .route("/api/v1/write", post(push_handler))
        .route("/otlp/v1/metrics", post(crate::otlp::otlp_handler))
        .with_state(d)
}

async fn push_handler(
    State(d): State<Arc<Distributor>>,
    tenant: Option<Extension<TenantId>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let start = tokio::time::Instant::now();
    let Some(Extension(tenant)) = tenant else {
        return early_refusal(&d, PushError::NoTenant, start);
    };
    let version = match check_headers(&headers, d.config()) {
        Ok(version) => version,
        Err(e) => return early_refusal(&d, e, start),
    };
    let (response, written) = push(&d, &tenant, version, headers, body, start).await;
    with_written_headers(response, version, written)
}

/// What a push wrote: samples and exemplars acknowledged by a quorum.
#[derive(Debug, Clone, Copy, Default)]
struct Written {
    samples: u64,
    histograms: u64,
    exemplars: u64,
}

/// The push once the version is known: the response and what was written.
async fn push(
    d: &Distributor,
    tenant: &TenantId,
    version: RemoteWriteVersion,
    headers: HeaderMap,
    body: Body,
    start: tokio::time::Instant,
) -> (Response, Written) {
    let mut reservation = d.inflight().reserve();
    let body = match read_push_body(d, &headers, body, &mut reservation).await {
        Ok(body) => body,
        Err(e) => return (early_refusal(d, e, start), Written::default()),
    };
    match d.push_reserved(tenant, version, &body, reservation).await {
        Ok(outcome) => {
            let written = Written {
                samples: outcome.samples_ingested,
                histograms: outcome.histograms_ingested,
                exemplars: outcome.exemplars_ingested,
            };
            (outcome.into_response(), written)
        }
        Err(e) => (e.into_response(), Written::default()),
    }
}

/// Adds the remote write 2.0 written-counts headers to a 2.0 response; a 1.0 response is left as it is.
fn with_written_headers(mut response: Response, version: RemoteWriteVersion, written: Written) -> Response {
    if version == RemoteWriteVersion::V2 {
        let h = response.headers_mut();
        h.insert(
            "x-prometheus-remote-write-samples-written",
            HeaderValue::from(written.samples),
        );
        h.insert(
            "x-prometheus-remote-write-histograms-written",
            HeaderValue::from(written.histograms),
        );
        h.insert(
            "x-prometheus-remote-write-exemplars-written",
            HeaderValue::from(written.exemplars),
        );
    }
    response
}

/// A refusal decided before the body was read in full. The unread rest of the body would poison a
/// keep-alive connection, so the response says `Connection: close` and the client opens a fresh one
/// instead of failing its next request on a connection the server is about to drop.
pub(crate) fn early_refusal(d: &Distributor, e: PushError, start: tokio::time::Instant) -> Response {
    d.record_early_refusal(&e, start);
    let mut r = e.into_response();
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// Checks the headers that can refuse a request before its body is read: Content-Length against
/// `max_recv_msg_size` (413), Content-Encoding (snappy or absent, else 415), Content-Type
/// (`application/x-protobuf` with no `proto` or a known one, or absent, else 415). Returns the remote write
/// version the content type names (1.0 when absent).
fn check_headers(headers: &HeaderMap, cfg: &DistributorConfig) -> Result<RemoteWriteVersion, PushError> {
    check_declared_length(headers, cfg.max_recv_msg_size)?;
    if let Some(enc) = headers.get(header::CONTENT_ENCODING) {
        let text = enc.to_str().unwrap_or("<not ascii>").trim();
        if !text.eq_ignore_ascii_case("snappy") {
            return Err(PushError::UnsupportedContentEncoding {
                encoding: text.to_owned(),
            });
        }
    }
    let Some(ct) = headers.get(header::CONTENT_TYPE) else {
        return Ok(RemoteWriteVersion::V1);
    };
    let text = ct.to_str().unwrap_or("<not ascii>");
    remote_write_version(text).ok_or_else(|| PushError::UnsupportedContentType {
        content_type: text.to_owned(),
    })
}

/// The remote write version of `content_type`: `application/x-protobuf`, parameters ignored except `proto=`,
/// which must name a message of a version Heddle reads (the message name is case-sensitive, as protobuf's
/// are). None for anything else.
fn remote_write_version(content_type: &str) -> Option<RemoteWriteVersion> {
    let mut parts = content_type.split(';');
    let media = parts.next().unwrap_or("").trim();
    if !media.eq_ignore_ascii_case("application/x-protobuf") {
        return None;
    }
    let mut version = RemoteWriteVersion::V1;
    for param in parts {
        if let Some((k, v)) = param.split_once('=')
            && k.trim().eq_ignore_ascii_case("proto")
        {
            version = match v.trim().trim_matches('"') {
                "prometheus.WriteRequest" => RemoteWriteVersion::V1,
                "io.prometheus.write.v2.Request" => RemoteWriteVersion::V2,
                _ => return None,
            };
        }
    }
    Some(version)
}

/// Refuses a push whose `Content-Length` is over `max_recv` bytes (413) before any of its body is read.
pub(crate) fn check_declared_length(headers: &HeaderMap, max_recv: usize) -> Result<(), PushError> {
    if let Some(len) = headers.get(header::CONTENT_LENGTH)
        && let Some(len) = len.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok())
        && len > max_recv as u64
    {
        return Err(PushError::BodyTooLarge {
            size: len,
            limit: max_recv,
        });
    }
    Ok(())
}

/// The body of a push (remote write or OTLP), read within the distributor's size and time limits, its
/// bytes held in `reservation`.
pub(crate) async fn read_push_body(
    d: &Distributor,
    headers: &HeaderMap,
    body: Body,
    reservation: &mut heddle_server::Reservation,
) -> Result<Vec<u8>, PushError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<usize>().ok());
    let cfg = d.config();
    read_body(
        body,
        declared,
        cfg.max_recv_msg_size,
        cfg.body_read_timeout,
        reservation,
    )
    .await
}

/// Reads the whole body, failing with 413 as soon as more than `limit` bytes have arrived, and with 503 when it
/// has not arrived within `timeout` or its buffer would take the in-flight bytes past their limit. The buffer's
/// capacity is held in `reservation` before the buffer grows to it.
pub(crate) async fn read_body(
    body: Body,
    declared: Option<usize>,
    limit: usize,
    timeout: std::time::Duration,
    reservation: &mut heddle_server::Reservation,
) -> Result<Vec<u8>, PushError> {
    let mut stream = body.into_data_stream();
    let initial = declared.unwrap_or(0).min(limit);
    reservation.grow(initial)?;
    let mut buf = Vec::with_capacity(initial);
    let read = async {
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| PushError::BodyRead { detail: e.to_string() })?;
            if buf.len() + chunk.len() > limit {
                return Err(PushError::BodyTooLarge {
                    size: (buf.len() + chunk.len()) as u64,
                    limit,
                });
            }
            let needed = buf.len() + chunk.len();
            if needed > buf.capacity() {
                // Grow as Vec would (doubling), but reserve the new capacity before allocating it.
                let capacity = needed.max(buf.capacity().saturating_mul(2)).min(limit);
                reservation.grow(capacity - reservation.held().min(capacity))?;
                buf.reserve_exact(capacity - buf.len());
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(())
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(())) => Ok(buf),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(PushError::BodyReadTimeout {
            timeout_ms: timeout.as_millis(),
            received: buf.len(),
        }),
    }
}

impl IntoResponse for PushError {
    fn into_response(self) -> Response {
        text_response(self.status(), format!("{self}\n"))
    }
}

impl IntoResponse for PushOutcome {
    /// 200 with an empty body, or the worst status with one message per line.
    fn into_response(self) -> Response {
        text_response(self.status(), self.body())
    }
}

fn text_response(status: StatusCode, body: String) -> Response {
    if body.is_empty() {
        return status.into_response();
    }
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

#[cfg(test)]
mod tests;
