//! Postings: for every label pair, the sorted refs of the series that carry it, plus the list of all refs.
//!
//! Refs are handed out in increasing order and series are added in that order, so lists grow by pushing;
//! an out-of-order add (replaying a WAL whose series records are not sorted) falls back to an insert.
//!
//! Memory: a label value carried by one series only (an `instance`, a `pod` of one container) is the common
//! case at high cardinality, so a pair's entry is one `u64`: the series ref itself when the pair has one
//! series, or (top bit set) the index of a list in `lists`. That costs 16 bytes of map entry instead of a
//! 32-byte entry plus a separately allocated `Vec`.

use super::idhash::{IdMap, IdSet};

/// Entries with this bit set index `lists`; refs with it set (never seen in practice) always get a list.
const LIST_BIT: u64 = 1 << 63;

/// Label pair (as symbol ids) -> sorted series refs.
#[derive(Debug, Default)]
pub(crate) struct Postings {
    by_name: IdMap<u32, IdMap<u32, u64>>,
    /// Lists of the pairs with more than one series; free slots are reused.
    lists: Vec<Vec<u64>>,
    free: Vec<u64>,
    all: Vec<u64>,
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
        insert_sorted(&mut self.all, series_ref);
    }

    /// Adds a series to the postings of one label pair. Returns the pair's list handle when the pair now has
    /// a list of several refs, for [`Postings::add_to_list`].
    pub(crate) fn add_pair(&mut self, series_ref: u64, name: u32, value: u32) -> Option<u64> {
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
                insert_sorted(&mut self.lists[(e & !LIST_BIT) as usize], series_ref);
                Some(e)
            }
        }
    }

    /// Adds a series to the list `handle` (from [`Postings::add_pair`]) without looking the pair up. Valid
    /// only while no series was removed since the handle was returned: removals free and reuse lists.
    pub(crate) fn add_to_list(&mut self, handle: u64, series_ref: u64) {
        debug_assert!(handle & LIST_BIT != 0, "{handle} is not a list handle");
        if let Some(list) = self.lists.get_mut((handle & !LIST_BIT) as usize) {
            insert_sorted(list, series_ref);
        }
    }

    fn resolve<'a>(&'a self, e: &'a u64) -> &'a [u64] {
        if e & LIST_BIT == 0 {
            std::slice::from_ref(e)
        } else {
            self.lists.get((e & !LIST_BIT) as usize).map_or(&[], Vec::as_slice)
        }
    }

    /// Refs of the series with label `name` = `value`.
    pub(crate) fn get(&self, name: u32, value: u32) -> &[u64] {
        self.by_name
            .get(&name)
            .and_then(|values| values.get(&value))
            .map_or(&[], |e| self.resolve(e))
    }

    /// All values of label `name`, with their postings.
    pub(crate) fn values(&self, name: u32) -> impl Iterator<Item = (u32, &[u64])> + '_ {
        self.by_name
            .get(&name)
            .into_iter()
            .flat_map(move |values| values.iter().map(move |(v, e)| (*v, self.resolve(e))))
    }

    /// Every label name in use.
    pub(crate) fn names(&self) -> impl Iterator<Item = u32> + '_ {
        self.by_name.keys().copied()
    }

    pub(crate) fn all(&self) -> &[u64] {
        &self.all
    }

    /// Removes the series in `gone` (`labels` gives each one's label pairs); empty lists and names go too.
    pub(crate) fn remove(&mut self, gone: &[(u64, &[(u32, u32)])]) {
        let refs: IdSet<u64> = gone.iter().map(|(r, _)| *r).collect();
        self.all.retain(|r| !refs.contains(r));
        let mut pairs: Vec<(u32, u32)> = gone.iter().flat_map(|(_, l)| l.iter().copied()).collect();
        pairs.sort_unstable();
        pairs.dedup();
        for (name, value) in pairs {
            let Some(values) = self.by_name.get_mut(&name) else {
                continue;
            };
            if let Some(&e) = values.get(&value) {
                if e & LIST_BIT == 0 {
                    if refs.contains(&e) {
                        values.remove(&value);
                    }
                } else {
                    let slot = (e & !LIST_BIT) as usize;
                    let list = &mut self.lists[slot];
                    list.retain(|r| !refs.contains(r));
                    match list.as_slice() {
                        [] => {
                            values.remove(&value);
                            *list = Vec::new();
                            self.free.push(slot as u64);
                        }
                        &[one] if one & LIST_BIT == 0 => {
                            values.insert(value, one);
                            *list = Vec::new();
                            self.free.push(slot as u64);
                        }
                        _ => {}
                    }
                }
            }
            if values.is_empty() {
                self.by_name.remove(&name);
            }
        }
    }
}

fn alloc_list(lists: &mut Vec<Vec<u64>>, free: &mut Vec<u64>, list: Vec<u64>) -> u64 {
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

/// Intersection of two sorted lists (head series refs, or a block's series ids).
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

/// Union of sorted lists, sorted and without duplicates.
pub(crate) fn union<'a>(lists: impl IntoIterator<Item = &'a [u64]>) -> Vec<u64> {
    let mut out: Vec<u64> = lists.into_iter().flatten().copied().collect();
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_stay_sorted_and_set_operations_work() {
        let mut p = Postings::default();
        p.add(5, &[(0, 1), (2, 3)]);
        p.add(2, &[(0, 1)]);
        p.add(9, &[(0, 4)]);
        p.add(2, &[(0, 1)]);
        assert_eq!(p.all(), &[2, 5, 9]);
        assert_eq!(p.get(0, 1), &[2, 5]);
        assert_eq!(p.get(0, 9), &[] as &[u64]);
        assert_eq!(p.get(7, 1), &[] as &[u64]);
        let mut values: Vec<u32> = p.values(0).map(|(v, _)| v).collect();
        values.sort_unstable();
        assert_eq!(values, vec![1, 4]);
        assert_eq!(intersect(&[1, 3, 5, 7], &[3, 4, 5, 8]), vec![3, 5]);
        assert_eq!(union([&[1u64, 5][..], &[2, 5, 9]]), vec![1, 2, 5, 9]);
    }

    /// The compact entries (single ref inline, shared lists with free-slot reuse) answer exactly as a plain
    /// map of sorted lists, through any mix of adds (in and out of order, repeated) and removals.
    mod model {
        use super::*;
        use proptest::prelude::*;
        use std::collections::{BTreeMap, BTreeSet};

        #[derive(Debug, Clone)]
        enum Op {
            Add(u64, Vec<(u32, u32)>),
            Remove(Vec<u64>),
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                3 => (
                    prop_oneof![0u64..40, Just(LIST_BIT | 7)],
                    proptest::collection::vec((0u32..3, 0u32..6), 0..4)
                )
                    .prop_map(|(r, l)| Op::Add(r, l)),
                1 => proptest::collection::vec(0u64..40, 0..6).prop_map(Op::Remove),
            ]
        }

        proptest! {
            #[test]
            fn compact_postings_match_a_plain_model(ops in proptest::collection::vec(op(), 0..60)) {
                let mut p = Postings::default();
                // Labels of each live ref, as the index keeps them (a ref is added once with one label set).
                let mut live: BTreeMap<u64, Vec<(u32, u32)>> = BTreeMap::new();
                for op in ops {
                    match op {
                        Op::Add(r, mut labels) => {
                            if live.contains_key(&r) {
                                continue;
                            }
                            labels.sort_unstable();
                            labels.dedup_by_key(|(n, _)| *n);
                            p.add(r, &labels);
                            live.insert(r, labels);
                        }
                        Op::Remove(refs) => {
                            let gone: Vec<(u64, Vec<(u32, u32)>)> =
                                refs.iter().filter_map(|r| live.remove(r).map(|l| (*r, l))).collect();
                            let arg: Vec<(u64, &[(u32, u32)])> = gone.iter().map(|(r, l)| (*r, &l[..])).collect();
                            p.remove(&arg);
                        }
                    }
                    let mut want: BTreeMap<(u32, u32), BTreeSet<u64>> = BTreeMap::new();
                    for (r, labels) in &live {
                        for pair in labels {
                            want.entry(*pair).or_default().insert(*r);
                        }
                    }
                    let all: Vec<u64> = live.keys().copied().collect();
                    prop_assert_eq!(p.all(), all.as_slice());
                    for n in 0..3 {
                        for v in 0..6 {
                            let w: Vec<u64> = want.get(&(n, v)).map(|s| s.iter().copied().collect()).unwrap_or_default();
                            prop_assert_eq!(p.get(n, v), w.as_slice(), "pair {} {}", n, v);
                        }
                        let mut got: Vec<(u32, Vec<u64>)> = p.values(n).map(|(v, l)| (v, l.to_vec())).collect();
                        got.sort();
                        let w: Vec<(u32, Vec<u64>)> = want
                            .iter()
                            .filter(|((wn, _), _)| *wn == n)
                            .map(|((_, v), s)| (*v, s.iter().copied().collect()))
                            .collect();
                        prop_assert_eq!(got, w, "values of name {}", n);
                    }
                    let mut names: Vec<u32> = p.names().collect();
                    names.sort_unstable();
                    let mut wn: Vec<u32> = want.keys().map(|(n, _)| *n).collect();
                    wn.dedup();
                    prop_assert_eq!(names, wn);
                }
            }
        }
    }
}
