//! The fetch limits through the remote-read endpoint: a request of many queries shares one budget, and a
//! query that passes it fails while its sources are still streaming, not after everything was gathered.

use crate::{Querier, QuerierConfig, router};
use axum::Extension;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use heddle_limits::{Limits, Overrides};
use heddle_model::{Labels, Sample, TenantId};
use heddle_proto::IngesterClient;
use heddle_proto::prometheus::{LabelMatcher, Query, label_matcher::Type, read_request::ResponseType};
use heddle_proto::testing::FakeIngester;
use heddle_ring::FixedReplicas;
use http_body_util::BodyExt;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use tower::ServiceExt;

/// An ingester holding `n` series of one chunk of 10 samples each, one series per stream message.
fn ingester(n: usize) -> FakeIngester {
    let samples: Vec<Sample> = (0..10).map(|t| Sample::new(t * 10, 1.0)).collect();
    let chunk = crate::convert::chunk_to_proto(&crate::chunks::encode_one(&samples).unwrap());
    (0..n).fold(FakeIngester::new(), |f, i| {
        let labels = Labels::from_unsorted([("__name__", "metric"), ("i", &format!("{i:05}"))]).unwrap();
        f.with_series(labels, vec![chunk.clone()])
    })
}

fn app(fake: Arc<FakeIngester>, limits: Limits, registry: &mut Registry) -> axum::Router {
    let client: Arc<dyn IngesterClient> = fake;
    let replicas = Arc::new(FixedReplicas::new(vec![("ingester-0".to_owned(), client)]));
    let q = Querier::new(QuerierConfig::default(), replicas, registry).with_overrides(Arc::new(Overrides::new(limits)));
    router(Arc::new(q)).layer(Extension(TenantId::new("team-a").unwrap()))
}

fn read(queries: usize, matcher: LabelMatcher, accepted: ResponseType) -> Request<Body> {
    let query = Query {
        start_timestamp_ms: 0,
        end_timestamp_ms: 1000,
        matchers: vec![matcher],
        hints: None,
    };
    crate::tests::read_request(vec![query; queries], &[accepted])
}

fn all_names() -> LabelMatcher {
    LabelMatcher {
        r#type: Type::Re as i32,
        name: "__name__".into(),
        value: ".+".into(),
    }
}

async fn send(app: &axum::Router, req: Request<Body>) -> (StatusCode, String) {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn exposition(registry: &Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
    out
}

/// Fifty copies of `{__name__=~".+"}` over 100 series with a series limit of 250: the request fails during
/// its third query with the precise error, having taken about 250 series from the ingester, not 5,000; the
/// refusal is counted; a small request is still answered.
#[tokio::test]
async fn fifty_copies_of_a_full_scan_share_one_series_budget_and_stop_while_fetching() {
    for accepted in [ResponseType::Samples, ResponseType::StreamedXorChunks] {
        let fake = Arc::new(ingester(100));
        let mut registry = Registry::default();
        let limits = Limits {
            max_fetched_series_per_query: 250,
            ..Limits::default()
        };
        let app = app(Arc::clone(&fake), limits, &mut registry);

        let (status, body) = send(&app, read(50, all_names(), accepted)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{accepted:?}: {body}");
        assert!(
            body.starts_with(
                "err-heddle-max-series-per-query: the query exceeded the maximum number of series fetched"
            ) && body.contains("tenant=team-a")
                && body.contains("251 fetched so far and the limit is 250")
                && body.contains("--querier.max-fetched-series-per-query"),
            "{accepted:?}: {body}"
        );
        assert_eq!(
            fake.calls().len(),
            3,
            "{accepted:?}: queries 4 to 50 never reach the ingester"
        );
        let streamed = fake.streamed_messages();
        assert!(
            (251..=253).contains(&streamed),
            "{accepted:?}: {streamed} series messages taken from the ingester; the limit stops it near 251"
        );
        let metrics = exposition(&registry);
        assert!(
            metrics.contains(r#"heddle_querier_refused_queries_total{reason="err-heddle-max-series-per-query"} 1"#),
            "{accepted:?}: {metrics}"
        );

        let (status, body) = send(&app, read(2, all_names(), accepted)).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "{accepted:?}: two copies fit in 250 series: {body}"
        );
    }
}

/// The chunk and chunk-byte limits count what the ingesters stream, replicas included, per request.
#[tokio::test]
async fn chunk_limits_count_while_streaming() {
    let cases = [
        (
            "chunks",
            Limits {
                max_fetched_chunks_per_query: 30,
                ..Limits::default()
            },
            "err-heddle-max-chunks-per-query",
            "--querier.max-fetched-chunks-per-query",
        ),
        (
            "chunk bytes",
            Limits {
                max_fetched_chunk_bytes_per_query: 300,
                ..Limits::default()
            },
            "err-heddle-max-chunks-bytes-per-query",
            "--querier.max-fetched-chunk-bytes-per-query",
        ),
    ];
    for (name, limits, id, flag) in cases {
        let fake = Arc::new(ingester(100));
        let mut registry = Registry::default();
        let app = app(Arc::clone(&fake), limits, &mut registry);
        let (status, body) = send(&app, read(5, all_names(), ResponseType::Samples)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "case {name}: {body}");
        assert!(body.starts_with(id) && body.contains(flag), "case {name}: {body}");
        assert_eq!(
            fake.calls().len(),
            1,
            "case {name}: the first query already passes the limit"
        );
        assert!(
            fake.streamed_messages() < 100,
            "case {name}: {}",
            fake.streamed_messages()
        );
    }
}

/// A regular expression over `querier.max_regex_length` is refused with 400 before any ingester is asked.
#[tokio::test]
async fn long_regexes_are_refused_before_fetching() {
    let fake = Arc::new(ingester(1));
    let mut registry = Registry::default();
    let client: Arc<dyn IngesterClient> = fake.clone();
    let replicas = Arc::new(FixedReplicas::new(vec![("ingester-0".to_owned(), client)]));
    let cfg = QuerierConfig {
        max_regex_length: 16,
        ..QuerierConfig::default()
    };
    let q = Querier::new(cfg, replicas, &mut registry);
    let app = router(Arc::new(q)).layer(Extension(TenantId::new("team-a").unwrap()));
    let long = LabelMatcher {
        r#type: Type::Re as i32,
        name: "i".into(),
        value: "0|1|2|3|4|5|6|7|8|9".into(),
    };
    let (status, body) = send(&app, read(1, long, ResponseType::Samples)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body.starts_with("err-heddle-regex-too-long:") && body.contains("the limit is 16"),
        "{body}"
    );
    assert!(fake.calls().is_empty());
    let series =
        Request::get("/prometheus/api/v1/series?match[]=%7Bi%3D~%220%7C1%7C2%7C3%7C4%7C5%7C6%7C7%7C8%7C9%22%7D")
            .body(Body::empty())
            .unwrap();
    let (status, body) = send(&app, series).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("err-heddle-regex-too-long"), "{body}");
    assert!(
        exposition(&registry).contains(r#"heddle_querier_refused_queries_total{reason="err-heddle-regex-too-long"} 2"#)
    );
}
