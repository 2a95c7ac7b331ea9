//! One series in the head: its labels (as symbol ids), its open chunk (XOR floats, or native histograms:
//! see [`super::histograms`]), references to its completed chunks in `chunks_head/`. The newest sample, which
//! decides whether the next one is in order, is the open chunk's last (its appender keeps it) or, when the
//! open chunk is empty, that of the newest completed chunk.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;

use heddle_model::HistogramValue;

use super::histograms::{Appended, HistogramKind, OpenHistogram, last_sample, sample_times};
use super::label_ids::LabelIds;
use super::read::ChunkData;
use crate::chunkenc::{Encoding, FloatHistogramChunk, HistogramChunk, XorChunk};
use crate::chunks_head::{ChunkDiskMapper, MappedChunk};
use crate::error::ChunkError;

/// Hard cap on an open XOR chunk's size: a chunk of this many bytes or more is cut before the next sample,
/// so no chunk exceeds 1024 bytes (one sample adds at most 19 bytes). Prometheus caps XOR chunks at 1024
/// bytes (PR #12054); cutting before a sample could cross it keeps the same bound without re-encoding.
pub(crate) const MAX_XOR_CHUNK_BYTES: usize = 1005;

/// When to cut the open chunk, as Prometheus' `head_append.go` does:
///
/// - a new chunk may run until the end of its chunk range (chunks never cross a multiple of `range_ms`, so a
///   block never splits a head chunk);
/// - once it holds a quarter of the target (30 of 120), the cut time is predicted so that the rest of the
///   chunk range is split evenly into chunks of about the target size, at the observed sample rate
///   (`computeChunkEndTime`);
/// - it is cut at twice the target at the latest (the rate went up since the prediction);
/// - and before the byte cap would be crossed.
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

/// Prometheus' `computeChunkEndTime(start, cur, max, 4)`: the chunk holding samples from `start` to `cur` is
/// a quarter full; split [start, max) into equal chunks at that rate and end this one after the first.
fn compute_chunk_end(start: i64, cur: i64, max: i64) -> i64 {
    let n = (max as f64 - start as f64) / ((cur as f64 - start as f64 + 1.0) * 4.0);
    if n <= 1.0 {
        return max;
    }
    (start as f64 + (max as f64 - start as f64) / n.floor()) as i64
}

/// Logs an open chunk [`SeriesState::resume_open`] dropped.
pub(crate) fn log_dropped_open_chunk(series_ref: u64, e: &ChunkError) {
    tracing::error!(
        series_ref,
        error = %e,
        "open chunk restored from the chunk snapshot does not decode: its samples are dropped"
    );
}

/// A series: immutable identity plus mutable sample state behind its own lock.
#[derive(Debug)]
pub(crate) struct MemSeries {
    pub(crate) series_ref: u64,
    /// (name, value) symbol ids, in label-name order.
    pub(crate) labels: LabelIds,
    /// The top 32 bits of the label hash (`index::hash_labels`), placing the series in the index's by-hash table.
    /// It sits in what was padding beside `logged`.
    pub(crate) label_bits: u32,
    /// Whether a WAL Series record for this series has been logged (a series created by an append whose WAL
    /// write failed is logged by the next append that touches it).
    logged: AtomicBool,
    pub(crate) state: Mutex<SeriesState>,
}

impl MemSeries {
    pub(crate) fn new(series_ref: u64, labels: LabelIds, label_bits: u32, logged: bool) -> Self {
        Self {
            series_ref,
            labels,
            label_bits,
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
        self.labels.iter().find(|&(n, _)| n == name).map(|(_, v)| v)
    }
}

/// The open chunk of a series. The histogram kinds are boxed (they are rare, and their appenders large), so a
/// float series pays nothing for them: the enum takes the XOR chunk's size.
#[derive(Debug)]
pub(crate) enum OpenChunk {
    /// Floats; an empty one when the series has no open chunk.
    Xor(XorChunk),
    Histogram(Box<OpenHistogram<HistogramChunk>>),
    FloatHistogram(Box<OpenHistogram<FloatHistogramChunk>>),
}

impl Default for OpenChunk {
    fn default() -> Self {
        OpenChunk::Xor(XorChunk::default())
    }
}

impl OpenChunk {
    pub(crate) fn encoding(&self) -> Encoding {
        match self {
            OpenChunk::Xor(_) => Encoding::Xor,
            OpenChunk::Histogram(_) => Encoding::Histogram,
            OpenChunk::FloatHistogram(_) => Encoding::FloatHistogram,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        matches!(self, OpenChunk::Xor(c) if c.is_empty())
    }

    pub(crate) fn min_time(&self) -> Option<i64> {
        match self {
            OpenChunk::Xor(c) => c.min_time(),
            OpenChunk::Histogram(h) => Some(h.min_time),
            OpenChunk::FloatHistogram(h) => Some(h.min_time),
        }
    }

    pub(crate) fn max_time(&self) -> Option<i64> {
        match self {
            OpenChunk::Xor(c) => c.max_time(),
            OpenChunk::Histogram(h) => Some(h.max_time),
            OpenChunk::FloatHistogram(h) => Some(h.max_time),
        }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            OpenChunk::Xor(c) => c.bytes(),
            OpenChunk::Histogram(h) => h.chunk.bytes(),
            OpenChunk::FloatHistogram(h) => h.chunk.bytes(),
        }
    }

    /// Timestamp and value bits (a histogram's fingerprint) of the newest sample.
    pub(crate) fn last_bits(&self) -> Option<(i64, u64)> {
        match self {
            OpenChunk::Xor(c) => c.last_bits(),
            OpenChunk::Histogram(h) => Some((h.max_time, h.last)),
            OpenChunk::FloatHistogram(h) => Some((h.max_time, h.last)),
        }
    }

    fn into_bytes(self) -> Vec<u8> {
        match self {
            OpenChunk::Xor(c) => c.into_bytes(),
            OpenChunk::Histogram(h) => h.chunk.into_bytes(),
            OpenChunk::FloatHistogram(h) => h.chunk.into_bytes(),
        }
    }
}

/// The samples of a series.
#[derive(Debug, Default)]
pub(crate) struct SeriesState {
    open: OpenChunk,
    /// Timestamps from here on go to a new XOR chunk (histogram chunks keep their own cut state).
    next_at: i64,
    /// Completed chunks in `chunks_head/`, oldest first. A boxed slice, not a `Vec`: a series gains a chunk
    /// every half hour or so, and the 8 bytes saved bring a series (`Arc<MemSeries>`) from jemalloc's 192-byte
    /// size class to its 160-byte one.
    mapped: Box<[MappedChunk]>,
    /// Completed chunks whose write to `chunks_head/` failed, kept in memory (normally `None`).
    #[allow(clippy::box_collection)] // 8 bytes per series instead of 24 for a field that is almost always empty.
    unwritten: Option<Box<Vec<ChunkData>>>,
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

/// Where cut chunks go.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChunkSink<'a> {
    pub(crate) policy: CutPolicy,
    pub(crate) mapper: &'a ChunkDiskMapper,
}

impl SeriesState {
    /// Timestamp and value bits of the newest sample. With an empty open chunk (after a restart without a
    /// snapshot, every sample is in `chunks_head/`) the newest completed chunk is read; its value bits only
    /// matter for a sample at the same timestamp. A chunk that cannot be read counts as ending in a NaN.
    pub(crate) fn last(&self, mapper: &ChunkDiskMapper) -> Option<(i64, u64)> {
        if let Some(last) = self.open.last_bits() {
            return Some(last);
        }
        let t = self.newest_completed_time()?;
        let unwritten = self
            .unwritten
            .as_ref()
            .and_then(|u| u.last())
            .filter(|c| c.max_time == t);
        let data = match unwritten {
            Some(c) => Some((c.encoding, c.data.clone())),
            None => self.mapped.last().and_then(|c| mapper.chunk(c.chunk_ref).ok()),
        };
        data.and_then(|(encoding, d)| last_sample(encoding, &d))
            .or(Some((t, f64::NAN.to_bits())))
    }

    /// [`judge`] against the newest sample, reading a completed chunk only for a sample that is not newer.
    pub(crate) fn judge(&self, t: i64, bits: u64, mapper: &ChunkDiskMapper) -> Verdict {
        match self.last_t() {
            Some(lt) if t <= lt => judge(self.last(mapper), t, bits),
            _ => Verdict::Append,
        }
    }

    /// End time of the newest completed chunk (in `chunks_head/` or kept in memory).
    fn newest_completed_time(&self) -> Option<i64> {
        let mapped = self.mapped.last().map(|c| c.max_time);
        let unwritten = self.unwritten.as_ref().and_then(|u| u.last()).map(|c| c.max_time);
        mapped.max(unwritten)
    }

    /// Timestamp of the newest sample.
    fn last_t(&self) -> Option<i64> {
        self.open.max_time().or_else(|| self.newest_completed_time())
    }

    /// End time of the newest chunk in `chunks_head/` (`i64::MIN` without one): WAL replay skips samples up to
    /// it, since they are already in those chunks.
    pub(crate) fn mapped_max_time(&self) -> i64 {
        self.mapped.last().map_or(i64::MIN, |c| c.max_time)
    }

    /// Gives a series its chunks found in `chunks_head/` at startup. With an open chunk (restored from a
    /// snapshot) only the chunks that end before it are kept; returns how many were dropped. Without one, the
    /// newest sample is the last chunk's (see [`SeriesState::last`]).
    pub(crate) fn attach_mapped(&mut self, chunks: &[MappedChunk]) -> usize {
        debug_assert!(self.mapped.is_empty(), "series already has mapped chunks");
        self.mapped = match self.open.min_time() {
            Some(open_min) => chunks.iter().filter(|c| c.max_time < open_min).copied().collect(),
            None => chunks.into(),
        };
        chunks.len() - self.mapped.len()
    }

    /// Drops the chunks that end before `mint`. Returns how many went, and whether the series has no sample
    /// left at or after `mint` (then it can be removed).
    pub(crate) fn truncate_before(&mut self, mint: i64) -> (usize, bool) {
        let empty = self.last_t().is_none_or(|t| t < mint);
        let before = self.mapped.len();
        if self.mapped.iter().any(|c| c.max_time < mint) {
            self.mapped = self.mapped.iter().filter(|c| c.max_time >= mint).copied().collect();
        }
        let mut removed = before - self.mapped.len();
        if let Some(u) = self.unwritten.as_mut() {
            let n = u.len();
            u.retain(|c| c.max_time >= mint);
            removed += n - u.len();
            if u.is_empty() {
                self.unwritten = None;
            }
        }
        if empty && !self.open.is_empty() {
            self.open = OpenChunk::default();
            removed += 1;
        }
        (removed, empty)
    }

    /// Restores the open chunk of a series from a chunk snapshot. The caller checked that `chunk` holds
    /// samples.
    pub(crate) fn restore_open(&mut self, chunk: XorChunk, policy: CutPolicy) {
        if let (Some(lo), Some(hi)) = (chunk.min_time(), chunk.max_time()) {
            let end = policy.range_end(lo);
            // The prediction Prometheus makes at a quarter of the target, made now if the chunk is past it.
            self.next_at = if chunk.num_samples() > policy.target_samples / 4 {
                compute_chunk_end(lo, hi, end)
            } else {
                end
            };
            self.open = OpenChunk::Xor(chunk);
        }
    }

    /// Restores an open histogram chunk from a chunk snapshot.
    pub(crate) fn restore_open_histogram(&mut self, open: OpenChunk) {
        debug_assert!(!matches!(open, OpenChunk::Xor(_)), "floats go through restore_open");
        self.open = open;
    }

    /// Decodes the appender state of an open chunk restored from a snapshot, before its first append
    /// ([`XorChunk::restore`]). When it does not decode, or decodes to another newest sample than its record
    /// gave, its samples are dropped (the error says why) and the next append starts a new chunk: they
    /// cannot be read back as they were acknowledged.
    pub(crate) fn resume_open(&mut self) -> Result<(), ChunkError> {
        if let OpenChunk::Xor(c) = &mut self.open
            && let Err(e) = c.resume()
        {
            self.open = OpenChunk::default();
            return Err(e);
        }
        Ok(())
    }

    /// The open chunk as a snapshot records it: (mint, maxt, encoding, bytes, value bits of the newest sample;
    /// meaningful for floats only).
    pub(crate) fn open_chunk(&self) -> Option<(i64, i64, Encoding, &[u8], u64)> {
        let (lo, hi) = (self.open.min_time()?, self.open.max_time()?);
        let (_, bits) = self.open.last_bits()?;
        Some((lo, hi, self.open.encoding(), self.open.bytes(), bits))
    }

    /// Appends a sample the caller has judged [`Verdict::Append`], cutting the open chunk first when the
    /// policy says so. Returns whether a chunk was cut.
    pub(crate) fn append(&mut self, series_ref: u64, t: i64, v: f64, sink: ChunkSink<'_>) -> Result<bool, ChunkError> {
        debug_assert_eq!(
            self.judge(t, v.to_bits(), sink.mapper),
            Verdict::Append,
            "sample at {t} is not in order"
        );
        let policy = sink.policy;
        let mut cut = false;
        if !matches!(self.open, OpenChunk::Xor(_)) {
            // A float after histograms: another encoding, another chunk.
            self.cut(series_ref, sink.mapper);
            cut = true;
        }
        let OpenChunk::Xor(open) = &mut self.open else {
            unreachable!("cut leaves an empty XOR chunk open");
        };
        if !open.is_empty() {
            let n = open.num_samples();
            if n == policy.target_samples / 4
                && let (Some(lo), Some(hi)) = (open.min_time(), open.max_time())
            {
                self.next_at = compute_chunk_end(lo, hi, self.next_at);
            }
            if t >= self.next_at
                || n >= policy.target_samples.saturating_mul(2)
                || open.bytes().len() >= MAX_XOR_CHUNK_BYTES
            {
                self.cut(series_ref, sink.mapper);
                cut = true;
            }
        }
        if self.open.is_empty() {
            self.next_at = policy.range_end(t);
        }
        let OpenChunk::Xor(open) = &mut self.open else {
            unreachable!("the open chunk is an XOR chunk");
        };
        open.append(t, v)?;
        Ok(cut)
    }

    /// Appends a native histogram sample the caller has judged [`Verdict::Append`] (`fp` is its
    /// [`super::histograms::fingerprint`]). The open chunk is cut first when it holds another encoding, and
    /// the histogram chunk rules may cut it too. Returns whether a chunk was cut.
    pub(crate) fn append_histogram(
        &mut self,
        series_ref: u64,
        t: i64,
        h: &HistogramValue,
        fp: u64,
        sink: ChunkSink<'_>,
    ) -> Result<bool, ChunkError> {
        debug_assert_eq!(
            self.judge(t, fp, sink.mapper),
            Verdict::Append,
            "sample at {t} is not in order"
        );
        match h {
            HistogramValue::Int(h) => self.append_kind::<HistogramChunk>(series_ref, t, h, fp, sink),
            HistogramValue::Float(h) => self.append_kind::<FloatHistogramChunk>(series_ref, t, h, fp, sink),
        }
    }

    /// [`Self::append_histogram`] for one chunk kind.
    fn append_kind<C: HistogramKind>(
        &mut self,
        series_ref: u64,
        t: i64,
        h: &C::Value,
        fp: u64,
        sink: ChunkSink<'_>,
    ) -> Result<bool, ChunkError> {
        let range_ms = sink.policy.range_ms;
        if let Some(open) = C::open_of(&mut self.open) {
            return match open.append(t, h, fp, range_ms)? {
                Appended::Same => Ok(false),
                Appended::Completed(done) => {
                    self.store(
                        series_ref,
                        C::ENCODING,
                        done.min_time,
                        done.max_time,
                        done.chunk.into_data(),
                        sink.mapper,
                    );
                    Ok(true)
                }
            };
        }
        let cut = !self.open.is_empty();
        if cut {
            self.cut(series_ref, sink.mapper);
        }
        self.open = C::wrap(Box::new(OpenHistogram::start(t, h, fp, None, range_ms)?));
        Ok(cut)
    }

    /// Moves the open chunk to `chunks_head/` (or, if that write fails, to memory).
    fn cut(&mut self, series_ref: u64, mapper: &ChunkDiskMapper) {
        let done = std::mem::take(&mut self.open);
        let (Some(min_time), Some(max_time)) = (done.min_time(), done.max_time()) else {
            return;
        };
        let encoding = done.encoding();
        self.store(series_ref, encoding, min_time, max_time, done.into_bytes(), mapper);
    }

    /// Stores a completed chunk in `chunks_head/` (or, if that write fails, in memory).
    fn store(
        &mut self,
        series_ref: u64,
        encoding: Encoding,
        min_time: i64,
        max_time: i64,
        bytes: Vec<u8>,
        mapper: &ChunkDiskMapper,
    ) {
        match mapper.write_chunk(series_ref, min_time, max_time, encoding, &bytes) {
            Ok(chunk_ref) => {
                let chunk = MappedChunk {
                    chunk_ref,
                    min_time,
                    max_time,
                };
                self.mapped = self.mapped.iter().copied().chain([chunk]).collect();
            }
            Err(e) => {
                tracing::error!(series_ref, error = %e, "cannot write chunk to chunks_head, keeping it in memory");
                self.unwritten.get_or_insert_default().push(ChunkData {
                    encoding,
                    min_time,
                    max_time,
                    data: Bytes::from(bytes),
                });
            }
        }
    }

    /// Oldest and newest sample timestamps.
    pub(crate) fn time_range(&self) -> Option<(i64, i64)> {
        let mapped = self.mapped.first().map(|c| c.min_time);
        let unwritten = self.unwritten.as_ref().and_then(|u| u.first()).map(|c| c.min_time);
        let min = [mapped, unwritten, self.open.min_time()].into_iter().flatten().min()?;
        let max = self.last_t()?;
        Some((min, max))
    }

    /// The oldest sample time at or after `t`, or `None` when the series has none. Never later than the true
    /// answer: a completed chunk that cannot be read back is taken to start at `t` (callers use this to skip
    /// empty block ranges, and skipping one that holds samples would lose them).
    pub(crate) fn first_time_at_or_after(&self, t: i64, mapper: &ChunkDiskMapper) -> Option<i64> {
        let first_in = |min_time: i64, max_time: i64, data: &dyn Fn() -> Option<(Encoding, Bytes)>| -> Option<i64> {
            if max_time < t {
                return None;
            }
            if min_time >= t {
                return Some(min_time);
            }
            // The chunk straddles `t`: only its samples tell.
            match data() {
                Some((encoding, bytes)) => sample_times(encoding, &bytes).find(|&st| st >= t).or(Some(t)),
                None => Some(t),
            }
        };
        // Completed chunks are oldest first and do not overlap: the first one ending at or after `t` decides.
        let i = self.mapped.partition_point(|c| c.max_time < t);
        let mapped = self
            .mapped
            .get(i)
            .and_then(|c| first_in(c.min_time, c.max_time, &|| mapper.chunk(c.chunk_ref).ok()));
        let unwritten = self.unwritten.as_ref().and_then(|u| {
            u.iter()
                .filter_map(|c| first_in(c.min_time, c.max_time, &|| Some((c.encoding, c.data.clone()))))
                .min()
        });
        let open = match (self.open.min_time(), self.open.max_time()) {
            (Some(lo), Some(hi)) => first_in(lo, hi, &|| {
                Some((self.open.encoding(), Bytes::copy_from_slice(self.open.bytes())))
            }),
            _ => None,
        };
        [mapped, unwritten, open].into_iter().flatten().min()
    }

    /// Whether any sample lies in [mint, maxt].
    pub(crate) fn overlaps(&self, mint: i64, maxt: i64) -> bool {
        self.time_range().is_some_and(|(lo, hi)| lo <= maxt && hi >= mint)
    }

    /// Chunks that overlap [mint, maxt], oldest first; the open chunk is copied. A chunk that cannot be read
    /// back from `chunks_head/` (damaged on disk) is left out and logged: a corrupt sample is never served.
    pub(crate) fn chunks(&self, mint: i64, maxt: i64, mapper: &ChunkDiskMapper) -> Vec<ChunkData> {
        let overlaps = |lo: i64, hi: i64| lo <= maxt && hi >= mint;
        let mut out: Vec<ChunkData> = Vec::new();
        for c in self.mapped.iter().filter(|c| overlaps(c.min_time, c.max_time)) {
            match mapper.chunk(c.chunk_ref) {
                Ok((encoding, data)) => out.push(ChunkData {
                    encoding,
                    min_time: c.min_time,
                    max_time: c.max_time,
                    data,
                }),
                Err(e) => tracing::error!(chunk_ref = c.chunk_ref, error = %e, "skipping unreadable head chunk"),
            }
        }
        if let Some(unwritten) = &self.unwritten {
            out.extend(unwritten.iter().filter(|c| overlaps(c.min_time, c.max_time)).cloned());
            out.sort_by_key(|c| c.min_time);
        }
        if let (Some(lo), Some(hi)) = (self.open.min_time(), self.open.max_time())
            && overlaps(lo, hi)
        {
            out.push(ChunkData {
                encoding: self.open.encoding(),
                min_time: lo,
                max_time: hi,
                data: Bytes::copy_from_slice(self.open.bytes()),
            });
        }
        out
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

    /// A mapper writing to a fresh temporary directory.
    fn mapper() -> (tempfile::TempDir, ChunkDiskMapper) {
        let dir = tempfile::tempdir().unwrap();
        let m = ChunkDiskMapper::open(
            dir.path(),
            crate::chunks_head::DEFAULT_MAX_FILE_SIZE,
            std::sync::Arc::new(crate::file::StdFiles),
            &Default::default(),
        )
        .unwrap();
        (dir, m)
    }

    fn counts(chunks: &[ChunkData]) -> Vec<usize> {
        chunks.iter().map(|c| decode_xor(&c.data).unwrap().len()).collect()
    }

    #[test]
    fn predicted_cuts_spread_samples_over_the_chunk_range() {
        let (_d, m) = mapper();
        let sink = ChunkSink {
            policy: POLICY,
            mapper: &m,
        };
        let mut s = SeriesState::default();
        // 15 s interval over one 2 h range: 480 samples, cut into 4 chunks of 120 as in Prometheus.
        for i in 0..480 {
            s.append(1, i * 15_000, i as f64, sink).unwrap();
        }
        let chunks = s.chunks(i64::MIN, i64::MAX, &m);
        assert_eq!(counts(&chunks), vec![120, 120, 120, 120]);
        assert_eq!((chunks[1].min_time, chunks[1].max_time), (1_800_000, 3_585_000));
        assert_eq!(s.time_range(), Some((0, 479 * 15_000)));
        assert_eq!(s.mapped_max_time(), 359 * 15_000, "three chunks are in chunks_head");
        // 1 s interval: the prediction at 30 samples gives ~117-sample chunks that end exactly at the range end.
        let mut s = SeriesState::default();
        for i in 0..7_200 {
            s.append(2, i * 1000, 1.0, sink).unwrap();
        }
        let chunks = s.chunks(i64::MIN, i64::MAX, &m);
        let c = counts(&chunks);
        assert!(c.iter().all(|&n| (100..=125).contains(&n)), "chunk sizes {c:?}");
        assert_eq!(c.iter().sum::<usize>(), 7_200);
    }

    #[test]
    fn compute_chunk_end_matches_prometheus() {
        for (name, start, cur, max, want) in [
            ("quarter of a 2h range at 1s", 0, 29_000, 7_200_000, 116_129),
            ("already past a quarter", 0, 3_000_000, 7_200_000, 7_200_000),
            ("at 15s", 0, 435_000, 7_200_000, 1_800_000),
        ] {
            assert_eq!(compute_chunk_end(start, cur, max), want, "{name}");
        }
    }

    #[test]
    fn cuts_at_twice_the_target_when_the_rate_rises() {
        let (_d, m) = mapper();
        let sink = ChunkSink {
            policy: POLICY,
            mapper: &m,
        };
        let mut s = SeriesState::default();
        // 30 samples at 60 s predict a chunk of 1 h; then samples arrive every 10 ms.
        for i in 0..30 {
            s.append(1, i * 60_000, 0.0, sink).unwrap();
        }
        for i in 0..600 {
            s.append(1, 1_800_000 + i * 10, 0.0, sink).unwrap();
        }
        let c = counts(&s.chunks(i64::MIN, i64::MAX, &m));
        assert_eq!(c[0], 240, "chunk sizes {c:?}");
    }

    #[test]
    fn cuts_at_byte_cap() {
        let (_d, m) = mapper();
        let policy = CutPolicy {
            target_samples: 1000,
            ..POLICY
        };
        let sink = ChunkSink { policy, mapper: &m };
        let mut s = SeriesState::default();
        // Random value bits need ~70 bits a sample: the byte cap cuts long before the sample target.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..300i64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            s.append(1, i, f64::from_bits(x), sink).unwrap();
        }
        let chunks = s.chunks(i64::MIN, i64::MAX, &m);
        assert!(chunks.len() >= 3, "expected byte-cap cuts, got {} chunks", chunks.len());
        for c in &chunks {
            assert!(c.data.len() <= 1024, "chunk of {} bytes", c.data.len());
        }
        assert!(
            chunks[0].data.len() > MAX_XOR_CHUNK_BYTES,
            "the first chunk was filled to the cap"
        );
        assert_eq!(counts(&chunks).iter().sum::<usize>(), 300);
    }

    #[test]
    fn never_crosses_a_chunk_range_boundary() {
        let (_d, m) = mapper();
        let sink = ChunkSink {
            policy: POLICY,
            mapper: &m,
        };
        let mut s = SeriesState::default();
        for t in [7_199_000, 7_199_500, 7_200_000, 7_201_000] {
            s.append(1, t, 1.0, sink).unwrap();
        }
        let chunks = s.chunks(i64::MIN, i64::MAX, &m);
        let ranges: Vec<(i64, i64)> = chunks.iter().map(|c| (c.min_time, c.max_time)).collect();
        assert_eq!(ranges, vec![(7_199_000, 7_199_500), (7_200_000, 7_201_000)]);
        // Time filtering keeps only overlapping chunks.
        assert_eq!(s.chunks(7_200_500, 7_300_000, &m).len(), 1);
        assert_eq!(s.chunks(0, 10, &m).len(), 0);
        assert!(s.overlaps(7_201_000, 7_201_000));
        assert!(!s.overlaps(7_201_001, i64::MAX));
    }

    /// With an empty open chunk (every sample in `chunks_head/`, as after a restart once the WAL was
    /// truncated), the newest sample is read from the newest completed chunk and judged like an open one.
    #[test]
    fn newest_sample_comes_from_the_last_mapped_chunk_when_nothing_is_open() {
        let (_d, m) = mapper();
        let mut chunk = XorChunk::default();
        for t in [10, 20, 30] {
            chunk.append(t, t as f64 / 4.0).unwrap();
        }
        let chunk_ref = m.write_chunk(7, 10, 30, Encoding::Xor, chunk.bytes()).unwrap();
        m.flush().unwrap();
        let mut s = SeriesState::default();
        assert_eq!(
            s.attach_mapped(&[MappedChunk {
                chunk_ref,
                min_time: 10,
                max_time: 30,
            }]),
            0
        );
        let v = (30.0f64 / 4.0).to_bits();
        assert_eq!(s.last(&m), Some((30, v)));
        for (name, t, bits, want) in [
            ("exact repeat", 30, v, Verdict::Duplicate),
            ("same ts other value", 30, 1.0f64.to_bits(), Verdict::DuplicateTimestamp),
            ("older", 29, v, Verdict::OutOfOrder),
            ("newer", 31, v, Verdict::Append),
        ] {
            assert_eq!(s.judge(t, bits, &m), want, "case {name}");
        }
        assert_eq!(s.time_range(), Some((10, 30)));
        assert!(s.open_chunk().is_none());
    }

    /// A series' allocation (the `Arc`'s two counters and `MemSeries`) fits jemalloc's 160-byte size class:
    /// 8 bytes more would cost 32 per series (the next class is 192).
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_series_fits_the_160_byte_size_class() {
        let size = 2 * std::mem::size_of::<usize>() + std::mem::size_of::<MemSeries>();
        assert!(size <= 160, "Arc<MemSeries> takes {size} bytes");
    }
}
