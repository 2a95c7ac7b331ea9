//! A tenant's series admission: the head's series lifecycle hook that enforces `max_global_series_per_user`,
//! `max_global_series_per_metric` (local shares) and the instance's `max_series`.
//!
//! The head asks it only when an append would create a series, under the head's appender lock, so one tenant's
//! checks never race. The tenant's series count is the head's own; the per-metric limit needs a count per metric
//! name, kept here from the head's creation and deletion reports (series loaded at open are reported when the
//! hook is installed and are never refused, as in Mimir). The same reports keep the instance-wide
//! `heddle_ingester_memory_series` gauge, which the instance limit reads.

use super::IngesterLimits;
use heddle_model::error_id;
use heddle_model::{LabelRef, METRIC_NAME, TenantId, series_text};
use heddle_tsdb::{SeriesLifecycle, SeriesRefusal};
use prometheus_client::metrics::gauge::Gauge;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub(crate) const REASON_MAX_SERIES_PER_USER: &str = error_id::MAX_SERIES_PER_USER;
pub(crate) const REASON_MAX_SERIES_PER_METRIC: &str = error_id::MAX_SERIES_PER_METRIC;
/// The id of a push refused whole because the ingester holds `max_series` series.
pub(crate) const REASON_INSTANCE_MAX_SERIES: &str = error_id::INGESTER_INSTANCE_LIMIT;

/// One tenant's series admission; installed on its head with [`heddle_tsdb::Head::set_series_lifecycle`].
#[derive(Debug)]
pub(crate) struct SeriesAdmission {
    tenant: TenantId,
    limits: Arc<IngesterLimits>,
    /// Series of every tenant on this ingester (`heddle_ingester_memory_series`).
    memory_series: Gauge,
    per_metric: Mutex<HashMap<String, u64>>,
}

impl SeriesAdmission {
    pub(crate) fn new(tenant: TenantId, limits: Arc<IngesterLimits>, memory_series: Gauge) -> Self {
        Self {
            tenant,
            limits,
            memory_series,
            per_metric: Mutex::new(HashMap::new()),
        }
    }

    fn per_metric(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.per_metric.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Series counted for `metric` (tests and diagnostics).
    #[cfg(test)]
    pub(crate) fn metric_series(&self, metric: &str) -> u64 {
        self.per_metric().get(metric).copied().unwrap_or(0)
    }
}

impl SeriesLifecycle for SeriesAdmission {
    fn pre_creation(&self, labels: &[LabelRef<'_>], head_series: u64) -> Result<(), SeriesRefusal> {
        let tenant = &self.tenant;
        let limits = self.limits.local_series_limits(tenant);
        let user_limit = limits.max_global_series_per_user;
        if user_limit > 0 && head_series >= user_limit as u64 {
            return Err(SeriesRefusal::series(
                REASON_MAX_SERIES_PER_USER,
                format!(
                    "{REASON_MAX_SERIES_PER_USER}: per-tenant series limit of {user_limit} reached (tenant={tenant}, \
                     series={}): the series was not created; reduce the tenant's cardinality or raise \
                     `limits.max_global_series_per_user` (--ingester.max-global-series-per-user)",
                    series_text(labels)
                ),
            ));
        }
        let metric_limit = limits.max_global_series_per_metric;
        if metric_limit > 0 {
            let name = labels.iter().find(|l| l.name == METRIC_NAME).map_or("", |l| l.value);
            if self.per_metric().get(name).copied().unwrap_or(0) >= metric_limit as u64 {
                return Err(SeriesRefusal::series(
                    REASON_MAX_SERIES_PER_METRIC,
                    format!(
                        "{REASON_MAX_SERIES_PER_METRIC}: per-metric series limit of {metric_limit} reached \
                         (tenant={tenant}, series={}): the series was not created; reduce the metric's cardinality \
                         or raise `limits.max_global_series_per_metric` (--ingester.max-global-series-per-metric)",
                        series_text(labels)
                    ),
                ));
            }
        }
        // Last, as before the tenant's limits: a series they refuse takes no instance slot.
        let current = self.memory_series.get().max(0) as u64;
        if let Err(e) = self.limits.instance.check_series(current, 1) {
            return Err(SeriesRefusal::batch(REASON_INSTANCE_MAX_SERIES, e.to_string()));
        }
        Ok(())
    }

    fn post_creation(&self, metric_name: &str, series: u64) {
        let mut per_metric = self.per_metric();
        match per_metric.get_mut(metric_name) {
            Some(n) => *n += series,
            None => {
                per_metric.insert(metric_name.to_owned(), series);
            }
        }
        drop(per_metric);
        self.memory_series.inc_by(series as i64);
    }

    fn post_deletion(&self, metric_name: &str, series: u64) {
        let mut per_metric = self.per_metric();
        if let Some(n) = per_metric.get_mut(metric_name) {
            *n = n.saturating_sub(series);
            if *n == 0 {
                per_metric.remove(metric_name);
            }
        }
        drop(per_metric);
        self.memory_series.dec_by(series as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::InstanceLimitsConfig;
    use heddle_limits::{Limits, Overrides};
    use prometheus_client::registry::Registry;

    fn l<'a>(pairs: &[(&'a str, &'a str)]) -> Vec<LabelRef<'a>> {
        pairs.iter().map(|&(name, value)| LabelRef { name, value }).collect()
    }

    fn admission(user: usize, metric: usize, max_series: usize) -> SeriesAdmission {
        let mut r = Registry::default();
        let limits = IngesterLimits::new(
            InstanceLimitsConfig {
                max_series,
                ..InstanceLimitsConfig::default()
            },
            &mut r,
        );
        limits.set_overrides(Arc::new(Overrides::new(Limits {
            max_global_series_per_user: user,
            max_global_series_per_metric: metric,
            ..Limits::default()
        })));
        SeriesAdmission::new(TenantId::new("t").unwrap(), Arc::new(limits), Gauge::default())
    }

    #[test]
    fn user_and_metric_limits() {
        let t = admission(3, 1, 0);
        let a1 = l(&[("__name__", "a"), ("i", "1")]);
        let a2 = l(&[("__name__", "a"), ("i", "2")]);
        let b1 = l(&[("__name__", "b"), ("i", "1")]);
        let c1 = l(&[("__name__", "c"), ("i", "1")]);
        t.pre_creation(&a1, 0).unwrap();
        t.post_creation("a", 1);
        let r = t.pre_creation(&a2, 1).unwrap_err();
        assert_eq!(r.id, REASON_MAX_SERIES_PER_METRIC);
        assert!(r.message.contains("limit of 1"), "{}", r.message);
        t.pre_creation(&b1, 1).unwrap();
        t.post_creation("b", 1);
        let r = t.pre_creation(&c1, 3).unwrap_err();
        assert_eq!(r.id, REASON_MAX_SERIES_PER_USER, "3 in the head");
        assert_eq!(r.scope, heddle_tsdb::RefusalScope::Series);
        t.post_deletion("b", 1);
        assert_eq!(t.metric_series("b"), 0);
        assert_eq!(
            t.memory_series.get(),
            1,
            "the instance gauge follows creations and deletions"
        );
        assert!(
            admission(0, 0, 0).pre_creation(&a2, 1_000_000).is_ok(),
            "0 means no limit"
        );
    }

    #[test]
    fn the_instance_limit_refuses_the_batch() {
        let t = admission(0, 0, 2);
        t.post_creation("a", 2);
        let r = t.pre_creation(&l(&[("__name__", "b")]), 2).unwrap_err();
        assert_eq!(r.scope, heddle_tsdb::RefusalScope::Batch);
        assert!(r.message.contains("max_series"), "{}", r.message);
    }
}
