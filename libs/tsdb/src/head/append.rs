//! Appending a batch of samples: resolve series, judge samples, log to the WAL, then apply to chunks.

use heddle_model::error_id;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use heddle_model::{HistogramSample, LabelRef, Sample};

use super::idhash::IdMap;
use super::index::{Created, effective, hash_labels};
use super::lifecycle::{RefusalScope, SeriesLifecycle, SeriesRefusal, count_by_metric, metric_name};
use super::series::{MemSeries, Verdict, judge};
use super::{Head, lock, read, write};
use crate::error::TsdbError;
use crate::record::{self, RefSample};
use heddle_model::HistogramValue;

use super::histograms::fingerprint;

/// The samples of one series in an append batch, borrowed from the request.
///
/// The head copies what it keeps (label strings of a new series, sample values into chunks): nothing it
/// holds can borrow from a batch, since [`Head`] has no lifetime parameter.
#[derive(Debug, Clone, Copy)]
pub struct AppendSeries<'a> {
    /// Labels sorted by name with unique names (the distributor validates them).
    pub labels: &'a [LabelRef<'a>],
    /// Samples in timestamp order.
    pub samples: &'a [Sample],
    /// When the series' counter started (its created timestamp, ms), if the sender said and the tenant keeps
    /// it: a zero sample is stored there first, as Prometheus' created-timestamp zero ingestion does, when it
    /// is older than the first sample and newer than everything the series holds, and is inside the head's
    /// bounds. Otherwise it is skipped without an error (a long-running counter repeats the same created
    /// timestamp on every push). A series with histograms only gets a zero histogram instead (a counter reset
    /// in its first histogram's schema).
    pub created: Option<i64>,
    /// Native histogram samples in timestamp order, appended after `samples` (as Prometheus' remote-write
    /// handler appends a series' floats, then its histograms).
    pub histograms: &'a [HistogramSample],
}

/// Why samples of a series were rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AppendErrorKind {
    /// A sample older than the series' newest.
    OutOfOrder,
    /// A sample at the series' newest timestamp with a different value.
    DuplicateTimestamp,
    /// A label set that is empty, unsorted or has a repeated name: the series cannot be created.
    InvalidLabels,
    /// A sample before the oldest time the head accepts: the later of its minimum valid time (a block holds
    /// that range) and half a chunk range before its newest sample (Prometheus' appendable window).
    OutOfBounds,
    /// The series lifecycle hook refused to create the series (a series limit); the id is the hook's.
    Refused(&'static str),
    /// A sample that the head, being empty, refused as older than the caller's [`AppendBounds::empty_head_min`]:
    /// it belongs in a block range that is already closed.
    TooOldForEmptyHead,
    /// A sample newer than the caller's [`AppendBounds::max`] (the clock plus a grace period).
    TooFarInFuture,
    /// A native histogram that breaks Prometheus' invariants (see [`heddle_model::Histogram::validate`]).
    InvalidHistogram,
    /// A native histogram over [`heddle_model::histogram::MAX_BUCKETS_CEILING`]: the head never holds one, so
    /// its chunk appender's state (32 bytes a bucket) stays bounded whoever calls it.
    HistogramTooLarge,
}

/// Time bounds the caller (who knows the clock) sets on an append, on top of the head's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendBounds {
    /// An empty head refuses samples before this: with nothing in it yet, the head's own window (half a block
    /// range before its newest sample) does not apply, and without this bound one ancient sample would open
    /// it at any time. A head with samples ignores it and keeps Prometheus' window.
    pub empty_head_min: i64,
    /// Samples after this are refused.
    pub max: i64,
}

impl AppendBounds {
    /// No bound beyond the head's own.
    pub const NONE: AppendBounds = AppendBounds {
        empty_head_min: i64::MIN,
        max: i64::MAX,
    };
}

impl AppendErrorKind {
    /// Stable id, used in messages and as the `reason` label of `heddle_discarded_samples_total`.
    pub fn id(self) -> &'static str {
        match self {
            AppendErrorKind::OutOfOrder => error_id::SAMPLE_OUT_OF_ORDER,
            AppendErrorKind::DuplicateTimestamp => error_id::SAMPLE_DUPLICATE_TIMESTAMP,
            AppendErrorKind::InvalidLabels => error_id::SERIES_INVALID_LABELS,
            AppendErrorKind::OutOfBounds => error_id::SAMPLE_OUT_OF_BOUNDS,
            AppendErrorKind::Refused(id) => id,
            AppendErrorKind::TooOldForEmptyHead => error_id::SAMPLE_OUT_OF_BOUNDS,
            AppendErrorKind::TooFarInFuture => error_id::TOO_FAR_IN_FUTURE,
            AppendErrorKind::InvalidHistogram => error_id::NATIVE_HISTOGRAM_INVALID,
            AppendErrorKind::HistogramTooLarge => error_id::NATIVE_HISTOGRAM_TOO_LARGE,
        }
    }
}

impl fmt::Display for AppendErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

/// The rejected samples of one series of a batch. Samples after a rejected one are still tried, so a
/// series may have both accepted and rejected samples; `reason` is that of the first rejection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesAppendError {
    /// Index of the series in the batch.
    pub index: usize,
    /// Why the first rejected sample was rejected.
    pub reason: AppendErrorKind,
    /// How many samples of the series were rejected.
    pub samples_rejected: u32,
    /// Timestamp of the first rejected sample.
    pub first_rejected_t: i64,
    /// The series' newest timestamp when that sample was rejected (`i64::MIN` if it had none); for
    /// [`AppendErrorKind::OutOfBounds`] and [`AppendErrorKind::TooOldForEmptyHead`], the oldest time the head
    /// accepted; for [`AppendErrorKind::TooFarInFuture`], the newest.
    pub last_accepted_t: i64,
    /// For [`AppendErrorKind::Refused`], the hook's message (the whole text the error displays); for
    /// [`AppendErrorKind::InvalidHistogram`], what is wrong with the first one.
    pub message: Option<String>,
}

impl fmt::Display for SeriesAppendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (id, n, ts, last) = (
            self.reason.id(),
            self.samples_rejected,
            self.first_rejected_t,
            self.last_accepted_t,
        );
        match self.reason {
            AppendErrorKind::OutOfOrder => write!(
                f,
                "{id}: {n} sample(s) older than the series' newest sample (first rejected ts={ts}, newest \
                 accepted ts={last}): send each series' samples in time order"
            ),
            AppendErrorKind::DuplicateTimestamp => write!(
                f,
                "{id}: {n} sample(s) with the timestamp of an accepted sample but another value (ts={ts}): \
                 a series has one value per timestamp"
            ),
            AppendErrorKind::InvalidLabels => write!(
                f,
                "{id}: {n} sample(s) of a series whose labels are empty, unsorted or repeat a name"
            ),
            AppendErrorKind::OutOfBounds => write!(
                f,
                "{id}: {n} sample(s) older than the oldest time the head accepts, {last} (first rejected ts={ts}): \
                 the head accepts samples from half a block range before its newest sample on, and none in a range \
                 already compacted into a block; out-of-order ingestion is not supported"
            ),
            AppendErrorKind::TooOldForEmptyHead => write!(
                f,
                "{id}: {n} sample(s) older than the oldest time an empty head accepts, {last} (first rejected \
                 ts={ts}): their block range is already closed"
            ),
            AppendErrorKind::TooFarInFuture => write!(
                f,
                "{id}: {n} sample(s) newer than the newest time the head accepts, {last} (first rejected ts={ts})"
            ),
            AppendErrorKind::InvalidHistogram => write!(
                f,
                "{id}: {n} native histogram sample(s) that break Prometheus' invariants (first at ts={ts}){}",
                self.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default()
            ),
            AppendErrorKind::HistogramTooLarge => write!(
                f,
                "{id}: {n} native histogram sample(s) over the ceiling of {} buckets, or spans and custom bounds \
                 (first at ts={ts}){}",
                heddle_model::histogram::MAX_BUCKETS_CEILING,
                self.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default()
            ),
            AppendErrorKind::Refused(_) => match &self.message {
                Some(m) => f.write_str(m),
                None => write!(f, "{id}: {n} sample(s) of a series the head refused to create"),
            },
        }
    }
}

/// The result of [`Head::append`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppendOutcome {
    /// Float samples logged to the WAL and stored.
    pub samples_appended: u64,
    /// Native histogram samples logged to the WAL and stored.
    pub histograms_appended: u64,
    /// Exact repeats of a stored sample (same timestamp and value bits, or the same histogram): accepted, not
    /// stored again. Floats and histograms together.
    pub samples_deduplicated: u64,
    /// Zero samples (or zero histograms) stored at series' created timestamps ([`AppendSeries::created`]); not
    /// in `samples_appended` or `histograms_appended`, which count the batch's own samples.
    pub created_zero_samples: u64,
    /// Series this call created.
    pub series_created: u64,
    /// Open chunks restored from a chunk snapshot that did not decode at this, their first append: their
    /// samples were dropped ([`crate::chunkenc::XorChunk::restore`]).
    pub open_chunks_dropped: u64,
    /// Bytes this call wrote to the WAL (record framing, compression and page padding included).
    pub wal_bytes: u64,
    /// Series with rejected samples.
    pub errors: Vec<SeriesAppendError>,
}

/// State owned by the single appender: the WAL writer and reusable buffers.
#[derive(Debug, Default)]
pub(crate) struct Appender {
    pub(crate) wal: Option<heddle_wal::Wal>,
    /// Consulted before a series is created (see `lifecycle`).
    pub(crate) lifecycle: Option<Arc<dyn SeriesLifecycle>>,
    samples: Vec<RefSample>,
    records: Vec<Vec<u8>>,
}

/// Bytes of a Samples record header (type, first ref, first t) and the most one sample can take.
const SAMPLES_HEADER: usize = 17;
const MAX_SAMPLE_BYTES: usize = 28;

impl Head {
    /// Appends a batch. Per series, each sample is judged against the series' newest sample: newer ones are
    /// accepted, exact repeats are accepted without being stored again, older ones and same-timestamp ones
    /// with another value are rejected and reported in the outcome.
    ///
    /// Durability: the accepted samples (and a Series record for each new series) are written to the WAL
    /// first; they reach memory only once that write returned. If it fails the error is returned and no
    /// sample of the batch is stored (series it created stay, and are logged by a later append).
    ///
    /// Appends are serialized by one lock held across the WAL write; queries do not take it.
    ///
    /// Samples older than [`Head::appendable_min_time`] are out of bounds; a series whose samples all are is
    /// not created. Before a series is created the lifecycle hook ([`Head::set_series_lifecycle`]) is asked:
    /// it may refuse the series ([`AppendErrorKind::Refused`]) or the whole batch
    /// ([`TsdbError::BatchRefused`], nothing stored, the series the batch created removed again).
    pub fn append(&self, batch: &[AppendSeries<'_>]) -> Result<AppendOutcome, TsdbError> {
        self.append_within(batch, AppendBounds::NONE)
    }

    /// [`Head::append`] that also refuses samples outside `bounds`: newer than `bounds.max`
    /// ([`AppendErrorKind::TooFarInFuture`]), and, while the head is empty, older than
    /// `bounds.empty_head_min` ([`AppendErrorKind::TooOldForEmptyHead`]). Judged under the appender lock, so
    /// "empty" cannot change while the batch is judged.
    pub fn append_within(&self, batch: &[AppendSeries<'_>], bounds: AppendBounds) -> Result<AppendOutcome, TsdbError> {
        let mut guard = lock(&self.appender);
        let app = &mut *guard;
        if app.wal.is_none() {
            return Err(TsdbError::Closed);
        }
        let mut out = AppendOutcome::default();
        let hook = app.lifecycle.clone();
        // Stable while the appender lock is held: compaction raises the minimum valid time under that lock, and
        // only appends move the newest sample.
        let min_valid = self.appendable_min_time();
        let empty = self.stats().max_time.is_none();
        // The first bound a sample at `t` breaks, as (reason, the bound).
        let out_of_bounds = |t: i64| -> Option<(AppendErrorKind, i64)> {
            if t > bounds.max {
                Some((AppendErrorKind::TooFarInFuture, bounds.max))
            } else if t < min_valid {
                Some((AppendErrorKind::OutOfBounds, min_valid))
            } else if empty && t < bounds.empty_head_min {
                Some((AppendErrorKind::TooOldForEmptyHead, bounds.empty_head_min))
            } else {
                None
            }
        };

        // 1. Find or create each series; note those whose Series record must be logged.
        let mut resolved: Vec<Option<Arc<MemSeries>>> = Vec::with_capacity(batch.len());
        let mut to_log: Vec<(u64, usize)> = Vec::new();
        let mut to_log_refs: IdMap<u64, ()> = IdMap::default();
        let mut created: Vec<u64> = Vec::new();
        // Series that exist are found under one read lock for the whole batch; it is let go only to create one.
        let mut found = Some(read(&self.index));
        let hashes: Vec<u64> = batch.iter().map(|e| hash_labels(e.labels)).collect();
        // Warm the cache for the batch: with a head far bigger than the CPU caches, each find waits on three
        // or four misses in a row (table slot, series, label ids). Here nothing waits for the loaded values,
        // so the processor overlaps the misses of many series, and the finds then hit the cache. (Warming the
        // open chunks too, for the appends of step 4, measured no better.)
        if let Some(index) = &found {
            for &hash in &hashes {
                if let Some(s) = index.candidate(hash) {
                    std::hint::black_box((s.series_ref, s.labels.iter().next()));
                }
            }
        }
        for ((index, entry), &hash) in batch.iter().enumerate().zip(&hashes) {
            let first_t = entry
                .samples
                .first()
                .map(|s| s.t)
                .or(entry.histograms.first().map(|h| h.t));
            let rejected = |reason, message, last_accepted_t| {
                first_t.map(|first_t| SeriesAppendError {
                    index,
                    reason,
                    samples_rejected: u32::try_from(entry.samples.len() + entry.histograms.len()).unwrap_or(u32::MAX),
                    first_rejected_t: first_t,
                    last_accepted_t,
                    message,
                })
            };
            // As Prometheus checks the bounds before it looks the series up: nothing to store, nothing to create.
            if first_t.is_some()
                && entry.samples.iter().all(|s| out_of_bounds(s.t).is_some())
                && entry.histograms.iter().all(|h| out_of_bounds(h.t).is_some())
                && let Some((reason, bound)) = first_t.and_then(out_of_bounds)
            {
                out.errors.extend(rejected(reason, None, bound));
                resolved.push(None);
                continue;
            }
            let existing = found
                .get_or_insert_with(|| read(&self.index))
                .find(hash, entry.labels)
                .map(|s| (Arc::clone(s), false));
            let resolution = match existing {
                Some(found) => Ok(found),
                None => {
                    found = None;
                    self.create(hash, entry.labels, hook.as_deref(), &mut out)
                }
            };
            let series = match resolution {
                Ok((s, is_new)) => {
                    if is_new {
                        created.push(s.series_ref);
                    }
                    if !s.is_logged() && to_log_refs.insert(s.series_ref, ()).is_none() {
                        to_log.push((s.series_ref, index));
                    }
                    Some(s)
                }
                Err(Unresolved::InvalidLabels) => {
                    out.errors
                        .extend(rejected(AppendErrorKind::InvalidLabels, None, i64::MIN));
                    None
                }
                Err(Unresolved::Refused(r)) if r.scope == RefusalScope::Batch => {
                    drop(found);
                    self.remove_created(&created, hook.as_deref());
                    return Err(TsdbError::BatchRefused {
                        id: r.id,
                        message: r.message,
                    });
                }
                Err(Unresolved::Refused(r)) => {
                    out.errors
                        .extend(rejected(AppendErrorKind::Refused(r.id), Some(r.message), i64::MIN));
                    None
                }
            };
            resolved.push(series);
        }
        drop(found);

        // 2. Judge samples against each series' newest (and earlier accepted samples of this batch).
        app.samples.clear();
        let mut spans: Vec<(usize, usize)> = Vec::with_capacity(batch.len());
        // Accepted histogram samples, (batch index, sample index, fingerprint), in batch order.
        let mut histograms: Vec<(usize, HistogramAt, u64)> = Vec::new();
        // Zero histograms at created timestamps (series with histograms only), which the batch does not hold.
        let mut zeros: Vec<HistogramSample> = Vec::new();
        let mut zero_floats = 0u64;
        let mut newest: IdMap<u64, Option<(i64, u64)>> = IdMap::default();
        newest.reserve(batch.len());
        for (index, (entry, series)) in batch.iter().zip(&resolved).enumerate() {
            let start = app.samples.len();
            if let Some(series) = series {
                let last = newest
                    .entry(series.series_ref)
                    .or_insert_with(|| lock(&series.state).last(&self.chunks));
                let mut error: Option<SeriesAppendError> = None;
                if let (Some(ct), Some(first)) = (entry.created, entry.samples.first())
                    && ct < first.t
                    && out_of_bounds(ct).is_none()
                    && last.is_none_or(|(t, _)| ct > t)
                {
                    *last = Some((ct, 0f64.to_bits()));
                    app.samples.push(RefSample {
                        series_ref: series.series_ref,
                        t: ct,
                        v: 0.0,
                    });
                    zero_floats += 1;
                }
                if let (Some(ct), None, Some(first)) = (entry.created, entry.samples.first(), entry.histograms.first())
                    && ct < first.t
                    && out_of_bounds(ct).is_none()
                    && last.is_none_or(|(t, _)| ct > t)
                {
                    let zero = HistogramSample {
                        t: ct,
                        value: zero_histogram(&first.value),
                    };
                    let fp = fingerprint(&zero.value);
                    *last = Some((ct, fp));
                    histograms.push((index, HistogramAt::Zero(zeros.len()), fp));
                    zeros.push(zero);
                }
                for s in entry.samples {
                    let bits = s.v.to_bits();
                    if let Some((reason, bound)) = out_of_bounds(s.t) {
                        let e = error.get_or_insert(SeriesAppendError {
                            index,
                            reason,
                            samples_rejected: 0,
                            first_rejected_t: s.t,
                            last_accepted_t: bound,
                            message: None,
                        });
                        e.samples_rejected = e.samples_rejected.saturating_add(1);
                        continue;
                    }
                    let kind = match judge(*last, s.t, bits) {
                        Verdict::Append => {
                            *last = Some((s.t, bits));
                            app.samples.push(RefSample {
                                series_ref: series.series_ref,
                                t: s.t,
                                v: s.v,
                            });
                            continue;
                        }
                        Verdict::Duplicate => {
                            out.samples_deduplicated += 1;
                            continue;
                        }
                        Verdict::OutOfOrder => AppendErrorKind::OutOfOrder,
                        Verdict::DuplicateTimestamp => AppendErrorKind::DuplicateTimestamp,
                    };
                    let e = error.get_or_insert(SeriesAppendError {
                        index,
                        reason: kind,
                        samples_rejected: 0,
                        first_rejected_t: s.t,
                        last_accepted_t: last.map_or(i64::MIN, |(t, _)| t),
                        message: None,
                    });
                    e.samples_rejected = e.samples_rejected.saturating_add(1);
                }
                for (i, h) in entry.histograms.iter().enumerate() {
                    let (reason, bound, message) = if let Some((reason, bound)) = out_of_bounds(h.t) {
                        (reason, bound, None)
                    } else if h.value.size().over_ceiling() {
                        (
                            AppendErrorKind::HistogramTooLarge,
                            i64::MIN,
                            Some(h.value.size().to_string()),
                        )
                    } else if let Err(e) = h.value.validate() {
                        (AppendErrorKind::InvalidHistogram, i64::MIN, Some(e.to_string()))
                    } else {
                        let fp = fingerprint(&h.value);
                        let kind = match judge(*last, h.t, fp) {
                            Verdict::Append => {
                                *last = Some((h.t, fp));
                                histograms.push((index, HistogramAt::Batch(i), fp));
                                continue;
                            }
                            Verdict::Duplicate => {
                                out.samples_deduplicated += 1;
                                continue;
                            }
                            Verdict::OutOfOrder => AppendErrorKind::OutOfOrder,
                            Verdict::DuplicateTimestamp => AppendErrorKind::DuplicateTimestamp,
                        };
                        (kind, last.map_or(i64::MIN, |(t, _)| t), None)
                    };
                    let e = error.get_or_insert(SeriesAppendError {
                        index,
                        reason,
                        samples_rejected: 0,
                        first_rejected_t: h.t,
                        last_accepted_t: bound,
                        message,
                    });
                    e.samples_rejected = e.samples_rejected.saturating_add(1);
                }
                out.errors.extend(error);
            }
            spans.push((start, app.samples.len()));
        }
        // The accepted histograms as the WAL logs them, borrowed from the batch.
        let sample_at = |index: usize, at: HistogramAt| match at {
            HistogramAt::Batch(i) => batch.get(index).and_then(|e| e.histograms.get(i)),
            HistogramAt::Zero(j) => zeros.get(j),
        };
        let (mut int_refs, mut float_refs) = (Vec::new(), Vec::new());
        for &(index, at, _) in &histograms {
            let (Some(Some(series)), Some(h)) = (resolved.get(index), sample_at(index, at)) else {
                continue;
            };
            match &h.value {
                HistogramValue::Int(v) => int_refs.push((series.series_ref, h.t, v)),
                HistogramValue::Float(v) => float_refs.push((series.series_ref, h.t, v)),
            }
        }

        // 3. Log: Series records for unlogged series, then the samples, as one WAL call.
        if !to_log.is_empty() || !app.samples.is_empty() || !histograms.is_empty() {
            let Some(wal) = app.wal.as_mut() else {
                return Err(TsdbError::Closed);
            };
            let max = wal.max_record_len();
            let mut used = 0;
            encode_series_records(batch, &to_log, max, &mut app.records, &mut used);
            let per_record = (max.saturating_sub(SAMPLES_HEADER) / MAX_SAMPLE_BYTES).max(1);
            for part in app.samples.chunks(per_record) {
                let buf = next_buf(&mut app.records, &mut used);
                record::encode_samples(part, buf);
            }
            let mut histogram_records = Vec::new();
            for part in split_by_size(&int_refs, max, |s| histogram_bytes(&HistogramSize::of_int(s.2))) {
                record::encode_histogram_refs(part, &mut histogram_records);
            }
            for part in split_by_size(&float_refs, max, |s| histogram_bytes(&HistogramSize::of_float(s.2))) {
                record::encode_float_histogram_refs(part, &mut histogram_records);
            }
            let records: Vec<&[u8]> = app.records[..used]
                .iter()
                .chain(&histogram_records)
                .map(Vec::as_slice)
                .collect();
            let before = wal.bytes_written();
            wal.log(&records)?;
            out.wal_bytes = wal.bytes_written().saturating_sub(before);
            for (series_ref, index) in &to_log {
                if let Some(Some(s)) = resolved.get(*index) {
                    debug_assert_eq!(s.series_ref, *series_ref);
                    s.set_logged();
                }
            }
        }

        // 4. Apply to the chunks.
        let mut min_t = i64::MAX;
        let mut max_t = i64::MIN;
        let mut stored = 0u64;
        for (series, &(start, end)) in resolved.iter().zip(&spans) {
            let (Some(series), Some(samples)) = (series, app.samples.get(start..end)) else {
                continue;
            };
            if samples.is_empty() {
                continue;
            }
            let mut state = lock(&series.state);
            if let Err(e) = state.resume_open() {
                super::series::log_dropped_open_chunk(series.series_ref, &e);
                out.open_chunks_dropped += 1;
            }
            for s in samples {
                if let Err(e) = state.append(series.series_ref, s.t, s.v, self.sink()) {
                    // Unreachable with a cut policy below the chunk's capacity; the sample is in the WAL.
                    tracing::error!(series_ref = series.series_ref, t = s.t, error = %e, "cannot store sample");
                    continue;
                }
                min_t = min_t.min(s.t);
                max_t = max_t.max(s.t);
                stored += 1;
            }
        }
        let mut stored_histograms = 0u64;
        let mut at = 0;
        while let Some(&(index, _, _)) = histograms.get(at) {
            let run = histograms[at..].iter().take_while(|(i, _, _)| *i == index).count();
            let of_series = &histograms[at..at + run];
            at += run;
            let Some(Some(series)) = resolved.get(index) else {
                continue;
            };
            let mut state = lock(&series.state);
            if let Err(e) = state.resume_open() {
                super::series::log_dropped_open_chunk(series.series_ref, &e);
                out.open_chunks_dropped += 1;
            }
            for &(_, at, fp) in of_series {
                let Some(h) = sample_at(index, at) else { continue };
                if let Err(e) = state.append_histogram(series.series_ref, h.t, &h.value, fp, self.sink()) {
                    // Validated above, so unreachable; the sample is in the WAL.
                    tracing::error!(series_ref = series.series_ref, t = h.t, error = %e, "cannot store histogram");
                    continue;
                }
                min_t = min_t.min(h.t);
                max_t = max_t.max(h.t);
                stored_histograms += 1;
            }
        }
        self.note_samples(stored + stored_histograms, min_t, max_t);
        out.created_zero_samples = zero_floats + zeros.len() as u64;
        out.samples_appended = stored.saturating_sub(zero_floats);
        out.histograms_appended = stored_histograms.saturating_sub(zeros.len() as u64);
        // Errors of step 1 and step 2 in batch order.
        out.errors.sort_by_key(|e| e.index);
        Ok(out)
    }

    /// The oldest sample time an append accepts now: the later of the minimum valid time (a block holds what
    /// is before it) and half a chunk range before the newest sample (Prometheus' `appendableMinValidTime`).
    /// An empty head accepts any time after the minimum valid time.
    pub fn appendable_min_time(&self) -> i64 {
        let min_valid = self.min_valid_time.load(Ordering::Relaxed);
        match self.stats().max_time {
            Some(max) => min_valid.max(max.saturating_sub(self.policy.range_ms / 2)),
            None => min_valid,
        }
    }

    /// The series with these labels (of hash `hash`), which the caller did not find, and whether this call
    /// created it; created only when the labels can make a series and `hook` lets it. The caller holds no
    /// index lock.
    fn create(
        &self,
        hash: u64,
        labels: &[LabelRef<'_>],
        hook: Option<&dyn SeriesLifecycle>,
        out: &mut AppendOutcome,
    ) -> Result<(Arc<MemSeries>, bool), Unresolved> {
        let mut names = effective(labels).map(|l| l.name);
        let mut prev = names.next().ok_or(Unresolved::InvalidLabels)?;
        for name in names {
            if name <= prev {
                return Err(Unresolved::InvalidLabels);
            }
            prev = name;
        }
        // Asked outside the index lock (queries go on): appends are serialized by the appender lock the caller
        // holds, so no other append can create these labels meanwhile.
        if let Some(hook) = hook {
            let kept: Vec<LabelRef<'_>> = effective(labels).copied().collect();
            hook.pre_creation(&kept, self.num_series.load(Ordering::Relaxed))
                .map_err(Unresolved::Refused)?;
        }
        let mut index = write(&self.index);
        let series = match index.get_or_create(hash, labels, None, false) {
            Created::New(s) => s,
            Created::Exists(s) => return Ok((Arc::clone(s), false)),
            // A new series takes the next free ref, which no series has.
            Created::RefTaken => return Err(Unresolved::InvalidLabels),
        };
        self.num_series.store(index.len() as u64, Ordering::Relaxed);
        drop(index);
        out.series_created += 1;
        if let Some(hook) = hook {
            hook.post_creation(metric_name(labels), 1);
        }
        Ok((series, true))
    }

    /// Removes the series a refused batch created (they hold no sample and are not in the WAL yet) and tells
    /// the hook, so the head is as before the batch.
    fn remove_created(&self, refs: &[u64], hook: Option<&dyn SeriesLifecycle>) {
        if refs.is_empty() {
            return;
        }
        let mut index = write(&self.index);
        let gone = count_by_metric(&index, Some(refs));
        index.remove(refs);
        self.num_series.store(index.len() as u64, Ordering::Relaxed);
        drop(index);
        if let Some(hook) = hook {
            for (name, n) in gone {
                hook.post_deletion(&name, n);
            }
        }
    }
}

/// Where an accepted histogram sample is: the batch entry's `histograms[i]`, or a zero histogram the append
/// made for a created timestamp.
#[derive(Debug, Clone, Copy)]
enum HistogramAt {
    Batch(usize),
    Zero(usize),
}

/// The zero histogram Prometheus' created-timestamp ingestion stores before a series' first histogram
/// (`AppendHistogramCTZeroSample`): a counter reset with no observations, in the first histogram's schema, zero
/// threshold and custom bounds, so that it does not cut a chunk of its own.
fn zero_histogram(first: &HistogramValue) -> HistogramValue {
    match first {
        HistogramValue::Int(h) => HistogramValue::Int(heddle_model::Histogram {
            counter_reset_hint: heddle_model::CounterResetHint::CounterReset,
            schema: h.schema,
            zero_threshold: h.zero_threshold,
            custom_values: h.custom_values.clone(),
            ..Default::default()
        }),
        HistogramValue::Float(h) => HistogramValue::Float(heddle_model::FloatHistogram {
            counter_reset_hint: heddle_model::CounterResetHint::CounterReset,
            schema: h.schema,
            zero_threshold: h.zero_threshold,
            custom_values: h.custom_values.clone(),
            ..Default::default()
        }),
    }
}

/// Why [`Head::get_or_create`] gave no series.
enum Unresolved {
    InvalidLabels,
    Refused(SeriesRefusal),
}

/// Returns the next reusable record buffer, cleared.
fn next_buf<'b>(bufs: &'b mut Vec<Vec<u8>>, used: &mut usize) -> &'b mut Vec<u8> {
    if *used == bufs.len() {
        bufs.push(Vec::new());
    }
    let i = *used;
    *used += 1;
    let buf = &mut bufs[i];
    buf.clear();
    buf
}

/// Encodes the Series records for `to_log` (ref, batch index), splitting them so that no record exceeds
/// `max` bytes.
fn encode_series_records(
    batch: &[AppendSeries<'_>],
    to_log: &[(u64, usize)],
    max: usize,
    bufs: &mut Vec<Vec<u8>>,
    used: &mut usize,
) {
    let mut start = 0;
    let mut size = 1;
    let flush = |from: usize, to: usize, bufs: &mut Vec<Vec<u8>>, used: &mut usize| {
        if from == to {
            return;
        }
        let buf = next_buf(bufs, used);
        let entries = to_log[from..to]
            .iter()
            .filter_map(|(r, i)| batch.get(*i).map(|e| (*r, effective(e.labels).copied())));
        record::encode_series(entries, buf);
    };
    for (i, (_, index)) in to_log.iter().enumerate() {
        let labels = batch.get(*index).map_or(&[][..], |e| e.labels);
        let entry = 8
            + 10
            + effective(labels)
                .map(|l| 20 + l.name.len() + l.value.len())
                .sum::<usize>();
        if size + entry > max && i > start {
            flush(start, i, bufs, used);
            start = i;
            size = 1;
        }
        size += entry;
    }
    flush(start, to_log.len(), bufs, used);
}

/// The sizes that bound an encoded histogram.
pub(crate) struct HistogramSize {
    spans: usize,
    buckets: usize,
    custom_values: usize,
}

impl HistogramSize {
    pub(crate) fn of_int(h: &heddle_model::Histogram) -> Self {
        Self {
            spans: h.positive_spans.len() + h.negative_spans.len(),
            buckets: h.positive_buckets.len() + h.negative_buckets.len(),
            custom_values: h.custom_values.len(),
        }
    }

    pub(crate) fn of_float(h: &heddle_model::FloatHistogram) -> Self {
        Self {
            spans: h.positive_spans.len() + h.negative_spans.len(),
            buckets: h.positive_buckets.len() + h.negative_buckets.len(),
            custom_values: h.custom_values.len(),
        }
    }
}

/// The most bytes a histogram sample takes in a WAL record: ref and time deltas, hint, schema, zero threshold,
/// counts and sum, span and bucket counts, then 15 bytes a span, 10 a bucket (8 for float counts), 8 a
/// custom bound.
pub(crate) fn histogram_bytes(s: &HistogramSize) -> usize {
    20 + 1 + 5 + 8 + 20 + 8 + 4 * 10 + 15 * s.spans + 10 * s.buckets + 8 * s.custom_values
}

/// Splits `items` into runs whose `size` adds up to at most `max` bytes (a single larger item is a run of its
/// own: the WAL refuses it, and the append with it).
fn split_by_size<T>(items: &[T], max: usize, size: impl Fn(&T) -> usize) -> Vec<&[T]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 17);
    for (i, item) in items.iter().enumerate() {
        let n = size(item);
        if bytes + n > max && i > start {
            out.push(&items[start..i]);
            (start, bytes) = (i, 17);
        }
        bytes += n;
    }
    if start < items.len() {
        out.push(&items[start..]);
    }
    out
}
