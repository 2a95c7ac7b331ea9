//! The small file interface that crash-relevant writes go through (`chunks_head/` files), so tests can
//! inject short writes and failures. It is heddle-wal's: one interface for every file the head writes.

use std::fs::File;
use std::io;
use std::path::Path;

pub use heddle_wal::file::{DurableFile, FileCreator, StdFiles};

/// Writes all of `buf`, retrying short writes and EINTR.
pub(crate) fn write_all(f: &mut dyn DurableFile, buf: &[u8]) -> io::Result<()> {
    heddle_wal::file::write_all(f, buf, |_| {})
}

/// Fsyncs a directory so that creations, renames and deletions in it are durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Environment variable naming a test point: when a process reaches [`failpoint`] with this name it aborts on
/// the spot (no destructor, no flush: what `kill -9` at that instant would leave on disk). `<name>=sleep:<ms>`
/// makes it sleep there that long instead (a step that takes long, e.g. a compaction, for shutdown tests).
pub const FAILPOINT_ENV: &str = "HEDDLE_FAILPOINT";

/// What an armed failpoint does.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FailAction {
    Abort,
    Sleep(std::time::Duration),
}

/// Parses `HEDDLE_FAILPOINT`: `<name>` or `<name>=sleep:<ms>`. Anything else arms nothing.
fn parse_failpoint(v: &str) -> Option<(String, FailAction)> {
    match v.split_once('=') {
        None if !v.is_empty() => Some((v.to_owned(), FailAction::Abort)),
        None => None,
        Some((name, action)) => {
            let ms: u64 = action.strip_prefix("sleep:")?.parse().ok()?;
            Some((name.to_owned(), FailAction::Sleep(std::time::Duration::from_millis(ms))))
        }
    }
}

/// Aborts the process (or sleeps) if `HEDDLE_FAILPOINT` names this point. Crash tests use it to stop a real
/// process between two steps of a multi-file write (a block written but the head not truncated, a block's
/// files uploaded but not its meta.json); shutdown tests make a step slow. Unset, it costs one cached
/// comparison.
pub fn failpoint(name: &str) {
    static ARMED: std::sync::OnceLock<Option<(String, FailAction)>> = std::sync::OnceLock::new();
    let armed = ARMED.get_or_init(|| std::env::var(FAILPOINT_ENV).ok().and_then(|v| parse_failpoint(&v)));
    match armed {
        Some((armed, FailAction::Abort)) if armed == name => {
            eprintln!("failpoint {name} reached: aborting ({FAILPOINT_ENV})");
            std::process::abort();
        }
        Some((armed, FailAction::Sleep(d))) if armed == name => {
            eprintln!("failpoint {name} reached: sleeping {d:?} ({FAILPOINT_ENV})");
            std::thread::sleep(*d);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failpoint_settings() {
        let cases = [
            ("", None),
            ("compact-after-block", Some(("compact-after-block", FailAction::Abort))),
            (
                "compact-before-block=sleep:1500",
                Some((
                    "compact-before-block",
                    FailAction::Sleep(std::time::Duration::from_millis(1500)),
                )),
            ),
            ("x=sleep:soon", None),
            ("x=explode", None),
        ];
        for (v, want) in cases {
            let got = parse_failpoint(v);
            assert_eq!(got.as_ref().map(|(n, a)| (n.as_str(), a.clone())), want, "case {v:?}");
        }
    }
}
