//! The Prometheus JSON metadata API: `series`, `labels` and `label/{name}/values`.
//!
//! Answers use Prometheus' envelope: `{"status":"success","data":...}` (plus `warnings` when a `limit`
//! truncated the result), and `{"status":"error","errorType":"bad_data","error":"..."}` on failure.

use crate::budget;
use crate::error::QuerierError;
use crate::matchers::MatcherCache;
use crate::params::Form;
use crate::querier::Querier;
use crate::selector::parse_selector_with;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use heddle_limits::NameValidationScheme;
use heddle_model::{Labels, Matcher, TenantId};
use heddle_server::Reservation;
use serde_json::{Map, Value, json};
use std::mem::size_of;

/// The selectors of every `match[]` parameter, their regexes bounded and compiled once for the request, what
/// they take reserved in `r` first.
///
/// Parsing is CPU work in proportion to the text: a large form is parsed off the async runtime, from a copy
/// of its selectors (reserved too).
async fn selectors(q: &Querier, form: &Form, r: &mut Reservation) -> Result<Vec<Vec<Matcher>>, QuerierError> {
    let values = form.all("match[]");
    let text: usize = values.iter().map(|v| v.len()).sum();
    let mut cache = MatcherCache::new(q.config().max_regex_length, Some(q.metrics.clone()));
    // Long regexes refused, and what compiling each one takes counted, before anything compiles one.
    let mut bound = budget::selectors_bytes(values.iter().copied());
    for v in &values {
        bound = bound.saturating_add(cache.check_query(v)?);
    }
    if text < budget::LARGE_INPUT_BYTES {
        budget::grow(r, bound, "the request's match[] selectors")?;
        return values.into_iter().map(|s| parse_selector_with(s, &mut cache)).collect();
    }
    let copy = budget::vec_bytes(values.len(), size_of::<String>())
        .saturating_add(text)
        .saturating_add(values.len().saturating_mul(budget::ALLOCATION_HEADROOM));
    budget::grow(r, bound.saturating_add(copy), "the request's match[] selectors")?;
    let owned: Vec<String> = values.into_iter().map(str::to_owned).collect();
    budget::off_runtime(move || owned.iter().map(|s| parse_selector_with(s, &mut cache)).collect()).await?
}

/// `GET|POST /prometheus/api/v1/series`.
#[tracing::instrument(skip_all, fields(tenant = %tenant))]
pub(crate) async fn series(
    q: &Querier,
    tenant: &TenantId,
    form: &Form,
    r: &mut Reservation,
) -> Result<Response, QuerierError> {
    let selectors = selectors(q, form, r).await?;
    if selectors.is_empty() {
        return Err(QuerierError::BadData("no match[] parameter provided".into()));
    }
    let (start, end) = form.time_range()?;
    let limit = form.limit()?;
    let mut all = q.series(tenant, start, end, &selectors).await?;
    let truncated = truncate(&mut all, limit);
    q.metrics.returned(crate::metrics::Endpoint::Series, all.len(), 0);
    let data: Vec<Value> = all.iter().map(labels_json).collect();
    Ok(success(Value::Array(data), truncated))
}

/// `GET|POST /prometheus/api/v1/labels`.
#[tracing::instrument(skip_all, fields(tenant = %tenant))]
pub(crate) async fn label_names(
    q: &Querier,
    tenant: &TenantId,
    form: &Form,
    r: &mut Reservation,
) -> Result<Response, QuerierError> {
    let selectors = selectors(q, form, r).await?;
    let (start, end) = form.time_range()?;
    let limit = form.limit()?;
    let mut names = q.label_names(tenant, start, end, &selectors).await?;
    let truncated = truncate(&mut names, limit);
    Ok(success(json!(names), truncated))
}

/// `GET /prometheus/api/v1/label/{name}/values`. The name is checked by the tenant's name validation
/// scheme; under `utf8`, a name that cannot be written in a URL path as it is may be sent in Prometheus 3's
/// escaped form (`U__service_2e_name` for `service.name`).
#[tracing::instrument(skip_all, fields(tenant = %tenant))]
pub(crate) async fn label_values(
    q: &Querier,
    tenant: &TenantId,
    name: &str,
    form: &Form,
    r: &mut Reservation,
) -> Result<Response, QuerierError> {
    let scheme = q.overrides.get(tenant.as_str()).name_validation_scheme;
    let unescaped;
    let name = match scheme {
        NameValidationScheme::Utf8 => {
            unescaped = unescape_name(name);
            unescaped.as_str()
        }
        NameValidationScheme::Legacy => name,
    };
    if !scheme.is_valid_label_name(name) {
        return Err(QuerierError::BadData(format!("invalid label name: {name:?}")));
    }
    let selectors = selectors(q, form, r).await?;
    let (start, end) = form.time_range()?;
    let limit = form.limit()?;
    let mut values = q.label_values(tenant, name, start, end, &selectors).await?;
    let truncated = truncate(&mut values, limit);
    Ok(success(json!(values), truncated))
}

/// Prometheus' value-encoding escape undone (`model.UnescapeName`): after a `U__` prefix, `__` is `_` and
/// `_<hex>_` the character of that code point; anything else stands for itself. A name without the prefix,
/// or not well formed, is returned as it is.
pub(crate) fn unescape_name(name: &str) -> String {
    let Some(escaped) = name.strip_prefix("U__") else {
        return name.to_owned();
    };
    let mut out = String::with_capacity(escaped.len());
    let mut chars = escaped.chars();
    while let Some(c) = chars.next() {
        if c != '_' {
            out.push(c);
            continue;
        }
        let mut code: u32 = 0;
        let mut digits = 0;
        loop {
            match chars.next() {
                Some('_') if digits == 0 => {
                    out.push('_');
                    break;
                }
                Some('_') => match char::from_u32(code) {
                    Some(decoded) => {
                        out.push(decoded);
                        break;
                    }
                    None => return name.to_owned(),
                },
                // More than six hex digits is past the last code point.
                Some(h) if digits < 6 && h.is_ascii_hexdigit() => {
                    code = code * 16 + h.to_digit(16).unwrap_or(0);
                    digits += 1;
                }
                _ => return name.to_owned(),
            }
        }
    }
    out
}

fn truncate<T>(v: &mut Vec<T>, limit: usize) -> bool {
    if limit > 0 && v.len() > limit {
        v.truncate(limit);
        true
    } else {
        false
    }
}

/// A label set as Prometheus' API prints it: an object in label-name order.
fn labels_json(labels: &Labels) -> Value {
    let mut map = Map::new();
    for l in labels.iter() {
        map.insert(l.name.to_owned(), Value::String(l.value.to_owned()));
    }
    Value::Object(map)
}

fn success(data: Value, truncated: bool) -> Response {
    let mut body = json!({ "status": "success", "data": data });
    if truncated {
        body["warnings"] = json!(["results truncated due to limit"]);
    }
    json_response(StatusCode::OK, &body)
}

/// The JSON error envelope with the error's status.
pub(crate) fn error_response(err: &QuerierError) -> Response {
    let status = err.status();
    let body = json!({ "status": "error", "errorType": err.error_type(), "error": err.to_string() });
    json_response(status, &body)
}

/// The error body of remote read: plain text, as Prometheus' `http.Error`.
pub(crate) fn text_error_response(err: &QuerierError) -> Response {
    (err.status(), err.to_string()).into_response()
}

/// A JSON body with its content type (axum's `Json` needs a feature the workspace does not enable).
pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    json_bytes_response(status, serde_json::to_vec(body).unwrap_or_default())
}

/// Encoded JSON `bytes` with their content type.
pub(crate) fn json_bytes_response(status: StatusCode, bytes: Vec<u8>) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        bytes,
    )
        .into_response()
}
