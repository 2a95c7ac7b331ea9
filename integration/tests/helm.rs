//! The Helm chart (`helm/heddle`) checked with the real tools: `helm lint --strict` and `helm template` for every
//! values file under `helm/heddle/ci/`, each rendering validated against the Kubernetes 1.30 API schemas
//! (`kubernetes-validate --strict`) and compared with the golden manifests in `helm/heddle/golden/`, structural
//! facts asserted on the parsed objects, `values.schema.json` refusing bad values, and every rendered pod run
//! as a real `heddle` process with the chart's exact args and configuration (local ports and paths swapped
//! in), so the chart and the binary agree on every config key and flag and the rendered ring takes writes.
//!
//! `./scripts/test` installs helm and kubernetes-validate into `~/.cache/heddle-tools` and exports
//! `HEDDLE_HELM` / `HEDDLE_KUBERNETES_VALIDATE`. Without them the tests fail when `CI=true` and are skipped
//! (with a message) otherwise.
//!
//! Regenerate the golden manifests and the README's values table with
//! `HEDDLE_UPDATE_DOCS=1 cargo test -p heddle-integration --test helm`.

#[path = "helm/local.rs"]
mod local;
#[path = "helm/support.rs"]
mod support;

use heddle_proto::prometheus::WriteRequest;
use heddle_testkit::{
    HeddleOptions, HeddleProcess, cargo_bin, http_client, http_get, now_ms, push, run_bounded, timeseries, wait_until,
};
use local::{LocalDeployment, get_admin, prepared, run_pre_stop, wait_ring};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use support::*;

#[test]
fn lint_strict_passes_for_defaults_and_every_ci_values_file() {
    let Some(helm) = helm() else { return };
    let mut cases: Vec<Option<&str>> = vec![None];
    cases.extend(CI_VALUES.iter().copied().map(Some));
    for case in cases {
        let mut cmd = Command::new(&helm);
        cmd.args(["lint", "--strict"]).arg(chart_dir());
        if let Some(v) = case {
            cmd.arg("--values").arg(ci_values(v));
        }
        let out = run_bounded(cmd, TOOL_TIMEOUT).expect("run helm lint");
        assert!(
            out.status.success(),
            "helm lint --strict ({case:?}) failed:\n{}\n{}",
            out.stdout,
            out.stderr
        );
        assert!(out.stdout.contains("0 chart(s) failed"), "{case:?}: {}", out.stdout);
    }
}

#[test]
fn every_rendering_satisfies_the_kubernetes_schemas() {
    let (Some(helm), Some(validator)) = (helm(), kubernetes_validate()) else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    for name in CI_VALUES {
        let manifests = render_ok(&helm, &[ci_values(name)], &[]);
        let file = dir.path().join(name);
        std::fs::write(&file, &manifests).expect("write rendering");
        let (ok, output) = validate_file(&validator, &file);
        assert!(ok, "{name}: kubernetes-validate --strict failed:\n{output}");
        let objs = objects(&manifests);
        let core = objs.iter().filter(|o| !is_prometheus_operator(o)).count();
        assert_eq!(
            output.matches("passed for resource").count(),
            core,
            "{name}: every core object must be validated:\n{output}"
        );
        // Prometheus-operator kinds have no schema in Kubernetes itself: the only warnings allowed.
        for line in output.lines().filter(|l| l.contains("WARN") || l.contains("ERROR")) {
            assert!(line.contains("monitoring.coreos.com/v1"), "{name}: {line}");
        }
    }
    // The validator does fail on a field Kubernetes does not have (the check above could not pass vacuously).
    let mut broken = render_ok(&helm, &[ci_values("single-node-values.yaml")], &[]);
    broken = broken.replacen(
        "podManagementPolicy: Parallel",
        "podManagementPolicy: Parallel\n  zonesPlease: 3",
        1,
    );
    let file = dir.path().join("broken.yaml");
    std::fs::write(&file, broken).expect("write broken rendering");
    let (ok, output) = validate_file(&validator, &file);
    assert!(
        !ok && output.contains("zonesPlease"),
        "an unknown field must fail validation:\n{output}"
    );
}

#[test]
fn renderings_match_the_golden_manifests() {
    let Some(helm) = helm() else { return };
    let update = std::env::var_os("HEDDLE_UPDATE_DOCS").is_some();
    for name in CI_VALUES {
        let manifests = mask_generated_secrets(&render_ok(&helm, &[ci_values(name)], &[]));
        let golden = chart_dir().join("golden").join(name);
        if update {
            std::fs::write(&golden, &manifests).expect("write golden");
            continue;
        }
        let expected = std::fs::read_to_string(&golden).unwrap_or_default();
        if expected != manifests {
            let line = expected
                .lines()
                .zip(manifests.lines())
                .position(|(a, b)| a != b)
                .unwrap_or_else(|| expected.lines().count().min(manifests.lines().count()));
            panic!(
                "{name}: the rendering differs from {} from line {} on (golden: {:?}, now: {:?}); if the change is \
                 intended run `HEDDLE_UPDATE_DOCS=1 cargo test -p heddle-integration --test helm`",
                golden.display(),
                line + 1,
                expected.lines().nth(line),
                manifests.lines().nth(line)
            );
        }
    }
}

/// Distributed mode guards the ingesters' gRPC API with a cluster token every pod mounts: generated by the chart
/// (a random value, the same Secret for every pod) or the operator's own Secret. The single node has none.
#[test]
fn distributed_mode_mounts_one_cluster_token_in_every_pod() {
    let Some(helm) = helm() else { return };
    let objs = objects(&render_ok(&helm, &[ci_values("production-3-zone-values.yaml")], &[]));
    let (_, config) = rendered_config(&objs);
    assert_eq!(config["server"]["cluster_token_file"], "/etc/heddle-cluster/token");
    let generated = format!("{RELEASE}-cluster-token");
    let secret = named(&objs, "Secret", &generated);
    assert_eq!(secret["metadata"]["annotations"]["helm.sh/resource-policy"], "keep");
    let token = secret["data"]["token"].as_str().expect("a generated token");
    assert!(token.len() >= 64, "48 random characters, base64: {token}");
    let pods = workloads(&objs);
    assert!(
        pods.len() >= 6,
        "3 ingester zones, distributors, queriers, the compactor: {}",
        pods.len()
    );
    for w in &pods {
        let pod = &w["spec"]["template"]["spec"];
        let volume = pod["volumes"]
            .as_array()
            .and_then(|v| v.iter().find(|v| v["name"] == "cluster-token"))
            .unwrap_or_else(|| panic!("{}: no cluster-token volume", w["metadata"]["name"]));
        assert_eq!(volume["secret"]["secretName"], generated.as_str());
        assert!(
            pod["containers"][0]["volumeMounts"].as_array().is_some_and(|m| m
                .iter()
                .any(|m| m["mountPath"] == "/etc/heddle-cluster" && m["readOnly"] == true)),
            "{}: the token is mounted read-only",
            w["metadata"]["name"]
        );
    }
    let own = objects(&render_ok(
        &helm,
        &[ci_values("production-3-zone-values.yaml")],
        &[
            "clusterToken.existingSecret.name=my-token",
            "clusterToken.existingSecret.key=secret",
        ],
    ));
    assert!(
        of_kind(&own, "Secret")
            .iter()
            .all(|s| s["metadata"]["name"] != generated.as_str())
    );
    assert_eq!(
        rendered_config(&own).1["server"]["cluster_token_file"],
        "/etc/heddle-cluster/secret"
    );
    let single = objects(&render_ok(&helm, &[ci_values("single-node-values.yaml")], &[]));
    assert!(rendered_config(&single).1["server"].get("cluster_token_file").is_none());
    assert!(
        of_kind(&single, "Secret").is_empty(),
        "the single node needs no cluster token"
    );
}

#[test]
fn production_values_run_three_zone_aware_ingester_statefulsets() {
    let Some(helm) = helm() else { return };
    let objs = objects(&render_ok(&helm, &[ci_values("production-3-zone-values.yaml")], &[]));
    let statefulsets = of_kind(&objs, "StatefulSet");
    assert_eq!(statefulsets.len(), 3, "{:?}", names(&objs));
    for (zone, node_zone) in [
        ("zone-a", "eu-west-1a"),
        ("zone-b", "eu-west-1b"),
        ("zone-c", "eu-west-1c"),
    ] {
        let name = format!("{RELEASE}-ingester-{zone}");
        let sts = named(&objs, "StatefulSet", &name);
        let spec = &sts["spec"];
        let pod = &spec["template"]["spec"];
        assert_eq!(spec["replicas"], 3, "{name}");
        assert_eq!(spec["podManagementPolicy"], "Parallel", "{name}");
        // Zones restart one at a time (by hand or by the rollout-operator), never all StatefulSets together.
        assert_eq!(spec["updateStrategy"]["type"], "OnDelete", "{name}");
        assert_eq!(
            sts["metadata"]["labels"]["rollout-group"],
            format!("{RELEASE}-ingester"),
            "{name}"
        );
        assert_eq!(spec["template"]["metadata"]["labels"]["name"], name, "{name}");
        assert_eq!(spec["template"]["metadata"]["labels"]["heddle.io/zone"], zone, "{name}");
        let a = args(sts);
        for want in [
            "--target=ingester".to_owned(),
            format!("--ingester.ring.instance-zone={zone}"),
            "--ingester.ring.instance-id=$(POD_NAME)".to_owned(),
            "--server.graceful-shutdown-timeout=1170s".to_owned(),
        ] {
            assert!(a.contains(&want.as_str()), "{name}: {want} missing from {a:?}");
        }
        assert!(
            pod["terminationGracePeriodSeconds"].as_u64() >= Some(600),
            "{name}: grace period too short"
        );
        assert_eq!(pod["nodeSelector"]["topology.kubernetes.io/zone"], node_zone, "{name}");
        let claim = &spec["volumeClaimTemplates"][0];
        assert_eq!(claim["metadata"]["name"], "data", "{name}");
        assert_eq!(claim["spec"]["storageClassName"], "gp3", "{name}");
        // 3M active series x RF 3 over 9 ingesters = 1M series each: Mimir's 5 GB per 300k plus 50 % headroom.
        assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "25Gi", "{name}");
        let container = &pod["containers"][0];
        // 1M series / 15 s = 66,667 samples/s x 5 CPU-s per million x 1.5 = 0.5 cores.
        assert_eq!(
            container["resources"]["requests"]["cpu"], "500m",
            "{name}: measured CPU per sample x 1.5"
        );
        // 1M series x 1536 B x 1.5 = 2198 MiB, plus the 256 MiB base.
        assert_eq!(
            container["resources"]["requests"]["memory"], "2454Mi",
            "{name}: measured bytes per series x 1.5 + base"
        );
        assert_eq!(container["resources"]["limits"]["memory"], "2454Mi", "{name}");
        // The rollout-operator's prepare-downscale webhook calls <pod>.<statefulset>.<ns>.svc: the governing
        // Service must be named like the StatefulSet, and the annotations must name Heddle's endpoint.
        assert_eq!(spec["serviceName"], name, "{name}");
        let svc = named(&objs, "Service", &name);
        assert_eq!(svc["spec"]["clusterIP"], "None", "{name}");
        assert_eq!(svc["spec"]["selector"]["heddle.io/zone"], zone, "{name}");
        assert_eq!(
            sts["metadata"]["labels"]["grafana.com/prepare-downscale"], "true",
            "{name}"
        );
        let notes = &sts["metadata"]["annotations"];
        assert_eq!(
            notes["grafana.com/prepare-downscale-http-path"], "ingester/prepare-shutdown",
            "{name}"
        );
        assert_eq!(notes["grafana.com/prepare-downscale-http-port"], "8080", "{name}");
        assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/ready", "{name}");
        // Losing a node must cost at most one zone: no ingester of another zone may share it.
        let term = &pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0];
        assert_eq!(term["topologyKey"], "kubernetes.io/hostname", "{name}");
        assert_eq!(
            term["labelSelector"]["matchExpressions"][0]["operator"], "NotIn",
            "{name}"
        );
        assert_eq!(
            term["labelSelector"]["matchExpressions"][0]["values"][0], zone,
            "{name}"
        );
        let spread = &pod["topologySpreadConstraints"][0];
        assert_eq!(spread["labelSelector"]["matchLabels"]["heddle.io/zone"], zone, "{name}");
        let pdb = named(&objs, "PodDisruptionBudget", &name);
        assert_eq!(pdb["spec"]["maxUnavailable"], 1, "{name}");
        assert_eq!(pdb["spec"]["selector"]["matchLabels"]["heddle.io/zone"], zone, "{name}");
    }
    // 200,000 samples/s over 3 distributors: 66,667 x 5 CPU-s per million x 1.5 = 0.5 cores; 66,667 x 1 KiB
    // x 1.5 = 98 MiB plus the 256 MiB base.
    let distributor =
        &named(&objs, "Deployment", &format!("{RELEASE}-distributor"))["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(distributor["resources"]["requests"]["cpu"], "500m");
    assert_eq!(distributor["resources"]["requests"]["memory"], "354Mi");
    for component in ["distributor", "querier"] {
        let name = format!("{RELEASE}-{component}");
        let deploy = named(&objs, "Deployment", &name);
        assert!(
            deploy["spec"]["replicas"].is_null(),
            "{name}: the HPA owns the replica count"
        );
        assert_eq!(
            named(&objs, "HorizontalPodAutoscaler", &name)["spec"]["scaleTargetRef"]["name"],
            name
        );
        assert!(
            args(deploy).contains(&format!("--target={component}").as_str()),
            "{name}"
        );
    }
    let gossip = named(&objs, "Service", &format!("{RELEASE}-gossip-ring"));
    assert_eq!(gossip["spec"]["clusterIP"], "None");
    assert_eq!(gossip["spec"]["publishNotReadyAddresses"], true);
    let (_, config) = rendered_config(&objs);
    assert_eq!(
        config["memberlist"]["join_members"][0],
        format!("{RELEASE}-gossip-ring.{RELEASE}.svc.cluster.local:7946")
    );
    assert_eq!(config["ingester"]["ring"]["zone_awareness_enabled"], true);
    assert_eq!(config["memberlist"]["cluster_label"], format!("{RELEASE}.{RELEASE}"));
    assert_eq!(config["blocks_storage"]["s3"]["bucket_name"], "heddle-blocks");
    let sa = named(&objs, "ServiceAccount", RELEASE);
    assert!(
        sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].is_string(),
        "IRSA annotation"
    );
    for kind in ["ServiceMonitor", "PrometheusRule", "NetworkPolicy"] {
        assert_eq!(of_kind(&objs, kind).len(), 1, "{kind}");
    }
    let dashboard = named(&objs, "ConfigMap", &format!("{RELEASE}-dashboards"));
    let json = dashboard["data"]["heddle-overview.json"]
        .as_str()
        .expect("dashboard JSON");
    let parsed: Value = serde_json::from_str(json).expect("the dashboard is JSON");
    assert!(parsed["panels"].as_array().is_some_and(|p| !p.is_empty()));
    let policy = &of_kind(&objs, "NetworkPolicy")[0]["spec"]["ingress"];
    let grpc_rule = policy
        .as_array()
        .and_then(|rules| rules.iter().find(|r| r["ports"][0]["port"] == "grpc"))
        .expect("a rule for the gRPC port");
    assert!(
        !grpc_rule["from"].as_array().is_none_or(Vec::is_empty),
        "gRPC must be limited to listed peers"
    );
}

#[test]
fn external_s3_values_take_the_keys_from_the_existing_secret() {
    let Some(helm) = helm() else { return };
    let objs = objects(&render_ok(&helm, &[ci_values("external-s3-secret-values.yaml")], &[]));
    let sts = named(&objs, "StatefulSet", &format!("{RELEASE}-ingester"));
    assert_eq!(
        of_kind(&objs, "StatefulSet").len(),
        1,
        "no zones: one ingester StatefulSet"
    );
    assert_eq!(sts["spec"]["updateStrategy"]["type"], "RollingUpdate");
    let env = sts["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .expect("env");
    let secret_ref = |var: &str| {
        env.iter()
            .find(|e| e["name"] == var)
            .map(|e| e["valueFrom"]["secretKeyRef"].clone())
            .unwrap_or_else(|| panic!("{var} missing from {env:?}"))
    };
    assert_eq!(secret_ref("AWS_ACCESS_KEY_ID")["name"], "heddle-s3-credentials");
    assert_eq!(secret_ref("AWS_ACCESS_KEY_ID")["key"], "access-key");
    assert_eq!(secret_ref("AWS_SECRET_ACCESS_KEY")["key"], "secret-key");
    let a = args(sts);
    assert!(
        a.contains(&"--blocks-storage.s3.access-key-id=$(AWS_ACCESS_KEY_ID)"),
        "{a:?}"
    );
    assert!(
        !a.iter().any(|f| f.starts_with("--ingester.ring.instance-zone")),
        "{a:?}"
    );
    let (text, config) = rendered_config(&objs);
    assert!(
        !text.contains("secret_access_key"),
        "keys must never be in the ConfigMap:\n{text}"
    );
    assert_eq!(config["blocks_storage"]["s3"]["insecure"], true);
    // The admin token comes from its own Secret, mounted read-only; only its path is in the ConfigMap.
    assert_eq!(config["server"]["admin_token_file"], "/etc/heddle-admin/token");
    let pod = &sts["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "admin-token"))
        .expect("admin-token volume");
    assert_eq!(volume["secret"]["secretName"], "heddle-admin-token");
    assert!(
        pod["containers"][0]["volumeMounts"].as_array().is_some_and(|m| m
            .iter()
            .any(|m| m["mountPath"] == "/etc/heddle-admin" && m["readOnly"] == true)),
        "the token is mounted read-only"
    );
    assert_eq!(config["ingester"]["ring"]["zone_awareness_enabled"], false);
    assert_eq!(
        named(&objs, "PodDisruptionBudget", &format!("{RELEASE}-ingester"))["spec"]["maxUnavailable"],
        1
    );
}

/// Distributed mode runs the compactor as its own Deployment (`--target=compactor`): no ring and no gossip
/// (several share the tenants through a lock in the bucket), its scratch directory on the pod's emptyDir, a
/// Service for scraping. Single-node runs it inside its one pod (`--target=all`) with the same scratch path on
/// the pod's volume.
#[test]
fn the_compactor_runs_in_its_own_deployment_or_inside_the_single_node() {
    let Some(helm) = helm() else { return };
    let production = [ci_values("production-3-zone-values.yaml")];
    let objs = objects(&render_ok(&helm, &production, &[]));
    let name = format!("{RELEASE}-compactor");
    let deploy = named(&objs, "Deployment", &name);
    assert_eq!(deploy["spec"]["replicas"], 1);
    assert_eq!(deploy["spec"]["strategy"]["type"], "Recreate");
    let a = args(deploy);
    assert!(a.contains(&"--target=compactor"), "{a:?}");
    assert!(!a.iter().any(|f| f.starts_with("--memberlist.")), "no gossip: {a:?}");
    let template = &deploy["spec"]["template"];
    assert!(
        template["metadata"]["labels"].get("heddle.io/gossip-member").is_none(),
        "the compactor is no gossip member"
    );
    let pod = &template["spec"];
    let container = &pod["containers"][0];
    let ports: Vec<&str> = container["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(ports, ["http-metrics", "grpc"]);
    let data = pod["volumes"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "data"))
        .expect("a data volume");
    assert!(data["emptyDir"].is_object(), "{data}");
    assert!(
        container["volumeMounts"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["name"] == "data" && m["mountPath"] == "/data")),
        "{container}"
    );
    assert_eq!(rendered_config(&objs).1["compactor"]["data_dir"], "/data/compactor");
    let svc = named(&objs, "Service", &name);
    assert_eq!(svc["metadata"]["labels"]["heddle.io/monitor"], "true");
    assert_eq!(svc["spec"]["selector"]["app.kubernetes.io/component"], "compactor");

    let scaled = objects(&render_ok(
        &helm,
        &production,
        &["compactor.replicas=3", "compactor.resources.requests.memory=2Gi"],
    ));
    let deploy = named(&scaled, "Deployment", &name);
    assert_eq!(deploy["spec"]["replicas"], 3);
    assert_eq!(
        deploy["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"],
        "2Gi"
    );

    let single = objects(&render_ok(&helm, &[ci_values("single-node-values.yaml")], &[]));
    assert!(
        !names(&single).iter().any(|n| n.contains("compactor")),
        "single-node has no compactor pod: {:?}",
        names(&single)
    );
    let sts = &of_kind(&single, "StatefulSet")[0];
    assert!(args(sts).contains(&"--target=all"), "{:?}", args(sts));
    assert_eq!(rendered_config(&single).1["compactor"]["data_dir"], "/data/compactor");
}

/// The gossip key: generated into a Secret, random per install, mounted read-only in every pod and named by
/// `memberlist.cluster_key_file`; an existing Secret replaces it; in single-node mode none of it (turning it
/// off in distributed mode is refused with the other invalid values).
#[test]
fn distributed_gossip_is_signed_with_a_generated_or_existing_key() {
    let Some(helm) = helm() else { return };
    let production = [ci_values("production-3-zone-values.yaml")];
    let key_of = |objs: &[Value]| -> String {
        let secret = named(objs, "Secret", &format!("{RELEASE}-gossip-key"));
        secret["data"]["key"].as_str().expect("data.key").to_owned()
    };
    let objs = objects(&render_ok(&helm, &production, &[]));
    let key = key_of(&objs);
    // 48 random characters, base64: 64 characters, and another install gets another key.
    assert_eq!(key.len(), 64, "{key}");
    assert_ne!(
        key_of(&objects(&render_ok(&helm, &production, &[]))),
        key,
        "the key is random"
    );
    let (_, config) = rendered_config(&objs);
    assert_eq!(config["memberlist"]["cluster_key_file"], "/etc/heddle-gossip/key");
    let pods = workloads(&objs);
    assert!(pods.len() >= 6, "{:?}", names(&objs));
    for w in &pods {
        let pod = &w["spec"]["template"]["spec"];
        let volume = pod["volumes"]
            .as_array()
            .and_then(|v| v.iter().find(|v| v["name"] == "gossip-key"))
            .unwrap_or_else(|| panic!("{}: no gossip-key volume", w["metadata"]["name"]));
        assert_eq!(volume["secret"]["secretName"], format!("{RELEASE}-gossip-key"));
        assert!(
            pod["containers"][0]["volumeMounts"].as_array().is_some_and(|m| m
                .iter()
                .any(|m| m["mountPath"] == "/etc/heddle-gossip" && m["readOnly"] == true)),
            "{}: the key is mounted read-only",
            w["metadata"]["name"]
        );
    }

    let objs = objects(&render_ok(
        &helm,
        &production,
        &[
            "memberlist.clusterKey.existingSecret.name=ops-gossip",
            "memberlist.clusterKey.existingSecret.key=cluster.key",
        ],
    ));
    assert!(
        !of_kind(&objs, "Secret").iter().any(|s| s["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.ends_with("-gossip-key"))),
        "an existing Secret: no gossip key generated"
    );
    let (_, config) = rendered_config(&objs);
    assert_eq!(
        config["memberlist"]["cluster_key_file"],
        "/etc/heddle-gossip/cluster.key"
    );
    let volume = workloads(&objs)[0]["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "gossip-key").cloned())
        .expect("gossip-key volume");
    assert_eq!(volume["secret"]["secretName"], "ops-gossip");
    assert_eq!(volume["secret"]["items"][0]["key"], "cluster.key");

    // Single-node mode has no gossip: no key, and no cluster token to protect.
    let manifests = render_ok(&helm, &[ci_values("single-node-values.yaml")], &[]);
    assert!(!manifests.contains("gossip-key"), "{manifests}");
    let (_, config) = rendered_config(&objects(&manifests));
    assert!(lookup(&config, "memberlist.cluster_key_file").is_none());
    assert!(lookup(&config, "server.cluster_token_file").is_none());
}

#[test]
fn every_pod_is_non_root_read_only_and_ready_on_ready() {
    let Some(helm) = helm() else { return };
    for name in CI_VALUES {
        let objs = objects(&render_ok(&helm, &[ci_values(name)], &[]));
        let ws = workloads(&objs);
        assert!(!ws.is_empty(), "{name}");
        for w in ws {
            let id = format!("{name}: {}", w["metadata"]["name"]);
            let pod = &w["spec"]["template"]["spec"];
            assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{id}");
            assert_ne!(pod["securityContext"]["runAsUser"], 0, "{id}");
            for c in pod["containers"].as_array().expect("containers") {
                assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true, "{id}");
                assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false, "{id}");
                assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/ready", "{id}");
            }
            assert_eq!(checksum(w).len(), 64, "{id}: sha256 of the config");
        }
    }
}

#[test]
fn config_checksum_rolls_pods_only_when_the_config_changes() {
    let Some(helm) = helm() else { return };
    let values = [ci_values("production-3-zone-values.yaml")];
    let sums = |sets: &[&str]| -> BTreeSet<String> {
        workloads(&objects(&render_ok(&helm, &values, sets)))
            .into_iter()
            .map(checksum)
            .collect()
    };
    let base = sums(&[]);
    assert_eq!(
        base.len(),
        1,
        "every workload carries the same config checksum: {base:?}"
    );
    let changed = sums(&["config.limits.ingestionRate=20000"]);
    assert_eq!(changed.len(), 1);
    assert_ne!(
        base, changed,
        "a config change must change the checksum (and roll the pods)"
    );
    let scaled = sums(&["querier.resources.requests.cpu=2"]);
    assert_eq!(base, scaled, "a change outside the config must not roll every pod");
}

#[test]
fn schema_and_checks_refuse_bad_values_with_a_clear_message() {
    let Some(helm) = helm() else { return };
    let prod = ci_values("production-3-zone-values.yaml");
    // (case, values files, --set, words the error must contain)
    let cases: &[(&str, Vec<PathBuf>, &str, &[&str])] = &[
        (
            "unknown mode",
            vec![],
            "mode=cluster",
            &["/mode", "single-node", "distributed"],
        ),
        (
            "typo in a key",
            vec![],
            "ingester.replicaz=3",
            &["replicaz", "not allowed"],
        ),
        ("wrong type", vec![], "ports.http=http", &["/ports/http", "integer"]),
        (
            "grace period too short for a snapshot",
            vec![prod.clone()],
            "ingester.terminationGracePeriodSeconds=30",
            &["/ingester/terminationGracePeriodSeconds", "120"],
        ),
        (
            "bad duration",
            vec![],
            "config.querier.queryTimeout=2 minutes",
            &["/config/querier/queryTimeout"],
        ),
        (
            "filesystem storage in distributed mode",
            vec![prod.clone()],
            "storage.backend=filesystem",
            &["/storage/backend", "s3"],
        ),
        (
            "fewer zones than replicas",
            vec![prod.clone()],
            "ingester.replicationFactor=5",
            &["3 zones", "replicationFactor=5"],
        ),
        (
            "S3 without a bucket",
            vec![prod],
            "storage.s3.bucketName=",
            &["storage.s3.bucketName", "required"],
        ),
        (
            "admin token with the rollout-operator's prepare-downscale",
            vec![ci_values("production-3-zone-values.yaml")],
            "adminToken.existingSecret.name=heddle-admin",
            &[
                "adminToken.existingSecret.name",
                "ingester.prepareDownscale.enabled=false",
            ],
        ),
        (
            "distributed gossip without a key, while the cluster token travels",
            vec![ci_values("production-3-zone-values.yaml")],
            "memberlist.clusterKey.enabled=false",
            &[
                "memberlist.clusterKey.enabled=false",
                "server.cluster_token_file",
                "collect the token",
            ],
        ),
        (
            "zone name not a DNS label",
            vec![],
            "ingester.zoneAwareness.zones[0].name=Zone_A",
            &["/ingester/zoneAwareness/zones/0/name"],
        ),
    ];
    for (case, values, set, words) in cases {
        let err = match render(&helm, values, &[set]) {
            Ok(_) => panic!("{case}: --set {set} rendered"),
            Err(e) => e,
        };
        for w in *words {
            assert!(err.contains(w), "{case}: the error should mention {w:?}:\n{err}");
        }
    }
}

/// The block-storage keys the binary learned with compaction and shipping: both modes render every one.
const BLOCK_KEYS: &[&str] = &[
    "blocks_storage.backend",
    "blocks_storage.bucket_store.sync_interval",
    "blocks_storage.bucket_store.sync_dir",
    "blocks_storage.tsdb.dir",
    "blocks_storage.tsdb.block_ranges_period",
    "blocks_storage.tsdb.retention_period",
    "blocks_storage.tsdb.ship_interval",
    "blocks_storage.tsdb.head_compaction_idle_timeout",
    "blocks_storage.tsdb.flush_blocks_on_shutdown",
    "blocks_storage.tsdb.memory_snapshot_on_shutdown",
];

#[test]
fn the_rendered_pods_run_the_real_binary_and_accept_a_write() {
    let Some(helm) = helm() else { return };
    let heddle = cargo_bin("heddle").expect("build heddle");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = http_client(Duration::from_secs(10)).expect("client");
    for name in CI_VALUES {
        let manifests = render_ok(&helm, &[ci_values(name)], &[]);
        let (text, config) = rendered_config(&objects(&manifests));
        for key in BLOCK_KEYS {
            assert!(lookup(&config, key).is_some(), "{name}: {key} is not rendered:\n{text}");
        }
        assert_eq!(
            config["blocks_storage"]["bucket_store"]["sync_dir"], "/data/tsdb-sync",
            "{name}: the queriers' index headers on the pod's volume"
        );
        if name.starts_with("single-node") {
            assert_eq!(config["blocks_storage"]["backend"], "filesystem", "{name}");
            assert_eq!(
                config["blocks_storage"]["filesystem"]["dir"], "/data/blocks",
                "{name}: on the PVC"
            );
        } else {
            assert_eq!(config["blocks_storage"]["backend"], "s3", "{name}");
            assert_eq!(
                config["ingester"]["ring"]["tokens_file_path"], "/data/tokens",
                "{name}: on the PVC"
            );
            assert_eq!(config["ingester"]["ring"]["unregister_on_shutdown"], false, "{name}");
        }
        // Every workload with the chart's exact args and config; only LOCAL_SWAPS differ.
        let mut local = LocalDeployment::start(&heddle, &manifests);
        let writer = local
            .pods
            .iter()
            .find(|p| p.component == "distributor" || p.component == "single-node")
            .expect("a pod taking writes");
        // A write succeeds only once a quorum of the replication factor's ingesters (one per zone with zone
        // awareness) acknowledged it: the rendered ring settings must form that cluster. Bounded retries while
        // gossip converges.
        let url = format!("http://{}/api/v1/push", writer.http);
        let mut last = String::new();
        let accepted = wait_until(Duration::from_secs(60), || {
            let req = one_sample_request();
            match runtime.block_on(push(&client, &url, Some("helm-chart"), &req)) {
                Ok(o) if o.is_success() => true,
                Ok(o) => {
                    last = format!("{}: {}", o.status, o.body);
                    false
                }
                Err(e) => {
                    last = e.to_string();
                    false
                }
            }
        });
        assert!(
            accepted,
            "{name}: {} refused every write (last: {last})\n{}",
            writer.name,
            writer.process.log_tail(20)
        );
        // With gRPC TLS the write above went distributor -> ingesters over mutual TLS; the rendered preStop
        // hook's heddlectl flags (the mounted Secret) must reach the Admin API too.
        if writer.tls.is_some() {
            let heddlectl = cargo_bin("heddlectl").expect("build heddlectl");
            let ring = local::ring_states(&heddlectl, writer);
            assert!(
                ring.as_ref().is_some_and(|r| r.len() >= 3),
                "{name}: heddlectl with the Secret's certificate cannot read the ring: {ring:?}"
            );
        }
        local.stop_all();
    }
}

#[test]
fn the_prestop_hook_makes_an_ingester_leave_the_ring_while_a_plain_stop_keeps_its_entry() {
    let Some(helm) = helm() else { return };
    let heddle = cargo_bin("heddle").expect("build heddle");
    let heddlectl = cargo_bin("heddlectl").expect("build heddlectl");
    let manifests = render_ok(
        &helm,
        &[ci_values("external-s3-secret-values.yaml")],
        &["ingester.preStopPrepareShutdown.enabled=true"],
    );
    let mut local = LocalDeployment::start(&heddle, &manifests);
    let ids: Vec<String> = local.of("ingester").map(|p| p.name.clone()).collect();
    assert_eq!(ids.len(), 3, "RF 3 without zones: three ingesters");
    let ring =
        |local: &LocalDeployment, what: &str, cond: &dyn Fn(&std::collections::BTreeMap<String, String>) -> bool| {
            if let Err(last) = wait_ring(&heddlectl, local.first("distributor"), Duration::from_secs(60), cond) {
                panic!("the distributor's ring never showed {what}; last: {last}");
            }
        };
    ring(&local, "every ingester ACTIVE", &|r| {
        ids.iter().all(|id| r.get(id).map(String::as_str) == Some("ACTIVE"))
    });

    // Scale-down: the hook marks the pod, which then leaves the ring as it stops.
    let leaving = local.of("ingester").next().expect("ingester 0");
    // These values protect the admin endpoints with a token from a Secret: the hook must send it.
    assert!(leaving.admin_token.is_some(), "the CI values set adminToken");
    let (status, body) = get_admin(leaving, "/ingester/prepare-shutdown", false);
    assert_eq!(
        status, 401,
        "an admin endpoint must refuse a caller without the token: {body}"
    );
    assert_eq!(prepared(leaving), "unset");
    run_pre_stop(leaving, &heddlectl).expect("run the preStop hook");
    assert_eq!(prepared(leaving), "set", "the hook must set prepare-shutdown");
    leaving.stop();
    ring(&local, &format!("{} gone", ids[0]), &|r| !r.contains_key(&ids[0]));

    // Restart (no hook): unregister_on_shutdown=false keeps the entry so the pod takes its tokens back.
    let restarting = local.of("ingester").nth(1).expect("ingester 1");
    restarting.stop();
    ring(&local, &format!("{} kept, not ACTIVE", ids[1]), &|r| {
        r.get(&ids[1]).is_some_and(|s| s != "ACTIVE")
    });
    local.stop_all();
}

fn one_sample_request() -> WriteRequest {
    WriteRequest {
        timeseries: vec![timeseries(
            &[("__name__", "helm_chart_test"), ("job", "helm")],
            &[(now_ms(), 1.0)],
        )],
        ..WriteRequest::default()
    }
}

#[test]
fn alerts_and_dashboard_use_only_metrics_heddle_exports() {
    let Some(helm) = helm() else { return };
    let objs = objects(&render_ok(&helm, &[ci_values("production-3-zone-values.yaml")], &[]));
    let rules = serde_json::to_string(&of_kind(&objs, "PrometheusRule")[0]["spec"]).expect("json");
    let dashboard = named(&objs, "ConfigMap", &format!("{RELEASE}-dashboards"))["data"]["heddle-overview.json"]
        .as_str()
        .expect("dashboard")
        .to_owned();
    let referenced = heddle_metric_names(&format!("{rules}\n{dashboard}"));
    assert!(referenced.len() >= 8, "{referenced:?}");

    // Families appear in the exposition once used: push a valid and an invalid series, ask the querier once,
    // flush so the compactor (a pass a second) finds a tenant in the bucket.
    let h = HeddleProcess::start(HeddleOptions {
        ready_timeout: Duration::from_secs(120),
        args: vec!["--compactor.compaction-interval=1s".to_owned()],
        ..HeddleOptions::default()
    })
    .expect("start heddle");
    let now_ms = now_ms();
    let series = |labels: &[(&str, &str)]| timeseries(labels, &[(now_ms, 1.0)]);
    let req = WriteRequest {
        timeseries: vec![
            series(&[("__name__", "up"), ("job", "helm")]),
            series(&[("job", "no-name")]),
        ],
        ..WriteRequest::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let outcome = runtime
        .block_on(push(
            &http_client(Duration::from_secs(10)).expect("client"),
            &h.push_url(),
            None,
            &req,
        ))
        .expect("push");
    assert_eq!(outcome.status, 400, "the invalid series is refused: {}", outcome.body);
    let (status, _) = http_get(h.http_addr(), "/prometheus/api/v1/labels", Duration::from_secs(10)).expect("labels");
    assert_eq!(status, 200);
    let flush_url = format!("{}/ingester/flush?wait=true", h.url());
    let flushed = runtime
        .block_on(async {
            let client = http_client(Duration::from_secs(60)).expect("client");
            client.post(flush_url).send().await
        })
        .expect("flush");
    assert_eq!(flushed.status().as_u16(), 204, "flush");
    let compacted = || {
        http_get(h.http_addr(), "/metrics", Duration::from_secs(10))
            .is_ok_and(|(_, text)| text.contains("heddle_compactor_tenant_uncompacted_blocks{"))
    };
    assert!(
        wait_until(Duration::from_secs(30), compacted),
        "the compactor passed over the tenant"
    );
    let (status, exposition) = http_get(h.http_addr(), "/metrics", Duration::from_secs(10)).expect("metrics");
    assert_eq!(status, 200);
    let mut exported: BTreeSet<String> = exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect();
    // Families only clustered processes expose (the ring's), from the catalogue that
    // `tests/metrics_catalogue.rs` checks against a real cluster.
    let catalogue =
        std::fs::read_to_string(heddle_testkit::workspace_root().join("docs/metrics.md")).expect("catalogue");
    for row in catalogue.lines().filter(|l| l.starts_with("| `heddle_")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let (name, processes) = (cells[1].trim_matches('`'), cells[4]);
        if !processes.split(", ").any(|p| p == "all") {
            exported.insert(name.to_owned());
        }
    }
    let missing: Vec<_> = referenced.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "alerts or dashboard use metrics heddle does not export: {missing:?}\n{exposition}"
    );
}

#[test]
fn readme_values_table_matches_values_yaml() {
    let values = std::fs::read_to_string(chart_dir().join("values.yaml")).expect("values.yaml");
    let table = values_table(&values);
    assert!(
        table.contains("| `ingester.zoneAwareness.enabled` | `true` |"),
        "{table}"
    );
    let readme_path = chart_dir().join("README.md");
    let readme = std::fs::read_to_string(&readme_path).expect("chart README.md");
    let (start_marker, end_marker) = ("<!-- values-table:start -->\n", "<!-- values-table:end -->");
    let start = readme.find(start_marker).expect("values-table start marker") + start_marker.len();
    let end = readme.find(end_marker).expect("values-table end marker");
    if std::env::var_os("HEDDLE_UPDATE_DOCS").is_some() {
        std::fs::write(&readme_path, format!("{}{table}{}", &readme[..start], &readme[end..])).expect("write");
        return;
    }
    assert!(
        readme[start..end] == table,
        "helm/heddle/README.md's values table is stale: run `HEDDLE_UPDATE_DOCS=1 cargo test -p heddle-integration --test helm`"
    );
}
