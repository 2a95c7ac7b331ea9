//! HTTP-level table test: every status the push endpoint can answer, through the router.

use super::*;
use crate::testutil::*;
use axum::http::Request;
use heddle_limits::Limits;
use prometheus_client::registry::Registry;
use tower::ServiceExt as _;

const MAX_RECV: usize = 1000;
const MAX_DECOMPRESSED: usize = 4096;

struct Case {
    name: &'static str,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    ingester: Behavior,
    /// Whether the tenant layer ran (it always does in a real server).
    with_tenant: bool,
    path: &'static str,
    status: StatusCode,
    contains: Vec<String>,
    /// Series the ingester must have received.
    forwarded: usize,
}

impl Case {
    fn new(name: &'static str, body: Vec<u8>, status: StatusCode) -> Self {
        Self {
            name,
            headers: vec![
                ("content-encoding", "snappy".into()),
                ("content-type", "application/x-protobuf".into()),
            ],
            body,
            ingester: Behavior::Accept,
            with_tenant: true,
            path: "/api/v1/push",
            status,
            contains: Vec::new(),
            forwarded: 0,
        }
    }

    fn contains(mut self, parts: &[&str]) -> Self {
        self.contains.extend(parts.iter().map(|s| s.to_string()));
        self
    }

    fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.retain(|(n, _)| *n != name);
        self.headers.push((name, value.to_owned()));
        self
    }

    fn without_header(mut self, name: &'static str) -> Self {
        self.headers.retain(|(n, _)| *n != name);
        self
    }

    fn ingester(mut self, b: Behavior) -> Self {
        self.ingester = b;
        self
    }

    fn forwarded(mut self, n: usize) -> Self {
        self.forwarded = n;
        self
    }
}

fn cases() -> Vec<Case> {
    let valid = || body(vec![up("up"), up("other")]);
    let mut truncated_snappy = valid();
    truncated_snappy.truncate(truncated_snappy.len() - 5);
    let bad_protobuf = snappy(&[0x0a, 0x05, 0x01]);
    let long_value = "v".repeat(2049);
    let future = NOW_MS + 11 * 60 * 1000;
    let many: Vec<_> = (0..11).map(|i| up(&format!("m{i}"))).collect();
    vec![
        Case::new("200 valid", valid(), StatusCode::OK).forwarded(2),
        Case::new("200 on /api/v1/write", valid(), StatusCode::OK).forwarded(2),
        Case::new("200 without content headers", valid(), StatusCode::OK)
            .without_header("content-encoding")
            .without_header("content-type")
            .forwarded(2),
        Case::new("200 content type with parameters", valid(), StatusCode::OK)
            .header("content-type", "application/x-protobuf; charset=utf-8")
            .forwarded(2),
        // The body is not snappy at all: a 413 proves nothing was read or decompressed.
        Case::new(
            "413 declared content length over limit",
            vec![0xff; 16],
            StatusCode::PAYLOAD_TOO_LARGE,
        )
        .header("content-length", &(MAX_RECV + 1).to_string())
        .contains(&[
            "err-heddle-request-too-large",
            "1001 bytes",
            "limit of 1000",
            "distributor.max_recv_msg_size",
        ]),
        Case::new(
            "413 streamed body over limit",
            vec![0xff; MAX_RECV + 1],
            StatusCode::PAYLOAD_TOO_LARGE,
        )
        .contains(&["err-heddle-request-too-large", "limit of 1000"]),
        Case::new("415 gzip", valid(), StatusCode::UNSUPPORTED_MEDIA_TYPE)
            .header("content-encoding", "gzip")
            .contains(&["err-heddle-unsupported-content-encoding", "\"gzip\""]),
        Case::new("415 json", valid(), StatusCode::UNSUPPORTED_MEDIA_TYPE)
            .header("content-type", "application/json")
            .contains(&["err-heddle-unsupported-content-type", "application/json"]),
        Case::new("415 unknown proto", valid(), StatusCode::UNSUPPORTED_MEDIA_TYPE)
            .header(
                "content-type",
                "application/x-protobuf;proto=io.prometheus.write.v3.Request",
            )
            .contains(&["err-heddle-unsupported-content-type"]),
        Case::new(
            "400 declared decompressed size over limit",
            declared_length(1 << 30),
            StatusCode::BAD_REQUEST,
        )
        .contains(&[
            "err-heddle-decompressed-too-large",
            "1073741824",
            "4096",
            "distributor.max_decompressed_size",
        ]),
        Case::new("400 corrupt snappy", truncated_snappy, StatusCode::BAD_REQUEST)
            .contains(&["err-heddle-corrupt-snappy"]),
        Case::new("400 invalid protobuf", bad_protobuf, StatusCode::BAD_REQUEST)
            .contains(&["err-heddle-invalid-protobuf", "truncated input"]),
        Case::new(
            "400 missing metric name, valid series still forwarded",
            body(vec![series(&[("job", "a")], &[(NOW_MS, 1.0)]), up("up")]),
            StatusCode::BAD_REQUEST,
        )
        .contains(&["err-heddle-missing-metric-name", "tenant=team-a", r#"series={job="a"}"#])
        .forwarded(1),
        Case::new(
            "400 label value too long",
            body(vec![series(
                &[("__name__", "up"), ("job", &long_value)],
                &[(NOW_MS, 1.0)],
            )]),
            StatusCode::BAD_REQUEST,
        )
        .contains(&[
            "err-heddle-label-value-too-long",
            "2049 bytes",
            "the limit is 2048",
            "limits.max_label_value_length",
        ]),
        Case::new(
            "400 too far in future",
            body(vec![series(&[("__name__", "up")], &[(future, 1.0)])]),
            StatusCode::BAD_REQUEST,
        )
        .contains(&[
            "err-heddle-too-far-in-future",
            &future.to_string(),
            "limits.creation_grace_period",
        ]),
        Case::new("400 ingester refuses a series", valid(), StatusCode::BAD_REQUEST)
            .ingester(Behavior::RefuseMetric("other"))
            .contains(&["err-heddle-sample-out-of-order", "metric=other"])
            .forwarded(2),
        Case::new("429 rate limited", body(many), StatusCode::TOO_MANY_REQUESTS).contains(&[
            "err-heddle-ingestion-rate-limited",
            "samples=11",
            "10 samples/s",
            "burst of 10",
        ]),
        Case::new("503 ingester unavailable", valid(), StatusCode::SERVICE_UNAVAILABLE)
            .ingester(Behavior::Fail(tonic::Code::Unavailable))
            .contains(&[
                "err-heddle-ingesters-unavailable",
                "2 series (2 samples)",
                "can be retried",
            ])
            .forwarded(2),
        Case::new(
            "500 ingester internal error",
            valid(),
            StatusCode::INTERNAL_SERVER_ERROR,
        )
        .ingester(Behavior::Fail(tonic::Code::Internal))
        .contains(&["err-heddle-ingester-failed"])
        .forwarded(2),
        Case {
            with_tenant: false,
            ..Case::new(
                "500 without the tenant layer",
                valid(),
                StatusCode::INTERNAL_SERVER_ERROR,
            )
            .contains(&["err-heddle-no-tenant"])
        },
    ]
}

#[tokio::test]
async fn push_endpoint_statuses() {
    for case in cases() {
        let name = case.name;
        let fake = fake(case.ingester.clone());
        let mut registry = Registry::default();
        let cfg = DistributorConfig {
            max_recv_msg_size: MAX_RECV,
            max_decompressed_size: MAX_DECOMPRESSED,
            ..DistributorConfig::default()
        };
        let limits = Limits {
            ingestion_rate: 10.0,
            ingestion_burst_size: 10,
            ..Limits::default()
        };
        let d = Distributor::new(cfg, limits, Arc::new(single(fake.clone())), &mut registry).with_clock(manual_clock());
        let mut app = router(Arc::new(d));
        if case.with_tenant {
            app = app.layer(Extension(tenant()));
        }
        let path = if name.contains("/api/v1/write") {
            "/api/v1/write"
        } else {
            case.path
        };
        let mut req = Request::post(path);
        for (k, v) in &case.headers {
            req = req.header(*k, v);
        }
        let resp = app.oneshot(req.body(Body::from(case.body)).unwrap()).await.unwrap();
        let status = resp.status();
        let closes = resp.headers().get("connection").is_some_and(|v| v == "close");
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert_eq!(status, case.status, "case {name}: body {text}");
        if status == StatusCode::PAYLOAD_TOO_LARGE || status == StatusCode::UNSUPPORTED_MEDIA_TYPE {
            // Refused before the body was read: the connection must not be reused.
            assert!(closes, "case {name}: an early refusal must say Connection: close");
        }
        if status == StatusCode::OK {
            assert!(text.is_empty(), "case {name}: success has an empty body, got {text}");
        }
        for part in &case.contains {
            assert!(text.contains(part.as_str()), "case {name}: {part:?} not in {text:?}");
        }
        assert_eq!(
            fake.pushed_series().len(),
            case.forwarded,
            "case {name}: series forwarded"
        );
        let metrics = exposition(&registry);
        let line = format!("heddle_distributor_requests_total{{status=\"{}\"}} 1", status.as_u16());
        assert!(metrics.contains(&line), "case {name}: {line} not in\n{metrics}");
    }
}

/// A sender whose body stalls gets a 503 (so Prometheus retries) naming the timeout, and its connection is
/// closed; the slow request is counted.
#[tokio::test(start_paused = true)]
async fn a_stalled_body_times_out() {
    let fake = fake(Behavior::Accept);
    let mut registry = Registry::default();
    let cfg = DistributorConfig {
        body_read_timeout: std::time::Duration::from_millis(200),
        ..DistributorConfig::default()
    };
    let d = Distributor::new(cfg, Limits::default(), Arc::new(single(fake.clone())), &mut registry);
    let app = router(Arc::new(d)).layer(Extension(tenant()));
    let first: Result<bytes::Bytes, std::io::Error> = Ok(bytes::Bytes::from_static(b"0123456789"));
    let stalled = futures::stream::iter([first]).chain(futures::stream::pending());
    let req = Request::post("/api/v1/push")
        .header("content-encoding", "snappy")
        .header("content-type", "application/x-protobuf")
        .body(Body::from_stream(stalled))
        .unwrap();
    let resp = app.oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(resp.headers().get("connection").is_some_and(|v| v == "close"));
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.contains("err-heddle-body-read-timeout") && text.contains("200 ms (10 bytes received)"),
        "{text}"
    );
    assert!(fake.pushed_series().is_empty());
    assert!(exposition(&registry).contains(r#"heddle_distributor_requests_total{status="503"} 1"#));
}

#[test]
fn header_checks() {
    let cfg = DistributorConfig {
        max_recv_msg_size: 100,
        ..DistributorConfig::default()
    };
    /// (case, headers, expected error id or None)
    type HeaderCase<'a> = (&'a str, &'a [(&'a str, &'a str)], Option<&'a str>);
    let cases: &[HeaderCase<'_>] = &[
        ("none", &[], None),
        (
            "rw1 headers",
            &[
                ("content-encoding", "snappy"),
                ("content-type", "application/x-protobuf"),
            ],
            None,
        ),
        (
            "case and spaces",
            &[
                ("content-encoding", " Snappy "),
                ("content-type", "Application/X-Protobuf"),
            ],
            None,
        ),
        (
            "params ignored",
            &[("content-type", "application/x-protobuf; charset=utf-8")],
            None,
        ),
        (
            "rw1 proto param",
            &[("content-type", "application/x-protobuf;proto=prometheus.WriteRequest")],
            None,
        ),
        (
            "rw2 proto param",
            &[(
                "content-type",
                "application/x-protobuf;proto=io.prometheus.write.v2.Request",
            )],
            None,
        ),
        (
            "unknown proto param",
            &[("content-type", "application/x-protobuf;proto=prometheus.WriteRequestV3")],
            Some("err-heddle-unsupported-content-type"),
        ),
        (
            "json",
            &[("content-type", "application/json")],
            Some("err-heddle-unsupported-content-type"),
        ),
        (
            "gzip",
            &[("content-encoding", "gzip")],
            Some("err-heddle-unsupported-content-encoding"),
        ),
        (
            "identity",
            &[("content-encoding", "identity")],
            Some("err-heddle-unsupported-content-encoding"),
        ),
        ("length at limit", &[("content-length", "100")], None),
        (
            "length over limit",
            &[("content-length", "101")],
            Some("err-heddle-request-too-large"),
        ),
    ];
    for (name, pairs, want) in cases {
        let mut h = HeaderMap::new();
        for (k, v) in *pairs {
            h.insert(*k, v.parse().unwrap());
        }
        let got = check_headers(&h, &cfg).err().map(|e| e.id());
        assert_eq!(got, *want, "case {name}");
    }
}

#[test]
fn content_types_name_their_version() {
    let cases = [
        ("application/x-protobuf", Some(RemoteWriteVersion::V1)),
        (
            "application/x-protobuf;proto=prometheus.WriteRequest",
            Some(RemoteWriteVersion::V1),
        ),
        (
            "application/x-protobuf; proto=\"prometheus.WriteRequest\"",
            Some(RemoteWriteVersion::V1),
        ),
        (
            "application/x-protobuf;proto=io.prometheus.write.v2.Request",
            Some(RemoteWriteVersion::V2),
        ),
        (
            "Application/X-Protobuf ; charset=utf-8; proto=io.prometheus.write.v2.Request",
            Some(RemoteWriteVersion::V2),
        ),
        ("application/x-protobuf;proto=io.prometheus.write.v2.request", None),
        ("application/x-protobuf;proto=", None),
        ("application/json;proto=io.prometheus.write.v2.Request", None),
    ];
    for (content_type, want) in cases {
        assert_eq!(remote_write_version(content_type), want, "case {content_type:?}");
    }
}

/// A remote write 2.0 push through the router: its float series reach the ingester as the 1.0 series they
/// are, a series carrying native histograms is refused by name (400, partial write) and counted, and the
/// response says how many samples were written. A 1.0 response carries no such headers.
#[tokio::test]
async fn remote_write_2_pushes_float_series_and_refuses_histogram_series() {
    const V2: &str = "application/x-protobuf;proto=io.prometheus.write.v2.Request";
    let app = |ingester: Arc<FakeIngester>, registry: &mut Registry| {
        let d = Distributor::new(
            DistributorConfig::default(),
            Limits::default(),
            Arc::new(single(ingester)),
            registry,
        )
        .with_clock(manual_clock());
        router(Arc::new(d)).layer(Extension(tenant()))
    };
    let request = |content_type: &str, body: Vec<u8>| {
        Request::post("/api/v1/push")
            .header("content-encoding", "snappy")
            .header("content-type", content_type)
            .body(Body::from(body))
            .unwrap()
    };
    let written = |resp: &Response, what: &str| {
        resp.headers()
            .get(format!("x-prometheus-remote-write-{what}-written"))
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let floats = vec![
        series(
            &[("__name__", "up"), ("job", "a")],
            &[(NOW_MS - 1, 1.0), (NOW_MS, f64::NAN)],
        ),
        series(&[("__name__", "up"), ("job", "b")], &[(NOW_MS, 0.0)]),
    ];
    let histogram = series(&[("__name__", "latency"), ("job", "a")], &[]);

    // Every series written: 200 and the counts.
    let ingester = fake(Behavior::Accept);
    let mut registry = Registry::default();
    let resp = app(ingester.clone(), &mut registry)
        .oneshot(request(V2, v2_body(&floats, &[])))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(written(&resp, "samples").as_deref(), Some("3"));
    assert_eq!(written(&resp, "histograms").as_deref(), Some("0"));
    assert_eq!(written(&resp, "exemplars").as_deref(), Some("0"));
    let pushed = ingester.pushed_series();
    assert_eq!(pushed.len(), 2);
    for (got, want) in pushed.iter().zip(&floats) {
        assert_eq!(got.labels, want.labels);
        assert_eq!(got.samples.len(), want.samples.len());
        for (g, w) in got.samples.iter().zip(&want.samples) {
            assert_eq!((g.timestamp, g.value.to_bits()), (w.timestamp, w.value.to_bits()));
        }
    }

    // A histogram series among them: its valid histograms written and counted, the invalid one refused by name.
    let ingester = fake(Behavior::Accept);
    let mut registry = Registry::default();
    let mut sent = floats.clone();
    sent.insert(1, histogram);
    let h = |t, count| heddle_proto::write_v2::Histogram {
        count: Some(heddle_proto::write_v2::histogram::Count::CountInt(count)),
        sum: 2.5,
        positive_spans: vec![heddle_proto::write_v2::BucketSpan { offset: 1, length: 2 }],
        positive_deltas: vec![1, 1],
        timestamp: t,
        ..Default::default()
    };
    let resp = app(ingester.clone(), &mut registry)
        .oneshot(request(
            V2,
            v2_body(&sent, &[(1, vec![h(NOW_MS - 1, 3), h(NOW_MS, 3), h(NOW_MS + 1, 4)])]),
        ))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(written(&resp, "samples").as_deref(), Some("3"));
    assert_eq!(written(&resp, "histograms").as_deref(), Some("2"));
    let text = String::from_utf8_lossy(&axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap()).into_owned();
    for part in [
        "err-heddle-native-histogram-count-mismatch",
        "3 observations found in buckets, but the count field is 4",
        "latency",
    ] {
        assert!(text.contains(part), "{part:?} not in {text:?}");
    }
    let pushed = ingester.pushed_series();
    assert_eq!(pushed.len(), 3, "every series is written");
    let stamps: Vec<i64> = pushed[1].histograms.iter().map(|h| h.timestamp).collect();
    assert_eq!(stamps, [NOW_MS - 1, NOW_MS], "the valid histograms, re-encoded as 1.0");
    let metrics = exposition(&registry);
    let line =
        "heddle_discarded_samples_total{tenant=\"team-a\",reason=\"err-heddle-native-histogram-count-mismatch\"} 1";
    assert!(metrics.contains(line), "{line} not in\n{metrics}");

    // A refused 2.0 request still says what was written (nothing); a 1.0 response has no counts.
    let mut registry = Registry::default();
    let resp = app(fake(Behavior::Accept), &mut registry)
        .oneshot(request(V2, snappy(&[0x2a, 4, 0x0a, 2, 0, 7])))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(written(&resp, "samples").as_deref(), Some("0"));
    let text = String::from_utf8_lossy(&axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap()).into_owned();
    assert!(
        text.contains("io.prometheus.write.v2.Request") && text.contains("out of range"),
        "{text}"
    );
    let resp = app(fake(Behavior::Accept), &mut registry)
        .oneshot(request("application/x-protobuf", body(floats)))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(written(&resp, "samples"), None);
}

/// While one request's body holds the whole in-flight budget, another is refused at once with 503 naming the
/// limit and its flag (not queued); once the first is gone its bytes are back and the next request is served.
#[tokio::test]
async fn pushes_past_the_inflight_bytes_limit_get_503_until_bytes_are_released() {
    let fake = fake(Behavior::Accept);
    let mut registry = Registry::default();
    let cfg = DistributorConfig {
        instance_limits: crate::config::DistributorInstanceLimits {
            max_inflight_push_requests_bytes: 1000,
        },
        ..DistributorConfig::default()
    };
    let d = Distributor::new(cfg, Limits::default(), Arc::new(single(fake.clone())), &mut registry)
        .with_clock(manual_clock());
    let app = router(Arc::new(d)).layer(Extension(tenant()));
    let push = |body: Body, len: usize| {
        Request::post("/api/v1/push")
            .header("content-encoding", "snappy")
            .header("content-type", "application/x-protobuf")
            .header("content-length", len.to_string())
            .body(body)
            .unwrap()
    };

    // A slow sender declaring 1000 bytes: its buffer holds the whole budget while the body trickles in.
    let first: Result<bytes::Bytes, std::io::Error> = Ok(bytes::Bytes::from_static(b"0123456789"));
    let stalled = futures::stream::iter([first]).chain(futures::stream::pending());
    let slow = tokio::spawn(app.clone().oneshot(push(Body::from_stream(stalled), 1000)));
    let held = "heddle_distributor_inflight_push_requests_bytes 1000";
    for _ in 0..500 {
        if exposition(&registry).contains(held) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(exposition(&registry).contains(held), "{}", exposition(&registry));

    let valid = body(vec![up("up")]);
    let resp = app
        .clone()
        .oneshot(push(Body::from(valid.clone()), valid.len()))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    let text = String::from_utf8_lossy(&axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap()).into_owned();
    assert!(
        text.starts_with("err-heddle-distributor-max-inflight-push-requests-bytes:")
            && text.contains("the limit is 1000 bytes")
            && text.contains("--distributor.instance-limits.max-inflight-push-requests-bytes"),
        "{text}"
    );
    assert!(
        fake.pushed_series().is_empty(),
        "nothing of a refused request is forwarded"
    );

    slow.abort();
    let _ = slow.await;
    let metrics = exposition(&registry);
    assert!(
        metrics.contains("heddle_distributor_inflight_push_requests_bytes 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("heddle_distributor_inflight_push_requests_bytes_refused_total 1"),
        "{metrics}"
    );
    let resp = app.oneshot(push(Body::from(valid.clone()), valid.len())).await.unwrap();
    assert_eq!(
        resp.status(),
        StatusCode::OK,
        "the released bytes admit the next request"
    );
    assert_eq!(fake.pushed_series().len(), 1);
    assert!(exposition(&registry).contains("heddle_distributor_inflight_push_requests_bytes 0"));
}

/// With the tenant's exemplar store on, a 2.0 push's exemplars are forwarded (as 1.0 exemplars of their
/// series), the response counts them, and an invalid one is refused by name while the rest are written.
#[tokio::test]
async fn remote_write_2_exemplars_are_forwarded_counted_and_checked() {
    let ingester = fake(Behavior::Accept);
    let mut registry = Registry::default();
    let limits = Limits {
        max_global_exemplars_per_user: 100,
        ..Limits::default()
    };
    let d = Distributor::new(
        DistributorConfig::default(),
        limits,
        Arc::new(single(ingester.clone())),
        &mut registry,
    )
    .with_clock(manual_clock());
    let app = router(Arc::new(d)).layer(Extension(tenant()));
    let exemplar = |trace: &str, t: i64| heddle_proto::prometheus::Exemplar {
        labels: vec![heddle_proto::prometheus::Label {
            name: "trace_id".into(),
            value: trace.into(),
        }],
        value: 1.0,
        timestamp: t,
    };
    let mut with = series(&[("__name__", "up"), ("job", "a")], &[(NOW_MS, 1.0)]);
    with.exemplars = vec![exemplar("t1", NOW_MS), exemplar(&"x".repeat(200), NOW_MS + 1)];
    // Prometheus sends exemplars in series entries of their own.
    let mut only = series(&[("__name__", "up"), ("job", "b")], &[]);
    only.exemplars = vec![exemplar("t2", NOW_MS)];
    let body = heddle_testkit::codec::encode_write_request_v2(&heddle_proto::prometheus::WriteRequest {
        timeseries: vec![with, only],
        metadata: vec![],
    })
    .unwrap();
    let resp = app
        .oneshot(
            Request::post("/api/v1/push")
                .header("content-encoding", "snappy")
                .header(
                    "content-type",
                    "application/x-protobuf;proto=io.prometheus.write.v2.Request",
                )
                .body(Body::from(body))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let header = |what: &str| {
        resp.headers()
            .get(format!("x-prometheus-remote-write-{what}-written"))
            .map(|v| v.to_str().unwrap().to_owned())
    };
    assert_eq!(header("exemplars").as_deref(), Some("2"));
    assert_eq!(header("samples").as_deref(), Some("1"));
    let text = String::from_utf8_lossy(&axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap()).into_owned();
    assert!(
        text.starts_with("err-heddle-exemplar-labels-too-long: exemplar labels hold 208 UTF-8 characters"),
        "{text}"
    );
    let pushed = ingester.pushed_series();
    let traces: Vec<Vec<&str>> = pushed
        .iter()
        .map(|s| s.exemplars.iter().map(|e| e.labels[0].value.as_str()).collect())
        .collect();
    assert_eq!(traces, vec![vec!["t1"], vec!["t2"]]);
    let metrics = exposition(&registry);
    for line in [
        "heddle_distributor_discarded_exemplars_total{tenant=\"team-a\",reason=\"err-heddle-exemplar-labels-too-long\"} 1",
        "heddle_distributor_received_exemplars_total{tenant=\"team-a\"} 2",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
}
