//! A tenant's metric metadata on this ingester: per metric family, the distinct (type, help, unit) entries
//! pushed, each with when it was last pushed.
//!
//! As in Mimir, metadata lives in memory only (neither WAL nor snapshot holds it): senders repeat it (Prometheus
//! sends all of it every minute by default), so a restarted ingester knows it again within one send, and an
//! entry not pushed for `ingester.metadata_retain_period` is dropped ([`TenantMetadata::purge`]). The store
//! is bounded by the tenant's local share of `limits.max_global_metadata_per_user` (families) and
//! `limits.max_global_metadata_per_metric` (entries per family); an entry past either is refused with a
//! message the distributor passes on to the sender, and counted.

use crate::limits::EntryLimits;
use heddle_model::error_id;
use heddle_model::{MetadataRef, MetricMetadata, MetricType, TenantId, quoted};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// One distinct entry of a family, and the wall time (ms) of the last push that carried it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    kind: MetricType,
    help: String,
    unit: String,
    last_seen_ms: i64,
}

/// The metadata entries the store refused for one reason in one push: the error id, the message of the first
/// (for the sender: one message per reason keeps a hostile push's answer small) and how many.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    pub(crate) reason: &'static str,
    pub(crate) message: String,
    pub(crate) count: u64,
}

/// What one [`TenantMetadata::add`] did.
#[derive(Debug, Default)]
pub(crate) struct Added {
    /// Entries stored that were not there before.
    pub(crate) created: usize,
    /// At most one per reason.
    pub(crate) refused: Vec<Refused>,
}

impl Added {
    fn refuse(&mut self, reason: &'static str, message: impl FnOnce() -> String) {
        match self.refused.iter_mut().find(|r| r.reason == reason) {
            Some(r) => r.count += 1,
            None => self.refused.push(Refused {
                reason,
                message: message(),
                count: 1,
            }),
        }
    }
}

/// A tenant's metadata; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct TenantMetadata {
    /// Families in name order, so reads answer in Prometheus' sorted order and a `limit` takes the first.
    families: Mutex<BTreeMap<String, Vec<Entry>>>,
}

/// What a read asks for: Prometheus' `limit` (families), `limit_per_metric` and `metric` parameters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MetadataQuery<'q> {
    /// Most families; `None`: all.
    pub(crate) limit: Option<usize>,
    /// Most entries per family; `None`: all.
    pub(crate) limit_per_metric: Option<usize>,
    /// Only this family.
    pub(crate) metric: Option<&'q str>,
}

impl TenantMetadata {
    fn families(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<Entry>>> {
        self.families.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stores `entries` pushed at `now_ms` for `tenant` under `limits`: a known entry is refreshed, a new one
    /// added unless its family is new and the tenant has its most families, or its family has its most
    /// entries.
    pub(crate) fn add(
        &self,
        tenant: &TenantId,
        entries: &[MetadataRef<'_>],
        limits: EntryLimits,
        now_ms: i64,
    ) -> Added {
        let mut out = Added::default();
        let mut families = self.families();
        for m in entries {
            let family_count = families.len();
            let Some(family) = families.get_mut(m.family) else {
                let limit = limits.max_metadata_per_user;
                if limit > 0 && family_count >= limit {
                    out.refuse(error_id::MAX_METADATA_PER_USER, || {
                        per_user_message(tenant, m.family, limit)
                    });
                    continue;
                }
                families.insert(m.family.to_owned(), vec![entry(m, now_ms)]);
                out.created += 1;
                continue;
            };
            if let Some(e) = family
                .iter_mut()
                .find(|e| e.kind == m.kind && e.help == m.help && e.unit == m.unit)
            {
                e.last_seen_ms = e.last_seen_ms.max(now_ms);
                continue;
            }
            let limit = limits.max_metadata_per_metric;
            if limit > 0 && family.len() >= limit {
                out.refuse(error_id::MAX_METADATA_PER_METRIC, || {
                    per_metric_message(tenant, m.family, limit)
                });
                continue;
            }
            family.push(entry(m, now_ms));
            out.created += 1;
        }
        out
    }

    /// Drops the entries last pushed before `before_ms` (and families left empty); returns how many.
    pub(crate) fn purge(&self, before_ms: i64) -> usize {
        let mut dropped = 0;
        self.families().retain(|_, entries| {
            let had = entries.len();
            entries.retain(|e| e.last_seen_ms >= before_ms);
            dropped += had - entries.len();
            !entries.is_empty()
        });
        dropped
    }

    /// Entries held, all families together.
    pub(crate) fn len(&self) -> usize {
        self.families().values().map(Vec::len).sum()
    }

    /// The entries `query` asks for: families in name order, each family's entries in the order they were
    /// first pushed.
    pub(crate) fn query(&self, query: MetadataQuery<'_>) -> Vec<MetricMetadata> {
        let families = self.families();
        let selected: Box<dyn Iterator<Item = (&String, &Vec<Entry>)>> = match query.metric {
            Some(name) => Box::new(families.get_key_value(name).into_iter()),
            None => Box::new(families.iter()),
        };
        selected
            .take(query.limit.unwrap_or(usize::MAX))
            .flat_map(|(family, entries)| {
                entries
                    .iter()
                    .take(query.limit_per_metric.unwrap_or(usize::MAX))
                    .map(|e| MetricMetadata {
                        family: family.clone(),
                        kind: e.kind,
                        help: e.help.clone(),
                        unit: e.unit.clone(),
                    })
            })
            .collect()
    }
}

fn entry(m: &MetadataRef<'_>, now_ms: i64) -> Entry {
    Entry {
        kind: m.kind,
        help: m.help.to_owned(),
        unit: m.unit.to_owned(),
        last_seen_ms: now_ms,
    }
}

fn per_user_message(tenant: &TenantId, family: &str, limit: usize) -> String {
    let id = error_id::MAX_METADATA_PER_USER;
    format!(
        "{id}: per-tenant metadata limit of {limit} metric families reached (tenant={tenant}, metric={:?}): the \
         metadata was not kept; reduce the tenant's metric families or raise \
         `limits.max_global_metadata_per_user` (--ingester.max-global-metadata-per-user)",
        quoted(family)
    )
}

fn per_metric_message(tenant: &TenantId, family: &str, limit: usize) -> String {
    let id = error_id::MAX_METADATA_PER_METRIC;
    format!(
        "{id}: per-metric metadata limit of {limit} entries reached (tenant={tenant}, metric={:?}): the metadata \
         was not kept; make the family's type, help and unit agree across targets or raise \
         `limits.max_global_metadata_per_metric` (--ingester.max-global-metadata-per-metric)",
        quoted(family)
    )
}

#[cfg(test)]
mod tests;
