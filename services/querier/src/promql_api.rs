//! The Prometheus HTTP query API: `query`, `query_range`, `format_query`, `status/buildinfo`, `metadata` and
//! `query_exemplars`, with Prometheus' parameters, checks and messages (its `web/api/v1` of 2.42).
//!
//! Parameters are checked in Prometheus' order so a request with several faults gets the same message; the
//! query itself runs in [`crate::engine`], and its answer is written by [`crate::promql_json`].

use crate::api::json_response;
use crate::budget;
use crate::error::QuerierError;
use crate::matchers::MatcherCache;
use crate::params::{Form, MAX_TIME_MS, MIN_TIME_MS, parse_time};
use crate::promql_json::query_body;
use crate::querier::{MetadataRequest, Querier};
use axum::http::StatusCode;
use axum::response::Response;
use heddle_model::TenantId;
use heddle_model::{Clock, SystemClock};
use heddle_promql::{PromqlError, Query, QueryOptions, QueryTime};
use heddle_server::Reservation;
use serde_json::json;
use std::time::Duration;

/// Most points a range query may return per series (Prometheus' own safety limit).
const MAX_POINTS_PER_SERIES: i64 = 11_000;

/// `GET|POST /prometheus/api/v1/query`: `query`, `time` (default now), `timeout`, `stats`.
#[tracing::instrument(skip_all, fields(tenant = %tenant))]
pub(crate) async fn query(
    q: &Querier,
    tenant: &TenantId,
    form: &Form,
    r: &mut Reservation,
    started: tokio::time::Instant,
) -> Result<Response, QuerierError> {
    let now = SystemClock.now_ms();
    let time = match form.get("time") {
        None | Some("") => now,
        Some(v) => parse_time(v).ok_or_else(|| {
            bad_param(
                "time",
                &format!("invalid time value for 'time': cannot parse {v:?} to a valid timestamp"),
            )
        })?,
    };
    let timeout = timeout(form)?;
    let text = form.get("query").unwrap_or_default();
    reserve_parse(q, r, text).await?;
    let answer = q
        .run_query(tenant, text, QueryTime::Instant(time), timeout, started, now)
        .await?;
    Ok(json_body(query_body(&answer, wants_stats(form))))
}

/// `GET|POST /prometheus/api/v1/query_range`: `query`, `start`, `end`, `step`, `timeout`, `stats`.
#[tracing::instrument(skip_all, fields(tenant = %tenant))]
pub(crate) async fn query_range(
    q: &Querier,
    tenant: &TenantId,
    form: &Form,
    r: &mut Reservation,
    started: tokio::time::Instant,
) -> Result<Response, QuerierError> {
    let start = required_time(form, "start")?;
    let end = required_time(form, "end")?;
    if end < start {
        return Err(bad_data("end timestamp must not be before start time"));
    }
    let step_text = form.get("step").unwrap_or_default();
    let step = parse_duration_ms(step_text)
        .ok_or_else(|| bad_param("step", &format!("cannot parse {step_text:?} to a valid duration")))?;
    if step <= 0 {
        return Err(bad_data(
            "zero or negative query resolution step widths are not accepted. Try a positive integer",
        ));
    }
    // Unsigned: `end - start` passes i64 between the extreme times `parse_time` accepts.
    if end.abs_diff(start) / step.unsigned_abs() > MAX_POINTS_PER_SERIES.unsigned_abs() {
        return Err(bad_data(
            "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution \
             (?step=XX)",
        ));
    }
    let timeout = timeout(form)?;
    let text = form.get("query").unwrap_or_default();
    reserve_parse(q, r, text).await?;
    let answer = q
        .run_query(
            tenant,
            text,
            QueryTime::Range { start, end, step },
            timeout,
            started,
            SystemClock.now_ms(),
        )
        .await?;
    Ok(json_body(query_body(&answer, wants_stats(form))))
}

/// `GET|POST /prometheus/api/v1/format_query`: the query in Prometheus' canonical layout. Parsing compiles the
/// query's regular expressions, so their length is checked first, as for a query.
pub(crate) async fn format_query(q: &Querier, form: &Form, r: &mut Reservation) -> Result<Response, QuerierError> {
    let text = form.get("query").unwrap_or_default();
    reserve_parse(q, r, text).await?;
    // The formatted text is about as long as the query.
    budget::grow(r, text.len().saturating_mul(2), "the formatted PromQL query")?;
    let format = |text: &str| heddle_promql::format_query(text).map_err(|e| bad_param("query", &e.to_string()));
    let formatted = if text.len() < budget::LARGE_INPUT_BYTES {
        format(text)?
    } else {
        let text = text.to_owned();
        budget::off_runtime(move || format(&text)).await??
    };
    Ok(success(json!(formatted)))
}

/// Refuses the PromQL query `text` if a regular expression of it is too long, and reserves in `r` what
/// parsing it may allocate ([`budget::promql_parse_bytes`]); a long text is scanned off the async runtime.
async fn reserve_parse(q: &Querier, r: &mut Reservation, text: &str) -> Result<(), QuerierError> {
    let cache = MatcherCache::new(q.config().max_regex_length, Some(q.metrics.clone()));
    let scan = move |text: &str| {
        cache.check_query(text)?;
        Ok::<_, QuerierError>(budget::promql_parse_bytes(text))
    };
    let bytes = if text.len() < budget::LARGE_INPUT_BYTES {
        scan(text)?
    } else {
        let text = text.to_owned();
        budget::off_runtime(move || scan(&text)).await??
    };
    budget::grow(r, bytes, "parsing the PromQL query")
}

/// Parses the PromQL query `text` for evaluation at `time`, as every PromQL entry point does: the length of its
/// regular expressions checked on the text before anything compiles one (`querier.max_regex_length`), its
/// selectors' matchers built through one cache (each distinct matcher compiled once), and a large query
/// parsed off the async runtime. What parsing allocates is the caller's to reserve ([`reserve_parse`]).
pub(crate) async fn parse_query(
    q: &Querier,
    text: &str,
    time: QueryTime,
    opts: &QueryOptions,
) -> Result<Query, QuerierError> {
    let mut cache = MatcherCache::new(q.config().max_regex_length, Some(q.metrics.clone()));
    let mut parse = move |text: &str, opts: &QueryOptions| {
        cache.check_query(text)?;
        Query::with_matchers(text, time, opts, &mut cache).map_err(QuerierError::Promql)
    };
    if text.len() < budget::LARGE_INPUT_BYTES {
        return parse(text, opts);
    }
    let (text, opts) = (text.to_owned(), opts.clone());
    budget::off_runtime(move || parse(&text, &opts)).await?
}

/// `GET /prometheus/api/v1/status/buildinfo`: Prometheus' keys with Heddle's facts. Heddle is not built with
/// Go, so `goVersion` is empty and the compiler is in `rustVersion`; `features` says, as Mimir's answer does,
/// which of Mimir's optional APIs are served (none: Heddle has no ruler or alertmanager), which is how
/// Grafana decides what to offer.
pub(crate) fn build_info(q: &Querier) -> Response {
    let b = &q.build;
    success(json!({
        "application": "Heddle",
        "version": b.version,
        "revision": b.revision,
        "branch": "",
        "buildUser": "",
        "buildDate": "",
        "goVersion": "",
        "rustVersion": b.rustc,
        "features": {
            "ruler_config_api": "false",
            "alertmanager_config_api": "false",
            "query_sharding": "false",
            "federated_rules": "false",
        },
    }))
}

/// `GET|POST /prometheus/api/v1/metadata`: `limit` (families; negative: all, 0: none),
/// `limit_per_metric` (entries per family; 0 or negative: all) and `metric` (one family), read as Prometheus
/// 2.42 reads them. The answer maps each family to its entries, `{"type", "help", "unit"}`.
#[tracing::instrument(skip_all, fields(tenant = %tenant))]
pub(crate) async fn metadata(q: &Querier, tenant: &TenantId, form: &Form) -> Result<Response, QuerierError> {
    let number = |key: &str| -> Result<Option<i64>, QuerierError> {
        match form.get(key).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(v) => v
                .parse::<i32>()
                .map(|n| Some(i64::from(n)))
                .map_err(|_| bad_data(&format!("{key} must be a number"))),
        }
    };
    let limit = number("limit")?.and_then(|n| usize::try_from(n).ok());
    let limit_per_metric = number("limit_per_metric")?
        .filter(|&n| n > 0)
        .and_then(|n| usize::try_from(n).ok());
    let request = MetadataRequest {
        limit,
        limit_per_metric,
        metric: form.get("metric").filter(|m| !m.is_empty()).map(str::to_owned),
    };
    let families = q.metadata(tenant, &request).await?;
    let data: serde_json::Map<String, serde_json::Value> = families
        .into_iter()
        .map(|(family, entries)| {
            let entries = entries
                .into_iter()
                .map(|e| json!({ "type": e.kind.as_str(), "help": e.help, "unit": e.unit }))
                .collect();
            (family, serde_json::Value::Array(entries))
        })
        .collect();
    Ok(success(serde_json::Value::Object(data)))
}

/// `GET|POST /prometheus/api/v1/query_exemplars`: `query`, `start`, `end`, checked as Prometheus checks
/// them. The query's vector selectors (Prometheus' `parser.ExtractSelectors`) pick the series; the answer is
/// Prometheus' `[{seriesLabels, exemplars: [{labels, value, timestamp}]}]`, series in label order.
#[tracing::instrument(skip_all, fields(tenant = %tenant))]
pub(crate) async fn query_exemplars(
    q: &Querier,
    tenant: &TenantId,
    form: &Form,
    r: &mut Reservation,
) -> Result<Response, QuerierError> {
    let start = optional_time(form, "start", MIN_TIME_MS)?;
    let end = optional_time(form, "end", MAX_TIME_MS)?;
    if end < start {
        return Err(bad_data("end timestamp must not be before start timestamp"));
    }
    let text = form.get("query").unwrap_or_default();
    reserve_parse(q, r, text).await?;
    let query = parse_query(q, text, QueryTime::Instant(end), &QueryOptions::default()).await?;
    let selectors: Vec<Vec<heddle_model::Matcher>> = query.selections().iter().map(|s| s.matchers.clone()).collect();
    let found = q.exemplars(tenant, start, end, &selectors).await?;
    let total: usize = found.values().map(Vec::len).sum();
    // Work in proportion to the exemplars found: off the async runtime when they are many.
    let data = if total < EXEMPLARS_ON_RUNTIME {
        exemplars_json(found)
    } else {
        budget::off_runtime(move || exemplars_json(found)).await?
    };
    Ok(success(data))
}

/// Exemplars from which on their answer is written off the async runtime.
const EXEMPLARS_ON_RUNTIME: usize = 4096;

/// Prometheus' answer to `query_exemplars`: `[{seriesLabels, exemplars: [{labels, value, timestamp}]}]`.
fn exemplars_json(
    found: std::collections::BTreeMap<heddle_model::Labels, Vec<crate::querier::ExemplarSample>>,
) -> serde_json::Value {
    let labels_json = |labels: &mut dyn Iterator<Item = (&str, &str)>| -> serde_json::Value {
        serde_json::Value::Object(labels.map(|(n, v)| (n.to_owned(), json!(v))).collect())
    };
    let data: Vec<serde_json::Value> = found
        .iter()
        .map(|(series, exemplars)| {
            let exemplars: Vec<serde_json::Value> = exemplars
                .iter()
                .map(|e| {
                    json!({
                        "labels": labels_json(&mut e.labels.iter().map(|l| (l.name.as_str(), l.value.as_str()))),
                        "value": heddle_promql::go_format_float(e.value),
                        "timestamp": e.t as f64 / 1000.0,
                    })
                })
                .collect();
            json!({
                "seriesLabels": labels_json(&mut series.iter().map(|l| (l.name, l.value))),
                "exemplars": exemplars,
            })
        })
        .collect();
    serde_json::Value::Array(data)
}

fn required_time(form: &Form, key: &str) -> Result<i64, QuerierError> {
    let v = form.get(key).unwrap_or_default();
    parse_time(v).ok_or_else(|| bad_param(key, &format!("cannot parse {v:?} to a valid timestamp")))
}

fn optional_time(form: &Form, key: &str, default: i64) -> Result<i64, QuerierError> {
    match form.get(key) {
        None | Some("") => Ok(default),
        Some(v) => parse_time(v).ok_or_else(|| {
            bad_param(
                key,
                &format!("invalid time value for '{key}': cannot parse {v:?} to a valid timestamp"),
            )
        }),
    }
}

/// The request's `timeout`, if given. Zero or negative times out at once, as a Go context would.
fn timeout(form: &Form) -> Result<Option<Duration>, QuerierError> {
    match form.get("timeout") {
        None | Some("") => Ok(None),
        Some(v) => {
            let ms = parse_duration_ms(v)
                .ok_or_else(|| bad_param("timeout", &format!("cannot parse {v:?} to a valid duration")))?;
            Ok(Some(Duration::from_millis(ms.max(0).unsigned_abs())))
        }
    }
}

/// Whether the request asked for the `stats` block (any non-empty `stats`, as Prometheus).
fn wants_stats(form: &Form) -> bool {
    form.get("stats").is_some_and(|v| !v.is_empty())
}

/// A duration parameter in milliseconds, as Prometheus reads one: float seconds (`30`, `1.5`, `-1`) or a
/// duration with units (`30s`, `1m`, `1h30m`). Sub-millisecond parts are dropped, as the engine's step is
/// whole milliseconds.
pub(crate) fn parse_duration_ms(s: &str) -> Option<i64> {
    if let Ok(secs) = s.parse::<f64>() {
        let ms = (secs * 1000.0).trunc();
        // Go's time.Duration is int64 nanoseconds: refuse what it could not hold.
        return (secs.is_finite() && (secs * 1e9).abs() < i64::MAX as f64).then_some(ms as i64);
    }
    if s.trim() != s {
        return None;
    }
    let d = heddle_config::parse_duration(s).ok()?;
    i64::try_from(d.as_millis())
        .ok()
        .filter(|_| d.as_nanos() < i64::MAX as u128)
}

/// Prometheus' `invalidParamError`: `invalid parameter "<name>": <reason>`.
fn bad_param(name: &str, reason: &str) -> QuerierError {
    bad_data(&format!("invalid parameter {name:?}: {reason}"))
}

fn bad_data(msg: &str) -> QuerierError {
    QuerierError::Promql(PromqlError::BadData(msg.to_owned()))
}

fn success(data: serde_json::Value) -> Response {
    json_response(StatusCode::OK, &json!({ "status": "success", "data": data }))
}

fn json_body(body: String) -> Response {
    crate::api::json_bytes_response(StatusCode::OK, body.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_as_prometheus_reads_them() {
        let cases: &[(&str, &str, Option<i64>)] = &[
            ("units", "30s", Some(30_000)),
            ("minutes", "1m", Some(60_000)),
            ("compound", "1h30m", Some(5_400_000)),
            ("days", "1d", Some(86_400_000)),
            ("float seconds", "15", Some(15_000)),
            ("fractional seconds", "0.5", Some(500)),
            ("negative seconds", "-1", Some(-1_000)),
            ("below a millisecond", "0.0001", Some(0)),
            ("milliseconds", "250ms", Some(250)),
            ("empty", "", None),
            ("garbage", "soon", None),
            ("no unit after number", "1x", None),
            ("overflows int64 nanoseconds", "1e10", None),
            ("nan", "NaN", None),
        ];
        for (name, input, want) in cases {
            assert_eq!(parse_duration_ms(input), *want, "case {name} ({input:?})");
        }
    }
}
