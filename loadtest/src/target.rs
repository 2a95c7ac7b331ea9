//! Targets the driver can start itself: a single-process heddle, a Prometheus remote-write receiver, or a
//! single-node VictoriaMetrics, each on a picked 127.0.0.1 port with its data in a temporary directory that is
//! removed when the target is dropped (which also kills the process).

use crate::LoadtestError;
use crate::readback::ReadBackend;
use clap::ValueEnum;
use heddle_testkit::{ManagedProcess, ReadMode, free_port};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use tempfile::TempDir;

/// Upper bound on a start or restart.
const READY_TIMEOUT: Duration = Duration::from_secs(300);

/// A kind of target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TargetKind {
    /// `heddle --target=all`.
    Heddle,
    /// `prometheus --web.enable-remote-write-receiver`.
    Prometheus,
    /// `victoria-metrics` single node.
    VictoriaMetrics,
}

impl TargetKind {
    /// The name used in reports and directory names.
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::Heddle => "heddle",
            TargetKind::Prometheus => "prometheus",
            TargetKind::VictoriaMetrics => "victoria-metrics",
        }
    }
}

/// How to start a target.
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// Binary to run; default: `heddle` next to this executable, `prometheus` / `victoria-metrics` on `PATH`.
    pub binary: Option<PathBuf>,
    /// Start heddle with `--auth.multitenancy-enabled` (the workload sends `X-Scope-OrgID`).
    pub multitenancy: bool,
    /// More flags for heddle (after the driver's own, so they win).
    pub extra_args: Vec<String>,
}

/// A running target owned by the driver.
#[derive(Debug)]
pub struct StartedTarget {
    pub kind: TargetKind,
    /// Remote-write URL.
    pub write_url: String,
    /// Where verification reads.
    pub read: ReadBackend,
    process: ManagedProcess,
    dir: TempDir,
    binary: PathBuf,
    args: Vec<String>,
    addr: SocketAddr,
    ready: &'static str,
}

impl StartedTarget {
    /// Starts `kind` and waits (at most 5 minutes) until it is ready.
    pub fn start(kind: TargetKind, opts: &StartOptions) -> Result<Self, LoadtestError> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("loadtest-{}-", kind.name()))
            .tempdir()
            .map_err(|e| LoadtestError::Target(format!("creating a temporary directory: {e}")))?;
        let port = free_port()?;
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let base = format!("http://{addr}");
        let data = dir.path().join("data");
        let (binary, args, ready, write_url, read) = match kind {
            TargetKind::Heddle => {
                let binary = match &opts.binary {
                    Some(b) => b.clone(),
                    None => sibling_binary("heddle")?,
                };
                let mut grpc = free_port()?;
                while grpc == port {
                    grpc = free_port()?;
                }
                let mut args = vec![
                    "--target=all".to_owned(),
                    "--server.http-listen-address=127.0.0.1".to_owned(),
                    format!("--server.http-listen-port={port}"),
                    "--server.grpc-listen-address=127.0.0.1".to_owned(),
                    format!("--server.grpc-listen-port={grpc}"),
                    format!("--blocks-storage.tsdb.dir={}", data.display()),
                    format!(
                        "--blocks-storage.filesystem.dir={}",
                        dir.path().join("blocks").display()
                    ),
                    format!(
                        "--blocks-storage.bucket-store.sync-dir={}",
                        dir.path().join("tsdb-sync").display()
                    ),
                    "--log.level=warn".to_owned(),
                    // Mimir's default limits (10k samples/s, 150k series per tenant) would measure the limiter.
                    "--distributor.ingestion-rate-limit=1000000000".to_owned(),
                    "--distributor.ingestion-burst-size=1000000000".to_owned(),
                    "--ingester.max-global-series-per-user=0".to_owned(),
                ];
                if opts.multitenancy {
                    args.push("--auth.multitenancy-enabled".to_owned());
                }
                args.extend(opts.extra_args.iter().cloned());
                let read = ReadBackend::RemoteRead {
                    base: format!("{base}/prometheus"),
                    mode: ReadMode::Samples,
                };
                (binary, args, "/ready", format!("{base}/api/v1/push"), read)
            }
            TargetKind::Prometheus => {
                let config = dir.path().join("prometheus.yml");
                std::fs::write(&config, "global:\n  scrape_interval: 15s\n")
                    .map_err(|e| LoadtestError::Target(format!("writing {}: {e}", config.display())))?;
                let args = vec![
                    format!("--config.file={}", config.display()),
                    format!("--storage.tsdb.path={}", data.display()),
                    format!("--web.listen-address={addr}"),
                    "--web.enable-remote-write-receiver".to_owned(),
                    "--log.level=warn".to_owned(),
                ];
                let binary = opts.binary.clone().unwrap_or_else(|| "prometheus".into());
                let read = ReadBackend::RemoteRead {
                    base: base.clone(),
                    mode: ReadMode::Samples,
                };
                (binary, args, "/-/ready", format!("{base}/api/v1/write"), read)
            }
            TargetKind::VictoriaMetrics => {
                let args = vec![
                    format!("-storageDataPath={}", data.display()),
                    format!("-httpListenAddr={addr}"),
                    "-loggerLevel=WARN".to_owned(),
                ];
                let binary = opts.binary.clone().unwrap_or_else(|| "victoria-metrics".into());
                let read = ReadBackend::VmExport { base: base.clone() };
                (binary, args, "/health", format!("{base}/api/v1/write"), read)
            }
        };
        let mut cmd = Command::new(&binary);
        cmd.args(&args);
        let mut process = ManagedProcess::spawn(kind.name(), cmd, dir.path())?;
        process.wait_http_ok(addr, ready, READY_TIMEOUT)?;
        Ok(Self {
            kind,
            write_url,
            read,
            process,
            dir,
            binary,
            args,
            addr,
            ready,
        })
    }

    /// Stops the target gracefully and starts it again on the same data; returns the time from the new
    /// process' start until it answers its readiness probe (WAL replay and the like).
    pub fn restart(&mut self) -> Result<Duration, LoadtestError> {
        self.process.sigterm_and_wait(Duration::from_secs(60))?;
        let mut cmd = Command::new(&self.binary);
        cmd.args(&self.args);
        let started = std::time::Instant::now();
        self.process = ManagedProcess::spawn(self.kind.name(), cmd, self.dir.path())?;
        self.process.wait_http_ok(self.addr, self.ready, READY_TIMEOUT)?;
        Ok(started.elapsed())
    }

    /// The target's process id.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// The temporary directory (data and logs).
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Makes recently written data readable: VictoriaMetrics buffers rows for up to a second before they can be
    /// searched; `/internal/force_flush` writes them out. A no-op for the other targets.
    pub async fn settle(&self) {
        settle(&self.read).await;
    }

    /// SIGTERM and wait (at most 30 s); the temporary directory is removed when `self` is dropped.
    pub fn stop(mut self) -> Result<(), LoadtestError> {
        self.process.sigterm_and_wait(Duration::from_secs(30))?;
        Ok(())
    }
}

/// See [`StartedTarget::settle`]; works for targets the driver did not start too.
pub async fn settle(read: &ReadBackend) {
    if let ReadBackend::VmExport { base } = read {
        if let Ok(http) = heddle_testkit::http_client(Duration::from_secs(30)) {
            let _ = http.get(format!("{base}/internal/force_flush")).send().await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// `name` in the directory of the running executable (where cargo puts the workspace's binaries).
fn sibling_binary(name: &str) -> Result<PathBuf, LoadtestError> {
    let exe = std::env::current_exe().map_err(|e| LoadtestError::Target(format!("finding this executable: {e}")))?;
    let dir = exe
        .parent()
        .ok_or_else(|| LoadtestError::Target(format!("{} has no directory", exe.display())))?;
    // Test executables live one level down, in `deps/`.
    for candidate in [dir.join(name), dir.join("..").join(name)] {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(LoadtestError::Target(format!(
        "no {name} binary next to {}: build it (cargo build --release -p heddle) or pass --bin",
        exe.display()
    )))
}
