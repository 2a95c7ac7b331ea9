//! The querier's HTTP routes. The tenant comes from the `TenantId` request extension that the server layer
//! inserts (from `X-Scope-OrgID`, or `anonymous`); these handlers never read the header themselves.

use crate::api;
use crate::error::QuerierError;
use crate::metrics::Endpoint;
use crate::params::Form;
use crate::querier::Querier;
use crate::remote_read;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Extension, Path, RawQuery, State};
use axum::http::{HeaderMap, Method, header};
use axum::response::Response;
use axum::routing::{get, post};
use heddle_model::TenantId;
use std::sync::Arc;
use std::time::Instant;

/// Remote read path.
pub const READ_PATH: &str = "/prometheus/api/v1/read";
/// Series API path.
pub const SERIES_PATH: &str = "/prometheus/api/v1/series";
/// Label names API path.
pub const LABELS_PATH: &str = "/prometheus/api/v1/labels";
/// Label values API path (axum syntax).
pub const LABEL_VALUES_PATH: &str = "/prometheus/api/v1/label/{name}/values";

/// The querier's routes: remote read (`POST`), and the series, labels and label-values APIs (`GET` and
/// `POST`). Expects a `heddle_model::TenantId` extension on every request.
pub fn router(q: Arc<Querier>) -> Router {
    Router::new()
        .route(READ_PATH, post(read))
        .route(SERIES_PATH, get(series).post(series))
        .route(LABELS_PATH, get(labels).post(labels))
        .route(LABEL_VALUES_PATH, get(label_values).post(label_values))
        .with_state(q)
}

/// Form values from the query string and, for a URL-encoded POST, the body.
fn form(method: &Method, headers: &HeaderMap, query: Option<&str>, body: &[u8]) -> Form {
    let urlencoded = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    let body: &[u8] = if method == Method::POST && urlencoded {
        body
    } else {
        &[]
    };
    Form::parse(query, body)
}

/// Turns a handler result into a response, recording the request's metrics.
fn finish(
    q: &Querier,
    endpoint: Endpoint,
    started: Instant,
    result: Result<Response, QuerierError>,
    render_error: fn(&QuerierError) -> Response,
) -> Response {
    let resp = result.unwrap_or_else(|err| {
        if err.status().is_server_error() {
            tracing::warn!(?endpoint, error = %err, "query failed");
        } else {
            tracing::debug!(?endpoint, error = %err, "query refused");
        }
        render_error(&err)
    });
    q.metrics
        .observe_request(endpoint, resp.status().as_u16(), started.elapsed().as_secs_f64());
    resp
}

async fn read(State(q): State<Arc<Querier>>, Extension(tenant): Extension<TenantId>, body: Bytes) -> Response {
    let started = Instant::now();
    let result = remote_read::handle(&q, &tenant, &body).await;
    finish(&q, Endpoint::RemoteRead, started, result, api::text_error_response)
}

async fn series(
    State(q): State<Arc<Querier>>,
    Extension(tenant): Extension<TenantId>,
    method: Method,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    let started = Instant::now();
    let form = form(&method, &headers, query.as_deref(), &body);
    let result = api::series(&q, &tenant, &form).await;
    finish(&q, Endpoint::Series, started, result, api::error_response)
}

async fn labels(
    State(q): State<Arc<Querier>>,
    Extension(tenant): Extension<TenantId>,
    method: Method,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    let started = Instant::now();
    let form = form(&method, &headers, query.as_deref(), &body);
    let result = api::label_names(&q, &tenant, &form).await;
    finish(&q, Endpoint::Labels, started, result, api::error_response)
}

async fn label_values(
    State(q): State<Arc<Querier>>,
    Extension(tenant): Extension<TenantId>,
    Path(name): Path<String>,
    method: Method,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    let started = Instant::now();
    let form = form(&method, &headers, query.as_deref(), &body);
    let result = api::label_values(&q, &tenant, &name, &form).await;
    finish(&q, Endpoint::LabelValues, started, result, api::error_response)
}
