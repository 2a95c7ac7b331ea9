//! Rebuilding the head from its WAL at startup.
//!
//! Series records recreate series under their logged refs (so later records find them, and new series get
//! refs above every logged one); samples records are applied in order through the same checks as appends.
//! Prometheus' rules: samples for refs without a series record are skipped and counted; a series record whose
//! labels already have a series maps its ref onto that series. Records that do not decode are skipped and
//! counted rather than stopping the start (the WAL layer already cut any torn or CRC-corrupt tail).

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::Ordering;

use heddle_model::LabelRef;

use super::index::hash_labels;
use super::series::Verdict;
use super::{Head, lock, read, write};
use crate::chunks_head::MappedChunk;
use crate::error::TsdbError;
use crate::record::{self, Record, RefSample, RefSeries};

/// What opening a head found in its WAL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// WAL records read.
    pub wal_records: u64,
    /// WAL segments read.
    pub wal_segments: u32,
    /// WAL bytes read.
    pub wal_bytes: u64,
    /// The corrupt or torn tail that was cut off, if any (everything before it was replayed).
    pub wal_repaired: Option<heddle_wal::Corruption>,
    /// Series recreated.
    pub series: u64,
    /// Samples stored.
    pub samples: u64,
    /// Samples skipped because no series record named their ref.
    pub unknown_ref_samples: u64,
    /// Samples skipped because they were older than, or at the timestamp of, their series' newest sample
    /// (exact repeats included).
    pub skipped_samples: u64,
    /// Series records whose labels already had a series under another ref.
    pub duplicate_series: u64,
    /// Series records whose ref already named a series with other labels (skipped).
    pub conflicting_series: u64,
    /// Records that did not decode (skipped).
    pub undecodable_records: u64,
    /// Records of types the head does not replay (tombstones, exemplars, metadata...).
    pub ignored_records: u64,
    /// Chunks found in `chunks_head/`.
    pub mmapped_chunks: u64,
    /// Chunks in `chunks_head/` of series no WAL record names (dropped).
    pub orphan_mmapped_chunks: u64,
    /// WAL samples skipped because a chunk in `chunks_head/` already holds them.
    pub samples_in_mmapped_chunks: u64,
    /// The corrupt tail of `chunks_head/` that was cut off, if any (the WAL replayed its samples).
    pub chunks_head_repaired: Option<crate::ChunksHeadCorruption>,
    /// The WAL position of the chunk snapshot the head started from, if one was loaded.
    pub snapshot: Option<heddle_wal::Position>,
    /// Series loaded from the snapshot.
    pub snapshot_series: u64,
    /// Snapshots found unreadable or half-written, and deleted (the WAL was replayed instead).
    pub snapshots_discarded: u64,
    /// `chunks_head/` chunks dropped because they end before [`crate::HeadOptions::min_valid_time`].
    pub mmapped_chunks_before_min_valid_time: u64,
    /// WAL samples dropped because they are before [`crate::HeadOptions::min_valid_time`].
    pub samples_before_min_valid_time: u64,
}

impl Head {
    /// Replays `wal_dir` (from `from`, a snapshot's position, if given) into the head. `mapped` holds the chunks found in `chunks_head/` by series ref; each is
    /// given to its series when the series is created, and WAL samples they already hold are skipped.
    pub(super) fn replay_wal(
        &self,
        wal_dir: &Path,
        from: Option<heddle_wal::Position>,
        mut mapped: HashMap<u64, Vec<MappedChunk>>,
        stats: &mut ReplayStats,
    ) -> Result<(), TsdbError> {
        // Refs of duplicate series records -> the ref of the series that has those labels.
        let mut aliases: HashMap<u64, u64> = HashMap::new();
        let mut range = (i64::MAX, i64::MIN);
        let mut apply = |rec: &[u8]| -> Result<(), TsdbError> {
            match record::decode(rec) {
                Ok(Record::Series(series)) => self.replay_series(&series, &mut aliases, &mut mapped, stats),
                Ok(Record::Samples(samples)) => self.replay_samples(&samples, &aliases, stats, &mut range),
                Ok(_) => stats.ignored_records += 1,
                Err(e) => {
                    if stats.undecodable_records == 0 {
                        tracing::warn!(error = %e, "skipping undecodable wal record");
                    }
                    stats.undecodable_records += 1;
                }
            }
            Ok(())
        };
        // After a snapshot only the records after its position; otherwise the last checkpoint and every segment.
        let report = match from {
            Some(pos) => heddle_wal::replay_from(wal_dir, pos, &mut apply)?,
            None => heddle_wal::replay(wal_dir, &mut apply)?,
        };
        stats.wal_records = report.records;
        stats.wal_segments = report.segments;
        stats.wal_bytes = report.bytes;
        stats.wal_repaired = report.repaired;
        stats.orphan_mmapped_chunks += mapped.values().map(|c| c.len() as u64).sum::<u64>();
        self.note_samples(stats.samples, range.0, range.1);
        Ok(())
    }

    fn replay_series(
        &self,
        records: &[RefSeries],
        aliases: &mut HashMap<u64, u64>,
        mapped: &mut HashMap<u64, Vec<MappedChunk>>,
        stats: &mut ReplayStats,
    ) {
        let mut index = write(&self.index);
        for rec in records {
            let labels: Vec<LabelRef<'_>> = rec.labels.iter().collect();
            let hash = hash_labels(&labels);
            index.reserve_ref(rec.series_ref);
            if let Some(existing) = index.find(hash, &labels) {
                if existing.series_ref != rec.series_ref {
                    aliases.insert(rec.series_ref, existing.series_ref);
                    stats.duplicate_series += 1;
                }
                continue;
            }
            if index.get(rec.series_ref).is_some() {
                stats.conflicting_series += 1;
                continue;
            }
            let series = index.create(hash, &labels, Some(rec.series_ref), true);
            if let Some(chunks) = mapped.remove(&rec.series_ref) {
                let (lo, hi) = (chunks.first().map(|c| c.min_time), chunks.last().map(|c| c.max_time));
                stats.orphan_mmapped_chunks += lock(&series.state).attach_mapped(chunks) as u64;
                if let (Some(lo), Some(hi)) = (lo, hi) {
                    self.min_time.fetch_min(lo, Ordering::Relaxed);
                    self.max_time.fetch_max(hi, Ordering::Relaxed);
                }
            }
            stats.series += 1;
        }
        self.num_series.store(index.len() as u64, Ordering::Relaxed);
    }

    fn replay_samples(
        &self,
        samples: &[RefSample],
        aliases: &HashMap<u64, u64>,
        stats: &mut ReplayStats,
        range: &mut (i64, i64),
    ) {
        let index = read(&self.index);
        // Records hold runs of samples of the same series: lock each series once per run.
        let mut i = 0;
        while let Some(first) = samples.get(i) {
            let run = samples[i..]
                .iter()
                .take_while(|s| s.series_ref == first.series_ref)
                .count();
            let run_samples = &samples[i..i + run];
            i += run;
            let r = aliases.get(&first.series_ref).copied().unwrap_or(first.series_ref);
            let Some(series) = index.get(r) else {
                stats.unknown_ref_samples += run as u64;
                continue;
            };
            let mut state = lock(&series.state);
            let covered = state.mapped_max_time();
            for s in run_samples {
                if s.t < self.min_valid_time.load(Ordering::Relaxed) {
                    stats.samples_before_min_valid_time += 1;
                    continue;
                }
                if s.t <= covered {
                    stats.samples_in_mmapped_chunks += 1;
                    continue;
                }
                if state.judge(s.t, s.v.to_bits(), &self.chunks) != Verdict::Append {
                    stats.skipped_samples += 1;
                    continue;
                }
                match state.append(series.series_ref, s.t, s.v, self.sink()) {
                    Ok(_) => {
                        stats.samples += 1;
                        range.0 = range.0.min(s.t);
                        range.1 = range.1.max(s.t);
                    }
                    Err(_) => stats.skipped_samples += 1,
                }
            }
        }
    }
}
