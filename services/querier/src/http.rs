//! The querier's HTTP routes. The tenant comes from the `TenantId` request extension that the server layer
//! inserts (from `X-Scope-OrgID`, or `anonymous`); these handlers never read the header themselves.

use crate::api;
use crate::budget;
use crate::error::QuerierError;
use crate::metrics::{Endpoint, Outcome};
use crate::params::Form;
use crate::promql_api;
use crate::querier::Querier;
use crate::remote_read;
use axum::Router;
use axum::body::Body;
use axum::extract::{Extension, FromRequest, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::response::Response;
use axum::routing::{get, post};
use heddle_model::TenantId;
use heddle_server::Reservation;
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
/// merges them (axum's `Form` reads only one of the two). The body (within `querier.max_body_size`) and the
/// parsed form are held in the request's reservation of the in-flight budget, which the handler grows for
/// what it builds from the form (selectors, the PromQL query). A refusal while reading it is the handler's to
/// answer (`form` is the error), so that it is counted as the endpoint's.
pub(crate) struct RequestForm {
    pub(crate) form: Result<Form, QuerierError>,
    pub(crate) reservation: Reservation,
}

impl FromRequest<Arc<Querier>> for RequestForm {
    type Rejection = std::convert::Infallible;

    async fn from_request(req: Request, q: &Arc<Querier>) -> Result<Self, Self::Rejection> {
        let urlencoded = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
        let post = req.method() == Method::POST;
        let mut reservation = q.inflight.reserve();
        let (parts, body) = req.into_parts();
        let form = async {
            // Any other body is not read at all: nothing of it is needed.
            let body = if post && urlencoded {
                let cfg = q.config();
                budget::read_body(
                    body,
                    &parts.headers,
                    cfg.max_body_size,
                    cfg.body_read_timeout,
                    &mut reservation,
                )
                .await?
            } else {
                Vec::new()
            };
            budget::parse_form(parts.uri.query(), &body, &mut reservation)
        }
        .await;
        Ok(RequestForm { form, reservation })
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
        let mut resp = render_error(&err);
        if err.body_unread() {
            // The unread rest of the body would poison a keep-alive connection: the client opens a fresh one.
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    });
    q.metrics
        .observe_request(endpoint, resp.status().as_u16(), started.elapsed().as_secs_f64());
    resp
}

async fn read(
    State(q): State<Arc<Querier>>,
    Extension(tenant): Extension<TenantId>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let result = remote_read::handle(&q, &tenant, &headers, body).await;
    finish(&q, Endpoint::RemoteRead, started, result, api::text_error_response)
}

async fn series(
    State(q): State<Arc<Querier>>,
    Extension(tenant): Extension<TenantId>,
    RequestForm { form, mut reservation }: RequestForm,
) -> Response {
    let started = Instant::now();
    let result = match form {
        Ok(form) => api::series(&q, &tenant, &form, &mut reservation).await,
        Err(e) => Err(e),
    };
    finish(&q, Endpoint::Series, started, result, api::error_response)
}

async fn labels(
    State(q): State<Arc<Querier>>,
    Extension(tenant): Extension<TenantId>,
    RequestForm { form, mut reservation }: RequestForm,
) -> Response {
    let started = Instant::now();
    let result = match form {
        Ok(form) => api::label_names(&q, &tenant, &form, &mut reservation).await,
        Err(e) => Err(e),
    };
    finish(&q, Endpoint::Labels, started, result, api::error_response)
}

async fn label_values(
    State(q): State<Arc<Querier>>,
    Extension(tenant): Extension<TenantId>,
    Path(name): Path<String>,
    RequestForm { form, mut reservation }: RequestForm,
) -> Response {
    let started = Instant::now();
    let result = match form {
        Ok(form) => api::label_values(&q, &tenant, &name, &form, &mut reservation).await,
        Err(e) => Err(e),
    };
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
    RequestForm { form, mut reservation }: RequestForm,
) -> Response {
    let (querier, tenant) = (&*q, &tenant);
    promql(querier, Endpoint::Query, |started| async move {
        promql_api::query(querier, tenant, &form?, &mut reservation, started).await
    })
    .await
}

async fn query_range(
    State(q): State<Arc<Querier>>,
    Extension(tenant): Extension<TenantId>,
    RequestForm { form, mut reservation }: RequestForm,
) -> Response {
    let (querier, tenant) = (&*q, &tenant);
    promql(querier, Endpoint::QueryRange, |started| async move {
        promql_api::query_range(querier, tenant, &form?, &mut reservation, started).await
    })
    .await
}

async fn format_query(State(q): State<Arc<Querier>>, RequestForm { form, mut reservation }: RequestForm) -> Response {
    let started = Instant::now();
    let result = match form {
        Ok(form) => promql_api::format_query(&q, &form, &mut reservation).await,
        Err(e) => Err(e),
    };
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
    RequestForm {
        form,
        reservation: _held,
    }: RequestForm,
) -> Response {
    let started = Instant::now();
    let result = match form {
        Ok(form) => promql_api::metadata(&q, &tenant, &form).await,
        Err(e) => Err(e),
    };
    finish(&q, Endpoint::Metadata, started, result, api::error_response)
}

async fn query_exemplars(
    State(q): State<Arc<Querier>>,
    Extension(tenant): Extension<TenantId>,
    RequestForm { form, mut reservation }: RequestForm,
) -> Response {
    let started = Instant::now();
    let result = match form {
        Ok(form) => promql_api::query_exemplars(&q, &tenant, &form, &mut reservation).await,
        Err(e) => Err(e),
    };
    finish(&q, Endpoint::QueryExemplars, started, result, api::error_response)
}
