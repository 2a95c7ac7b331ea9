//! Per-tenant ingestion rate limiting (token buckets) and the limiter that keeps per-series warnings from
//! flooding the log.
//!
//! Both take the current instant as an argument instead of reading a clock, so tests drive time directly.

use heddle_model::TenantId;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// A token bucket: refills at `rate` tokens per second up to `burst`; starts full.
#[derive(Debug, Clone)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

/// One token bucket per tenant, refilled at the tenant's `rate` samples/s up to its `burst` samples. A
/// request takes as many tokens as it has samples, all or nothing, so a request larger than the burst is
/// always refused (as Mimir). Rate and burst are passed on each call, so runtime overrides apply at once.
#[derive(Debug, Default)]
pub struct IngestionRateLimiter {
    buckets: Mutex<HashMap<TenantId, Bucket>>,
}

impl IngestionRateLimiter {
    /// An empty limiter; each tenant's bucket starts full on first use.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes `samples` tokens from the tenant's bucket at time `now`, refilling at `rate` samples/s up to
    /// `burst`; false (and nothing taken) when there are not enough.
    pub fn allow(&self, tenant: &TenantId, samples: u64, now: Instant, rate: f64, burst: usize) -> bool {
        if samples == 0 {
            return true;
        }
        let burst = burst as f64;
        // A poisoned lock only means another request panicked mid-update; the map is still usable.
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let bucket = buckets.entry(tenant.clone()).or_insert(Bucket {
            tokens: burst,
            last: now,
        });
        let elapsed = now.saturating_duration_since(bucket.last).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(burst);
        if now > bucket.last {
            bucket.last = now;
        }
        let wanted = samples as f64;
        if wanted <= bucket.tokens {
            bucket.tokens -= wanted;
            true
        } else {
            false
        }
    }
}

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

    /// A limiter with fixed rate and burst, as the old API had.
    struct Limiter {
        inner: IngestionRateLimiter,
        rate: f64,
        burst: usize,
    }

    impl Limiter {
        fn allow(&self, tenant: &TenantId, samples: u64, now: Instant) -> bool {
            self.inner.allow(tenant, samples, now, self.rate, self.burst)
        }
    }

    #[test]
    fn lowering_the_burst_caps_the_tokens() {
        let l = IngestionRateLimiter::new();
        let now = Instant::now();
        let a = t("a");
        assert!(l.allow(&a, 1, now, 10.0, 100));
        assert!(
            !l.allow(&a, 11, now, 10.0, 10),
            "an override to burst 10 applies at once"
        );
        assert!(l.allow(&a, 10, now, 10.0, 10));
    }

    fn t(id: &str) -> TenantId {
        TenantId::new(id).unwrap()
    }

    #[test]
    fn bucket_starts_full_and_refills_at_rate() {
        let l = Limiter {
            inner: IngestionRateLimiter::new(),
            rate: 100.0,
            burst: 1000,
        };
        let t0 = Instant::now();
        let a = t("a");
        assert!(l.allow(&a, 1000, t0), "a full bucket admits the whole burst");
        assert!(!l.allow(&a, 1, t0), "an empty bucket refuses");
        assert!(
            !l.allow(&a, 101, t0 + Duration::from_secs(1)),
            "one second refills 100, not 101"
        );
        assert!(
            l.allow(&a, 100, t0 + Duration::from_secs(1)),
            "the refused request took nothing"
        );
        assert!(!l.allow(&a, 1, t0 + Duration::from_secs(1)));
        // Refill is capped at the burst however long the tenant was idle.
        assert!(!l.allow(&a, 1001, t0 + Duration::from_secs(3600)));
        assert!(l.allow(&a, 1000, t0 + Duration::from_secs(3600)));
    }

    #[test]
    fn tenants_are_independent_and_zero_is_free() {
        let l = Limiter {
            inner: IngestionRateLimiter::new(),
            rate: 1.0,
            burst: 10,
        };
        let now = Instant::now();
        assert!(l.allow(&t("a"), 10, now));
        assert!(!l.allow(&t("a"), 1, now));
        assert!(l.allow(&t("b"), 10, now), "tenant b has its own bucket");
        assert!(l.allow(&t("a"), 0, now), "an empty request never waits");
    }

    #[test]
    fn request_larger_than_burst_is_always_refused() {
        let l = Limiter {
            inner: IngestionRateLimiter::new(),
            rate: 1e9,
            burst: 10,
        };
        let now = Instant::now();
        assert!(!l.allow(&t("a"), 11, now));
        assert!(!l.allow(&t("a"), 11, now + Duration::from_secs(100)));
        assert!(l.allow(&t("a"), 10, now + Duration::from_secs(100)));
    }

    #[test]
    fn time_going_backwards_does_not_add_tokens() {
        let l = Limiter {
            inner: IngestionRateLimiter::new(),
            rate: 10.0,
            burst: 10,
        };
        let t0 = Instant::now() + Duration::from_secs(10);
        assert!(l.allow(&t("a"), 10, t0));
        assert!(!l.allow(&t("a"), 1, t0 - Duration::from_secs(5)));
        assert!(l.allow(&t("a"), 10, t0 + Duration::from_secs(1)));
    }

    #[tokio::test(start_paused = true)]
    async fn paused_clock_drives_refill() {
        let l = Limiter {
            inner: IngestionRateLimiter::new(),
            rate: 5.0,
            burst: 5,
        };
        let a = t("a");
        assert!(l.allow(&a, 5, Instant::now()));
        assert!(!l.allow(&a, 5, Instant::now()));
        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(!l.allow(&a, 5, Instant::now()), "4.995 tokens after 999 ms");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(l.allow(&a, 5, Instant::now()));
    }

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
