//! A tenant's ingestion rate for the operator API (`TenantStats.samples_per_second`): snapshots of its head's
//! appended-sample count, taken every [`RATE_TICK`] by the blocks loop, give the rate over the last
//! [`RATE_WINDOW`]. Nothing is computed on the push path. Each [`crate::tenant::Tenant`] owns one, so the
//! snapshots go when the tenant does.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often the blocks loop records each tenant's count.
pub(crate) const RATE_TICK: Duration = Duration::from_secs(5);
/// The span the rate is averaged over.
pub(crate) const RATE_WINDOW: Duration = Duration::from_secs(60);

/// Recent `(when, samples appended)` snapshots of one tenant.
#[derive(Debug, Default)]
pub(crate) struct TenantRate {
    snapshots: Mutex<VecDeque<(Instant, u64)>>,
}

impl TenantRate {
    /// Records the count at `now`, keeping one snapshot at least [`RATE_WINDOW`] old (the window's start) and
    /// those after it.
    pub(crate) fn observe(&self, now: Instant, samples_appended: u64) {
        let mut q = self.snapshots.lock().unwrap_or_else(|p| p.into_inner());
        q.push_back((now, samples_appended));
        while q.len() > 2 && q.get(1).is_some_and(|(t, _)| now.duration_since(*t) >= RATE_WINDOW) {
            q.pop_front();
        }
    }

    /// Samples per second from the oldest snapshot to `(now, samples_appended)`; 0 before the first snapshot.
    pub(crate) fn rate(&self, now: Instant, samples_appended: u64) -> f64 {
        let q = self.snapshots.lock().unwrap_or_else(|p| p.into_inner());
        let Some(&(since, count)) = q.front() else {
            return 0.0;
        };
        let secs = now.saturating_duration_since(since).as_secs_f64();
        if secs <= 0.0 {
            return 0.0;
        }
        samples_appended.saturating_sub(count) as f64 / secs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_over_the_last_minute() {
        let r = TenantRate::default();
        let t0 = Instant::now();
        assert_eq!(r.rate(t0, 100), 0.0, "no snapshot yet");
        // 1000 samples/s for 2 minutes, then 100 samples/s for 90 s, a snapshot every second.
        let count_at = |s: u64| if s <= 120 { 1000 * s } else { 120_000 + 100 * (s - 120) };
        for s in 0..=210u64 {
            r.observe(t0 + Duration::from_secs(s), count_at(s));
        }
        let count = count_at(210);
        let now = t0 + Duration::from_secs(210);
        let rate = r.rate(now, count);
        assert!(
            (rate - 100.0).abs() < 2.0,
            "the old 1000/s minute is out of the window: {rate}"
        );
        // A tenant opened again starts without snapshots (the rate lives and dies with the tenant).
        assert_eq!(TenantRate::default().rate(now, count), 0.0);
    }

    #[test]
    fn snapshots_stay_bounded() {
        let r = TenantRate::default();
        let t0 = Instant::now();
        for s in 0..10_000u64 {
            r.observe(t0 + RATE_TICK * s as u32, s);
        }
        let n = r.snapshots.lock().unwrap().len();
        assert!(
            n <= (RATE_WINDOW.as_secs() / RATE_TICK.as_secs()) as usize + 2,
            "{n} snapshots kept"
        );
    }
}
