//! The testkit's error type.

use std::path::PathBuf;
use std::time::Duration;

/// Everything a testkit helper can fail with. Messages carry enough context (URLs, log tails) to debug a
/// failing test from its output alone.
#[derive(Debug, thiserror::Error)]
pub enum TestkitError {
    #[error("i/o error while {context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot find the cargo target directory from the test executable {exe}")]
    TargetDir { exe: PathBuf },
    #[error("`cargo build` of {bins:?} failed: {detail}")]
    Build { bins: Vec<String>, detail: String },
    #[error("{name} did not become ready at {url} within {timeout:?}; log tail:\n{log_tail}")]
    NotReady {
        name: String,
        url: String,
        timeout: Duration,
        log_tail: String,
    },
    #[error("{name} exited before it was ready ({status}); log tail:\n{log_tail}")]
    ExitedEarly {
        name: String,
        status: String,
        log_tail: String,
    },
    #[error("{name} (pid {pid}) did not exit within {timeout:?} after SIGTERM")]
    StopTimeout { name: String, pid: u32, timeout: Duration },
    #[error("{command} did not finish within {timeout:?} and was killed; stderr:\n{stderr}")]
    CommandTimeout {
        command: String,
        timeout: Duration,
        stderr: String,
    },
    #[error("{name} is not running")]
    NotRunning { name: String },
    #[error("http request to {url} failed: {detail}")]
    Http { url: String, detail: String },
    #[error("unexpected status {status} from {url}: {body}")]
    Status { url: String, status: u16, body: String },
    #[error("cannot encode {what}: {detail}")]
    Encode { what: &'static str, detail: String },
    #[error("cannot decode {what}: {detail}")]
    Decode { what: &'static str, detail: String },
}

impl TestkitError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn decode(what: &'static str, detail: impl ToString) -> Self {
        Self::Decode {
            what,
            detail: detail.to_string(),
        }
    }
}
