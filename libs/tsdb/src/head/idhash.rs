//! Hashers of the head: a fast one for its integer-keyed maps (series refs, symbol ids, label hashes), and
//! [`StrHasher`] for label strings.
//!
//! std's default SipHash costs more than the rest of a lookup for an 8-byte key, and those keys are not
//! chosen freely by clients: refs and symbol ids are handed out by the head (or read from its own WAL), and
//! label hashes are already [`StrHasher`] outputs. A folded 128-bit multiply spreads every input bit over
//! both the low bits (the bucket) and the top bits (hashbrown's control byte).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Keyed hasher for label names and values (symbols, label sets), which clients choose. foldhash's quality
/// variant, seeded at random per process: a few multiplies per 16 bytes where SipHash-1-3 takes several
/// rounds per 8, for output no client can predict, so none can pick strings that crowd one part of a table.
/// SipHash took 8 % of the CPU of a million-series snapshot load, and every append hashes its series' labels.
pub(crate) type StrHasher = foldhash::quality::RandomState;

/// Hasher for integer keys; see the module docs.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

const K: u64 = 0x9e37_79b9_7f4a_7c15;

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        let m = u128::from(self.0) * u128::from(K);
        (m as u64) ^ ((m >> 64) as u64)
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used by integer keys; kept correct for any key type.
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(K);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_add(K);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// Hasher for integers handed out in order (series refs), keeping neighbouring keys in neighbouring buckets:
/// the bucket comes from the key's low bits, and so does hashbrown's control byte (the top seven bits).
/// Worth it where lookups come roughly in key order over a table too big for the cache: a WAL lists each
/// scrape's samples in much the same order as the series were created, so a replay shard walks its table
/// nearly in order instead of missing the cache at every sample. Only for keys clients cannot choose.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct NearHasher(u64);

impl Hasher for NearHasher {
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 << 57)
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used by integer keys; kept correct (if not near) for any key type.
        let mut h = IdHasher(self.0);
        h.write(bytes);
        self.0 = h.0;
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A map with integer keys hashed by [`NearHasher`].
pub(crate) type NearMap<K, V> = HashMap<K, V, BuildHasherDefault<NearHasher>>;

/// The 32 bits of a 64-bit string hash that the symbol table and the series' by-hash table keep in their
/// entries (so that growing a table never recomputes a hash).
pub(crate) fn kept_bits(hash: u64) -> u32 {
    (hash >> 32) as u32
}

/// Where an entry with [`kept_bits`] `bits` goes in a hashbrown table: spread over the whole word, as the table
/// takes the bucket from the low bits and the control byte from the top ones.
pub(crate) fn spread_bits(bits: u32) -> u64 {
    u64::from(bits).wrapping_mul(K)
}

/// A map with integer keys hashed by [`IdHasher`].
pub(crate) type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn sequential_keys_spread_over_buckets_and_control_bytes() {
        let b = BuildHasherDefault::<IdHasher>::default();
        let n = 1u64 << 16;
        let mut low = std::collections::HashSet::new();
        let mut top = std::collections::HashSet::new();
        for k in 0..n {
            let h = b.hash_one(k);
            low.insert(h & (n - 1));
            top.insert(h >> 57);
        }
        // A good spread fills most buckets (a random function fills 1 - 1/e of them) and every control value.
        assert!(low.len() as f64 > 0.6 * n as f64, "{} of {n} buckets used", low.len());
        assert_eq!(top.len(), 128);
    }

    #[test]
    fn near_keys_take_neighbouring_buckets_with_varied_control_bytes() {
        let b = BuildHasherDefault::<NearHasher>::default();
        let mask = (1u64 << 20) - 1;
        let start = 5_000_000u64;
        for k in start..start + 1000 {
            assert_eq!((b.hash_one(k + 1) & mask) - (b.hash_one(k) & mask), 1, "key {k}");
        }
        let top: std::collections::HashSet<u64> = (start..start + 128).map(|k| b.hash_one(k) >> 57).collect();
        assert_eq!(top.len(), 128, "every control value among 128 neighbours");
        // Any keys still work, only slower: sparse ones, and ones sharing their low bits.
        let keys: Vec<u64> = (0..5000u64).map(|i| i * 1024 + (i % 3) * (1 << 40)).collect();
        let map: NearMap<u64, u64> = keys.iter().map(|&k| (k, k ^ 7)).collect();
        assert_eq!(map.len(), keys.len());
        assert!(keys.iter().all(|k| map.get(k) == Some(&(k ^ 7))));
        assert_eq!(map.get(&3), None);
    }
}
