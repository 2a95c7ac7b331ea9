//! Postings: for every label pair, the sorted refs of the series that carry it, plus the list of all refs.
//!
//! Refs are handed out in increasing order and series are added in that order, so short lists grow by
//! pushing; an out-of-order add (replaying a WAL whose series records are not sorted) falls back to an insert.
//!
//! Memory: a label value carried by one series only (an `instance`, a `pod` of one container) is the common
//! case at high cardinality, so a pair's entry is one `u64`: the series ref itself when the pair has one
//! series, or (top bit set) the index of a list in `lists`. That costs 16 bytes of map entry instead of a
//! 32-byte entry plus a separately allocated list.
//!
//! Lists of several refs are short sorted `Vec`s up to [`SMALL_MAX`] refs and roaring bitmaps beyond: a pair
//! shared by many series (`env=production`, a metric name, a job) then costs about two bytes per ref, or
//! one bit when it covers most refs, instead of eight bytes plus the `Vec`'s growth slack. Which form a list
//! has depends on its length only, so adds and removals move a list across in both directions.

use roaring::RoaringTreemap;

use super::idhash::{IdMap, RunMap};

/// Entries with this bit set index `lists`; refs with it set (never seen in practice) always get a list.
const LIST_BIT: u64 = 1 << 63;

/// The longest list kept as a sorted `Vec`. A `RoaringTreemap` costs about 480 bytes before its first ref
/// (a B-tree leaf of 320 bytes, the container vector, the first container) and then two bytes per ref while
/// its refs are sparse; a `Vec<u64>` costs eight bytes per slot of capacity, which doubles. Up to 64 refs
/// the `Vec` is at most 512 bytes and smaller than the bitmap (about 610 bytes at 64 refs); its 65th ref
/// would double it to 1 KiB where the bitmap still takes about 610. Switching at the `Vec`'s capacity step
/// gives each list the smaller of the two forms (heap bytes measured with roaring 0.11.3).
const SMALL_MAX: usize = 64;

/// Lists a [`Settling`] hands out at a time.
const SETTLE_CHUNK: usize = 32;

/// The lists of a load waiting for their final form, handed out a few at a time to whichever thread asks: the
/// lists of a million-series load took 0.15 s to settle, alone at the end of the load.
pub(crate) struct Settling<'a>(std::sync::Mutex<Box<dyn Iterator<Item = &'a mut [List]> + Send + 'a>>);

impl Settling<'_> {
    /// Settles lists until none is left.
    pub(crate) fn work(&self) {
        loop {
            let next = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).next();
            let Some(lists) = next else { return };
            for list in lists {
                list.settle();
            }
        }
    }
}

/// Label pair (as symbol ids) -> sorted series refs.
#[derive(Debug, Default)]
pub(crate) struct Postings {
    /// Values by name. A name with a value per series (`instance`) has a million values; they are interned as
    /// their series are created, so new values take neighbouring ids and [`RunMap`] puts them side by side.
    by_name: IdMap<u32, RunMap<u32, u64>>,
    /// Lists of the pairs with more than one series; free slots are reused.
    lists: Vec<List>,
    free: Vec<u64>,
    all: List,
}

/// An owned postings list: sorted refs, no duplicates. `Sorted` holds at most [`SMALL_MAX`] refs and
/// `Roaring` more; [`List::add`] and [`List::remove`] keep it so.
#[derive(Debug)]
enum List {
    Sorted(Vec<u64>),
    Roaring(RoaringTreemap),
}

impl Default for List {
    fn default() -> Self {
        List::Sorted(Vec::new())
    }
}

impl List {
    fn view(&self) -> Refs<'_> {
        match self {
            List::Sorted(v) => Refs::Sorted(v),
            List::Roaring(t) => Refs::Roaring(t),
        }
    }

    fn add(&mut self, r: u64) {
        match self {
            List::Sorted(v) => {
                insert_sorted(v, r);
                if v.len() > SMALL_MAX {
                    *self = List::Roaring(roaring_of(v));
                }
            }
            List::Roaring(t) => add_to_roaring(t, r),
        }
    }

    /// [`List::add`] without moving the list to a bitmap: loads append to plain `Vec`s (a push where a bitmap
    /// insert costs several times more) and [`Postings::finish_load`] converts the long ones in one pass.
    fn add_loading(&mut self, r: u64) {
        match self {
            List::Sorted(v) => insert_sorted(v, r),
            List::Roaring(t) => add_to_roaring(t, r),
        }
    }

    /// Gives a `Vec` that outgrew [`SMALL_MAX`] during a load its bitmap form.
    fn settle(&mut self) {
        if let List::Sorted(v) = self
            && v.len() > SMALL_MAX
        {
            *self = List::Roaring(roaring_of(v));
        }
    }

    /// Removes the refs in `gone`, turning a bitmap that shrank to [`SMALL_MAX`] refs back into a `Vec`.
    fn remove(&mut self, gone: &RoaringTreemap) {
        match self {
            List::Sorted(v) => v.retain(|r| !gone.contains(*r)),
            List::Roaring(t) => {
                *t -= gone;
                if t.len() <= SMALL_MAX as u64 {
                    *self = List::Sorted(t.iter().collect());
                }
            }
        }
    }
}

/// A borrowed postings list: sorted refs, no duplicates.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Refs<'a> {
    /// A short list, or the one ref of a pair with a single series.
    Sorted(&'a [u64]),
    Roaring(&'a RoaringTreemap),
}

impl<'a> Refs<'a> {
    pub(crate) const EMPTY: Refs<'static> = Refs::Sorted(&[]);

    pub(crate) fn len(self) -> u64 {
        match self {
            Refs::Sorted(s) => s.len() as u64,
            Refs::Roaring(t) => t.len(),
        }
    }

    pub(crate) fn contains(self, r: u64) -> bool {
        match self {
            Refs::Sorted(s) => s.binary_search(&r).is_ok(),
            Refs::Roaring(t) => t.contains(r),
        }
    }

    /// The refs in increasing order.
    pub(crate) fn iter(self) -> RefsIter<'a> {
        match self {
            Refs::Sorted(s) => RefsIter::Sorted(s.iter()),
            Refs::Roaring(t) => RefsIter::Roaring(t.iter()),
        }
    }

    pub(crate) fn to_vec(self) -> Vec<u64> {
        self.iter().collect()
    }
}

/// Iterator over [`Refs`], in increasing order.
#[allow(
    clippy::large_enum_variant,
    reason = "lives on the stack for one query; boxing would allocate on every call"
)]
pub(crate) enum RefsIter<'a> {
    Sorted(std::slice::Iter<'a, u64>),
    Roaring(roaring::treemap::Iter<'a>),
}

impl Iterator for RefsIter<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        match self {
            RefsIter::Sorted(i) => i.next().copied(),
            RefsIter::Roaring(i) => i.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            RefsIter::Sorted(i) => i.size_hint(),
            RefsIter::Roaring(i) => i.size_hint(),
        }
    }
}

impl Postings {
    pub(crate) fn add(&mut self, series_ref: u64, labels: &[(u32, u32)]) {
        self.add_ref(series_ref);
        for &(name, value) in labels {
            self.add_pair(series_ref, name, value);
        }
    }

    /// Adds a series to the list of all series (the first part of [`Postings::add`]).
    pub(crate) fn add_ref(&mut self, series_ref: u64) {
        self.all.add(series_ref);
    }

    /// [`Postings::add_ref`] for a load; [`Postings::finish_load`] gives the list its final form.
    pub(crate) fn add_ref_loading(&mut self, series_ref: u64) {
        self.all.add_loading(series_ref);
    }

    /// Adds a series to the postings of one label pair. Returns the pair's list handle when the pair now has
    /// a list of several refs, for [`Postings::add_to_list`].
    pub(crate) fn add_pair(&mut self, series_ref: u64, name: u32, value: u32) -> Option<u64> {
        self.add_pair_to(series_ref, name, value, false)
    }

    /// [`Postings::add_pair`] for a load, growing lists as [`Postings::add_to_list`] does.
    pub(crate) fn add_pair_loading(&mut self, series_ref: u64, name: u32, value: u32) -> Option<u64> {
        self.add_pair_to(series_ref, name, value, true)
    }

    fn add_pair_to(&mut self, series_ref: u64, name: u32, value: u32, loading: bool) -> Option<u64> {
        let values = self.by_name.entry(name).or_default();
        match values.get(&value).copied() {
            None if series_ref & LIST_BIT == 0 => {
                values.insert(value, series_ref);
                None
            }
            None => {
                let slot = alloc_list(&mut self.lists, &mut self.free, vec![series_ref]);
                values.insert(value, slot);
                Some(slot)
            }
            Some(e) if e & LIST_BIT == 0 => {
                if e == series_ref {
                    return None;
                }
                let pair = if e < series_ref {
                    vec![e, series_ref]
                } else {
                    vec![series_ref, e]
                };
                let slot = alloc_list(&mut self.lists, &mut self.free, pair);
                values.insert(value, slot);
                Some(slot)
            }
            Some(e) => {
                let list = &mut self.lists[(e & !LIST_BIT) as usize];
                if loading {
                    list.add_loading(series_ref);
                } else {
                    list.add(series_ref);
                }
                Some(e)
            }
        }
    }

    /// Adds a series to the list `handle` (from [`Postings::add_pair`]) without looking the pair up, for a
    /// load: the list stays a `Vec` however long it grows until [`Postings::finish_load`]. Valid only while no
    /// series was removed since the handle was returned: removals free and reuse lists.
    pub(crate) fn add_to_list(&mut self, handle: u64, series_ref: u64) {
        debug_assert!(handle & LIST_BIT != 0, "{handle} is not a list handle");
        if let Some(list) = self.lists.get_mut((handle & !LIST_BIT) as usize) {
            list.add_loading(series_ref);
        }
    }

    /// Ends a load: every list longer than [`SMALL_MAX`] becomes a bitmap, built from the sorted `Vec` in one
    /// pass. Until then lists answer the same, only in their larger form.
    pub(crate) fn finish_load(&mut self) {
        self.settling().work();
    }

    /// [`Postings::finish_load`] as work that several threads can share ([`Settling::work`]).
    pub(crate) fn settling(&mut self) -> Settling<'_> {
        let lists = std::iter::once(std::slice::from_mut(&mut self.all)).chain(self.lists.chunks_mut(SETTLE_CHUNK));
        Settling(std::sync::Mutex::new(Box::new(lists)))
    }

    fn resolve<'a>(&'a self, e: &'a u64) -> Refs<'a> {
        if e & LIST_BIT == 0 {
            Refs::Sorted(std::slice::from_ref(e))
        } else {
            self.lists.get((e & !LIST_BIT) as usize).map_or(Refs::EMPTY, List::view)
        }
    }

    /// Refs of the series with label `name` = `value`.
    pub(crate) fn get(&self, name: u32, value: u32) -> Refs<'_> {
        self.by_name
            .get(&name)
            .and_then(|values| values.get(&value))
            .map_or(Refs::EMPTY, |e| self.resolve(e))
    }

    /// All values of label `name`, with their postings.
    pub(crate) fn values(&self, name: u32) -> impl Iterator<Item = (u32, Refs<'_>)> + '_ {
        self.by_name
            .get(&name)
            .into_iter()
            .flat_map(move |values| values.iter().map(move |(v, e)| (*v, self.resolve(e))))
    }

    /// Every label name in use.
    pub(crate) fn names(&self) -> impl Iterator<Item = u32> + '_ {
        self.by_name.keys().copied()
    }

    pub(crate) fn all(&self) -> Refs<'_> {
        self.all.view()
    }

    /// Removes the series in `gone` (`labels` gives each one's label pairs); empty lists and names go too.
    pub(crate) fn remove(&mut self, gone: &[(u64, &[(u32, u32)])]) {
        let mut refs: Vec<u64> = gone.iter().map(|(r, _)| *r).collect();
        refs.sort_unstable();
        let refs = roaring_of(&refs);
        self.all.remove(&refs);
        let mut pairs: Vec<(u32, u32)> = gone.iter().flat_map(|(_, l)| l.iter().copied()).collect();
        pairs.sort_unstable();
        pairs.dedup();
        for (name, value) in pairs {
            let Some(values) = self.by_name.get_mut(&name) else {
                continue;
            };
            if let Some(&e) = values.get(&value) {
                if e & LIST_BIT == 0 {
                    if refs.contains(e) {
                        values.remove(&value);
                    }
                } else {
                    let slot = (e & !LIST_BIT) as usize;
                    let list = &mut self.lists[slot];
                    list.remove(&refs);
                    let freed = match list.view() {
                        Refs::Sorted([]) => {
                            values.remove(&value);
                            true
                        }
                        Refs::Sorted(&[one]) if one & LIST_BIT == 0 => {
                            values.insert(value, one);
                            true
                        }
                        _ => false,
                    };
                    if freed {
                        *list = List::default();
                        self.free.push(slot as u64);
                    }
                }
            }
            if values.is_empty() {
                self.by_name.remove(&name);
            }
        }
    }
}

fn alloc_list(lists: &mut Vec<List>, free: &mut Vec<u64>, refs: Vec<u64>) -> u64 {
    let list = List::Sorted(refs);
    match free.pop() {
        Some(slot) => {
            lists[slot as usize] = list;
            slot | LIST_BIT
        }
        None => {
            lists.push(list);
            (lists.len() as u64 - 1) | LIST_BIT
        }
    }
}

fn insert_sorted(list: &mut Vec<u64>, r: u64) {
    match list.last() {
        None => list.push(r),
        Some(&last) if last < r => list.push(r),
        Some(_) => {
            if let Err(pos) = list.binary_search(&r) {
                list.insert(pos, r);
            }
        }
    }
}

/// Inserts even when `r` is above every ref (the usual case): roaring's append path (`try_push`) finds a
/// dense container's largest value by scanning its 1,024 words from the top, so appending in order to a list
/// that holds most refs (`env`, `zone`, the list of all series) costs more than `insert`, which sets one bit
/// there and binary-searches a sparse container. Measured on the memory bench's lists: 29 ns per add with
/// `insert`, 66 ns with `try_push` (200,000 series).
fn add_to_roaring(t: &mut RoaringTreemap, r: u64) {
    t.insert(r);
}

fn roaring_of(sorted: &[u64]) -> RoaringTreemap {
    RoaringTreemap::from_sorted_iter(sorted.iter().copied()).unwrap_or_else(|_| {
        // Not sorted after all (a bug elsewhere): build it ref by ref rather than lose any.
        let mut t = RoaringTreemap::new();
        for &r in sorted {
            add_to_roaring(&mut t, r);
        }
        t
    })
}

/// Refs in every one of `lists`, sorted. When the shortest list is a short `Vec` (or a single ref), its refs
/// are looked up in the others rather than walking lists of up to every series; roaring lists are
/// intersected with each other container by container.
pub(crate) fn intersect_lists(mut lists: Vec<Refs<'_>>) -> Vec<u64> {
    lists.sort_unstable_by_key(|l| l.len());
    let Some((shortest, others)) = lists.split_first() else {
        return Vec::new();
    };
    if others.is_empty() {
        return shortest.to_vec();
    }
    match shortest {
        Refs::Sorted(s) => s
            .iter()
            .copied()
            .filter(|&r| others.iter().all(|l| l.contains(r)))
            .collect(),
        Refs::Roaring(first) => {
            // `&` on two bitmaps clones the smaller one too; starting from the shortest list does the same.
            let mut acc = (*first).clone();
            for l in others {
                if let Refs::Roaring(t) = l {
                    acc &= *t;
                }
            }
            let sorted: Vec<&Refs<'_>> = others.iter().filter(|l| matches!(l, Refs::Sorted(_))).collect();
            acc.iter().filter(|&r| sorted.iter().all(|l| l.contains(r))).collect()
        }
    }
}

/// Refs in any of `lists`, sorted and without duplicates.
pub(crate) fn union_lists<'a>(lists: impl IntoIterator<Item = Refs<'a>>) -> Vec<u64> {
    let mut short: Vec<u64> = Vec::new();
    let mut roaring: Option<RoaringTreemap> = None;
    for l in lists {
        match l {
            Refs::Sorted(s) => short.extend_from_slice(s),
            Refs::Roaring(t) => match roaring.as_mut() {
                Some(acc) => *acc |= t,
                None => roaring = Some(t.clone()),
            },
        }
    }
    short.sort_unstable();
    let Some(roaring) = roaring else {
        short.dedup();
        return short;
    };
    // Two sorted runs back to back: the stable sort finds them and merges in one linear pass.
    let mut out: Vec<u64> = roaring.iter().chain(short).collect();
    out.sort();
    out.dedup();
    out
}

/// Intersection of two sorted lists (a block's series ids).
pub(crate) fn intersect<T: Copy + Ord>(a: &[T], b: &[T]) -> Vec<T> {
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::with_capacity(a.len().min(b.len()));
    while let (Some(&x), Some(&y)) = (a.get(i), b.get(j)) {
        match x.cmp(&y) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                out.push(x);
                i += 1;
                j += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_roaring(refs: Refs<'_>) -> bool {
        matches!(refs, Refs::Roaring(_))
    }

    #[test]
    fn lists_stay_sorted_and_set_operations_work() {
        let mut p = Postings::default();
        p.add(5, &[(0, 1), (2, 3)]);
        p.add(2, &[(0, 1)]);
        p.add(9, &[(0, 4)]);
        p.add(2, &[(0, 1)]);
        assert_eq!(p.all().to_vec(), [2, 5, 9]);
        assert_eq!(p.get(0, 1).to_vec(), [2, 5]);
        assert_eq!(p.get(0, 9).len(), 0);
        assert_eq!(p.get(7, 1).len(), 0);
        let mut values: Vec<u32> = p.values(0).map(|(v, _)| v).collect();
        values.sort_unstable();
        assert_eq!(values, vec![1, 4]);
        assert_eq!(intersect(&[1, 3, 5, 7], &[3, 4, 5, 8]), vec![3, 5]);
    }

    /// A load appends to plain `Vec`s past `SMALL_MAX` and `finish_load` converts them; the lists answer the
    /// same before and after, and the same as lists built by plain adds.
    #[test]
    fn a_load_grows_vecs_and_finishing_it_gives_them_their_final_form() {
        let n = 3 * SMALL_MAX as u64;
        let (mut loaded, mut plain) = (Postings::default(), Postings::default());
        let mut handle = None;
        for r in 1..=n {
            loaded.add_ref_loading(r);
            match handle {
                Some(h) => loaded.add_to_list(h, r),
                None => handle = loaded.add_pair_loading(r, 0, 0),
            }
            loaded.add_pair_loading(r, 1, r as u32 % 2);
            plain.add(r, &[(0, 0), (1, r as u32 % 2)]);
        }
        loaded.add_ref_loading(n + 1);
        loaded.add_pair_loading(n + 1, 2, 0);
        plain.add(n + 1, &[(2, 0)]);
        for refs in [loaded.get(0, 0), loaded.get(1, 0), loaded.get(1, 1), loaded.all()] {
            assert!(!is_roaring(refs), "still Vecs while loading");
        }
        let answers = |p: &Postings| {
            let pairs: Vec<Vec<u64>> = [(0, 0), (1, 0), (1, 1), (2, 0)]
                .iter()
                .map(|&(n, v)| p.get(n, v).to_vec())
                .collect();
            (p.all().to_vec(), pairs)
        };
        assert_eq!(answers(&loaded), answers(&plain));
        loaded.finish_load();
        for refs in [loaded.get(0, 0), loaded.get(1, 0), loaded.get(1, 1), loaded.all()] {
            assert!(is_roaring(refs), "bitmaps once the load is finished");
        }
        assert!(!is_roaring(loaded.get(2, 0)));
        assert_eq!(answers(&loaded), answers(&plain));
        for (n, v) in [(0, 0), (1, 0), (1, 1), (2, 0)] {
            assert_eq!(
                is_roaring(loaded.get(n, v)),
                is_roaring(plain.get(n, v)),
                "form of pair {n} {v}"
            );
        }
    }

    /// Threads sharing a load's settling ([`Postings::settling`]) settle every list exactly as one thread
    /// does: more lists than one hand-out, long and short ones, and the list of all series.
    #[test]
    fn lists_settled_by_several_threads_end_as_by_one() {
        let loaded = || {
            let mut p = Postings::default();
            for r in 1..=5000u64 {
                p.add_ref_loading(r);
                // 100 values of name 0 (50 refs each: stays a Vec), 3 of name 1 (a bitmap each).
                p.add_pair_loading(r, 0, (r % 100) as u32);
                p.add_pair_loading(r, 1, (r % 3) as u32);
            }
            p
        };
        let (mut one, mut shared) = (loaded(), loaded());
        assert!(one.lists.len() > 3 * SETTLE_CHUNK, "several hand-outs");
        one.finish_load();
        let settling = shared.settling();
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| settling.work());
            }
        });
        drop(settling);
        let forms = |p: &Postings| -> Vec<(bool, Vec<u64>)> {
            let pairs = (0..100).map(|v| (0, v)).chain((0..3).map(|v| (1, v)));
            std::iter::once(p.all())
                .chain(pairs.map(|(n, v)| p.get(n, v)))
                .map(|refs| (is_roaring(refs), refs.to_vec()))
                .collect()
        };
        let (want, got) = (forms(&one), forms(&shared));
        assert_eq!(got, want);
        assert_eq!(
            want.iter().filter(|(roaring, _)| *roaring).count(),
            4,
            "all series and name 1's lists"
        );
    }

    /// A list becomes a bitmap when it grows past `SMALL_MAX` refs and a `Vec` again when removals bring it
    /// back; the set operations give the same answers whatever mix of forms they get.
    #[test]
    fn lists_change_form_at_the_threshold_and_set_operations_mix_forms() {
        let mut p = Postings::default();
        let n = SMALL_MAX as u64;
        // Pair (0, 0) on every ref, (0, 1) on the even ones, (1, 0) on 3 and 4 only.
        for r in 1..=n {
            p.add(r, &[(0, 0)]);
        }
        assert!(!is_roaring(p.get(0, 0)) && !is_roaring(p.all()), "{n} refs stay a Vec");
        for r in (n + 1..=3 * n).rev() {
            p.add(r, &[(0, 0)]);
        }
        assert!(
            is_roaring(p.get(0, 0)) && is_roaring(p.all()),
            "more refs become a bitmap"
        );
        assert_eq!(
            p.get(0, 0).to_vec(),
            (1..=3 * n).collect::<Vec<_>>(),
            "out-of-order adds"
        );

        let mut q = Postings::default();
        for r in 1..=3 * n {
            let mut labels = vec![(0, 0)];
            if r % 2 == 0 {
                labels.push((1, 1));
            }
            if r == 3 || r == 4 {
                labels.push((2, 0));
            }
            q.add(r, &labels);
        }
        let (every, even, few) = (q.get(0, 0), q.get(1, 1), q.get(2, 0));
        assert!(is_roaring(every) && is_roaring(even) && !is_roaring(few));
        assert_eq!(intersect_lists(vec![every, even, few]), [4]);
        assert_eq!(
            intersect_lists(vec![every, even]),
            (2..=3 * n).step_by(2).collect::<Vec<_>>()
        );
        assert_eq!(intersect_lists(vec![few, Refs::EMPTY]), [] as [u64; 0]);
        assert_eq!(intersect_lists(vec![]), [] as [u64; 0]);
        let mut odd_and_few = (1..=3 * n).step_by(2).collect::<Vec<_>>();
        odd_and_few.push(4);
        odd_and_few.sort_unstable();
        let odd = roaring_of(&(1..=3 * n).step_by(2).collect::<Vec<_>>());
        assert_eq!(
            union_lists([Refs::Roaring(&odd), few, even]),
            (1..=3 * n).collect::<Vec<_>>()
        );
        assert_eq!(union_lists([few, Refs::Roaring(&odd)]), odd_and_few);
        assert_eq!(union_lists([few, Refs::Sorted(&[1, 4, 9])]), [1, 3, 4, 9]);

        // Removing all but `n` refs of the pair turns it back into a `Vec`.
        let labels = [(0, 0)];
        let gone: Vec<(u64, &[(u32, u32)])> = (n + 1..=3 * n).map(|r| (r, &labels[..])).collect();
        p.remove(&gone);
        assert!(!is_roaring(p.get(0, 0)) && !is_roaring(p.all()), "back to {n} refs");
        assert_eq!(p.get(0, 0).to_vec(), (1..=n).collect::<Vec<_>>());
    }

    /// The compact entries (single ref inline, short `Vec`s, bitmaps, free-slot reuse) answer exactly as a
    /// plain map of sorted lists, through any mix of adds (in and out of order, repeated, in runs that carry
    /// lists past `SMALL_MAX`) and removals (that bring them back).
    mod model {
        use super::*;
        use proptest::prelude::*;
        use std::collections::{BTreeMap, BTreeSet};

        const NAMES: u32 = 3;
        const VALUES: u32 = 3;

        #[derive(Debug, Clone)]
        enum Op {
            /// Adds refs `start..start + len`, all with these labels.
            Add(u64, u64, Vec<(u32, u32)>),
            Remove(Vec<u64>),
            RemoveRange(u64, u64),
        }

        fn labels() -> impl Strategy<Value = Vec<(u32, u32)>> {
            proptest::collection::vec((0..NAMES, 0..VALUES), 0..4)
        }

        fn op() -> impl Strategy<Value = Op> {
            // Refs from 0 to about 3 x SMALL_MAX, one past the bitmap's 32-bit key, one with the list bit.
            let one = prop_oneof![0u64..200, Just(1 << 32 | 5), Just(LIST_BIT | 7)];
            prop_oneof![
                3 => (one, labels()).prop_map(|(r, l)| Op::Add(r, 1, l)),
                2 => (0u64..200, 0u64..120, labels()).prop_map(|(r, n, l)| Op::Add(r, n, l)),
                1 => proptest::collection::vec(0u64..200, 0..6).prop_map(Op::Remove),
                1 => (0u64..200, 0u64..120).prop_map(|(r, n)| Op::RemoveRange(r, n)),
            ]
        }

        proptest! {
            #[test]
            fn compact_postings_match_a_plain_model(ops in proptest::collection::vec(op(), 0..40)) {
                let mut p = Postings::default();
                // Labels of each live ref, as the index keeps them (a ref is added once with one label set).
                let mut live: BTreeMap<u64, Vec<(u32, u32)>> = BTreeMap::new();
                for op in ops {
                    match op {
                        Op::Add(start, len, mut labels) => {
                            labels.sort_unstable();
                            labels.dedup_by_key(|(n, _)| *n);
                            for r in start..start + len {
                                if live.contains_key(&r) {
                                    continue;
                                }
                                p.add(r, &labels);
                                live.insert(r, labels.clone());
                            }
                        }
                        Op::Remove(refs) => remove(&mut p, &mut live, refs),
                        Op::RemoveRange(start, len) => remove(&mut p, &mut live, (start..start + len).collect()),
                    }
                    let mut want: BTreeMap<(u32, u32), BTreeSet<u64>> = BTreeMap::new();
                    for (r, labels) in &live {
                        for pair in labels {
                            want.entry(*pair).or_default().insert(*r);
                        }
                    }
                    let want_of = |n, v| -> Vec<u64> {
                        want.get(&(n, v)).map(|s| s.iter().copied().collect()).unwrap_or_default()
                    };
                    let all: Vec<u64> = live.keys().copied().collect();
                    prop_assert_eq!(p.all().to_vec(), all.clone());
                    prop_assert_eq!(is_roaring(p.all()), all.len() > SMALL_MAX, "form of all");
                    for n in 0..NAMES {
                        for v in 0..VALUES {
                            let w = want_of(n, v);
                            let got = p.get(n, v);
                            prop_assert_eq!(got.to_vec(), w.clone(), "pair {} {}", n, v);
                            prop_assert_eq!(got.iter().collect::<Vec<_>>(), w.clone(), "iter of pair {} {}", n, v);
                            prop_assert_eq!(got.len(), w.len() as u64, "len of pair {} {}", n, v);
                            prop_assert_eq!(is_roaring(got), w.len() > SMALL_MAX, "form of pair {} {}", n, v);
                            // Intersections as `select` makes them, of lists in any mix of forms.
                            let other = want_of((n + 1) % NAMES, v);
                            let both: Vec<u64> = w.iter().copied().filter(|r| other.contains(r)).collect();
                            let lists = vec![p.all(), got, p.get((n + 1) % NAMES, v)];
                            prop_assert_eq!(intersect_lists(lists), both, "intersection at {} {}", n, v);
                        }
                        let mut got: Vec<(u32, Vec<u64>)> = p.values(n).map(|(v, l)| (v, l.to_vec())).collect();
                        got.sort();
                        let w: Vec<(u32, Vec<u64>)> = want
                            .iter()
                            .filter(|((wn, _), _)| *wn == n)
                            .map(|((_, v), s)| (*v, s.iter().copied().collect()))
                            .collect();
                        let any: BTreeSet<u64> = w.iter().flat_map(|(_, s)| s.iter().copied()).collect();
                        prop_assert_eq!(got, w, "values of name {}", n);
                        let union = union_lists(p.values(n).map(|(_, l)| l));
                        prop_assert_eq!(union, any.into_iter().collect::<Vec<_>>(), "union of name {}", n);
                    }
                    let mut names: Vec<u32> = p.names().collect();
                    names.sort_unstable();
                    let mut wn: Vec<u32> = want.keys().map(|(n, _)| *n).collect();
                    wn.dedup();
                    prop_assert_eq!(names, wn);
                }
            }
        }

        fn remove(p: &mut Postings, live: &mut BTreeMap<u64, Vec<(u32, u32)>>, refs: Vec<u64>) {
            let gone: Vec<(u64, Vec<(u32, u32)>)> =
                refs.iter().filter_map(|r| live.remove(r).map(|l| (*r, l))).collect();
            let arg: Vec<(u64, &[(u32, u32)])> = gone.iter().map(|(r, l)| (*r, &l[..])).collect();
            p.remove(&arg);
        }
    }
}
