//! The querier's HTTP routes. The tenant comes from the `TenantId` request extension that the server layer
//! inserts (from `X-Scope-OrgID`, or `anonymous`); these handlers never read the header themselves.

use crate::api;
use crate::error::QuerierError;
use crate::metrics::{Endpoint, Outcome};
use crate::params::Form;
use crate::promql_api;
use crate::querier::Querier;
use crate::remote_read;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Extension, FromRequest, Path, Request, State};
use axum::http::{Method, header};
use axum::response::{IntoResponse, Response};
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
/// PromQL instant query path.
pub const QUERY_PATH: &str = "/prometheus/api/v1/query";
/// PromQL range query path.
pub const QUERY_RANGE_PATH: &str = "/prometheus/api/v1/query_range";
/// Query formatting path.
pub const FORMAT_QUERY_PATH: &str = "/prometheus/api/v1/format_query";
/// Build information path.
pub const BUILD_INFO_PATH: &str = "/prometheus/api/v1/status/buildinfo";
/// Metric metadata path.
pub const METADATA_PATH: &str = "/prometheus/api/v1/metadata";
/// Exemplar query path.
pub const QUERY_EXEMPLARS_PATH: &str = "/prometheus/api/v1/query_exemplars";

/// The querier's routes: remote read (`POST`); the series, labels and label-values APIs; and the PromQL query
/// API (`query`, `query_range`, `format_query`, `status/buildinfo`, `metadata`, `query_exemplars`), each
/// `GET` and `POST` as in Prometheus. Expects a `heddle_model::TenantId` extension on every request.
pub fn router(q: Arc<Querier>) -> Router {
    Router::new()
        .route(READ_PATH, post(read))
        .route(SERIES_PATH, get(series).post(series))
        .route(LABELS_PATH, get(labels).post(labels))
        .route(LABEL_VALUES_PATH, get(label_values).post(label_values))
        .route(QUERY_PATH, get(query).post(query))
        .route(QUERY_RANGE_PATH, get(query_range).post(query_range))
        .route(FORMAT_QUERY_PATH, get(format_query).post(format_query))
        .route(BUILD_INFO_PATH, get(build_info))
        .route(METADATA_PATH, get(metadata).post(metadata))
        .route(QUERY_EXEMPLARS_PATH, get(query_exemplars).post(query_exemplars))
        .with_state(q)
}

/// A request's form values: the query string and, for a URL-encoded POST, the body, merged as Prometheus
/// merges them (axum's `Form` reads only one of the two).
pub(crate) struct RequestForm(Form);

impl<S: Send + Sync> FromRequest<S> for RequestForm {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Response> {
        let urlencoded = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
        let post = req.method() == Method::POST;
        let query = req.uri().query().map(str::to_owned);
        let body = Bytes::from_request(req, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let body: &[u8] = if post && urlencoded { &body } else { &[] };
        Ok(RequestForm(Form::parse(query.as_deref(), body)))
    }
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
    RequestForm(form): RequestForm,
) -> Response {
    let started = Instant::now();
    let result = api::series(&q, &tenant, &form).await;
    finish(&q, Endpoint::Series, started, result, api::error_response)
}

async fn labels(
    State(q): State<Arc<Querier>>,
    Extension(tenant): Extension<TenantId>,
    RequestForm(form): RequestForm,
) -> Response {
    let started = Instant::now();
    let result = api::label_names(&q, &tenant, &form).await;
    finish(&q, Endpoint::Labels, started, result, api::error_response)
}

async fn label_values(
    State(q): State<Arc<Querier>>,
    Extension(tenant): Extension<TenantId>,
    Path(name): Path<String>,
    RequestForm(form): RequestForm,
) -> Response {
    let started = Instant::now();
    let result = api::label_values(&q, &tenant, &name, &form).await;
    finish(&q, Endpoint::LabelValues, started, result, api::error_response)
}

/// Records a PromQL query's outcome once: as the answer's, or as `canceled` when the client went away and
/// the handler was dropped before it answered.
struct OutcomeGuard<'q> {
    q: &'q Querier,
    endpoint: Endpoint,
    recorded: bool,
}

impl OutcomeGuard<'_> {
    fn record(mut self, result: &Result<Response, QuerierError>) {
        let outcome = match result {
            Ok(_) => Outcome::Success,
            Err(e) => Outcome::of_error_type(e.error_type()),
        };
        self.q.metrics.query_outcome(self.endpoint, outcome);
        self.recorded = true;
    }
}

impl Drop for OutcomeGuard<'_> {
    fn drop(&mut self) {
        if !self.recorded {
            self.q.metrics.query_outcome(self.endpoint, Outcome::Canceled);
        }
    }
}

/// Answers a PromQL query of `endpoint` with `run`, recording its outcome and the request's metrics.
async fn promql<'a, F>(q: &'a Querier, endpoint: Endpoint, run: impl FnOnce(tokio::time::Instant) -> F) -> Response
where
    F: Future<Output = Result<Response, QuerierError>> + 'a,
{
    let started = Instant::now();
    let guard = OutcomeGuard {
        q,
        endpoint,
        recorded: false,
    };
    let result = run(tokio::time::Instant::now()).await;
    guard.record(&result);
    finish(q, endpoint, started, result, api::error_response)
}

async fn query(
    State(q): State<Arc<Querier>>,
    Extension(tenant): Extension<TenantId>,
    RequestForm(form): RequestForm,
) -> Response {
    promql(&q, Endpoint::Query, |started| {
        promql_api::query(&q, &tenant, &form, started)
    })
    .await
}

async fn query_range(
    State(q): State<Arc<Querier>>,
    Extension(tenant): Extension<TenantId>,
    RequestForm(form): RequestForm,
) -> Response {
    promql(&q, Endpoint::QueryRange, |started| {
        promql_api::query_range(&q, &tenant, &form, started)
    })
    .await
}

async fn format_query(State(q): State<Arc<Querier>>, RequestForm(form): RequestForm) -> Response {
    let started = Instant::now();
    let result = promql_api::format_query(&form);
    finish(&q, Endpoint::FormatQuery, started, result, api::error_response)
}

async fn build_info(State(q): State<Arc<Querier>>) -> Response {
    let started = Instant::now();
    let result = Ok(promql_api::build_info(&q));
    finish(&q, Endpoint::BuildInfo, started, result, api::error_response)
}

async fn metadata(
    State(q): State<Arc<Querier>>,
    Extension(tenant): Extension<TenantId>,
    RequestForm(form): RequestForm,
) -> Response {
    let started = Instant::now();
    let result = promql_api::metadata(&q, &tenant, &form).await;
    finish(&q, Endpoint::Metadata, started, result, api::error_response)
}

async fn query_exemplars(
    State(q): State<Arc<Querier>>,
    Extension(tenant): Extension<TenantId>,
    RequestForm(form): RequestForm,
) -> Response {
    let started = Instant::now();
    let result = promql_api::query_exemplars(&q, &tenant, &form).await;
    finish(&q, Endpoint::QueryExemplars, started, result, api::error_response)
}
