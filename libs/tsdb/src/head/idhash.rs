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

/// Hasher for dense integer keys handed out in order (a replay shard's refs), keeping neighbouring keys in
/// neighbouring buckets: the bucket comes from the key's low bits, and so does hashbrown's control byte (the
/// top seven bits). Worth it where lookups come roughly in key order over a table too big for the cache: a
/// WAL lists each scrape's samples in much the same order as the series were created, so a replay shard
/// walks its table nearly in order, and the hardware prefetcher sees one stream. Measured against
/// [`RunHasher`] there (150M lookups, 1M series): a crash restart took 12.5 s with this and 24 s with runs,
/// which miss the cache once a run. Keys sharing their low bits crowd the same buckets (a strided key set
/// probes long), so only for transient tables of keys the head hands out densely; [`RunHasher`] otherwise.
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

/// Keys of a run: [`RunHasher`] keeps `RUN` neighbouring keys in `RUN` neighbouring buckets (hashbrown's
/// group width: their control bytes are one 16-byte load, their entries two cache lines).
const RUN: u64 = 16;

/// Hasher for integers handed out in order (series refs, symbol ids) in tables too big for the cache, where
/// keys are often met in order: a snapshot lists series by ascending ref, a WAL lists each scrape in much the
/// order its series were created, a query walks postings in ref order. Each run of [`RUN`] neighbouring keys
/// (`k / RUN`) is placed at random, as [`IdHasher`] places a key, and keeps its keys side by side there, so a
/// walk in key order misses the cache about once a run instead of at every key. Keys of a run differ in the
/// control byte (the top seven bits), so a probe compares a single entry. Any other set of keys spreads as
/// well as with [`IdHasher`]: sparse, strided or sharing their low bits, they fall into runs of their own.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct RunHasher(u64);

impl Hasher for RunHasher {
    fn finish(&self) -> u64 {
        let (k, within) = (self.0, self.0 % RUN);
        let placed = IdHasher(k / RUN).finish();
        (placed & !(RUN - 1) | within) ^ (within << 57)
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used by integer keys; kept correct (if not in runs) for any key type.
        let mut h = IdHasher(self.0);
        h.write(bytes);
        self.0 = h.0;
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n);
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A map with integer keys hashed by [`RunHasher`].
pub(crate) type RunMap<K, V> = HashMap<K, V, BuildHasherDefault<RunHasher>>;

/// Where an integer key goes in a hashbrown table hashed by [`RunHasher`].
pub(crate) fn run_hash(key: u64) -> u64 {
    let mut h = RunHasher::default();
    h.write_u64(key);
    h.finish()
}

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

    /// A map hashed by `H` finds every one of keys that are sparse and share their low bits, and no other.
    fn finds_sparse_keys<H: Hasher + Default>() {
        let keys: Vec<u64> = (0..5000u64).map(|i| i * 1024 + (i % 3) * (1 << 40)).collect();
        let map: HashMap<u64, u64, BuildHasherDefault<H>> = keys.iter().map(|&k| (k, k ^ 7)).collect();
        assert_eq!(map.len(), keys.len());
        assert!(keys.iter().all(|k| map.get(k) == Some(&(k ^ 7))));
        assert_eq!(map.get(&3), None);
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
        finds_sparse_keys::<NearHasher>();
    }

    #[test]
    fn keys_of_a_run_take_neighbouring_buckets_with_distinct_control_bytes() {
        let mask = (1u64 << 20) - 1;
        for run in [0u64, 1, 312_500, 1 << 40] {
            let first = run * RUN;
            let base = run_hash(first) & mask;
            assert_eq!(base % RUN, 0, "a run starts a group of buckets");
            let top: std::collections::HashSet<u64> = (first..first + RUN).map(|k| run_hash(k) >> 57).collect();
            assert_eq!(top.len(), RUN as usize, "run {run}: one control byte per key");
            for k in first..first + RUN {
                assert_eq!(run_hash(k) & mask, base + k % RUN, "key {k}");
            }
        }
    }

    /// Runs land at random: sequential keys fill about as many groups as a random function would, and keys
    /// one run apart (sharing their low bits) spread like any others.
    #[test]
    fn runs_spread_over_buckets_and_control_bytes() {
        let n = 1u64 << 16;
        let runs = |keys: &mut dyn Iterator<Item = u64>| {
            let (mut groups, mut top) = (std::collections::HashSet::new(), std::collections::HashSet::new());
            for k in keys {
                groups.insert((run_hash(k) & (n - 1)) / RUN);
                top.insert(run_hash(k) >> 57);
            }
            (groups.len() as f64, top.len())
        };
        let (groups, top) = runs(&mut (0..n));
        assert!(groups > 0.6 * (n / RUN) as f64, "{groups} of {} groups used", n / RUN);
        assert_eq!(top, 128);
        let (groups, top) = runs(&mut (0..n / RUN).map(|i| i * RUN * 64));
        assert!(
            groups > 0.6 * (n / RUN) as f64,
            "strided keys: {groups} of {} groups used",
            n / RUN
        );
        assert_eq!(top, 128);
        // Any keys still work: sparse ones, and ones sharing their low bits.
        finds_sparse_keys::<RunHasher>();
    }
}
