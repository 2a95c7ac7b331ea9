//! Stage 3, validate: per-series label rules and limits, and sample timestamps (DESIGN.md §2 step 3).
//!
//! An invalid series is dropped with a precise message (tenant, series, reason, the limit and its config key)
//! and counted in `heddle_discarded_samples_total`; the valid series of the same request go on. Samples too
//! far in the future are dropped from a series that is otherwise kept; so are native histogram samples, which
//! are also checked against Prometheus' rules and the tenant's bucket limit ([`histogram`]). Exemplars are checked as Mimir checks them (labels present, a timestamp, at
//! most 128 characters of labels: Prometheus' limit); an invalid one is dropped with a message and counted in
//! `heddle_distributor_discarded_exemplars_total`, and all are dropped (counted as `exemplars-disabled`) for a
//! tenant whose exemplar store is off. A series carrying only exemplars (Prometheus sends them apart from
//! samples) is kept for them.
//!
//! Labels with an empty value are treated as absent, as Mimir does (it strips them before validating) and as
//! Prometheus' own TSDB does (an empty value means "no such label"). They are ignored by every check here
//! and removed from the series before it is forwarded. The remote-write spec says senders must not send
//! them, but refusing the series would lose data a Prometheus/Mimir user expects to be kept.

use crate::error::{InvalidEntry, InvalidSeries};
use crate::log_limiter::LogLimiter;
use crate::metrics::{Metrics, REASON_EXEMPLARS_DISABLED};
use crate::outcome::Rejection;
use bumpalo::Bump;
use heddle_limits::Limits;
use heddle_model::{
    EXEMPLAR_MAX_LABEL_SET_LENGTH, ExemplarRef, LabelRef, METRIC_NAME, TenantId, exemplar_label_set_length, quoted,
    series_text,
};
use heddle_proto::TimeSeriesRef;
use std::cmp::Ordering;

/// What validation learned about a valid series' labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LabelCheck {
    /// Some labels have empty values; they must be stripped before forwarding.
    pub has_empty_values: bool,
}

/// Checks a series' labels in Mimir's order: metric name present and valid, label count, then each label's
/// name, name length, value length, and its order relative to the previous one. Which names are valid is the
/// tenant's `name_validation_scheme`; every other check is the same under both schemes.
pub(crate) fn validate_labels(labels: &[LabelRef<'_>], limits: &Limits) -> Result<LabelCheck, InvalidSeries> {
    let mut metric_name = None;
    let mut count = 0usize;
    let mut has_empty_values = false;
    for l in labels {
        if l.value.is_empty() {
            has_empty_values = true;
            continue;
        }
        count += 1;
        if metric_name.is_none() && l.name == METRIC_NAME {
            metric_name = Some(l.value);
        }
    }
    let Some(metric_name) = metric_name else {
        return Err(InvalidSeries::MissingMetricName);
    };
    let scheme = limits.name_validation_scheme;
    if !scheme.is_valid_metric_name(metric_name) {
        return Err(InvalidSeries::InvalidMetricName {
            name: quoted(metric_name),
            scheme,
        });
    }
    if count > limits.max_label_names_per_series {
        return Err(InvalidSeries::TooManyLabels {
            count,
            limit: limits.max_label_names_per_series,
        });
    }
    let mut prev: Option<&str> = None;
    for l in labels.iter().filter(|l| !l.value.is_empty()) {
        if !scheme.is_valid_label_name(l.name) {
            return Err(InvalidSeries::InvalidLabelName {
                name: quoted(l.name),
                scheme,
            });
        }
        if l.name.len() > limits.max_label_name_length {
            return Err(InvalidSeries::LabelNameTooLong {
                name: quoted(l.name),
                len: l.name.len(),
                limit: limits.max_label_name_length,
            });
        }
        if l.value.len() > limits.max_label_value_length {
            return Err(InvalidSeries::LabelValueTooLong {
                name: quoted(l.name),
                len: l.value.len(),
                limit: limits.max_label_value_length,
            });
        }
        if let Some(p) = prev {
            match p.cmp(l.name) {
                Ordering::Less => {}
                Ordering::Equal => return Err(InvalidSeries::DuplicateLabelNames { name: quoted(l.name) }),
                Ordering::Greater => {
                    return Err(InvalidSeries::LabelsNotSorted {
                        prev: quoted(p),
                        next: quoted(l.name),
                    });
                }
            }
        }
        prev = Some(l.name);
    }
    Ok(LabelCheck { has_empty_values })
}

/// The timestamps a request's samples may have: `[min_ms, max_ms]`, from now - past grace period (or
/// `i64::MIN` when that check is off) to now + creation grace period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimeWindow {
    pub(crate) min_ms: i64,
    pub(crate) max_ms: i64,
}

impl Default for TimeWindow {
    /// Every timestamp.
    fn default() -> Self {
        TimeWindow {
            min_ms: i64::MIN,
            max_ms: i64::MAX,
        }
    }
}

impl TimeWindow {
    /// The window of `limits` at `now_ms`.
    pub(crate) fn of(limits: &Limits, now_ms: i64) -> Self {
        let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        TimeWindow {
            min_ms: match ms(limits.past_grace_period) {
                0 => i64::MIN,
                past => now_ms.saturating_sub(past),
            },
            max_ms: now_ms.saturating_add(ms(limits.creation_grace_period)),
        }
    }

    pub(crate) fn contains(&self, t: i64) -> bool {
        (self.min_ms..=self.max_ms).contains(&t)
    }
}

/// The samples (float or histogram) whose timestamp, of `timestamps`, is outside `window`, as errors (too far
/// in the future, too far in the past): none, one or both.
pub(crate) fn check_timestamps(
    timestamps: impl Iterator<Item = i64> + Clone,
    window: TimeWindow,
) -> Vec<InvalidSeries> {
    let mut errors = Vec::new();
    let mut future = timestamps.clone().filter(|t| *t > window.max_ms);
    if let Some(first) = future.next() {
        errors.push(InvalidSeries::TooFarInFuture {
            count: 1 + future.count(),
            timestamp_ms: first,
            max_ms: window.max_ms,
        });
    }
    let mut past = timestamps.filter(|t| *t < window.min_ms);
    if let Some(first) = past.next() {
        errors.push(InvalidSeries::TooFarInPast {
            count: 1 + past.count(),
            timestamp_ms: first,
            min_ms: window.min_ms,
        });
    }
    errors
}

/// A series that passed validation, before sharding.
#[derive(Debug)]
pub(crate) struct Accepted<'a> {
    /// The decoded series.
    pub(crate) series: &'a TimeSeriesRef<'a>,
    /// Its labels, without the HA replica label (empty-valued ones are still there).
    pub(crate) labels: &'a [LabelRef<'a>],
    /// Samples to forward: those inside the time window.
    pub(crate) samples: u64,
    /// Native histogram samples to forward: those inside the time window that passed validation, in order.
    pub(crate) histograms: Vec<KeptHistogram<'a>>,
    /// Exemplars to forward: the valid ones.
    pub(crate) exemplars: &'a [ExemplarRef<'a>],
    /// The created timestamp to forward: the series' own when the tenant keeps them for this protocol and it
    /// is inside the accepted time window (a zero sample outside it would be refused, so it is dropped
    /// here without an error, as Prometheus ignores a created timestamp it cannot store).
    pub(crate) created: Option<i64>,
    /// It loses something on the way (an empty-valued or the replica label, samples outside the time window,
    /// invalid exemplars or histograms, histograms made to fit the bucket limit, a created timestamp not kept),
    /// so it is re-encoded instead of forwarded
    /// as the raw bytes it arrived as.
    pub(crate) rewrite: bool,
}

/// What validation kept of a request, and what it refused.
#[derive(Debug, Default)]
pub(crate) struct Validated<'a> {
    /// The series to forward, in request order.
    pub(crate) accepted: Vec<Accepted<'a>>,
    /// Their samples, float and histogram.
    pub(crate) samples: u64,
    /// Their exemplars.
    pub(crate) exemplars: u64,
    /// Series (or some of their samples) refused, in request order.
    pub(crate) rejections: Vec<Rejection>,
    /// The sample timestamps accepted (now - past grace period to now + creation grace period).
    pub(crate) window: TimeWindow,
}

/// Where validation reports a refusal: the discard metrics and the rate-limited warning log.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Discards<'d> {
    pub(crate) tenant: &'d TenantId,
    pub(crate) metrics: &'d Metrics,
    pub(crate) warn: &'d LogLimiter,
}

impl Discards<'_> {
    /// Records a validation failure of `samples` samples: message, discard metric, rate-limited warning.
    fn reject(&self, labels: &[LabelRef<'_>], e: InvalidSeries, samples: usize, out: &mut Vec<Rejection>) {
        let (tenant, id) = (self.tenant, e.id());
        let series = series_text(labels);
        self.metrics.discarded.add(tenant.as_str(), id, samples as u64);
        if let Some(suppressed) = self.warn.check(tokio::time::Instant::now()) {
            tracing::warn!(reason = id, %series, samples, suppressed, error = %e, "discarded invalid series");
        }
        out.push(Rejection {
            reason: id.to_owned(),
            message: format!("{id}: {e} (tenant={tenant}, series={series}): {}", e.remedy()),
        });
    }

    /// Records an invalid exemplar of the series `labels`.
    fn reject_exemplar(&self, labels: &[LabelRef<'_>], e: InvalidEntry, out: &mut Vec<Rejection>) {
        let (tenant, id) = (self.tenant, e.id());
        let series = series_text(labels);
        self.metrics.discarded_exemplars(tenant.as_str(), id, 1);
        if let Some(suppressed) = self.warn.check(tokio::time::Instant::now()) {
            tracing::warn!(reason = id, %series, suppressed, error = %e, "discarded invalid exemplar");
        }
        out.push(Rejection {
            reason: id.to_owned(),
            message: format!("{id}: {e} (tenant={tenant}, series={series}): {}", e.remedy()),
        });
    }
}

/// Checks an exemplar in Mimir's order: labels present, a timestamp, then the length of its labels as
/// Prometheus counts it.
pub(crate) fn validate_exemplar(e: &ExemplarRef<'_>) -> Result<(), InvalidEntry> {
    if e.labels.is_empty() {
        return Err(InvalidEntry::ExemplarLabelsMissing { timestamp_ms: e.t });
    }
    if e.t == 0 {
        return Err(InvalidEntry::ExemplarTimestampInvalid);
    }
    let len = exemplar_label_set_length(e.labels);
    if len > EXEMPLAR_MAX_LABEL_SET_LENGTH {
        return Err(InvalidEntry::ExemplarLabelsTooLong { len, timestamp_ms: e.t });
    }
    Ok(())
}

/// The valid exemplars of a series (`exemplars` itself when all are), the invalid ones reported.
fn valid_exemplars<'a>(
    arena: &'a Bump,
    labels: &[LabelRef<'_>],
    exemplars: &'a [ExemplarRef<'a>],
    discards: Discards<'_>,
    rejections: &mut Vec<Rejection>,
) -> &'a [ExemplarRef<'a>] {
    let Some(first_bad) = exemplars.iter().position(|e| validate_exemplar(e).is_err()) else {
        return exemplars;
    };
    let mut kept = bumpalo::collections::Vec::with_capacity_in(exemplars.len(), arena);
    kept.extend_from_slice(&exemplars[..first_bad]);
    for e in &exemplars[first_bad..] {
        match validate_exemplar(e) {
            Ok(()) => kept.push(*e),
            Err(err) => discards.reject_exemplar(labels, err, rejections),
        }
    }
    kept.into_bump_slice()
}

/// Validates every series of a request against the tenant's `limits` at `now_ms` (wall clock), without
/// the label `drop_label` (the HA replica label, when the request was accepted from an elected replica);
/// series' created timestamps are forwarded only when `keep_created`.
pub(crate) fn validate<'a>(
    arena: &'a Bump,
    limits: &Limits,
    series: &'a [TimeSeriesRef<'a>],
    drop_label: Option<&str>,
    keep_created: bool,
    now_ms: i64,
    discards: Discards<'_>,
) -> Validated<'a> {
    let mut out = Validated {
        accepted: Vec::with_capacity(series.len()),
        window: TimeWindow::of(limits, now_ms),
        ..Validated::default()
    };
    let mut disabled_exemplars = 0u64;
    let store_exemplars = limits.max_global_exemplars_per_user > 0;
    for ts in series {
        let (labels, dropped) = without_label(arena, ts.labels, drop_label);
        let check = match validate_labels(labels, limits) {
            Ok(check) => check,
            Err(e) => {
                discards.reject(labels, e, ts.samples.len() + ts.histograms.len(), &mut out.rejections);
                continue;
            }
        };
        let mut outside = 0;
        let timestamps = ts.samples.iter().map(|s| s.t).chain(ts.histograms.iter().map(|h| h.t));
        for e in check_timestamps(timestamps, out.window) {
            let count = match e {
                InvalidSeries::TooFarInFuture { count, .. } | InvalidSeries::TooFarInPast { count, .. } => count,
                _ => 0,
            };
            outside += count;
            discards.reject(labels, e, count, &mut out.rejections);
        }
        let histograms: Vec<KeptHistogram<'a>> = ts
            .histograms
            .iter()
            .filter(|h| out.window.contains(h.t))
            .filter_map(|h| {
                check_histogram(h, limits)
                    .map_err(|e| discards.reject(labels, e, 1, &mut out.rejections))
                    .ok()
            })
            .collect();
        let samples = ts.samples.iter().filter(|s| out.window.contains(s.t)).count();
        let exemplars = if store_exemplars {
            valid_exemplars(arena, labels, ts.exemplars, discards, &mut out.rejections)
        } else {
            disabled_exemplars += ts.exemplars.len() as u64;
            &[]
        };
        if samples == 0 && histograms.is_empty() && exemplars.is_empty() {
            continue;
        }
        let created = (keep_created && ts.created != 0 && out.window.contains(ts.created)).then_some(ts.created);
        // A remote write 2.0 series has no 1.0 bytes to forward as they are (its `raw` is empty).
        let rewrite = check.has_empty_values
            || (ts.created != 0 && created.is_none())
            || dropped
            || outside > 0
            || exemplars.len() != ts.exemplars.len()
            || histograms.len() != ts.histograms.len()
            || histograms.iter().any(|h| h.raw.is_none())
            || ts.raw.is_empty();
        let total = (samples + histograms.len()) as u64;
        out.accepted.push(Accepted {
            series: ts,
            labels,
            samples: samples as u64,
            histograms,
            exemplars,
            created,
            rewrite,
        });
        out.samples += total;
        out.exemplars += exemplars.len() as u64;
    }
    let tenant = discards.tenant.as_str();
    discards
        .metrics
        .discarded_exemplars(tenant, REASON_EXEMPLARS_DISABLED, disabled_exemplars);
    out
}

/// `labels` without the label named `name` (a copy in the arena), and whether it was there.
fn without_label<'a>(arena: &'a Bump, labels: &'a [LabelRef<'a>], name: Option<&str>) -> (&'a [LabelRef<'a>], bool) {
    match name {
        Some(name) if labels.iter().any(|l| l.name == name) => (
            {
                let mut kept = bumpalo::collections::Vec::with_capacity_in(labels.len(), arena);
                kept.extend(labels.iter().filter(|l| l.name != name).copied());
                kept.into_bump_slice()
            },
            true,
        ),
        _ => (labels, false),
    }
}

mod histogram;

pub(crate) use histogram::{KeptHistogram, check_histogram};

#[cfg(test)]
mod tests;
