//! The series lifecycle hook: asked only for new series, refusing one series or a whole batch, told about
//! loaded, created and truncated series by metric name; and the appendable window that bounds appends.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use heddle_model::{LabelRef, Sample};

use super::*;

fn lbls<'a>(pairs: &[(&'a str, &'a str)]) -> Vec<LabelRef<'a>> {
    pairs.iter().map(|&(name, value)| LabelRef { name, value }).collect()
}

/// Admits `per_metric` series per metric name; refuses the whole batch once the head holds `batch_at`.
#[derive(Debug, Default)]
struct Counting {
    per_metric: u64,
    batch_at: u64,
    counts: Mutex<HashMap<String, u64>>,
    asked: Mutex<Vec<String>>,
}

impl SeriesLifecycle for Counting {
    fn pre_creation(&self, labels: &[LabelRef<'_>], head_series: u64) -> Result<(), SeriesRefusal> {
        let name = labels.iter().find(|l| l.name == "__name__").map_or("", |l| l.value);
        self.asked
            .lock()
            .unwrap()
            .push(labels.iter().map(|l| l.value).collect::<Vec<_>>().join(","));
        if self.batch_at > 0 && head_series >= self.batch_at {
            return Err(SeriesRefusal::batch("err-test-batch", "the process is full".into()));
        }
        let have = self.counts.lock().unwrap().get(name).copied().unwrap_or(0);
        if self.per_metric > 0 && have >= self.per_metric {
            return Err(SeriesRefusal::series(
                "err-test-metric",
                format!("too many series named {name}"),
            ));
        }
        Ok(())
    }

    fn post_creation(&self, metric_name: &str, series: u64) {
        *self.counts.lock().unwrap().entry(metric_name.to_owned()).or_default() += series;
    }

    fn post_deletion(&self, metric_name: &str, series: u64) {
        let mut counts = self.counts.lock().unwrap();
        let n = counts.entry(metric_name.to_owned()).or_default();
        *n -= series;
        if *n == 0 {
            counts.remove(metric_name);
        }
    }
}

impl Counting {
    fn counts(&self) -> Vec<(String, u64)> {
        let mut v: Vec<_> = self
            .counts
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        v.sort();
        v
    }
}

fn open(dir: &Path) -> Head {
    Head::open(dir, HeadOptions::default()).unwrap().0
}

/// One batch of `(metric, id)` series, each with the samples `ts`.
fn append(head: &Head, series: &[(&str, &str)], ts: &[i64]) -> Result<AppendOutcome, TsdbError> {
    let labels: Vec<Vec<LabelRef<'_>>> = series
        .iter()
        .map(|&(name, id)| lbls(&[("__name__", name), ("empty", ""), ("id", id)]))
        .collect();
    let samples: Vec<Sample> = ts.iter().map(|&t| Sample::new(t, 1.0)).collect();
    let batch: Vec<AppendSeries<'_>> = labels
        .iter()
        .map(|l| AppendSeries {
            labels: l,
            samples: &samples,
            created: None,
            histograms: &[],
        })
        .collect();
    head.append(&batch)
}

#[test]
fn refused_series_are_reported_and_the_rest_appended() {
    let dir = tempfile::tempdir().unwrap();
    let head = open(dir.path());
    let hook = Arc::new(Counting {
        per_metric: 1,
        ..Counting::default()
    });
    head.set_series_lifecycle(hook.clone());
    let out = append(&head, &[("a", "1"), ("a", "2"), ("b", "1")], &[10, 20]).unwrap();
    assert_eq!((out.series_created, out.samples_appended), (2, 4));
    assert_eq!(out.errors.len(), 1, "{:?}", out.errors);
    let e = &out.errors[0];
    assert_eq!((e.index, e.samples_rejected, e.first_rejected_t), (1, 2, 10));
    assert_eq!(e.reason, AppendErrorKind::Refused("err-test-metric"));
    assert_eq!(e.reason.id(), "err-test-metric");
    assert_eq!(e.to_string(), "too many series named a");
    assert_eq!(hook.counts(), vec![("a".into(), 1), ("b".into(), 1)]);
    assert_eq!(
        hook.asked.lock().unwrap().as_slice(),
        ["a,1", "a,2", "b,1"],
        "asked with the labels the head keeps (no empty values)"
    );

    // Existing series are not asked about again.
    let out = append(&head, &[("a", "1"), ("b", "1")], &[30]).unwrap();
    assert!(out.errors.is_empty());
    assert_eq!(hook.asked.lock().unwrap().len(), 3);
}

#[test]
fn a_batch_refusal_stores_nothing_and_removes_what_the_batch_created() {
    let dir = tempfile::tempdir().unwrap();
    let head = open(dir.path());
    let hook = Arc::new(Counting {
        batch_at: 2,
        ..Counting::default()
    });
    head.set_series_lifecycle(hook.clone());
    append(&head, &[("a", "1")], &[10]).unwrap();
    let err = append(&head, &[("a", "1"), ("b", "1"), ("c", "1")], &[20]).unwrap_err();
    assert!(
        matches!(
            &err,
            TsdbError::BatchRefused {
                id: "err-test-batch",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.is_retryable());
    assert_eq!(err.to_string(), "the process is full");
    assert_eq!(head.stats().series, 1, "b was created, then removed again");
    assert_eq!(head.stats().samples_appended, 1, "a's sample at 20 was not stored");
    assert_eq!(hook.counts(), vec![("a".into(), 1)]);
    drop(head);
    let head = open(dir.path());
    assert_eq!(head.stats().series, 1, "nothing of the refused batch is in the WAL");
}

#[test]
fn loaded_series_are_counted_never_refused_and_truncation_uncounts() {
    let dir = tempfile::tempdir().unwrap();
    {
        let head = open(dir.path());
        append(&head, &[("a", "1"), ("a", "2"), ("b", "1")], &[10]).unwrap();
        append(&head, &[("b", "2")], &[5000]).unwrap();
        head.close().unwrap();
    }
    let head = open(dir.path());
    let hook = Arc::new(Counting {
        per_metric: 1,
        ..Counting::default()
    });
    head.set_series_lifecycle(hook.clone());
    assert_eq!(
        hook.counts(),
        vec![("a".into(), 2), ("b".into(), 2)],
        "replayed series are counted at install, over the limit or not"
    );
    assert!(hook.asked.lock().unwrap().is_empty(), "and never asked about");
    let out = append(&head, &[("c", "1"), ("a", "3")], &[6000]).unwrap();
    assert_eq!(out.errors.len(), 1);
    assert_eq!(out.errors[0].reason, AppendErrorKind::Refused("err-test-metric"));

    let stats = head.truncate(1000).unwrap();
    assert_eq!(stats.series_removed, 3);
    assert_eq!(hook.counts(), vec![("b".into(), 1), ("c".into(), 1)]);
    let out = append(&head, &[("a", "3")], &[6001]).unwrap();
    assert!(out.errors.is_empty(), "a's slot was freed: {:?}", out.errors);
}

#[test]
fn the_appendable_window_is_half_a_chunk_range_behind_the_newest_sample() {
    let dir = tempfile::tempdir().unwrap();
    let head = open(dir.path());
    const HOUR: i64 = 3_600_000;
    let t0 = 10 * HOUR;
    assert_eq!(head.appendable_min_time(), i64::MIN, "an empty head accepts any time");
    append(&head, &[("a", "1")], &[t0]).unwrap();
    assert_eq!(head.appendable_min_time(), t0 - HOUR);
    let out = append(&head, &[("a", "2"), ("a", "3")], &[t0 - HOUR - 1]).unwrap();
    assert_eq!(out.errors.len(), 2);
    let e = &out.errors[0];
    assert_eq!(e.reason, AppendErrorKind::OutOfBounds);
    assert_eq!((e.first_rejected_t, e.last_accepted_t), (t0 - HOUR - 1, t0 - HOUR));
    let text = e.to_string();
    assert!(
        text.starts_with("err-heddle-sample-out-of-bounds: 1 sample(s)"),
        "{text}"
    );
    assert!(text.contains(&format!("{}", t0 - HOUR)), "{text}");
    assert_eq!(
        head.stats().series,
        1,
        "series whose samples are all out of bounds are not created"
    );
    let out = append(&head, &[("a", "2")], &[t0 - 2 * HOUR, t0 - HOUR]).unwrap();
    assert_eq!(out.samples_appended, 1, "the window's first millisecond is in");
    assert_eq!(out.errors[0].samples_rejected, 1);
    head.raise_min_valid_time(t0 + 1);
    assert_eq!(
        head.appendable_min_time(),
        t0 + 1,
        "a block's end is later than the window"
    );
}
