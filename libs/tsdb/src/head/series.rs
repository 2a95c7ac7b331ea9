//! One series in the head: its labels (as symbol ids), its open XOR chunk, its completed chunks, and the last
//! sample, which decides whether the next one is in order.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;

use super::read::ChunkData;
use crate::chunkenc::XorChunk;
use crate::error::ChunkError;

/// Hard cap on an open XOR chunk's size: a chunk of this many bytes or more is cut before the next sample,
/// so no chunk exceeds 1024 bytes (one sample adds at most 19 bytes). Prometheus' rule since PR #12054.
pub(crate) const MAX_XOR_CHUNK_BYTES: usize = 1005;

/// When to cut the open chunk.
///
/// Simplified from Prometheus (`head_append.go`): it cuts at the target count (120) exactly, while
/// Prometheus predicts, from the first quarter of the chunk, a cut time that spreads samples evenly over the
/// chunk range (and cuts at twice the target at the latest). Like Prometheus it also cuts at the byte cap
/// and never lets a chunk cross a chunk-range boundary, so a block never needs to split a head chunk.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CutPolicy {
    pub(crate) target_samples: u16,
    pub(crate) range_ms: i64,
}

impl CutPolicy {
    /// First timestamp of the chunk range after the one holding `t`.
    fn range_end(&self, t: i64) -> i64 {
        t.div_euclid(self.range_ms)
            .saturating_add(1)
            .saturating_mul(self.range_ms)
    }
}

/// A completed chunk of a series.
///
/// The seam for `chunks_head/`: completed chunks will be written to memory-mapped files and referred to by
/// file position instead of being held here.
#[derive(Debug, Clone)]
pub(crate) enum HeadChunk {
    /// Bytes held in memory.
    InMemory { min_time: i64, max_time: i64, data: Bytes },
}

impl HeadChunk {
    fn min_time(&self) -> i64 {
        match self {
            HeadChunk::InMemory { min_time, .. } => *min_time,
        }
    }

    fn max_time(&self) -> i64 {
        match self {
            HeadChunk::InMemory { max_time, .. } => *max_time,
        }
    }

    fn to_data(&self) -> ChunkData {
        match self {
            HeadChunk::InMemory {
                min_time,
                max_time,
                data,
            } => ChunkData {
                min_time: *min_time,
                max_time: *max_time,
                data: data.clone(),
            },
        }
    }
}

/// A series: immutable identity plus mutable sample state behind its own lock.
#[derive(Debug)]
pub(crate) struct MemSeries {
    pub(crate) series_ref: u64,
    /// (name, value) symbol ids, in label-name order.
    pub(crate) labels: Box<[(u32, u32)]>,
    /// Whether a WAL Series record for this series has been logged (a series created by an append whose WAL
    /// write failed is logged by the next append that touches it).
    logged: AtomicBool,
    pub(crate) state: Mutex<SeriesState>,
}

impl MemSeries {
    pub(crate) fn new(series_ref: u64, labels: Box<[(u32, u32)]>, logged: bool) -> Self {
        Self {
            series_ref,
            labels,
            logged: AtomicBool::new(logged),
            state: Mutex::new(SeriesState::default()),
        }
    }

    pub(crate) fn is_logged(&self) -> bool {
        self.logged.load(Ordering::Acquire)
    }

    pub(crate) fn set_logged(&self) {
        self.logged.store(true, Ordering::Release);
    }

    /// The symbol id of the value of label `name`, if the series has it.
    pub(crate) fn value_of(&self, name: u32) -> Option<u32> {
        self.labels.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }
}

/// The samples of a series.
#[derive(Debug, Default)]
pub(crate) struct SeriesState {
    open: XorChunk,
    /// Timestamps from here on go to a new chunk (end of the open chunk's chunk range).
    open_end: i64,
    completed: Vec<HeadChunk>,
    /// Timestamp and value bits of the newest sample.
    last: Option<(i64, u64)>,
}

/// What the head does with one sample, given the series' newest sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Append,
    /// Same timestamp, same value bits: an idempotent retry, accepted without storing it again.
    Duplicate,
    OutOfOrder,
    /// Same timestamp, different value bits.
    DuplicateTimestamp,
}

/// Judges a sample at `t` with value bits `v` after `last`.
pub(crate) fn judge(last: Option<(i64, u64)>, t: i64, v: u64) -> Verdict {
    match last {
        None => Verdict::Append,
        Some((lt, _)) if t > lt => Verdict::Append,
        Some((lt, lv)) if t == lt => {
            if v == lv {
                Verdict::Duplicate
            } else {
                Verdict::DuplicateTimestamp
            }
        }
        Some(_) => Verdict::OutOfOrder,
    }
}

impl SeriesState {
    pub(crate) fn last(&self) -> Option<(i64, u64)> {
        self.last
    }

    /// Appends a sample the caller has judged [`Verdict::Append`], cutting the open chunk first when the
    /// policy says so. Returns whether a chunk was cut.
    pub(crate) fn append(&mut self, t: i64, v: f64, policy: CutPolicy) -> Result<bool, ChunkError> {
        debug_assert_eq!(
            judge(self.last, t, v.to_bits()),
            Verdict::Append,
            "sample at {t} is not in order"
        );
        let mut cut = false;
        if !self.open.is_empty()
            && (self.open.num_samples() >= policy.target_samples
                || self.open.bytes().len() >= MAX_XOR_CHUNK_BYTES
                || t >= self.open_end)
        {
            self.cut();
            cut = true;
        }
        if self.open.is_empty() {
            self.open_end = policy.range_end(t);
        }
        self.open.append(t, v)?;
        self.last = Some((t, v.to_bits()));
        Ok(cut)
    }

    fn cut(&mut self) {
        let done = std::mem::take(&mut self.open);
        if let (Some(min_time), Some(max_time)) = (done.min_time(), done.max_time()) {
            let mut data = done.into_bytes();
            data.shrink_to_fit();
            self.completed.push(HeadChunk::InMemory {
                min_time,
                max_time,
                data: Bytes::from(data),
            });
        }
    }

    /// Oldest and newest sample timestamps.
    pub(crate) fn time_range(&self) -> Option<(i64, i64)> {
        let min = self
            .completed
            .first()
            .map(HeadChunk::min_time)
            .or(self.open.min_time())?;
        let max = self.last.map(|(t, _)| t)?;
        Some((min, max))
    }

    /// Whether any sample lies in [mint, maxt].
    pub(crate) fn overlaps(&self, mint: i64, maxt: i64) -> bool {
        self.time_range().is_some_and(|(lo, hi)| lo <= maxt && hi >= mint)
    }

    /// Completed and open chunks that overlap [mint, maxt], oldest first; the open chunk is copied.
    pub(crate) fn chunks(&self, mint: i64, maxt: i64) -> Vec<ChunkData> {
        let mut out: Vec<ChunkData> = self
            .completed
            .iter()
            .filter(|c| c.min_time() <= maxt && c.max_time() >= mint)
            .map(HeadChunk::to_data)
            .collect();
        if let (Some(lo), Some(hi)) = (self.open.min_time(), self.open.max_time())
            && lo <= maxt
            && hi >= mint
        {
            out.push(ChunkData {
                min_time: lo,
                max_time: hi,
                data: Bytes::copy_from_slice(self.open.bytes()),
            });
        }
        out
    }

    /// Number of chunks, the open one included.
    #[cfg(test)]
    pub(crate) fn num_chunks(&self) -> usize {
        self.completed.len() + usize::from(!self.open.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunkenc::decode_xor;

    const POLICY: CutPolicy = CutPolicy {
        target_samples: 120,
        range_ms: 7_200_000,
    };

    #[test]
    fn verdicts() {
        let nan = f64::NAN.to_bits();
        for (name, last, t, v, want) in [
            ("first sample", None, 5, 1, Verdict::Append),
            ("newer", Some((5, 1)), 6, 1, Verdict::Append),
            ("same ts same value", Some((5, 1)), 5, 1, Verdict::Duplicate),
            ("same ts same nan", Some((5, nan)), 5, nan, Verdict::Duplicate),
            ("same ts other value", Some((5, 1)), 5, 2, Verdict::DuplicateTimestamp),
            ("older", Some((5, 1)), 4, 1, Verdict::OutOfOrder),
        ] {
            assert_eq!(judge(last, t, v), want, "case {name}");
        }
    }

    #[test]
    fn cuts_at_target_samples() {
        let mut s = SeriesState::default();
        for i in 0..250 {
            s.append(i * 1000, i as f64, POLICY).unwrap();
        }
        assert_eq!(s.num_chunks(), 3);
        let chunks = s.chunks(i64::MIN, i64::MAX);
        let counts: Vec<usize> = chunks.iter().map(|c| decode_xor(&c.data).unwrap().len()).collect();
        assert_eq!(counts, vec![120, 120, 10]);
        assert_eq!((chunks[1].min_time, chunks[1].max_time), (120_000, 239_000));
        assert_eq!(s.time_range(), Some((0, 249_000)));
    }

    #[test]
    fn cuts_at_byte_cap() {
        let mut s = SeriesState::default();
        let policy = CutPolicy {
            target_samples: 1000,
            ..POLICY
        };
        // Random value bits need ~70 bits a sample: the byte cap cuts long before the sample target.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..300i64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            s.append(i, f64::from_bits(x), policy).unwrap();
        }
        let chunks = s.chunks(i64::MIN, i64::MAX);
        assert!(chunks.len() >= 3, "expected byte-cap cuts, got {} chunks", chunks.len());
        for c in &chunks {
            assert!(c.data.len() <= 1024, "chunk of {} bytes", c.data.len());
        }
        assert!(
            chunks[0].data.len() > MAX_XOR_CHUNK_BYTES,
            "the first chunk was filled to the cap"
        );
        let total: usize = chunks.iter().map(|c| decode_xor(&c.data).unwrap().len()).sum();
        assert_eq!(total, 300);
    }

    #[test]
    fn never_crosses_a_chunk_range_boundary() {
        let mut s = SeriesState::default();
        for t in [7_199_000, 7_199_500, 7_200_000, 7_201_000] {
            s.append(t, 1.0, POLICY).unwrap();
        }
        let chunks = s.chunks(i64::MIN, i64::MAX);
        let ranges: Vec<(i64, i64)> = chunks.iter().map(|c| (c.min_time, c.max_time)).collect();
        assert_eq!(ranges, vec![(7_199_000, 7_199_500), (7_200_000, 7_201_000)]);
        // Time filtering keeps only overlapping chunks.
        assert_eq!(s.chunks(7_200_500, 7_300_000).len(), 1);
        assert_eq!(s.chunks(0, 10).len(), 0);
        assert!(s.overlaps(7_201_000, 7_201_000));
        assert!(!s.overlaps(7_201_001, i64::MAX));
    }
}
