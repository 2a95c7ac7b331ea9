//! The head's symbol table: one copy of every distinct label name and value, referred to by a `u32` id.
//!
//! Series store their labels as pairs of ids (8 bytes a label), so a string shared by a million series is
//! kept once. Symbols are never removed while the head lives; dropping unused ones belongs to head
//! truncation (after a block is cut), which resets the table.

use std::collections::HashMap;
use std::sync::Arc;

/// Interned strings, by id and by content.
#[derive(Debug, Default)]
pub(crate) struct SymbolTable {
    ids: HashMap<Arc<str>, u32>,
    strings: Vec<Arc<str>>,
}

impl SymbolTable {
    /// The id of `s`, adding it if new. Ids are dense, in order of first use.
    pub(crate) fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        // More than 4 billion distinct strings cannot be held in memory anyway.
        let id = u32::try_from(self.strings.len()).unwrap_or(u32::MAX);
        let shared: Arc<str> = Arc::from(s);
        self.strings.push(Arc::clone(&shared));
        self.ids.insert(shared, id);
        id
    }

    /// The id of `s` if it is interned.
    pub(crate) fn id(&self, s: &str) -> Option<u32> {
        self.ids.get(s).copied()
    }

    /// The string of an id; the empty string for an id this table never handed out (a bug, checked in debug
    /// builds).
    pub(crate) fn resolve(&self, id: u32) -> &str {
        let s = self.strings.get(id as usize);
        debug_assert!(s.is_some(), "unknown symbol id {id}");
        s.map_or("", |s| s)
    }

    /// Number of distinct strings.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.strings.len()
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
        // The map key and the vector entry share one allocation.
        assert_eq!(Arc::strong_count(&t.strings[a as usize]), 2);
    }
}
