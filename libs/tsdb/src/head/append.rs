//! Appending a batch of samples: resolve series, judge samples, log to the WAL, then apply to chunks.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use heddle_model::{LabelRef, Sample};

use super::index::{Created, effective, hash_labels};
use super::series::{MemSeries, Verdict, judge};
use super::{Head, lock, read, write};
use crate::error::TsdbError;
use crate::record::{self, RefSample};

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
    /// A sample before the head's minimum valid time: that range was compacted into a block already.
    OutOfBounds,
}

impl AppendErrorKind {
    /// Stable id, used in messages and as the `reason` label of `heddle_discarded_samples_total`.
    pub fn id(self) -> &'static str {
        match self {
            AppendErrorKind::OutOfOrder => "err-heddle-sample-out-of-order",
            AppendErrorKind::DuplicateTimestamp => "err-heddle-sample-duplicate-timestamp",
            AppendErrorKind::InvalidLabels => "err-heddle-series-invalid-labels",
            AppendErrorKind::OutOfBounds => "err-heddle-sample-out-of-bounds",
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
    /// [`AppendErrorKind::OutOfBounds`], the head's minimum valid time.
    pub last_accepted_t: i64,
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
                "{id}: {n} sample(s) older than the head's minimum valid time {last} (first rejected ts={ts}): \
                 that time range was already compacted into a block"
            ),
        }
    }
}

/// The result of [`Head::append`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppendOutcome {
    /// Samples logged to the WAL and stored.
    pub samples_appended: u64,
    /// Exact repeats of a stored sample (same timestamp and value bits): accepted, not stored again.
    pub samples_deduplicated: u64,
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
    pub fn append(&self, batch: &[AppendSeries<'_>]) -> Result<AppendOutcome, TsdbError> {
        let mut guard = lock(&self.appender);
        let app = &mut *guard;
        if app.wal.is_none() {
            return Err(TsdbError::Closed);
        }
        let mut out = AppendOutcome::default();

        // 1. Find or create each series; note those whose Series record must be logged.
        let mut resolved: Vec<Option<Arc<MemSeries>>> = Vec::with_capacity(batch.len());
        let mut to_log: Vec<(u64, usize)> = Vec::new();
        let mut to_log_refs: HashSet<u64> = HashSet::new();
        for (index, entry) in batch.iter().enumerate() {
            let series = self.get_or_create(entry.labels, &mut out);
            match &series {
                Some(s) if !s.is_logged() && to_log_refs.insert(s.series_ref) => {
                    to_log.push((s.series_ref, index));
                }
                Some(_) => {}
                None => {
                    if let Some(first) = entry.samples.first() {
                        out.errors.push(SeriesAppendError {
                            index,
                            reason: AppendErrorKind::InvalidLabels,
                            samples_rejected: u32::try_from(entry.samples.len()).unwrap_or(u32::MAX),
                            first_rejected_t: first.t,
                            last_accepted_t: i64::MIN,
                        });
                    }
                }
            }
            resolved.push(series);
        }

        // 2. Judge samples against each series' newest (and earlier accepted samples of this batch).
        app.samples.clear();
        let mut spans: Vec<(usize, usize)> = Vec::with_capacity(batch.len());
        let mut newest: HashMap<u64, Option<(i64, u64)>> = HashMap::new();
        // Stable while the appender lock is held: compaction raises it under that lock.
        let min_valid = self.min_valid_time.load(Ordering::Relaxed);
        for (index, (entry, series)) in batch.iter().zip(&resolved).enumerate() {
            let start = app.samples.len();
            if let Some(series) = series {
                let last = newest
                    .entry(series.series_ref)
                    .or_insert_with(|| lock(&series.state).last(&self.chunks));
                let mut error: Option<SeriesAppendError> = None;
                for s in entry.samples {
                    let bits = s.v.to_bits();
                    if s.t < min_valid {
                        let e = error.get_or_insert(SeriesAppendError {
                            index,
                            reason: AppendErrorKind::OutOfBounds,
                            samples_rejected: 0,
                            first_rejected_t: s.t,
                            last_accepted_t: min_valid,
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
                    });
                    e.samples_rejected = e.samples_rejected.saturating_add(1);
                }
                out.errors.extend(error);
            }
            spans.push((start, app.samples.len()));
        }

        // 3. Log: Series records for unlogged series, then the samples, as one WAL call.
        if !to_log.is_empty() || !app.samples.is_empty() {
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
            let records: Vec<&[u8]> = app.records[..used].iter().map(Vec::as_slice).collect();
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
                out.samples_appended += 1;
            }
        }
        self.note_samples(out.samples_appended, min_t, max_t);
        Ok(out)
    }

    /// The series with these labels, created if new; `None` for labels that cannot make a series.
    fn get_or_create(&self, labels: &[LabelRef<'_>], out: &mut AppendOutcome) -> Option<Arc<MemSeries>> {
        let hash = hash_labels(labels);
        if let Some(s) = read(&self.index).find(hash, labels) {
            return Some(Arc::clone(s));
        }
        let mut names = effective(labels).map(|l| l.name);
        let mut prev = names.next()?;
        for name in names {
            if name <= prev {
                return None;
            }
            prev = name;
        }
        let mut index = write(&self.index);
        let series = match index.get_or_create(hash, labels, None, false) {
            Created::New(s) => s,
            Created::Exists(s) => return Some(Arc::clone(s)),
            // A new series takes the next free ref, which no series has.
            Created::RefTaken => return None,
        };
        self.num_series.store(index.len() as u64, Ordering::Relaxed);
        out.series_created += 1;
        Some(series)
    }
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
