//! UTF-8 metric and label names on the read path, as a tenant with the `utf8` name validation scheme stores
//! them: PromQL's quoted selectors, and the series, labels and label values APIs returning the names as
//! they were stored.

use crate::tests::{WithSamples, get, json, send};
use crate::{Querier, QuerierConfig, router};
use axum::Extension;
use axum::http::StatusCode;
use heddle_limits::{Limits, NameValidationScheme, Overrides};
use heddle_model::{Sample, TenantId};
use heddle_proto::IngesterClient;
use heddle_proto::testing::FakeIngester;
use heddle_ring::FixedReplicas;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use std::sync::Arc;

const T0: i64 = 1_700_000_000_000;
const DOTTED: &str = "http.server.request.duration_seconds_count";

fn querier(scheme: NameValidationScheme) -> axum::Router {
    let samples: Vec<Sample> = (0..=20).map(|i| Sample::new(T0 + i * 15_000, i as f64)).collect();
    let fake = FakeIngester::new()
        .with_samples(
            &[
                ("__name__", DOTTED),
                ("instance", "pod-1"),
                ("job", "checkout"),
                ("service.name", "checkout"),
            ],
            &samples,
            120,
        )
        .with_samples(&[("__name__", "up"), ("job", "checkout")], &samples, 120);
    let client: Arc<dyn IngesterClient> = Arc::new(fake);
    let replicas = Arc::new(FixedReplicas::new(vec![("ingester-0".to_owned(), client)]));
    let limits = Limits {
        name_validation_scheme: scheme,
        ..Limits::default()
    };
    let q = Querier::new(QuerierConfig::default(), replicas, &mut Registry::default())
        .with_overrides(Arc::new(Overrides::new(limits)));
    router(Arc::new(q)).layer(Extension(TenantId::new("team-a").unwrap()))
}

fn encode(params: &[(&str, &str)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(params)
        .finish()
}

async fn data(app: &axum::Router, uri: &str) -> Value {
    let a = send(app, get(uri)).await;
    assert_eq!(a.status, StatusCode::OK, "{uri}: {}", String::from_utf8_lossy(&a.body));
    json(&a)["data"].clone()
}

#[tokio::test]
async fn quoted_selectors_select_utf8_names_and_answers_keep_them() {
    let app = querier(NameValidationScheme::Utf8);
    let stored = json!({
        "__name__": DOTTED,
        "instance": "pod-1",
        "job": "checkout",
        "service.name": "checkout",
    });
    let time = (T0 / 1000 + 300).to_string();
    for query in [
        r#"{"http.server.request.duration_seconds_count", "service.name"="checkout"}"#,
        r#"{__name__="http.server.request.duration_seconds_count", "service.name"=~"check.*"}"#,
    ] {
        let uri = format!(
            "/prometheus/api/v1/query?{}",
            encode(&[("query", query), ("time", &time)])
        );
        let d = data(&app, &uri).await;
        assert_eq!(d["resultType"], "vector", "{query}");
        assert_eq!(d["result"].as_array().map(Vec::len), Some(1), "{query}: {d}");
        assert_eq!(d["result"][0]["metric"], stored, "{query}");
    }
    let by = format!(
        "/prometheus/api/v1/query?{}",
        encode(&[
            (
                "query",
                r#"sum by ("service.name") ({"http.server.request.duration_seconds_count"})"#
            ),
            ("time", &time)
        ])
    );
    assert_eq!(
        data(&app, &by).await["result"][0]["metric"],
        json!({"service.name": "checkout"})
    );

    let series = format!(
        "/prometheus/api/v1/series?{}",
        encode(&[("match[]", r#"{"service.name"="checkout"}"#)])
    );
    assert_eq!(data(&app, &series).await, json!([stored]));
    let names = data(&app, "/prometheus/api/v1/labels").await;
    assert!(names.as_array().unwrap().contains(&json!("service.name")), "{names}");
    let values = data(&app, "/prometheus/api/v1/label/__name__/values").await;
    assert_eq!(values, json!([DOTTED, "up"]));
    for path in ["service.name", "U__service_2e_name"] {
        let uri = format!("/prometheus/api/v1/label/{path}/values");
        assert_eq!(data(&app, &uri).await, json!(["checkout"]), "{path}");
    }
}

#[tokio::test]
async fn a_legacy_tenant_keeps_prometheus_2_label_name_rules_on_label_values() {
    let app = querier(NameValidationScheme::Legacy);
    let a = send(&app, get("/prometheus/api/v1/label/service.name/values")).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(
        String::from_utf8_lossy(&a.body).contains(r#"invalid label name: \"service.name\""#),
        "{}",
        String::from_utf8_lossy(&a.body)
    );
}

#[test]
fn escaped_names_are_unescaped_as_prometheus_does() {
    for (escaped, want) in [
        ("U__service_2e_name", "service.name"),
        ("U__a__b", "a_b"),
        ("U___1f600_", "😀"),
        ("plain", "plain"),
        ("U__bad_zz_", "U__bad_zz_"),
        ("U__open_2e", "U__open_2e"),
        ("U__toolong_1234567_", "U__toolong_1234567_"),
        ("U__surrogate_d800_", "U__surrogate_d800_"),
    ] {
        assert_eq!(crate::api::unescape_name(escaped), want, "{escaped}");
    }
}
