//! The head's exemplars: Prometheus' `CircularExemplarStorage`, a fixed ring of the newest exemplars of all
//! series together, with a per-series chain through it.
//!
//! The ring holds at most `capacity` exemplars (a tenant's share of `max_global_exemplars_per_user`); adding
//! one to a full ring overwrites the oldest of all, whatever its series, so memory is bounded by the capacity
//! whatever senders do (each exemplar's labels are at most 128 characters, checked by the distributor). Each
//! series' exemplars are chained oldest to newest through the ring, and the index maps a series to the first
//! and last of its chain. Prometheus' rules: an exemplar equal to its series' newest (labels, value, time) is
//! a duplicate, accepted and not stored again; one not newer than the newest is out of order and refused.
//! Exemplars are kept by series ref with a copy of the series' labels, so they outlive the series' chunks
//! (as in Prometheus, where they are keyed by labels) and a query matches them without the head's index.
//!
//! Pushes hold the ring's lock (under the appender lock) while they add, so a query must never hold it long:
//! [`Head::select_exemplars`] takes it for a bounded amount of work at a time. It copies out the series
//! ([`SERIES_PER_LOCK`] at a time, in ref order, the labels shared, not cloned), matches their labels with the
//! lock released, then copies the matching series' exemplars [`SLOTS_PER_LOCK`] ring slots at a time. Between
//! two holds pushes may overwrite what the query had not read yet; it resumes where it stopped when that slot
//! still holds the exemplar it expected, and otherwise from the series' oldest left (everything older was
//! overwritten), so it returns each exemplar at most once and in time order.

use super::index::hash_labels;
use super::{Head, lock, read};
use crate::error::TsdbError;
use crate::record::{self, RefExemplar};
use heddle_model::{ExemplarRef, Label, LabelRef, Labels, Matcher};
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::Arc;

/// Series whose labels a query copies out of the ring per hold of its lock.
pub(crate) const SERIES_PER_LOCK: usize = 1024;
/// Ring slots a query reads per hold of the ring's lock.
pub(crate) const SLOTS_PER_LOCK: usize = 1024;

/// The exemplars of one series in an append: the series' labels (as a push gives them) and its exemplars.
#[derive(Debug, Clone, Copy)]
pub struct AppendExemplars<'a> {
    pub labels: &'a [LabelRef<'a>],
    pub exemplars: &'a [ExemplarRef<'a>],
}

/// What [`Head::append_exemplars`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExemplarOutcome {
    /// Logged to the WAL and stored.
    pub appended: u64,
    /// Exact repeats of their series' newest exemplar: accepted, not stored again.
    pub duplicates: u64,
    /// Not newer than their series' newest exemplar: refused.
    pub out_of_order: u64,
    /// Of series the head does not hold (or has not logged): refused, as Prometheus refuses them.
    pub unknown_series: u64,
    /// Refused because the head keeps no exemplars.
    pub disabled: u64,
    /// Bytes written to the WAL.
    pub wal_bytes: u64,
}

/// Bytes of an Exemplars record header (type, first ref, first t).
const EXEMPLARS_HEADER: usize = 17;

impl Head {
    /// Appends exemplars of series the head holds, as Prometheus' appender does after the samples: each is
    /// checked against its series' newest (a duplicate is accepted and not stored, an older one refused), the
    /// accepted ones are written to the WAL as an Exemplars record, then stored in the ring. Exemplars of a
    /// series the head does not hold are refused (counted): a push appends its samples first, so a series
    /// whose samples were all refused has none.
    pub fn append_exemplars(&self, batch: &[AppendExemplars<'_>]) -> Result<ExemplarOutcome, TsdbError> {
        let mut out = ExemplarOutcome::default();
        let mut app = lock(&self.appender);
        let mut store = lock(&self.exemplars);
        if store.capacity() == 0 {
            out.disabled = batch.iter().map(|b| b.exemplars.len() as u64).sum();
            return Ok(out);
        }
        let Some(wal) = app.wal.as_mut() else {
            return Err(TsdbError::Closed);
        };
        // (series ref, labels of a series new to the ring, exemplar), in batch order.
        let mut accepted: Vec<(u64, Exemplar)> = Vec::new();
        let mut labels_of: HashMap<u64, Labels> = HashMap::new();
        // The newest accepted exemplar of each series in this batch, which later ones are judged against.
        let mut newest: HashMap<u64, Exemplar> = HashMap::new();
        {
            let index = read(&self.index);
            for entry in batch.iter().filter(|b| !b.exemplars.is_empty()) {
                let series = index
                    .find(hash_labels(entry.labels), entry.labels)
                    .filter(|s| s.is_logged());
                let Some(series) = series else {
                    out.unknown_series += entry.exemplars.len() as u64;
                    continue;
                };
                let series_ref = series.series_ref;
                for e in entry.exemplars {
                    let e = Exemplar::from_ref(e);
                    let verdict = match newest.get(&series_ref) {
                        Some(last) if last.same(&e) => Ok(ExemplarAdded::Duplicate),
                        Some(last) if e.t <= last.t => Err(ExemplarRefusal::OutOfOrder),
                        Some(_) => Ok(ExemplarAdded::Stored),
                        None => store.check(series_ref, &e),
                    };
                    match verdict {
                        Ok(ExemplarAdded::Stored) => {
                            labels_of.entry(series_ref).or_insert_with(|| index.labels_of(series));
                            newest.insert(series_ref, e.clone());
                            accepted.push((series_ref, e));
                        }
                        Ok(ExemplarAdded::Duplicate) => out.duplicates += 1,
                        Err(ExemplarRefusal::OutOfOrder) => out.out_of_order += 1,
                        Err(ExemplarRefusal::Disabled) => out.disabled += 1,
                    }
                }
            }
        }
        if accepted.is_empty() {
            return Ok(out);
        }
        let refs: Vec<RefExemplar> = accepted
            .iter()
            .map(|(series_ref, e)| RefExemplar {
                series_ref: *series_ref,
                t: e.t,
                v: e.value,
                labels: e.labels.clone(),
            })
            .collect();
        let max = wal.max_record_len().saturating_sub(EXEMPLARS_HEADER);
        let mut records: Vec<Vec<u8>> = Vec::new();
        let mut start = 0;
        while start < refs.len() {
            // Whole exemplars per record, each record within the WAL's limit.
            let mut size = 0;
            let mut end = start;
            while end < refs.len() {
                let bytes = 30
                    + refs[end]
                        .labels
                        .iter()
                        .map(|l| l.name.len() + l.value.len() + 10)
                        .sum::<usize>();
                if end > start && size + bytes > max {
                    break;
                }
                size += bytes;
                end += 1;
            }
            let mut buf = Vec::with_capacity(EXEMPLARS_HEADER + size);
            record::encode_exemplars(&refs[start..end], &mut buf);
            records.push(buf);
            start = end;
        }
        let slices: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
        let before = wal.bytes_written();
        wal.log(&slices)?;
        out.wal_bytes = wal.bytes_written().saturating_sub(before);
        for (series_ref, e) in accepted {
            // Judged above under the same locks: stored.
            if store
                .add(series_ref, || labels_of.remove(&series_ref).unwrap_or_default(), e)
                .is_ok()
            {
                out.appended += 1;
            }
        }
        Ok(out)
    }

    /// Changes how many exemplars the head keeps, keeping the newest that fit.
    pub fn set_max_exemplars(&self, max: usize) {
        let mut store = lock(&self.exemplars);
        if store.capacity() != max {
            tracing::info!(dir = %self.dir.display(), from = store.capacity(), to = max, "resizing the exemplar ring");
            store.resize(max);
        }
    }

    /// Exemplars held.
    pub fn exemplars_len(&self) -> usize {
        lock(&self.exemplars).len()
    }

    /// The exemplars in `[mint, maxt]` of the series matching any of `selectors` (a selector: matchers that
    /// must all match), by series labels, each series' oldest first. The ring's lock is held for a bounded
    /// amount of work at a time and never while labels are matched (see the module docs), so pushes wait at
    /// most that long; it is still work in proportion to the ring, to be run off the async runtime.
    pub fn select_exemplars(
        &self,
        mint: i64,
        maxt: i64,
        selectors: &[Vec<Matcher>],
    ) -> BTreeMap<Labels, Vec<Exemplar>> {
        let mut matched = Vec::new();
        let mut after = None;
        loop {
            let chunk = lock(&self.exemplars).series_after(after, SERIES_PER_LOCK);
            let Some(last) = chunk.last() else { break };
            after = Some(last.series_ref);
            matched.extend(chunk.into_iter().filter(|s| matches_any(&s.labels, selectors)));
        }
        let mut out: BTreeMap<Labels, Vec<Exemplar>> = BTreeMap::new();
        let mut reader = ChainReader::new(matched, mint, maxt);
        while !reader.done() {
            let ring = lock(&self.exemplars);
            reader.read(&ring, SLOTS_PER_LOCK, &mut out);
        }
        out
    }
    /// Stores an exemplar read back from the WAL or a snapshot for the series `series_ref` (with `labels`),
    /// through the same checks as an append.
    pub(super) fn restore_exemplar(&self, series_ref: u64, labels: impl FnOnce() -> Labels, e: Exemplar) -> bool {
        lock(&self.exemplars).add(series_ref, labels, e).is_ok()
    }
}

/// One stored exemplar: its labels (as sent, empty values dropped), value and timestamp in ms.
#[derive(Debug, Clone, PartialEq)]
pub struct Exemplar {
    pub labels: Vec<Label>,
    pub value: f64,
    pub t: i64,
}

impl Exemplar {
    /// An owned copy of `e`, without its empty-valued labels (as Prometheus stores it).
    pub fn from_ref(e: &ExemplarRef<'_>) -> Self {
        Exemplar {
            labels: e
                .labels
                .iter()
                .filter(|l| !l.value.is_empty())
                .map(|l| Label {
                    name: l.name.to_owned(),
                    value: l.value.to_owned(),
                })
                .collect(),
            value: e.value,
            t: e.t,
        }
    }

    /// Prometheus' `Exemplar.Equals`: same labels, timestamp and value.
    fn same(&self, other: &Exemplar) -> bool {
        self.t == other.t && self.value.to_bits() == other.value.to_bits() && self.labels == other.labels
    }
}

/// Why an exemplar was not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExemplarRefusal {
    /// Not newer than its series' newest exemplar.
    OutOfOrder,
    /// The store keeps no exemplars (capacity 0).
    Disabled,
}

/// What adding one exemplar did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExemplarAdded {
    Stored,
    /// An exact repeat of the series' newest: accepted, not stored again.
    Duplicate,
}

#[derive(Debug)]
struct Slot {
    series_ref: u64,
    exemplar: Exemplar,
    /// The next (newer) exemplar of the same series.
    next: Option<usize>,
}

#[derive(Debug)]
struct Chain {
    /// Shared with the queries reading it.
    labels: Arc<Labels>,
    oldest: usize,
    newest: usize,
}

/// The ring; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct CircularExemplars {
    slots: Vec<Option<Slot>>,
    /// Where the next exemplar goes: the oldest slot once the ring is full.
    next: usize,
    /// By series ref, in order, so a query can read it a part at a time.
    index: BTreeMap<u64, Chain>,
    /// Slots holding an exemplar.
    held: usize,
}

impl CircularExemplars {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            slots: (0..capacity).map(|_| None).collect(),
            next: 0,
            index: BTreeMap::new(),
            held: 0,
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Exemplars held.
    pub(crate) fn len(&self) -> usize {
        self.held
    }

    /// Whether `e` would be stored for `series_ref`, without storing it.
    pub(crate) fn check(&self, series_ref: u64, e: &Exemplar) -> Result<ExemplarAdded, ExemplarRefusal> {
        if self.slots.is_empty() {
            return Err(ExemplarRefusal::Disabled);
        }
        let Some(newest) = self.index.get(&series_ref).and_then(|c| self.slots[c.newest].as_ref()) else {
            return Ok(ExemplarAdded::Stored);
        };
        if newest.exemplar.same(e) {
            return Ok(ExemplarAdded::Duplicate);
        }
        if e.t <= newest.exemplar.t {
            return Err(ExemplarRefusal::OutOfOrder);
        }
        Ok(ExemplarAdded::Stored)
    }

    /// Adds `e` to the series `series_ref` (whose labels `labels` gives, asked only for a series new to the
    /// store), overwriting the oldest exemplar of all when the ring is full.
    pub(crate) fn add(
        &mut self,
        series_ref: u64,
        labels: impl FnOnce() -> Labels,
        e: Exemplar,
    ) -> Result<ExemplarAdded, ExemplarRefusal> {
        if self.check(series_ref, &e)? == ExemplarAdded::Duplicate {
            return Ok(ExemplarAdded::Duplicate);
        }
        let at = self.next;
        // The slot's exemplar is the oldest of all, so the oldest of its series: its chain starts after it.
        if let Some(evicted) = self.slots[at].take() {
            self.held -= 1;
            match evicted.next {
                Some(next) => {
                    if let Some(c) = self.index.get_mut(&evicted.series_ref) {
                        c.oldest = next;
                    }
                }
                None => {
                    self.index.remove(&evicted.series_ref);
                }
            }
        }
        match self.index.get_mut(&series_ref) {
            Some(c) => {
                if let Some(newest) = self.slots[c.newest].as_mut() {
                    newest.next = Some(at);
                }
                c.newest = at;
            }
            None => {
                self.index.insert(
                    series_ref,
                    Chain {
                        labels: Arc::new(labels()),
                        oldest: at,
                        newest: at,
                    },
                );
            }
        }
        self.slots[at] = Some(Slot {
            series_ref,
            exemplar: e,
            next: None,
        });
        self.held += 1;
        self.next = (at + 1) % self.slots.len();
        Ok(ExemplarAdded::Stored)
    }

    /// Every exemplar with its series, oldest first (the ring's order): what a snapshot writes and a resize
    /// keeps.
    pub(crate) fn oldest_first(&self) -> impl Iterator<Item = (u64, &Labels, &Exemplar)> + '_ {
        let n = self.slots.len();
        (0..n).filter_map(move |i| {
            let slot = self.slots[(self.next + i) % n].as_ref()?;
            let chain = self.index.get(&slot.series_ref)?;
            Some((slot.series_ref, &*chain.labels, &slot.exemplar))
        })
    }

    /// Changes the capacity, keeping the newest exemplars that fit (Prometheus' `Resize`).
    pub(crate) fn resize(&mut self, capacity: usize) {
        if capacity == self.slots.len() {
            return;
        }
        let kept: Vec<(u64, Labels, Exemplar)> =
            self.oldest_first().map(|(r, l, e)| (r, l.clone(), e.clone())).collect();
        let skip = kept.len().saturating_sub(capacity);
        *self = Self::new(capacity);
        for (series_ref, labels, e) in kept.into_iter().skip(skip) {
            // In order and distinct, as they were stored: never refused.
            let _ = self.add(series_ref, || labels, e);
        }
    }

    /// Up to `n` series after the ref `after` (from the first when `None`), in ref order, with their labels
    /// and the time of their newest exemplar now.
    fn series_after(&self, after: Option<u64>, n: usize) -> Vec<Listed> {
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.index
            .range((from, Bound::Unbounded))
            .take(n)
            .map(|(r, c)| Listed {
                series_ref: *r,
                labels: Arc::clone(&c.labels),
                newest: self.slots[c.newest].as_ref().map_or(i64::MIN, |s| s.exemplar.t),
            })
            .collect()
    }

    /// The exemplars in `[mint, maxt]` of the series matching every matcher of any of `selectors`, in one
    /// go, as [`Head::select_exemplars`] reads them a part at a time.
    #[cfg(test)]
    pub(crate) fn select(&self, mint: i64, maxt: i64, selectors: &[Vec<Matcher>]) -> BTreeMap<Labels, Vec<Exemplar>> {
        let mut matched = Vec::new();
        let mut after = None;
        loop {
            let chunk = self.series_after(after, SERIES_PER_LOCK);
            let Some(last) = chunk.last() else { break };
            after = Some(last.series_ref);
            matched.extend(chunk.into_iter().filter(|s| matches_any(&s.labels, selectors)));
        }
        let mut out = BTreeMap::new();
        let mut reader = ChainReader::new(matched, mint, maxt);
        while !reader.done() {
            reader.read(self, SLOTS_PER_LOCK, &mut out);
        }
        out
    }
}

/// A series as a query lists it: its ref, its labels, and the time of its newest exemplar then (the query
/// returns none newer, so pushes meanwhile cannot keep it reading).
#[derive(Debug, Clone)]
pub(crate) struct Listed {
    series_ref: u64,
    labels: Arc<Labels>,
    newest: i64,
}

/// Whether `labels` match every matcher of any of `selectors`.
fn matches_any(labels: &Labels, selectors: &[Vec<Matcher>]) -> bool {
    selectors
        .iter()
        .any(|ms| ms.iter().all(|m| m.matches(labels.get(m.name()).unwrap_or(""))))
}

/// Copies the exemplars in `[mint, maxt]` of a list of series out of the ring, a bounded number of slots per
/// call, each call under its own hold of the ring's lock.
#[derive(Debug)]
pub(crate) struct ChainReader {
    series: std::vec::IntoIter<Listed>,
    /// The series being read, what was copied of it, and where to resume.
    current: Option<Current>,
    mint: i64,
    maxt: i64,
}

#[derive(Debug)]
struct Current {
    series: Listed,
    found: Vec<Exemplar>,
    /// The slot to read next and the time of the exemplar it held then; `None`: the series' oldest.
    resume: Option<(usize, i64)>,
}

impl ChainReader {
    pub(crate) fn new(series: Vec<Listed>, mint: i64, maxt: i64) -> Self {
        Self {
            series: series.into_iter(),
            current: None,
            mint,
            maxt,
        }
    }

    pub(crate) fn done(&self) -> bool {
        self.current.is_none() && self.series.as_slice().is_empty()
    }

    /// Reads at most `slots` ring slots, adding each series' exemplars to `out` once it is read whole.
    pub(crate) fn read(&mut self, ring: &CircularExemplars, slots: usize, out: &mut BTreeMap<Labels, Vec<Exemplar>>) {
        let mut budget = slots.max(1);
        while budget > 0 {
            let mut cur = match self.current.take() {
                Some(c) => c,
                // A series that has gone from the ring costs its lookup.
                None => match self.series.next().inspect(|_| budget -= 1) {
                    Some(series) => Current {
                        series,
                        found: Vec::new(),
                        resume: None,
                    },
                    None => return,
                },
            };
            let last = cur.found.last().map_or(i64::MIN, |e| e.t);
            let series_ref = cur.series.series_ref;
            let maxt = self.maxt.min(cur.series.newest);
            let chain = ring.index.get(&series_ref);
            // Where it stopped, if that slot still holds the exemplar it expected; else the oldest left, all of
            // it newer than what was copied unless the ring was resized meanwhile (hence `t > last` below).
            let start = match cur.resume {
                Some((slot, t))
                    if ring
                        .slots
                        .get(slot)
                        .and_then(Option::as_ref)
                        .is_some_and(|s| s.series_ref == series_ref && s.exemplar.t == t) =>
                {
                    Some(slot)
                }
                _ => chain.map(|c| c.oldest),
            };
            let mut at = start;
            let mut finished = true;
            while let Some(i) = at {
                if budget == 0 {
                    finished = false;
                    break;
                }
                budget -= 1;
                let Some(slot) = ring.slots[i].as_ref().filter(|s| s.series_ref == series_ref) else {
                    break;
                };
                let t = slot.exemplar.t;
                if t > maxt {
                    break;
                }
                if t >= self.mint && t > last {
                    cur.found.push(slot.exemplar.clone());
                }
                at = slot.next;
            }
            if !finished && let Some(i) = at {
                let t = ring.slots[i].as_ref().map_or(i64::MIN, |s| s.exemplar.t);
                cur.resume = Some((i, t));
                self.current = Some(cur);
                return;
            }
            if !cur.found.is_empty() {
                // Two refs of the same labels (a series recreated) merge, in time order.
                let entry = out.entry(Labels::clone(&cur.series.labels)).or_default();
                let merge = !entry.is_empty();
                entry.append(&mut cur.found);
                if merge {
                    entry.sort_by_key(|e| e.t);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
