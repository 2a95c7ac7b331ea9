//! Native histograms in a series: the open histogram chunk of either kind, with Prometheus' cut rules, and
//! what the head needs to know of any chunk whatever its encoding (its newest sample, its timestamps).
//!
//! A series holds floats, integer histograms or float histograms, and may switch between them: each switch
//! cuts the open chunk, as Prometheus' `appendPreprocessor` does when the encoding changes.

use std::hash::{BuildHasher, Hash, Hasher};

use heddle_model::{FloatHistogram, Histogram, HistogramValue};

use super::series::OpenChunk;
use crate::chunkenc::{
    Encoding, FloatHistogramChunk, FloatHistogramIter, HistogramAppend, HistogramChunk, HistogramChunkCutter,
    HistogramIter, XorIter,
};
use crate::error::ChunkError;

/// The two histogram chunk encodings, so that the head appends to either with one piece of code.
pub(crate) trait HistogramKind: Sized {
    type Value;
    const ENCODING: Encoding;

    fn empty() -> Self;
    fn append_value(
        &mut self,
        t: i64,
        h: &Self::Value,
        prev: Option<&Self>,
    ) -> Result<HistogramAppend<Self>, ChunkError>;
    fn samples(&self) -> u16;
    fn data(&self) -> &[u8];
    fn into_data(self) -> Vec<u8>;
    fn decode(bytes: Vec<u8>) -> Result<Self, ChunkError>;
    /// The series' open chunk when it is of this kind.
    fn open_of(open: &mut OpenChunk) -> Option<&mut Box<OpenHistogram<Self>>>;
    /// An open chunk of this kind.
    fn wrap(open: Box<OpenHistogram<Self>>) -> OpenChunk;
}

/// The two implementations differ only in their types and the open-chunk variant.
macro_rules! histogram_kind {
    ($chunk:ty, $value:ty, $encoding:expr, $variant:path) => {
        impl HistogramKind for $chunk {
            type Value = $value;
            const ENCODING: Encoding = $encoding;

            fn empty() -> Self {
                Self::new()
            }
            fn append_value(
                &mut self,
                t: i64,
                h: &$value,
                prev: Option<&Self>,
            ) -> Result<HistogramAppend<Self>, ChunkError> {
                self.append(t, h, prev)
            }
            fn samples(&self) -> u16 {
                self.num_samples()
            }
            fn data(&self) -> &[u8] {
                self.bytes()
            }
            fn into_data(self) -> Vec<u8> {
                self.into_bytes()
            }
            fn decode(bytes: Vec<u8>) -> Result<Self, ChunkError> {
                Self::from_bytes(bytes)
            }
            fn open_of(open: &mut OpenChunk) -> Option<&mut Box<OpenHistogram<Self>>> {
                match open {
                    $variant(h) => Some(h),
                    _ => None,
                }
            }
            fn wrap(open: Box<OpenHistogram<Self>>) -> OpenChunk {
                $variant(open)
            }
        }
    };
}

histogram_kind!(HistogramChunk, Histogram, Encoding::Histogram, OpenChunk::Histogram);
histogram_kind!(
    FloatHistogramChunk,
    FloatHistogram,
    Encoding::FloatHistogram,
    OpenChunk::FloatHistogram
);

/// An open histogram chunk: never empty (a series without an open chunk has an empty XOR one).
#[derive(Debug)]
pub(crate) struct OpenHistogram<C> {
    pub(crate) chunk: C,
    pub(crate) min_time: i64,
    pub(crate) max_time: i64,
    /// [`fingerprint`] of the newest sample, to tell an exact repeat from another value at its timestamp.
    pub(crate) last: u64,
    cutter: HistogramChunkCutter,
}

/// What [`OpenHistogram::append`] did with the chunk that was open.
pub(crate) enum Appended<C> {
    /// The sample went into the open chunk.
    Same,
    /// The open chunk is complete: the sample started a new one, which is now open.
    Completed(OpenHistogram<C>),
}

impl<C: HistogramKind> OpenHistogram<C> {
    /// A chunk started by `h`; `prev` is the chunk it follows when that held the same kind, which decides its
    /// counter-reset header.
    pub(crate) fn start(t: i64, h: &C::Value, last: u64, prev: Option<&C>, range_ms: i64) -> Result<Self, ChunkError> {
        let mut chunk = C::empty();
        match chunk.append_value(t, h, prev)? {
            HistogramAppend::Appended | HistogramAppend::Recoded => {}
            // The first sample of a chunk always goes in.
            HistogramAppend::NewChunk(c) => chunk = c,
        }
        Ok(Self {
            chunk,
            min_time: t,
            max_time: t,
            last,
            cutter: HistogramChunkCutter::new(t, range_ms),
        })
    }

    /// Restores an open chunk from its bytes (a snapshot's).
    pub(crate) fn restore(bytes: Vec<u8>, min_time: i64, max_time: i64, range_ms: i64) -> Result<Self, ChunkError> {
        let chunk = C::decode(bytes)?;
        let mut open = Self {
            chunk,
            min_time,
            max_time,
            last: 0,
            cutter: HistogramChunkCutter::new(min_time, range_ms),
        };
        open.last = last_sample(C::ENCODING, open.chunk.data())
            .map(|(_, fp)| fp)
            .ok_or(ChunkError::TooShort {
                len: open.chunk.data().len(),
            })?;
        Ok(open)
    }

    /// Appends a sample newer than the chunk's newest, with Prometheus' rules: a new chunk when the cut policy
    /// says so (its size or the chunk range), or when the appender cannot take the sample (a counter reset, a
    /// new schema...).
    pub(crate) fn append(&mut self, t: i64, h: &C::Value, fp: u64, range_ms: i64) -> Result<Appended<C>, ChunkError> {
        let (samples, bytes) = (self.chunk.samples(), self.chunk.data().len());
        if self.cutter.cut_before(t, self.min_time, self.max_time, samples, bytes) {
            let next = Self::start(t, h, fp, Some(&self.chunk), range_ms)?;
            return Ok(Appended::Completed(std::mem::replace(self, next)));
        }
        match self.chunk.append_value(t, h, None)? {
            HistogramAppend::Appended | HistogramAppend::Recoded => {
                self.max_time = t;
                self.last = fp;
                Ok(Appended::Same)
            }
            HistogramAppend::NewChunk(chunk) => {
                let next = Self {
                    chunk,
                    min_time: t,
                    max_time: t,
                    last: fp,
                    cutter: HistogramChunkCutter::new(t, range_ms),
                };
                Ok(Appended::Completed(std::mem::replace(self, next)))
            }
        }
    }
}

/// A 64-bit digest of a histogram's value, as Prometheus' `Equals` compares it (the counter-reset hint is not
/// part of the value), so that a sample at the newest timestamp is an exact repeat when the digests match.
/// Integer and float histograms never match each other, nor (but with odds of 2^-64) a float sample's bits.
/// Digests live in memory only (a restart recomputes them from the chunks), so the seed is the process'.
pub(crate) fn fingerprint(h: &HistogramValue) -> u64 {
    static STATE: std::sync::LazyLock<foldhash::quality::RandomState> = std::sync::LazyLock::new(Default::default);
    let mut s = STATE.build_hasher();
    let f = |s: &mut foldhash::quality::FoldHasher<'_>, v: &[f64]| v.iter().for_each(|x| x.to_bits().hash(s));
    match h {
        HistogramValue::Int(h) => {
            2u8.hash(&mut s);
            (
                h.schema,
                h.zero_threshold.to_bits(),
                h.zero_count,
                h.count,
                h.sum.to_bits(),
            )
                .hash(&mut s);
            (
                &h.positive_spans,
                &h.negative_spans,
                &h.positive_buckets,
                &h.negative_buckets,
            )
                .hash(&mut s);
            f(&mut s, &h.custom_values);
        }
        HistogramValue::Float(h) => {
            3u8.hash(&mut s);
            (
                h.schema,
                h.zero_threshold.to_bits(),
                h.zero_count.to_bits(),
                h.count.to_bits(),
                h.sum.to_bits(),
            )
                .hash(&mut s);
            (&h.positive_spans, &h.negative_spans).hash(&mut s);
            f(&mut s, &h.positive_buckets);
            f(&mut s, &h.negative_buckets);
            f(&mut s, &h.custom_values);
        }
    }
    s.finish()
}

/// The newest sample of an encoded chunk: its timestamp and value bits (a float's), or [`fingerprint`] (a
/// histogram's). `None` for an empty or undecodable chunk.
pub(crate) fn last_sample(encoding: Encoding, bytes: &[u8]) -> Option<(i64, u64)> {
    match encoding {
        Encoding::Xor => XorIter::new(bytes).last().map(|s| (s.t, s.v.to_bits())),
        Encoding::Histogram => HistogramIter::new(bytes)
            .last()
            .map(|(t, h)| (t, fingerprint(&HistogramValue::Int(h)))),
        Encoding::FloatHistogram => FloatHistogramIter::new(bytes)
            .last()
            .map(|(t, h)| (t, fingerprint(&HistogramValue::Float(h)))),
        Encoding::None => None,
    }
}

/// The sample timestamps of an encoded chunk, oldest first (as far as it decodes).
pub(crate) fn sample_times(encoding: Encoding, bytes: &[u8]) -> Box<dyn Iterator<Item = i64> + '_> {
    match encoding {
        Encoding::Xor => Box::new(XorIter::new(bytes).map(|s| s.t)),
        Encoding::Histogram => Box::new(HistogramIter::new(bytes).map(|(t, _)| t)),
        Encoding::FloatHistogram => Box::new(FloatHistogramIter::new(bytes).map(|(t, _)| t)),
        Encoding::None => Box::new(std::iter::empty()),
    }
}
