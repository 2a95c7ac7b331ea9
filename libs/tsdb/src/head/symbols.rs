//! The head's symbol table: one copy of every distinct label name and value, referred to by a `u32` id.
//!
//! Series store their labels as pairs of ids (8 bytes a label), so a string shared by a million series is
//! kept once. Symbols are never removed while the head lives; dropping unused ones belongs to head
//! truncation (after a block is cut), which resets the table.
//!
//! Memory: at high cardinality most symbols are used by one series (an `instance`), so a symbol's overhead
//! matters as much as its bytes. All strings are concatenated in one arena (no allocation per string), an id
//! maps to the end offset of its string (8 bytes), and the lookup table holds the id and the top half of its
//! string's hash (8 bytes an entry, half of a `HashMap<u64, u32>`'s). Keeping those 32 bits means growing the
//! table never rehashes a string (which would cost a cache miss into the arena per symbol while a million
//! series load); strings whose 32 bits are equal are told apart by comparing them. The hash is keyed per table
//! at random, so clients cannot pick label values that collide.

use std::hash::BuildHasher;

use hashbrown::HashTable;

use super::idhash::{StrHasher, kept_bits, spread_bits};

/// Interned strings, by id and by content.
#[derive(Debug, Default)]
pub(crate) struct SymbolTable {
    /// Every string, concatenated in id order.
    arena: String,
    /// End offset of string `id` in `arena` (it starts where `id - 1` ends).
    ends: Vec<u64>,
    /// (id, top 32 bits of its string's hash), placed by [`spread_bits`] of those bits.
    by_hash: HashTable<(u32, u32)>,
    hasher: StrHasher,
}

impl SymbolTable {
    /// The id of `s`, adding it if new. Ids are dense, in order of first use.
    pub(crate) fn intern(&mut self, s: &str) -> u32 {
        self.intern_hashed(self.hasher.hash_one(s), s)
    }

    /// The hasher strings are looked up with: startup workers hash a snapshot's or WAL's strings with it
    /// ahead of [`SymbolTable::intern_hashed`].
    pub(crate) fn hasher(&self) -> &StrHasher {
        &self.hasher
    }

    /// [`SymbolTable::intern`] of a string whose hash `h` was computed with [`SymbolTable::hasher`].
    pub(crate) fn intern_hashed(&mut self, h: u64, s: &str) -> u32 {
        debug_assert_eq!(h, self.hasher.hash_one(s), "hash of {s:?} from another hasher");
        self.intern_with(h, s)
    }

    /// Interns `s` under hash `h`, whatever hashed it (tests give chosen hashes to collide strings).
    fn intern_with(&mut self, h: u64, s: &str) -> u32 {
        let h = kept_bits(h);
        let Self {
            arena, ends, by_hash, ..
        } = self;
        let entry = by_hash.entry(
            spread_bits(h),
            |&(id, bits)| bits == h && resolve_in(arena, ends, id) == s,
            |&(_, bits)| spread_bits(bits),
        );
        match entry {
            hashbrown::hash_table::Entry::Occupied(e) => e.get().0,
            hashbrown::hash_table::Entry::Vacant(e) => {
                // More than 4 billion distinct strings cannot be held in memory anyway.
                let id = u32::try_from(ends.len()).unwrap_or(u32::MAX);
                arena.push_str(s);
                ends.push(arena.len() as u64);
                e.insert((id, h));
                id
            }
        }
    }

    fn lookup(&self, h: u64, s: &str) -> Option<u32> {
        let h = kept_bits(h);
        self.by_hash
            .find(spread_bits(h), |&(id, bits)| bits == h && self.resolve(id) == s)
            .map(|&(id, _)| id)
    }

    /// The id of `s` if it is interned.
    pub(crate) fn id(&self, s: &str) -> Option<u32> {
        self.lookup(self.hasher.hash_one(s), s)
    }

    /// The string of an id; the empty string for an id this table never handed out (a bug, checked in debug
    /// builds).
    pub(crate) fn resolve(&self, id: u32) -> &str {
        debug_assert!((id as usize) < self.ends.len(), "unknown symbol id {id}");
        resolve_in(&self.arena, &self.ends, id)
    }

    /// Number of distinct strings.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }
}

/// [`SymbolTable::resolve`] on the table's parts, for use while its lookup table is borrowed mutably.
fn resolve_in<'a>(arena: &'a str, ends: &[u64], id: u32) -> &'a str {
    let i = id as usize;
    let (Some(&end), start) = (ends.get(i), i.checked_sub(1).and_then(|p| ends.get(p))) else {
        return "";
    };
    let start = start.copied().unwrap_or(0);
    // Offsets are those of whole strings pushed onto the arena, hence char boundaries.
    arena.get(start as usize..end as usize).unwrap_or("")
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
        // Strings interned under one hash, as strings whose hashes collide would be.
        let h = t.hasher.hash_one("a");
        let a = t.intern_with(h, "a");
        let b = t.intern_with(h, "b");
        assert_ne!(a, b);
        assert_eq!(t.intern_with(h, "b"), b);
        assert_eq!(t.lookup(h, "a"), Some(a));
        assert_eq!(t.lookup(h, "b"), Some(b));
        assert_eq!(t.lookup(h, "c"), None);
        assert_eq!((t.resolve(a), t.resolve(b)), ("a", "b"));
    }

    /// Strings whose 32 kept hash bits are equal but whose full hashes differ.
    #[test]
    fn strings_sharing_the_kept_hash_bits_stay_apart() {
        let mut t = SymbolTable::default();
        let a = t.intern_with(7 << 32 | 1, "x");
        let b = t.intern_with(7 << 32 | 2, "y");
        assert_ne!(a, b);
        assert_eq!(t.lookup(7 << 32 | 1, "x"), Some(a));
        assert_eq!(t.lookup(7 << 32 | 2, "y"), Some(b));
    }

    proptest::proptest! {
        #[test]
        fn ids_resolve_to_their_strings(strings in proptest::collection::vec(".{0,6}", 0..50)) {
            let mut t = SymbolTable::default();
            let mut seen: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
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
