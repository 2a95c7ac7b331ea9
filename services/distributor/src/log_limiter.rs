//! The limiter that keeps per-series warnings from flooding the log.
//!
//! It takes the current instant as an argument instead of reading a clock, so tests drive time directly.

use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// Lets through at most `max_per_window` log lines per window and counts the rest, so a request with
/// thousands of bad series costs a few log lines.
#[derive(Debug)]
pub(crate) struct LogLimiter {
    max_per_window: u32,
    window: Duration,
    state: Mutex<LogWindow>,
}

#[derive(Debug)]
struct LogWindow {
    start: Option<Instant>,
    logged: u32,
    suppressed: u64,
}

impl LogLimiter {
    pub(crate) fn new(max_per_window: u32, window: Duration) -> Self {
        Self {
            max_per_window,
            window,
            state: Mutex::new(LogWindow {
                start: None,
                logged: 0,
                suppressed: 0,
            }),
        }
    }

    /// `Some(n)` when the caller may log now; `n` lines were suppressed since the last line let through.
    pub(crate) fn check(&self, now: Instant) -> Option<u64> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let expired = s
            .start
            .is_none_or(|start| now.saturating_duration_since(start) >= self.window);
        if expired {
            s.start = Some(now);
            s.logged = 0;
        }
        if s.logged < self.max_per_window {
            s.logged += 1;
            Some(std::mem::take(&mut s.suppressed))
        } else {
            s.suppressed += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_limiter_counts_suppressed_lines() {
        let l = LogLimiter::new(2, Duration::from_secs(1));
        let t0 = Instant::now();
        assert_eq!(l.check(t0), Some(0));
        assert_eq!(l.check(t0), Some(0));
        assert_eq!(l.check(t0), None);
        assert_eq!(l.check(t0 + Duration::from_millis(500)), None);
        assert_eq!(
            l.check(t0 + Duration::from_secs(1)),
            Some(2),
            "the next window reports what was dropped"
        );
        assert_eq!(l.check(t0 + Duration::from_secs(1)), Some(0));
    }
}
