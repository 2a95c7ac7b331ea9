//! Cutting blocks from the head (Prometheus `db.compactHead` with a `RangeHead`): which range is due, writing
//! it as a block, and the minimum valid time that keeps a compacted range closed to appends.
//!
//! Order matters for "nothing acknowledged is lost": the caller raises the minimum valid time to the block's
//! end (under the appender lock, so no append in flight can still land before it), writes the block, and only
//! then truncates the head. A crash between writing the block and truncating replays the WAL on the next start
//! with the block's end as minimum valid time, so the block's samples are neither lost nor loaded twice.

use std::cmp::Ordering as CmpOrdering;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::read::ChunkData;
use super::series::MemSeries;
use super::{Head, TruncateStats, lock, read};
use crate::block::{BlockMeta, BlockWriter, new_ulid};
use crate::chunk_samples::{ChunkSample, ChunkValue, encode_chunks};
use crate::chunkenc::{Encoding, FloatHistogramIter, HistogramIter, XorIter};
use crate::error::TsdbError;

/// The start of the block range holding `t`.
pub fn range_start(t: i64, range_ms: i64) -> i64 {
    t.div_euclid(range_ms).saturating_mul(range_ms)
}

/// The block range `[start, end)` holding `t`, clamped to the `i64` time line: the first range starts at
/// `i64::MIN` and the last ends at `i64::MAX` (so a sample at `i64::MAX` is in no block range).
pub fn block_range_of(t: i64, range_ms: i64) -> (i64, i64) {
    let q = t.div_euclid(range_ms);
    (q.saturating_mul(range_ms), q.saturating_add(1).saturating_mul(range_ms))
}

/// What [`Head::compact`] did.
#[derive(Debug, Clone, Default)]
pub struct CompactStats {
    /// Blocks written, oldest first.
    pub blocks: Vec<BlockMeta>,
    /// The head's truncation, if any range was compacted.
    pub truncate: Option<TruncateStats>,
}

impl Head {
    /// Compacts into blocks under `parent`, then truncates the head and checkpoints its WAL:
    /// - `force == false`: every block range that is due ([`Head::compactable_range`]), oldest first;
    /// - `force == true` (flush, idle head): everything the head holds, one block per block range, the last
    ///   one ending just after the newest sample; later samples of that range are refused as out of bounds.
    ///
    /// Compactions of one head are serialized; appends go on while blocks are written (samples of a range
    /// being compacted are refused from the moment it starts).
    pub fn compact(
        &self,
        parent: &Path,
        range_ms: i64,
        tenant: Option<&str>,
        force: bool,
    ) -> Result<CompactStats, TsdbError> {
        self.compact_then(parent, range_ms, tenant, force, |_| Ok(()))
    }

    /// [`Head::compact`] that hands the blocks written to `publish` before the head is truncated, so a reader
    /// of the head and its blocks (read in that order) finds every sample in one of them at every moment:
    /// before the truncation in the head, after it in a block `publish` has made readable. When `publish`
    /// fails the head is not truncated (its samples stay readable there) and the error is returned.
    pub fn compact_then(
        &self,
        parent: &Path,
        range_ms: i64,
        tenant: Option<&str>,
        force: bool,
        publish: impl FnOnce(&[BlockMeta]) -> Result<(), TsdbError>,
    ) -> Result<CompactStats, TsdbError> {
        let _one_at_a_time = lock(&self.compacting);
        if lock(&self.appender).wal.is_none() {
            return Err(TsdbError::Closed);
        }
        let mut out = CompactStats::default();
        let mut truncate_at = None;
        // Each turn writes the range of the oldest sample not compacted yet and raises the minimum valid time
        // past it, so the turns are at most the non-empty block ranges the head holds: the cost follows the
        // data, never the time span between its oldest and newest sample.
        loop {
            let range = if force {
                self.next_forced_range(range_ms)
            } else {
                self.compactable_range(range_ms)
            };
            let Some((mint, maxt)) = range else { break };
            if maxt <= mint || maxt <= self.min_valid_time() {
                // Nothing left that a block can hold (a sample at `i64::MAX` is past every block's end).
                break;
            }
            self.raise_min_valid_time(maxt);
            crate::file::failpoint("compact-before-block");
            if let Some(meta) = self.write_block(parent, mint, maxt, tenant)? {
                out.blocks.push(meta);
                crate::file::failpoint("compact-after-block");
            }
            truncate_at = Some(maxt);
        }
        if let Some(t) = truncate_at {
            publish(&out.blocks)?;
            out.truncate = Some(self.truncate(t)?);
        }
        Ok(out)
    }

    /// The next range a forced compaction writes: from the oldest sample not yet compacted to the end of its
    /// block range, or just past the newest sample if that comes first.
    fn next_forced_range(&self, range_ms: i64) -> Option<(i64, i64)> {
        let stats = self.stats();
        let (lo, hi) = (stats.min_time?, stats.max_time?);
        let lo = self.oldest_sample_at_or_after(lo.max(self.min_valid_time()))?;
        if lo > hi {
            return None;
        }
        let (_, end) = block_range_of(lo, range_ms);
        Some((lo, end.min(hi.saturating_add(1))))
    }

    /// The oldest sample time at or after `t` over every series (`None`: no sample there). O(series), reading
    /// at most one completed chunk per series; this is what lets compaction jump over empty block ranges.
    pub fn oldest_sample_at_or_after(&self, t: i64) -> Option<i64> {
        let all: Vec<Arc<MemSeries>> = read(&self.index).all_series().cloned().collect();
        all.iter()
            .filter_map(|s| lock(&s.state).first_time_at_or_after(t, &self.chunks))
            .min()
    }

    /// Samples before this time are refused by appends (a block holds that range).
    pub fn min_valid_time(&self) -> i64 {
        self.min_valid_time.load(Ordering::Relaxed)
    }

    /// Raises the minimum valid time to `t` (never lowers it). Takes the appender lock, so once this returns
    /// no append can add a sample before `t`.
    pub fn raise_min_valid_time(&self, t: i64) {
        let _app = lock(&self.appender);
        self.min_valid_time.fetch_max(t, Ordering::Relaxed);
    }

    /// The oldest block range `[start, start + range_ms)` that is due for compaction: the head spans more than
    /// 1.5 block ranges (Prometheus' `compactable`), so that range lies wholly before the last half range in
    /// which appends still arrive. `None` when the head is not that long yet.
    ///
    /// The range is the one holding the oldest sample not compacted yet (at or after the minimum valid time):
    /// empty ranges in between are skipped, however many there are. Its start is clipped to the minimum valid
    /// time, since what lies before it is in a block already.
    pub fn compactable_range(&self, range_ms: i64) -> Option<(i64, i64)> {
        let stats = self.stats();
        let (lo, hi) = (stats.min_time?, stats.max_time?);
        let min_valid = self.min_valid_time();
        let due = |lo: i64| hi.saturating_sub(lo) > range_ms.saturating_mul(3) / 2;
        // `lo` bounds the oldest sample from below: when even that is not due, no series needs to be looked at.
        let lo = lo.max(min_valid);
        if !due(lo) {
            return None;
        }
        let lo = self.oldest_sample_at_or_after(lo)?;
        if !due(lo) {
            return None;
        }
        let (start, end) = block_range_of(lo, range_ms);
        Some((start.max(min_valid), end))
    }

    /// Writes the head's samples in `[mint, maxt)` as a level-1 block under `parent` (a `<ULID>` directory,
    /// created atomically through a temporary directory), with `tenant` as its `__org_id__` external label.
    /// Returns `None` (and writes nothing) when the range holds no sample.
    ///
    /// Runs beside appends: it takes the index lock shared (only new series wait while series are sorted), then
    /// each series' lock just long enough to copy its chunk list. The caller should have raised the minimum
    /// valid time to `maxt` first so that the range is complete.
    pub fn write_block(
        &self,
        parent: &Path,
        mint: i64,
        maxt: i64,
        tenant: Option<&str>,
    ) -> Result<Option<BlockMeta>, TsdbError> {
        let started = std::time::Instant::now();
        let mut series = self.series_sorted_by_labels();
        // Drop series without samples in range before creating anything on disk.
        series.retain(|s| lock(&s.state).overlaps(mint, maxt.saturating_sub(1)));
        if series.is_empty() {
            return Ok(None);
        }
        let meta = BlockMeta::new(new_ulid(), mint, maxt, tenant);
        let mut writer = BlockWriter::new(parent, meta)?;
        for s in &series {
            let chunks = lock(&s.state).chunks(mint, maxt.saturating_sub(1), &self.chunks);
            let chunks = clip_chunks(chunks, mint, maxt);
            if chunks.is_empty() {
                continue;
            }
            let labels = read(&self.index).labels_of(s);
            writer.add_series(&labels, &chunks)?;
        }
        let meta = writer.finish()?;
        tracing::info!(
            dir = %self.dir.display(),
            block = %meta.ulid,
            mint,
            maxt,
            series = meta.stats.num_series,
            samples = meta.stats.num_samples,
            chunks = meta.stats.num_chunks,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "wrote block from head"
        );
        Ok(Some(meta))
    }

    /// Every series, sorted by labels (the order a block's index needs), compared through the symbol table so
    /// that no label set is copied.
    fn series_sorted_by_labels(&self) -> Vec<Arc<MemSeries>> {
        let index = read(&self.index);
        let mut all: Vec<Arc<MemSeries>> = index.all_series().cloned().collect();
        let sym = |id: u32| index.symbols.resolve(id);
        all.sort_unstable_by(|a, b| {
            for ((an, av), (bn, bv)) in a.labels.iter().zip(b.labels.iter()) {
                let ord = sym(an).cmp(sym(bn)).then_with(|| sym(av).cmp(sym(bv)));
                if ord != CmpOrdering::Equal {
                    return ord;
                }
            }
            a.labels.len().cmp(&b.labels.len())
        });
        all
    }
}

/// Chunks as a block of `[mint, maxt)` stores them: a chunk wholly inside is kept byte for byte (the usual case,
/// since head chunks never cross a block-range boundary), one that sticks out is re-encoded with only the
/// samples inside (a histogram chunk may become several, when its appender asks for a new one).
fn clip_chunks(chunks: Vec<ChunkData>, mint: i64, maxt: i64) -> Vec<ChunkData> {
    let inside = |t: i64| t >= mint && t < maxt;
    let mut out = Vec::with_capacity(chunks.len());
    for c in chunks {
        if c.min_time >= mint && c.max_time < maxt {
            out.push(c);
            continue;
        }
        // Decoded as far as the chunk reads, as the iterators stop at damage; re-encoded by the compactor's
        // encoder, which starts a new histogram chunk where the appender asks for one.
        let samples: Vec<ChunkSample> = match c.encoding {
            Encoding::Xor => XorIter::new(&c.data)
                .filter(|s| inside(s.t))
                .map(|s| ChunkSample {
                    t: s.t,
                    value: ChunkValue::Float(s.v),
                })
                .collect(),
            Encoding::Histogram => HistogramIter::new(&c.data)
                .filter(|(t, _)| inside(*t))
                .map(|(t, h)| ChunkSample {
                    t,
                    value: ChunkValue::Histogram(h),
                })
                .collect(),
            Encoding::FloatHistogram => FloatHistogramIter::new(&c.data)
                .filter(|(t, _)| inside(*t))
                .map(|(t, h)| ChunkSample {
                    t,
                    value: ChunkValue::FloatHistogram(h),
                })
                .collect(),
            Encoding::None => Vec::new(),
        };
        match encode_chunks(&samples, usize::MAX) {
            Ok(pieces) => out.extend(pieces),
            Err(e) => tracing::error!(error = %e, min_time = c.min_time, "cannot clip a head chunk to the block range"),
        }
    }
    out
}
