//! Helpers of the chart tests: finding the tools, rendering, picking objects out of a rendering, and the
//! generators (values table, metric names) the tests compare against.

use heddle_testkit::{run_bounded, workspace_root};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Upper bound of one helm or kubernetes-validate run.
pub const TOOL_TIMEOUT: Duration = Duration::from_secs(120);
/// Kubernetes version whose API schemas the renderings must satisfy.
pub const KUBERNETES_VERSION: &str = "1.30.0";
/// The values files under `helm/heddle/ci/`, each rendered, validated and compared with its golden file.
pub const CI_VALUES: &[&str] = &[
    "single-node-values.yaml",
    "production-3-zone-values.yaml",
    "external-s3-secret-values.yaml",
];
/// Release name and namespace of every rendering (object names in the golden files depend on them).
pub const RELEASE: &str = "heddle";
pub fn chart_dir() -> PathBuf {
    workspace_root().join("helm/heddle")
}

pub fn ci_values(name: &str) -> PathBuf {
    chart_dir().join("ci").join(name)
}

/// A tool from `env`, else from `~/.cache/heddle-tools/<rel>`. Missing: panics under CI, else `None` (skip).
pub fn tool(env: &str, rel: &str, what: &str) -> Option<PathBuf> {
    let path = std::env::var_os(env).map(PathBuf::from).unwrap_or_else(|| {
        let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
        home.join(".cache/heddle-tools").join(rel)
    });
    if path.is_file() {
        return Some(path);
    }
    let hint = format!(
        "{what} not found at {}: run ./scripts/test once (it installs it into ~/.cache/heddle-tools) or set {env}",
        path.display()
    );
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{hint}");
    eprintln!("skipping: {hint}");
    None
}

pub fn helm() -> Option<PathBuf> {
    tool("HEDDLE_HELM", "helm", "helm")
}

pub fn kubernetes_validate() -> Option<PathBuf> {
    tool(
        "HEDDLE_KUBERNETES_VALIDATE",
        "venv/bin/kubernetes-validate",
        "kubernetes-validate",
    )
}

/// `helm template` of the chart with `values` files and `--set` pairs: the manifests, or helm's stderr.
pub fn render(helm: &Path, values: &[PathBuf], sets: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new(helm);
    cmd.args(["template", RELEASE])
        .arg(chart_dir())
        .args(["--namespace", RELEASE]);
    for v in values {
        cmd.arg("--values").arg(v);
    }
    for s in sets {
        cmd.args(["--set", s]);
    }
    let out = run_bounded(cmd, TOOL_TIMEOUT).expect("run helm template");
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(out.stderr)
    }
}

pub fn render_ok(helm: &Path, values: &[PathBuf], sets: &[&str]) -> String {
    render(helm, values, sets).unwrap_or_else(|e| panic!("helm template {values:?} {sets:?} failed:\n{e}"))
}

/// Every non-empty YAML document of a rendering.
pub fn objects(manifests: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(manifests)
        .map(|doc| Value::deserialize(doc).expect("helm rendered invalid YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

pub fn of_kind<'a>(objs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objs.iter().filter(|o| o["kind"] == kind).collect()
}

pub fn named<'a>(objs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objs.iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} among {:?}", names(objs)))
}

pub fn names(objs: &[Value]) -> Vec<String> {
    objs.iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap_or("?"),
                o["metadata"]["name"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

/// The StatefulSets and Deployments.
pub fn workloads(objs: &[Value]) -> Vec<&Value> {
    objs.iter()
        .filter(|o| o["kind"] == "StatefulSet" || o["kind"] == "Deployment")
        .collect()
}

pub fn args(workload: &Value) -> Vec<&str> {
    workload["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The `heddle.yaml` of the rendered ConfigMap, parsed.
pub fn rendered_config(objs: &[Value]) -> (String, Value) {
    let text = named(objs, "ConfigMap", &format!("{RELEASE}-config"))["data"]["heddle.yaml"]
        .as_str()
        .expect("heddle.yaml in the ConfigMap")
        .to_owned();
    let parsed: Value = serde_norway::from_str(&text).expect("the generated config is YAML");
    (text, parsed)
}

pub fn checksum(workload: &Value) -> String {
    workload["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        .as_str()
        .unwrap_or_else(|| panic!("no checksum/config on {}", workload["metadata"]["name"]))
        .to_owned()
}

/// Runs kubernetes-validate on a manifest file: (succeeded, combined output).
pub fn validate_file(validator: &Path, file: &Path) -> (bool, String) {
    let mut cmd = Command::new(validator);
    cmd.args(["--strict", "-k", KUBERNETES_VERSION]).arg(file);
    let out = run_bounded(cmd, TOOL_TIMEOUT).expect("run kubernetes-validate");
    (out.status.success(), format!("{}{}", out.stdout, out.stderr))
}

pub fn is_prometheus_operator(o: &Value) -> bool {
    o["apiVersion"] == "monitoring.coreos.com/v1"
}

/// The value at a dotted key of a config, if there.
pub fn lookup<'a>(config: &'a Value, dotted: &str) -> Option<&'a Value> {
    dotted.split('.').try_fold(config, |node, part| node.get(part))
}

/// Every `heddle_*` metric name in `text`.
pub fn heddle_metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("heddle_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let preceded_by_word = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if !preceded_by_word {
            names.insert(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    names
}

/// The README's values table, from the `# --` comments of values.yaml.
pub fn values_table(values_yaml: &str) -> String {
    let values: Value = serde_norway::from_str(values_yaml).expect("values.yaml is YAML");
    let mut rows = Vec::new();
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut doc: Option<String> = None;
    for line in values_yaml.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if let Some(text) = trimmed.strip_prefix("# --") {
            doc = Some(text.trim().to_owned());
            continue;
        }
        if let Some(text) = trimmed.strip_prefix('#') {
            if let Some(d) = doc.as_mut() {
                d.push(' ');
                d.push_str(text.trim());
            }
            continue;
        }
        let Some((key, _)) = trimmed.split_once(':') else {
            continue;
        };
        if trimmed.starts_with('-') || key.contains(' ') || key.is_empty() {
            continue;
        }
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        stack.push((indent, key.to_owned()));
        if let Some(d) = doc.take() {
            let path: Vec<&str> = stack.iter().map(|(_, k)| k.as_str()).collect();
            let default = path.iter().fold(&values, |v, k| &v[*k]);
            rows.push(format!(
                "| `{}` | `{}` | {} |",
                path.join("."),
                serde_json::to_string(default).expect("json").replace('|', "\\|"),
                d.replace('|', "\\|")
            ));
        }
    }
    format!("| key | default | description |\n|---|---|---|\n{}\n", rows.join("\n"))
}

/// `manifests` with the generated gossip key replaced by a placeholder: the chart makes a new random key on
/// every `helm template`, so golden files hold the placeholder.
pub fn mask_generated_gossip_key(manifests: &str) -> String {
    manifests
        .split("\n---\n")
        .map(|doc| {
            if doc.contains("kind: Secret") && doc.contains("-gossip-key\n") {
                doc.lines()
                    .map(|l| {
                        if l.starts_with("  key: ") {
                            "  key: <generated>"
                        } else {
                            l
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            } else {
                doc.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n---\n")
}
