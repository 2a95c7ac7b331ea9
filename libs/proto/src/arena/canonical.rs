//! The fast path: the encoding real senders produce, read without the general field walker.
//!
//! Prometheus, Grafana Agent/Alloy, the OpenTelemetry exporter and prost all write a `WriteRequest` the same
//! way: each field once, in field-number order, single-byte keys, empty strings and zero numbers omitted.
//!
//! ```text
//! WriteRequest  0x0a len TimeSeries, ...
//! TimeSeries    0x0a len Label, ...  0x12 len Sample, ...
//! Label         [0x0a len name] [0x12 len value]
//! Sample        [0x09 fixed64 value] [0x10 varint timestamp]
//! ```
//!
//! The functions here read exactly that shape and nothing else: they answer `None` at the first byte that is
//! not part of it (an unknown or reordered field, a multi-byte key, a repeated string, exemplars, histograms),
//! and also at anything malformed (a length past the end, an overlong varint, a string that is not UTF-8).
//! The caller then hands the same bytes to the general walker, which gives the general answer: the view, or
//! the error with its offsets and message. Whatever this module accepts, the general walker decodes to the
//! same values, because on these bytes it sees the same fields in the same order; the property test
//! `fast_and_general_paths_agree` checks it on canonical and perturbed inputs.
//!
//! What makes it cheap: one byte compared per key instead of a key decode and a wire-type dispatch, single-byte
//! varints taken inline, each length checked once against the bytes left in its enclosing message (the
//! slices below are cut with `split_at_checked`, so nothing re-checks what that covered), no `Value` enum, no
//! offsets carried along (only the general walker needs them, for its errors), and one UTF-8 check per
//! series instead of two per label (see [`label_strings`]).

use heddle_model::{LabelRef, Sample};

/// `WriteRequest.timeseries` and `TimeSeries.labels`: field 1, length-delimited.
pub(super) const TAG_1_LEN: u8 = 1 << 3 | 2;
/// `TimeSeries.samples` and `Label.value`: field 2, length-delimited.
pub(super) const TAG_2_LEN: u8 = 2 << 3 | 2;
/// `Sample.value`: field 1, fixed64.
const TAG_VALUE: u8 = 1 << 3 | 1;
/// `Sample.timestamp`: field 2, varint.
const TAG_TIMESTAMP: u8 = 2 << 3;

/// A varint at the start of `buf`: its value and its length in bytes. `None` where the general walker
/// reports an error (truncated, or overflowing 64 bits), so it accepts exactly the varints the walker does,
/// with the same values (non-minimal encodings included).
#[inline(always)]
pub(super) fn varint(buf: &[u8]) -> Option<(u64, usize)> {
    match *buf {
        [b, ..] if b < 0x80 => Some((u64::from(b), 1)),
        // Two bytes: a series' length prefix (128 bytes to 16 KiB).
        [b0, b1, ..] if b1 < 0x80 => Some((u64::from(b0 & 0x7f) | u64::from(b1) << 7, 2)),
        _ => varint_multi(buf),
    }
}

#[inline(never)]
fn varint_multi(buf: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, &byte) in buf.iter().take(10).enumerate() {
        if i == 9 && byte > 1 {
            return None;
        }
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// A length prefix at the start of `buf` and the payload it declares: `(payload, rest)`, or `None` if the
/// payload runs past the end of `buf`.
#[inline(always)]
pub(super) fn length_delimited(buf: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, n) = varint(buf)?;
    let len = usize::try_from(len).ok()?;
    buf.get(n..)?.split_at_checked(len)
}

/// Counts the labels and samples of a canonical `TimeSeries`, checking that each one's length fits.
#[inline]
pub(super) fn count_series(mut raw: &[u8]) -> Option<(usize, usize)> {
    let (mut labels, mut samples) = (0usize, 0usize);
    while let [tag, rest @ ..] = raw {
        match *tag {
            TAG_1_LEN => labels += 1,
            TAG_2_LEN => samples += 1,
            _ => return None,
        }
        raw = length_delimited(rest)?.1;
    }
    Some((labels, samples))
}

/// Decodes a canonical `TimeSeries` into the first slots of `labels` and `samples`; returns how many of each
/// it filled. Slots it wrote are left written when it answers `None`: the general walker refills them.
#[inline]
pub(super) fn fill_series<'a>(
    raw: &'a [u8],
    labels: &mut [LabelRef<'a>],
    samples: &mut [Sample],
) -> Option<(usize, usize)> {
    // The labels are the series' first bytes, up to the first sample.
    let mut rest = raw;
    while let [TAG_1_LEN, tail @ ..] = rest {
        rest = length_delimited(tail)?.1;
    }
    let label_bytes = raw.get(..raw.len() - rest.len())?;
    let label_count = label_strings(label_bytes, labels)?;

    let mut sample_count = 0;
    while let [TAG_2_LEN, tail @ ..] = rest {
        let (payload, tail) = length_delimited(tail)?;
        *samples.get_mut(sample_count)? = sample(payload)?;
        sample_count += 1;
        rest = tail;
    }
    // Anything after the samples (a label, exemplars, an unknown field) is for the general walker.
    rest.is_empty().then_some((label_count, sample_count))
}

/// Decodes the run of canonical `Label` fields `run` into `slots`; returns how many.
///
/// The strings must be UTF-8. Rather than one check per string (14 calls for a 7-label series, each paying
/// a call's fixed cost on a few bytes), the whole run is checked at once: keys and single-byte lengths are
/// ASCII, so a run whose strings are UTF-8 is itself UTF-8. Each string is then cut from the checked run
/// with `str::get`, which succeeds only on char boundaries, and a slice of valid UTF-8 between two char
/// boundaries is valid UTF-8: every string handed out is checked, without `unsafe`. (In a valid run the cut
/// never fails: each string follows a length's last byte and precedes a key or the run's end, all ASCII,
/// and an ASCII byte always stands on a char boundary.) A run that fails as a
/// whole (a multi-byte length is not UTF-8 on its own; or a string really is invalid) is checked string by
/// string instead, which finds the same strings valid or invalid as the general walker does.
#[inline]
fn label_strings<'a>(run: &'a [u8], slots: &mut [LabelRef<'a>]) -> Option<usize> {
    match std::str::from_utf8(run) {
        Ok(text) => labels_in(run, slots, |start, end| text.get(start..end)),
        Err(_) => labels_in(run, slots, |start, end| {
            run.get(start..end).and_then(|s| std::str::from_utf8(s).ok())
        }),
    }
}

/// Walks the label run `run`, cutting each name and value (given as a byte range of `run`) with `cut`.
#[inline(always)]
fn labels_in<'a>(
    run: &'a [u8],
    slots: &mut [LabelRef<'a>],
    cut: impl Fn(usize, usize) -> Option<&'a str>,
) -> Option<usize> {
    let mut count = 0;
    let mut rest = run;
    while let [TAG_1_LEN, tail @ ..] = rest {
        let (payload, tail) = length_delimited(tail)?;
        // Where the label's payload starts in `run`, to turn its string positions into ranges of `run`.
        let base = run.len() - tail.len() - payload.len();
        *slots.get_mut(count)? = label(payload, base, &cut)?;
        count += 1;
        rest = tail;
    }
    Some(count)
}

/// A canonical `Label` payload: `[0x0a len name] [0x12 len value]`, either or both absent (proto3 omits an
/// empty string). `base` is the payload's position in the run `cut` takes ranges of.
#[inline(always)]
fn label<'a>(payload: &[u8], base: usize, cut: &impl Fn(usize, usize) -> Option<&'a str>) -> Option<LabelRef<'a>> {
    let mut label = LabelRef { name: "", value: "" };
    let mut rest = payload;
    if let [TAG_1_LEN, tail @ ..] = rest {
        let (name, tail) = length_delimited(tail)?;
        let start = base + payload.len() - tail.len() - name.len();
        label.name = cut(start, start + name.len())?;
        rest = tail;
    }
    if let [TAG_2_LEN, tail @ ..] = rest {
        let (value, tail) = length_delimited(tail)?;
        let start = base + payload.len() - tail.len() - value.len();
        label.value = cut(start, start + value.len())?;
        rest = tail;
    }
    rest.is_empty().then_some(label)
}

/// A canonical `Sample` payload: `[0x09 fixed64 value] [0x10 varint timestamp]`, either or both absent. The
/// remote write 2.0 `Sample` starts with the same two fields.
#[inline(always)]
pub(super) fn sample(payload: &[u8]) -> Option<Sample> {
    let mut sample = Sample { t: 0, v: 0.0 };
    let mut rest = payload;
    if let [TAG_VALUE, tail @ ..] = rest {
        let (bits, tail) = tail.split_first_chunk::<8>()?;
        sample.v = f64::from_bits(u64::from_le_bytes(*bits));
        rest = tail;
    }
    if let [TAG_TIMESTAMP, tail @ ..] = rest {
        let (t, n) = varint(tail)?;
        // int64 is a two's-complement varint: the cast is the protobuf conversion.
        sample.t = t as i64;
        rest = tail.get(n..)?;
    }
    rest.is_empty().then_some(sample)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::wire::put_varint;

    #[test]
    fn varints_match_the_general_reader() {
        for value in [0, 1, 127, 128, 300, 1 << 35, u64::MAX - 1, u64::MAX] {
            let mut buf = Vec::new();
            put_varint(value, &mut buf);
            assert_eq!(varint(&buf), Some((value, buf.len())), "value {value}");
        }
        // Non-minimal encodings are accepted, as the general reader does.
        assert_eq!(varint(&[0x85, 0x80, 0x00]), Some((5, 3)));
        // Truncated, eleven bytes, and a tenth byte over 1: refused, left to the general reader's errors.
        assert_eq!(varint(&[0x80]), None);
        assert_eq!(varint(&[0x80; 11]), None);
        let mut overflow = vec![0xff; 9];
        overflow.push(0x02);
        assert_eq!(varint(&overflow), None);
    }

    #[test]
    fn a_canonical_series_is_read_and_anything_else_declined() {
        // labels {a=b}, {""=v}; sample {1.5, t=-1}.
        let mut series = vec![
            0x0a, 6, 0x0a, 1, b'a', 0x12, 1, b'b', 0x0a, 3, 0x12, 1, b'v', 0x12, 20, 0x09,
        ];
        series.extend(1.5f64.to_le_bytes());
        series.extend([0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        assert_eq!(count_series(&series), Some((2, 1)));
        let mut labels = [LabelRef { name: "", value: "" }; 2];
        let mut samples = [Sample { t: 0, v: 0.0 }; 1];
        assert_eq!(fill_series(&series, &mut labels, &mut samples), Some((2, 1)));
        assert_eq!(
            labels,
            [LabelRef { name: "a", value: "b" }, LabelRef { name: "", value: "v" }]
        );
        assert!(samples[0].bit_eq(&Sample { t: -1, v: 1.5 }));

        let declined: &[(&str, &[u8])] = &[
            ("value before name", &[0x0a, 6, 0x12, 1, b'b', 0x0a, 1, b'a']),
            ("unknown label field", &[0x0a, 5, 0x0a, 1, b'a', 0x18, 1]),
            ("name twice", &[0x0a, 6, 0x0a, 1, b'a', 0x0a, 1, b'b']),
            ("label after a sample", &[0x12, 0, 0x0a, 0]),
            ("exemplar", &[0x1a, 0]),
            ("two-byte key", &[0x8a, 0x00, 0]),
            ("length past the end", &[0x0a, 9, 0x0a]),
            ("invalid utf-8", &[0x0a, 3, 0x0a, 1, 0xff]),
            (
                "timestamp before value",
                &[0x12, 11, 0x10, 1, 0x09, 0, 0, 0, 0, 0, 0, 0, 0],
            ),
            ("more labels than slots", &[0x0a, 0, 0x0a, 0, 0x0a, 0]),
        ];
        for (name, raw) in declined {
            let mut labels = [LabelRef { name: "", value: "" }; 2];
            assert_eq!(fill_series(raw, &mut labels, &mut samples), None, "case {name}");
        }
        assert_eq!(
            count_series(&[0x1a, 0]),
            None,
            "exemplars are counted by the general walker"
        );
        assert_eq!(count_series(&[0x0a, 9, 0x0a]), None);
    }

    #[test]
    fn strings_are_checked_one_by_one_when_the_run_is_not_utf8() {
        // A 200-byte value has a two-byte length (0xc8 0x01), which is not UTF-8: the strings are still read.
        let value = "é".repeat(100);
        let mut payload = vec![0x0a, 1, b'a', 0x12];
        put_varint(value.len() as u64, &mut payload);
        payload.extend(value.as_bytes());
        let mut series = vec![0x0a];
        put_varint(payload.len() as u64, &mut series);
        series.extend(&payload);
        let mut labels = [LabelRef { name: "", value: "" }; 1];
        assert_eq!(fill_series(&series, &mut labels, &mut []), Some((1, 0)));
        assert_eq!(
            labels[0],
            LabelRef {
                name: "a",
                value: &value
            }
        );
    }
}
