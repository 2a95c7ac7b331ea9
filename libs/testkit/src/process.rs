//! Child processes owned by a test: spawned with logs in files, stopped on every path (Drop kills).

use crate::TestkitError;
use crate::http::http_get;
use std::fs::{File, OpenOptions};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long [`ManagedProcess::sigterm_and_wait`] waits by default before reporting a hang.
pub const DEFAULT_STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// A child process that a test owns. Its stdout and stderr go to `<log_dir>/<name>.stdout.log` and
/// `.stderr.log` (appended to, so restarts keep earlier output). Dropping it kills the process with SIGKILL and
/// reaps it, so no process outlives the test, whether it passes, fails or panics.
#[derive(Debug)]
pub struct ManagedProcess {
    name: String,
    child: Option<Child>,
    stdout_path: PathBuf,
    stderr_path: PathBuf,
}

impl ManagedProcess {
    /// Spawns `cmd` (stdin closed, output to the log files).
    pub fn spawn(name: &str, mut cmd: Command, log_dir: &Path) -> Result<Self, TestkitError> {
        let stdout_path = log_dir.join(format!("{name}.stdout.log"));
        let stderr_path = log_dir.join(format!("{name}.stderr.log"));
        let open = |p: &Path| -> Result<File, TestkitError> {
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| TestkitError::io(format!("opening log file {}", p.display()), e))
        };
        cmd.stdin(Stdio::null())
            .stdout(open(&stdout_path)?)
            .stderr(open(&stderr_path)?);
        let child = cmd
            .spawn()
            .map_err(|e| TestkitError::io(format!("spawning {name}: {cmd:?}"), e))?;
        Ok(Self {
            name: name.to_owned(),
            child: Some(child),
            stdout_path,
            stderr_path,
        })
    }

    /// The name given at spawn (used in log file names and errors).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The OS process id, while the process has not been reaped.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is still running (reaps it if it exited).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => true,
            Some(Ok(Some(_))) | Some(Err(_)) => {
                self.child = None;
                false
            }
            None => false,
        }
    }

    /// Polls `GET http://addr{path}` until it answers 200. Fails as soon as the process exits, or after `timeout`;
    /// both errors carry the log tail.
    pub fn wait_http_ok(&mut self, addr: SocketAddr, path: &str, timeout: Duration) -> Result<(), TestkitError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                return Err(TestkitError::ExitedEarly {
                    name: self.name.clone(),
                    status: status.to_string(),
                    log_tail: self.log_tail(40),
                });
            }
            if self.child.is_none() {
                return Err(TestkitError::NotRunning {
                    name: self.name.clone(),
                });
            }
            if let Ok((200, _)) = http_get(addr, path, Duration::from_secs(2)) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(TestkitError::NotReady {
                    name: self.name.clone(),
                    url: format!("http://{addr}{path}"),
                    timeout,
                    log_tail: self.log_tail(40),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends SIGTERM and waits up to `timeout` for the process to exit. On timeout the process is killed with
    /// SIGKILL and an error is returned, so a hung shutdown fails the test instead of hanging it.
    pub fn sigterm_and_wait(&mut self, timeout: Duration) -> Result<ExitStatus, TestkitError> {
        let child = self.child.as_mut().ok_or_else(|| TestkitError::NotRunning {
            name: self.name.clone(),
        })?;
        let pid = child.id();
        // std has no signal API and the workspace denies unsafe code; kill(1) is always present.
        let sent = Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status()
            .map_err(|e| TestkitError::io(format!("running kill -TERM {pid}"), e))?;
        if !sent.success() {
            // Already gone: the wait below reaps it and reports how it ended.
            eprintln!(
                "testkit: kill -TERM {pid} ({}) failed; the process probably exited already",
                self.name
            );
        }
        let deadline = Instant::now() + timeout;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    self.child = None;
                    return Ok(status);
                }
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    self.child = None;
                    return Err(TestkitError::StopTimeout {
                        name: self.name.clone(),
                        pid,
                        timeout,
                    });
                }
                Err(e) => return Err(TestkitError::io(format!("waiting for {} (pid {pid})", self.name), e)),
            }
        }
    }

    /// Kills the process with SIGKILL (no chance to flush anything) and reaps it.
    pub fn kill9(&mut self) -> Result<(), TestkitError> {
        let mut child = self.child.take().ok_or_else(|| TestkitError::NotRunning {
            name: self.name.clone(),
        })?;
        let pid = child.id();
        // kill() fails only if the process was already reaped elsewhere; wait() below settles it either way.
        let _ = child.kill();
        child
            .wait()
            .map_err(|e| TestkitError::io(format!("reaping {} (pid {pid})", self.name), e))?;
        Ok(())
    }

    /// The last `lines` lines of stderr and stdout, for error messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let tail = |p: &Path| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        };
        format!(
            "--- {} ---\n{}\n--- {} ---\n{}",
            self.stderr_path.display(),
            tail(&self.stderr_path),
            self.stdout_path.display(),
            tail(&self.stdout_path)
        )
    }

    /// Paths of the stdout and stderr log files.
    pub fn log_paths(&self) -> (&Path, &Path) {
        (&self.stdout_path, &self.stderr_path)
    }
}

impl Drop for ManagedProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sleeper(dir: &Path) -> ManagedProcess {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        ManagedProcess::spawn("sleeper", cmd, dir).expect("spawn sleep")
    }

    fn alive(pid: u32) -> bool {
        Path::new(&format!("/proc/{pid}")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
    }

    #[test]
    fn drop_kills_the_process() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = sleeper(dir.path());
        let pid = p.pid().expect("pid");
        assert!(alive(pid));
        drop(p);
        assert!(!alive(pid), "pid {pid} survived drop");
    }

    #[test]
    fn sigterm_stops_and_reports_status() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut p = sleeper(dir.path());
        let status = p.sigterm_and_wait(Duration::from_secs(10)).expect("stop");
        assert!(!status.success());
        assert!(!p.is_running());
        assert!(matches!(p.kill9(), Err(TestkitError::NotRunning { .. })));
    }

    #[test]
    fn sigterm_timeout_kills() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("trap '' TERM; echo started; sleep 30 & wait; sleep 30");
        let mut p = ManagedProcess::spawn("stubborn", cmd, dir.path()).expect("spawn");
        let pid = p.pid().expect("pid");
        assert!(crate::wait_until(Duration::from_secs(5), || std::fs::read_to_string(
            dir.path().join("stubborn.stdout.log")
        )
        .is_ok_and(|s| s.contains("started"))));
        let err = p
            .sigterm_and_wait(Duration::from_millis(300))
            .expect_err("must time out");
        assert!(matches!(err, TestkitError::StopTimeout { .. }), "{err}");
        assert!(!alive(pid));
    }

    #[test]
    fn exited_early_carries_logs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg("echo boom >&2; exit 3");
        let mut p = ManagedProcess::spawn("failing", cmd, dir.path()).expect("spawn");
        let port = crate::free_port().expect("port");
        let err = p
            .wait_http_ok(([127, 0, 0, 1], port).into(), "/ready", Duration::from_secs(10))
            .expect_err("exits");
        let msg = err.to_string();
        assert!(
            msg.contains("exited before it was ready") && msg.contains("boom"),
            "{msg}"
        );
    }
}
