//! Builds the workspace binaries that integration tests run, once per test process.
//!
//! `cargo test --workspace` builds only the binaries of the package under test, so tests that start `heddle`
//! or `heddle-loadtest` ask cargo for them here. The build uses the target directory and profile of the running
//! test executable, so it shares compiled dependencies with the test build and never rebuilds from scratch.

use crate::TestkitError;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The binaries built by [`cargo_bin`], all in one cargo invocation.
pub const WORKSPACE_BINS: &[&str] = &["heddle", "heddle-loadtest", "heddlectl"];

/// Where cargo puts binaries for the running test's profile, and how to ask cargo for that profile.
#[derive(Debug, Clone, PartialEq, Eq)]
struct BuildLayout {
    target_dir: PathBuf,
    /// `debug`, `release` or a custom profile directory name.
    profile_dir_name: String,
    /// Set when the test was built with `--target <triple>`.
    triple: Option<String>,
}

impl BuildLayout {
    /// Test executables live in `<target>/[<triple>/]<profile>/deps/<name>-<hash>`.
    fn from_test_exe(exe: &Path) -> Option<Self> {
        let deps = exe.parent()?;
        let profile_dir = if deps.file_name()? == "deps" {
            deps.parent()?
        } else {
            deps
        };
        let profile_dir_name = profile_dir.file_name()?.to_str()?.to_owned();
        let parent = profile_dir.parent()?;
        // The target directory carries cargo's CACHEDIR.TAG; a triple directory does not.
        if parent.join("CACHEDIR.TAG").exists() {
            return Some(Self {
                target_dir: parent.to_path_buf(),
                profile_dir_name,
                triple: None,
            });
        }
        let triple = parent.file_name()?.to_str()?.to_owned();
        let target_dir = parent.parent()?.to_path_buf();
        Some(Self {
            target_dir,
            profile_dir_name,
            triple: Some(triple),
        })
    }

    fn bin_dir(&self) -> PathBuf {
        let mut dir = self.target_dir.clone();
        if let Some(t) = &self.triple {
            dir.push(t);
        }
        dir.push(&self.profile_dir_name);
        dir
    }

    /// Cargo's profile flag for the profile directory name (`debug` is the `dev` profile).
    fn profile_args(&self) -> Vec<String> {
        match self.profile_dir_name.as_str() {
            "debug" => Vec::new(),
            "release" => vec!["--release".to_owned()],
            other => vec!["--profile".to_owned(), other.to_owned()],
        }
    }
}

/// The workspace root (where the top `Cargo.toml` is).
pub fn workspace_root() -> PathBuf {
    // This crate is `<root>/libs/testkit`.
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Path to the workspace binary `name` (one of [`WORKSPACE_BINS`]), built on first use. The first call runs
/// `cargo build --bin heddle --bin heddle-loadtest` with the running test's target directory and profile;
/// later calls (from any thread) reuse the result, including a failure.
pub fn cargo_bin(name: &str) -> Result<PathBuf, TestkitError> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = BUILT.get_or_init(|| build_workspace_bins().map_err(|e| e.to_string()));
    match dir {
        Ok(dir) => {
            let path = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
            if path.is_file() {
                Ok(path)
            } else {
                Err(TestkitError::Build {
                    bins: vec![name.to_owned()],
                    detail: format!("{} does not exist after the build", path.display()),
                })
            }
        }
        Err(detail) => Err(TestkitError::Build {
            bins: WORKSPACE_BINS.iter().map(|s| s.to_string()).collect(),
            detail: detail.clone(),
        }),
    }
}

fn build_workspace_bins() -> Result<PathBuf, TestkitError> {
    let exe = std::env::current_exe().map_err(|e| TestkitError::io("reading the current executable path", e))?;
    let layout = BuildLayout::from_test_exe(&exe).ok_or_else(|| TestkitError::TargetDir { exe: exe.clone() })?;
    // `cargo test` exports CARGO for the processes it runs; fall back to PATH otherwise.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root())
        .arg("build")
        .arg("--quiet")
        .env("CARGO_TARGET_DIR", &layout.target_dir);
    for bin in WORKSPACE_BINS {
        cmd.arg("--bin").arg(bin);
    }
    cmd.args(layout.profile_args());
    if let Some(t) = &layout.triple {
        cmd.arg("--target").arg(t);
    }
    let out = cmd
        .output()
        .map_err(|e| TestkitError::io(format!("running {cmd:?}"), e))?;
    if !out.status.success() {
        return Err(TestkitError::Build {
            bins: WORKSPACE_BINS.iter().map(|s| s.to_string()).collect(),
            detail: format!(
                "{}: {}",
                out.status,
                first_chars(&String::from_utf8_lossy(&out.stderr), 4000)
            ),
        });
    }
    Ok(layout.bin_dir())
}

/// The first `max` characters of `s`; the first compiler errors are the ones that matter.
fn first_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((cut, _)) => format!("{}\n... ({} more bytes of cargo output)", &s[..cut], s.len() - cut),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_build_output_is_cut() {
        assert_eq!(first_chars("short", 10), "short");
        let cut = first_chars(&"é".repeat(20), 5);
        assert!(cut.starts_with("ééééé\n... (30 more bytes"), "{cut}");
    }

    #[test]
    fn layout_from_plain_target_dir() {
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::write(tmp.path().join("CACHEDIR.TAG"), b"").expect("tag");
        let exe = tmp.path().join("debug/deps/restart-0123abcd");
        let layout = BuildLayout::from_test_exe(&exe).expect("layout");
        assert_eq!(layout.target_dir, tmp.path());
        assert_eq!(layout.profile_dir_name, "debug");
        assert_eq!(layout.triple, None);
        assert!(layout.profile_args().is_empty());
        assert_eq!(layout.bin_dir(), tmp.path().join("debug"));
    }

    #[test]
    fn layout_with_triple_and_custom_profile() {
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::write(tmp.path().join("CACHEDIR.TAG"), b"").expect("tag");
        let exe = tmp.path().join("x86_64-unknown-linux-gnu/bench-fast/deps/t-1");
        let layout = BuildLayout::from_test_exe(&exe).expect("layout");
        assert_eq!(layout.target_dir, tmp.path());
        assert_eq!(layout.triple.as_deref(), Some("x86_64-unknown-linux-gnu"));
        assert_eq!(layout.profile_args(), vec!["--profile", "bench-fast"]);
        assert_eq!(layout.bin_dir(), tmp.path().join("x86_64-unknown-linux-gnu/bench-fast"));
    }

    #[test]
    fn release_profile_flag() {
        let layout = BuildLayout {
            target_dir: PathBuf::from("/t"),
            profile_dir_name: "release".into(),
            triple: None,
        };
        assert_eq!(layout.profile_args(), vec!["--release"]);
    }
}
