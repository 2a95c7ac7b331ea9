//! Per-tenant series of the shared `/metrics` (received and discarded samples, metadata, exemplars, HA
//! dedupes, ...) removed once their tenant has been idle for `server.tenant_metrics_idle_timeout`, so months of
//! tenant churn do not grow the exposition and the process's memory without bound.
//!
//! Mimir's idea (its distributor forgets the series of a tenant inactive for 15 minutes, its ingester those of
//! `-ingester.active-series-metrics-idle-timeout`): a tenant is active while anything of it happens in this
//! process (a push touches it even when none of its series moves); once it has been quiet for the timeout,
//! every series of every tracked family that names it is removed. A tenant that comes back starts its
//! counters from zero, which `rate()` reads as a counter reset.
//!
//! `prometheus_client`'s families cannot be iterated, so each [`TenantFamily`] remembers the label sets it
//! created, per tenant. The sweep decides a tenant is idle and then removes its series family by family, each
//! under that family's lock and only if the tenant is still idle then: an update that raced the sweep either
//! lands before the removal (and its touch kept the tenant) or after it (and creates the series again), so no
//! count is lost to a tenant that came back at the moment it was forgotten.

use heddle_model::{Clock, SystemClock};
use prometheus_client::metrics::family::Family;
use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The default of `server.tenant_metrics_idle_timeout`: Mimir's distributor forgets an inactive tenant's
/// series after 15 minutes.
pub const DEFAULT_TENANT_METRICS_IDLE_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// A label set that names one tenant.
pub trait TenantLabelSet: Clone + Hash + Eq + Debug + Send + Sync + 'static {
    /// The tenant the series belongs to.
    fn tenant(&self) -> &str;
}

/// Which tenants were active when, and the families whose series go with an idle tenant. Cheap to clone;
/// clones share everything. The default never removes anything (and tracks nothing).
#[derive(Debug, Clone, Default)]
pub struct TenantMetrics {
    inner: Option<Arc<Inner>>,
}

#[derive(Debug)]
struct Inner {
    idle_timeout_ms: i64,
    clock: Arc<dyn Clock>,
    /// Tenant -> the last time (clock ms) anything of it happened here.
    last_seen: Mutex<HashMap<String, i64>>,
    families: Mutex<Vec<Arc<dyn Forget>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A family that can drop one tenant's series.
trait Forget: Send + Sync + Debug {
    /// Removes `tenant`'s series if `still_idle(tenant)` holds once the family's lock is taken.
    fn forget(&self, tenant: &str, still_idle: &dyn Fn(&str) -> bool);
}

impl TenantMetrics {
    /// Removes a tenant's series once it has been idle for `idle_timeout` on the wall clock; a zero timeout
    /// keeps every series forever (and tracks nothing).
    pub fn new(idle_timeout: Duration) -> Self {
        Self::with_clock(idle_timeout, Arc::new(SystemClock))
    }

    /// Like [`TenantMetrics::new`] with the time read from `clock` (tests).
    pub fn with_clock(idle_timeout: Duration, clock: Arc<dyn Clock>) -> Self {
        if idle_timeout.is_zero() {
            return Self::default();
        }
        Self {
            inner: Some(Arc::new(Inner {
                idle_timeout_ms: i64::try_from(idle_timeout.as_millis()).unwrap_or(i64::MAX),
                clock,
                last_seen: Mutex::new(HashMap::new()),
                families: Mutex::new(Vec::new()),
            })),
        }
    }

    /// Notes that something of `tenant` happened now.
    pub fn touch(&self, tenant: &str) {
        let Some(inner) = &self.inner else { return };
        let now = inner.clock.now_ms();
        let mut seen = lock(&inner.last_seen);
        match seen.get_mut(tenant) {
            Some(t) => *t = (*t).max(now),
            None => {
                seen.insert(tenant.to_owned(), now);
            }
        }
    }

    /// Tenants active within the timeout (tests and the sweep's log).
    pub fn tracked(&self) -> usize {
        self.inner.as_ref().map_or(0, |i| lock(&i.last_seen).len())
    }

    /// Removes the series of every tenant idle for the timeout; returns those tenants, sorted.
    pub fn sweep(&self) -> Vec<String> {
        let idle = self.take_idle();
        self.forget(&idle);
        idle
    }

    /// The sweep's decision: the tenants idle for the timeout, no longer tracked as active, sorted.
    fn take_idle(&self) -> Vec<String> {
        let Some(inner) = &self.inner else { return Vec::new() };
        let now = inner.clock.now_ms();
        let mut seen = lock(&inner.last_seen);
        let mut idle: Vec<String> = seen
            .iter()
            .filter(|(_, t)| now.saturating_sub(**t) >= inner.idle_timeout_ms)
            .map(|(k, _)| k.clone())
            .collect();
        for t in &idle {
            seen.remove(t);
        }
        idle.sort_unstable();
        idle
    }

    /// Removes the series of `idle` tenants from every family, each unless its tenant became active again
    /// since [`TenantMetrics::take_idle`].
    fn forget(&self, idle: &[String]) {
        let Some(inner) = &self.inner else { return };
        if idle.is_empty() {
            return;
        }
        let families = lock(&inner.families).clone();
        let still_idle = |t: &str| !lock(&inner.last_seen).contains_key(t);
        for tenant in idle {
            for f in &families {
                f.forget(tenant, &still_idle);
            }
        }
    }

    /// Sweeps every `interval` (a quarter of the timeout, between 250 ms and a minute) until `stop`.
    pub async fn run(self, stop: CancellationToken) {
        let Some(inner) = &self.inner else { return };
        let interval = Duration::from_millis((inner.idle_timeout_ms / 4).clamp(250, 60_000) as u64);
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let gone = self.sweep();
            if !gone.is_empty() {
                tracing::debug!(tenants = gone.len(), first = %gone[0], "removed the metric series of idle tenants");
            }
        }
    }

    fn register(&self, family: Arc<dyn Forget>) {
        if let Some(inner) = &self.inner {
            lock(&inner.families).push(family);
        }
    }
}

/// A metric family whose series each name a tenant, removed with their tenant by [`TenantMetrics`]. Register
/// [`TenantFamily::family`] on the registry; update it through [`TenantFamily::with`] only, so the family
/// knows which series it holds.
#[derive(Debug, Clone)]
pub struct TenantFamily<S: TenantLabelSet, M> {
    shared: Arc<Shared<S, M>>,
    tenants: TenantMetrics,
}

#[derive(Debug)]
struct Shared<S, M> {
    family: Family<S, M>,
    /// Tenant -> the label sets created for it. Empty (and unused) when nothing is ever removed.
    sets: Mutex<HashMap<String, HashSet<S>>>,
}

impl<S, M> TenantFamily<S, M>
where
    S: TenantLabelSet,
    M: Default + Debug + Send + Sync + 'static,
{
    /// Wraps `family` (already registered, or to be registered through [`TenantFamily::family`]) so that
    /// `tenants` removes a tenant's series when it goes idle.
    pub fn new(tenants: &TenantMetrics, family: Family<S, M>) -> Self {
        let shared = Arc::new(Shared {
            family,
            sets: Mutex::new(HashMap::new()),
        });
        tenants.register(Arc::clone(&shared) as Arc<dyn Forget>);
        Self {
            shared,
            tenants: tenants.clone(),
        }
    }

    /// The family itself, to register (a clone shares the series).
    pub fn family(&self) -> &Family<S, M> {
        &self.shared.family
    }

    /// Applies `f` to the series of `labels` (created if needed), and notes its tenant active.
    pub fn with(&self, labels: &S, f: impl FnOnce(&M)) {
        if self.tenants.inner.is_none() {
            f(&self.shared.family.get_or_create(labels));
            return;
        }
        self.tenants.touch(labels.tenant());
        let mut sets = lock(&self.shared.sets);
        let known = sets.get(labels.tenant()).is_some_and(|s| s.contains(labels));
        if !known {
            sets.entry(labels.tenant().to_owned())
                .or_default()
                .insert(labels.clone());
        }
        // Under the lock: a sweep removing this tenant waits for the update, or the update waits for it.
        f(&self.shared.family.get_or_create(labels));
    }
}

impl<S, M> Forget for Shared<S, M>
where
    S: TenantLabelSet,
    M: Default + Debug + Send + Sync + 'static,
{
    fn forget(&self, tenant: &str, still_idle: &dyn Fn(&str) -> bool) {
        let mut sets = lock(&self.sets);
        if !sets.contains_key(tenant) || !still_idle(tenant) {
            return;
        }
        for labels in sets.remove(tenant).unwrap_or_default() {
            self.family.remove(&labels);
        }
    }
}

#[cfg(test)]
mod tests;
