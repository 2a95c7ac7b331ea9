//! Heddle's alerting rules: the chart's `PrometheusRule` (`helm/heddle/templates/prometheusrule.yaml`) and the
//! plain Prometheus rules file generated from it (`operations/heddle-alerts.yaml`, for Prometheus without the
//! operator), checked with the real `promtool`: `check rules` on both, and `test rules` unit tests
//! (`operations/heddle-alerts.test.yaml`) that feed series to the plain file's alerts and assert which fire.
//!
//! The inputs of the new alerts are checked on a real cluster too: `heddle_ring_members{state="UNHEALTHY"}` rises
//! when an ingester freezes and falls when it resumes, the shipper's last-upload time is set by a flush, and
//! replay is over (`heddle_ingester_replay_tenants_pending` 0) once an ingester is ready.
//!
//! Regenerate the plain file after changing the chart with
//! `HEDDLE_UPDATE_DOCS=1 cargo test -p heddle-integration --test alerts`. The chart tests need helm (see
//! `tests/helm.rs`); without it they are skipped, the promtool ones still run.

#[path = "helm/support.rs"]
#[allow(dead_code)]
mod support;

use heddle_testkit::{Cluster, ClusterOptions, http_get, run_bounded, wait_until, workspace_root};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::{CI_VALUES, RELEASE, ci_values, helm, objects, of_kind, render_ok};

const PROMTOOL_TIMEOUT: Duration = Duration::from_secs(60);
/// Alerts that depend on the chart's values (the capacity it sized), left out of the plain file.
const CHART_ONLY: &[&str] = &["HeddleIngesterSeriesAboveCapacity"];
/// The chart's scrape jobs are `<release>-<component>`; the plain file matches any job named `heddle...`.
const PLAIN_JOB: &str = r#"job=~"heddle.*""#;

fn plain_rules_path() -> PathBuf {
    workspace_root().join("operations/heddle-alerts.yaml")
}

fn promtool(args: &[&str], file: &Path) -> (bool, String) {
    let mut cmd = Command::new("promtool");
    cmd.args(args).arg(file);
    let out = run_bounded(cmd, PROMTOOL_TIMEOUT).expect("run promtool (Debian package prometheus)");
    (out.status.success(), format!("{}{}", out.stdout, out.stderr))
}

/// The `spec` of the chart's PrometheusRule rendered with `values` (rules switched on).
fn chart_rules(helm: &Path, values: &Path) -> Value {
    let objs = objects(&render_ok(helm, &[values.to_owned()], &["prometheusRule.enabled=true"]));
    let rules = of_kind(&objs, "PrometheusRule");
    assert_eq!(rules.len(), 1, "{}: one PrometheusRule", values.display());
    rules[0]["spec"].clone()
}

/// The plain rules file's content from the chart's rendered spec: the namespace selectors the chart adds
/// dropped, the job selector widened, the values-dependent alerts left out.
fn plain_rules(spec: &Value) -> String {
    let ns = format!(r#"namespace="{RELEASE}""#);
    let mut groups = spec["groups"].clone();
    for group in groups.as_array_mut().expect("groups") {
        let rules = group["rules"].as_array_mut().expect("rules");
        rules.retain(|r| !CHART_ONLY.contains(&r["alert"].as_str().unwrap_or_default()));
        for rule in rules {
            let expr = rule["expr"].as_str().expect("expr").to_owned();
            let expr = expr
                .replace(&format!("{{{ns}}}"), "")
                .replace(&format!("{ns}, "), "")
                .replace(&format!(", {ns}"), "")
                .replace(&format!(r#"job=~"{RELEASE}-.*""#), PLAIN_JOB);
            assert!(!expr.contains("namespace=\""), "a namespace selector is left: {expr}");
            rule["expr"] = Value::String(expr);
        }
    }
    let body = serde_norway::to_string(&serde_json::json!({ "groups": groups })).expect("rules as YAML");
    format!(
        "# Heddle's alerting rules for Prometheus without the prometheus-operator: `rule_files: [heddle-alerts.yaml]`.\n\
         # GENERATED from helm/heddle/templates/prometheusrule.yaml (production values, namespace selectors dropped)\n\
         # by `HEDDLE_UPDATE_DOCS=1 cargo test -p heddle-integration --test alerts`; do not edit by hand.\n{body}"
    )
}

#[test]
fn plain_rules_file_is_generated_from_the_chart() {
    let Some(helm) = helm() else { return };
    let spec = chart_rules(&helm, &ci_values("production-3-zone-values.yaml"));
    let want = plain_rules(&spec);
    let path = plain_rules_path();
    if std::env::var_os("HEDDLE_UPDATE_DOCS").is_some() {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("create operations/");
        std::fs::write(&path, &want).expect("write the plain rules file");
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} is not what the chart renders; run `HEDDLE_UPDATE_DOCS=1 cargo test -p heddle-integration --test alerts`\n\
         --- generated now ---\n{want}",
        path.display()
    );
}

#[test]
fn chart_rules_pass_promtool_check_for_every_ci_values_file() {
    let Some(helm) = helm() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    for name in CI_VALUES {
        let spec = chart_rules(&helm, &ci_values(name));
        let alerts: Vec<&str> = spec["groups"][0]["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .filter_map(|r| r["alert"].as_str())
            .collect();
        for want in [
            "HeddleIngesterUnhealthy",
            "HeddleHighDiscardRate",
            "HeddleWalCorruptionRepaired",
            "HeddleOpenChunksDropped",
            "HeddleIngesterHasNotShippedBlocks",
            "HeddleIngesterReplayRunning",
        ] {
            assert!(alerts.contains(&want), "{name}: {want} missing from {alerts:?}");
        }
        let file = dir.path().join(name);
        std::fs::write(&file, serde_norway::to_string(&spec).expect("yaml")).expect("write rules");
        let (ok, out) = promtool(&["check", "rules"], &file);
        assert!(ok, "{name}: promtool check rules failed:\n{out}");
        assert!(
            out.contains(&format!("SUCCESS: {} rules found", alerts.len())),
            "{name}: {out}"
        );
    }
}

#[test]
fn plain_rules_file_passes_promtool_check_and_its_unit_tests() {
    let rules = plain_rules_path();
    let (ok, out) = promtool(&["check", "rules"], &rules);
    assert!(ok, "promtool check rules {}:\n{out}", rules.display());
    assert!(out.contains("SUCCESS"), "{out}");

    let tests = workspace_root().join("operations/heddle-alerts.test.yaml");
    let (ok, out) = promtool(&["test", "rules"], &tests);
    assert!(ok, "promtool test rules {}:\n{out}", tests.display());
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn promtool_unit_tests_can_fail() {
    // The unit tests above are only worth something if a wrong expectation fails: flip one.
    let tests = std::fs::read_to_string(workspace_root().join("operations/heddle-alerts.test.yaml")).expect("tests");
    let broken = tests.replacen("exp_alerts: []", "exp_alerts: [{exp_labels: {severity: critical}}]", 1);
    assert_ne!(broken, tests, "the unit tests assert at least one alert does not fire");
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::copy(plain_rules_path(), dir.path().join("heddle-alerts.yaml")).expect("copy rules");
    let file = dir.path().join("heddle-alerts.test.yaml");
    std::fs::write(&file, broken).expect("write broken tests");
    let (ok, out) = promtool(&["test", "rules"], &file);
    assert!(!ok, "a wrong expectation must fail promtool test rules:\n{out}");
}

/// The value of the exposition line that starts with `series ` on the process at `addr`, if any.
fn metric(addr: std::net::SocketAddr, series: &str) -> Option<f64> {
    let (status, text) = http_get(addr, "/metrics", Duration::from_secs(10)).ok()?;
    assert_eq!(status, 200, "/metrics of {addr}");
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

#[test]
fn alert_inputs_follow_a_real_cluster() {
    const UNHEALTHY: &str = r#"heddle_ring_members{state="UNHEALTHY"}"#;
    const ACTIVE: &str = r#"heddle_ring_members{state="ACTIVE"}"#;
    let mut cluster = Cluster::start(ClusterOptions {
        ingesters: 2,
        distributors: 1,
        replication_factor: 1,
        ready_timeout: Duration::from_secs(120),
        ..ClusterOptions::default()
    })
    .expect("start a cluster");
    let distributor = cluster.distributor(0).http_addr();
    let ingester = cluster.ingester(0).http_addr();
    assert!(
        wait_until(Duration::from_secs(30), || metric(distributor, ACTIVE) == Some(2.0)
            && metric(distributor, UNHEALTHY) == Some(0.0)),
        "the distributor sees two ACTIVE ingesters: {:?} {:?}",
        metric(distributor, ACTIVE),
        metric(distributor, UNHEALTHY)
    );
    assert_eq!(
        metric(ingester, "heddle_ingester_replay_tenants_pending"),
        Some(0.0),
        "replay is over"
    );

    // Frozen past the heartbeat timeout (5 s): unhealthy in every view, then healthy again once it resumes.
    cluster.sigstop(1).expect("SIGSTOP ingester 1");
    // Each process judges on its own (gossip's failure detector or the heartbeat timeout), so the views may
    // turn at different moments: wait for both.
    let frozen = wait_until(Duration::from_secs(30), || metric(distributor, UNHEALTHY) == Some(1.0));
    let ingester_view = wait_until(Duration::from_secs(30), || metric(ingester, UNHEALTHY) == Some(1.0));
    cluster.sigcont(1).expect("SIGCONT ingester 1");
    assert!(
        frozen,
        "the distributor counts the frozen ingester UNHEALTHY: {:?}",
        metric(distributor, UNHEALTHY)
    );
    assert!(
        ingester_view,
        "so does the other ingester: {:?}",
        metric(ingester, UNHEALTHY)
    );
    assert!(
        wait_until(Duration::from_secs(30), || metric(distributor, UNHEALTHY) == Some(0.0)
            && metric(distributor, ACTIVE) == Some(2.0)),
        "healthy again after SIGCONT: {:?}",
        metric(distributor, UNHEALTHY)
    );

    // A push and a flush: the shipper's last successful upload is now.
    let last_upload = "heddle_shipper_last_successful_upload_timestamp_seconds";
    assert_eq!(metric(ingester, last_upload), Some(0.0), "nothing shipped yet");
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let http = heddle_testkit::http_client(Duration::from_secs(20)).expect("client");
        let req = heddle_proto::prometheus::WriteRequest {
            timeseries: (0..20)
                .map(|i| heddle_proto::prometheus::TimeSeries {
                    labels: vec![
                        heddle_proto::prometheus::Label {
                            name: "__name__".into(),
                            value: "up".into(),
                        },
                        heddle_proto::prometheus::Label {
                            name: "job".into(),
                            value: format!("j{i}"),
                        },
                    ],
                    samples: vec![heddle_proto::prometheus::Sample {
                        value: 1.0,
                        timestamp: (now_s * 1000.0) as i64,
                    }],
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let outcome = heddle_testkit::push(&http, &cluster.distributor(0).push_url(), None, &req)
            .await
            .expect("push");
        assert!(outcome.is_success(), "{}", outcome.body);
        for node in cluster.ingesters() {
            let resp = http
                .post(format!("{}/ingester/flush?wait=true", node.url()))
                .send()
                .await
                .expect("flush");
            assert!(resp.status().is_success(), "flush: {}", resp.status());
        }
    });
    let shipped: Vec<f64> = cluster
        .ingesters()
        .iter()
        .filter_map(|n| metric(n.http_addr(), last_upload))
        .collect();
    assert!(
        shipped.iter().any(|&t| t >= now_s.floor() && t < now_s + 600.0),
        "an ingester that held series shipped a block just now: {shipped:?} (push at {now_s})"
    );
}
