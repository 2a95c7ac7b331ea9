//! The operator API against a real heddle: `heddlectl` (the real binary) drives the gRPC Admin service,
//! Mimir's `/ingester/*` HTTP endpoints share its state, the gRPC health service reports SERVING, and with
//! `--server.admin-token-file` an unauthenticated call is refused and changes nothing.

use heddle_proto::prometheus::{Label, Sample, TimeSeries, WriteRequest};
use heddle_testkit::{
    CommandOutput, HeddleOptions, HeddleProcess, cargo_bin, free_port, http_client, push, run_bounded, wait_until,
};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const CALL_TIMEOUT: Duration = Duration::from_secs(30);

fn heddlectl(addr: &str, token: Option<&Path>, args: &[&str]) -> CommandOutput {
    let mut cmd = Command::new(cargo_bin("heddlectl").expect("build heddlectl"));
    cmd.arg(format!("--addr={addr}")).arg("--timeout-s=10");
    if let Some(t) = token {
        cmd.arg(format!("--token-file={}", t.display()));
    }
    cmd.args(args);
    run_bounded(cmd, CALL_TIMEOUT).expect("run heddlectl")
}

fn code(out: &CommandOutput) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn json(out: &CommandOutput) -> Value {
    assert_eq!(code(out), 0, "heddlectl failed: {}\n{}", out.stdout, out.stderr);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", out.stdout))
}

fn series(name: &str, samples: &[(i64, f64)]) -> WriteRequest {
    WriteRequest {
        timeseries: vec![TimeSeries {
            labels: vec![Label {
                name: "__name__".into(),
                value: name.into(),
            }],
            samples: samples
                .iter()
                .map(|&(timestamp, value)| Sample { value, timestamp })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

async fn http(method: reqwest::Method, url: &str, token: Option<&str>) -> (u16, String) {
    let mut req = http_client(CALL_TIMEOUT).expect("http client").request(method, url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap_or_else(|e| panic!("{url}: {e}"));
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap_or_default())
}

/// Mimir's `POST /ingester/shutdown` on `addr` answers 204 and the process exits.
async fn shutdown_on(h: &mut HeddleProcess, addr: &str, token: Option<&str>) {
    let (status, body) = http(
        reqwest::Method::POST,
        &format!("http://{addr}/ingester/shutdown"),
        token,
    )
    .await;
    assert_eq!(status, 204, "{body}");
    assert!(
        wait_exit(h),
        "heddle still running after /ingester/shutdown:\n{}",
        h.log_tail(20)
    );
}

fn wait_exit(h: &mut HeddleProcess) -> bool {
    wait_until(Duration::from_secs(30), || !h.is_running())
}

#[tokio::test(flavor = "multi_thread")]
async fn heddlectl_drives_a_running_heddle() {
    let mut h = HeddleProcess::start(HeddleOptions {
        multitenancy: true,
        args: vec!["--ingester.ring.instance-id=admin-test-1".into()],
        ..HeddleOptions::default()
    })
    .expect("start heddle");
    let client = http_client(CALL_TIMEOUT).expect("http client");
    // Recent timestamps: a fresh tenant's empty head refuses samples older than one block range.
    let t0 = heddle_testkit::now_ms() - 60_000;
    for (tenant, samples) in [
        ("alpha", &[(t0, 1.0), (t0 + 1000, 2.0)][..]),
        ("beta", &[(t0, 5.0)][..]),
    ] {
        let out = push(&client, &h.push_url(), Some(tenant), &series("up", samples))
            .await
            .unwrap();
        assert_eq!(out.status, 200, "push {tenant}: {}", out.body);
    }
    let addr = h.grpc_addr().to_string();

    // gRPC health: the standard service reports SERVING once the ingester is ready.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let health = tonic_health::pb::health_client::HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest { service: String::new() })
        .await
        .expect("health check");
    assert_eq!(
        health.into_inner().status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    let v = json(&heddlectl(&addr, None, &["version", "--output=json"]));
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["target"], "all");
    assert!(v["rustc"].as_str().unwrap().starts_with("rustc "), "{v}");
    let out = heddlectl(&addr, None, &["version"]);
    assert!(out.stdout.contains("server:    heddle"), "{}", out.stdout);

    let v = json(&heddlectl(&addr, None, &["tenants", "--output=json"]));
    assert_eq!(v["tenants"], serde_json::json!(["alpha", "beta"]));
    let table = heddlectl(&addr, None, &["tenants"]);
    assert_eq!(table.stdout.trim(), "TENANT\nalpha\nbeta");

    let v = json(&heddlectl(&addr, None, &["stats", "alpha", "--output=json"]));
    assert_eq!(
        (v["series"].as_u64(), v["samples_appended"].as_u64()),
        (Some(1), Some(2)),
        "{v}"
    );
    assert_eq!(
        (v["head_min_time_ms"].as_i64(), v["head_max_time_ms"].as_i64()),
        (Some(t0), Some(t0 + 1000))
    );
    assert!(v["wal_bytes"].as_u64().unwrap() > 0, "{v}");

    let v = json(&heddlectl(&addr, None, &["ring", "--output=json"]));
    assert_eq!(v["backend"], "local");
    // The single process's member is named as `--ingester.ring.instance-id` says (the hostname by default).
    let member = v["members"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(member, "admin-test-1", "{v}");
    assert_eq!(v["members"][0]["state"], "ACTIVE");
    assert_eq!(v["members"][0]["ownership_percent"], 100.0);
    let table = heddlectl(&addr, None, &["ring"]);
    assert!(table.stdout.starts_with("ID"), "{}", table.stdout);

    let v = json(&heddlectl(
        &addr,
        None,
        &["flush", "--tenant=alpha", "--wait", "--output=json"],
    ));
    assert_eq!(v["tenants"], serde_json::json!(["alpha"]));
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("into 1 block(s); 1 block(s) uploaded"),
        "{v}"
    );
    let v = json(&heddlectl(&addr, None, &["snapshot", "--output=json"]));
    assert_eq!(v["tenants"], serde_json::json!(["alpha", "beta"]));

    // Errors: exit 1 with the gRPC code and an actionable message; usage 2; unreachable 3.
    let cases: &[(&str, &[&str], i32, &str)] = &[
        (
            "unknown tenant",
            &["stats", "nobody"],
            1,
            "notfound: tenant nobody has no head",
        ),
        ("invalid tenant", &["stats", "a/b"], 1, "invalidargument"),
        ("forget self", &["forget", &member], 1, "failedprecondition"),
        ("forget unknown", &["forget", "ghost"], 1, "notfound"),
        ("unknown command", &["bogus"], 2, ""),
        ("missing argument", &["stats"], 2, ""),
    ];
    for (name, args, want, stderr) in cases {
        let out = heddlectl(&addr, None, args);
        assert_eq!(code(&out), *want, "case {name}: {}", out.stderr);
        assert!(out.stderr.contains(stderr), "case {name}: {}", out.stderr);
    }
    let dead = format!("127.0.0.1:{}", free_port().unwrap());
    let out = heddlectl(&dead, None, &["version"]);
    assert_eq!(code(&out), 3, "unreachable: {}", out.stderr);

    // Prepare-shutdown state is shared between gRPC and Mimir's HTTP endpoint.
    let url = format!("{}/ingester/prepare-shutdown", h.url());
    assert_eq!(http(reqwest::Method::GET, &url, None).await, (200, "unset".into()));
    assert_eq!(http(reqwest::Method::POST, &url, None).await.0, 204);
    assert_eq!(http(reqwest::Method::GET, &url, None).await, (200, "set".into()));
    assert_eq!(http(reqwest::Method::DELETE, &url, None).await.0, 204);
    let v = json(&heddlectl(&addr, None, &["prepare-shutdown", "--output=json"]));
    assert_eq!(v["prepared"], true);
    assert_eq!(http(reqwest::Method::GET, &url, None).await, (200, "set".into()));
    let v = json(&heddlectl(&addr, None, &["cancel-prepare-shutdown", "--output=json"]));
    assert_eq!(v["prepared"], false);
    assert_eq!(http(reqwest::Method::GET, &url, None).await, (200, "unset".into()));
    let flush = format!("{}/ingester/flush?tenant=alpha&wait=true", h.url());
    assert_eq!(http(reqwest::Method::POST, &flush, None).await.0, 204);
    assert_eq!(
        http(reqwest::Method::GET, &format!("{}/ingester/flush", h.url()), None)
            .await
            .0,
        204
    );

    // Shutdown stops the process gracefully, and what was pushed is there after a restart.
    let out = heddlectl(&addr, None, &["shutdown"]);
    assert_eq!(code(&out), 0, "{}", out.stderr);
    assert!(
        wait_exit(&mut h),
        "heddle still running after Shutdown:\n{}",
        h.log_tail(20)
    );
    h.restart().expect("restart");
    // Shutdown flushed every head into blocks (and shipped them), so the head starts empty and the sample is
    // answered from the blocks.
    let addr = h.grpc_addr().to_string();
    let v = json(&heddlectl(&addr, None, &["stats", "beta", "--output=json"]));
    assert_eq!(v["series"].as_u64(), Some(0), "{v}");
    let resp = client
        .get(format!(
            "{}/api/v1/series?match[]=up&start={}&end={}",
            h.prometheus_url(),
            t0 / 1000 - 60,
            t0 / 1000 + 60
        ))
        .header("X-Scope-OrgID", "beta")
        .send()
        .await
        .expect("series request");
    let body: serde_json::Value = serde_json::from_str(&resp.text().await.expect("series body")).expect("series JSON");
    assert_eq!(body["data"], serde_json::json!([{"__name__": "up"}]), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn admin_token_and_separate_listener() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "letmein\n").unwrap();
    let wrong_file = dir.path().join("wrong");
    std::fs::write(&wrong_file, "guess").unwrap();
    let admin_port = free_port().unwrap();
    let mut h = HeddleProcess::start(HeddleOptions {
        args: vec![
            "--server.admin-grpc-listen-address=127.0.0.1".into(),
            format!("--server.admin-grpc-listen-port={admin_port}"),
            format!("--server.admin-token-file={}", token_file.display()),
        ],
        ..HeddleOptions::default()
    })
    .expect("start heddle");
    let admin = format!("127.0.0.1:{admin_port}");
    // Admin HTTP routes live on the admin listener too; the public port refuses them whatever the token.
    let prepare_url = format!("http://{admin}/ingester/prepare-shutdown");

    // Unauthenticated or wrongly authenticated: refused with exit 4, and nothing changes.
    for (name, token) in [("no token", None), ("wrong token", Some(wrong_file.as_path()))] {
        for args in [&["prepare-shutdown"][..], &["shutdown"], &["tenants"]] {
            let out = heddlectl(&admin, token, args);
            assert_eq!(code(&out), 4, "{name} {args:?}: {}", out.stderr);
            assert!(out.stderr.contains("unauthenticated"), "{name}: {}", out.stderr);
        }
    }
    assert!(h.is_running(), "an unauthenticated Shutdown stopped the process");
    assert_eq!(http(reqwest::Method::GET, &prepare_url, None).await.0, 401);
    assert_eq!(
        http(
            reqwest::Method::POST,
            &format!("http://{admin}/ingester/shutdown"),
            Some("guess")
        )
        .await
        .0,
        401
    );
    for token in [None, Some("letmein")] {
        let (status, body) = http(reqwest::Method::POST, &format!("{}/ingester/shutdown", h.url()), token).await;
        assert_eq!(status, 403, "public port, token {token:?}: {body}");
        assert!(body.starts_with("err-heddle-admin-listener-only"), "{body}");
    }
    assert_eq!(
        http(reqwest::Method::GET, &prepare_url, Some("letmein")).await,
        (200, "unset".into()),
        "refused calls changed the prepare-shutdown state"
    );
    assert!(h.is_running(), "an unauthenticated HTTP shutdown stopped the process");

    // The Admin service is only on its own listener; the main port answers Unimplemented (exit 1).
    let out = heddlectl(&h.grpc_addr().to_string(), Some(&token_file), &["version"]);
    assert_eq!(code(&out), 1, "{}", out.stderr);
    assert!(out.stderr.contains("unimplemented"), "{}", out.stderr);

    let v = json(&heddlectl(&admin, Some(&token_file), &["version", "--output=json"]));
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));

    // Mimir's shutdown endpoint, authenticated, on the admin listener, stops the process.
    shutdown_on(&mut h, &admin, Some("letmein")).await;
}

/// The lockdown of admin calls to a private listener, without a token: every admin route on the public HTTP
/// port is refused (403, naming the listener, counted) and changes nothing; the admin listener serves them.
#[tokio::test(flavor = "multi_thread")]
async fn the_admin_listener_lockdown_holds_on_the_public_http_port() {
    let admin_port = free_port().unwrap();
    let mut h = HeddleProcess::start(HeddleOptions {
        args: vec![
            "--server.admin-grpc-listen-address=127.0.0.1".into(),
            format!("--server.admin-grpc-listen-port={admin_port}"),
        ],
        ..HeddleOptions::default()
    })
    .expect("start heddle");
    let admin = format!("127.0.0.1:{admin_port}");
    let public = [
        (reqwest::Method::POST, "/ingester/shutdown"),
        (reqwest::Method::POST, "/ingester/flush"),
        (reqwest::Method::POST, "/ingester/prepare-shutdown"),
        (reqwest::Method::GET, "/ingester/prepare-shutdown"),
        (reqwest::Method::GET, "/ingester/ring"),
        (reqwest::Method::POST, "/ingester/ring"),
    ];
    for (method, path) in &public {
        let (status, body) = http(method.clone(), &format!("{}{path}", h.url()), None).await;
        assert_eq!(status, 403, "{method} {path}: {body}");
        assert!(body.starts_with("err-heddle-admin-listener-only"), "{body}");
        assert!(
            body.contains(&admin) && body.contains("--server.admin-grpc-listen-port"),
            "{body}"
        );
    }
    assert!(h.is_running(), "a refused /ingester/shutdown stopped the process");
    let metrics = http(reqwest::Method::GET, &format!("{}/metrics", h.url()), None)
        .await
        .1;
    let want = format!(
        "heddle_auth_refused_requests_total{{api=\"admin_http\",reason=\"admin_listener_only\"}} {}",
        public.len()
    );
    assert!(metrics.contains(&want), "{want} not in the metrics");
    // Nothing changed: prepare-shutdown is still unset, read on the admin listener.
    let prepare_url = format!("http://{admin}/ingester/prepare-shutdown");
    assert_eq!(
        http(reqwest::Method::GET, &prepare_url, None).await,
        (200, "unset".into())
    );
    let (status, body) = http(reqwest::Method::GET, &format!("http://{admin}/ingester/ring"), None).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("<table"), "{body}");
    shutdown_on(&mut h, &admin, None).await;
}
