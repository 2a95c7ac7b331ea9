//! The fast path of the 2.0 decoder: the series shape senders write, read without the general field walker,
//! as [`super::super::canonical`] does for 1.0.
//!
//! ```text
//! TimeSeries    [0x0a len packed label references] 0x12 len Sample, ...
//! Sample        [0x09 fixed64 value] [0x10 varint timestamp]
//! ```
//!
//! The request itself is read the same way while it is a run of one-byte-keyed `symbols` (0x22) and
//! `timeseries` (0x2a) fields; the general walker takes over at the first other byte.
//!
//! Anything else in a series (unpacked or repeated references, exemplars, histograms, metadata, a created
//! timestamp, an unknown field) and anything malformed (a length past the end, an overlong varint, a
//! reference past the symbol table) makes these functions answer `None`, and the caller reads the same
//! series with the general walker, which gives the general answer: the view, or the error with its offsets.

use super::super::canonical::{TAG_1_LEN, TAG_2_LEN, length_delimited, sample, varint};
use heddle_model::{LabelRef, Sample};

/// `Request.symbols`: field 4, length-delimited.
pub(super) const TAG_SYMBOL: u8 = 4 << 3 | 2;
/// `Request.timeseries`: field 5, length-delimited.
pub(super) const TAG_SERIES: u8 = 5 << 3 | 2;

/// A request field at the start of `buf` with the key `tag` (one byte) and its payload: `(payload, rest)`.
#[inline(always)]
pub(super) fn field(buf: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    match buf {
        [t, tail @ ..] if *t == tag => length_delimited(tail),
        _ => None,
    }
}

/// Counts the label references and samples of a canonical series, checking that each length fits and that
/// the packed references end on a varint's last byte.
#[inline]
pub(super) fn count_series(raw: &[u8]) -> Option<(usize, usize)> {
    let mut rest = raw;
    let mut refs = 0;
    if let [TAG_1_LEN, tail @ ..] = rest {
        let (packed, tail) = length_delimited(tail)?;
        if packed.last().is_some_and(|&b| b >= 0x80) {
            return None;
        }
        // Each varint ends with the one byte of it that has no continuation bit.
        refs = packed.iter().filter(|&&b| b < 0x80).count();
        rest = tail;
    }
    let mut samples = 0;
    while let [TAG_2_LEN, tail @ ..] = rest {
        rest = length_delimited(tail)?.1;
        samples += 1;
    }
    rest.is_empty().then_some((refs, samples))
}

/// What [`fill_series`] filled.
pub(super) struct Filled {
    pub labels: usize,
    pub samples: usize,
    /// Bytes of label text (names and values) the series resolves to.
    pub text: usize,
}

/// Decodes a canonical series into the first slots of `labels` and `samples`, each reference resolved
/// through `symbols`. Slots it wrote are left written when it answers `None`: the general walker refills them.
#[inline]
pub(super) fn fill_series<'a>(
    raw: &[u8],
    symbols: &[&'a str],
    labels: &mut [LabelRef<'a>],
    samples: &mut [Sample],
) -> Option<Filled> {
    let symbol = |r: u64| usize::try_from(r).ok().and_then(|i| symbols.get(i).copied());
    let mut out = Filled {
        labels: 0,
        samples: 0,
        text: 0,
    };
    let mut rest = raw;
    if let [TAG_1_LEN, tail @ ..] = rest {
        let (mut packed, tail) = length_delimited(tail)?;
        rest = tail;
        while !packed.is_empty() {
            let (name, n) = varint(packed)?;
            let (value, m) = varint(packed.get(n..)?)?;
            packed = packed.get(n + m..)?;
            let label = LabelRef {
                name: symbol(name)?,
                value: symbol(value)?,
            };
            out.text += label.name.len() + label.value.len();
            *labels.get_mut(out.labels)? = label;
            out.labels += 1;
        }
    }
    while let [TAG_2_LEN, tail @ ..] = rest {
        let (payload, tail) = length_delimited(tail)?;
        *samples.get_mut(out.samples)? = sample(payload)?;
        out.samples += 1;
        rest = tail;
    }
    rest.is_empty().then_some(out)
}
