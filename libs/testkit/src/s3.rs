//! A real S3-compatible server (s3s-fs) for tests of the S3 path: it checks SigV4 signatures and stores objects
//! as files, so a test can also look at what landed on disk.

use crate::http::http_get;
use crate::process::ManagedProcess;
use crate::{TestkitError, free_port};
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// Environment variable naming the s3s-fs binary (`scripts/test` sets it).
pub const S3S_FS_ENV: &str = "HEDDLE_S3S_FS";
/// How `scripts/test` installs s3s-fs (0.15 and later need a newer rustc).
pub const S3S_FS_INSTALL: &str =
    "cargo install s3s-fs --version 0.14.1 --locked --features binary --root ~/.cache/heddle-tools/s3s-fs";
/// Upper bound on the wait for s3s-fs to answer after a start or restart.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Upper bound on the wait for s3s-fs to exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// The s3s-fs binary: `$HEDDLE_S3S_FS`, else `<tools>/s3s-fs/bin/s3s-fs` where `<tools>` is
/// `$HEDDLE_TOOLS_DIR` or `~/.cache/heddle-tools` (where `scripts/test` installs it), else `s3s-fs` on `PATH`.
pub fn s3s_fs_binary() -> Result<PathBuf, TestkitError> {
    if let Some(path) = std::env::var_os(S3S_FS_ENV) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(missing(&format!("{S3S_FS_ENV}={} is not a file", path.display())))
        };
    }
    let tools = std::env::var_os("HEDDLE_TOOLS_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/heddle-tools")));
    if let Some(path) = tools.map(|t| t.join("s3s-fs/bin/s3s-fs"))
        && path.is_file()
    {
        return Ok(path);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("s3s-fs"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            missing(&format!(
                "not in {S3S_FS_ENV}, ~/.cache/heddle-tools/s3s-fs/bin or PATH"
            ))
        })
}

fn missing(detail: &str) -> TestkitError {
    TestkitError::Io {
        context: format!(
            "looking for the s3s-fs binary ({detail}); run scripts/test, or install it with `{S3S_FS_INSTALL}`"
        ),
        source: std::io::Error::from(std::io::ErrorKind::NotFound),
    }
}

/// A running s3s-fs owned by a test, on 127.0.0.1 with a port picked at start, one bucket, and its own random
/// keys. The data lives in a temporary directory that survives [`S3Server::restart`] (same port, same data),
/// so tests can simulate an outage; dropping it kills the process and deletes the data.
#[derive(Debug)]
pub struct S3Server {
    binary: PathBuf,
    dir: TempDir,
    port: u16,
    bucket: String,
    access_key: String,
    secret_key: String,
    process: Option<ManagedProcess>,
}

impl S3Server {
    /// Name of the bucket every server starts with.
    pub const BUCKET: &'static str = "heddle-blocks";

    /// Finds the binary, creates `<tmp>/data/<bucket>`, picks a port and keys, starts s3s-fs and waits until it
    /// answers HTTP.
    pub fn start() -> Result<Self, TestkitError> {
        let binary = s3s_fs_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("heddle-s3-")
            .tempdir()
            .map_err(|e| TestkitError::io("creating the s3s-fs directory", e))?;
        let bucket_dir = dir.path().join("data").join(Self::BUCKET);
        std::fs::create_dir_all(&bucket_dir)
            .map_err(|e| TestkitError::io(format!("creating {}", bucket_dir.display()), e))?;
        let mut me = Self {
            binary,
            dir,
            port: free_port()?,
            bucket: Self::BUCKET.to_owned(),
            access_key: format!("AK{:016X}", random_u64()),
            secret_key: format!("{:016x}{:016x}", random_u64(), random_u64()),
            process: None,
        };
        me.spawn()?;
        Ok(me)
    }

    fn spawn(&mut self) -> Result<(), TestkitError> {
        let mut cmd = Command::new(&self.binary);
        cmd.arg("--host")
            .arg("127.0.0.1")
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--access-key")
            .arg(&self.access_key)
            .arg("--secret-key")
            .arg(&self.secret_key)
            .arg(self.dir.path().join("data"));
        let mut process = ManagedProcess::spawn("s3s-fs", cmd, self.dir.path())?;
        wait_answers(&mut process, self.addr(), READY_TIMEOUT)?;
        self.process = Some(process);
        Ok(())
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// The bucket's name.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The access key id the server accepts.
    pub fn access_key(&self) -> &str {
        &self.access_key
    }

    /// The secret key the server accepts.
    pub fn secret_key(&self) -> &str {
        &self.secret_key
    }

    /// Where the bucket's objects are stored: object `a/b/c` is the file `<bucket_dir>/a/b/c`.
    pub fn bucket_dir(&self) -> PathBuf {
        self.dir.path().join("data").join(&self.bucket)
    }

    /// Where s3s-fs writes `s3s-fs.stdout.log` and `s3s-fs.stderr.log`.
    pub fn log_dir(&self) -> &Path {
        self.dir.path()
    }

    /// Flags pointing heddle at this server, in Mimir's form (`host:port` endpoint plus `insecure`).
    pub fn heddle_args(&self) -> Vec<String> {
        vec![
            "--blocks-storage.backend=s3".to_owned(),
            format!("--blocks-storage.s3.endpoint={}", self.addr()),
            format!("--blocks-storage.s3.bucket-name={}", self.bucket),
            format!("--blocks-storage.s3.access-key-id={}", self.access_key),
            format!("--blocks-storage.s3.secret-access-key={}", self.secret_key),
            "--blocks-storage.s3.insecure=true".to_owned(),
        ]
    }

    /// Whether the server process is running.
    pub fn is_running(&mut self) -> bool {
        self.process.as_mut().is_some_and(ManagedProcess::is_running)
    }

    /// Stops the server (SIGTERM, SIGKILL after a bound); the data and the port stay for [`S3Server::restart`].
    pub fn stop(&mut self) -> Result<(), TestkitError> {
        let mut process = self.process.take().ok_or_else(|| TestkitError::NotRunning {
            name: "s3s-fs".to_owned(),
        })?;
        process.sigterm_and_wait(STOP_TIMEOUT)?;
        Ok(())
    }

    /// Starts the server again on the same port and data (stopping it first if it runs).
    pub fn restart(&mut self) -> Result<(), TestkitError> {
        if self.process.is_some() {
            self.stop()?;
        }
        self.spawn()
    }
}

/// Waits until something answers HTTP on `addr` (s3s-fs answers an unsigned request with an S3 error, which
/// is enough to know it serves), failing early if the process exits.
fn wait_answers(process: &mut ManagedProcess, addr: SocketAddr, timeout: Duration) -> Result<(), TestkitError> {
    let deadline = Instant::now() + timeout;
    loop {
        if !process.is_running() {
            return Err(TestkitError::ExitedEarly {
                name: process.name().to_owned(),
                status: "exited".to_owned(),
                log_tail: process.log_tail(40),
            });
        }
        if http_get(addr, "/", Duration::from_secs(2)).is_ok() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(TestkitError::NotReady {
                name: process.name().to_owned(),
                url: format!("http://{addr}/"),
                timeout,
                log_tail: process.log_tail(40),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// 64 random bits from the standard library's per-process hash seed (no extra dependency).
fn random_u64() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_stops_and_restarts_on_the_same_port_and_data() {
        let mut s3 = S3Server::start().expect("start s3s-fs");
        assert!(s3.bucket_dir().is_dir());
        assert_ne!(s3.access_key(), s3.secret_key());
        let args = s3.heddle_args();
        assert!(
            args.contains(&format!("--blocks-storage.s3.endpoint=127.0.0.1:{}", s3.addr().port())),
            "{args:?}"
        );
        std::fs::write(s3.bucket_dir().join("marker"), b"kept").expect("write");

        s3.stop().expect("stop");
        assert!(!s3.is_running());
        assert!(
            http_get(s3.addr(), "/", Duration::from_secs(1)).is_err(),
            "nothing answers while stopped"
        );
        s3.restart().expect("restart");
        assert!(s3.is_running());
        assert!(http_get(s3.addr(), "/", Duration::from_secs(2)).is_ok());
        assert_eq!(std::fs::read(s3.bucket_dir().join("marker")).expect("kept"), b"kept");
    }

    #[test]
    fn a_missing_binary_names_the_install_command() {
        let msg = missing("test").to_string();
        assert!(msg.contains("cargo install s3s-fs --version 0.14.1"), "{msg}");
    }
}
