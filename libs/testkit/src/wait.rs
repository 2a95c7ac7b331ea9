//! Bounded polling: tests wait for a condition, never for a fixed time.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often [`wait_until`] and [`wait_until_async`] re-check their condition.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Calls `cond` every [`POLL_INTERVAL`] until it returns true (-> `true`) or `timeout` passes (-> `false`).
/// `cond` is always called at least once, and once more at the deadline.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(POLL_INTERVAL.min(deadline - now));
    }
}

/// Async form of [`wait_until`]: awaits `cond()` every [`POLL_INTERVAL`] until it yields true or `timeout`
/// passes. A single `cond()` future that hangs is cut off at the deadline too.
pub async fn wait_until_async<F, Fut>(timeout: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match tokio::time::timeout_at(deadline, cond()).await {
            Ok(true) => return true,
            Ok(false) => {}
            Err(_) => return false,
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return false;
        }
        tokio::time::sleep(POLL_INTERVAL.min(deadline - now)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_true_once_condition_holds() {
        let mut calls = 0;
        assert!(wait_until(Duration::from_secs(5), || {
            calls += 1;
            calls >= 3
        }));
        assert_eq!(calls, 3);
    }

    #[test]
    fn returns_false_after_timeout() {
        let start = Instant::now();
        assert!(!wait_until(Duration::from_millis(120), || false));
        assert!(start.elapsed() >= Duration::from_millis(120));
    }

    #[tokio::test(start_paused = true)]
    async fn async_form_times_out_on_hanging_condition() {
        let ok = wait_until_async(Duration::from_secs(1), std::future::pending::<bool>).await;
        assert!(!ok);
    }

    #[tokio::test(start_paused = true)]
    async fn async_form_sees_condition() {
        let mut n = 0;
        let ok = wait_until_async(Duration::from_secs(1), || {
            n += 1;
            let done = n >= 2;
            async move { done }
        })
        .await;
        assert!(ok);
    }
}
