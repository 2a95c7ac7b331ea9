//! End-to-end tests of the PromQL HTTP API: requests through the router, data from fake ingesters holding
//! real XOR chunks, answers read back as a client reads them.

use crate::tests::{Answer, WithSamples, get, hung, json, send};
use crate::{Querier, QuerierConfig, router};
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use heddle_limits::{Limits, Overrides};
use heddle_model::{Sample, TenantId};
use heddle_proto::ingester::{
    ExemplarQueryRequest, ExemplarQueryResponse, LabelNamesRequest, LabelNamesResponse, LabelValuesRequest,
    LabelValuesResponse, MetricsMetadataRequest, MetricsMetadataResponse, PushResponse, QueryRequest, SeriesRequest,
    SeriesResponse,
};
use heddle_proto::prometheus::MetricMetadata;
use heddle_proto::testing::FakeIngester;
use heddle_proto::{IngesterClient, QueryStream};
use heddle_ring::FixedReplicas;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Request parameters, in order.
type Params<'a> = &'a [(&'a str, &'a str)];

/// Where the test data starts: 2023-11-14T22:13:20Z.
const T0: i64 = 1_700_000_000_000;
/// Seconds of `T0`, as the API spells times.
const T0_S: i64 = T0 / 1000;

struct Api {
    app: axum::Router,
    registry: Registry,
}

fn api(cfg: QuerierConfig, limits: Limits, ingesters: Vec<Arc<dyn IngesterClient>>) -> Api {
    let mut registry = Registry::default();
    let replicas = ingesters
        .into_iter()
        .enumerate()
        .map(|(i, c)| (format!("ingester-{i}"), c))
        .collect();
    let q = Querier::new(cfg, Arc::new(FixedReplicas::new(replicas)), &mut registry)
        .with_overrides(Arc::new(Overrides::new(limits)));
    Api {
        app: router(Arc::new(q)),
        registry,
    }
}

/// Counters scraped every 15 s for 10 minutes from `T0`: `http_requests_total` of instances `a` and `b` (job
/// `api`, +10 and +20 per scrape) and `c` (job `db`, +5).
fn counters() -> FakeIngester {
    let counter = |per_scrape: f64| -> Vec<Sample> {
        (0..=40)
            .map(|i| Sample::new(T0 + i * 15_000, i as f64 * per_scrape))
            .collect()
    };
    FakeIngester::new()
        .with_samples(
            &[("__name__", "http_requests_total"), ("instance", "a"), ("job", "api")],
            &counter(10.0),
            120,
        )
        .with_samples(
            &[("__name__", "http_requests_total"), ("instance", "b"), ("job", "api")],
            &counter(20.0),
            120,
        )
        .with_samples(
            &[("__name__", "http_requests_total"), ("instance", "c"), ("job", "db")],
            &counter(5.0),
            120,
        )
}

fn counters_api(cfg: QuerierConfig, limits: Limits) -> Api {
    api(cfg, limits, vec![Arc::new(counters())])
}

/// Sends `req` as tenant `team-a`.
async fn call(app: &axum::Router, req: Request<Body>) -> Answer {
    call_as(app, "team-a", req).await
}

async fn call_as(app: &axum::Router, tenant: &str, mut req: Request<Body>) -> Answer {
    req.extensions_mut().insert(TenantId::new(tenant).unwrap());
    send(app, req).await
}

/// `GET <path>?<params>`, the parameters URL-encoded.
fn get_with(path: &str, params: &[(&str, &str)]) -> Request<Body> {
    get(&format!("{path}?{}", encode(params)))
}

/// `POST <path>` with the parameters as a form body.
fn post_with(path: &str, params: &[(&str, &str)]) -> Request<Body> {
    Request::post(path)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(encode(params)))
        .unwrap()
}

fn encode(params: &[(&str, &str)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(params)
        .finish()
}

fn ok_data(a: &Answer) -> Value {
    assert_eq!(a.status, StatusCode::OK, "body: {}", String::from_utf8_lossy(&a.body));
    let body = json(a);
    assert_eq!(body["status"], "success", "{body}");
    body["data"].clone()
}

fn secs(offset_s: i64) -> String {
    (T0_S + offset_s).to_string()
}

#[tokio::test]
async fn instant_query_rate_and_sum_by() {
    let a = counters_api(QuerierConfig::default(), Limits::default());
    let at = secs(600);
    let params = [
        ("query", "sum by (job) (rate(http_requests_total[1m]))"),
        ("time", at.as_str()),
    ];
    let data = ok_data(&call(&a.app, get_with("/prometheus/api/v1/query", &params)).await);
    assert_eq!(data["resultType"], "vector");
    let mut got: HashMap<String, f64> = HashMap::new();
    for item in data["result"].as_array().unwrap() {
        assert_eq!(
            item["metric"].as_object().unwrap().len(),
            1,
            "only `job` is kept: {item}"
        );
        assert_eq!(item["value"][0], json!(T0_S + 600), "{item}");
        let v: f64 = item["value"][1].as_str().unwrap().parse().unwrap();
        got.insert(item["metric"]["job"].as_str().unwrap().to_owned(), v);
    }
    // Over [540s, 600s]: a and b rise by 40 and 80, c by 20, with samples at both ends (no extrapolation).
    assert_eq!(got.len(), 2, "{got:?}");
    assert!((got["api"] - 2.0).abs() < 1e-12, "{got:?}");
    assert!((got["db"] - 20.0 / 60.0).abs() < 1e-12, "{got:?}");
}

#[tokio::test]
async fn instant_query_of_a_range_vector_is_a_matrix() {
    let a = counters_api(QuerierConfig::default(), Limits::default());
    let at = format!("{}.5", secs(600));
    let params = [("query", r#"http_requests_total{instance="a"}[1m]"#), ("time", &at)];
    let data = ok_data(&call(&a.app, get_with("/prometheus/api/v1/query", &params)).await);
    assert_eq!(
        data,
        json!({
            "resultType": "matrix",
            "result": [{
                "metric": {"__name__": "http_requests_total", "instance": "a", "job": "api"},
                "values": [
                    [T0_S + 555, "370"], [T0_S + 570, "380"], [T0_S + 585, "390"], [T0_S + 600, "400"]
                ]
            }]
        }),
        "the range is [t-1m, t] with t = 600.5s"
    );
}

#[tokio::test]
async fn range_queries_of_a_vector_and_a_scalar() {
    let a = counters_api(QuerierConfig::default(), Limits::default());
    let (start, end) = (secs(300), secs(600));
    let params = [
        ("query", "sum(http_requests_total)"),
        ("start", start.as_str()),
        ("end", end.as_str()),
        ("step", "1m"),
    ];
    let data = ok_data(&call(&a.app, get_with("/prometheus/api/v1/query_range", &params)).await);
    let want: Vec<Value> = (5..=10)
        .map(|m| json!([T0_S + m * 60, (m * 4 * 35).to_string()]))
        .collect();
    assert_eq!(
        data,
        json!({"resultType": "matrix", "result": [{"metric": {}, "values": want}]})
    );

    // A scalar over a range is a matrix of one series without labels; the step here is float seconds.
    let params = [
        ("query", "time() * 2"),
        ("start", "100"),
        ("end", "100.5"),
        ("step", "0.25"),
    ];
    let data = ok_data(&call(&a.app, get_with("/prometheus/api/v1/query_range", &params)).await);
    assert_eq!(
        data,
        json!({"resultType": "matrix", "result": [{"metric": {}, "values": [
            [100, "200"], [100.25, "200.5"], [100.5, "201"]
        ]}]})
    );
}

#[tokio::test]
async fn scalar_and_string_results() {
    let a = counters_api(QuerierConfig::default(), Limits::default());
    let cases = [
        (
            "scalar",
            "-1 / 0",
            json!({"resultType": "scalar", "result": [1.5, "-Inf"]}),
        ),
        ("nan", "0 / 0", json!({"resultType": "scalar", "result": [1.5, "NaN"]})),
        (
            "string",
            r#""hello""#,
            json!({"resultType": "string", "result": [1.5, "hello"]}),
        ),
    ];
    for (name, query, want) in cases {
        let params = [("query", query), ("time", "1.5")];
        let data = ok_data(&call(&a.app, get_with("/prometheus/api/v1/query", &params)).await);
        assert_eq!(data, want, "case {name}");
    }
}

#[tokio::test]
async fn post_form_bodies_answer_as_get() {
    let a = counters_api(QuerierConfig::default(), Limits::default());
    let (start, end) = (secs(0), secs(600));
    let cases: &[(&str, Vec<(&str, &str)>)] = &[
        (
            "/prometheus/api/v1/query",
            vec![("query", "http_requests_total"), ("time", end.as_str())],
        ),
        (
            "/prometheus/api/v1/query_range",
            vec![
                ("query", "rate(http_requests_total[2m])"),
                ("start", start.as_str()),
                ("end", end.as_str()),
                ("step", "30"),
            ],
        ),
    ];
    for (path, params) in cases {
        let by_get = ok_data(&call(&a.app, get_with(path, params)).await);
        let by_post = ok_data(&call(&a.app, post_with(path, params)).await);
        assert_eq!(by_get, by_post, "{path}");
        assert_eq!(by_get["result"].as_array().unwrap().len(), 3, "{path}: {by_get}");
    }
    // The query string and the body merge, as Prometheus' form parsing does.
    let req = Request::post(format!("/prometheus/api/v1/query?time={end}"))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from("query=count%28http_requests_total%29"))
        .unwrap();
    let data = ok_data(&call(&a.app, req).await);
    assert_eq!(data["result"][0]["value"], json!([T0_S + 600, "3"]));
}

/// A request's error body: status, `errorType` and `error`.
fn error_of(a: &Answer) -> (u16, String, String) {
    let body = json(a);
    assert_eq!(body["status"], "error", "{body}");
    (
        a.status.as_u16(),
        body["errorType"].as_str().unwrap().to_owned(),
        body["error"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn parameter_and_query_errors() {
    let a = counters_api(QuerierConfig::default(), Limits::default());
    let q = "/prometheus/api/v1/query";
    let r = "/prometheus/api/v1/query_range";
    let cases: &[(&str, &str, Params<'_>, u16, &str, &str)] = &[
        (
            "missing query",
            q,
            &[],
            400,
            "bad_data",
            "invalid parameter \"query\": ",
        ),
        (
            "unparsable query",
            q,
            &[("query", "sum(")],
            400,
            "bad_data",
            "invalid parameter \"query\": 1:1: parse error",
        ),
        (
            "bad time",
            q,
            &[("query", "1"), ("time", "yesterday")],
            400,
            "bad_data",
            "invalid parameter \"time\": invalid time value for 'time': cannot parse \"yesterday\" to a valid timestamp",
        ),
        (
            "bad timeout",
            q,
            &[("query", "1"), ("timeout", "soon")],
            400,
            "bad_data",
            "invalid parameter \"timeout\": cannot parse \"soon\" to a valid duration",
        ),
        (
            "missing start",
            r,
            &[("query", "1"), ("end", "10"), ("step", "1")],
            400,
            "bad_data",
            "invalid parameter \"start\": cannot parse \"\" to a valid timestamp",
        ),
        (
            "bad end",
            r,
            &[("query", "1"), ("start", "1"), ("end", "x"), ("step", "1")],
            400,
            "bad_data",
            "invalid parameter \"end\": cannot parse \"x\" to a valid timestamp",
        ),
        (
            "end before start",
            r,
            &[("query", "1"), ("start", "10"), ("end", "5"), ("step", "1")],
            400,
            "bad_data",
            "end timestamp must not be before start time",
        ),
        (
            "missing step",
            r,
            &[("query", "1"), ("start", "1"), ("end", "5")],
            400,
            "bad_data",
            "invalid parameter \"step\": cannot parse \"\" to a valid duration",
        ),
        (
            "zero step",
            r,
            &[("query", "1"), ("start", "1"), ("end", "5"), ("step", "0s")],
            400,
            "bad_data",
            "zero or negative query resolution step widths are not accepted. Try a positive integer",
        ),
        (
            "negative step",
            r,
            &[("query", "1"), ("start", "1"), ("end", "5"), ("step", "-1")],
            400,
            "bad_data",
            "zero or negative query resolution step widths are not accepted",
        ),
        (
            "too many points",
            r,
            &[("query", "1"), ("start", "0"), ("end", "11001"), ("step", "1")],
            400,
            "bad_data",
            "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)",
        ),
        (
            "range vector over a range",
            r,
            &[
                ("query", "http_requests_total[1m]"),
                ("start", "0"),
                ("end", "10"),
                ("step", "1"),
            ],
            400,
            "bad_data",
            "invalid parameter \"query\": invalid expression type \"range vector\" for range query",
        ),
        (
            "many-to-one matching without group_left",
            q,
            &[
                ("query", "http_requests_total + on(job) http_requests_total"),
                ("time", "1700000600"),
            ],
            422,
            "execution",
            "",
        ),
    ];
    for (name, path, params, status, kind, msg) in cases {
        for req in [get_with(path, params), post_with(path, params)] {
            let (got_status, got_kind, got_msg) = error_of(&call(&a.app, req).await);
            assert_eq!(
                (got_status, got_kind.as_str()),
                (*status, *kind),
                "case {name}: {got_msg}"
            );
            assert!(got_msg.starts_with(msg), "case {name}: {got_msg}");
        }
    }
    // 11,000 points is still allowed.
    let params = [("query", "1"), ("start", "0"), ("end", "11000"), ("step", "1")];
    ok_data(&call(&a.app, get_with(r, &params)).await);
}

#[tokio::test(start_paused = true)]
async fn timeouts_and_the_concurrency_limit() {
    let cfg = QuerierConfig {
        max_concurrent: 1,
        ..Default::default()
    };
    let frozen = Arc::new(hung());
    let a = api(cfg, Limits::default(), vec![frozen.clone()]);
    let params = [("query", "up"), ("time", "100"), ("timeout", "2s")];
    let (status, kind, msg) = error_of(&call(&a.app, get_with("/prometheus/api/v1/query", &params)).await);
    assert_eq!((status, kind.as_str()), (503, "timeout"), "{msg}");
    assert!(msg.contains("query timed out after 2000ms (tenant=team-a)"), "{msg}");

    // A query holds the only slot (its ingester never answers); the next one waits, and the wait counts
    // toward its timeout.
    let mut req = get_with("/prometheus/api/v1/query", &[("query", "up"), ("time", "100")]);
    req.extensions_mut().insert(TenantId::new("team-a").unwrap());
    let holder = tokio::spawn(tower::ServiceExt::oneshot(a.app.clone(), req));
    for _ in 0..100 {
        if frozen.calls().len() == 2 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(frozen.calls().len(), 2, "the first query reached the ingester");
    let params = [("query", "1"), ("time", "100"), ("timeout", "1s")];
    let (status, kind, msg) = error_of(&call(&a.app, get_with("/prometheus/api/v1/query", &params)).await);
    assert_eq!(
        (status, kind.as_str()),
        (503, "timeout"),
        "a query needing no data waits too: {msg}"
    );
    holder.abort();
    let _ = holder.await;

    let text = exposition(&a.registry);
    assert!(
        text.contains(r#"heddle_querier_queries_total{endpoint="query",outcome="timeout"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(r#"heddle_querier_queries_total{endpoint="query",outcome="canceled"} 1"#),
        "the aborted query counts as canceled: {text}"
    );
}

#[tokio::test]
async fn max_samples_and_max_query_length() {
    let cfg = QuerierConfig {
        max_samples: 100,
        ..Default::default()
    };
    let limits = Limits {
        max_query_length: Duration::from_secs(3600),
        ..Limits::default()
    };
    let a = counters_api(cfg, limits);
    // 3 series of 41 samples: 123 fetched samples pass 100.
    let (start, end) = (secs(0), secs(600));
    let params = [
        ("query", "sum(http_requests_total)"),
        ("start", start.as_str()),
        ("end", end.as_str()),
        ("step", "15s"),
    ];
    let (status, kind, msg) = error_of(&call(&a.app, get_with("/prometheus/api/v1/query_range", &params)).await);
    assert_eq!((status, kind.as_str()), (422, "execution"), "{msg}");
    assert!(
        msg.starts_with("err-heddle-max-query-samples: query processing would load too many samples")
            && msg.contains("limit 100")
            && msg.contains("--querier.max-samples"),
        "{msg}"
    );
    // One series fits.
    let params = [
        ("query", r#"http_requests_total{instance="a"}"#),
        ("start", start.as_str()),
        ("end", end.as_str()),
        ("step", "15s"),
    ];
    ok_data(&call(&a.app, get_with("/prometheus/api/v1/query_range", &params)).await);

    let long_end = secs(7200);
    let params = [
        ("query", "1"),
        ("start", start.as_str()),
        ("end", &long_end),
        ("step", "60"),
    ];
    let (status, kind, msg) = error_of(&call(&a.app, get_with("/prometheus/api/v1/query_range", &params)).await);
    assert_eq!((status, kind.as_str()), (400, "bad_data"), "{msg}");
    assert!(
        msg.starts_with(
            "err-heddle-max-query-length: the query time range exceeds the limit (query length: 2h, limit: 1h)"
        ),
        "{msg}"
    );
    let text = exposition(&a.registry);
    for reason in ["err-heddle-max-query-samples", "err-heddle-max-query-length"] {
        assert!(
            text.contains(&format!(
                r#"heddle_querier_refused_queries_total{{reason="{reason}"}} 1"#
            )),
            "{reason}: {text}"
        );
    }
}

#[tokio::test]
async fn max_query_lookback_hides_older_data() {
    let limits = Limits {
        max_query_lookback: Duration::from_secs(24 * 3600),
        ..Limits::default()
    };
    // The data is from 2023: far older than a day before now.
    let a = counters_api(QuerierConfig::default(), limits);
    let at = secs(600);
    let params = [("query", "http_requests_total"), ("time", at.as_str())];
    let data = ok_data(&call(&a.app, get_with("/prometheus/api/v1/query", &params)).await);
    assert_eq!(data, json!({"resultType": "vector", "result": []}));
    let start = secs(-36_000);
    let params = [
        ("query", "vector(1)"),
        ("start", start.as_str()),
        ("end", at.as_str()),
        ("step", "1h"),
    ];
    let data = ok_data(&call(&a.app, get_with("/prometheus/api/v1/query_range", &params)).await);
    assert_eq!(
        data,
        json!({"resultType": "matrix", "result": []}),
        "entirely before the limit"
    );

    let a = counters_api(QuerierConfig::default(), Limits::default());
    let params = [("query", "http_requests_total"), ("time", at.as_str())];
    let data = ok_data(&call(&a.app, get_with("/prometheus/api/v1/query", &params)).await);
    assert_eq!(data["result"].as_array().unwrap().len(), 3, "without the limit: {data}");
}

#[tokio::test]
async fn stats_all() {
    let a = counters_api(QuerierConfig::default(), Limits::default());
    let at = secs(600);
    let params = [
        ("query", "sum(rate(http_requests_total[5m]))"),
        ("time", at.as_str()),
        ("stats", "all"),
    ];
    let data = ok_data(&call(&a.app, get_with("/prometheus/api/v1/query", &params)).await);
    let stats = &data["stats"];
    let timings = stats["timings"].as_object().unwrap();
    let mut keys: Vec<&str> = timings.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "evalTotalTime",
            "execQueueTime",
            "execTotalTime",
            "innerEvalTime",
            "queryPreparationTime",
            "resultSortTime"
        ]
    );
    assert!(
        timings.values().all(|v| v.as_f64().is_some_and(|s| s >= 0.0)),
        "{stats}"
    );
    // [300s, 600s] holds 21 samples of each of the 3 series.
    assert_eq!(stats["samples"]["totalQueryableSamples"], 63, "{stats}");
    assert!(stats["samples"]["peakSamples"].as_u64().unwrap() >= 63, "{stats}");

    let params = [("query", "1"), ("time", at.as_str())];
    let data = ok_data(&call(&a.app, get_with("/prometheus/api/v1/query", &params)).await);
    assert!(data.get("stats").is_none(), "no stats unless asked: {data}");
}

#[tokio::test]
async fn format_query_buildinfo_metadata_and_exemplars() {
    let a = counters_api(QuerierConfig::default(), Limits::default());
    let cases: &[(&str, Params<'_>, Value)] = &[
        (
            "/prometheus/api/v1/format_query",
            &[("query", "sum(rate(x{a='b'}[5m]))by(job)")],
            json!(r#"sum by (job) (rate(x{a="b"}[5m]))"#),
        ),
        ("/prometheus/api/v1/metadata", &[], json!({})),
        (
            "/prometheus/api/v1/metadata",
            &[("limit", "5"), ("metric", "up")],
            json!({}),
        ),
        ("/prometheus/api/v1/query_exemplars", &[("query", "up")], json!([])),
        (
            "/prometheus/api/v1/query_exemplars",
            &[("query", "up"), ("start", "1"), ("end", "2")],
            json!([]),
        ),
    ];
    for (path, params, want) in cases {
        for req in [get_with(path, params), post_with(path, params)] {
            assert_eq!(ok_data(&call(&a.app, req).await), *want, "{path} {params:?}");
        }
    }
    let errors: &[(&str, Params<'_>, &str)] = &[
        (
            "/prometheus/api/v1/format_query",
            &[("query", "sum(")],
            "invalid parameter \"query\": 1:1: parse error",
        ),
        (
            "/prometheus/api/v1/metadata",
            &[("limit", "x")],
            "limit must be a number",
        ),
        (
            "/prometheus/api/v1/query_exemplars",
            &[("query", "sum(")],
            "1:1: parse error",
        ),
        (
            "/prometheus/api/v1/query_exemplars",
            &[("query", "up"), ("start", "2"), ("end", "1")],
            "end timestamp must not be before start timestamp",
        ),
        (
            "/prometheus/api/v1/query_exemplars",
            &[("query", "up"), ("start", "x")],
            "invalid parameter \"start\": invalid time value for 'start': cannot parse \"x\" to a valid timestamp",
        ),
    ];
    for (path, params, msg) in errors {
        let (status, kind, got) = error_of(&call(&a.app, get_with(path, params)).await);
        assert_eq!((status, kind.as_str()), (400, "bad_data"), "{path} {params:?}: {got}");
        assert!(got.starts_with(msg), "{path} {params:?}: {got}");
    }

    let data = ok_data(&call(&a.app, get("/prometheus/api/v1/status/buildinfo")).await);
    assert_eq!(data["version"], env!("CARGO_PKG_VERSION"));
    for key in ["revision", "branch", "buildUser", "buildDate", "goVersion"] {
        assert!(data[key].is_string(), "{key}: {data}");
    }
}

fn metadata(family: &str, kind: i32, help: &str, unit: &str) -> MetricMetadata {
    MetricMetadata {
        r#type: kind,
        metric_family_name: family.into(),
        help: help.into(),
        unit: unit.into(),
    }
}

/// Replicas' answers are merged: each distinct entry once, families in name order, Prometheus' parameters
/// applied to the union, and the request's parameters handed to every ingester.
#[tokio::test]
async fn metadata_of_replicas_is_merged() {
    let one = Arc::new(
        FakeIngester::new()
            .with_metadata(metadata("up", 2, "is it up", ""))
            .with_metadata(metadata("http_requests_total", 1, "requests", "")),
    );
    let two = Arc::new(
        FakeIngester::new()
            .with_metadata(metadata("up", 2, "is it up", ""))
            .with_metadata(metadata("up", 2, "another help", ""))
            .with_metadata(metadata("latency_seconds", 3, "latency", "seconds")),
    );
    let a = api(
        QuerierConfig::default(),
        Limits::default(),
        vec![one.clone() as Arc<dyn IngesterClient>, two.clone()],
    );
    let cases: &[(&str, Params<'_>, Value)] = &[
        (
            "everything",
            &[],
            json!({
                "http_requests_total": [{"type": "counter", "help": "requests", "unit": ""}],
                "latency_seconds": [{"type": "histogram", "help": "latency", "unit": "seconds"}],
                "up": [
                    {"type": "gauge", "help": "is it up", "unit": ""},
                    {"type": "gauge", "help": "another help", "unit": ""},
                ],
            }),
        ),
        (
            "limit takes the first families",
            &[("limit", "1")],
            json!({"http_requests_total": [{"type": "counter", "help": "requests", "unit": ""}]}),
        ),
        ("limit 0", &[("limit", "0")], json!({})),
        (
            "limit per metric",
            &[("limit_per_metric", "1"), ("metric", "up")],
            json!({"up": [{"type": "gauge", "help": "is it up", "unit": ""}]}),
        ),
    ];
    for (name, params, want) in cases {
        let data = ok_data(&call(&a.app, get_with("/prometheus/api/v1/metadata", params)).await);
        assert_eq!(data, *want, "case {name}");
    }
    let asked: Vec<MetricsMetadataRequest> = two
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            heddle_proto::testing::Call::MetricsMetadata(_, r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(
        asked.last(),
        Some(&MetricsMetadataRequest {
            limit: -1,
            limit_per_metric: 1,
            metric: "up".into(),
        })
    );
}

fn exemplar(t_ms: i64, trace: &str, value: f64) -> heddle_proto::prometheus::Exemplar {
    heddle_proto::prometheus::Exemplar {
        labels: vec![heddle_proto::prometheus::Label {
            name: "trace_id".into(),
            value: trace.into(),
        }],
        value,
        timestamp: t_ms,
    }
}

/// The query's selectors pick the series; replicas' exemplars are merged, each once, in time order; the
/// answer has Prometheus' shape.
#[tokio::test]
async fn exemplars_of_replicas_are_merged_by_series() {
    let labels = |pairs: &[(&str, &str)]| heddle_model::Labels::from_unsorted(pairs.iter().copied()).unwrap();
    let a = labels(&[("__name__", "http_requests_total"), ("job", "api")]);
    let b = labels(&[("__name__", "http_requests_total"), ("job", "db")]);
    let one = Arc::new(
        FakeIngester::new()
            .with_exemplars(a.clone(), vec![exemplar(T0, "t1", 1.0), exemplar(T0 + 2000, "t3", 3.0)])
            .with_exemplars(b.clone(), vec![exemplar(T0, "t9", 9.0)]),
    );
    let two = Arc::new(
        FakeIngester::new().with_exemplars(a.clone(), vec![exemplar(T0 + 1000, "t2", 2.0), exemplar(T0, "t1", 1.0)]),
    );
    let api = api(
        QuerierConfig::default(),
        Limits::default(),
        vec![one.clone() as Arc<dyn IngesterClient>, two],
    );
    let start = T0_S.to_string();
    let end = (T0_S + 10).to_string();
    let params = [
        ("query", r#"rate(http_requests_total{job="api"}[5m])"#),
        ("start", start.as_str()),
        ("end", end.as_str()),
    ];
    let data = ok_data(&call(&api.app, get_with("/prometheus/api/v1/query_exemplars", &params)).await);
    let ts = |ms: i64| json!(ms as f64 / 1000.0);
    assert_eq!(
        data,
        json!([{
            "seriesLabels": {"__name__": "http_requests_total", "job": "api"},
            "exemplars": [
                {"labels": {"trace_id": "t1"}, "value": "1", "timestamp": ts(T0)},
                {"labels": {"trace_id": "t2"}, "value": "2", "timestamp": ts(T0 + 1000)},
                {"labels": {"trace_id": "t3"}, "value": "3", "timestamp": ts(T0 + 2000)},
            ],
        }])
    );
    // Every selector of the query counts; a query without one asks nothing.
    let params = [(
        "query",
        r#"http_requests_total{job="api"} + http_requests_total{job="db"}"#,
    )];
    let data = ok_data(&call(&api.app, get_with("/prometheus/api/v1/query_exemplars", &params)).await);
    assert_eq!(data.as_array().map(Vec::len), Some(2), "{data}");
    let asked = one.calls().len();
    let data = ok_data(
        &call(
            &api.app,
            get_with("/prometheus/api/v1/query_exemplars", &[("query", "1 + 1")]),
        )
        .await,
    );
    assert_eq!(data, json!([]));
    assert_eq!(one.calls().len(), asked, "no selector, no call");
}

/// An ingester that holds each tenant's series apart, as a real one does.
#[derive(Debug)]
struct ByTenant(HashMap<String, FakeIngester>);

impl ByTenant {
    fn of(&self, tenant: &TenantId) -> Result<&FakeIngester, tonic::Status> {
        self.0
            .get(tenant.as_str())
            .ok_or_else(|| tonic::Status::not_found("no such tenant"))
    }
}

#[async_trait::async_trait]
impl IngesterClient for ByTenant {
    async fn push(&self, tenant: &TenantId, body: bytes::Bytes) -> Result<PushResponse, tonic::Status> {
        self.of(tenant)?.push(tenant, body).await
    }

    async fn query_stream(&self, tenant: &TenantId, req: QueryRequest) -> Result<QueryStream, tonic::Status> {
        self.of(tenant)?.query_stream(tenant, req).await
    }

    async fn label_names(
        &self,
        tenant: &TenantId,
        req: LabelNamesRequest,
    ) -> Result<LabelNamesResponse, tonic::Status> {
        self.of(tenant)?.label_names(tenant, req).await
    }

    async fn label_values(
        &self,
        tenant: &TenantId,
        req: LabelValuesRequest,
    ) -> Result<LabelValuesResponse, tonic::Status> {
        self.of(tenant)?.label_values(tenant, req).await
    }

    async fn series(&self, tenant: &TenantId, req: SeriesRequest) -> Result<SeriesResponse, tonic::Status> {
        self.of(tenant)?.series(tenant, req).await
    }

    async fn metrics_metadata(
        &self,
        tenant: &TenantId,
        req: MetricsMetadataRequest,
    ) -> Result<MetricsMetadataResponse, tonic::Status> {
        self.of(tenant)?.metrics_metadata(tenant, req).await
    }

    async fn query_exemplars(
        &self,
        tenant: &TenantId,
        req: ExemplarQueryRequest,
    ) -> Result<ExemplarQueryResponse, tonic::Status> {
        self.of(tenant)?.query_exemplars(tenant, req).await
    }
}

#[tokio::test]
async fn tenants_see_only_their_own_series() {
    let one = |team: &str| {
        FakeIngester::new().with_samples(&[("__name__", "up"), ("team", team)], &[Sample::new(T0, 1.0)], 120)
    };
    let ingester = ByTenant(HashMap::from([
        ("team-a".to_owned(), one("a")),
        ("team-b".to_owned(), one("b")),
    ]));
    let a = api(QuerierConfig::default(), Limits::default(), vec![Arc::new(ingester)]);
    let at = secs(10);
    for tenant in ["team-a", "team-b"] {
        let params = [("query", "up"), ("time", at.as_str())];
        let data = ok_data(&call_as(&a.app, tenant, get_with("/prometheus/api/v1/query", &params)).await);
        let teams: Vec<&Value> = data["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| &s["metric"]["team"])
            .collect();
        assert_eq!(teams, [&json!(&tenant[5..])], "tenant {tenant}: {data}");
    }
}

#[tokio::test]
async fn metrics_count_queries_by_outcome_and_samples() {
    let a = counters_api(QuerierConfig::default(), Limits::default());
    let at = secs(600);
    ok_data(
        &call(
            &a.app,
            get_with(
                "/prometheus/api/v1/query",
                &[("query", "http_requests_total"), ("time", &at)],
            ),
        )
        .await,
    );
    call(&a.app, get_with("/prometheus/api/v1/query_range", &[("query", "1")])).await;
    let text = exposition(&a.registry);
    for line in [
        r#"heddle_querier_queries_total{endpoint="query",outcome="success"} 1"#,
        r#"heddle_querier_queries_total{endpoint="query_range",outcome="bad_data"} 1"#,
        // The last sample of each series within 5 minutes: 21 samples per series.
        "heddle_querier_query_samples_processed_total 63",
        r#"heddle_querier_request_duration_seconds_count{endpoint="query"} 1"#,
        r#"heddle_querier_requests_total{endpoint="query_range",status="400"} 1"#,
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}

fn exposition(registry: &Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
    out
}
