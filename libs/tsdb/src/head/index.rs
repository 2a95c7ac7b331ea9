//! The head's index: symbols, series by ref and by label hash, postings, and matcher selection.
//!
//! Guarded by one `RwLock` in [`super::Head`]. Lock order: the index lock may be held while a series' state
//! lock is taken, never the other way round.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, PoisonError};

use heddle_model::{LabelRef, Labels, MatchType, Matcher};

use hashbrown::HashTable;
use hashbrown::hash_table::{Entry, VacantEntry};

use super::idhash::{StrHasher, kept_bits, run_hash, spread_bits};
use super::label_ids::LabelIds;
use super::postings::{Postings, Refs, intersect_lists, union_lists};
use super::series::{MemSeries, SeriesState};
use super::symbols::SymbolTable;

/// Labels that identify a series: empty values mean "no such label" and are ignored, as in Prometheus.
pub(crate) fn effective<'s, 'a>(labels: &'s [LabelRef<'a>]) -> impl Iterator<Item = &'s LabelRef<'a>> + Clone {
    labels.iter().filter(|l| !l.value.is_empty())
}

/// Hash of a label set, to find its series without building owned labels. Keyed randomly per process (it is
/// never stored), so clients cannot search offline for label sets that crowd one part of the by-hash table.
pub(crate) fn hash_labels(labels: &[LabelRef<'_>]) -> u64 {
    static KEYS: std::sync::LazyLock<StrHasher> = std::sync::LazyLock::new(StrHasher::default);
    let mut h = KEYS.build_hasher();
    for l in effective(labels) {
        l.name.hash(&mut h);
        l.value.hash(&mut h);
    }
    h.finish()
}

/// Where a series goes in the by-ref table: neighbouring refs side by side ([`run_hash`]), as loads and
/// queries mostly take series in ref order.
fn ref_slot(series_ref: u64) -> u64 {
    run_hash(series_ref)
}

/// Appends to `out` the hashes of the effective labels' names and values, in order, for
/// [`HeadIndex::get_or_create_loaded`] and [`HeadIndex::intern_loaded`].
pub(crate) fn symbol_hashes(hasher: &StrHasher, labels: &[LabelRef<'_>], out: &mut Vec<u64>) {
    use std::hash::BuildHasher;
    for l in effective(labels) {
        out.push(hasher.hash_one(l.name));
        out.push(hasher.hash_one(l.value));
    }
}

/// Whether series `s` has exactly `labels` (their effective ones).
fn same_labels(symbols: &SymbolTable, s: &MemSeries, labels: &[LabelRef<'_>]) -> bool {
    let mut want = effective(labels);
    for (n, v) in s.labels.iter() {
        match want.next() {
            Some(l) if symbols.resolve(n) == l.name && symbols.resolve(v) == l.value => {}
            _ => return false,
        }
    }
    want.next().is_none()
}

/// Interns a new series' labels into `ids`, with their strings' hashes and the loader's cache when loading
/// (see [`HeadIndex::get_or_create_loaded`]).
fn intern_labels(
    symbols: &mut SymbolTable,
    labels: &[LabelRef<'_>],
    load: Option<(&[u64], &mut LoadCache)>,
    ids: &mut Vec<(u32, u32)>,
) {
    debug_assert!(
        labels.windows(2).all(|w| w[0].name < w[1].name),
        "labels must be sorted and unique"
    );
    ids.clear();
    match load {
        Some((hashes, cache)) => {
            debug_assert_eq!(
                hashes.len(),
                2 * effective(labels).count(),
                "one hash per name and value"
            );
            ids.extend(effective(labels).zip(hashes.chunks_exact(2)).map(|(l, h)| {
                (
                    cache.intern(symbols, h[0], l.name),
                    cache.intern(symbols, h[1], l.value),
                )
            }));
        }
        None => ids.extend(effective(labels).map(|l| (symbols.intern(l.name), symbols.intern(l.value)))),
    }
}

/// Adds a new series to the postings of its label ids, through the loader's cache when loading.
fn add_postings(postings: &mut Postings, series_ref: u64, ids: &[(u32, u32)], load: Option<&mut LoadCache>) {
    match load {
        Some(cache) => {
            postings.add_ref_loading(series_ref);
            for &(n, v) in ids {
                cache.add_pair(postings, series_ref, n, v);
            }
        }
        None => postings.add(series_ref, ids),
    }
}

/// What [`HeadIndex::get_or_create`] found.
#[derive(Debug)]
pub(crate) enum Created<'a> {
    /// A new series.
    New(Arc<MemSeries>),
    /// The series that already has these labels (whatever its ref).
    Exists(&'a Arc<MemSeries>),
    /// Another label set's series has the ref asked for.
    RefTaken,
}

/// Slots of each [`LoadCache`] table (a power of two).
const LOAD_CACHE_SLOTS: usize = 4096;

/// What a loader (snapshot load, WAL replay) remembers between series: consecutive series share most of their
/// label names and values, and looking each one up in tables of a million entries is most of the cost of
/// creating a series. Direct-mapped, so a miss just falls back to the full lookup. Lives for one load only:
/// list handles are not valid across removals, and a load removes nothing.
#[derive(Debug)]
pub(crate) struct LoadCache {
    /// (string hash, symbol id); id `u32::MAX` marks an empty slot.
    symbols: Vec<(u64, u32)>,
    /// (name, value, postings list handle); handle 0 marks an empty slot (handles have their top bit set).
    pairs: Vec<(u32, u32, u64)>,
}

impl Default for LoadCache {
    fn default() -> Self {
        Self {
            symbols: vec![(0, u32::MAX); LOAD_CACHE_SLOTS],
            pairs: vec![(0, 0, 0); LOAD_CACHE_SLOTS],
        }
    }
}

impl LoadCache {
    fn intern(&mut self, symbols: &mut SymbolTable, h: u64, s: &str) -> u32 {
        let slot = &mut self.symbols[(h as usize) & (LOAD_CACHE_SLOTS - 1)];
        // Equal hashes are checked against the string itself, so a collision costs a lookup, never a wrong id.
        if slot.0 == h && slot.1 != u32::MAX && symbols.resolve(slot.1) == s {
            return slot.1;
        }
        let id = symbols.intern_hashed(h, s);
        *slot = (h, id);
        id
    }

    fn add_pair(&mut self, postings: &mut Postings, series_ref: u64, name: u32, value: u32) {
        let key = (u64::from(name) << 32 | u64::from(value)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let slot = &mut self.pairs[(key >> 52) as usize & (LOAD_CACHE_SLOTS - 1)];
        if slot.2 != 0 && slot.0 == name && slot.1 == value {
            postings.add_to_list(slot.2, series_ref);
        } else if let Some(handle) = postings.add_pair_loading(series_ref, name, value) {
            *slot = (name, value, handle);
        }
    }
}

/// The series of an index, by ref and by label hash. Two tables of 8-byte entries holding the series itself,
/// where maps of ref -> series and label hash -> ref took 16-byte entries each: 32 bytes less per series at 1M
/// series (2M buckets). Growing either reads each series for its ref or hash bits, never its labels.
#[derive(Debug, Default)]
pub(crate) struct SeriesTables {
    /// Every series, placed by its ref ([`ref_slot`]).
    series: HashTable<Arc<MemSeries>>,
    /// Every series again, placed by the top half of its label hash ([`spread_bits`]); label sets sharing those
    /// 32 bits are told apart by comparing labels.
    by_hash: HashTable<Arc<MemSeries>>,
}

impl SeriesTables {
    fn len(&self) -> usize {
        self.series.len()
    }

    fn get(&self, series_ref: u64) -> Option<&Arc<MemSeries>> {
        self.series.find(ref_slot(series_ref), |s| s.series_ref == series_ref)
    }

    /// Makes room for `series` series in all, so that a load does not grow the tables step by step.
    fn reserve(&mut self, series: usize) {
        let more = series.saturating_sub(self.series.len());
        self.series.reserve(more, |s| ref_slot(s.series_ref));
        self.by_hash.reserve(more, |s| spread_bits(s.label_bits));
    }

    /// Looks for a new series by its kept label-hash bits (`same` tells a series with its labels) and by its
    /// ref; the probes that find neither leave the slots the series then takes ([`Slots::insert`]). At a
    /// million series every probe is a cache miss, so looking and making room are one probe per table.
    fn vacant(
        &mut self,
        bits: u32,
        series_ref: u64,
        same: impl Fn(&MemSeries) -> bool,
    ) -> Result<Slots<'_>, Created<'_>> {
        let by_labels = match label_entry(&mut self.by_hash, bits, same) {
            Entry::Occupied(e) => return Err(Created::Exists(e.into_mut())),
            Entry::Vacant(e) => e,
        };
        let Entry::Vacant(by_ref) = ref_entry(&mut self.series, series_ref) else {
            return Err(Created::RefTaken);
        };
        Ok(Slots { by_labels, by_ref })
    }

    /// Puts series in the by-hash table, in the order of the buckets they go to, so that placing a million
    /// takes one pass over the table instead of a cache miss or two each. Returns the ref of a series whose
    /// labels another series already has, placing no more.
    fn place_by_labels(&mut self, mut series: Vec<(u64, Arc<MemSeries>)>) -> Result<(), u64> {
        self.by_hash.reserve(series.len(), |s| spread_bits(s.label_bits));
        // hashbrown takes the bucket from the hash's low bits, masked to its power-of-two bucket count; the
        // count is not exposed, but it follows from the capacity (7/8 of the buckets). A wrong guess would
        // only make the pass less orderly.
        let buckets = (self.by_hash.capacity() * 8 / 7).next_power_of_two() as u64;
        series.sort_unstable_by_key(|(h, _)| h & (buckets - 1));
        for (_, s) in series {
            // Ids of one symbol table are equal exactly when the strings are.
            let Entry::Vacant(e) = label_entry(&mut self.by_hash, s.label_bits, |x| x.labels == s.labels) else {
                return Err(s.series_ref);
            };
            e.insert(s);
        }
        Ok(())
    }

    /// Trims tables [`SeriesTables::reserve`] made larger than the series loaded need.
    fn shrink_to_fit(&mut self) {
        self.series.shrink_to_fit(|s| ref_slot(s.series_ref));
        self.by_hash.shrink_to_fit(|s| spread_bits(s.label_bits));
    }
}

/// The by-ref table's entry for `series_ref`.
fn ref_entry(series: &mut HashTable<Arc<MemSeries>>, series_ref: u64) -> Entry<'_, Arc<MemSeries>> {
    series.entry(
        ref_slot(series_ref),
        |s| s.series_ref == series_ref,
        |s| ref_slot(s.series_ref),
    )
}

/// The by-hash table's entry for a series with kept label-hash bits `bits`, which `same` tells by its labels.
fn label_entry(
    by_hash: &mut HashTable<Arc<MemSeries>>,
    bits: u32,
    same: impl Fn(&MemSeries) -> bool,
) -> Entry<'_, Arc<MemSeries>> {
    by_hash.entry(
        spread_bits(bits),
        |s| s.label_bits == bits && same(s),
        |s| spread_bits(s.label_bits),
    )
}

/// Where a new series goes in both [`SeriesTables`] ([`SeriesTables::vacant`]).
struct Slots<'t> {
    by_labels: VacantEntry<'t, Arc<MemSeries>>,
    by_ref: VacantEntry<'t, Arc<MemSeries>>,
}

impl Slots<'_> {
    /// Puts `series` in both tables and returns it.
    fn insert(self, series: MemSeries) -> Arc<MemSeries> {
        // References are counted before either table entry is written: an atomic increment (or decrement)
        // waits for the stores before it, and at a million series each table entry written is a cache miss.
        let created = Arc::new(series);
        let (by_ref, by_labels) = (Arc::clone(&created), Arc::clone(&created));
        self.by_ref.insert(by_ref);
        self.by_labels.insert(by_labels);
        created
    }
}

/// The series tables and postings of an index, which a snapshot load takes out
/// ([`HeadIndex::take_series_half`]) to fill on another thread while the index interns the next series'
/// labels ([`HeadIndex::intern_loaded`]).
#[derive(Debug, Default)]
pub(crate) struct SeriesHalf {
    tables: SeriesTables,
    postings: Postings,
    /// Series loaded and not yet in the by-hash table, with their place in it ([`SeriesHalf::finish`]), kept
    /// beside them so that sorting by it reads no series.
    by_labels_later: Vec<(u64, Arc<MemSeries>)>,
}

impl SeriesHalf {
    /// Adds a loaded series with these label ids (interned by the index this half belongs to) and kept
    /// label-hash bits, and adds it to their postings; `fill` gives it its samples first, before anything
    /// else can see it (so without locking it). `None`, adding nothing, when a series has the same ref; a
    /// series with the same labels is found when [`SeriesHalf::finish`] places them.
    pub(crate) fn add_loaded(
        &mut self,
        series_ref: u64,
        bits: u32,
        ids: &[(u32, u32)],
        cache: &mut LoadCache,
        fill: impl FnOnce(&mut SeriesState),
    ) -> Option<()> {
        let Entry::Vacant(by_ref) = ref_entry(&mut self.tables.series, series_ref) else {
            return None;
        };
        add_postings(&mut self.postings, series_ref, ids, Some(cache));
        let mut series = MemSeries::new(series_ref, LabelIds::new(ids), bits, true);
        fill(series.state.get_mut().unwrap_or_else(PoisonError::into_inner));
        let series = Arc::new(series);
        by_ref.insert(Arc::clone(&series));
        self.by_labels_later.push((spread_bits(bits), series));
        Some(())
    }

    /// Ends a load: puts the loaded series in the by-hash table ([`SeriesTables::place_by_labels`]) while
    /// another thread gives the postings their final form ([`Postings::finish_load`]), which this thread joins
    /// when it is done; then trims the tables. Returns the ref of a series whose labels another series has
    /// (the load is then unusable).
    pub(crate) fn finish(&mut self) -> Result<(), u64> {
        let later = std::mem::take(&mut self.by_labels_later);
        let tables = &mut self.tables;
        let settling = self.postings.settling();
        let (placed, helper) = std::thread::scope(|s| {
            // Without a thread to be had, this one settles every list.
            let helper = std::thread::Builder::new()
                .name("postings-settle".to_owned())
                .spawn_scoped(s, || settling.work());
            let placed = tables.place_by_labels(later);
            settling.work();
            (placed, helper.map(|t| t.join()))
        });
        if let Ok(Err(panic)) = helper {
            std::panic::resume_unwind(panic);
        }
        self.tables.shrink_to_fit();
        placed
    }

    /// Makes room for `series` series in all, so that a load does not grow the series tables step by step.
    pub(crate) fn reserve(&mut self, series: usize) {
        self.tables.reserve(series);
    }

    /// The series with this ref.
    pub(crate) fn get(&self, series_ref: u64) -> Option<&Arc<MemSeries>> {
        self.tables.get(series_ref)
    }
}

#[derive(Debug, Default)]
pub(crate) struct HeadIndex {
    pub(crate) symbols: SymbolTable,
    tables: SeriesTables,
    pub(crate) postings: Postings,
    next_ref: u64,
    /// Scratch for a new series' label ids.
    ids_buf: Vec<(u32, u32)>,
}

impl HeadIndex {
    pub(crate) fn new() -> Self {
        Self {
            next_ref: 1,
            ..Self::default()
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.tables.len()
    }

    /// The ref the next new series gets.
    #[cfg(test)]
    pub(crate) fn next_ref(&self) -> u64 {
        self.next_ref
    }

    pub(crate) fn get(&self, series_ref: u64) -> Option<&Arc<MemSeries>> {
        self.tables.get(series_ref)
    }

    /// The series [`HeadIndex::find`] of `hash` will most likely return, judged by the hash alone (its labels
    /// are not compared): for warming the cache ahead of the finds of a batch, see `Head::append_within`.
    pub(crate) fn candidate(&self, hash: u64) -> Option<&Arc<MemSeries>> {
        let bits = kept_bits(hash);
        self.tables.by_hash.find(spread_bits(bits), |s| s.label_bits == bits)
    }

    /// The series with exactly these labels.
    pub(crate) fn find(&self, hash: u64, labels: &[LabelRef<'_>]) -> Option<&Arc<MemSeries>> {
        let bits = kept_bits(hash);
        self.tables.by_hash.find(spread_bits(bits), |s| {
            s.label_bits == bits && same_labels(&self.symbols, s, labels)
        })
    }

    /// The series with these labels, created (interning its strings) if there is none. `series_ref` is given
    /// when replaying the WAL; otherwise the next free ref is used.
    pub(crate) fn get_or_create(
        &mut self,
        hash: u64,
        labels: &[LabelRef<'_>],
        series_ref: Option<u64>,
        logged: bool,
    ) -> Created<'_> {
        self.get_or_create_loaded(hash, labels, series_ref, logged, None)
    }

    /// [`HeadIndex::get_or_create`] for a loader: with the symbol hashes of the effective labels (name, value,
    /// name, value...) computed ahead by [`symbol_hashes`] on a worker, and the loader's [`LoadCache`].
    pub(crate) fn get_or_create_loaded(
        &mut self,
        hash: u64,
        labels: &[LabelRef<'_>],
        series_ref: Option<u64>,
        logged: bool,
        load: Option<(&[u64], &mut LoadCache)>,
    ) -> Created<'_> {
        let series_ref = series_ref.unwrap_or(self.next_ref);
        let bits = kept_bits(hash);
        let Self {
            symbols,
            tables,
            postings,
            next_ref,
            ids_buf,
        } = self;
        let slots = match tables.vacant(bits, series_ref, |s| same_labels(symbols, s, labels)) {
            Ok(slots) => slots,
            Err(found) => return found,
        };
        *next_ref = (*next_ref).max(series_ref.saturating_add(1));
        match load {
            Some((hashes, cache)) => {
                intern_labels(symbols, labels, Some((hashes, &mut *cache)), ids_buf);
                add_postings(postings, series_ref, ids_buf, Some(cache));
            }
            None => {
                intern_labels(symbols, labels, None, ids_buf);
                add_postings(postings, series_ref, ids_buf, None);
            }
        }
        Created::New(slots.insert(MemSeries::new(series_ref, LabelIds::new(ids_buf), bits, logged)))
    }

    /// The first half of loading a series whose [`SeriesHalf`] was taken out ([`HeadIndex::take_series_half`]):
    /// interns its labels, leaving their ids in `ids`, for [`SeriesHalf::add_loaded`]. A series that half
    /// then refuses leaves its strings interned.
    pub(crate) fn intern_loaded(
        &mut self,
        series_ref: u64,
        labels: &[LabelRef<'_>],
        hashes: &[u64],
        cache: &mut LoadCache,
        ids: &mut Vec<(u32, u32)>,
    ) {
        self.next_ref = self.next_ref.max(series_ref.saturating_add(1));
        intern_labels(&mut self.symbols, labels, Some((hashes, cache)), ids);
    }

    /// Takes the series tables and postings out, leaving empty ones, for a load that fills them on another
    /// thread.
    pub(crate) fn take_series_half(&mut self) -> SeriesHalf {
        SeriesHalf {
            tables: std::mem::take(&mut self.tables),
            postings: std::mem::take(&mut self.postings),
            by_labels_later: Vec::new(),
        }
    }

    /// Puts back what [`HeadIndex::take_series_half`] took, once [`SeriesHalf::finish`] placed its series.
    pub(crate) fn put_series_half(&mut self, half: SeriesHalf) {
        debug_assert!(half.by_labels_later.is_empty(), "a series half put back unfinished");
        self.tables = half.tables;
        self.postings = half.postings;
    }

    /// Makes room for `series` series in all, so that a load does not grow the series tables step by step.
    pub(crate) fn reserve(&mut self, series: usize) {
        self.tables.reserve(series);
    }

    /// Ends a load: gives the postings lists it grew their compact form, and trims series tables
    /// [`HeadIndex::reserve`] made larger than the series loaded need.
    pub(crate) fn finish_load(&mut self) {
        self.postings.finish_load();
        self.tables.shrink_to_fit();
    }

    /// Removes the series with these refs (their symbols stay interned).
    pub(crate) fn remove(&mut self, refs: &[u64]) {
        let gone: Vec<Arc<MemSeries>> = refs
            .iter()
            .filter_map(|&r| {
                let (s, _) = self
                    .tables
                    .series
                    .find_entry(ref_slot(r), |s| s.series_ref == r)
                    .ok()?
                    .remove();
                Some(s)
            })
            .collect();
        for s in &gone {
            if let Ok(e) = self
                .tables
                .by_hash
                .find_entry(spread_bits(s.label_bits), |x| Arc::ptr_eq(x, s))
            {
                e.remove();
            }
        }
        let owned: Vec<(u64, Vec<(u32, u32)>)> =
            gone.iter().map(|s| (s.series_ref, s.labels.iter().collect())).collect();
        let labels: Vec<(u64, &[(u32, u32)])> = owned.iter().map(|(r, l)| (*r, &l[..])).collect();
        self.postings.remove(&labels);
    }

    /// Every series, in no order.
    pub(crate) fn all_series(&self) -> impl Iterator<Item = &Arc<MemSeries>> + '_ {
        self.tables.series.iter()
    }

    /// Notes a ref seen in the WAL, so new series never reuse it.
    pub(crate) fn reserve_ref(&mut self, series_ref: u64) {
        self.next_ref = self.next_ref.max(series_ref.saturating_add(1));
    }

    /// The owned labels of a series.
    pub(crate) fn labels_of(&self, s: &MemSeries) -> Labels {
        let pairs = s
            .labels
            .iter()
            .map(|(n, v)| (self.symbols.resolve(n), self.symbols.resolve(v)));
        // Stored in the order the distributor validated (sorted); sorting again is only a fallback.
        Labels::from_sorted(pairs.clone())
            .or_else(|_| Labels::from_unsorted(pairs))
            .unwrap_or_default()
    }

    /// Series selected by all `matchers` (Prometheus semantics: a missing label has the value "").
    ///
    /// Candidates come from postings: the intersection of the lists of the `name="value"` matchers, or,
    /// without one, the union of the lists of the values matching the first matcher that does not match
    /// the empty string (such a matcher needs the label present), or else every series. The remaining
    /// matchers are checked against each candidate's labels.
    pub(crate) fn select(&self, matchers: &[Matcher]) -> Vec<Arc<MemSeries>> {
        let mut equal: Vec<Refs<'_>> = Vec::new();
        let mut rest: Vec<&Matcher> = Vec::new();
        for m in matchers {
            if m.kind() == MatchType::Equal && !m.value().is_empty() {
                equal.push(match (self.symbols.id(m.name()), self.symbols.id(m.value())) {
                    (Some(n), Some(v)) => self.postings.get(n, v),
                    _ => Refs::EMPTY,
                });
            } else {
                rest.push(m);
            }
        }
        let candidates = if !equal.is_empty() {
            intersect_lists(equal)
        } else if let Some(pos) = rest.iter().position(|m| !m.matches_empty()) {
            let m = rest.remove(pos);
            match self.symbols.id(m.name()) {
                None => Vec::new(),
                Some(name) => union_lists(
                    self.postings
                        .values(name)
                        .filter(|(v, _)| m.matches(self.symbols.resolve(*v)))
                        .map(|(_, refs)| refs),
                ),
            }
        } else {
            self.postings.all().to_vec()
        };
        let rest: Vec<(&Matcher, Option<u32>)> = rest.into_iter().map(|m| (m, self.symbols.id(m.name()))).collect();
        candidates
            .into_iter()
            .filter_map(|r| self.get(r))
            .filter(|s| {
                rest.iter().all(|(m, name)| {
                    let value = name.and_then(|n| s.value_of(n)).map_or("", |v| self.symbols.resolve(v));
                    m.matches(value)
                })
            })
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(value: &str) -> [LabelRef<'_>; 1] {
        [LabelRef { name: "job", value }]
    }

    fn create(ix: &mut HeadIndex, hash: u64, labels: &[LabelRef<'_>]) -> Arc<MemSeries> {
        match ix.get_or_create(hash, labels, None, true) {
            Created::New(s) => s,
            other => panic!("expected a new series, got {other:?}"),
        }
    }

    /// Label sets of any size are found again, and the hash tells names from values and labels from each
    /// other.
    #[test]
    fn label_sets_of_any_size_hash_apart_and_are_found() {
        let l = |name, value| LabelRef { name, value };
        assert_ne!(hash_labels(&[l("a", "bc")]), hash_labels(&[l("ab", "c")]));
        assert_ne!(
            hash_labels(&[l("a", "b"), l("c", "d")]),
            hash_labels(&[l("a", "b\u{ff}c"), l("d", "")])
        );
        assert_eq!(
            hash_labels(&[l("a", "b"), l("e", "")]),
            hash_labels(&[l("a", "b")]),
            "empty values are absent"
        );
        let mut ix = HeadIndex::new();
        let sizes = [1, 15, 16, 17, 500, 5000];
        let values: Vec<String> = sizes.iter().map(|&n| "v".repeat(n)).collect();
        let mut made = Vec::new();
        for v in &values {
            let labels = [l("job", v), l("z", "1")];
            made.push(create(&mut ix, hash_labels(&labels), &labels));
        }
        for (v, s) in values.iter().zip(&made) {
            let labels = [l("job", v), l("z", "1")];
            let found = ix.find(hash_labels(&labels), &labels).expect("found");
            assert!(Arc::ptr_eq(found, s));
        }
        assert_eq!(ix.len(), values.len());
    }

    /// Asking for existing labels returns their series whatever ref is asked for; asking for a taken ref with
    /// other labels creates nothing. Neither changes the index.
    #[test]
    fn get_or_create_creates_only_new_labels_on_free_refs() {
        let mut ix = HeadIndex::new();
        let h = |v: &str| hash_labels(&job(v));
        let a = create(&mut ix, h("a"), &job("a"));
        match ix.get_or_create(h("a"), &job("a"), Some(77), true) {
            Created::Exists(s) => assert!(Arc::ptr_eq(s, &a)),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            ix.get_or_create(h("b"), &job("b"), Some(a.series_ref), true),
            Created::RefTaken
        ));
        assert_eq!(ix.len(), 1);
        assert!(ix.find(h("b"), &job("b")).is_none());
        assert_eq!(ix.symbols.id("b"), None, "a refused series interns nothing");
        assert_eq!(ix.postings.all().to_vec(), vec![a.series_ref]);
        assert_eq!(ix.next_ref(), a.series_ref + 1, "a refused ref is not reserved");
        let b = create(&mut ix, h("b"), &job("b"));
        assert_eq!(b.series_ref, a.series_ref + 1);
        assert_eq!(ix.select(&[Matcher::equal("job", "b")]).len(), 1);
    }

    /// Room reserved for a load that turned out smaller is given back when the load finishes: the tables end
    /// as large as growing one series at a time makes them.
    #[test]
    fn an_overestimated_reserve_is_trimmed_when_the_load_finishes() {
        let (mut reserved, mut grown) = (HeadIndex::new(), HeadIndex::new());
        reserved.reserve(100_000);
        let values: Vec<String> = (0..300).map(|i| format!("v{i}")).collect();
        for (i, v) in values.iter().enumerate() {
            create(&mut reserved, i as u64, &job(v));
            create(&mut grown, i as u64, &job(v));
        }
        assert!(reserved.tables.series.capacity() >= 100_000);
        reserved.finish_load();
        grown.finish_load();
        assert_eq!(reserved.tables.series.capacity(), grown.tables.series.capacity());
        assert_eq!(reserved.tables.by_hash.capacity(), grown.tables.by_hash.capacity());
        assert!(
            values
                .iter()
                .enumerate()
                .all(|(i, v)| reserved.find(i as u64, &job(v)).is_some())
        );
    }

    /// Loads `values` (label `job`) through a series half with the given label hashes and refs 1, 2, ...;
    /// returns what finishing the half said.
    fn load(ix: &mut HeadIndex, values: &[(&str, u64)]) -> Result<(), u64> {
        let mut half = ix.take_series_half();
        let (mut cache, mut half_cache, mut ids, mut hashes) =
            (LoadCache::default(), LoadCache::default(), Vec::new(), Vec::new());
        for (i, &(v, hash)) in values.iter().enumerate() {
            let series_ref = i as u64 + 1;
            hashes.clear();
            symbol_hashes(ix.symbols.hasher(), &job(v), &mut hashes);
            ix.intern_loaded(series_ref, &job(v), &hashes, &mut cache, &mut ids);
            half.add_loaded(series_ref, kept_bits(hash), &ids, &mut half_cache, |_| {})
                .expect("a new ref");
        }
        let finished = half.finish();
        ix.put_series_half(half);
        finished
    }

    /// A load places its series in the by-hash table at its end: each is found by its labels, label sets
    /// whose hashes collide (forced here) are told apart, and a label set loaded twice is refused.
    #[test]
    fn loaded_series_are_found_by_their_labels() {
        let collide = 42 << 32 | 7;
        let values: Vec<(String, u64)> = (0..5000u64)
            .map(|i| {
                (
                    format!("v{i}"),
                    if i % 100 == 0 {
                        collide
                    } else {
                        i.wrapping_mul(0x9e37_79b9_7f4a_7c15)
                    },
                )
            })
            .collect();
        let values: Vec<(&str, u64)> = values.iter().map(|(v, h)| (v.as_str(), *h)).collect();
        let mut ix = HeadIndex::new();
        assert_eq!(load(&mut ix, &values), Ok(()));
        assert_eq!(ix.len(), values.len());
        for (i, (v, hash)) in values.iter().enumerate() {
            assert_eq!(ix.find(*hash, &job(v)).map(|s| s.series_ref), Some(i as u64 + 1), "{v}");
            assert_eq!(ix.get(i as u64 + 1).map(|s| s.series_ref), Some(i as u64 + 1));
        }
        assert!(ix.find(collide, &job("v1")).is_none());
        assert_eq!(ix.select(&[Matcher::equal("job", "v4321")]).len(), 1);

        let mut twice = HeadIndex::new();
        assert_eq!(load(&mut twice, &[("a", 1), ("b", 2), ("a", 1)]), Err(3));
    }

    /// Label sets whose hashes collide (forced here; real hashes are keyed per process) are found, told apart
    /// and removed one by one.
    #[test]
    fn series_whose_label_hashes_collide_stay_apart() {
        let mut ix = HeadIndex::new();
        let h = 42 << 32 | 7;
        let a = create(&mut ix, h, &job("a"));
        let b = create(&mut ix, h, &job("b"));
        // Same 32 kept bits, different full hash.
        let c = create(&mut ix, 42 << 32 | 9, &job("c"));
        let found = |ix: &HeadIndex, hash, v| ix.find(hash, &job(v)).map(|s| s.series_ref);
        assert_eq!(found(&ix, h, "a"), Some(a.series_ref));
        assert_eq!(found(&ix, h, "b"), Some(b.series_ref));
        assert_eq!(found(&ix, 42 << 32 | 9, "c"), Some(c.series_ref));
        assert_eq!(found(&ix, h, "d"), None);

        ix.remove(&[a.series_ref]);
        assert_eq!(found(&ix, h, "a"), None);
        assert_eq!(found(&ix, h, "b"), Some(b.series_ref));
        assert_eq!(found(&ix, 42 << 32 | 9, "c"), Some(c.series_ref));
        assert!(ix.get(a.series_ref).is_none());
        assert_eq!(ix.get(b.series_ref).map(|s| s.series_ref), Some(b.series_ref));
        assert_eq!(ix.len(), 2);
        let mut all: Vec<u64> = ix.all_series().map(|s| s.series_ref).collect();
        all.sort_unstable();
        assert_eq!(all, vec![b.series_ref, c.series_ref]);
    }
}
