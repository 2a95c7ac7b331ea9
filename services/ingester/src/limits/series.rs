//! Per-tenant series accounting for `max_global_series_per_user` and `max_global_series_per_metric`.
//!
//! The ingester decides whether a push creates a series before handing the batch to the head, so it keeps
//! the set of the tenant's series as 64-bit label hashes (8 bytes a series, not the labels) and a count per
//! metric name. The set is seeded from the head the first time the tenant pushes after start-up. A hash
//! collision would let one new series pass as existing (probability about n²/2⁶⁵: 6·10⁻¹⁰ at 150,000
//! series); the limit can then be exceeded by that series, never wrongly enforced.
//!
//! The tenant's total comes from the head itself ([`heddle_tsdb::HeadStats::series`]), so it stays exact.
//! Series are only created through this accounting, so the head holding fewer series than the set means
//! head truncation dropped some: the set is then rebuilt from the head ([`TenantSeries::seed`]).

use heddle_model::{LabelRef, Labels, METRIC_NAME, MatchType, Matcher};
use heddle_tsdb::Head;
use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};

/// What the limits say about one series of a push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SeriesAdmission {
    /// The series exists (or is created earlier in the same push).
    Existing,
    /// A new series within the limits; it has been counted.
    New,
    /// Creating it would exceed the tenant's series limit (the local value).
    OverUserLimit { limit: usize },
    /// Creating it would exceed the limit for its metric name (the local value).
    OverMetricLimit { limit: usize },
}

/// The series of one tenant, for limit checks. Callers hold the tenant's lock around seed, admit and append.
#[derive(Debug, Default)]
pub(crate) struct TenantSeries {
    known: Option<HashSet<u64>>,
    per_metric: HashMap<String, usize>,
}

/// Hash of the labels with a non-empty value (the head ignores empty ones too).
pub(crate) fn series_hash<'a>(labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> u64 {
    let mut h = DefaultHasher::new();
    for (n, v) in labels {
        if v.is_empty() {
            continue;
        }
        n.hash(&mut h);
        v.hash(&mut h);
    }
    h.finish()
}

fn metric_name<'a>(labels: &[LabelRef<'a>]) -> &'a str {
    labels.iter().find(|l| l.name == METRIC_NAME).map_or("", |l| l.value)
}

impl TenantSeries {
    /// Loads the head's series: the first time, and again whenever the head holds fewer series than the set
    /// (truncation dropped some).
    pub(crate) fn seed(&mut self, head: &Head) {
        if let Some(known) = &self.known {
            if head.stats().series >= known.len() as u64 {
                return;
            }
            self.per_metric.clear();
        }
        let all: Vec<Labels> = match Matcher::new(MatchType::RegexMatch, METRIC_NAME, ".+") {
            Ok(m) => head.series(i64::MIN, i64::MAX, &[m]),
            Err(_) => Vec::new(),
        };
        let mut known = HashSet::with_capacity(all.len());
        for labels in &all {
            known.insert(series_hash(labels.iter().map(|l| (l.name, l.value))));
            if let Some(name) = labels.metric_name() {
                *self.per_metric.entry(name.to_owned()).or_default() += 1;
            }
        }
        self.known = Some(known);
    }

    /// Decides whether the push may create the series with `labels`. `head_series` is the tenant's count
    /// before this push, `created` the series this push created so far (incremented on [`SeriesAdmission::New`]).
    /// `user_limit` and `metric_limit` are local limits, 0 meaning none.
    pub(crate) fn admit(
        &mut self,
        labels: &[LabelRef<'_>],
        head_series: u64,
        created: &mut u64,
        user_limit: usize,
        metric_limit: usize,
    ) -> SeriesAdmission {
        let hash = series_hash(labels.iter().map(|l| (l.name, l.value)));
        let known = self.known.get_or_insert_with(HashSet::new);
        if known.contains(&hash) {
            return SeriesAdmission::Existing;
        }
        if user_limit > 0 && head_series.saturating_add(*created) >= user_limit as u64 {
            return SeriesAdmission::OverUserLimit { limit: user_limit };
        }
        let name = metric_name(labels);
        let per_metric = self.per_metric.get(name).copied().unwrap_or(0);
        if metric_limit > 0 && per_metric >= metric_limit {
            return SeriesAdmission::OverMetricLimit { limit: metric_limit };
        }
        known.insert(hash);
        *self.per_metric.entry(name.to_owned()).or_default() += 1;
        *created += 1;
        SeriesAdmission::New
    }

    /// Undoes [`TenantSeries::admit`] for a series the head refused to create (invalid labels).
    pub(crate) fn forget(&mut self, labels: &[LabelRef<'_>]) {
        let hash = series_hash(labels.iter().map(|l| (l.name, l.value)));
        if let Some(known) = &mut self.known
            && known.remove(&hash)
            && let Some(n) = self.per_metric.get_mut(metric_name(labels))
        {
            *n = n.saturating_sub(1);
        }
    }

    /// Series counted for `metric` (tests and diagnostics).
    #[cfg(test)]
    pub(crate) fn metric_series(&self, metric: &str) -> usize {
        self.per_metric.get(metric).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l<'a>(pairs: &[(&'a str, &'a str)]) -> Vec<LabelRef<'a>> {
        pairs.iter().map(|&(name, value)| LabelRef { name, value }).collect()
    }

    #[test]
    fn user_and_metric_limits() {
        let mut t = TenantSeries::default();
        let mut created = 0;
        let a1 = l(&[("__name__", "a"), ("i", "1")]);
        let a2 = l(&[("__name__", "a"), ("i", "2")]);
        let b1 = l(&[("__name__", "b"), ("i", "1")]);
        let c1 = l(&[("__name__", "c"), ("i", "1")]);
        assert_eq!(t.admit(&a1, 0, &mut created, 3, 1), SeriesAdmission::New);
        assert_eq!(t.admit(&a1, 0, &mut created, 3, 1), SeriesAdmission::Existing);
        assert_eq!(
            t.admit(&a2, 0, &mut created, 3, 1),
            SeriesAdmission::OverMetricLimit { limit: 1 }
        );
        assert_eq!(t.admit(&b1, 0, &mut created, 3, 1), SeriesAdmission::New);
        assert_eq!(created, 2);
        assert_eq!(
            t.admit(&c1, 1, &mut created, 3, 0),
            SeriesAdmission::OverUserLimit { limit: 3 },
            "1 in the head + 2 created by this push"
        );
        t.forget(&b1);
        assert_eq!(t.metric_series("b"), 0);
        assert_eq!(t.admit(&a2, 0, &mut 0, 0, 0), SeriesAdmission::New, "0 means no limit");
    }

    #[test]
    fn empty_values_do_not_change_identity() {
        let a = series_hash([("__name__", "a"), ("x", "")]);
        let b = series_hash([("__name__", "a")]);
        assert_eq!(a, b);
        assert_ne!(
            series_hash([("a", "bc")]),
            series_hash([("ab", "c")]),
            "names and values are delimited"
        );
    }
}
