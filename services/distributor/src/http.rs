//! The remote-write HTTP endpoints: `POST /api/v1/push` (Mimir's path) and `POST /api/v1/write`.
//!
//! The edge of the write path (DESIGN.md §2 step 1), and the only place the distributor reads HTTP: the
//! handler refuses what it can before reading the body (declared length, encoding, type), reads the body
//! with the size limit enforced as it streams in, and hands the tenant and the body to
//! [`Distributor::push`]. The tenant comes from the `TenantId` extension that `heddle_server::tenant_layer`
//! adds; this router does not read `X-Scope-OrgID` itself.

use crate::config::DistributorConfig;
use crate::distributor::Distributor;
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
    if let Err(e) = check_headers(&headers, d.config()) {
        return early_refusal(&d, e, start);
    }
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<usize>().ok());
    let cfg = d.config();
    let mut reservation = d.inflight().reserve();
    let read = read_body(
        body,
        declared,
        cfg.max_recv_msg_size,
        cfg.body_read_timeout,
        &mut reservation,
    );
    let body = match read.await {
        Ok(body) => body,
        Err(e) => return early_refusal(&d, e, start),
    };
    match d.push_reserved(&tenant, &body, reservation).await {
        Ok(outcome) => outcome.into_response(),
        Err(e) => e.into_response(),
    }
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
/// (`application/x-protobuf` or absent, else 415).
fn check_headers(headers: &HeaderMap, cfg: &DistributorConfig) -> Result<(), PushError> {
    if let Some(len) = headers.get(header::CONTENT_LENGTH)
        && let Some(len) = len.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok())
        && len > cfg.max_recv_msg_size as u64
    {
        return Err(PushError::BodyTooLarge {
            size: len,
            limit: cfg.max_recv_msg_size,
        });
    }
    if let Some(enc) = headers.get(header::CONTENT_ENCODING) {
        let text = enc.to_str().unwrap_or("<not ascii>").trim();
        if !text.eq_ignore_ascii_case("snappy") {
            return Err(PushError::UnsupportedContentEncoding {
                encoding: text.to_owned(),
            });
        }
    }
    if let Some(ct) = headers.get(header::CONTENT_TYPE) {
        let text = ct.to_str().unwrap_or("<not ascii>");
        if !is_remote_write_v1(text) {
            return Err(PushError::UnsupportedContentType {
                content_type: text.to_owned(),
            });
        }
    }
    Ok(())
}

/// `application/x-protobuf`, parameters ignored except `proto=`: remote write 2.0 sends
/// `proto=io.prometheus.write.v2.Request`, which must get 415 (the 2.0 spec says so, and the sender then
/// falls back to 1.0) rather than be misread as a 1.0 body.
fn is_remote_write_v1(content_type: &str) -> bool {
    let mut parts = content_type.split(';');
    let media = parts.next().unwrap_or("").trim();
    if !media.eq_ignore_ascii_case("application/x-protobuf") {
        return false;
    }
    parts.all(|param| match param.split_once('=') {
        Some((k, v)) if k.trim().eq_ignore_ascii_case("proto") => {
            v.trim().trim_matches('"') == "prometheus.WriteRequest"
        }
        _ => true,
    })
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
