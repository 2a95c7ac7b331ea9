//! Time as the distributor sees it, injectable so tests control it.

use std::fmt::Debug;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// Where the distributor reads time: wall-clock milliseconds for timestamp checks, and a monotonic instant
/// for rate limiting and latency.
pub trait Clock: Send + Sync + Debug + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
    /// Monotonic time.
    fn instant(&self) -> Instant;
}

/// The real clock. Its monotonic time is tokio's, so `tokio::time::pause()` freezes it in tests.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        // A clock before 1970 reads as 0 (every timestamp then looks "in the future" only past the grace).
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }

    fn instant(&self) -> Instant {
        Instant::now()
    }
}
