//! The internal ingester gRPC API has no open door, against real `heddle` processes:
//! - a multitenant cluster with `--server.cluster-token-file`: a caller without the token (or with another)
//!   cannot read another tenant's label values or push over the ingester gRPC API (`Unauthenticated`, counted),
//!   while the distributor and querier, which send it, write and read as before; two `x-scope-orgid` values are
//!   refused even with the token;
//! - a multitenant cluster process without any credentials refuses to start and names both options, and one
//!   with a cluster token but no gossip key refuses too (the token would travel to any stranger that joins the
//!   ring as an ingester);
//! - the single process does not serve the ingester API at all; a clustered `--target=all` serves it, with the
//!   token only.
//!
//! The calls use the generated tonic client of `heddle_proto` directly, as an attacker on the network would.

use heddle_proto::ingester::LabelValuesRequest;
use heddle_proto::ingester::ingester_client::IngesterClient as GeneratedIngesterClient;
use heddle_proto::prometheus::WriteRequest;
use heddle_proto::{GrpcIngesterClient, IngesterClient as _};
use heddle_testkit::{
    Cluster, ClusterOptions, HeddleOptions, HeddleProcess, cargo_bin, free_port, http_client, http_get, push,
    run_bounded,
};
use std::process::Command;
use std::time::Duration;
use tonic::Code;
use tonic::metadata::MetadataValue;

const TIMEOUT: Duration = Duration::from_secs(30);
const TOKEN: &str = "cluster-s3cret-7f2a";
const ID: &str = "err-heddle-cluster-unauthenticated";

fn series(name: &str, job: &str) -> WriteRequest {
    WriteRequest {
        timeseries: vec![heddle_testkit::timeseries(
            &[("__name__", name), ("job", job)],
            &[(heddle_testkit::now_ms(), 1.0)],
        )],
        ..Default::default()
    }
}

/// `LabelValues(job)` of `tenants` (one `x-scope-orgid` value each) with `authorization` if given.
async fn label_values(
    addr: std::net::SocketAddr,
    tenants: &[&str],
    authorization: Option<&str>,
) -> Result<Vec<String>, tonic::Status> {
    let mut client = GeneratedIngesterClient::connect(format!("http://{addr}"))
        .await
        .expect("connect to the ingester");
    let mut req = tonic::Request::new(LabelValuesRequest {
        name: "job".into(),
        start_timestamp_ms: 0,
        end_timestamp_ms: i64::MAX,
        matchers: vec![],
    });
    for t in tenants {
        req.metadata_mut()
            .append("x-scope-orgid", MetadataValue::try_from(*t).unwrap());
    }
    if let Some(a) = authorization {
        req.metadata_mut()
            .insert("authorization", MetadataValue::try_from(a).unwrap());
    }
    req.set_timeout(Duration::from_secs(10));
    client.label_values(req).await.map(|r| r.into_inner().values)
}

/// A gossip key file in `dir`: a cluster token travels only over signed gossip.
fn gossip_key(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("gossip-key");
    std::fs::write(&path, "gossip-key-of-this-test-cluster\n").unwrap();
    path
}

fn refusals(metrics: &str, reason: &str) -> u64 {
    let key = format!("heddle_auth_refused_requests_total{{api=\"ingester_grpc\",reason=\"{reason}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(key.as_str()))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

#[tokio::test(flavor = "multi_thread")]
async fn another_tenants_data_cannot_be_read_over_grpc_without_the_cluster_token() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("cluster-token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let cluster = Cluster::start(ClusterOptions {
        ingesters: 1,
        distributors: 1,
        replication_factor: 1,
        args: vec![
            "--auth.multitenancy-enabled".into(),
            format!("--server.cluster-token-file={}", token_file.display()),
            format!("--memberlist.cluster-key-file={}", gossip_key(dir.path()).display()),
        ],
        ..ClusterOptions::default()
    })
    .expect("start the cluster");
    let http = http_client(TIMEOUT).unwrap();
    // The distributor sends the token: tenant alpha's write reaches the ingester.
    let out = push(
        &http,
        &cluster.distributor(0).push_url(),
        Some("alpha"),
        &series("up", "alpha-secret-job"),
    )
    .await
    .unwrap();
    assert_eq!(out.status, 200, "push through the distributor: {}", out.body);

    let ingester = cluster.ingester(0).grpc_addr();
    // Without credentials, with another token, or with the admin scheme: refused before any data is read.
    for (name, auth) in [
        ("no token", None),
        ("wrong token", Some("Bearer guess")),
        ("not bearer", Some("Basic Y2x1c3Rlcg==")),
    ] {
        let status = label_values(ingester, &["alpha"], auth)
            .await
            .expect_err(&format!("{name}: another tenant's label values came back"));
        assert_eq!(status.code(), Code::Unauthenticated, "{name}: {status:?}");
        assert!(status.message().starts_with(ID), "{name}: {}", status.message());
        assert!(
            status.message().contains("--server.cluster-token-file"),
            "{name}: {}",
            status.message()
        );
        assert!(!status.message().contains("alpha-secret-job"), "{name}");
    }
    // Writing as any tenant is refused the same way (the client of distributors, without credentials).
    let raw = GrpcIngesterClient::connect_lazy(&ingester.to_string(), Duration::from_secs(10)).unwrap();
    let tenant = heddle_model::TenantId::new("alpha").unwrap();
    let body = prost::Message::encode_to_vec(&series("injected", "x"));
    let status = raw
        .push(&tenant, body.into())
        .await
        .expect_err("an unauthenticated push was accepted");
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");

    // With the token the same call answers, for the tenant named only.
    let bearer = format!("Bearer {TOKEN}");
    let values = label_values(ingester, &["alpha"], Some(&bearer))
        .await
        .expect("with the token");
    assert_eq!(values, vec!["alpha-secret-job".to_owned()]);
    let values = label_values(ingester, &["beta"], Some(&bearer))
        .await
        .expect("with the token");
    assert!(values.is_empty(), "tenant beta sees alpha's values: {values:?}");
    // Two tenant ids in one call are refused even with the token.
    let status = label_values(ingester, &["beta", "alpha"], Some(&bearer))
        .await
        .expect_err("two x-scope-orgid values were accepted");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("2 values"), "{}", status.message());

    // The querier sends the token too: reads through it work, and alpha's data stays alpha's.
    let values_url = format!("{}/prometheus/api/v1/label/job/values", cluster.querier().url());
    for (tenant, want) in [("alpha", "[\"alpha-secret-job\"]"), ("beta", "[]")] {
        let resp = http
            .get(&values_url)
            .header("X-Scope-OrgID", tenant)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{tenant}");
        let body: serde_json::Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
        assert_eq!(body["data"].to_string(), want, "{tenant}: {body}");
    }
    // The unauthenticated raw push stored nothing.
    let values = label_values(ingester, &["alpha"], Some(&bearer)).await.unwrap();
    assert_eq!(
        values,
        vec!["alpha-secret-job".to_owned()],
        "the refused push was ingested"
    );

    let (_, metrics) = http_get(cluster.ingester(0).http_addr(), "/metrics", TIMEOUT).unwrap();
    assert_eq!(refusals(&metrics, "missing_token"), 3, "no token, not bearer, raw push");
    assert_eq!(refusals(&metrics, "wrong_token"), 1);
}

#[test]
fn a_multitenant_cluster_process_without_credentials_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    for target in ["ingester", "distributor"] {
        let mut cmd = Command::new(cargo_bin("heddle").unwrap());
        cmd.args([
            format!("--target={target}"),
            "--auth.multitenancy-enabled".into(),
            "--server.http-listen-address=127.0.0.1".into(),
            format!("--server.http-listen-port={}", free_port().unwrap()),
            "--server.grpc-listen-address=127.0.0.1".into(),
            format!("--server.grpc-listen-port={}", free_port().unwrap()),
            format!("--blocks-storage.tsdb.dir={}", dir.path().join("tsdb").display()),
        ]);
        let out = run_bounded(cmd, TIMEOUT).unwrap();
        assert_eq!(out.status.code(), Some(2), "{target}: {}", out.stderr);
        for text in [
            "--server.cluster-token-file",
            "--auth.multitenancy-enabled",
            "--target=",
        ] {
            assert!(
                out.stderr.contains(text),
                "{target}: {text:?} missing in {}",
                out.stderr
            );
        }
        let mtls = if target == "ingester" {
            "--server.grpc-tls-client-auth=RequireAndVerifyClientCert"
        } else {
            "--ingester.client.tls-cert-path"
        };
        assert!(out.stderr.contains(mtls), "{target}: {}", out.stderr);
    }
}

/// Distributors send the cluster token to whatever the ring calls an ingester, and without a gossip key anyone
/// who reaches the gossip port can join the ring as one: a clustered process with a token and no key does not
/// start, and says which flag to add. The single process (no gossip) keeps starting with a token alone.
#[test]
fn a_cluster_token_without_a_gossip_key_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("cluster-token");
    std::fs::write(&token_file, TOKEN).unwrap();
    for target in ["ingester", "distributor", "querier"] {
        let mut cmd = Command::new(cargo_bin("heddle").unwrap());
        cmd.args([
            format!("--target={target}"),
            "--auth.multitenancy-enabled".into(),
            format!("--server.cluster-token-file={}", token_file.display()),
            "--server.http-listen-address=127.0.0.1".into(),
            format!("--server.http-listen-port={}", free_port().unwrap()),
            "--server.grpc-listen-address=127.0.0.1".into(),
            format!("--server.grpc-listen-port={}", free_port().unwrap()),
            format!("--blocks-storage.tsdb.dir={}", dir.path().join(target).display()),
        ]);
        let out = run_bounded(cmd, TIMEOUT).unwrap();
        assert_eq!(out.status.code(), Some(2), "{target}: {}", out.stderr);
        for text in [
            "--server.cluster-token-file",
            "--memberlist.cluster-key-file",
            "receive the token",
            &format!("--target={target}"),
        ] {
            assert!(
                out.stderr.contains(text),
                "{target}: {text:?} missing in {}",
                out.stderr
            );
        }
    }
    let single = HeddleProcess::start(HeddleOptions {
        multitenancy: true,
        args: vec![format!("--server.cluster-token-file={}", token_file.display())],
        ..HeddleOptions::default()
    });
    if let Err(e) = single {
        panic!("the single process gossips with nobody, so a token alone is fine: {e}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_single_process_does_not_serve_the_ingester_api() {
    let h = HeddleProcess::start(HeddleOptions {
        multitenancy: true,
        ..HeddleOptions::default()
    })
    .expect("start heddle");
    let http = http_client(TIMEOUT).unwrap();
    let out = push(&http, &h.push_url(), Some("alpha"), &series("up", "alpha-secret-job"))
        .await
        .unwrap();
    assert_eq!(out.status, 200, "{}", out.body);
    let status = label_values(h.grpc_addr(), &["alpha"], None)
        .await
        .expect_err("the single process answered the ingester API");
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
    // Its own querier still reads the in-process ingester.
    let resp = http
        .get(format!("{}/api/v1/label/job/values", h.prometheus_url()))
        .header("X-Scope-OrgID", "alpha")
        .send()
        .await
        .unwrap();
    let body: serde_json::Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    assert_eq!(body["data"], serde_json::json!(["alpha-secret-job"]), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_clustered_single_binary_serves_the_ingester_api_with_credentials_only() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("cluster-token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let gossip = free_port().unwrap();
    let h = HeddleProcess::start(HeddleOptions {
        multitenancy: true,
        args: vec![
            "--memberlist.bind-addr=127.0.0.1".into(),
            format!("--memberlist.bind-port={gossip}"),
            format!("--memberlist.join=127.0.0.1:{gossip}"),
            "--ingester.ring.instance-addr=127.0.0.1".into(),
            "--ingester.ring.replication-factor=1".into(),
            format!("--server.cluster-token-file={}", token_file.display()),
            format!("--memberlist.cluster-key-file={}", gossip_key(dir.path()).display()),
        ],
        ..HeddleOptions::default()
    })
    .expect("start a clustered --target=all");
    let http = http_client(TIMEOUT).unwrap();
    let out = push(&http, &h.push_url(), Some("alpha"), &series("up", "alpha-secret-job"))
        .await
        .unwrap();
    assert_eq!(
        out.status, 200,
        "its distributor reaches its ingester over gRPC with the token: {}",
        out.body
    );
    let status = label_values(h.grpc_addr(), &["alpha"], None)
        .await
        .expect_err("answered without the token");
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    let values = label_values(h.grpc_addr(), &["alpha"], Some(&format!("Bearer {TOKEN}")))
        .await
        .expect("with the token");
    assert_eq!(values, vec!["alpha-secret-job".to_owned()]);
}
