//! The head's symbol table: one copy of every distinct label name and value, referred to by a `u32` id.
//!
//! Series store their labels as pairs of ids (8 bytes a label), so a string shared by a million series is
//! kept once. Symbols are never removed while the head lives; dropping unused ones belongs to head
//! truncation (after a block is cut), which resets the table.
//!
//! Memory: at high cardinality most symbols are used by one series (an `instance`), so a symbol's overhead
//! matters as much as its bytes. All strings are concatenated in one arena (no allocation per string), an id
//! maps to the end offset of its string (8 bytes), and the lookup map holds a 64-bit hash of the string and
//! the id (16 bytes an entry); the rare ids whose hashes collide are kept in a side map. The hash is keyed
//! per table at random, so clients cannot pick label values that collide.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

use super::idhash::IdMap;

/// Interned strings, by id and by content.
#[derive(Debug, Default)]
pub(crate) struct SymbolTable {
    /// Every string, concatenated in id order.
    arena: String,
    /// End offset of string `id` in `arena` (it starts where `id - 1` ends).
    ends: Vec<u64>,
    /// Hash of a string -> the first id with that hash.
    by_hash: IdMap<u64, u32>,
    /// Hash -> further ids whose strings collide on it.
    collisions: HashMap<u64, Vec<u32>>,
    hasher: RandomState,
}

impl SymbolTable {
    /// The id of `s`, adding it if new. Ids are dense, in order of first use.
    pub(crate) fn intern(&mut self, s: &str) -> u32 {
        self.intern_hashed(self.hasher.hash_one(s), s)
    }

    /// The hasher strings are looked up with: startup workers hash a snapshot's or WAL's strings with it
    /// ahead of [`SymbolTable::intern_hashed`].
    pub(crate) fn hasher(&self) -> &RandomState {
        &self.hasher
    }

    /// [`SymbolTable::intern`] of a string whose hash `h` was computed with [`SymbolTable::hasher`].
    pub(crate) fn intern_hashed(&mut self, h: u64, s: &str) -> u32 {
        debug_assert_eq!(h, self.hasher.hash_one(s), "hash of {s:?} from another hasher");
        if let Some(id) = self.lookup(h, s) {
            return id;
        }
        // More than 4 billion distinct strings cannot be held in memory anyway.
        let id = u32::try_from(self.ends.len()).unwrap_or(u32::MAX);
        self.arena.push_str(s);
        self.ends.push(self.arena.len() as u64);
        match self.by_hash.entry(h) {
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(id);
            }
            std::collections::hash_map::Entry::Occupied(_) => self.collisions.entry(h).or_default().push(id),
        }
        id
    }

    fn lookup(&self, h: u64, s: &str) -> Option<u32> {
        let first = *self.by_hash.get(&h)?;
        if self.resolve(first) == s {
            return Some(first);
        }
        self.collisions
            .get(&h)?
            .iter()
            .copied()
            .find(|&id| self.resolve(id) == s)
    }

    /// The id of `s` if it is interned.
    pub(crate) fn id(&self, s: &str) -> Option<u32> {
        self.lookup(self.hasher.hash_one(s), s)
    }

    /// The string of an id; the empty string for an id this table never handed out (a bug, checked in debug
    /// builds).
    pub(crate) fn resolve(&self, id: u32) -> &str {
        let i = id as usize;
        debug_assert!(i < self.ends.len(), "unknown symbol id {id}");
        let (Some(&end), start) = (self.ends.get(i), i.checked_sub(1).and_then(|p| self.ends.get(p))) else {
            return "";
        };
        let start = start.copied().unwrap_or(0);
        // Offsets are those of whole strings pushed onto the arena, hence char boundaries.
        self.arena.get(start as usize..end as usize).unwrap_or("")
    }

    /// Number of distinct strings.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_is_stable_and_deduplicated() {
        let mut t = SymbolTable::default();
        let a = t.intern("job");
        let b = t.intern("api");
        assert_ne!(a, b);
        assert_eq!(t.intern("job"), a);
        assert_eq!(t.len(), 2);
        assert_eq!(t.resolve(a), "job");
        assert_eq!(t.id("api"), Some(b));
        assert_eq!(t.id("nope"), None);
        let empty = t.intern("");
        assert_eq!(t.resolve(empty), "");
        assert_eq!(t.resolve(b), "api", "the empty string does not shift others");
    }

    #[test]
    fn colliding_hashes_still_find_each_string() {
        let mut t = SymbolTable::default();
        let a = t.intern("a");
        // Force a collision: file "b" under the hash of "a", as a colliding string would be.
        let h = t.hasher.hash_one("a");
        t.arena.push('b');
        t.ends.push(t.arena.len() as u64);
        t.collisions.entry(h).or_default().push(1);
        assert_eq!(t.lookup(h, "a"), Some(a));
        assert_eq!(t.lookup(h, "b"), Some(1));
        assert_eq!(t.lookup(h, "c"), None);
    }

    proptest::proptest! {
        #[test]
        fn ids_resolve_to_their_strings(strings in proptest::collection::vec(".{0,6}", 0..50)) {
            let mut t = SymbolTable::default();
            let mut seen: HashMap<String, u32> = HashMap::new();
            for s in &strings {
                let id = t.intern(s);
                let want = *seen.entry(s.clone()).or_insert(id);
                proptest::prop_assert_eq!(id, want);
            }
            for (s, id) in &seen {
                proptest::prop_assert_eq!(t.resolve(*id), s.as_str());
                proptest::prop_assert_eq!(t.id(s), Some(*id));
            }
            proptest::prop_assert_eq!(t.len(), seen.len());
        }
    }
}
