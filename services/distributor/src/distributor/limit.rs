//! Stage 4, limit: the per-tenant ingestion rate (DESIGN.md §2 step 3), one token bucket per tenant.
//!
//! A request is admitted or refused whole (429), after validation so invalid samples cost no tokens. The
//! limiter takes the current instant as an argument instead of reading a clock, so tests drive time directly.

use crate::error::PushError;
use heddle_limits::Limits;
use heddle_model::TenantId;
use heddle_model::error_id;
use heddle_server::DiscardedSamples;
use std::collections::HashMap;
use std::sync::Mutex;
use tokio::time::Instant;

/// Takes `samples` tokens of `tenant`'s bucket at `now`, with the tenant's rate and burst from `limits`. On
/// refusal nothing is forwarded and the samples are counted as discarded.
pub(crate) fn admit(
    limiter: &IngestionRateLimiter,
    tenant: &TenantId,
    limits: &Limits,
    samples: u64,
    now: Instant,
    discarded: &DiscardedSamples,
) -> Result<(), PushError> {
    let (rate, burst) = (limits.ingestion_rate, limits.ingestion_burst_size);
    if limiter.allow(tenant, samples, now, rate, burst) {
        return Ok(());
    }
    discarded.add(tenant.as_str(), error_id::INGESTION_RATE_LIMITED, samples);
    Err(PushError::RateLimited {
        tenant: tenant.to_string(),
        samples,
        rate,
        burst,
    })
}

/// A token bucket: refills at `rate` tokens per second up to `burst`; starts full.
#[derive(Debug, Clone)]
struct Bucket {
    tokens: f64,
    last: Instant,
    /// The rate and burst of the last call, so a sweep can tell when the bucket has refilled.
    rate: f64,
    burst: f64,
}

impl Bucket {
    /// Whether the bucket has refilled to its burst by `now`: then it is the same as a new one.
    fn full_at(&self, now: Instant) -> bool {
        self.tokens + now.saturating_duration_since(self.last).as_secs_f64() * self.rate >= self.burst
    }
}

/// Calls between two sweeps of refilled buckets.
const SWEEP_EVERY: u32 = 4096;

/// One token bucket per tenant, refilled at the tenant's `rate` samples/s up to its `burst` samples. A
/// request takes as many tokens as it has samples, all or nothing, so a request larger than the burst is
/// always refused (as Mimir). Rate and burst are passed on each call, so runtime overrides apply at once.
#[derive(Debug, Default)]
pub(crate) struct IngestionRateLimiter {
    buckets: Mutex<Buckets>,
}

/// The buckets of tenants that are not full; a full bucket is dropped (every
/// [`SWEEP_EVERY`] calls), since a tenant's first bucket starts full anyway. So the map holds the tenants that
/// sent recently, not every tenant ever seen.
#[derive(Debug, Default)]
struct Buckets {
    by_tenant: HashMap<TenantId, Bucket>,
    calls: u32,
}

impl IngestionRateLimiter {
    /// An empty limiter; each tenant's bucket starts full on first use.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Takes `samples` tokens from the tenant's bucket at time `now`, refilling at `rate` samples/s up to
    /// `burst`; false (and nothing taken) when there are not enough.
    pub(crate) fn allow(&self, tenant: &TenantId, samples: u64, now: Instant, rate: f64, burst: usize) -> bool {
        if samples == 0 {
            return true;
        }
        let burst = burst as f64;
        // A poisoned lock only means another request panicked mid-update; the map is still usable.
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        buckets.calls = buckets.calls.wrapping_add(1);
        if buckets.calls.is_multiple_of(SWEEP_EVERY) {
            buckets.by_tenant.retain(|_, b| !b.full_at(now));
        }
        let bucket = buckets.by_tenant.entry(tenant.clone()).or_insert(Bucket {
            tokens: burst,
            last: now,
            rate,
            burst,
        });
        (bucket.rate, bucket.burst) = (rate, burst);
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

    /// Tenants with a bucket (tests).
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.buckets.lock().unwrap_or_else(|p| p.into_inner()).by_tenant.len()
    }
}

#[cfg(test)]
mod tests;
