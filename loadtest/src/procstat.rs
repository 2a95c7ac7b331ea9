//! CPU time and resident memory of a process, from `/proc/<pid>/stat` (utime + stime) and
//! `/proc/<pid>/status` (VmRSS).

use std::sync::OnceLock;

/// One reading of a process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcSample {
    /// User plus system CPU time since the process started.
    pub cpu_seconds: f64,
    /// Resident set size.
    pub rss_bytes: u64,
}

/// Clock ticks per second of `/proc/<pid>/stat` times: `getconf CLK_TCK`, else Linux' fixed USER_HZ of 100.
fn clock_ticks() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|t| *t > 0.0)
            .unwrap_or(100.0)
    })
}

/// Reads process `pid`; `None` when it is gone or `/proc` is unreadable.
pub fn read_proc(pid: u32) -> Option<ProcSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let ticks = parse_stat_ticks(&stat)?;
    Some(ProcSample {
        cpu_seconds: ticks as f64 / clock_ticks(),
        rss_bytes: parse_vmrss(&status)?,
    })
}

/// utime + stime in clock ticks. The command name (field 2) is in parentheses and may contain spaces and
/// parentheses, so fields are counted from the last `)`: utime and stime are fields 14 and 15.
fn parse_stat_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn parse_vmrss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_command_names() {
        let stat = "4242 (we ird) (x)) S 1 4242 4242 0 -1 4194560 300 0 0 0 1234 567 0 0 20 0 9 0 100 1000 200";
        assert_eq!(parse_stat_ticks(stat), Some(1801));
        assert_eq!(parse_stat_ticks("garbage"), None);
    }

    #[test]
    fn parses_vmrss() {
        let status = "Name:\theddle\nVmPeak:\t  9000 kB\nVmRSS:\t   71234 kB\nThreads:\t9\n";
        assert_eq!(parse_vmrss(status), Some(71234 * 1024));
        assert_eq!(parse_vmrss("Name: x\n"), None);
    }

    #[test]
    fn reads_this_process() {
        let me = read_proc(std::process::id()).expect("own /proc entry");
        assert!(me.rss_bytes > 0);
        assert!(me.cpu_seconds >= 0.0);
    }
}
