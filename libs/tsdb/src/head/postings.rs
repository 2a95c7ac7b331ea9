//! Postings: for every label pair, the sorted refs of the series that carry it, plus the list of all refs.
//!
//! Refs are handed out in increasing order and series are added in that order, so lists grow by pushing;
//! an out-of-order add (replaying a WAL whose series records are not sorted) falls back to an insert.

use std::collections::HashMap;

/// Label pair (as symbol ids) -> sorted series refs.
#[derive(Debug, Default)]
pub(crate) struct Postings {
    by_name: HashMap<u32, HashMap<u32, Vec<u64>>>,
    all: Vec<u64>,
}

impl Postings {
    pub(crate) fn add(&mut self, series_ref: u64, labels: &[(u32, u32)]) {
        insert_sorted(&mut self.all, series_ref);
        for &(name, value) in labels {
            insert_sorted(
                self.by_name.entry(name).or_default().entry(value).or_default(),
                series_ref,
            );
        }
    }

    /// Refs of the series with label `name` = `value`.
    pub(crate) fn get(&self, name: u32, value: u32) -> &[u64] {
        self.by_name
            .get(&name)
            .and_then(|values| values.get(&value))
            .map_or(&[], Vec::as_slice)
    }

    /// All values of label `name`, with their postings.
    pub(crate) fn values(&self, name: u32) -> impl Iterator<Item = (u32, &[u64])> + '_ {
        self.by_name
            .get(&name)
            .into_iter()
            .flat_map(|values| values.iter().map(|(v, refs)| (*v, refs.as_slice())))
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
        let refs: std::collections::HashSet<u64> = gone.iter().map(|(r, _)| *r).collect();
        self.all.retain(|r| !refs.contains(r));
        let mut pairs: Vec<(u32, u32)> = gone.iter().flat_map(|(_, l)| l.iter().copied()).collect();
        pairs.sort_unstable();
        pairs.dedup();
        for (name, value) in pairs {
            let Some(values) = self.by_name.get_mut(&name) else {
                continue;
            };
            if let Some(list) = values.get_mut(&value) {
                list.retain(|r| !refs.contains(r));
                if list.is_empty() {
                    values.remove(&value);
                }
            }
            if values.is_empty() {
                self.by_name.remove(&name);
            }
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
}
