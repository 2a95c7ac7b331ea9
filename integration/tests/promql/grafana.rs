//! The calls Grafana's Prometheus data source makes, in the form it makes them: label and series lookups as
//! GETs with `start`/`end`, queries as POSTs with a form body, steps as Grafana writes them (`15`, `30s`),
//! `start`/`end` aligned to the step. Answers that depend on the data must equal Prometheus'; buildinfo,
//! metadata and exemplars, which depend on the server, must have the shape Grafana reads.

use crate::api::{Answer, Api, secs};
use crate::compare::{compare, show};
use crate::data::Dataset;
use serde_json::Value;
use std::collections::BTreeSet;

/// Lookups whose `data` is a list: of names, of values, or of label sets.
const LOOKUPS: &[(&str, &[(&str, &str)])] = &[
    ("/api/v1/labels", &[]),
    ("/api/v1/label/__name__/values", &[]),
    ("/api/v1/label/job/values", &[]),
    ("/api/v1/label/instance/values", &[("match[]", r#"up{job="api"}"#)]),
    ("/api/v1/labels", &[("match[]", "request_duration_seconds_bucket")]),
    (
        "/api/v1/series",
        &[("match[]", r#"{__name__="http_requests_total",job="web"}"#)],
    ),
    ("/api/v1/series", &[("match[]", "up"), ("match[]", "flaky_gauge")]),
    (
        "/api/v1/series",
        &[("match[]", r#"{__name__=~"node_cpu.*",mode!="idle",cpu="1"}"#)],
    ),
];

/// Dashboard panels: expression and Grafana's step for it.
const PANELS: &[(&str, &str)] = &[
    ("sum by (job) (rate(http_requests_total[1m]))", "15"),
    (
        "histogram_quantile(0.95, sum by (le, job) (rate(request_duration_seconds_bucket[2m])))",
        "30s",
    ),
    (r#"avg_over_time(temperature_celsius{room="a"}[5m])"#, "60"),
    ("up", "15"),
    (
        r#"topk(5, sum by (instance) (rate(node_cpu_seconds_total{mode!="idle"}[2m])))"#,
        "30",
    ),
    ("flaky_gauge", "15s"),
    // A panel whose job is gone: no series.
    (r#"sum(rate(http_requests_total{job="missing"}[1m]))"#, "15"),
];

/// Instant queries: Grafana's health check (`1+1`), table panels and the metric browser's count.
const INSTANT: &[&str] = &[
    "1+1",
    "sum by (job) (up)",
    r#"count(count by (__name__) ({__name__=~".+"}))"#,
    "sort_desc(sum by (instance) (increase(http_requests_total[10m])))",
];

/// Prettified by `/api/v1/format_query`.
const FORMAT: &[&str] = &[
    "sum(rate(x[5m]))by(job)",
    "a+on(b)group_left(c)d",
    r#"histogram_quantile(0.9,sum by(le)(rate(h_bucket{a="b"}[1m])))"#,
];

/// Replays the session on both servers and asserts heddle answers as Prometheus does.
pub async fn assert_session_agrees(oracle: &Api, candidate: &Api, data: &Dataset) {
    let mut failures = Vec::new();
    // Grafana's "last 2 hours", which holds all the data.
    let (from, to) = (data.start_ms - 20 * 60_000, data.end_ms + 60_000);
    for (path, extra) in LOOKUPS {
        let mut params: Vec<(&str, String)> = extra.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        params.extend([("start", secs(from)), ("end", secs(to))]);
        let what = format!("GET {path} {extra:?}");
        if let Err(e) = same_list(&oracle.get(path, &params).await, &candidate.get(path, &params).await) {
            failures.push(format!("{what}: {e}"));
        }
    }
    for (query, step) in PANELS {
        let step_ms = step_ms(step);
        let params = [
            ("query", (*query).to_owned()),
            ("start", secs(from.div_euclid(step_ms) * step_ms)),
            ("end", secs(to.div_euclid(step_ms) * step_ms)),
            ("step", (*step).to_owned()),
        ];
        let path = "/api/v1/query_range";
        let (want, got) = (
            oracle.post_form(path, &params).await,
            candidate.post_form(path, &params).await,
        );
        if let Some(e) = compare(&want, &got, false) {
            failures.push(format!("POST {path} {query} step {step}: {e}"));
        }
    }
    for query in INSTANT {
        let params = [("query", (*query).to_owned()), ("time", secs(data.end_ms))];
        let path = "/api/v1/query";
        let (want, got) = (
            oracle.post_form(path, &params).await,
            candidate.post_form(path, &params).await,
        );
        if let Some(e) = compare(&want, &got, query.starts_with("sort")) {
            failures.push(format!("POST {path} {query}: {e}"));
        }
    }
    for query in FORMAT {
        let params = [("query", (*query).to_owned())];
        let path = "/api/v1/format_query";
        let (want, got) = (oracle.get(path, &params).await, candidate.get(path, &params).await);
        if let Some(e) = same_data(&want, &got) {
            failures.push(format!("GET {path} {query}: {e}"));
        }
    }
    failures.extend(shape_failures(candidate, data).await);
    assert!(
        failures.is_empty(),
        "{} of Grafana's calls were answered differently by {}:\n{}",
        failures.len(),
        candidate.base,
        failures.join("\n")
    );
}

/// `"15"` (seconds) or a duration such as `"30s"`, `"1m"` in milliseconds.
fn step_ms(step: &str) -> i64 {
    let (number, unit) = step.split_at(step.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(step.len()));
    let n: i64 = number.parse().expect("step number");
    n * match unit {
        "" | "s" => 1000,
        "m" => 60_000,
        other => panic!("step unit {other}"),
    }
}

fn same_data(want: &Answer, got: &Answer) -> Option<String> {
    match (want, got) {
        (Answer::Data(w), Answer::Data(g)) if w == g => None,
        (Answer::Data(w), Answer::Data(g)) => Some(format!("want {w}, got {g}")),
        _ => compare(want, got, false),
    }
}

/// Lists compared as sets: of strings (names, values) or of label sets (series).
fn same_list(want: &Answer, got: &Answer) -> Result<(), String> {
    let (Answer::Data(w), Answer::Data(g)) = (want, got) else {
        return compare(want, got, false).map_or(Ok(()), Err);
    };
    let set = |v: &Value| -> Result<BTreeSet<String>, String> {
        let items = v.as_array().ok_or_else(|| format!("not a list: {v}"))?;
        Ok(items
            .iter()
            .map(|i| match i {
                Value::String(s) => s.clone(),
                Value::Object(o) => show(
                    &o.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                        .collect(),
                ),
                other => other.to_string(),
            })
            .collect())
    };
    let (w, g) = (set(w)?, set(g)?);
    if w == g {
        return Ok(());
    }
    Err(format!(
        "missing {:?}; unexpected {:?}",
        w.difference(&g).take(5).collect::<Vec<_>>(),
        g.difference(&w).take(5).collect::<Vec<_>>()
    ))
}

/// Buildinfo, metadata and exemplars must have the shape Grafana reads.
async fn shape_failures(candidate: &Api, data: &Dataset) -> Vec<String> {
    let mut failures = Vec::new();
    let mut check = |what: &str, answer: Answer, ok: &dyn Fn(&Value) -> bool| match answer {
        Answer::Data(d) if ok(&d) => {}
        Answer::Data(d) => failures.push(format!("{what}: unexpected shape {d}")),
        e => failures.push(format!("{what}: {}", e.describe())),
    };
    // Grafana reads `version` to decide which features the server has.
    let buildinfo = candidate.get("/api/v1/status/buildinfo", &[]).await;
    check("GET /api/v1/status/buildinfo", buildinfo, &|d| {
        d["version"].as_str().is_some_and(|v| !v.is_empty())
    });
    for params in [
        vec![],
        vec![("metric", "http_requests_total".to_owned()), ("limit", "1".to_owned())],
    ] {
        let metadata = candidate.get("/api/v1/metadata", &params).await;
        check("GET /api/v1/metadata", metadata, &|d| {
            d.as_object().is_some_and(|m| {
                m.values().all(|entries| {
                    entries.as_array().is_some_and(|es| {
                        es.iter()
                            .all(|e| ["type", "help", "unit"].iter().all(|k| e[k].is_string()))
                    })
                })
            })
        });
    }
    let params = [
        ("query", "request_duration_seconds_bucket".to_owned()),
        ("start", secs(data.start_ms)),
        ("end", secs(data.end_ms)),
    ];
    let exemplars = candidate.get("/api/v1/query_exemplars", &params).await;
    check("GET /api/v1/query_exemplars", exemplars, &|d| d.is_array());
    failures
}
