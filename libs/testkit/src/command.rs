//! Running a short-lived command with a deadline, capturing its output.

use crate::{TestkitError, cargo_bin};
use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What a finished command printed, and how it ended.
#[derive(Debug, Clone)]
pub struct CommandOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cmd` to completion with stdout and stderr captured. If it is still running after `timeout` it is
/// killed and the result is an error carrying what it printed so far.
pub fn run_bounded(mut cmd: Command, timeout: Duration) -> Result<CommandOutput, TestkitError> {
    let desc = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| TestkitError::io(format!("spawning {desc}"), e))?;
    // Drain both pipes on threads so a chatty command never blocks on a full pipe.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut s);
            }
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(TestkitError::io(format!("waiting for {desc}"), e));
            }
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    match status {
        Some(status) => Ok(CommandOutput { status, stdout, stderr }),
        None => Err(TestkitError::CommandTimeout {
            command: desc,
            timeout,
            stderr,
        }),
    }
}

/// Runs the workspace's `heddle-loadtest` (built by [`cargo_bin`]) with `args`, bounded by `timeout`.
pub fn run_loadtest<I, S>(args: I, timeout: Duration) -> Result<CommandOutput, TestkitError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut cmd = Command::new(cargo_bin("heddle-loadtest")?);
    cmd.args(args);
    run_bounded(cmd, timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_output_and_status() {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg("echo out; echo err >&2; exit 4");
        let out = run_bounded(cmd, Duration::from_secs(10)).expect("run");
        assert_eq!(out.status.code(), Some(4));
        assert_eq!((out.stdout.as_str(), out.stderr.as_str()), ("out\n", "err\n"));
    }

    #[test]
    fn kills_on_timeout() {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg("echo started >&2; exec sleep 30");
        let start = Instant::now();
        let err = run_bounded(cmd, Duration::from_millis(300)).expect_err("timeout");
        assert!(start.elapsed() < Duration::from_secs(10));
        let msg = err.to_string();
        assert!(msg.contains("did not finish") && msg.contains("started"), "{msg}");
    }
}
