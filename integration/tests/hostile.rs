//! Hostile input against one real heddle with multitenancy and an admin token: semantic attacks rather than
//! fuzzed bytes, across remote write, remote read, the series and label API, the admin routes and gRPC (the
//! single process serves no ingester API; Admin needs the token). Each
//! case states the status and the words its answer must hold. Before the cases a witness tenant stores known
//! samples; after them the witness still reads back exactly, the process is still ready, and no case's data
//! leaked into the witness tenant or out of its own.

use heddle_model::{METRIC_NAME, TENANT_HEADER};
use heddle_proto::admin::admin_client::AdminClient;
use heddle_proto::admin::{ForgetMemberRequest, ListTenantsRequest, ShutdownRequest};
use heddle_proto::ingester::LabelValuesRequest;
use heddle_proto::ingester::ingester_client::IngesterClient as IngesterGrpc;
use heddle_proto::prometheus::label_matcher::Type as MatcherType;
use heddle_proto::prometheus::{Query, ReadRequest, WriteRequest};
use heddle_testkit::codec::{encode_write_request, snappy_compress, snappy_decompress};
use heddle_testkit::{HeddleOptions, HeddleProcess, ReadClient, ReadMode, eq, http_client, matcher, now_ms, query};
use prost::Message;
use std::time::Duration;

const WITNESS: &str = "witness";
const ATTACKER: &str = "mallory";
const TOKEN: &str = "s3cr3t-admin-token";
const PROTOBUF: &str = "application/x-protobuf";
const WITNESS_SAMPLES: usize = 20;
const MAX_SERIES: usize = 100;

/// One hostile request and what must come of it.
struct Case {
    name: &'static str,
    method: reqwest::Method,
    path: String,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    status: u16,
    contains: Vec<&'static str>,
    /// Substrings the answer must not hold (another tenant's data).
    lacks: Vec<&'static str>,
}

impl Case {
    fn new(name: &'static str, method: reqwest::Method, path: &str) -> Case {
        Case {
            name,
            method,
            path: path.to_owned(),
            headers: vec![(TENANT_HEADER, ATTACKER.to_owned())],
            body: Vec::new(),
            status: 200,
            contains: Vec::new(),
            lacks: Vec::new(),
        }
    }

    fn get(name: &'static str, path: &str) -> Case {
        Case::new(name, reqwest::Method::GET, path)
    }

    fn post(name: &'static str, path: &str, body: Vec<u8>) -> Case {
        Case {
            body,
            ..Case::new(name, reqwest::Method::POST, path)
        }
    }

    /// Remote write with the headers Prometheus sends.
    fn push(name: &'static str, body: Vec<u8>) -> Case {
        Case::post(name, "/api/v1/push", body)
            .header("Content-Type", PROTOBUF)
            .header("Content-Encoding", "snappy")
            .header("X-Prometheus-Remote-Write-Version", "0.1.0")
    }

    /// Remote read with the headers Prometheus sends.
    fn read(name: &'static str, req: &ReadRequest) -> Case {
        Case::post(name, "/prometheus/api/v1/read", snappy(&req.encode_to_vec()))
            .header("Content-Type", PROTOBUF)
            .header("Content-Encoding", "snappy")
            .header("X-Prometheus-Remote-Read-Version", "0.1.0")
    }

    /// Sets a header, replacing an earlier value.
    fn header(mut self, name: &'static str, value: &str) -> Case {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name, value.to_owned()));
        self
    }

    /// Replaces the tenant header(s): none, or several.
    fn tenants(mut self, tenants: &[&str]) -> Case {
        self.headers.retain(|(n, _)| *n != TENANT_HEADER);
        for t in tenants {
            self.headers.push((TENANT_HEADER, (*t).to_owned()));
        }
        self
    }

    fn admin(self) -> Case {
        self.tenants(&[])
    }

    fn token(self, token: &str) -> Case {
        self.header("Authorization", &format!("Bearer {token}"))
    }

    fn want(mut self, status: u16, contains: &[&'static str]) -> Case {
        self.status = status;
        self.contains = contains.to_vec();
        self
    }

    fn lacks(mut self, words: &[&'static str]) -> Case {
        self.lacks = words.to_vec();
        self
    }
}

fn snappy(raw: &[u8]) -> Vec<u8> {
    snappy_compress(raw).expect("snappy")
}

fn write(series: Vec<heddle_proto::prometheus::TimeSeries>) -> Vec<u8> {
    encode_write_request(&WriteRequest {
        timeseries: series,
        ..Default::default()
    })
    .expect("encode")
}

fn series(labels: &[(&str, &str)], samples: &[(i64, f64)]) -> heddle_proto::prometheus::TimeSeries {
    heddle_testkit::timeseries(labels, samples)
}

fn read_req(queries: Vec<Query>) -> ReadRequest {
    ReadRequest {
        queries,
        ..Default::default()
    }
}

/// A snappy body whose header declares `len` decompressed bytes but holds almost nothing.
fn lying_snappy(len: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut v = len;
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            break;
        }
        out.push(b | 0x80);
    }
    out.extend_from_slice(&[0x00, 0x00]);
    out
}

fn cases(now: i64) -> Vec<Case> {
    use reqwest::Method;
    let hour = 3_600_000;
    let all = |name| matcher(MatcherType::Re, METRIC_NAME, name);
    vec![
        // Tenancy.
        Case::push(
            "two tenant headers",
            write(vec![series(&[(METRIC_NAME, "dup_tenant")], &[(now, 1.0)])]),
        )
        .tenants(&[ATTACKER, WITNESS])
        .want(400, &["X-Scope-OrgID"]),
        Case::push(
            "no tenant header",
            write(vec![series(&[(METRIC_NAME, "no_tenant")], &[(now, 1.0)])]),
        )
        .tenants(&[])
        .want(401, &["no org id"]),
        Case::push(
            "tenant '..'",
            write(vec![series(&[(METRIC_NAME, "dots")], &[(now, 1.0)])]),
        )
        .tenants(&[".."])
        .want(400, &["invalid X-Scope-OrgID"]),
        Case::push(
            "tenant of 1000 bytes",
            write(vec![series(&[(METRIC_NAME, "long")], &[(now, 1.0)])]),
        )
        .tenants(&[&"t".repeat(1000)])
        .want(400, &["invalid X-Scope-OrgID"]),
        Case::get(
            "labels of another tenant are not listed",
            "/prometheus/api/v1/label/__name__/values",
        )
        .want(200, &["\"status\":\"success\""])
        .lacks(&["witness_metric"]),
        Case::get(
            "series of another tenant are not listed",
            "/prometheus/api/v1/series?match[]=%7B__name__%3D~%22.%2B%22%7D",
        )
        .want(200, &["\"status\":\"success\""])
        .lacks(&["witness_metric"]),
        Case::read(
            "remote read of another tenant's metric finds nothing",
            &read_req(vec![query(
                now - hour,
                now + hour,
                vec![eq(METRIC_NAME, "witness_metric")],
            )]),
        )
        .want(200, &[])
        .lacks(&["witness_metric"]),
        Case::push(
            "tenant header of 100 KB",
            write(vec![series(&[(METRIC_NAME, "huge_tenant")], &[(now, 1.0)])]),
        )
        .tenants(&[&"x".repeat(100_000)])
        .want(400, &["100000 bytes long", "the limit is 150"]),
        // Remote write: bodies and encodings.
        Case::push(
            "a million empty labels",
            snappy(&heddle_testkit::codec::empty_labels_request(1_000_000)),
        )
        .want(400, &["err-heddle-degenerate-write-request"]),
        Case::push("snappy header declaring 3 GiB", lying_snappy(3 << 30)).want(
            400,
            &[
                "err-heddle-decompressed-too-large",
                "3221225472",
                "--distributor.max-decompressed-size",
            ],
        ),
        Case::push("snappy header declaring more than 4 GiB", lying_snappy(5 << 30))
            .want(400, &["err-heddle-corrupt-snappy", "larger than allowed"]),
        Case::push("empty body", Vec::new()).want(400, &["err-heddle-corrupt-snappy", "empty body"]),
        Case::push("not snappy", b"this is not snappy at all".to_vec()).want(400, &["snappy"]),
        Case::push("snappy of garbage protobuf", snappy(&[0xff; 64])).want(400, &["protobuf"]),
        Case::push("gzip instead of snappy", write(vec![]))
            .header("Content-Encoding", "gzip")
            .want(415, &["gzip"]),
        Case::push("unknown remote write proto", write(vec![]))
            .header(
                "Content-Type",
                "application/x-protobuf;proto=io.prometheus.write.v3.Request",
            )
            .want(415, &["io.prometheus.write.v3.Request"]),
        Case::push(
            "NaN, infinities and a stale marker are legal values",
            write(vec![series(
                &[(METRIC_NAME, "odd_values")],
                &[
                    (now - 3000, f64::NAN),
                    (now - 2000, f64::INFINITY),
                    (now - 1000, f64::NEG_INFINITY),
                    (now, f64::from_bits(0x7ff0_0000_0000_0002)),
                ],
            )]),
        )
        .want(200, &[]),
        Case::push(
            "same timestamp twice with different values",
            write(vec![series(&[(METRIC_NAME, "dup_ts")], &[(now, 1.0), (now, 2.0)])]),
        )
        .want(400, &["err-heddle-sample-duplicate-timestamp"]),
        Case::push(
            "samples out of order within a series",
            write(vec![series(&[(METRIC_NAME, "ooo")], &[(now, 1.0), (now - 1000, 2.0)])]),
        )
        .want(400, &["err-heddle-sample-out-of-order"]),
        Case::push(
            "label value that is not UTF-8",
            write_raw_label(b"__name__", b"bad\xff\xfeutf8", now),
        )
        .want(
            400,
            &["err-heddle-invalid-protobuf", "invalid utf-8", "prometheus.Label.value"],
        ),
        Case::push(
            "label name with a dash",
            write(vec![series(&[(METRIC_NAME, "dash"), ("bad-name", "v")], &[(now, 1.0)])]),
        )
        .want(400, &["err-heddle-invalid-label", "bad-name"]),
        Case::push(
            "duplicate label names",
            write(vec![series(
                &[(METRIC_NAME, "dupl"), ("a", "1"), ("a", "2")],
                &[(now, 1.0)],
            )]),
        )
        .want(400, &["err-heddle-duplicate-label-names"]),
        Case::push(
            "sample at i64::MAX",
            write(vec![series(&[(METRIC_NAME, "far_future")], &[(i64::MAX, 1.0)])]),
        )
        .want(400, &["err-heddle-too-far-in-future"]),
        Case::push(
            "sample at i64::MIN into a fresh tenant, beside a valid one",
            write(vec![
                series(&[(METRIC_NAME, "ancient")], &[(i64::MIN, 1.0)]),
                series(&[(METRIC_NAME, "recent")], &[(now, 1.0)]),
            ]),
        )
        .tenants(&["fresh-tenant"])
        .want(400, &["err-heddle-sample-out-of-bounds", "-9223372036854775808"]),
        Case::read(
            "the valid sample beside the ancient one landed",
            &read_req(vec![query(now - hour, now + hour, vec![eq(METRIC_NAME, "recent")])]),
        )
        .tenants(&["fresh-tenant"])
        .want(200, &["recent"]),
        // Remote read.
        Case::read(
            "regex that does not compile",
            &read_req(vec![query(now - hour, now, vec![matcher(MatcherType::Re, "job", "(")])]),
        )
        .want(400, &["regex"]),
        Case::read(
            "query with no matchers",
            &read_req(vec![query(now - hour, now, vec![])]),
        )
        .want(400, &["matcher"]),
        Case::read(
            "a regex matching the empty string selects only the tenant's own series",
            &read_req(vec![query(
                now - hour,
                now + hour,
                vec![matcher(MatcherType::Re, "job", ".*")],
            )]),
        )
        .want(200, &["odd_values"])
        .lacks(&["witness_metric"]),
        Case::read(
            "start after end",
            &read_req(vec![query(now, now - hour, vec![all(".+")])]),
        )
        .want(200, &[])
        .lacks(&["witness_metric"]),
        Case::post(
            "read body that is not snappy",
            "/prometheus/api/v1/read",
            b"plain".to_vec(),
        )
        .header("Content-Type", PROTOBUF)
        .header("Content-Encoding", "snappy")
        .want(400, &["snappy"]),
        Case::post(
            "read body of garbage protobuf",
            "/prometheus/api/v1/read",
            snappy(&[0xff; 32]),
        )
        .header("Content-Type", PROTOBUF)
        .header("Content-Encoding", "snappy")
        .want(400, &["not a prometheus.ReadRequest"]),
        Case::read(
            "read without a tenant",
            &read_req(vec![query(now - hour, now, vec![all(".+")])]),
        )
        .tenants(&[])
        .want(401, &["no org id"]),
        Case::read(
            "fifty copies of a full scan share one fetch budget",
            &read_req(
                (0..50)
                    .map(|_| query(now - hour, now + hour, vec![all(".+")]))
                    .collect(),
            ),
        )
        .want(
            422,
            &[
                "err-heddle-max-series-per-query",
                "--querier.max-fetched-series-per-query",
            ],
        ),
        Case::read(
            "a regex of 100 KB",
            &read_req(vec![query(now - hour, now, vec![all(&"a|".repeat(50_000))])]),
        )
        .want(400, &["err-heddle-regex-too-long", "--querier.max-regex-length"]),
        // Series and label API.
        Case::get("series without match[]", "/prometheus/api/v1/series").want(400, &["match[]"]),
        Case::get(
            "series with a broken selector",
            "/prometheus/api/v1/series?match[]=%7Bjob%3D",
        )
        .want(400, &[]),
        Case::get(
            "series with start that is not a time",
            "/prometheus/api/v1/series?match[]=up&start=yesterday",
        )
        .want(400, &["start"]),
        Case::get(
            "values of an invalid label name",
            "/prometheus/api/v1/label/bad-name/values",
        )
        .want(400, &[]),
        // Admin routes need the token whichever way they are reached.
        Case::post("shutdown without the token", "/ingester/shutdown", Vec::new())
            .admin()
            .want(401, &["token"]),
        Case::post("shutdown with a wrong token", "/ingester/shutdown", Vec::new())
            .admin()
            .token("not-the-token")
            .want(401, &["token"]),
        Case::post("flush without the token", "/ingester/flush", Vec::new())
            .admin()
            .want(401, &["token"]),
        Case::post(
            "prepare-shutdown without the token",
            "/ingester/prepare-shutdown",
            Vec::new(),
        )
        .admin()
        .want(401, &["token"]),
        Case::post("flush with the token answers", "/ingester/flush?wait=true", Vec::new())
            .admin()
            .token(TOKEN)
            .want(204, &[]),
        // Plain HTTP.
        Case::new("GET on the push endpoint", Method::GET, "/api/v1/push").want(405, &[]),
        Case::get("a path that does not exist", "/api/v1/../../etc/passwd").want(404, &[]),
    ]
}

/// A write request with one series whose single label is given as raw bytes (not necessarily UTF-8).
fn write_raw_label(name: &[u8], value: &[u8], now: i64) -> Vec<u8> {
    fn field(tag: u8, bytes: &[u8], out: &mut Vec<u8>) {
        out.push(tag);
        prost::encoding::encode_varint(bytes.len() as u64, out);
        out.extend_from_slice(bytes);
    }
    let mut label = Vec::new();
    field(0x0a, name, &mut label);
    field(0x12, value, &mut label);
    let sample = heddle_proto::prometheus::Sample {
        value: 1.0,
        timestamp: now,
    }
    .encode_to_vec();
    let mut ts = Vec::new();
    field(0x0a, &label, &mut ts);
    field(0x12, &sample, &mut ts);
    let mut req = Vec::new();
    field(0x0a, &ts, &mut req);
    snappy(&req)
}

/// A gRPC call and the status code it must end with (the message must hold `contains`).
struct GrpcCase {
    name: &'static str,
    code: tonic::Code,
    contains: &'static str,
    /// `Some` when the call succeeded: what it answered, which must not hold the witness tenant's data.
    call: fn(std::net::SocketAddr) -> BoxedCall,
}

type BoxedCall = std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, tonic::Status>> + Send>>;

fn request<T>(msg: T, tenant: Option<&str>, authorization: Option<&str>) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    if let Some(t) = tenant {
        req.metadata_mut().insert("x-scope-orgid", t.parse().expect("ascii"));
    }
    if let Some(a) = authorization {
        req.metadata_mut().insert("authorization", a.parse().expect("ascii"));
    }
    req.set_timeout(Duration::from_secs(10));
    req
}

async fn admin(addr: std::net::SocketAddr) -> AdminClient<tonic::transport::Channel> {
    AdminClient::connect(format!("http://{addr}"))
        .await
        .expect("connect to Admin")
}

fn grpc_cases() -> Vec<GrpcCase> {
    vec![
        GrpcCase {
            name: "ingester LabelValues on the single process",
            code: tonic::Code::Unimplemented,
            contains: "",
            call: |addr| {
                Box::pin(async move {
                    let mut c = IngesterGrpc::connect(format!("http://{addr}")).await.expect("connect");
                    let req = LabelValuesRequest {
                        name: METRIC_NAME.into(),
                        start_timestamp_ms: 0,
                        end_timestamp_ms: i64::MAX,
                        matchers: vec![],
                    };
                    c.label_values(request(req, Some(WITNESS), None))
                        .await
                        .map(|r| format!("{:?}", r.into_inner().values))
                })
            },
        },
        GrpcCase {
            name: "admin ListTenants without the token",
            code: tonic::Code::Unauthenticated,
            contains: "err-heddle-admin-unauthenticated",
            call: |addr| {
                Box::pin(async move {
                    let r = admin(addr)
                        .await
                        .list_tenants(request(ListTenantsRequest {}, None, None))
                        .await;
                    r.map(|r| format!("{:?}", r.into_inner().tenants))
                })
            },
        },
        GrpcCase {
            name: "admin Shutdown with a wrong token",
            code: tonic::Code::Unauthenticated,
            contains: "err-heddle-admin-unauthenticated",
            call: |addr| {
                Box::pin(async move {
                    let req = request(ShutdownRequest {}, None, Some("Bearer guess"));
                    admin(addr).await.shutdown(req).await.map(|r| r.into_inner().message)
                })
            },
        },
        GrpcCase {
            name: "admin ForgetMember with the token in Basic form",
            code: tonic::Code::Unauthenticated,
            contains: "err-heddle-admin-unauthenticated",
            call: |addr| {
                Box::pin(async move {
                    let req = request(
                        ForgetMemberRequest { id: "x".into() },
                        None,
                        Some(&format!("Basic {TOKEN}")),
                    );
                    admin(addr).await.forget_member(req).await.map(|r| format!("{r:?}"))
                })
            },
        },
    ]
}

async fn send(http: &reqwest::Client, base: &str, case: &Case) -> (u16, String) {
    let mut req = http
        .request(case.method.clone(), format!("{base}{}", case.path))
        .body(case.body.clone());
    for (name, value) in &case.headers {
        req = req.header(*name, value);
    }
    match req.send().await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let bytes = resp.bytes().await.unwrap_or_default();
            // Remote-read answers are snappy protobuf: look at the decompressed bytes.
            let text = match snappy_decompress(&bytes) {
                Ok(raw) => String::from_utf8_lossy(&raw).into_owned(),
                Err(_) => String::from_utf8_lossy(&bytes).into_owned(),
            };
            (status, text)
        }
        Err(e) => (0, heddle_testkit::client::error_chain(&e)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_are_refused_and_harm_nobody() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("admin-token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("token file");
    let opts = HeddleOptions {
        multitenancy: true,
        args: vec![
            format!("--server.admin-token-file={}", token_file.display()),
            // Small enough that fifty copies of one full scan of the attacker's few series exceed it.
            format!("--querier.max-fetched-series-per-query={MAX_SERIES}"),
        ],
        ..HeddleOptions::default()
    };
    let mut heddle = tokio::task::spawn_blocking(move || HeddleProcess::start(opts))
        .await
        .expect("join")
        .expect("start heddle");
    let http = heddle_testkit::http_client_unpooled(Duration::from_secs(30)).expect("client");
    let now = now_ms();
    let witness_samples: Vec<(i64, f64)> = (0..WITNESS_SAMPLES as i64)
        .map(|i| (now - 60_000 + i * 1000, i as f64))
        .collect();
    let out = heddle_testkit::push(
        &http,
        &heddle.push_url(),
        Some(WITNESS),
        &WriteRequest {
            timeseries: vec![series(
                &[(METRIC_NAME, "witness_metric"), ("job", "w")],
                &witness_samples,
            )],
            ..Default::default()
        },
    )
    .await
    .expect("push witness");
    assert_eq!(out.status, 200, "witness push: {}", out.body);

    let base = format!("http://{}", heddle.http_addr());
    let mut failures = Vec::new();
    let cases = cases(now);
    for case in &cases {
        let (status, text) = send(&http, &base, case).await;
        if status != case.status {
            failures.push(format!(
                "{:?}: status {status}, want {}: {text}",
                case.name, case.status
            ));
            continue;
        }
        for want in &case.contains {
            if !text.contains(want) {
                failures.push(format!("{:?}: answer lacks {want:?}: {text}", case.name));
            }
        }
        for word in &case.lacks {
            if text.contains(word) {
                failures.push(format!("{:?}: answer holds {word:?}: {text}", case.name));
            }
        }
    }
    let grpc = grpc_cases();
    for case in &grpc {
        match (case.call)(heddle.grpc_addr()).await {
            Ok(answer) => failures.push(format!("{:?}: answered {answer}, want {:?}", case.name, case.code)),
            Err(status) if status.code() != case.code => failures.push(format!(
                "{:?}: status {:?}, want {:?}: {}",
                case.name,
                status.code(),
                case.code,
                status.message()
            )),
            Err(status) if !status.message().contains(case.contains) => failures.push(format!(
                "{:?}: message lacks {:?}: {}",
                case.name,
                case.contains,
                status.message()
            )),
            Err(_) => {}
        }
    }
    assert!(
        heddle.is_running(),
        "a case stopped the process: {}",
        heddle.log_tail(30)
    );
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}\n{}",
        failures.len(),
        cases.len() + grpc.len(),
        failures.join("\n"),
        heddle.log_tail(20)
    );
    let ready = http.get(format!("{base}/ready")).send().await.expect("ready");
    assert_eq!(ready.status().as_u16(), 200, "still ready after the cases");
    let reader = ReadClient::new(
        http_client(Duration::from_secs(30)).expect("client"),
        &heddle.prometheus_url(),
        Some(WITNESS),
    );
    let got = reader
        .read(
            ReadMode::Samples,
            vec![query(
                now - 3_600_000,
                now + 3_600_000,
                vec![matcher(MatcherType::Re, METRIC_NAME, ".+")],
            )],
        )
        .await
        .expect("read witness");
    let series: Vec<_> = got.into_iter().flatten().collect();
    assert_eq!(
        series.len(),
        1,
        "the witness tenant holds only its own series: {series:?}"
    );
    let samples: Vec<(i64, f64)> = series[0].samples.iter().map(|s| (s.t, s.v)).collect();
    assert_eq!(samples, witness_samples, "the witness samples are intact");
    assert!(cases.len() + grpc.len() >= 40, "{} cases", cases.len() + grpc.len());
}
