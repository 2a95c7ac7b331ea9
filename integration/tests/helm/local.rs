//! Runs a chart rendering as local processes: every pod gets exactly the container args and the ConfigMap the
//! chart rendered, with only what cannot be the same for several processes on one machine swapped
//! ([`LOCAL_SWAPS`]). So the chart and the binary cannot disagree about a config key or a flag, and the
//! rendered ring and gossip settings must form a cluster that accepts writes.

use crate::support::{objects, of_kind, rendered_config};
use heddle_testkit::{ManagedProcess, TestkitError, free_port, run_bounded, wait_until};
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Upper bound on one process becoming ready (the machine may be busy compiling).
pub const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// Upper bound on a graceful stop.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// The rendered config keys a local run replaces, and why. Everything else is used as rendered, S3 keys
/// included: the S3 client connects on first use, so an unreachable endpoint does not stop a start. Each key
/// must be in the rendering where it applies (a swap of a key the chart stopped rendering fails the test).
pub const LOCAL_SWAPS: &[(&str, &str)] = &[
    ("server.http_listen_port", "a free port per process"),
    ("server.grpc_listen_port", "a free port per process"),
    (
        "blocks_storage.tsdb.dir",
        "the pod's /data volume is a temporary directory per process",
    ),
    (
        "blocks_storage.filesystem.dir",
        "the bucket directory on that volume (single-node)",
    ),
    ("compactor.data_dir", "the compactor's scratch directory on that volume"),
    (
        "blocks_storage.bucket_store.sync_dir",
        "the queriers' index headers on that volume",
    ),
    (
        "ingester.ring.tokens_file_path",
        "the tokens file on that volume (distributed)",
    ),
    ("memberlist.bind_port", "a free UDP port per process (distributed)"),
    (
        "server.admin_token_file",
        "the admin token Secret mounted at /etc/heddle-admin is a local file",
    ),
    (
        "server.cluster_token_file",
        "the cluster token Secret mounted at /etc/heddle-cluster is one local file for every process (distributed)",
    ),
    (
        "memberlist.cluster_key_file",
        "the gossip key Secret mounted at /etc/heddle-gossip is a local file, one key per deployment",
    ),
    (
        "memberlist.join_members",
        "the first ingester's local gossip address instead of the cluster DNS name (distributed)",
    ),
    (
        "server.grpc_tls_config.cert_file",
        "the gRPC TLS Secret mounted at /etc/heddle-tls is a test CA's files, made per run",
    ),
    ("server.grpc_tls_config.key_file", "as cert_file"),
    ("server.grpc_tls_config.client_ca_file", "as cert_file"),
    ("ingester_client.grpc_client_config.tls_cert_path", "as cert_file"),
    ("ingester_client.grpc_client_config.tls_key_path", "as cert_file"),
    ("ingester_client.grpc_client_config.tls_ca_path", "as cert_file"),
];

/// Where the chart mounts the gRPC TLS Secret (`tls.crt`, `tls.key`, `ca.crt`).
const TLS_MOUNT: &str = "/etc/heddle-tls/";

/// The local stand-in for the TLS Secret: a directory with cert-manager's file names, signed by a CA made for
/// this run, whose certificate also names the chart's `grpcTls.serverName`.
#[derive(Debug, Clone)]
pub struct LocalTls {
    pub dir: std::path::PathBuf,
    pub server_name: String,
}

impl LocalTls {
    fn make(root: &Path, server_name: &str) -> Self {
        let pki = heddle_testkit::TestPki::generate_for(&root.join("pki"), "helm-test-ca", &[server_name])
            .expect("generate test certificates");
        let dir = root.join("heddle-tls");
        std::fs::create_dir_all(&dir).expect("create the TLS dir");
        for (from, to) in [
            (&pki.server_cert, "tls.crt"),
            (&pki.server_key, "tls.key"),
            (&pki.ca_cert, "ca.crt"),
        ] {
            std::fs::copy(from, dir.join(to)).expect("copy a certificate");
        }
        Self {
            dir,
            server_name: server_name.to_owned(),
        }
    }

    /// `path` (under the Secret's mount) on this machine.
    fn local(&self, path: &str) -> std::path::PathBuf {
        let name = path
            .strip_prefix(TLS_MOUNT)
            .unwrap_or_else(|| panic!("{path}: the chart mounts the TLS Secret at {TLS_MOUNT}"));
        self.dir.join(name)
    }

    /// An argument with the mount path replaced by the local directory.
    fn arg(&self, arg: &str) -> String {
        arg.replace(TLS_MOUNT, &format!("{}/", self.dir.display()))
    }

    /// heddlectl flags reaching a TLS port with the Secret's certificate.
    fn heddlectl_args(&self) -> Vec<String> {
        vec![
            format!("--tls-ca-path={}", self.dir.join("ca.crt").display()),
            format!("--tls-cert-path={}", self.dir.join("tls.crt").display()),
            format!("--tls-key-path={}", self.dir.join("tls.key").display()),
            format!("--tls-server-name={}", self.server_name),
        ]
    }
}

/// One running pod of a rendering.
#[derive(Debug)]
pub struct LocalPod {
    /// The pod name (`<workload>-<ordinal>` for StatefulSets).
    pub name: String,
    /// `ingester`, `distributor`, `querier`, `compactor` or `single-node`.
    pub component: String,
    pub http: SocketAddr,
    pub grpc: SocketAddr,
    pub gossip: SocketAddr,
    /// The container args after substitution, for messages.
    pub args: Vec<String>,
    /// The rendered preStop exec command, if any.
    pub pre_stop: Option<Vec<String>>,
    /// The local admin token file and its token, when the chart renders `server.admin_token_file`.
    pub admin_token: Option<(std::path::PathBuf, String)>,
    /// The TLS files, when the chart renders `server.grpc_tls_config`.
    pub tls: Option<LocalTls>,
    pub process: ManagedProcess,
}

impl LocalPod {
    /// Sends SIGTERM and asserts a clean exit.
    pub fn stop(&mut self) {
        let status = self.process.sigterm_and_wait(STOP_TIMEOUT).expect("stop heddle");
        assert!(
            status.success(),
            "{}: exited with {status:?}\nargs: {:?}\n{}",
            self.name,
            self.args,
            self.process.log_tail(30)
        );
    }
}

/// Every pod of a rendering started locally, ingesters first.
#[derive(Debug)]
pub struct LocalDeployment {
    pub pods: Vec<LocalPod>,
    _dir: tempfile::TempDir,
}

impl LocalDeployment {
    /// Starts the workloads of `manifests` with `binary`: one pod per workload, except that a StatefulSet of
    /// ingesters gets as many pods as the replication factor needs when it is the only one (no zones).
    pub fn start(binary: &Path, manifests: &str) -> Self {
        let objs = objects(manifests);
        let (_, config) = rendered_config(&objs);
        let dir = tempfile::Builder::new()
            .prefix("heddle-helm-")
            .tempdir()
            .expect("temp dir");
        let rf = config["ingester"]["ring"]["replication_factor"].as_u64().unwrap_or(1) as usize;
        let statefulsets = of_kind(&objs, "StatefulSet");
        let mut plan: Vec<(&Value, String)> = Vec::new();
        for sts in &statefulsets {
            let name = sts["metadata"]["name"].as_str().expect("name");
            let replicas = sts["spec"]["replicas"].as_u64().unwrap_or(1) as usize;
            let pods = if statefulsets.len() >= rf { 1 } else { rf.min(replicas) };
            plan.extend((0..pods).map(|i| (*sts, format!("{name}-{i}"))));
        }
        for deploy in of_kind(&objs, "Deployment") {
            let name = deploy["metadata"]["name"].as_str().expect("name");
            plan.push((deploy, format!("{name}-local")));
        }
        let tls = config["server"].get("grpc_tls_config").map(|_| {
            let name = config["ingester_client"]["grpc_client_config"]["tls_server_name"]
                .as_str()
                .expect("the chart renders tls_server_name with TLS");
            LocalTls::make(dir.path(), name)
        });
        let mut pods: Vec<LocalPod> = Vec::new();
        let mut seed: Option<SocketAddr> = None;
        for (workload, pod_name) in plan {
            let pod = start_pod(binary, dir.path(), &config, workload, &pod_name, seed, tls.as_ref());
            seed = seed.or(Some(pod.gossip));
            pods.push(pod);
        }
        Self { pods, _dir: dir }
    }

    /// The pods of one component.
    pub fn of(&mut self, component: &str) -> impl Iterator<Item = &mut LocalPod> {
        self.pods.iter_mut().filter(move |p| p.component == component)
    }

    /// The first pod of one component.
    pub fn first(&self, component: &str) -> &LocalPod {
        self.pods
            .iter()
            .find(|p| p.component == component)
            .unwrap_or_else(|| panic!("no {component} pod"))
    }

    /// Stops every pod still running (distributors and queriers first), asserting clean exits.
    pub fn stop_all(&mut self) {
        for pod in self.pods.iter_mut().rev() {
            if pod.process.is_running() {
                pod.stop();
            }
        }
    }
}

fn free_udp_port() -> u16 {
    let socket = UdpSocket::bind(("127.0.0.1", 0)).expect("bind udp 127.0.0.1:0");
    socket.local_addr().expect("udp address").port()
}

/// Replaces the value at a dotted key; false when the key is not there.
pub fn swap_key(config: &mut Value, dotted: &str, value: Value) -> bool {
    let mut node = config;
    let mut parts = dotted.split('.').peekable();
    while let Some(part) = parts.next() {
        let Some(next) = node.get_mut(part) else {
            return false;
        };
        if parts.peek().is_none() {
            *next = value;
            return true;
        }
        node = next;
    }
    false
}

fn start_pod(
    binary: &Path,
    root: &Path,
    rendered: &Value,
    workload: &Value,
    pod_name: &str,
    seed: Option<SocketAddr>,
    tls: Option<&LocalTls>,
) -> LocalPod {
    let pod_spec = &workload["spec"]["template"]["spec"];
    let container = &pod_spec["containers"][0];
    let component = workload["metadata"]["labels"]["app.kubernetes.io/component"]
        .as_str()
        .expect("component label")
        .to_owned();
    let data = root.join(pod_name).join("data");
    std::fs::create_dir_all(&data).expect("create the pod's data dir");
    let (http_port, mut grpc_port) = (free_port().expect("port"), free_port().expect("port"));
    while grpc_port == http_port {
        grpc_port = free_port().expect("port");
    }
    let gossip_port = free_udp_port();

    let mut config = rendered.clone();
    let distributed = config.get("memberlist").is_some();
    let mut swaps: Vec<(&str, Value)> = vec![
        ("server.http_listen_port", http_port.into()),
        ("server.grpc_listen_port", grpc_port.into()),
        ("blocks_storage.tsdb.dir", path_value(&data.join("tsdb"))),
        ("compactor.data_dir", path_value(&data.join("compactor"))),
        (
            "blocks_storage.bucket_store.sync_dir",
            path_value(&data.join("tsdb-sync")),
        ),
    ];
    if distributed {
        swaps.push(("ingester.ring.tokens_file_path", path_value(&data.join("tokens"))));
        swaps.push(("memberlist.bind_port", gossip_port.into()));
        // The first process (an ingester) seeds itself, as the headless service would list it.
        let join = seed.unwrap_or(SocketAddr::from(([127, 0, 0, 1], gossip_port)));
        swaps.push(("memberlist.join_members", Value::from(vec![join.to_string()])));
    } else {
        swaps.push(("blocks_storage.filesystem.dir", path_value(&root.join("bucket"))));
    }
    let admin_token = config["server"].get("admin_token_file").map(|_| {
        let (file, token) = (root.join("admin-token"), "local-admin-token".to_owned());
        std::fs::write(&file, format!("{token}\n")).expect("write the admin token");
        (file, token)
    });
    if let Some((file, _)) = &admin_token {
        swaps.push(("server.admin_token_file", path_value(file)));
    }
    // Every pod mounts the same cluster token Secret; here every process reads the same file.
    if config["server"].get("cluster_token_file").is_some() {
        let file = root.join("cluster-token");
        std::fs::write(&file, "local-cluster-token\n").expect("write the cluster token");
        swaps.push(("server.cluster_token_file", path_value(&file)));
    }
    if distributed && config["memberlist"].get("cluster_key_file").is_some() {
        // `root` is the deployment's: every pod reads the same key, as they would the one Secret.
        let file = root.join("gossip-key");
        std::fs::write(&file, "local-gossip-key-of-this-deployment\n").expect("write the gossip key");
        swaps.push(("memberlist.cluster_key_file", path_value(&file)));
    }
    if let Some(tls) = tls {
        for (section, keys) in [
            (
                "server.grpc_tls_config",
                &["cert_file", "key_file", "client_ca_file"][..],
            ),
            (
                "ingester_client.grpc_client_config",
                &["tls_cert_path", "tls_key_path", "tls_ca_path"][..],
            ),
        ] {
            for key in keys {
                let (outer, inner) = section.split_once('.').expect("two levels");
                let rendered = config[outer][inner][*key]
                    .as_str()
                    .unwrap_or_else(|| panic!("{pod_name}: {section}.{key} is not rendered"))
                    .to_owned();
                let dotted: &'static str = LOCAL_SWAPS
                    .iter()
                    .map(|(k, _)| *k)
                    .find(|k| *k == format!("{section}.{key}"))
                    .expect("listed in LOCAL_SWAPS");
                swaps.push((dotted, path_value(&tls.local(&rendered))));
            }
        }
    }
    for (key, value) in swaps {
        assert!(
            LOCAL_SWAPS.iter().any(|(k, _)| *k == key),
            "{key}: every swapped key is listed (and explained) in LOCAL_SWAPS"
        );
        assert!(
            swap_key(&mut config, key, value),
            "{pod_name}: the rendered config has no {key} to swap:\n{config:#}"
        );
    }
    // Not rendered (the chart listens on every interface); tests listen on loopback only.
    config["server"]["http_listen_address"] = "127.0.0.1".into();
    config["server"]["grpc_listen_address"] = "127.0.0.1".into();
    let config_path = root.join(pod_name).join("heddle.yaml");
    std::fs::write(&config_path, serde_norway::to_string(&config).expect("yaml")).expect("write config");

    let env = container_env(container, pod_name);
    let mut args = Vec::new();
    let mut saw_config_flag = false;
    for arg in container["args"].as_array().expect("container args") {
        let arg = substitute(arg.as_str().expect("string arg"), &env);
        let arg = if arg.starts_with("--config.file=") {
            saw_config_flag = true;
            format!("--config.file={}", config_path.display())
        } else if arg.starts_with("--ingester.ring.instance-port=") {
            format!("--ingester.ring.instance-port={grpc_port}")
        } else {
            arg
        };
        args.push(arg);
    }
    assert!(
        saw_config_flag,
        "{pod_name}: the chart must pass --config.file: {args:?}"
    );
    let pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
        .as_array()
        .map(|c| {
            c.iter()
                .map(|a| a.as_str().expect("string").to_owned())
                .collect::<Vec<_>>()
        });

    let mut cmd = Command::new(binary);
    cmd.args(&args);
    for var in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ENDPOINT_URL",
        "AWS_REGION",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(&env);
    let mut process = ManagedProcess::spawn(pod_name, cmd, &root.join(pod_name)).expect("spawn heddle");
    let http = SocketAddr::from(([127, 0, 0, 1], http_port));
    if let Err(e) = process.wait_http_ok(http, "/ready", READY_TIMEOUT) {
        panic!(
            "{pod_name}: heddle did not get ready with the chart's config and args ({e})\nargs: {args:?}\nconfig:\n{config:#}"
        );
    }
    LocalPod {
        name: pod_name.to_owned(),
        component,
        http,
        grpc: SocketAddr::from(([127, 0, 0, 1], grpc_port)),
        gossip: SocketAddr::from(([127, 0, 0, 1], gossip_port)),
        args,
        pre_stop,
        admin_token,
        tls: tls.cloned(),
        process,
    }
}

fn path_value(p: &Path) -> Value {
    Value::from(p.display().to_string())
}

/// The container's environment as the kubelet would set it: field refs from the pod, Secret keys as
/// stand-in values (no such Secret exists here).
fn container_env(container: &Value, pod_name: &str) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for e in container["env"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().expect("env name").to_owned();
        let value = if let Some(v) = e["value"].as_str() {
            v.to_owned()
        } else if let Some(field) = e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            match field {
                "metadata.name" => pod_name.to_owned(),
                "status.podIP" => "127.0.0.1".to_owned(),
                other => panic!("{pod_name}: no local value for fieldRef {other}"),
            }
        } else if let Some(key) = e["valueFrom"]["secretKeyRef"]["key"].as_str() {
            format!("local-{key}")
        } else {
            panic!("{pod_name}: env {name} has no value the test understands: {e}")
        };
        env.insert(name, value);
    }
    env
}

/// Kubernetes' `$(VAR)` expansion of container args.
fn substitute(arg: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = arg.to_owned();
    for (k, v) in env {
        out = out.replace(&format!("$({k})"), v);
    }
    assert!(
        !out.contains("$("),
        "{arg}: references a variable the container does not define"
    );
    out
}

/// Runs a pod's rendered preStop command locally: `/usr/local/bin/heddlectl` is the workspace's heddlectl,
/// and `--addr` points at the pod's local gRPC port.
pub fn run_pre_stop(pod: &LocalPod, heddlectl: &Path) -> Result<String, TestkitError> {
    let command = pod
        .pre_stop
        .as_ref()
        .unwrap_or_else(|| panic!("{}: no preStop hook rendered", pod.name));
    assert_eq!(
        command[0], "/usr/local/bin/heddlectl",
        "{}: the image ships heddlectl there",
        pod.name
    );
    let mut cmd = Command::new(heddlectl);
    for arg in &command[1..] {
        if arg.starts_with("--addr=") {
            cmd.arg(format!("--addr={}", pod.grpc));
        } else if arg.starts_with("--token-file=") {
            let (file, _) = pod
                .admin_token
                .as_ref()
                .expect("a token file flag without a rendered token file");
            cmd.arg(format!("--token-file={}", file.display()));
        } else if let Some(tls) = &pod.tls {
            cmd.arg(tls.arg(arg));
        } else {
            cmd.arg(arg);
        }
    }
    let out = run_bounded(cmd, Duration::from_secs(30))?;
    assert!(
        out.status.success(),
        "{}: preStop {command:?} failed:\n{}\n{}",
        pod.name,
        out.stdout,
        out.stderr
    );
    Ok(out.stdout)
}

/// `id -> state` of the ring as `pod` sees it, through `heddlectl ring --output=json` (with the pod's admin
/// token, if any).
pub fn ring_states(heddlectl: &Path, pod: &LocalPod) -> Option<BTreeMap<String, String>> {
    let mut cmd = Command::new(heddlectl);
    cmd.arg(format!("--addr={}", pod.grpc));
    if let Some((file, _)) = &pod.admin_token {
        cmd.arg(format!("--token-file={}", file.display()));
    }
    if let Some(tls) = &pod.tls {
        cmd.args(tls.heddlectl_args());
    }
    cmd.args(["--output=json", "ring"]);
    let out = run_bounded(cmd, Duration::from_secs(15)).ok()?;
    if !out.status.success() {
        return None;
    }
    let parsed: Value = serde_json::from_str(&out.stdout).ok()?;
    Some(
        parsed["members"]
            .as_array()?
            .iter()
            .map(|m| {
                (
                    m["id"].as_str().unwrap_or_default().to_owned(),
                    m["state"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect(),
    )
}

/// Waits (bounded) until `cond` holds for the ring `pod` sees; the last ring seen on failure.
pub fn wait_ring(
    heddlectl: &Path,
    pod: &LocalPod,
    timeout: Duration,
    cond: impl Fn(&BTreeMap<String, String>) -> bool,
) -> Result<(), String> {
    let mut last = None;
    let ok = wait_until(timeout, || {
        last = ring_states(heddlectl, pod);
        last.as_ref().is_some_and(&cond)
    });
    if ok { Ok(()) } else { Err(format!("{last:?}")) }
}

/// `GET /ingester/prepare-shutdown` of a pod (with its admin token, if any): `set` or `unset`.
pub fn prepared(pod: &LocalPod) -> String {
    let (status, body) = get_admin(pod, "/ingester/prepare-shutdown", true);
    assert_eq!(status, 200, "{}: {body}", pod.name);
    body.trim().to_owned()
}

/// `GET path` of a pod's HTTP port, sending its admin token as a bearer token when `with_token`.
pub fn get_admin(pod: &LocalPod, path: &str, with_token: bool) -> (u16, String) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("client");
        let mut req = client.get(format!("http://{}{path}", pod.http));
        if let (true, Some((_, token))) = (with_token, &pod.admin_token) {
            req = req.bearer_auth(token);
        }
        let resp = req.send().await.expect("GET an admin endpoint");
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap_or_default())
    })
}
