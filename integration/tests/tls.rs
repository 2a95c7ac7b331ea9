//! Mutual TLS on gRPC against real processes, with certificates made by `openssl` in the test: a heddle whose
//! listeners require client certificates of its CA answers `heddlectl` presenting one, and refuses (and does
//! nothing for) a caller with no certificate, a certificate of another CA, or no TLS at all; a cluster whose
//! distributor and querier dial the ingester over mutual TLS takes a push to quorum and reads it back, and the
//! same cluster with the distributor's client TLS off fails the push with 5xx rather than sending in plain text.

use heddle_proto::prometheus::{Label, Sample, TimeSeries, WriteRequest};
use heddle_proto::transport::{ClientTls, grpc_endpoint};
use heddle_testkit::{
    Cluster, ClusterOptions, CommandOutput, HeddleOptions, HeddleProcess, ReadClient, ReadMode, TestPki, cargo_bin, eq,
    free_port, http_client, now_ms, push, query, run_bounded,
};
use std::process::Command;
use std::time::Duration;

const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// One multi-process test at a time: two at once on a small machine would measure CPU starvation. (An async
/// mutex: the guard is held across awaits, and a failed test does not poison it.)
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn heddlectl(addr: &str, tls: &[String], args: &[&str]) -> CommandOutput {
    let mut cmd = Command::new(cargo_bin("heddlectl").expect("build heddlectl"));
    cmd.arg(format!("--addr={addr}"))
        .arg("--timeout-s=10")
        .args(tls)
        .args(args);
    run_bounded(cmd, CALL_TIMEOUT).expect("run heddlectl")
}

fn code(out: &CommandOutput) -> i32 {
    out.status.code().unwrap_or(-1)
}

/// `GET /ingester/prepare-shutdown` on the admin listener, which serves the admin HTTP routes over the same TLS
/// (HTTP/2, presenting the client certificate of `tls`): `set` or `unset`.
async fn prepare_shutdown_state(admin: &str, tls: &ClientTls) -> String {
    use tonic::codegen::{Body as _, Service as _, http};
    let call = async {
        let mut channel = grpc_endpoint(admin, Some(tls)).unwrap().connect().await.unwrap();
        let uri = format!("https://{admin}/ingester/prepare-shutdown");
        let request = http::Request::get(uri).body(tonic::body::Body::empty()).unwrap();
        std::future::poll_fn(|cx| channel.poll_ready(cx)).await.unwrap();
        let response = channel.call(request).await.unwrap();
        assert_eq!(response.status(), 200, "prepare-shutdown on the admin listener");
        let mut body = response.into_body();
        let mut text = Vec::new();
        while let Some(frame) = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await {
            if let Ok(data) = frame.unwrap().into_data() {
                text.extend_from_slice(&data);
            }
        }
        String::from_utf8_lossy(&text).into_owned()
    };
    tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("no answer within 10s")
}

/// `grpc.health.v1.Health/Check` on `addr` over TLS; `Err` carries the failure text.
async fn health(addr: &str, tls: Option<&ClientTls>) -> Result<i32, String> {
    let call = async {
        let channel = grpc_endpoint(addr, tls)
            .map_err(|e| e.to_string())?
            .connect()
            .await
            .map_err(|e| heddle_proto::transport::describe_error(&e))?;
        tonic_health::pb::health_client::HealthClient::new(channel)
            .check(tonic_health::pb::HealthCheckRequest { service: String::new() })
            .await
            .map(|r| r.into_inner().status)
            .map_err(|s| heddle_proto::transport::describe_error(&s))
    };
    tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .unwrap_or_else(|_| Err("no answer within 10s".into()))
}

#[tokio::test(flavor = "multi_thread")]
async fn mtls_listeners_refuse_callers_without_a_certificate_of_the_ca() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::generate(&dir.path().join("pki"), "heddle-test-ca").expect("test pki");
    let other = TestPki::generate(&dir.path().join("other"), "other-ca").expect("second pki");
    let admin_port = free_port().unwrap();
    let mut args = pki.server_args();
    args.extend([
        "--server.admin-grpc-listen-address=127.0.0.1".to_owned(),
        format!("--server.admin-grpc-listen-port={admin_port}"),
    ]);
    let mut h = HeddleProcess::start(HeddleOptions {
        args,
        ..HeddleOptions::default()
    })
    .expect("start heddle with gRPC mTLS");
    let admin = format!("127.0.0.1:{admin_port}");

    // A client certificate of the CA: the admin listener answers.
    let good = pki.heddlectl_args();
    let out = heddlectl(&admin, &good, &["version", "--output=json"]);
    assert_eq!(code(&out), 0, "mtls version: {}", out.stderr);
    assert!(out.stdout.contains("\"target\""), "{}", out.stdout);
    let out = heddlectl(&admin, &good, &["ring"]);
    assert_eq!(code(&out), 0, "mtls ring: {}", out.stderr);

    // Refused callers: exit 4 with a message saying the TLS handshake failed, or (plain text) not 0; a refused
    // prepare-shutdown or shutdown changes nothing.
    let no_cert = vec![format!("--tls-ca-path={}", pki.ca_cert.display())];
    let cases: &[(&str, &[String], i32)] = &[
        ("no client certificate", &no_cert, 4),
        ("certificate of another CA", &other.heddlectl_args(), 4),
        ("plain text", &[], 3),
    ];
    for (name, tls, want) in cases {
        for command in ["prepare-shutdown", "shutdown"] {
            let out = heddlectl(&admin, tls, &[command]);
            assert_eq!(code(&out), *want, "{name} {command}: {}", out.stderr);
            if *want == 4 {
                assert!(out.stderr.contains("TLS handshake"), "{name} {command}: {}", out.stderr);
            }
            assert_eq!(
                prepare_shutdown_state(&admin, &pki.client_tls().unwrap()).await,
                "unset",
                "{name} {command} changed state"
            );
            assert!(h.is_running(), "{name} {command} stopped heddle");
        }
    }
    // Only the trusted caller changes state.
    let out = heddlectl(&admin, &good, &["prepare-shutdown"]);
    assert_eq!(code(&out), 0, "mtls prepare-shutdown: {}", out.stderr);
    assert_eq!(prepare_shutdown_state(&admin, &pki.client_tls().unwrap()).await, "set");

    // The main gRPC listener (ingester API and health) requires the same.
    let main = h.grpc_addr().to_string();
    let serving = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
    assert_eq!(health(&main, Some(&pki.client_tls().unwrap())).await, Ok(serving));
    let err = health(&main, Some(&other.client_tls().unwrap()))
        .await
        .expect_err("other CA");
    assert!(!err.is_empty());
    health(&main, None).await.expect_err("plain text on a TLS port");

    // An unusable certificate file stops the start, naming the flag and the path.
    let missing = dir.path().join("missing.crt");
    let mut cmd = Command::new(cargo_bin("heddle").unwrap());
    cmd.args([
        "--server.http-listen-address=127.0.0.1".to_owned(),
        format!("--server.http-listen-port={}", free_port().unwrap()),
        "--server.grpc-listen-address=127.0.0.1".to_owned(),
        format!("--server.grpc-listen-port={}", free_port().unwrap()),
        format!("--blocks-storage.tsdb.dir={}", dir.path().join("tsdb").display()),
        format!(
            "--blocks-storage.filesystem.dir={}",
            dir.path().join("bucket").display()
        ),
        format!("--server.grpc-tls-cert-path={}", missing.display()),
        format!("--server.grpc-tls-key-path={}", pki.server_key.display()),
    ]);
    let out = run_bounded(cmd, CALL_TIMEOUT).expect("heddle exits on a missing certificate");
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("--server.grpc-tls-cert-path") && out.stderr.contains(&missing.display().to_string()),
        "{}",
        out.stderr
    );
}

fn sample_request(name: &str, ts: i64) -> WriteRequest {
    WriteRequest {
        timeseries: vec![TimeSeries {
            labels: vec![Label {
                name: "__name__".into(),
                value: name.into(),
            }],
            samples: vec![Sample {
                value: 42.0,
                timestamp: ts,
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn tls_cluster(pki: &TestPki, ingester_client_tls: bool) -> Cluster {
    Cluster::start(ClusterOptions {
        ingesters: 1,
        distributors: 1,
        replication_factor: 1,
        tls: Some(pki.clone()),
        ingester_client_tls,
        ..ClusterOptions::default()
    })
    .expect("start the cluster")
}

#[tokio::test(flavor = "multi_thread")]
async fn distributor_and_querier_reach_ingesters_over_mtls_only() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::generate(dir.path(), "heddle-cluster-ca").expect("test pki");
    let http = http_client(CALL_TIMEOUT).unwrap();
    let ts = now_ms();

    let cluster = tls_cluster(&pki, true);
    let out = push(
        &http,
        &cluster.distributor(0).push_url(),
        None,
        &sample_request("tls_probe", ts),
    )
    .await
    .unwrap();
    assert_eq!(out.status, 200, "push over mTLS: {}", out.body);
    let read = ReadClient::new(http.clone(), &cluster.querier().prometheus_url(), None);
    let result = read
        .read(
            ReadMode::Samples,
            vec![query(ts - 1, ts + 1, vec![eq("__name__", "tls_probe")])],
        )
        .await
        .expect("read back through the querier");
    let samples: Vec<(i64, f64)> = result[0]
        .iter()
        .flat_map(|s| s.samples.iter().map(|x| (x.t, x.v)))
        .collect();
    assert_eq!(samples, vec![(ts, 42.0)], "{result:?}");
    drop(cluster);

    // The same cluster, but the distributor (and querier) dial the TLS ingester in plain text: refused.
    let cluster = tls_cluster(&pki, false);
    let out = push(
        &http,
        &cluster.distributor(0).push_url(),
        None,
        &sample_request("plain_probe", ts),
    )
    .await
    .unwrap();
    assert!(
        (500..600).contains(&out.status),
        "a push the distributor cannot deliver over TLS must fail with 5xx, got {}: {}",
        out.status,
        out.body
    );
    let read = ReadClient::new(http.clone(), &cluster.querier().prometheus_url(), None);
    let result = read
        .read(
            ReadMode::Samples,
            vec![query(ts - 1, ts + 1, vec![eq("__name__", "plain_probe")])],
        )
        .await;
    assert!(
        result.as_ref().map_or(true, |r| r[0].is_empty()),
        "the plain-text querier read {result:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn client_auth_policies_other_than_require_and_verify() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::generate(&dir.path().join("pki"), "heddle-test-ca").expect("test pki");
    let other = TestPki::generate(&dir.path().join("other"), "other-ca").expect("second pki");
    let tls_args = |auth: &str| {
        vec![
            format!("--server.grpc-tls-cert-path={}", pki.server_cert.display()),
            format!("--server.grpc-tls-key-path={}", pki.server_key.display()),
            format!("--server.grpc-tls-client-auth={auth}"),
            format!("--server.grpc-tls-ca-path={}", pki.ca_cert.display()),
        ]
    };

    // VerifyClientCertIfGiven: no certificate is let through, a certificate of another CA is not.
    let h = HeddleProcess::start(HeddleOptions {
        args: tls_args("VerifyClientCertIfGiven"),
        ..HeddleOptions::default()
    })
    .expect("start heddle");
    let addr = h.grpc_addr().to_string();
    let ca_only = vec![format!("--tls-ca-path={}", pki.ca_cert.display())];
    let cases: &[(&str, Vec<String>, i32)] = &[
        ("no client certificate", ca_only, 0),
        ("certificate of the CA", pki.heddlectl_args(), 0),
        ("certificate of another CA", other.heddlectl_args(), 4),
    ];
    for (name, tls, want) in cases {
        let out = heddlectl(&addr, tls, &["version"]);
        assert_eq!(code(&out), *want, "{name}: {}", out.stderr);
    }
    drop(h);

    // Policies that accept unverified certificates, and a CA without a policy, do not start.
    for (name, args, want) in [
        (
            "RequireAnyClientCert",
            tls_args("RequireAnyClientCert"),
            "not supported",
        ),
        ("RequestClientCert", tls_args("RequestClientCert"), "not supported"),
        ("CA without a policy", tls_args("NoClientCert"), "client_auth_type"),
    ] {
        let mut cmd = Command::new(cargo_bin("heddle").unwrap());
        cmd.args(args);
        let out = run_bounded(cmd, CALL_TIMEOUT).expect("heddle exits on an invalid TLS config");
        assert_eq!(out.status.code(), Some(2), "{name}: {}", out.stderr);
        assert!(out.stderr.contains(want), "{name}: {}", out.stderr);
    }
}
