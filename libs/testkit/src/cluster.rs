//! A multi-process Heddle cluster for integration tests: ingesters, distributors and a querier joined by gossip.
//!
//! Every process is a real `heddle` with its own directory under one temporary root, its own HTTP, gRPC and
//! gossip (UDP) ports picked once and kept across restarts, and `--memberlist.join` pointing at the first
//! ingester. [`Cluster::start`] returns once every process answers `/ready` and every distributor and the
//! querier see all ingesters ACTIVE in their own copy of the ring (asked over the Admin gRPC `RingStatus`,
//! which each process answers from its own gossip view). Dropping the cluster kills every process (SIGKILL,
//! also a SIGSTOPped one) and deletes the directories.

use crate::process::{DEFAULT_STOP_TIMEOUT, ManagedProcess};
use crate::{Endpoints, TestPki, TestkitError, cargo_bin, free_port, wait_until};
use heddle_proto::admin::admin_client::AdminClient;
use heddle_proto::admin::{
    ForgetMemberRequest, RingMember, RingStatusRequest, TenantStatsRequest, TenantStatsResponse,
};
use heddle_proto::transport::{ClientTls, describe_error, grpc_endpoint, grpc_uri};
use std::collections::HashSet;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;
use tempfile::TempDir;

/// How a [`Cluster`] is started. Defaults: 3 ingesters, 2 distributors, RF 3, no zones, and ring timings
/// short enough for tests (1 s heartbeats, 5 s heartbeat timeout, 2 s push deadline), ingesters that keep their
/// ring entry on a clean stop.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Number of `--target=ingester` processes.
    pub ingesters: usize,
    /// Number of `--target=distributor` processes.
    pub distributors: usize,
    /// `--ingester.ring.replication-factor`, given to every process.
    pub replication_factor: usize,
    /// Zone awareness: ingester `i` is in zone `zone-<i % zones>` and every process gets
    /// `--ingester.ring.zone-awareness-enabled`.
    pub zone_awareness: bool,
    /// With zone awareness, how many zones the ingesters are spread over; 0 means one zone per ingester.
    pub zones: usize,
    /// `--ingester.ring.heartbeat-period`.
    pub heartbeat_period: Duration,
    /// `--ingester.ring.heartbeat-timeout` (ingesters, distributors and the querier all judge health with it).
    pub heartbeat_timeout: Duration,
    /// `--distributor.remote-timeout`: the deadline of each push from a distributor to an ingester.
    pub remote_timeout: Duration,
    /// `--ingester.ring.unregister-on-shutdown` for the ingesters. Off by default, as in the Helm chart: a
    /// stopped ingester stays in the ring as LEAVING and takes its tokens back when it restarts.
    pub unregister_on_shutdown: bool,
    /// Extra arguments for every process, after the ones the harness sets.
    pub args: Vec<String>,
    /// Extra environment variables for every process.
    pub env: Vec<(String, String)>,
    /// Upper bound on each wait for `/ready` and for the ring to settle.
    pub ready_timeout: Duration,
    /// Binary to run; `None` builds and runs the workspace's `heddle` (see [`cargo_bin`]).
    pub binary: Option<PathBuf>,
    /// Mutual TLS on every process's gRPC listeners ([`TestPki::server_args`]); the harness's own Admin calls
    /// then present the client certificate.
    pub tls: Option<TestPki>,
    /// With `tls`: give distributors and the querier [`TestPki::ingester_client_args`] (the default). Off
    /// shows what a reader without client TLS gets from TLS ingesters.
    pub ingester_client_tls: bool,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            ingesters: 3,
            distributors: 2,
            replication_factor: 3,
            zone_awareness: false,
            zones: 0,
            heartbeat_period: Duration::from_secs(1),
            heartbeat_timeout: Duration::from_secs(5),
            remote_timeout: Duration::from_secs(2),
            unregister_on_shutdown: false,
            args: Vec::new(),
            env: Vec::new(),
            ready_timeout: Duration::from_secs(60),
            binary: None,
            tls: None,
            ingester_client_tls: true,
        }
    }
}

/// The role a [`Node`] runs (`--target`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Ingester,
    Distributor,
    Querier,
}

impl Role {
    fn target(self) -> &'static str {
        match self {
            Role::Ingester => "ingester",
            Role::Distributor => "distributor",
            Role::Querier => "querier",
        }
    }
}

/// One `heddle` process of a [`Cluster`]: its ports and directory, kept across restarts.
#[derive(Debug)]
pub struct Node {
    role: Role,
    name: String,
    dir: PathBuf,
    endpoints: Endpoints,
    gossip_port: u16,
    args: Vec<String>,
    process: Option<ManagedProcess>,
}

impl std::ops::Deref for Node {
    type Target = Endpoints;

    fn deref(&self) -> &Endpoints {
        &self.endpoints
    }
}

impl Node {
    /// `ingester-0`, `distributor-1`, `querier`: the ring instance id of an ingester, and the log file prefix.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the node runs.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Gossip (UDP) address.
    pub fn gossip_addr(&self) -> SocketAddr {
        ([127, 0, 0, 1], self.gossip_port).into()
    }

    /// The node's own directory: logs, and for an ingester its data directory and tokens file.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `--blocks-storage.tsdb.dir` of an ingester.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// `--ingester.ring.tokens-file-path` of an ingester.
    pub fn tokens_path(&self) -> PathBuf {
        self.dir.join("tokens.json")
    }

    /// The command line (without the program).
    pub fn command_args(&self) -> &[String] {
        &self.args
    }

    /// OS process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(ManagedProcess::pid)
    }

    /// Whether the process is running (a SIGSTOPped one counts as running).
    pub fn is_running(&mut self) -> bool {
        self.process.as_mut().is_some_and(ManagedProcess::is_running)
    }

    /// The last `lines` lines of the node's stderr and stdout.
    pub fn log_tail(&self, lines: usize) -> String {
        match &self.process {
            Some(p) => p.log_tail(lines),
            None => {
                let path = self.dir.join(format!("{}.stderr.log", self.name));
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let all: Vec<&str> = text.lines().collect();
                format!(
                    "--- {} ---\n{}",
                    path.display(),
                    all[all.len().saturating_sub(lines)..].join("\n")
                )
            }
        }
    }

    /// Spawns the process without waiting for it.
    fn launch(&mut self, binary: &Path, env: &[(String, String)]) -> Result<(), TestkitError> {
        let mut cmd = Command::new(binary);
        cmd.args(&self.args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        self.process = Some(ManagedProcess::spawn(&self.name, cmd, &self.dir)?);
        Ok(())
    }

    /// Waits for `GET /ready` to answer 200 (fails early if the process exits).
    fn wait_ready(&mut self, timeout: Duration) -> Result<(), TestkitError> {
        let addr = self.http_addr();
        match self.process.as_mut() {
            Some(p) => p.wait_http_ok(addr, "/ready", timeout),
            None => Err(TestkitError::NotRunning {
                name: self.name.clone(),
            }),
        }
    }

    fn signal(&self, signal: &str) -> Result<(), TestkitError> {
        let pid = self.pid().ok_or_else(|| TestkitError::NotRunning {
            name: self.name.clone(),
        })?;
        // std has no signal API and the workspace denies unsafe code; kill(1) is always present.
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .map_err(|e| TestkitError::io(format!("running kill -{signal} {pid}"), e))?;
        if status.success() {
            Ok(())
        } else {
            Err(TestkitError::NotRunning {
                name: format!("{} (kill -{signal} {pid} failed)", self.name),
            })
        }
    }
}

/// A UDP port on 127.0.0.1 that was free a moment ago (gossip is UDP; a free TCP port says nothing about it).
fn free_udp_port() -> Result<u16, TestkitError> {
    let socket = UdpSocket::bind(("127.0.0.1", 0)).map_err(|e| TestkitError::io("binding udp 127.0.0.1:0", e))?;
    Ok(socket
        .local_addr()
        .map_err(|e| TestkitError::io("reading the bound udp address", e))?
        .port())
}

/// Picks `n` distinct TCP ports and `m` distinct UDP ports.
fn pick_ports(tcp: usize, udp: usize) -> Result<(Vec<u16>, Vec<u16>), TestkitError> {
    let pick = |n: usize, f: fn() -> Result<u16, TestkitError>| -> Result<Vec<u16>, TestkitError> {
        let mut seen = HashSet::new();
        let mut out = Vec::with_capacity(n);
        // Bounded: the kernel hands out ephemeral ports in sequence, so repeats are rare.
        for _ in 0..n * 20 {
            if out.len() == n {
                break;
            }
            let p = f()?;
            if seen.insert(p) {
                out.push(p);
            }
        }
        if out.len() < n {
            return Err(TestkitError::io(
                format!("picking {n} distinct ports"),
                std::io::Error::other("the kernel kept returning the same ports"),
            ));
        }
        Ok(out)
    };
    Ok((pick(tcp, free_port)?, pick(udp, free_udp_port)?))
}

fn millis(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// A running cluster owned by a test. See the module docs.
#[derive(Debug)]
pub struct Cluster {
    opts: ClusterOptions,
    binary: PathBuf,
    ingesters: Vec<Node>,
    distributors: Vec<Node>,
    querier: Node,
    /// What the harness's Admin calls present, with `opts.tls`.
    admin_tls: Option<ClientTls>,
    // Last: the processes (above) are killed before their directories are deleted.
    root: TempDir,
}

impl Cluster {
    /// Starts every process, waits for `/ready` everywhere and for every distributor and the querier to see all
    /// ingesters ACTIVE.
    pub fn start(opts: ClusterOptions) -> Result<Self, TestkitError> {
        let binary = match &opts.binary {
            Some(b) => b.clone(),
            None => cargo_bin("heddle")?,
        };
        let root = tempfile::Builder::new()
            .prefix("heddle-cluster-")
            .tempdir()
            .map_err(|e| TestkitError::io("creating the cluster directory", e))?;
        let n = opts.ingesters + opts.distributors + 1;
        let (tcp, udp) = pick_ports(2 * n, n)?;
        let join = format!("127.0.0.1:{}", udp[0]);
        let mut k = 0;
        let mut node = |role: Role, name: String| -> Result<Node, TestkitError> {
            let dir = root.path().join(&name);
            std::fs::create_dir_all(&dir).map_err(|e| TestkitError::io(format!("creating {}", dir.display()), e))?;
            let mut node = Node {
                role,
                name,
                dir,
                endpoints: Endpoints {
                    http_port: tcp[2 * k],
                    grpc_port: tcp[2 * k + 1],
                },
                gossip_port: udp[k],
                args: Vec::new(),
                process: None,
            };
            node.args = Self::args_for(&opts, &node, k, &join);
            k += 1;
            Ok(node)
        };
        let ingesters = (0..opts.ingesters)
            .map(|i| node(Role::Ingester, format!("ingester-{i}")))
            .collect::<Result<Vec<_>, _>>()?;
        let distributors = (0..opts.distributors)
            .map(|i| node(Role::Distributor, format!("distributor-{i}")))
            .collect::<Result<Vec<_>, _>>()?;
        let querier = node(Role::Querier, "querier".to_owned())?;
        let admin_tls = opts.tls.as_ref().map(TestPki::client_tls).transpose()?;
        let mut me = Self {
            opts,
            binary,
            ingesters,
            distributors,
            querier,
            admin_tls,
            root,
        };
        // Spawn everything first (ingesters replay and join in parallel), then wait for each.
        let (binary, env) = (me.binary.clone(), me.opts.env.clone());
        for node in me.nodes_mut() {
            node.launch(&binary, &env)?;
        }
        let timeout = me.opts.ready_timeout;
        for node in me.nodes_mut() {
            node.wait_ready(timeout)?;
        }
        let count = me.ingesters.len();
        me.wait_ring(&format!("{count} ACTIVE ingesters"), |m| active_count(m) == count)?;
        Ok(me)
    }

    fn args_for(opts: &ClusterOptions, node: &Node, index: usize, join: &str) -> Vec<String> {
        let mut a = vec![
            format!("--target={}", node.role.target()),
            "--server.http-listen-address=127.0.0.1".to_owned(),
            format!("--server.http-listen-port={}", node.http_port),
            "--server.grpc-listen-address=127.0.0.1".to_owned(),
            format!("--server.grpc-listen-port={}", node.grpc_port),
            "--memberlist.bind-addr=127.0.0.1".to_owned(),
            format!("--memberlist.bind-port={}", node.gossip_port),
            format!("--memberlist.join={join}"),
            format!("--ingester.ring.replication-factor={}", opts.replication_factor),
            format!("--ingester.ring.heartbeat-period={}", millis(opts.heartbeat_period)),
            format!("--ingester.ring.heartbeat-timeout={}", millis(opts.heartbeat_timeout)),
            format!("--distributor.remote-timeout={}", millis(opts.remote_timeout)),
            // The default per-tenant rate (10k samples/s) would measure the limiter, not the cluster.
            "--distributor.ingestion-rate-limit=100000000".to_owned(),
            "--distributor.ingestion-burst-size=100000000".to_owned(),
            // Index headers of bucket blocks, by default in the working directory's `./tsdb-sync`.
            format!(
                "--blocks-storage.bucket-store.sync-dir={}",
                node.dir.join("tsdb-sync").display()
            ),
        ];
        // One bucket for the whole cluster (the filesystem backend), beside the nodes' directories: ingesters
        // ship into it and the querier reads it, as with a shared S3 bucket.
        if let Some(root) = node.dir.parent() {
            a.push(format!(
                "--blocks-storage.filesystem.dir={}",
                root.join("bucket").display()
            ));
        }
        if opts.zone_awareness {
            a.push("--ingester.ring.zone-awareness-enabled=true".to_owned());
        }
        if let Some(pki) = &opts.tls {
            a.extend(pki.server_args());
            if node.role != Role::Ingester && opts.ingester_client_tls {
                a.extend(pki.ingester_client_args());
            }
        }
        if node.role == Role::Ingester {
            a.extend([
                format!("--blocks-storage.tsdb.dir={}", node.data_dir().display()),
                format!("--ingester.ring.instance-id={}", node.name),
                "--ingester.ring.instance-addr=127.0.0.1".to_owned(),
                format!("--ingester.ring.instance-port={}", node.grpc_port),
                format!("--ingester.ring.tokens-file-path={}", node.tokens_path().display()),
                format!("--ingester.ring.unregister-on-shutdown={}", opts.unregister_on_shutdown),
            ]);
            if opts.zone_awareness {
                let zone = if opts.zones == 0 { index } else { index % opts.zones };
                a.push(format!("--ingester.ring.instance-zone=zone-{zone}"));
            }
        }
        a.extend(opts.args.iter().cloned());
        a
    }
}

impl Cluster {
    fn nodes_mut(&mut self) -> impl Iterator<Item = &mut Node> {
        self.ingesters
            .iter_mut()
            .chain(self.distributors.iter_mut())
            .chain(std::iter::once(&mut self.querier))
    }

    /// The processes that read the ring without owning an entry: every distributor and the querier.
    fn readers(&self) -> impl Iterator<Item = &Node> {
        self.distributors.iter().chain(std::iter::once(&self.querier))
    }

    /// The options the cluster was started with.
    pub fn options(&self) -> &ClusterOptions {
        &self.opts
    }

    /// The temporary root holding every node's directory.
    pub fn root_dir(&self) -> &Path {
        self.root.path()
    }

    /// Ingester `i`.
    pub fn ingester(&self, i: usize) -> &Node {
        &self.ingesters[i]
    }

    /// All ingesters, in index order.
    pub fn ingesters(&self) -> &[Node] {
        &self.ingesters
    }

    /// Distributor `i`.
    pub fn distributor(&self, i: usize) -> &Node {
        &self.distributors[i]
    }

    /// All distributors, in index order.
    pub fn distributors(&self) -> &[Node] {
        &self.distributors
    }

    /// The querier.
    pub fn querier(&self) -> &Node {
        &self.querier
    }

    /// SIGKILL ingester `i` (a crash: nothing flushed, its ring entry stays until its heartbeat times out).
    pub fn kill9(&mut self, i: usize) -> Result<(), TestkitError> {
        let node = &mut self.ingesters[i];
        match node.process.as_mut() {
            Some(p) => p.kill9(),
            None => Err(TestkitError::NotRunning {
                name: node.name.clone(),
            }),
        }
    }

    /// SIGTERM ingester `i` and wait for it to exit (a hang is an error and the process is then killed).
    pub fn sigterm(&mut self, i: usize) -> Result<ExitStatus, TestkitError> {
        let node = &mut self.ingesters[i];
        match node.process.as_mut() {
            Some(p) => p.sigterm_and_wait(DEFAULT_STOP_TIMEOUT),
            None => Err(TestkitError::NotRunning {
                name: node.name.clone(),
            }),
        }
    }

    /// SIGSTOP ingester `i`: frozen, its sockets stay open but nothing answers.
    pub fn sigstop(&mut self, i: usize) -> Result<(), TestkitError> {
        self.ingesters[i].signal("STOP")
    }

    /// SIGCONT ingester `i`.
    pub fn sigcont(&mut self, i: usize) -> Result<(), TestkitError> {
        self.ingesters[i].signal("CONT")
    }

    /// Starts ingester `i` again on the same directory, ports and tokens file (stopping it with SIGTERM first
    /// if it runs), waits for its `/ready` and for every distributor and the querier to see it ACTIVE.
    pub fn restart(&mut self, i: usize) -> Result<(), TestkitError> {
        if self.ingesters[i].is_running() {
            self.sigterm(i)?;
        }
        let (binary, env, timeout) = (self.binary.clone(), self.opts.env.clone(), self.opts.ready_timeout);
        let node = &mut self.ingesters[i];
        node.process = None;
        node.launch(&binary, &env)?;
        node.wait_ready(timeout)?;
        let id = node.name.clone();
        self.wait_ring(&format!("{id} ACTIVE"), |m| state_of(m, &id) == Some("ACTIVE"))
    }

    /// The ring as `node` sees it (Admin gRPC `RingStatus` on its gRPC port), members sorted by id.
    pub fn ring_status(&self, node: &Node) -> Result<Vec<RingMember>, TestkitError> {
        ring_status_at(node.grpc_addr(), self.admin_tls.as_ref(), Duration::from_secs(5))
    }

    /// Admin `ForgetMember`: asks `via` (any process) to drop ring member `id`; gossip spreads it.
    pub fn forget(&self, via: &Node, id: &str) -> Result<(), TestkitError> {
        forget_at(via.grpc_addr(), self.admin_tls.as_ref(), id, Duration::from_secs(5))
    }

    /// Admin `TenantStats` of `tenant` (`anonymous` without multitenancy) on ingester `i`.
    pub fn tenant_stats(&self, i: usize, tenant: &str) -> Result<TenantStatsResponse, TestkitError> {
        tenant_stats_at(
            self.ingesters[i].grpc_addr(),
            self.admin_tls.as_ref(),
            tenant,
            Duration::from_secs(5),
        )
    }

    /// Waits until the ring seen by every distributor and by the querier satisfies `cond` (bounded by
    /// `ready_timeout`). `what` names the condition in the error, which also carries the last ring seen.
    pub fn wait_ring(&self, what: &str, cond: impl Fn(&[RingMember]) -> bool) -> Result<(), TestkitError> {
        let mut last = String::new();
        let ok = wait_until(self.opts.ready_timeout, || {
            self.readers().all(|r| match self.ring_status(r) {
                Ok(members) if cond(&members) => true,
                Ok(members) => {
                    last = format!("{}: {}", r.name, describe(&members));
                    false
                }
                Err(e) => {
                    last = format!("{}: {e}", r.name);
                    false
                }
            })
        });
        if ok {
            Ok(())
        } else {
            Err(TestkitError::NotReady {
                name: format!("the ring ({what}; last seen by {last})"),
                url: "Admin gRPC RingStatus".to_owned(),
                timeout: self.opts.ready_timeout,
                log_tail: self
                    .ingesters
                    .iter()
                    .map(|n| n.log_tail(15))
                    .collect::<Vec<_>>()
                    .join("\n"),
            })
        }
    }
}

/// Members in state ACTIVE.
pub fn active_count(members: &[RingMember]) -> usize {
    members.iter().filter(|m| m.state == "ACTIVE").count()
}

/// The state of member `id` (JOINING, ACTIVE, LEAVING, UNHEALTHY), if it is in the ring.
pub fn state_of<'a>(members: &'a [RingMember], id: &str) -> Option<&'a str> {
    members.iter().find(|m| m.id == id).map(|m| m.state.as_str())
}

/// `id=STATE` pairs, for messages.
pub fn describe(members: &[RingMember]) -> String {
    members
        .iter()
        .map(|m| format!("{}={}", m.id, m.state))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs `fut` on a private current-thread runtime in a scoped thread, so that the synchronous harness works
/// from plain test code and from inside an async test alike.
fn block_on_thread<T: Send>(
    fut: impl std::future::Future<Output = Result<T, TestkitError>> + Send,
) -> Result<T, TestkitError> {
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| TestkitError::io("building a runtime for an Admin call", e))?
                .block_on(fut)
        })
        .join()
        .unwrap_or_else(|_| {
            Err(TestkitError::io(
                "an Admin call",
                std::io::Error::other("its thread panicked"),
            ))
        })
    })
}

/// Connects to the Admin service at `addr` (over TLS with `tls`) and runs `rpc` on the client, all bounded by
/// `timeout`.
macro_rules! admin_call {
    ($addr:expr, $tls:expr, $timeout:expr, $what:literal, |$client:ident| $rpc:expr) => {{
        let tls: Option<&ClientTls> = $tls;
        let url = grpc_uri(&$addr.to_string(), tls.is_some());
        let timeout: Duration = $timeout;
        let fail = |detail: String| TestkitError::Http {
            url: url.clone(),
            detail: format!("{}: {detail}", $what),
        };
        block_on_thread(async {
            let call = async {
                let channel = grpc_endpoint(&url, tls)
                    .map_err(|e| format!("endpoint: {}", describe_error(&e)))?
                    .connect()
                    .await
                    .map_err(|e| format!("connect: {}", describe_error(&e)))?;
                let mut $client = AdminClient::new(channel);
                $rpc.await.map(|r| r.into_inner()).map_err(|s| s.to_string())
            };
            match tokio::time::timeout(timeout, call).await {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(detail)) => Err(fail(detail)),
                Err(_) => Err(fail(format!("no answer within {timeout:?}"))),
            }
        })
    }};
}

/// The ring as the process at `addr` sees it.
fn ring_status_at(
    addr: SocketAddr,
    tls: Option<&ClientTls>,
    timeout: Duration,
) -> Result<Vec<RingMember>, TestkitError> {
    admin_call!(addr, tls, timeout, "RingStatus", |client| client
        .ring_status(RingStatusRequest {}))
    .map(|r| r.members)
}

/// `TenantStats` of `tenant` on the ingester at `addr`.
fn tenant_stats_at(
    addr: SocketAddr,
    tls: Option<&ClientTls>,
    tenant: &str,
    timeout: Duration,
) -> Result<TenantStatsResponse, TestkitError> {
    admin_call!(addr, tls, timeout, "TenantStats", |client| client.tenant_stats(
        TenantStatsRequest {
            tenant: tenant.to_owned()
        }
    ))
}

/// `ForgetMember` of `id`, asked of the process at `addr`.
fn forget_at(addr: SocketAddr, tls: Option<&ClientTls>, id: &str, timeout: Duration) -> Result<(), TestkitError> {
    admin_call!(addr, tls, timeout, "ForgetMember", |client| client
        .forget_member(ForgetMemberRequest { id: id.to_owned() }))
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picked_ports_are_distinct_and_bindable() {
        let (tcp, udp) = pick_ports(12, 6).expect("ports");
        assert_eq!(tcp.iter().collect::<HashSet<_>>().len(), 12);
        assert_eq!(udp.iter().collect::<HashSet<_>>().len(), 6);
        UdpSocket::bind(("127.0.0.1", udp[0])).expect("udp port is bindable again");
    }

    #[test]
    fn ring_helpers() {
        let m = |id: &str, state: &str| RingMember {
            id: id.into(),
            state: state.into(),
            ..Default::default()
        };
        let ring = [m("a", "ACTIVE"), m("b", "LEAVING"), m("c", "ACTIVE")];
        assert_eq!(active_count(&ring), 2);
        assert_eq!(state_of(&ring, "b"), Some("LEAVING"));
        assert_eq!(state_of(&ring, "x"), None);
        assert_eq!(describe(&ring), "a=ACTIVE, b=LEAVING, c=ACTIVE");
    }
}
