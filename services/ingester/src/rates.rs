//! Per-tenant ingestion rate for the operator API (`TenantStats.samples_per_second`): snapshots of each
//! head's appended-sample count, taken every [`RATE_TICK`] by the blocks loop, give the rate over the last
//! [`RATE_WINDOW`]. Nothing is computed on the push path.

use heddle_model::TenantId;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often the blocks loop records each tenant's count.
pub(crate) const RATE_TICK: Duration = Duration::from_secs(5);
/// The span the rate is averaged over.
pub(crate) const RATE_WINDOW: Duration = Duration::from_secs(60);

/// Recent `(when, samples appended)` snapshots of every tenant.
#[derive(Debug, Default)]
pub(crate) struct TenantRates {
    snapshots: Mutex<HashMap<TenantId, VecDeque<(Instant, u64)>>>,
}

impl TenantRates {
    /// Records `tenant`'s count at `now`, keeping one snapshot at least [`RATE_WINDOW`] old (the window's
    /// start) and those after it.
    pub(crate) fn observe(&self, tenant: &TenantId, now: Instant, samples_appended: u64) {
        let mut all = self.snapshots.lock().unwrap_or_else(|p| p.into_inner());
        let q = all.entry(tenant.clone()).or_default();
        q.push_back((now, samples_appended));
        while q.len() > 2 && q.get(1).is_some_and(|(t, _)| now.duration_since(*t) >= RATE_WINDOW) {
            q.pop_front();
        }
    }

    /// Forgets tenants not in `live` (their heads were closed).
    pub(crate) fn retain(&self, live: &[TenantId]) {
        let mut all = self.snapshots.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|t, _| live.contains(t));
    }

    /// Samples per second from the oldest snapshot to `(now, samples_appended)`; 0 before the first snapshot.
    pub(crate) fn rate(&self, tenant: &TenantId, now: Instant, samples_appended: u64) -> f64 {
        let all = self.snapshots.lock().unwrap_or_else(|p| p.into_inner());
        let Some(&(since, count)) = all.get(tenant).and_then(|q| q.front()) else {
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
        let r = TenantRates::default();
        let t = TenantId::new("t").unwrap();
        let t0 = Instant::now();
        assert_eq!(r.rate(&t, t0, 100), 0.0, "no snapshot yet");
        // 1000 samples/s for 2 minutes, then 100 samples/s for 90 s, a snapshot every second.
        let count_at = |s: u64| if s <= 120 { 1000 * s } else { 120_000 + 100 * (s - 120) };
        for s in 0..=210u64 {
            r.observe(&t, t0 + Duration::from_secs(s), count_at(s));
        }
        let count = count_at(210);
        let now = t0 + Duration::from_secs(210);
        let rate = r.rate(&t, now, count);
        assert!(
            (rate - 100.0).abs() < 2.0,
            "the old 1000/s minute is out of the window: {rate}"
        );
        r.retain(&[]);
        assert_eq!(r.rate(&t, now, count), 0.0);
    }

    #[test]
    fn snapshots_stay_bounded() {
        let r = TenantRates::default();
        let t = TenantId::new("t").unwrap();
        let t0 = Instant::now();
        for s in 0..10_000u64 {
            r.observe(&t, t0 + RATE_TICK * s as u32, s);
        }
        let n = r.snapshots.lock().unwrap()[&t].len();
        assert!(
            n <= (RATE_WINDOW.as_secs() / RATE_TICK.as_secs()) as usize + 2,
            "{n} snapshots kept"
        );
    }
}
