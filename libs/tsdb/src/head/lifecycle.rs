//! The series lifecycle hook: who may create a series, and who is told when series come and go (Prometheus'
//! `SeriesLifecycleCallback`, which Mimir's ingester uses to enforce series limits).
//!
//! The head consults the hook only when an append would create a series, so a push of existing series costs
//! the limiter nothing. Series the head loads at open (WAL replay, chunk snapshot) are never refused: they
//! were accepted once, and refusing them now would lose acknowledged samples. They are reported in one call
//! per metric name when the hook is installed ([`Head::set_series_lifecycle`]).
//!
//! Creation and deletion are reported per metric name with a count rather than per series with its labels:
//! what a limiter keeps is a count per metric name, and loading or truncating a million series then costs a
//! walk over the names, not a call per series.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use heddle_model::{LabelRef, METRIC_NAME};

use super::index::HeadIndex;
use super::{Head, lock, read};

/// Told about a head's series: asked before an append creates one, told after series were created or
/// removed. Called under the head's appender lock, so calls for one head never overlap; keep them cheap.
pub trait SeriesLifecycle: Send + Sync + fmt::Debug + 'static {
    /// Whether an append may create the series with `labels` (sorted, empty values left out). `head_series`
    /// is the head's series count now, the series this batch created so far included.
    fn pre_creation(&self, labels: &[LabelRef<'_>], head_series: u64) -> Result<(), SeriesRefusal>;

    /// `series` series named `metric_name` (`""` for series without one) were created by an append, or
    /// were in the head when the hook was installed.
    fn post_creation(&self, metric_name: &str, series: u64);

    /// `series` series named `metric_name` were removed: by truncation, or because the batch that created
    /// them was refused whole.
    fn post_deletion(&self, metric_name: &str, series: u64);
}

/// Why a [`SeriesLifecycle`] refused to create a series.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesRefusal {
    /// Stable error id (`err-heddle-...`), the `reason` of the append error.
    pub id: &'static str,
    /// The whole message, for the sender.
    pub message: String,
    /// What the refusal covers.
    pub scope: RefusalScope,
}

/// What a [`SeriesRefusal`] refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalScope {
    /// This series only: its samples are reported as [`super::AppendErrorKind::Refused`], the rest of the batch
    /// is appended (a tenant's series limit).
    Series,
    /// The whole batch: nothing of it is stored, the series it created are removed again, and
    /// [`crate::TsdbError::BatchRefused`] is returned (a limit of the whole process, which the sender should
    /// retry later).
    Batch,
}

impl SeriesRefusal {
    /// Refuses one series.
    pub fn series(id: &'static str, message: String) -> Self {
        Self {
            id,
            message,
            scope: RefusalScope::Series,
        }
    }

    /// Refuses the whole batch.
    pub fn batch(id: &'static str, message: String) -> Self {
        Self {
            id,
            message,
            scope: RefusalScope::Batch,
        }
    }
}

/// The metric name of a label set, `""` without one.
pub(crate) fn metric_name<'a>(labels: &[LabelRef<'a>]) -> &'a str {
    labels.iter().find(|l| l.name == METRIC_NAME).map_or("", |l| l.value)
}

/// Series per metric name among `refs` (all series when `None`), for the hook's post calls.
pub(crate) fn count_by_metric(index: &HeadIndex, refs: Option<&[u64]>) -> HashMap<String, u64> {
    let mut counts: HashMap<String, u64> = HashMap::new();
    let name_id = index.symbols.id(METRIC_NAME);
    match refs {
        None => {
            let mut named = 0;
            if let Some(n) = name_id {
                for (v, list) in index.postings.values(n) {
                    let len = list.len();
                    if len > 0 {
                        named += len;
                        *counts.entry(index.symbols.resolve(v).to_owned()).or_default() += len;
                    }
                }
            }
            let unnamed = (index.len() as u64).saturating_sub(named);
            if unnamed > 0 {
                *counts.entry(String::new()).or_default() += unnamed;
            }
        }
        Some(refs) => {
            for &r in refs {
                let Some(s) = index.get(r) else { continue };
                let name = match name_id.and_then(|n| s.value_of(n)) {
                    Some(v) => index.symbols.resolve(v),
                    None => "",
                };
                *counts.entry(name.to_owned()).or_default() += 1;
            }
        }
    }
    counts
}

impl Head {
    /// Installs the hook consulted before appends create series. Reports the series the head already holds
    /// (replayed or loaded from a snapshot) through [`SeriesLifecycle::post_creation`] first, under the
    /// appender lock, so no series is counted twice or missed. Replaces an earlier hook (which is told nothing).
    pub fn set_series_lifecycle(&self, hook: Arc<dyn SeriesLifecycle>) {
        let mut app = lock(&self.appender);
        {
            let index = read(&self.index);
            for (name, n) in count_by_metric(&index, None) {
                hook.post_creation(&name, n);
            }
            debug_assert_eq!(index.len() as u64, self.num_series.load(Ordering::Relaxed));
        }
        app.lifecycle = Some(hook);
    }
}
