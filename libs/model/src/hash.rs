//! The series hash: which token a series lands on.
//!
//! The token is FNV-1a 32-bit over the tenant id, then every label's name and value in label order, with no
//! separators, exactly as Mimir's `ShardByAllLabels` computes it (so the same series lands on the same token in
//! both systems). Changing this function reshards every series: a stored WAL or tokens file stays valid, but
//! every series would move to other ingesters. Treat it as a wire format.

/// FNV-1a 32-bit offset basis.
pub const FNV32A_OFFSET: u32 = 0x811c_9dc5;
const FNV32A_PRIME: u32 = 0x0100_0193;

/// Folds `bytes` into a running FNV-1a 32-bit hash.
#[inline]
pub fn fnv32a_add(mut h: u32, bytes: &[u8]) -> u32 {
    for &b in bytes {
        h ^= u32::from(b);
        h = h.wrapping_mul(FNV32A_PRIME);
    }
    h
}

/// Ring token of a series: FNV-1a 32 over tenant, then each (name, value) in the given (sorted) order.
pub fn series_token<'a>(tenant: &str, labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> u32 {
    series_token_seeded(tenant_token_seed(tenant), labels)
}

/// The part of [`series_token`] that depends on the tenant alone: compute it once per request and pass it
/// to [`series_token_seeded`] for each series.
#[inline]
pub fn tenant_token_seed(tenant: &str) -> u32 {
    fnv32a_add(FNV32A_OFFSET, tenant.as_bytes())
}

/// [`series_token`] of the tenant whose [`tenant_token_seed`] is `seed`.
#[inline]
pub fn series_token_seeded<'a>(seed: u32, labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> u32 {
    let mut h = seed;
    for (name, value) in labels {
        h = fnv32a_add(h, name.as_bytes());
        h = fnv32a_add(h, value.as_bytes());
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv32a_known_vectors() {
        // Published FNV-1a 32-bit test vectors.
        assert_eq!(fnv32a_add(FNV32A_OFFSET, b""), 0x811c_9dc5);
        assert_eq!(fnv32a_add(FNV32A_OFFSET, b"a"), 0xe40c_292c);
        assert_eq!(fnv32a_add(FNV32A_OFFSET, b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn token_depends_on_tenant_and_every_label() {
        let base = series_token("t1", [("__name__", "up"), ("job", "a")]);
        assert_ne!(base, series_token("t2", [("__name__", "up"), ("job", "a")]));
        assert_ne!(base, series_token("t1", [("__name__", "up"), ("job", "b")]));
        assert_eq!(base, series_token("t1", [("__name__", "up"), ("job", "a")]));
        assert_eq!(
            base,
            series_token_seeded(tenant_token_seed("t1"), [("__name__", "up"), ("job", "a")]),
            "the seeded form is the same hash"
        );
        // The wire format itself: FNV-1a 32 of the concatenation "t1__name__upjoba".
        assert_eq!(base, fnv32a_add(FNV32A_OFFSET, b"t1__name__upjoba"));
    }
}
