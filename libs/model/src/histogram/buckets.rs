//! Bucket operations on absolute counts, shared by integer and float histograms: walking spans, compaction,
//! resolution reduction and iteration with bucket bounds.

use super::bounds::SCHEMA_8_FRACTIONS;
use super::{Span, is_custom_buckets_schema};

/// A bucket count: `i64` for integer histograms (absolute, not delta), `f64` for float ones.
pub trait Count: Copy + PartialEq + std::fmt::Debug {
    const ZERO: Self;
    /// The sum of two counts; integer counts wrap (as in Go) so that corrupt data cannot panic.
    fn plus(self, other: Self) -> Self;
    /// The difference of two counts, wrapping for integers like [`Count::plus`].
    fn minus(self, other: Self) -> Self;
}

impl Count for i64 {
    const ZERO: Self = 0;
    fn plus(self, other: Self) -> Self {
        self.wrapping_add(other)
    }
    fn minus(self, other: Self) -> Self {
        self.wrapping_sub(other)
    }
}

impl Count for f64 {
    const ZERO: Self = 0.0;
    fn plus(self, other: Self) -> Self {
        self + other
    }
    fn minus(self, other: Self) -> Self {
        self - other
    }
}

/// The bucket index of each bucket the spans describe, in order. Indices are `i64` so that corrupt offsets
/// cannot overflow.
pub(crate) fn indices(spans: &[Span]) -> impl Iterator<Item = i64> + '_ {
    let mut next = 0i64;
    spans.iter().flat_map(move |s| {
        let start = next + i64::from(s.offset);
        next = start + i64::from(s.length);
        start..next
    })
}

/// Builds spans and counts from `(index, count)` pairs with increasing indices; a gap of up to `fill` indices
/// between two buckets is filled with empty buckets instead of starting a new span. Indices that do not
/// increase (only an invalid histogram has them) start a span with a negative offset.
pub(crate) fn from_indexed<T: Count>(buckets: impl IntoIterator<Item = (i64, T)>, fill: i64) -> (Vec<Span>, Vec<T>) {
    let mut spans: Vec<Span> = Vec::new();
    let mut counts = Vec::new();
    let mut end = 0i64; // One past the index of the last bucket placed.
    for (idx, count) in buckets {
        let gap = idx - end;
        match spans.last_mut() {
            Some(last) if (0..=fill).contains(&gap) => {
                counts.extend(std::iter::repeat_n(T::ZERO, gap as usize));
                last.length += gap as u32 + 1;
            }
            _ => spans.push(Span::new(saturate_i32(gap), 1)),
        }
        counts.push(count);
        end = idx + 1;
    }
    (spans, counts)
}

fn saturate_i32(x: i64) -> i32 {
    x.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
}

/// Prometheus' compaction: the non-empty buckets, in spans whose gaps of empty buckets are longer than
/// `max_empty_buckets`.
pub(crate) fn compact<T: Count>(spans: &[Span], counts: &[T], max_empty_buckets: u32) -> (Vec<Span>, Vec<T>) {
    let non_empty = indices(spans)
        .zip(counts.iter().copied())
        .filter(|(_, c)| *c != T::ZERO);
    from_indexed(non_empty, i64::from(max_empty_buckets))
}

/// The index at schema `to` of the bucket holding bucket `idx` of schema `from` (`to` <= `from`). Bucket `i`
/// covers (base^(i-1), base^i], so the groups merged are those of `(idx - 1) >> (from - to)`.
pub(crate) fn reduced_index(idx: i64, from: i32, to: i32) -> i64 {
    ((idx - 1) >> (from - to)) + 1
}

/// How one side's bucket values are stored: absolute counts (float histograms), or each the difference to
/// the bucket before it (integer histograms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stored {
    Absolute,
    Deltas,
}

/// Merges buckets of schema `from` into the buckets of schema `to` that contain them, in place: the merged
/// spans and buckets overwrite the input, which is then truncated, so resolution reduction allocates nothing
/// whatever the bucket count (Mimir applies it to histograms over a tenant's bucket limit, before anything
/// else bounds them). The result is what [`from_indexed`] with no gap filling makes of the merged `(index,
/// count)` pairs: buckets beyond what the spans describe, or spans beyond the buckets, are dropped, and an
/// index that does not increase (only an invalid histogram has one) starts a span with a negative offset.
///
/// Writing never overtakes reading: a merged bucket is written once a later input bucket was read, so at an
/// index below it; and within an input span, neighbouring indices map to equal or neighbouring target
/// indices, so each input span starts at most one output span, written at an index at most its own.
pub(crate) fn reduce_in_place<T: Count>(
    spans: &mut Vec<Span>,
    buckets: &mut Vec<T>,
    from: i32,
    to: i32,
    stored: Stored,
) {
    struct Out<T> {
        spans: usize,
        buckets: usize,
        /// One past the index of the last bucket written.
        end: i64,
        /// The absolute count of the last bucket written, for delta encoding.
        last: T,
    }
    fn place<T: Count>(
        out: &mut Out<T>,
        spans: &mut [Span],
        buckets: &mut [T],
        (idx, count): (i64, T),
        stored: Stored,
    ) {
        let gap = idx - out.end;
        if out.spans > 0 && gap == 0 {
            spans[out.spans - 1].length += 1;
        } else {
            spans[out.spans] = Span::new(saturate_i32(gap), 1);
            out.spans += 1;
        }
        buckets[out.buckets] = match stored {
            Stored::Absolute => count,
            Stored::Deltas => count.minus(out.last),
        };
        out.last = count;
        out.buckets += 1;
        out.end = idx + 1;
    }
    let mut out = Out {
        spans: 0,
        buckets: 0,
        end: 0,
        last: T::ZERO,
    };
    let (mut read, mut absolute) = (0usize, T::ZERO);
    let mut next = 0i64; // One past the index of the last input bucket.
    let mut pending: Option<(i64, T)> = None;
    'spans: for i in 0..spans.len() {
        let s = spans[i];
        let start = next + i64::from(s.offset);
        next = start + i64::from(s.length);
        for idx in start..next {
            let Some(&value) = buckets.get(read) else {
                break 'spans;
            };
            read += 1;
            let count = match stored {
                Stored::Absolute => value,
                Stored::Deltas => {
                    absolute = absolute.plus(value);
                    absolute
                }
            };
            let target = reduced_index(idx, from, to);
            match &mut pending {
                Some((t, sum)) if *t == target => *sum = sum.plus(count),
                _ => {
                    if let Some(done) = pending.replace((target, count)) {
                        place(&mut out, spans, buckets, done, stored);
                    }
                }
            }
        }
    }
    if let Some(done) = pending {
        place(&mut out, spans, buckets, done, stored);
    }
    spans.truncate(out.spans);
    buckets.truncate(out.buckets);
}

/// Merges buckets of schema `from` into the buckets of schema `to` that contain them, into new vectors: the
/// plain form of [`reduce_in_place`], kept as the reference its tests compare with.
#[cfg(test)]
pub(crate) fn reduce<T: Count>(spans: &[Span], counts: &[T], from: i32, to: i32) -> (Vec<Span>, Vec<T>) {
    let mut merged: Vec<(i64, T)> = Vec::new();
    for (idx, count) in indices(spans).zip(counts.iter().copied()) {
        let target = reduced_index(idx, from, to);
        match merged.last_mut() {
            Some((last, sum)) if *last == target => *sum = sum.plus(count),
            _ => merged.push((target, count)),
        }
    }
    from_indexed(merged, 0)
}

/// One bucket with its bounds. Positive (and custom) buckets are `(lower, upper]`, negative ones
/// `[lower, upper)`, as in Prometheus.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket<T> {
    pub lower: f64,
    pub upper: f64,
    pub lower_inclusive: bool,
    pub upper_inclusive: bool,
    /// Absolute count.
    pub count: T,
    /// Bucket index in the schema.
    pub index: i32,
}

/// Iterates the non-empty buckets of one side of a histogram, as Prometheus' bucket iterators do.
#[derive(Debug)]
pub struct BucketIter<'a, T> {
    schema: i32,
    custom_values: &'a [f64],
    indices: Vec<i64>,
    counts: Vec<T>,
    pos: usize,
    positive: bool,
}

impl<'a, T: Count> BucketIter<'a, T> {
    pub(crate) fn new(schema: i32, custom_values: &'a [f64], spans: &[Span], counts: Vec<T>, positive: bool) -> Self {
        Self {
            schema,
            custom_values,
            indices: indices(spans).take(counts.len()).collect(),
            counts,
            pos: 0,
            positive,
        }
    }
}

impl<T: Count> Iterator for BucketIter<'_, T> {
    type Item = Bucket<T>;

    fn next(&mut self) -> Option<Bucket<T>> {
        while let (Some(&idx), Some(&count)) = (self.indices.get(self.pos), self.counts.get(self.pos)) {
            self.pos += 1;
            if count == T::ZERO {
                continue;
            }
            let (below, above) = if is_custom_buckets_schema(self.schema) {
                (
                    custom_bound(self.custom_values, idx - 1),
                    custom_bound(self.custom_values, idx),
                )
            } else {
                (
                    exponential_bound(idx - 1, self.schema),
                    exponential_bound(idx, self.schema),
                )
            };
            let index = saturate_i32(idx);
            return Some(if self.positive {
                Bucket {
                    lower: below,
                    upper: above,
                    lower_inclusive: false,
                    upper_inclusive: true,
                    count,
                    index,
                }
            } else {
                Bucket {
                    lower: -above,
                    upper: -below,
                    lower_inclusive: true,
                    upper_inclusive: false,
                    count,
                    index,
                }
            });
        }
        None
    }
}

/// Upper bound of custom bucket `idx`: `-Inf` below the first, `+Inf` for the bucket after the last bound.
fn custom_bound(bounds: &[f64], idx: i64) -> f64 {
    if idx < 0 {
        return f64::NEG_INFINITY;
    }
    usize::try_from(idx)
        .ok()
        .and_then(|i| bounds.get(i).copied())
        .unwrap_or(f64::INFINITY)
}

/// Upper bound of exponential bucket `idx`: 2^(idx * 2^-schema), from Prometheus' table of fractions for schemas
/// 0 to 8 (see [`super::bounds`]). The last bucket below the one counting infinities ends at `f64::MAX` rather
/// than at 2^1024, as in Prometheus.
pub(crate) fn exponential_bound(idx: i64, schema: i32) -> f64 {
    if schema < 0 {
        let exp = idx.saturating_mul(1i64 << -schema);
        if exp == 1024 {
            return f64::MAX;
        }
        return ldexp(1.0, exp);
    }
    let per_octave = 1i64 << schema.min(62);
    let frac_idx = idx.rem_euclid(per_octave);
    let frac = match usize::try_from(frac_idx << (8 - schema).max(0)) {
        Ok(i) if schema <= 8 => SCHEMA_8_FRACTIONS[i],
        // Schemas above 8 are reserved: no valid histogram has them, so there is no table to agree with.
        _ => 0.5 * (frac_idx as f64 / per_octave as f64).exp2(),
    };
    let exp = idx.div_euclid(per_octave) + 1;
    if frac_idx == 0 && exp == 1025 {
        return f64::MAX;
    }
    ldexp(frac, exp)
}

/// `x * 2^exp` without overflowing the intermediate power of two.
fn ldexp(mut x: f64, exp: i64) -> f64 {
    // Beyond these, any x in [0.5, 1] overflows or underflows anyway; clamping bounds the loops below.
    let mut exp = exp.clamp(-2200, 2100);
    while exp > 1000 {
        x *= 2f64.powi(1000);
        exp -= 1000;
    }
    while exp < -1000 {
        x *= 2f64.powi(-1000);
        exp += 1000;
    }
    x * 2f64.powi(exp as i32)
}
