//! Real third-party tools the compatibility tests run, and file helpers around them.

use std::path::{Path, PathBuf};

/// The path of a Prometheus tool (`prometheus`, `promtool`) from the environment variable `env` or
/// `/usr/bin/<name>`. When it is missing: `None` (the caller skips, saying so) unless `CI` is set, where a
/// missing tool is a failure, because `scripts/test` installs it.
pub fn prometheus_tool(env: &str, name: &str, test: &str) -> Option<PathBuf> {
    let path = std::env::var_os(env).map_or_else(|| PathBuf::from("/usr/bin").join(name), PathBuf::from);
    if path.is_file() {
        return Some(path);
    }
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    assert!(
        !ci,
        "{} is not installed and CI is set: install the `prometheus` package (apt-get install prometheus)",
        path.display()
    );
    eprintln!(
        "SKIPPED {test}: {} is not installed (apt-get install prometheus); with CI=true this is a failure",
        path.display()
    );
    None
}

/// Copies the directory tree `src` to `dst` (files and directories only).
pub fn copy_dir(src: &Path, dst: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    for entry in std::fs::read_dir(src)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let to = dst.join(entry.file_name());
        if kind.is_dir() {
            copy_dir(&entry.path(), &to)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &to)?;
        }
    }
    Ok(())
}
