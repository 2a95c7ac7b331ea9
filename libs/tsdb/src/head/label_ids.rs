//! A series' labels as symbol ids, packed as varints.
//!
//! A series keeps its labels as (name id, value id) pairs in label-name order. As plain `u32` pairs, 8 labels
//! take a 64-byte allocation per series. Label names are few and interned first, so their ids fit in one byte;
//! most values are shared by many series and were interned early too, and only the high-cardinality ones (an
//! `instance`, a `pod`) need three bytes below two million symbols. Packed as LEB128 varints, 8 labels take
//! about 20 bytes: jemalloc's 32-byte class instead of its 64-byte one. Decoding a pair is a few instructions,
//! paid when a label set is compared, read or listed, never per sample.

/// (name id, value id) pairs of one series, in the order given (label-name order).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct LabelIds(Box<[u8]>);

impl LabelIds {
    pub(crate) fn new(pairs: &[(u32, u32)]) -> Self {
        let len = pairs.iter().map(|&(n, v)| varint_len(n) + varint_len(v)).sum();
        let mut out = Vec::with_capacity(len);
        for &(n, v) in pairs {
            put_varint(&mut out, n);
            put_varint(&mut out, v);
        }
        Self(out.into_boxed_slice())
    }

    pub(crate) fn iter(&self) -> Pairs<'_> {
        Pairs(&self.0)
    }

    /// Number of labels.
    pub(crate) fn len(&self) -> usize {
        pairs_in(&self.0)
    }
}

/// Pairs in a packed buffer: every varint ends in exactly one byte with the continuation bit clear, and two
/// varints make a pair.
fn pairs_in(buf: &[u8]) -> usize {
    buf.iter().filter(|b| *b & 0x80 == 0).count() / 2
}

/// Iterator over a [`LabelIds`]' pairs.
#[derive(Debug, Clone)]
pub(crate) struct Pairs<'a>(&'a [u8]);

impl Iterator for Pairs<'_> {
    type Item = (u32, u32);

    fn next(&mut self) -> Option<(u32, u32)> {
        let name = take_varint(&mut self.0)?;
        let value = take_varint(&mut self.0)?;
        Some((name, value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = pairs_in(self.0);
        (n, Some(n))
    }
}

impl ExactSizeIterator for Pairs<'_> {}

fn varint_len(x: u32) -> usize {
    // 7 bits a byte; 0 still takes one byte.
    (32 - (x | 1).leading_zeros() as usize).div_ceil(7)
}

fn put_varint(out: &mut Vec<u8>, mut x: u32) {
    while x >= 0x80 {
        out.push((x as u8) | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
}

/// Reads one varint off the front of `buf`; `None` at the end (only [`put_varint`]'s output is ever read, so
/// a varint is never cut short).
fn take_varint(buf: &mut &[u8]) -> Option<u32> {
    let mut x = 0u32;
    for (i, &b) in buf.iter().enumerate().take(5) {
        x |= u32::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            *buf = &buf[i + 1..];
            return Some(x);
        }
    }
    *buf = &[];
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eight_typical_labels_fit_jemallocs_32_byte_class() {
        // Names interned first (ids < 128), shared values below 16k, a unique instance near a million.
        let pairs = [
            (0, 900),
            (1, 5),
            (2, 7),
            (3, 1_000_123),
            (4, 40),
            (5, 60),
            (6, 250_000),
            (7, 9),
        ];
        let ids = LabelIds::new(&pairs);
        assert!(ids.0.len() <= 32, "{} bytes", ids.0.len());
        assert_eq!(ids.len(), 8);
    }

    proptest::proptest! {
        #[test]
        fn pairs_round_trip(pairs in proptest::collection::vec((proptest::num::u32::ANY, proptest::num::u32::ANY), 0..40)) {
            let ids = LabelIds::new(&pairs);
            let back: Vec<(u32, u32)> = ids.iter().collect();
            proptest::prop_assert_eq!(&back, &pairs);
            proptest::prop_assert_eq!(ids.len(), pairs.len());
            let exact: usize = pairs.iter().map(|&(n, v)| varint_len(n) + varint_len(v)).sum();
            proptest::prop_assert_eq!(ids.0.len(), exact);
        }
    }
}
