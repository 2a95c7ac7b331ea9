//! Head truncation: drop what is older than a time, and checkpoint the WAL so its old segments can go
//! (Prometheus `Head.Truncate`, `truncateMemory` + `truncateWAL`).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use heddle_wal::{CheckpointStats, Keep, WalOptions};

use super::lifecycle::count_by_metric;
use super::series::MemSeries;
use super::{Head, WAL_DIR, lock, read, write};
use crate::error::TsdbError;
use crate::record::{self, Record};

/// What [`Head::truncate`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TruncateStats {
    /// Series with no sample at or after `mint`, removed from the head.
    pub series_removed: u64,
    /// Chunks (in `chunks_head/` or open) that ended before `mint`.
    pub chunks_removed: u64,
    /// `chunks_head/` files deleted.
    pub chunk_files_deleted: u64,
    /// The checkpoint written, if there were completed segments to fold in.
    pub checkpoint: Option<CheckpointStats>,
    /// WAL segments deleted after the checkpoint.
    pub segments_deleted: u32,
}

impl Head {
    /// Drops every sample before `mint`: chunks that end before it, and series with no sample at or after it.
    /// Deletes the `chunks_head/` files that only held such chunks, then checkpoints the WAL: the current
    /// segment is closed, the last checkpoint and every segment up to it are folded into `checkpoint.N` (Series
    /// records of live series, samples at or after `mint`, tombstones), and the folded segments and older
    /// checkpoints are deleted. Appends wait while memory is truncated, not while the checkpoint is written.
    ///
    /// The blocks issue calls this after a block covering everything before `mint` is written.
    pub fn truncate(&self, mint: i64) -> Result<TruncateStats, TsdbError> {
        let mut stats = TruncateStats::default();

        // 1. Memory, in two steps so that pushes wait only for the series that go, not for a walk over all.
        // a) Old chunks, series by series under each series' own lock. Appends go on meanwhile: they only add
        //    samples at or after the minimum valid time, which compaction raised to at least `mint`.
        let candidates: Vec<Arc<MemSeries>> = {
            let all: Vec<Arc<MemSeries>> = read(&self.index).all_series().cloned().collect();
            let mut empty = Vec::new();
            for s in all {
                let (removed, is_empty) = lock(&s.state).truncate_before(mint);
                stats.chunks_removed += removed as u64;
                if is_empty {
                    empty.push(s);
                }
            }
            empty
        };
        // b) Series left without samples leave the index under the appender lock (no append is in flight, so
        //    none holds one of them), re-checked there: a sample may have arrived since step a.
        let mut app = lock(&self.appender);
        {
            let mut index = write(&self.index);
            let gone: Vec<u64> = candidates
                .iter()
                .filter(|s| lock(&s.state).truncate_before(mint).1)
                .map(|s| s.series_ref)
                .collect();
            let by_metric = app.lifecycle.as_ref().map(|_| count_by_metric(&index, Some(&gone)));
            index.remove(&gone);
            stats.series_removed = gone.len() as u64;
            self.num_series.store(index.len() as u64, Ordering::Relaxed);
            drop(index);
            if let (Some(hook), Some(by_metric)) = (&app.lifecycle, by_metric) {
                for (name, n) in by_metric {
                    hook.post_deletion(&name, n);
                }
            }
        }
        self.min_time.fetch_max(mint, Ordering::Relaxed);
        if self.min_time.load(Ordering::Relaxed) > self.max_time.load(Ordering::Relaxed) {
            self.min_time.store(i64::MAX, Ordering::Relaxed);
            self.max_time.store(i64::MIN, Ordering::Relaxed);
        }

        // 2. chunks_head files.
        stats.chunk_files_deleted = self.chunks.truncate_before(mint)? as u64;

        // 3. WAL: everything up to the current segment goes into a checkpoint.
        let wal_dir = self.dir.join(WAL_DIR);
        let Some(wal) = app.wal.as_mut() else {
            return Err(TsdbError::Closed);
        };
        let through = wal.current_segment();
        wal.cut_segment()?;
        // Appends go on into the new segment while the closed ones are folded into the checkpoint. Series created
        // from now on are in later segments, so counting them as live changes nothing in the checkpoint.
        drop(app);
        let live: HashSet<u64> = read(&self.index).all_series().map(|s| s.series_ref).collect();
        let opts = WalOptions {
            segment_size: heddle_wal::DEFAULT_SEGMENT_SIZE,
            compress: self.wal_compression,
        };
        let cp = heddle_wal::write_checkpoint(&wal_dir, through, opts, |rec: &[u8], out: &mut Vec<u8>| {
            Ok::<Keep, TsdbError>(match record::decode(rec) {
                Ok(Record::Series(series)) => {
                    let kept: Vec<_> = series.iter().filter(|s| live.contains(&s.series_ref)).collect();
                    if kept.is_empty() {
                        Keep::Drop
                    } else if kept.len() == series.len() {
                        Keep::Original
                    } else {
                        record::encode_series(kept.iter().map(|s| (s.series_ref, s.labels.iter())), out);
                        Keep::Replaced
                    }
                }
                Ok(Record::Samples(samples)) => {
                    let kept: Vec<_> = samples
                        .iter()
                        .filter(|s| s.t >= mint && live.contains(&s.series_ref))
                        .copied()
                        .collect();
                    if kept.is_empty() {
                        Keep::Drop
                    } else if kept.len() == samples.len() {
                        Keep::Original
                    } else {
                        record::encode_samples(&kept, out);
                        Keep::Replaced
                    }
                }
                // Prometheus' rule: the exemplars of live series, from `mint` on.
                Ok(Record::Exemplars(exemplars)) => {
                    let kept: Vec<_> = exemplars
                        .iter()
                        .filter(|e| e.t >= mint && live.contains(&e.series_ref))
                        .cloned()
                        .collect();
                    if kept.is_empty() {
                        Keep::Drop
                    } else if kept.len() == exemplars.len() {
                        Keep::Original
                    } else {
                        record::encode_exemplars(&kept, out);
                        Keep::Replaced
                    }
                }
                // Histogram samples as float samples. A record holds one type (exponential or custom
                // buckets), so what is kept re-encodes to one record.
                Ok(Record::Histograms(h)) => {
                    let kept: Vec<_> = h
                        .iter()
                        .filter(|s| s.t >= mint && live.contains(&s.series_ref))
                        .cloned()
                        .collect();
                    keep_histograms(kept.len(), h.len(), out, |recs| record::encode_histograms(&kept, recs))
                }
                Ok(Record::FloatHistograms(h)) => {
                    let kept: Vec<_> = h
                        .iter()
                        .filter(|s| s.t >= mint && live.contains(&s.series_ref))
                        .cloned()
                        .collect();
                    keep_histograms(kept.len(), h.len(), out, |recs| {
                        record::encode_float_histograms(&kept, recs)
                    })
                }
                Ok(Record::Tombstones(_)) => Keep::Original,
                // Metadata is not replayed by this head; undecodable records were already skipped at replay.
                Ok(Record::Unknown(_)) | Err(_) => Keep::Drop,
            })
        })?;
        stats.segments_deleted = heddle_wal::delete_segments_before(&wal_dir, through.saturating_add(1))?;
        heddle_wal::delete_checkpoints_before(&wal_dir, through)?;
        stats.checkpoint = Some(cp);
        tracing::info!(
            dir = %self.dir.display(),
            mint,
            series_removed = stats.series_removed,
            chunks_removed = stats.chunks_removed,
            chunk_files_deleted = stats.chunk_files_deleted,
            checkpoint = through,
            segments_deleted = stats.segments_deleted,
            series_left = read(&self.index).len(),
            "truncated head"
        );
        Ok(stats)
    }
}

/// What a checkpoint keeps of a histogram record of which `kept` of `total` samples stay: `encode` writes
/// those (one record, as the original held one type) when some went.
fn keep_histograms(kept: usize, total: usize, out: &mut Vec<u8>, encode: impl FnOnce(&mut Vec<Vec<u8>>)) -> Keep {
    if kept == 0 {
        return Keep::Drop;
    }
    if kept == total {
        return Keep::Original;
    }
    let mut records = Vec::new();
    encode(&mut records);
    for r in records {
        out.extend_from_slice(&r);
    }
    Keep::Replaced
}
