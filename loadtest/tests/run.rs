//! `run` and `compare` end to end: the scenario files parse; a tiny scenario against the in-memory receiver
//! and against real targets the driver starts (heddle, and Prometheus / VictoriaMetrics when installed)
//! verifies and writes `result.json` and a report with its plots; a target that silently drops samples fails
//! verification with a non-zero exit.

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use heddle_loadtest::scenario::Scenario;
use heddle_testkit::{CommandOutput, MockReceiver, cargo_bin, run_bounded};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_heddle-loadtest");

fn scenario_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios")
}

fn tiny() -> String {
    scenario_dir().join("tiny.yaml").display().to_string()
}

async fn loadtest(args: Vec<String>) -> CommandOutput {
    tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new(BIN);
        cmd.args(&args);
        run_bounded(cmd, Duration::from_secs(60))
    })
    .await
    .expect("join")
    .expect("heddle-loadtest finished")
}

fn result_json(out: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(out.join("result.json")).expect("result.json");
    serde_json::from_str(&text).expect("result.json is JSON")
}

/// The report is self-contained and holds the four plots, each with its lines.
fn assert_report(out: &Path) {
    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    for title in ["Throughput", "Push latency", "Target CPU", "Target RSS"] {
        assert!(html.contains(title), "report lacks the {title} plot");
    }
    assert_eq!(html.matches("<svg").count(), 4, "four inline plots");
    assert!(html.matches("<polyline class=\"series\"").count() >= 6);
    assert!(
        !html.contains("<script") && !html.contains("src=\"http"),
        "self-contained"
    );
}

#[test]
fn every_scenario_file_parses_and_validates() {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(scenario_dir()).expect("scenarios dir") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let s = Scenario::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(
                Some(s.name.as_str()),
                path.file_stem().and_then(|n| n.to_str()),
                "{}: name matches the file",
                path.display()
            );
            assert!(s.checks.verify, "{}: verifies", path.display());
            names.push(s.name);
        }
    }
    names.sort();
    for want in ["bursty", "churn", "large-requests", "many-tenants", "steady", "tiny"] {
        assert!(names.iter().any(|n| n == want), "scenario {want} missing: {names:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn run_against_the_mock_verifies_and_reports() {
    let mock = MockReceiver::start(true).await.expect("mock");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let res = loadtest(vec![
        "run".into(),
        format!("--scenario={}", tiny()),
        format!("--url={}", mock.push_url()),
        format!("--read-url={}", mock.prometheus_url()),
        "--tenant=team-a".into(),
        format!("--target-pid={}", std::process::id()),
        "--read-mode=chunks".into(),
        format!("--out={}", out.display()),
    ])
    .await;
    assert!(res.status.success(), "{}\n{}", res.stdout, res.stderr);
    let r = result_json(&out);
    assert_eq!(r["verified"], true, "{r}");
    let acked = r["samples_acknowledged"].as_u64().expect("acked");
    let rounds = r["rounds"].as_u64().expect("rounds");
    assert!(
        rounds >= 1 && acked == rounds * 300,
        "{acked} samples in {rounds} rounds"
    );
    assert_eq!(mock.sample_count("team-a") as u64, acked);
    assert_eq!(r["verify"]["samples_found"].as_u64(), Some(acked));
    assert!(r["samples_per_second"].as_f64().expect("rate") > 0.0);
    for k in ["p50", "p90", "p99", "max"] {
        assert!(r["latency_ms"][k].as_f64().is_some(), "latency {k}");
    }
    // This test process stood in for the target: its CPU and RSS were sampled.
    assert!(r["rss_bytes_end"].as_u64().expect("rss") > 0);
    assert!(r["cpu_seconds_per_million_samples"].as_f64().is_some());
    assert!(!r["timeline"].as_array().expect("timeline").is_empty());
    assert_report(&out);
}

/// Answers 204 to every fifth push without storing it, forwards the others to `backend`.
async fn dropping_proxy(backend: String) -> (String, tokio::task::JoinHandle<()>) {
    let n = Arc::new(AtomicU64::new(0));
    let http = reqwest::Client::new();
    let app = Router::new().route(
        "/api/v1/push",
        post(move |headers: HeaderMap, body: Bytes| {
            let (n, http, backend) = (n.clone(), http.clone(), backend.clone());
            async move {
                if n.fetch_add(1, Ordering::Relaxed) % 5 == 2 {
                    return StatusCode::NO_CONTENT;
                }
                let mut req = http.post(&backend).body(body);
                for (k, v) in &headers {
                    if k != "host" && k != "content-length" {
                        req = req.header(k, v);
                    }
                }
                match req.send().await {
                    Ok(r) => StatusCode::from_u16(r.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY),
                    Err(_) => StatusCode::BAD_GATEWAY,
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.expect("bind");
    let url = format!("http://{}/api/v1/push", listener.local_addr().expect("addr"));
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, task)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_target_that_drops_samples_fails_verification() {
    let mock = MockReceiver::start(false).await.expect("mock");
    let (proxy, task) = dropping_proxy(mock.push_url()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let res = loadtest(vec![
        "run".into(),
        format!("--scenario={}", tiny()),
        format!("--url={proxy}"),
        format!("--read-url={}", mock.prometheus_url()),
        "--no-progress".into(),
        format!("--out={}", out.display()),
    ])
    .await;
    task.abort();
    assert_eq!(res.status.code(), Some(1), "{}\n{}", res.stdout, res.stderr);
    let r = result_json(&out);
    assert_eq!(r["verified"], false, "{r}");
    assert_eq!(r["checks_passed"], false);
    let acked = r["samples_acknowledged"].as_u64().expect("acked");
    let missing = r["verify"]["missing"].as_u64().expect("missing");
    assert_eq!(missing, acked - mock.sample_count("anonymous") as u64, "{r}");
    assert!(missing > 0);
    assert!(res.stderr.contains("missing"), "examples on stderr: {}", res.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn run_starts_heddle_itself() {
    let heddle = tokio::task::spawn_blocking(|| cargo_bin("heddle"))
        .await
        .expect("join")
        .expect("heddle binary");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let res = loadtest(vec![
        "run".into(),
        format!("--scenario={}", scenario_dir().join("many-tenants.yaml").display()),
        "--series=400".into(),
        "--duration=2s".into(),
        "--start=heddle".into(),
        format!("--bin={}", heddle.display()),
        "--no-progress".into(),
        format!("--out={}", out.display()),
    ])
    .await;
    assert!(res.status.success(), "{}\n{}", res.stdout, res.stderr);
    let r = result_json(&out);
    assert_eq!(
        (r["verified"].as_bool(), r["tenants"].as_u64()),
        (Some(true), Some(20)),
        "{r}"
    );
    assert_eq!(r["target"], "heddle");
    assert!(r["rss_bytes_idle"].as_u64().expect("heddle rss sampled") > 0);
    assert!(r["cpu_seconds"].as_f64().expect("heddle cpu sampled") > 0.0);
    assert!(r["restart_seconds"].as_f64().expect("restart measured") > 0.0, "{r}");
    assert_report(&out);
}

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
}

#[tokio::test(flavor = "multi_thread")]
async fn compare_prometheus_and_victoria_metrics_when_installed() {
    if !on_path("prometheus") || !on_path("victoria-metrics") {
        eprintln!("skipped: prometheus or victoria-metrics not on PATH");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("cmp");
    let res = loadtest(vec![
        "compare".into(),
        format!("--scenario={}", scenario_dir().join("churn.yaml").display()),
        "--series=500".into(),
        "--duration=2s".into(),
        "--a=prometheus".into(),
        "--b=victoria-metrics".into(),
        "--repeat=1".into(),
        "--no-progress".into(),
        format!("--out={}", out.display()),
    ])
    .await;
    assert!(res.status.success(), "{}\n{}", res.stdout, res.stderr);
    assert!(res.stdout.contains("samples/s"), "{}", res.stdout);
    let c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("compare.json")).expect("compare.json")).expect("json");
    assert_eq!(c["verified"], true, "{c}");
    assert_eq!(c["runs"].as_array().map(Vec::len), Some(2));
    let ratio = c["figures"][0]["ratios"][0].as_f64().expect("samples/s ratio");
    assert!(ratio > 0.0);
    for run in ["prometheus-0", "victoria-metrics-0"] {
        assert_eq!(result_json(&out.join(run))["verified"], true, "{run}");
    }
    assert!(
        std::fs::read_to_string(out.join("compare.html"))
            .expect("html")
            .contains("<svg")
    );
}
