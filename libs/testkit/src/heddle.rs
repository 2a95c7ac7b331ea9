//! A `heddle` process for integration tests: its own ports and data directory, restartable on the same data.

use crate::process::{DEFAULT_STOP_TIMEOUT, ManagedProcess};
use crate::{Endpoints, TestkitError, cargo_bin, free_port};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;
use tempfile::TempDir;

/// How a [`HeddleProcess`] is started.
#[derive(Debug, Clone)]
pub struct HeddleOptions {
    /// `--target`: `all` by default.
    pub target: String,
    /// Passes `--auth.multitenancy-enabled`: requests must then carry `X-Scope-OrgID`.
    pub multitenancy: bool,
    /// YAML written to `<root>/heddle.yaml` and passed as `--config.file`.
    pub config_yaml: Option<String>,
    /// Extra command-line arguments, appended after the ones the harness sets.
    pub args: Vec<String>,
    /// Extra environment variables (for example `RUST_LOG`).
    pub env: Vec<(String, String)>,
    /// Upper bound on the wait for `GET /ready` to answer 200 (start and every restart).
    pub ready_timeout: Duration,
    /// Binary to run; `None` builds and runs the workspace's `heddle` (see [`cargo_bin`]).
    pub binary: Option<PathBuf>,
}

impl Default for HeddleOptions {
    fn default() -> Self {
        Self {
            target: "all".to_owned(),
            multitenancy: false,
            config_yaml: None,
            args: Vec::new(),
            env: Vec::new(),
            ready_timeout: Duration::from_secs(60),
            binary: None,
        }
    }
}

/// A running `heddle` (by default `--target=all`) owned by a test. The data directory (`<root>/data`) lives in a temporary
/// directory that survives restarts and is deleted on drop; the HTTP and gRPC ports are picked once and kept
/// across restarts, so URLs stay valid. Dropping it kills the process.
#[derive(Debug)]
pub struct HeddleProcess {
    opts: HeddleOptions,
    binary: PathBuf,
    root: TempDir,
    endpoints: Endpoints,
    process: Option<ManagedProcess>,
}

impl std::ops::Deref for HeddleProcess {
    type Target = Endpoints;

    fn deref(&self) -> &Endpoints {
        &self.endpoints
    }
}

impl HeddleProcess {
    /// Picks ports, creates the temporary directory, spawns heddle and waits for `/ready`.
    pub fn start(opts: HeddleOptions) -> Result<Self, TestkitError> {
        let binary = match &opts.binary {
            Some(b) => b.clone(),
            None => cargo_bin("heddle")?,
        };
        let root = tempfile::Builder::new()
            .prefix("heddle-test-")
            .tempdir()
            .map_err(|e| TestkitError::io("creating the test directory", e))?;
        let http_port = free_port()?;
        let mut grpc_port = free_port()?;
        while grpc_port == http_port {
            grpc_port = free_port()?;
        }
        let mut me = Self {
            opts,
            binary,
            root,
            endpoints: Endpoints { http_port, grpc_port },
            process: None,
        };
        if let Some(yaml) = &me.opts.config_yaml {
            let path = me.config_path();
            std::fs::write(&path, yaml).map_err(|e| TestkitError::io(format!("writing {}", path.display()), e))?;
        }
        me.spawn()?;
        Ok(me)
    }

    fn config_path(&self) -> PathBuf {
        self.root.path().join("heddle.yaml")
    }

    /// The exact command line (without the program) the harness runs.
    pub fn command_args(&self) -> Vec<String> {
        let mut args = vec![
            format!("--target={}", self.opts.target),
            "--server.http-listen-address=127.0.0.1".to_owned(),
            format!("--server.http-listen-port={}", self.http_port),
            "--server.grpc-listen-address=127.0.0.1".to_owned(),
            format!("--server.grpc-listen-port={}", self.grpc_port),
            format!("--blocks-storage.tsdb.dir={}", self.data_dir().display()),
            // The default `./blocks` would land in the test's working directory.
            format!(
                "--blocks-storage.filesystem.dir={}",
                self.root.path().join("blocks").display()
            ),
            // Likewise the compactor's default `./data-compactor`.
            format!("--compactor.data-dir={}", self.root.path().join("compactor").display()),
            // And the querier's index headers, by default in `./tsdb-sync`.
            format!(
                "--blocks-storage.bucket-store.sync-dir={}",
                self.root.path().join("tsdb-sync").display()
            ),
        ];
        if self.opts.multitenancy {
            args.push("--auth.multitenancy-enabled".to_owned());
        }
        if self.opts.config_yaml.is_some() {
            args.push(format!("--config.file={}", self.config_path().display()));
        }
        args.extend(self.opts.args.iter().cloned());
        args
    }

    fn spawn(&mut self) -> Result<(), TestkitError> {
        let mut cmd = Command::new(&self.binary);
        cmd.args(self.command_args());
        for (k, v) in &self.opts.env {
            cmd.env(k, v);
        }
        let mut process = ManagedProcess::spawn("heddle", cmd, self.root.path())?;
        // Keep the process owned by `self` even if it never becomes ready: Drop then still cleans it up.
        let ready = process.wait_http_ok(self.http_addr(), "/ready", self.opts.ready_timeout);
        self.process = Some(process);
        ready
    }

    /// `--blocks-storage.tsdb.dir` (kept across restarts).
    pub fn data_dir(&self) -> PathBuf {
        self.root.path().join("data")
    }

    /// The temporary root: data directory, config file and `heddle.std{out,err}.log`.
    pub fn root_dir(&self) -> &Path {
        self.root.path()
    }

    /// OS process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(ManagedProcess::pid)
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.process.as_mut().is_some_and(ManagedProcess::is_running)
    }

    /// SIGTERM (graceful stop) and wait up to 30 s for exit. Returns the exit status; a hang is an error (and
    /// the process is then killed).
    pub fn sigterm_and_wait(&mut self) -> Result<ExitStatus, TestkitError> {
        let mut process = self
            .process
            .take()
            .ok_or_else(|| TestkitError::NotRunning { name: "heddle".into() })?;
        let res = process.sigterm_and_wait(DEFAULT_STOP_TIMEOUT);
        self.process = Some(process);
        res
    }

    /// SIGTERM and wait up to `timeout` for exit (killing it after that, an error); returns the exit status and
    /// how long the exit took. For tests of a bounded shutdown.
    pub fn sigterm_and_wait_within(&mut self, timeout: Duration) -> Result<(ExitStatus, Duration), TestkitError> {
        let mut process = self
            .process
            .take()
            .ok_or_else(|| TestkitError::NotRunning { name: "heddle".into() })?;
        let started = std::time::Instant::now();
        let res = process.sigterm_and_wait(timeout);
        let took = started.elapsed();
        self.process = Some(process);
        res.map(|status| (status, took))
    }

    /// SIGKILL: simulates a crash (nothing flushed, no snapshot).
    pub fn kill9(&mut self) -> Result<(), TestkitError> {
        match self.process.as_mut() {
            Some(p) => p.kill9(),
            None => Err(TestkitError::NotRunning { name: "heddle".into() }),
        }
    }

    /// Starts heddle again on the same data directory and ports, and waits for `/ready`. The process must have
    /// been stopped first ([`Self::sigterm_and_wait`] or [`Self::kill9`]); a running one is stopped with SIGTERM.
    pub fn restart(&mut self) -> Result<(), TestkitError> {
        if self.is_running() {
            self.sigterm_and_wait()?;
        }
        self.process = None;
        self.spawn()
    }

    /// A crash and a restart on the same data, from async code: [`Self::kill9`], then [`Self::restart`] (which
    /// blocks until `/ready`) on a blocking thread, so the test's runtime keeps serving its other tasks.
    pub async fn kill9_and_restart(mut self) -> Result<Self, TestkitError> {
        self.kill9()?;
        tokio::task::spawn_blocking(move || self.restart().map(|()| self))
            .await
            .expect("the restart thread panicked")
    }

    /// The options the next [`Self::restart`] uses: a crash test arms a failpoint through `env` for one run and
    /// clears it for the next.
    pub fn options_mut(&mut self) -> &mut HeddleOptions {
        &mut self.opts
    }

    /// Waits up to `timeout` for the process to exit on its own (a failpoint abort, a fatal error) and returns
    /// whether it did.
    pub fn wait_exit(&mut self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if !self.is_running() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        !self.is_running()
    }

    /// The last `lines` lines of heddle's stderr and stdout.
    pub fn log_tail(&self, lines: usize) -> String {
        self.process
            .as_ref()
            .map(|p| p.log_tail(lines))
            .unwrap_or_else(|| "(never started)".to_owned())
    }
}
