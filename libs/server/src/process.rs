//! Process-level limits and metrics every Heddle process has: the open-files limit raised at start, and the
//! standard `process_*` metrics (the names Prometheus' client libraries export) read from `/proc/self` at
//! scrape time. On a system without `/proc` the metrics are simply absent.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use std::path::Path;

/// The open-files limit before and after [`raise_open_files_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFilesLimit {
    /// The soft limit the process started with.
    pub soft_before: u64,
    /// The soft limit now.
    pub soft: u64,
    /// The hard limit (the most the soft limit can be raised to without privileges).
    pub hard: u64,
}

/// Raises the soft limit on open files (`RLIMIT_NOFILE`) to the hard limit. An ingester holds a few files per
/// tenant (WAL segment, `chunks_head/` file, memory-mapped blocks) plus a socket per connection, and the
/// usual soft default of 1024 is reached with a few hundred tenants.
pub fn raise_open_files_limit() -> std::io::Result<OpenFilesLimit> {
    let before = rlimit::get()?;
    if before.rlim_cur < before.rlim_max {
        rlimit::set(libc::rlimit {
            rlim_cur: before.rlim_max,
            rlim_max: before.rlim_max,
        })?;
    }
    let after = rlimit::get()?;
    Ok(OpenFilesLimit {
        soft_before: before.rlim_cur,
        soft: after.rlim_cur,
        hard: after.rlim_max,
    })
}

/// The two libc calls, the only unsafe code here.
#[allow(unsafe_code)]
mod rlimit {
    pub(super) fn get() -> std::io::Result<libc::rlimit> {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `l` is a valid, writable rlimit for the call to fill.
        match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } {
            0 => Ok(l),
            _ => Err(std::io::Error::last_os_error()),
        }
    }

    pub(super) fn set(l: libc::rlimit) -> std::io::Result<()> {
        // SAFETY: `l` is a valid rlimit read by the call.
        match unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    }

    /// Clock ticks per second, the unit of CPU times in `/proc/<pid>/stat`.
    pub(super) fn clock_ticks() -> Option<u64> {
        // SAFETY: sysconf has no preconditions.
        let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        u64::try_from(t).ok().filter(|&t| t > 0)
    }

    /// Bytes per memory page, the unit of the resident set size in `/proc/<pid>/stat`.
    pub(super) fn page_size() -> Option<u64> {
        // SAFETY: sysconf has no preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        u64::try_from(p).ok().filter(|&p| p > 0)
    }
}

/// Registers the `process_*` metrics on `registry`.
pub fn register_process_metrics(registry: &mut Registry) {
    registry.register_collector(Box::new(ProcessCollector));
}

/// Reads `/proc/self` on every scrape: a handful of small files, no state kept.
#[derive(Debug)]
struct ProcessCollector;

/// One scrape's reading of the process; a field that could not be read is `None` and left out.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct ProcessStats {
    pub(crate) open_fds: Option<u64>,
    pub(crate) max_fds: Option<u64>,
    pub(crate) resident_memory_bytes: Option<u64>,
    pub(crate) virtual_memory_bytes: Option<u64>,
    pub(crate) cpu_seconds: Option<f64>,
    pub(crate) threads: Option<u64>,
    pub(crate) start_time_seconds: Option<f64>,
}

impl ProcessStats {
    /// Reads the process's stats from `proc` (`/proc` on Linux).
    pub(crate) fn read(proc: &Path) -> ProcessStats {
        let me = proc.join("self");
        let mut s = ProcessStats {
            open_fds: std::fs::read_dir(me.join("fd")).ok().map(|d| d.count() as u64),
            max_fds: std::fs::read_to_string(me.join("limits"))
                .ok()
                .and_then(|l| max_open_files(&l)),
            ..ProcessStats::default()
        };
        let (Some(stat), Some(ticks)) = (std::fs::read_to_string(me.join("stat")).ok(), rlimit::clock_ticks()) else {
            return s;
        };
        let Some(f) = stat_fields(&stat) else { return s };
        // Fields after the command name, numbered as in proc(5) from 3 (state): index = number - 3.
        let field = |n: usize| f.get(n - 3).and_then(|v| v.parse::<u64>().ok());
        if let (Some(utime), Some(stime)) = (field(14), field(15)) {
            s.cpu_seconds = Some((utime + stime) as f64 / ticks as f64);
        }
        s.threads = field(20);
        s.virtual_memory_bytes = field(23);
        s.resident_memory_bytes = field(24)
            .zip(rlimit::page_size())
            .map(|(pages, size)| pages.saturating_mul(size));
        let boot_time = std::fs::read_to_string(proc.join("stat")).ok().and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|v| v.trim().parse::<u64>().ok())
        });
        s.start_time_seconds = field(22)
            .zip(boot_time)
            .map(|(start, boot)| boot as f64 + start as f64 / ticks as f64);
        s
    }
}

/// The fields of `/proc/<pid>/stat` after the command name, which is in parentheses and may itself hold
/// spaces and parentheses (so the split starts after the last `)`).
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().collect())
}

/// The soft "Max open files" of `/proc/<pid>/limits` ("unlimited" has no number and is left out).
fn max_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let s = ProcessStats::read(Path::new("/proc"));
        let to_i64 = |v: Option<u64>| v.map(|v| i64::try_from(v).unwrap_or(i64::MAX));
        let counts: [(&str, &str, Option<i64>); 5] = [
            (
                "process_open_fds",
                "Number of open file descriptors.",
                to_i64(s.open_fds),
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                to_i64(s.max_fds),
            ),
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                to_i64(s.resident_memory_bytes),
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                to_i64(s.virtual_memory_bytes),
            ),
            (
                "process_threads",
                "Number of OS threads in the process.",
                to_i64(s.threads),
            ),
        ];
        for (name, help, value) in counts {
            if let Some(v) = value {
                let g = ConstGauge::new(v);
                g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
            }
        }
        if let Some(v) = s.start_time_seconds {
            let g = ConstGauge::new(v);
            g.encode(encoder.encode_descriptor(
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                None,
                g.metric_type(),
            )?)?;
        }
        if let Some(v) = s.cpu_seconds {
            // Encoded with the `_total` suffix counters get.
            let c = ConstCounter::new(v);
            c.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                c.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_an_awkward_command_name() {
        let stat = "4242 (a) b (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 7 0 1000 123456789 2048 x";
        let f = stat_fields(stat).unwrap();
        assert_eq!(f[0], "S", "field 3 (state) comes first");
        assert_eq!((f[14 - 3], f[15 - 3]), ("250", "50"), "utime, stime");
        assert_eq!(f[20 - 3], "7", "num_threads");
        assert_eq!(f[22 - 3], "1000", "starttime");
        assert_eq!((f[23 - 3], f[24 - 3]), ("123456789", "2048"), "vsize, rss");
    }

    #[test]
    fn parses_max_open_files() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max cpu time              unlimited            unlimited            seconds\n\
                      Max open files            1048576              1048576              files\n";
        assert_eq!(max_open_files(limits), Some(1_048_576));
        assert_eq!(max_open_files("Max open files  unlimited unlimited files\n"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_this_process_and_exports_every_metric() {
        let s = ProcessStats::read(Path::new("/proc"));
        let (open, max) = (s.open_fds.unwrap(), s.max_fds.unwrap());
        assert!(open > 0 && open <= max, "open {open}, max {max}");
        assert!(s.threads.unwrap() >= 1);
        assert!(s.resident_memory_bytes.unwrap() > 0);
        assert!(s.virtual_memory_bytes.unwrap() >= s.resident_memory_bytes.unwrap());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = s.start_time_seconds.unwrap();
        assert!(
            start > now - 86_400.0 * 365.0 && start <= now + 1.0,
            "start {start}, now {now}"
        );

        let mut r = Registry::default();
        register_process_metrics(&mut r);
        let text = crate::encode_metrics(&r);
        for name in [
            "process_open_fds ",
            "process_max_fds ",
            "process_resident_memory_bytes ",
            "process_virtual_memory_bytes ",
            "process_cpu_seconds_total ",
            "process_threads ",
            "process_start_time_seconds ",
            "# TYPE process_cpu_seconds_total counter",
        ] {
            assert!(text.contains(name), "{name:?} missing in\n{text}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_soft_open_files_limit_is_raised_to_the_hard_one() {
        let l = raise_open_files_limit().unwrap();
        assert_eq!(l.soft, l.hard, "{l:?}");
        assert!(l.soft >= l.soft_before, "{l:?}");
        let max = ProcessStats::read(Path::new("/proc")).max_fds.unwrap();
        assert_eq!(max, l.soft, "process_max_fds reports the raised limit");
    }
}
