//! Refusals of bad remote-write input by the real binary: status codes and the stable error ids in messages
//! (DESIGN.md §3, services/distributor `PushError`/`InvalidSeries`, the ingester's append errors), and that the
//! valid series of a partly invalid request are still stored while whole-request refusals store nothing.

use heddle_model::{METRIC_NAME, TENANT_HEADER};
use heddle_proto::prometheus::{MetricMetadata, TimeSeries, WriteRequest};
use heddle_testkit::codec::{encode_write_request, snappy_compress};
use heddle_testkit::{HeddleOptions, HeddleProcess, ReadClient, ReadMode, eq, http_client, now_ms, query};
use prost::Message;
use std::time::Duration;

const TENANT: &str = "t1";
const MAX_RECV: usize = 64 * 1024;
const MAX_DECOMPRESSED: usize = 256 * 1024;
const MAX_LABELS: usize = 8;
const MAX_NAME_LEN: usize = 32;
const MAX_VALUE_LEN: usize = 64;
const PROTOBUF: &str = "application/x-protobuf";

fn series(labels: &[(&str, &str)], samples: &[(i64, f64)]) -> TimeSeries {
    heddle_testkit::timeseries(labels, samples)
}

fn body(ts: Vec<TimeSeries>) -> Vec<u8> {
    encode_write_request(&WriteRequest {
        timeseries: ts,
        ..Default::default()
    })
    .expect("encode")
}

/// Deterministic bytes that snappy cannot compress (so the compressed body stays over the size limit).
fn noise(len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (heddle_testkit::splitmix64(i) >> 24) as u8)
        .collect()
}

/// One request and what must come of it.
struct Case {
    name: &'static str,
    /// Pushed first, must succeed (e.g. the newer sample before an out-of-order one).
    setup: Option<Vec<u8>>,
    tenant: Option<&'static str>,
    content_type: &'static str,
    content_encoding: &'static str,
    body: Vec<u8>,
    status: u16,
    /// Substrings the response body must contain.
    contains: Vec<String>,
    /// (metric name, samples that must be readable afterwards in tenant t1).
    stored: Vec<(String, usize)>,
}

impl Case {
    fn new(name: &'static str, body: Vec<u8>, status: u16, contains: &[&str]) -> Case {
        Case {
            name,
            setup: None,
            tenant: Some(TENANT),
            content_type: PROTOBUF,
            content_encoding: "snappy",
            body,
            status,
            contains: contains.iter().map(|s| s.to_string()).collect(),
            stored: Vec::new(),
        }
    }

    fn stores(mut self, metric: &str, samples: usize) -> Case {
        self.stored.push((metric.to_owned(), samples));
        self
    }
}

/// A request with one valid series (`ok_<case>`) and one invalid series; the valid one must be stored and the
/// invalid one (named `bad_<case>` when its name is usable) must not.
fn partly_invalid(name: &'static str, now: i64, invalid: TimeSeries, id: &str, more: &[&str]) -> Case {
    let ok = format!("ok_{}", name.replace(' ', "_"));
    let mut contains = vec![id];
    contains.extend_from_slice(more);
    let case = Case::new(
        name,
        body(vec![
            series(&[(METRIC_NAME, &ok), ("job", "bad-input")], &[(now, 1.0)]),
            invalid,
        ]),
        400,
        &contains,
    );
    let bad = format!("bad_{}", name.replace(' ', "_"));
    case.stores(&ok, 1).stores(&bad, 0)
}

fn cases(now: i64) -> Vec<Case> {
    let long_name = "n".repeat(MAX_NAME_LEN + 1);
    let long_value = "v".repeat(MAX_VALUE_LEN + 1);
    let many: Vec<(String, String)> = (0..MAX_LABELS).map(|i| (format!("l{i}"), "x".to_owned())).collect();
    let mut too_many: Vec<(&str, &str)> = vec![(METRIC_NAME, "bad_too_many_labels")];
    too_many.extend(many.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    let mut declared_huge = Vec::new();
    prost::encoding::encode_varint(10 * 1024 * 1024, &mut declared_huge);
    declared_huge.extend_from_slice(&[0u8; 16]);
    let valid = || {
        body(vec![series(
            &[(METRIC_NAME, "whole_refusal"), ("job", "bad-input")],
            &[(now, 1.0)],
        )])
    };

    vec![
        Case::new(
            "body too large",
            noise(MAX_RECV + 1024),
            413,
            &["err-heddle-request-too-large", &format!("limit of {MAX_RECV} bytes")],
        ),
        Case::new(
            "declared decompressed size over the limit",
            declared_huge,
            400,
            &[
                "err-heddle-decompressed-too-large",
                "declares 10485760",
                &format!("limit is {MAX_DECOMPRESSED}"),
            ],
        ),
        Case::new(
            "not snappy",
            b"\x05this is not snappy at all".to_vec(),
            400,
            &["err-heddle-corrupt-snappy"],
        ),
        Case::new(
            "not protobuf",
            snappy_compress(b"\xff\xff\xff\xff not a protobuf message").expect("compress"),
            400,
            &["err-heddle-invalid-protobuf"],
        ),
        Case {
            content_type: "text/plain",
            ..Case::new(
                "unsupported content type",
                valid(),
                415,
                &["err-heddle-unsupported-content-type", "text/plain"],
            )
        }
        .stores("whole_refusal", 0),
        Case {
            content_type: "application/x-protobuf;proto=io.prometheus.write.v3.Request",
            ..Case::new(
                "unknown remote write proto",
                valid(),
                415,
                &["err-heddle-unsupported-content-type"],
            )
        }
        .stores("whole_refusal", 0),
        Case {
            content_type: "application/x-protobuf;proto=io.prometheus.write.v2.Request",
            ..Case::new(
                "remote write 1.0 body sent as 2.0",
                valid(),
                400,
                &[
                    "err-heddle-invalid-protobuf",
                    "reserved in io.prometheus.write.v2.Request",
                ],
            )
        }
        .stores("whole_refusal", 0),
        Case {
            content_encoding: "gzip",
            ..Case::new(
                "unsupported content encoding",
                valid(),
                415,
                &["err-heddle-unsupported-content-encoding", "gzip"],
            )
        }
        .stores("whole_refusal", 0),
        Case {
            tenant: None,
            ..Case::new("missing tenant", valid(), 401, &["no org id", TENANT_HEADER])
        }
        .stores("whole_refusal", 0),
        Case {
            tenant: Some("a/b"),
            ..Case::new("invalid tenant", valid(), 400, &["invalid X-Scope-OrgID", "'/'"])
        }
        .stores("whole_refusal", 0),
        partly_invalid(
            "unsorted labels",
            now,
            series(
                &[(METRIC_NAME, "bad_unsorted_labels"), ("zone", "a"), ("job", "x")],
                &[(now, 1.0)],
            ),
            "err-heddle-labels-not-sorted",
            &["\"zone\" comes before \"job\""],
        ),
        partly_invalid(
            "duplicate labels",
            now,
            series(
                &[(METRIC_NAME, "bad_duplicate_labels"), ("job", "x"), ("job", "y")],
                &[(now, 1.0)],
            ),
            "err-heddle-duplicate-label-names",
            &["\"job\""],
        ),
        partly_invalid(
            "missing metric name",
            now,
            series(&[("job", "bad_missing_metric_name")], &[(now, 1.0)]),
            "err-heddle-missing-metric-name",
            &[],
        ),
        partly_invalid(
            "empty label name",
            now,
            series(&[("", "x"), (METRIC_NAME, "bad_empty_label_name")], &[(now, 1.0)]),
            "err-heddle-invalid-label",
            &[],
        ),
        partly_invalid(
            "invalid label name",
            now,
            series(&[(METRIC_NAME, "bad_invalid_label_name"), ("a-b", "x")], &[(now, 1.0)]),
            "err-heddle-invalid-label",
            &["\"a-b\""],
        ),
        partly_invalid(
            "invalid metric name",
            now,
            series(&[(METRIC_NAME, "1bad")], &[(now, 1.0)]),
            "err-heddle-invalid-metric-name",
            &["\"1bad\""],
        ),
        partly_invalid(
            "label name too long",
            now,
            series(
                &[(METRIC_NAME, "bad_label_name_too_long"), (&long_name, "x")],
                &[(now, 1.0)],
            ),
            "err-heddle-label-name-too-long",
            &[
                &format!("the limit is {MAX_NAME_LEN}"),
                "--validation.max-length-label-name",
            ],
        ),
        partly_invalid(
            "label value too long",
            now,
            series(
                &[(METRIC_NAME, "bad_label_value_too_long"), ("a", &long_value)],
                &[(now, 1.0)],
            ),
            "err-heddle-label-value-too-long",
            &[
                &format!("the limit is {MAX_VALUE_LEN}"),
                "--validation.max-length-label-value",
            ],
        ),
        partly_invalid(
            "too many labels",
            now,
            series(&too_many, &[(now, 1.0)]),
            "err-heddle-max-label-names-per-series",
            &[
                &format!("the limit is {MAX_LABELS}"),
                "--validation.max-label-names-per-series",
            ],
        ),
        partly_invalid(
            "too far in future",
            now,
            series(&[(METRIC_NAME, "bad_too_far_in_future")], &[(now + 2 * 3_600_000, 1.0)]),
            "err-heddle-too-far-in-future",
            &["--validation.create-grace-period"],
        ),
        Case {
            setup: Some(body(vec![series(&[(METRIC_NAME, "seen_out_of_order")], &[(now, 1.0)])])),
            ..partly_invalid(
                "out of order",
                now,
                series(&[(METRIC_NAME, "seen_out_of_order")], &[(now - 60_000, 2.0)]),
                "err-heddle-sample-out-of-order",
                &[&format!("ts={}", now - 60_000)],
            )
        }
        .stores("seen_out_of_order", 1),
        Case {
            setup: Some(body(vec![series(&[(METRIC_NAME, "seen_duplicate_ts")], &[(now, 1.0)])])),
            ..partly_invalid(
                "duplicate timestamp with another value",
                now,
                series(&[(METRIC_NAME, "seen_duplicate_ts")], &[(now, 2.0)]),
                "err-heddle-sample-duplicate-timestamp",
                &[],
            )
        }
        .stores("seen_duplicate_ts", 1),
        Case {
            setup: Some(body(vec![series(
                &[(METRIC_NAME, "resent_same_sample")],
                &[(now, 1.0)],
            )])),
            ..Case::new(
                "identical resend is accepted",
                body(vec![series(&[(METRIC_NAME, "resent_same_sample")], &[(now, 1.0)])]),
                200,
                &[],
            )
        }
        .stores("resent_same_sample", 1),
        Case::new(
            "metadata only",
            snappy_compress(
                &WriteRequest {
                    metadata: vec![MetricMetadata {
                        r#type: 1,
                        metric_family_name: "some_total".into(),
                        help: "help".into(),
                        unit: String::new(),
                    }],
                    ..Default::default()
                }
                .encode_to_vec(),
            )
            .expect("compress"),
            200,
            &[],
        ),
    ]
}

async fn send(http: &reqwest::Client, url: &str, case: &Case, body: Vec<u8>) -> (u16, String) {
    let mut req = http
        .post(url)
        .header("Content-Type", case.content_type)
        .header("Content-Encoding", case.content_encoding)
        .header("X-Prometheus-Remote-Write-Version", "0.1.0")
        .body(body);
    if let Some(t) = case.tenant {
        req = req.header(TENANT_HEADER, t);
    }
    match req.send().await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            (status, resp.text().await.unwrap_or_default())
        }
        // The server may close the connection on an oversized body before reading it all.
        Err(e) => (0, heddle_testkit::client::error_chain(&e)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_precisely() {
    let opts = HeddleOptions {
        multitenancy: true,
        args: [
            format!("--distributor.max-recv-msg-size={MAX_RECV}"),
            format!("--distributor.max-decompressed-size={MAX_DECOMPRESSED}"),
            format!("--validation.max-label-names-per-series={MAX_LABELS}"),
            format!("--validation.max-length-label-name={MAX_NAME_LEN}"),
            format!("--validation.max-length-label-value={MAX_VALUE_LEN}"),
        ]
        .to_vec(),
        ..HeddleOptions::default()
    };
    let heddle = tokio::task::spawn_blocking(move || HeddleProcess::start(opts))
        .await
        .expect("join")
        .expect("start heddle");
    let http = heddle_testkit::http_client_unpooled(Duration::from_secs(30)).expect("client");
    let reader = ReadClient::new(
        http_client(Duration::from_secs(30)).expect("client"),
        &heddle.prometheus_url(),
        Some(TENANT),
    );
    let now = now_ms();
    let mut failures = Vec::new();
    for case in cases(now) {
        if let Some(setup) = case.setup.clone() {
            let (status, text) = send(&http, &heddle.push_url(), &case, setup).await;
            assert_eq!(status, 200, "case {}: setup request failed: {text}", case.name);
        }
        let (status, text) = send(&http, &heddle.push_url(), &case, case.body.clone()).await;
        if status != case.status {
            failures.push(format!(
                "case {:?}: status {status}, want {}: {text}",
                case.name, case.status
            ));
            continue;
        }
        for want in &case.contains {
            if !text.contains(want.as_str()) {
                failures.push(format!("case {:?}: message lacks {want:?}: {text}", case.name));
            }
        }
        for (metric, want) in &case.stored {
            let q = query(now - 3_600_000, now + 3 * 3_600_000, vec![eq(METRIC_NAME, metric)]);
            let got: usize = match reader.read(ReadMode::Samples, vec![q]).await {
                Ok(res) => res.iter().flatten().map(|s| s.samples.len()).sum(),
                Err(e) => {
                    failures.push(format!("case {:?}: reading {metric}: {e}", case.name));
                    continue;
                }
            };
            if got != *want {
                failures.push(format!("case {:?}: {metric} has {got} samples, want {want}", case.name));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}\n{}",
        failures.len(),
        failures.join("\n"),
        heddle.log_tail(20)
    );
    // Its log goes to a file, not a terminal: plain lines, no colour codes (it logged a warning per refusal).
    let log = heddle.log_tail(200);
    assert!(log.contains("WARN"), "the refusals were logged: {log}");
    assert!(!log.contains('\u{1b}'), "no ANSI escape codes in a log file: {log:?}");
}
