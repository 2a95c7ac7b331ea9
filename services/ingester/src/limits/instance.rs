//! Instance limits: in-flight pushes, ingestion rate, tenants and series of the whole ingester.
//!
//! Each check is O(1) and runs before the request body is decoded, so an overloaded ingester answers a
//! refused push at once instead of queueing it (queueing is how an ingester runs out of memory).

use super::InstanceLimitsConfig;
use crate::error::IngesterError;
use heddle_server::{InflightBytes, Reservation};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// Length of the window the ingestion rate is measured over.
const RATE_WINDOW: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct LimitLabel {
    limit: &'static str,
}

#[derive(Debug)]
struct RateWindow {
    start: Option<Instant>,
    samples: u64,
}

/// Counts in-flight pushes and recent samples against [`InstanceLimitsConfig`].
#[derive(Debug)]
pub(crate) struct InstanceLimiter {
    cfg: InstanceLimitsConfig,
    inflight: Arc<AtomicUsize>,
    inflight_bytes: Arc<InflightBytes>,
    window: Mutex<RateWindow>,
    rejected: Family<LimitLabel, Counter>,
}

/// Holds one in-flight slot; dropping it frees the slot.
#[derive(Debug)]
pub(crate) struct InflightGuard(Arc<AtomicUsize>);

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl InstanceLimiter {
    /// Registers `heddle_ingester_instance_limit_rejections_total{limit}` and
    /// `heddle_ingester_inflight_push_requests_bytes`.
    pub(crate) fn new(cfg: InstanceLimitsConfig, registry: &mut Registry) -> Self {
        let rejected = Family::<LimitLabel, Counter>::default();
        registry.register(
            "heddle_ingester_instance_limit_rejections",
            "Push requests refused with Unavailable because an instance limit was reached",
            rejected.clone(),
        );
        let inflight_bytes = Gauge::default();
        registry.register(
            "heddle_ingester_inflight_push_requests_bytes",
            "Bytes held by push requests in flight (bodies and decoded views), reserved before decoding against \
             ingester.instance_limits.max_inflight_push_requests_bytes",
            inflight_bytes.clone(),
        );
        let bytes_refused = rejected.get_or_create(&LimitLabel { limit: BYTES_LIMIT }).clone();
        Self {
            inflight_bytes: InflightBytes::new(cfg.max_inflight_push_requests_bytes, inflight_bytes, bytes_refused),
            cfg,
            inflight: Arc::new(AtomicUsize::new(0)),
            window: Mutex::new(RateWindow {
                start: None,
                samples: 0,
            }),
            rejected,
        }
    }

    fn refuse(&self, limit: &'static str, value: String) -> IngesterError {
        self.rejected.get_or_create(&LimitLabel { limit }).inc();
        IngesterError::InstanceLimit { limit, value }
    }

    /// Takes an in-flight slot, or refuses when `max_inflight_push_requests` are already running.
    pub(crate) fn start_push(&self) -> Result<InflightGuard, IngesterError> {
        let now = self.inflight.fetch_add(1, Ordering::AcqRel) + 1;
        let guard = InflightGuard(self.inflight.clone());
        let max = self.cfg.max_inflight_push_requests;
        if max > 0 && now > max {
            return Err(self.refuse("max_inflight_push_requests", max.to_string()));
        }
        Ok(guard)
    }

    /// Reserves a push body of `len` bytes in the in-flight bytes budget, or refuses the push.
    pub(crate) fn reserve_push_bytes(&self, len: usize) -> Result<Reservation, IngesterError> {
        let mut reservation = self.inflight_bytes.reserve();
        reservation.grow(len).map_err(bytes_refused)?;
        Ok(reservation)
    }

    /// Refuses when the samples accepted in the current one-second window already reached
    /// `max_ingestion_rate`.
    pub(crate) fn check_rate(&self, now: Instant) -> Result<(), IngesterError> {
        let max = self.cfg.max_ingestion_rate;
        if max <= 0.0 {
            return Ok(());
        }
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        roll(&mut w, now);
        if w.samples as f64 >= max * RATE_WINDOW.as_secs_f64() {
            drop(w);
            return Err(self.refuse("max_ingestion_rate", format!("{max} samples/s")));
        }
        Ok(())
    }

    /// Counts accepted samples toward the rate.
    pub(crate) fn record_samples(&self, samples: u64, now: Instant) {
        if self.cfg.max_ingestion_rate <= 0.0 || samples == 0 {
            return;
        }
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        roll(&mut w, now);
        w.samples = w.samples.saturating_add(samples);
    }

    /// Refuses a push for a tenant without a head when `max_tenants` heads are open.
    pub(crate) fn check_new_tenant(&self, tenants: usize) -> Result<(), IngesterError> {
        let max = self.cfg.max_tenants;
        if max > 0 && tenants >= max {
            return Err(self.refuse("max_tenants", max.to_string()));
        }
        Ok(())
    }

    /// `max_series` (0: no limit).
    pub(crate) fn max_series(&self) -> usize {
        self.cfg.max_series
    }

    /// Refuses a push that would take the ingester past `max_series` series.
    pub(crate) fn check_series(&self, current: u64, new: u64) -> Result<(), IngesterError> {
        let max = self.cfg.max_series as u64;
        if max > 0 && new > 0 && current.saturating_add(new) > max {
            return Err(self.refuse("max_series", max.to_string()));
        }
        Ok(())
    }
}

/// The `limit` label and config key of the in-flight bytes limit.
const BYTES_LIMIT: &str = "max_inflight_push_requests_bytes";

/// The refusal of a push whose bytes would pass `max_inflight_push_requests_bytes` (already counted by the
/// budget).
pub(crate) fn bytes_refused(r: heddle_server::InflightRefused) -> IngesterError {
    IngesterError::InstanceLimit {
        limit: BYTES_LIMIT,
        value: format!(
            "{} bytes (pushes in flight hold {} and this one needs {} more)",
            r.limit, r.in_flight, r.requested
        ),
    }
}

fn roll(w: &mut RateWindow, now: Instant) {
    let expired = w.start.is_none_or(|s| now.saturating_duration_since(s) >= RATE_WINDOW);
    if expired {
        w.start = Some(now);
        w.samples = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(cfg: InstanceLimitsConfig) -> (InstanceLimiter, Registry) {
        let mut r = Registry::default();
        (InstanceLimiter::new(cfg, &mut r), r)
    }

    #[test]
    fn inflight_slots_are_freed_on_drop() {
        let (l, r) = limiter(InstanceLimitsConfig {
            max_inflight_push_requests: 2,
            ..Default::default()
        });
        let a = l.start_push().unwrap();
        let _b = l.start_push().unwrap();
        let err = l.start_push().unwrap_err();
        assert_eq!(err.to_status().code(), tonic::Code::Unavailable);
        assert!(err.to_string().contains("max_inflight_push_requests"), "{err}");
        drop(a);
        let _c = l.start_push().expect("a slot was freed (also by the refused call)");
        let text = heddle_server::encode_metrics(&r);
        assert!(
            text.contains(r#"heddle_ingester_instance_limit_rejections_total{limit="max_inflight_push_requests"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn inflight_bytes_are_reserved_and_released() {
        let (l, r) = limiter(InstanceLimitsConfig {
            max_inflight_push_requests_bytes: 100,
            ..Default::default()
        });
        let mut a = l.reserve_push_bytes(60).unwrap();
        let err = l.reserve_push_bytes(50).unwrap_err();
        assert_eq!(err.to_status().code(), tonic::Code::Unavailable);
        let msg = err.to_string();
        assert!(
            msg.starts_with("err-heddle-ingester-instance-limit:")
                && msg.contains("`ingester.instance_limits.max_inflight_push_requests_bytes` of 100 bytes")
                && msg.contains("--ingester.instance-limits.max-inflight-push-requests-bytes"),
            "{msg}"
        );
        a.grow(40).expect("the decoded view fits the rest");
        assert!(a.grow(1).is_err());
        let text = heddle_server::encode_metrics(&r);
        assert!(
            text.contains("heddle_ingester_inflight_push_requests_bytes 100"),
            "{text}"
        );
        assert!(
            text.contains(
                r#"heddle_ingester_instance_limit_rejections_total{limit="max_inflight_push_requests_bytes"} 2"#
            ),
            "{text}"
        );
        drop(a);
        assert!(heddle_server::encode_metrics(&r).contains("heddle_ingester_inflight_push_requests_bytes 0"));
        let _b = l.reserve_push_bytes(100).expect("released on drop");
    }

    #[test]
    fn rate_is_measured_per_second() {
        let (l, _r) = limiter(InstanceLimitsConfig {
            max_ingestion_rate: 100.0,
            ..Default::default()
        });
        let t0 = Instant::now();
        l.check_rate(t0).unwrap();
        l.record_samples(100, t0);
        assert!(l.check_rate(t0 + Duration::from_millis(999)).is_err());
        l.check_rate(t0 + Duration::from_secs(1)).expect("a new window");
    }

    #[test]
    fn tenants_and_series() {
        let (l, _r) = limiter(InstanceLimitsConfig {
            max_tenants: 1,
            max_series: 10,
            ..Default::default()
        });
        l.check_new_tenant(0).unwrap();
        assert!(l.check_new_tenant(1).is_err());
        l.check_series(9, 1).unwrap();
        assert!(l.check_series(9, 2).is_err());
        l.check_series(20, 0).expect("a push creating nothing always passes");
        let (off, _r) = limiter(InstanceLimitsConfig {
            max_inflight_push_requests: 0,
            ..Default::default()
        });
        off.check_series(u64::MAX, 1).unwrap();
        off.check_new_tenant(usize::MAX).unwrap();
        let _g = off.start_push().unwrap();
    }
}
