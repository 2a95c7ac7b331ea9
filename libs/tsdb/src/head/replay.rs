//! Rebuilding the head from its WAL at startup.
//!
//! Series records recreate series under their logged refs (so later records find them, and new series get
//! refs above every logged one); samples records are applied in order through the same checks as appends.
//! Prometheus' rules: samples for refs without a series record are skipped and counted; a series record whose
//! labels already have a series maps its ref onto that series. Records that do not decode are skipped and
//! counted rather than stopping the start (the WAL layer already cut any torn or CRC-corrupt tail).

use std::collections::hash_map::Entry;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, MutexGuard};

use heddle_model::{HistogramValue, LabelRef};

use super::histograms::fingerprint;
use super::idhash::{IdMap, NearMap, StrHasher};
use super::index::{Created, LoadCache, hash_labels, symbol_hashes};
use super::pipeline::{self, RawBatch};
use super::series::{MemSeries, SeriesState, Verdict, log_dropped_open_chunk};
use super::{Head, lock, read, write};
use crate::error::TsdbError;
use crate::record::{self, Record, RefExemplar, RefSample, RefSeries};

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
    /// Samples stored, native histogram samples included.
    pub samples: u64,
    /// Native histogram samples stored (also counted in `samples`).
    pub histogram_samples: u64,
    /// Samples skipped because no series record named their ref.
    pub unknown_ref_samples: u64,
    /// Exemplars stored in the ring (from the WAL and the snapshot).
    pub exemplars: u64,
    /// Exemplars skipped: no series record named their ref, or the ring refused them (out of order, or the
    /// head keeps none).
    pub skipped_exemplars: u64,
    /// Samples skipped because they were older than, or at the timestamp of, their series' newest sample
    /// (exact repeats included).
    pub skipped_samples: u64,
    /// Series records whose labels already had a series under another ref.
    pub duplicate_series: u64,
    /// Series records whose ref already named a series with other labels (skipped).
    pub conflicting_series: u64,
    /// Records that did not decode (skipped).
    pub undecodable_records: u64,
    /// Records of types the head does not replay (tombstones, metadata...).
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
    /// Open chunks restored from the snapshot that did not decode when WAL samples came for them; their
    /// samples were dropped ([`crate::chunkenc::XorChunk::restore`]).
    pub open_chunks_dropped: u64,
}

impl Head {
    /// Replays `wal_dir` (from `from`, a snapshot's position, if given) into the head. `mapped` holds the
    /// chunks found in `chunks_head/` by series ref; each is given to its series when the series is created,
    /// and WAL samples they already hold are skipped.
    ///
    /// Uses every core: records are read, decoded and hashed on other threads ([`super::pipeline`]); this
    /// thread creates series in WAL order and hands each new series and each run of samples to the shard
    /// thread that owns its ref (as Prometheus shards replay across goroutines). The shard finds the series
    /// itself: this thread does no per-sample lookup, and samples that `chunks_head/` already holds are
    /// skipped without touching their series (at a million series each is a cache miss; resolving them here
    /// was most of a crash restart). A series' samples always reach its shard in WAL order, after the series
    /// its Series record created, so the head ends up as a single-threaded replay leaves it. (A samples record
    /// before its series' Series record, which only a damaged WAL has, may find the series or count as
    /// unknown, as in Prometheus.)
    pub(super) fn replay_wal(
        &self,
        wal_dir: &Path,
        from: Option<heddle_wal::Position>,
        mut mapped: crate::chunks_head::ChunksBySeries,
        stats: &mut ReplayStats,
        workers: usize,
    ) -> Result<(), TsdbError> {
        // Refs of duplicate series records -> the ref of the series that has those labels.
        let mut aliases: IdMap<u64, u64> = IdMap::default();
        let mut cache = LoadCache::default();
        let hasher = {
            let mut index = write(&self.index);
            // Every series with chunks in `chunks_head/` gets a Series record in the WAL or checkpoint: room for
            // them up front saves growing the series tables step by step (finish_load trims any excess).
            let expected = index.len() + mapped.untaken_series();
            index.reserve(expected);
            index.symbols.hasher().clone()
        };
        let shards = workers.max(1);
        let (report, shard_stats) = std::thread::scope(|scope| -> Result<_, TsdbError> {
            let mut txs = Vec::with_capacity(shards);
            let mut handles = Vec::with_capacity(shards);
            for _ in 0..shards {
                let (tx, rx) = sync_channel::<ShardBatch>(4);
                txs.push(tx);
                handles.push(scope.spawn(move || self.apply_shard(rx, shards)));
            }
            let mut pending: Vec<ShardBatch> = (0..shards).map(|_| ShardBatch::default()).collect();
            let read_wal = |sink: &mut pipeline::Sink<'_>| {
                let mut push = |rec: &[u8]| sink.push(rec, heddle_wal::Position::default());
                // After a snapshot only the records after its position; otherwise the last checkpoint and every
                // segment.
                match from {
                    Some(pos) => heddle_wal::replay_from(wal_dir, pos, &mut push),
                    None => heddle_wal::replay(wal_dir, &mut push),
                }
            };
            let mut apply = |batch: Vec<Decoded>| -> Result<(), TsdbError> {
                for d in batch {
                    match d {
                        Decoded::Series(series) => {
                            self.replay_series(series, &mut cache, &mut aliases, &mut mapped, stats, &mut pending)
                        }
                        Decoded::Samples(samples) => dispatch_samples(&samples, &aliases, &mut pending, &txs)?,
                        Decoded::Histograms(histograms) => {
                            dispatch_histograms(histograms, &aliases, &mut pending, &txs)?
                        }
                        Decoded::Exemplars(exemplars) => self.replay_exemplars(exemplars, &aliases, stats),
                        Decoded::Ignored => stats.ignored_records += 1,
                        Decoded::Undecodable(e) => {
                            if stats.undecodable_records == 0 {
                                tracing::warn!(error = %e, "skipping undecodable wal record");
                            }
                            stats.undecodable_records += 1;
                        }
                    }
                }
                Ok(())
            };
            let report = pipeline::run(workers, read_wal, |raw| decode_batch(raw, &hasher), &mut apply);
            for (batch, tx) in pending.into_iter().zip(&txs) {
                // Series queued with no run after them need not reach their shard: no sample looks for them.
                if !batch.runs.is_empty() {
                    // A shard stops receiving only by panicking, which the scope propagates.
                    let _ = tx.send(batch);
                }
            }
            drop(txs);
            let mut total = ShardStats::default();
            for h in handles {
                let s = h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                total.add(&s);
            }
            Ok((report?, total))
        })?;
        write(&self.index).finish_load();
        stats.samples += shard_stats.samples;
        stats.histogram_samples += shard_stats.histogram_samples;
        stats.unknown_ref_samples += shard_stats.unknown_ref_samples;
        stats.skipped_samples += shard_stats.skipped_samples;
        stats.open_chunks_dropped += shard_stats.open_chunks_dropped;
        stats.samples_in_mmapped_chunks += shard_stats.samples_in_mmapped_chunks;
        stats.samples_before_min_valid_time += shard_stats.samples_before_min_valid_time;
        stats.wal_records = report.records;
        stats.wal_segments = report.segments;
        stats.wal_bytes = report.bytes;
        stats.wal_repaired = report.repaired;
        stats.orphan_mmapped_chunks += mapped.len() as u64;
        self.note_samples(shard_stats.samples, shard_stats.range.0, shard_stats.range.1);
        Ok(())
    }

    /// Stores a WAL Exemplars record's exemplars in the ring. Their series were created by earlier Series
    /// records on this thread, so they are found in the index.
    fn replay_exemplars(&self, exemplars: Vec<RefExemplar>, aliases: &IdMap<u64, u64>, stats: &mut ReplayStats) {
        let index = read(&self.index);
        for e in exemplars {
            let series_ref = aliases.get(&e.series_ref).copied().unwrap_or(e.series_ref);
            let Some(series) = index.get(series_ref) else {
                stats.skipped_exemplars += 1;
                continue;
            };
            let exemplar = super::Exemplar {
                labels: e.labels,
                value: e.v,
                t: e.t,
            };
            if self.restore_exemplar(series_ref, || index.labels_of(series), exemplar) {
                stats.exemplars += 1;
            } else {
                stats.skipped_exemplars += 1;
            }
        }
    }

    fn replay_series(
        &self,
        series: DecodedSeries,
        cache: &mut LoadCache,
        aliases: &mut IdMap<u64, u64>,
        mapped: &mut crate::chunks_head::ChunksBySeries,
        stats: &mut ReplayStats,
        pending: &mut [ShardBatch],
    ) {
        let mut index = write(&self.index);
        for (i, rec) in series.records.iter().enumerate() {
            let labels: Vec<LabelRef<'_>> = rec.labels.iter().collect();
            let hash = series.hashes[i];
            index.reserve_ref(rec.series_ref);
            let sym = series
                .symbols
                .get(series.symbol_ranges[i].0..series.symbol_ranges[i].1)
                .unwrap_or(&[]);
            let created =
                match index.get_or_create_loaded(hash, &labels, Some(rec.series_ref), true, Some((sym, &mut *cache))) {
                    Created::New(s) => s,
                    Created::Exists(existing) => {
                        if existing.series_ref != rec.series_ref {
                            aliases.insert(rec.series_ref, existing.series_ref);
                            stats.duplicate_series += 1;
                        }
                        continue;
                    }
                    Created::RefTaken => {
                        stats.conflicting_series += 1;
                        continue;
                    }
                };
            let mut covered = i64::MIN;
            if let Some(chunks) = mapped.take(rec.series_ref) {
                let (lo, hi) = (chunks.first().map(|c| c.min_time), chunks.last().map(|c| c.max_time));
                let mut state = lock(&created.state);
                stats.orphan_mmapped_chunks += state.attach_mapped(chunks) as u64;
                covered = state.mapped_max_time();
                if let (Some(lo), Some(hi)) = (lo, hi) {
                    self.min_time.fetch_min(lo, Ordering::Relaxed);
                    self.max_time.fetch_max(hi, Ordering::Relaxed);
                }
            }
            let batch = &mut pending[shard_of(rec.series_ref, pending.len())];
            let runs_before = batch.runs.len();
            batch.series.push((
                runs_before,
                Known {
                    series: created,
                    covered,
                },
            ));
            stats.series += 1;
        }
        self.num_series.store(index.len() as u64, Ordering::Relaxed);
    }

    /// A shard thread: registers the series this shard owns as their records come, finds the series of each
    /// run of samples, and applies the samples through the same checks as appends.
    fn apply_shard(&self, rx: Receiver<ShardBatch>, shards: usize) -> ShardStats {
        let mut st = ShardStats::default();
        // By ref / shards (this shard's refs are one residue): refs come nearly in order ([`super::idhash::NearHasher`]).
        let mut known: NearMap<u64, Known> = NearMap::default();
        let key = |series_ref: u64| series_ref / shards as u64;
        let min_valid = self.min_valid_time.load(Ordering::Relaxed);
        for batch in rx {
            let mut series = batch.series.into_iter().peekable();
            let (mut start, mut hstart) = (0, 0);
            for (i, &(series_ref, end)) in batch.runs.iter().enumerate() {
                while let Some((_, k)) = series.next_if(|(runs_before, _)| *runs_before <= i) {
                    known.insert(key(k.series.series_ref), k);
                }
                let (run, hrun) = match end {
                    RunEnd::Floats(end) => {
                        let run = batch.samples.get(start..end).unwrap_or(&[]);
                        start = end;
                        (run, &[][..])
                    }
                    RunEnd::Histograms(end) => {
                        let run = batch.histograms.get(hstart..end).unwrap_or(&[]);
                        hstart = end;
                        (&[][..], run)
                    }
                };
                let k = match known.entry(key(series_ref)) {
                    Entry::Occupied(e) => e.into_mut(),
                    // A series the head had before the replay (loaded from a snapshot).
                    Entry::Vacant(e) => match read(&self.index).get(series_ref) {
                        Some(s) => {
                            let covered = lock(&s.state).mapped_max_time();
                            e.insert(Known {
                                series: Arc::clone(s),
                                covered,
                            })
                        }
                        None => {
                            st.unknown_ref_samples += (run.len() + hrun.len()) as u64;
                            continue;
                        }
                    },
                };
                self.apply_run(k, run, min_valid, &mut st);
                self.apply_histogram_run(k, hrun, min_valid, &mut st);
            }
            for (_, k) in series {
                known.insert(key(k.series.series_ref), k);
            }
        }
        st
    }

    /// Applies one run of samples of a series. Samples before `min_valid` or already in `chunks_head/` are
    /// counted without locking the series.
    fn apply_run(&self, k: &Known, run: &[RefSample], min_valid: i64, st: &mut ShardStats) {
        let mut state = None;
        for s in run {
            if !k.wants(s.t, min_valid, st) {
                continue;
            }
            let state = state.get_or_insert_with(|| k.lock_open(st));
            if state.judge(s.t, s.v.to_bits(), &self.chunks) != Verdict::Append {
                st.skipped_samples += 1;
                continue;
            }
            match state.append(k.series.series_ref, s.t, s.v, self.sink()) {
                Ok(_) => {
                    st.samples += 1;
                    st.range.0 = st.range.0.min(s.t);
                    st.range.1 = st.range.1.max(s.t);
                }
                Err(_) => st.skipped_samples += 1,
            }
        }
    }
}

impl Head {
    /// [`Self::apply_run`] for native histogram samples.
    fn apply_histogram_run(&self, k: &Known, run: &[(i64, HistogramValue)], min_valid: i64, st: &mut ShardStats) {
        let mut state = None;
        for (t, h) in run {
            let t = *t;
            if !k.wants(t, min_valid, st) {
                continue;
            }
            let state = state.get_or_insert_with(|| k.lock_open(st));
            let fp = fingerprint(h);
            // A histogram that breaks the invariants never reached the WAL through an append: a record that
            // holds one was damaged or written by another program, and is skipped like an unstorable sample.
            // So is one over the size ceiling (a WAL written before there was one), which the head never holds.
            if h.size().over_ceiling() || h.validate().is_err() || state.judge(t, fp, &self.chunks) != Verdict::Append {
                st.skipped_samples += 1;
                continue;
            }
            match state.append_histogram(k.series.series_ref, t, h, fp, self.sink()) {
                Ok(_) => {
                    st.samples += 1;
                    st.histogram_samples += 1;
                    st.range.0 = st.range.0.min(t);
                    st.range.1 = st.range.1.max(t);
                }
                Err(_) => st.skipped_samples += 1,
            }
        }
    }
}

/// The shard that replays the samples of series `series_ref`.
fn shard_of(series_ref: u64, shards: usize) -> usize {
    (series_ref % shards as u64) as usize
}

/// Queues each run of samples of one series (records hold such runs) for the shard of its ref, after
/// resolving the refs of duplicate Series records.
fn dispatch_samples(
    samples: &[RefSample],
    aliases: &IdMap<u64, u64>,
    pending: &mut [ShardBatch],
    txs: &[SyncSender<ShardBatch>],
) -> Result<(), TsdbError> {
    let mut i = 0;
    while let Some(first) = samples.get(i) {
        let run = samples[i..]
            .iter()
            .take_while(|s| s.series_ref == first.series_ref)
            .count();
        let run_samples = &samples[i..i + run];
        i += run;
        let r = aliases.get(&first.series_ref).copied().unwrap_or(first.series_ref);
        let shard = shard_of(r, pending.len());
        let batch = &mut pending[shard];
        batch.samples.extend_from_slice(run_samples);
        batch.runs.push((r, RunEnd::Floats(batch.samples.len())));
        if batch.samples.len() + batch.histograms.len() >= SHARD_BATCH_SAMPLES {
            let full = std::mem::take(batch);
            // A shard stops receiving only by panicking, which the scope propagates.
            txs[shard].send(full).map_err(|_| TsdbError::Closed)?;
        }
    }
    Ok(())
}

/// [`dispatch_samples`] for native histogram samples, `(ref, t, value)` in record order.
fn dispatch_histograms(
    histograms: Vec<(u64, i64, HistogramValue)>,
    aliases: &IdMap<u64, u64>,
    pending: &mut [ShardBatch],
    txs: &[SyncSender<ShardBatch>],
) -> Result<(), TsdbError> {
    let mut current: Option<(u64, usize)> = None;
    for (series_ref, t, h) in histograms {
        let r = aliases.get(&series_ref).copied().unwrap_or(series_ref);
        let shard = shard_of(r, pending.len());
        let batch = &mut pending[shard];
        batch.histograms.push((t, h));
        let end = RunEnd::Histograms(batch.histograms.len());
        // Extend the run of the previous sample when it is the same series' (and its run is the batch's last).
        match (current, batch.runs.last_mut()) {
            (Some((cr, cs)), Some(last)) if cr == r && cs == shard && last.0 == r => last.1 = end,
            _ => batch.runs.push((r, end)),
        }
        current = Some((r, shard));
        if batch.samples.len() + batch.histograms.len() >= SHARD_BATCH_SAMPLES {
            let full = std::mem::take(batch);
            current = None;
            txs[shard].send(full).map_err(|_| TsdbError::Closed)?;
        }
    }
    Ok(())
}

/// Samples queued for a shard between sends.
const SHARD_BATCH_SAMPLES: usize = 8192;

/// What a shard is sent: runs of samples, `runs[i]` being a series ref and the end of its run in `samples`,
/// and the series it owns that Series records created, each after the number of runs queued before it.
#[derive(Default)]
struct ShardBatch {
    samples: Vec<RefSample>,
    histograms: Vec<(i64, HistogramValue)>,
    runs: Vec<(u64, RunEnd)>,
    series: Vec<(usize, Known)>,
}

/// Where a run of a [`ShardBatch`] ends: in its floats or in its histograms.
#[derive(Debug, Clone, Copy)]
enum RunEnd {
    Floats(usize),
    Histograms(usize),
}

/// A series as its shard knows it: with the newest time its `chunks_head/` chunks hold when it was found.
struct Known {
    series: Arc<MemSeries>,
    covered: i64,
}

impl Known {
    /// Whether the replay still has to apply a sample at `t`: not before `min_valid` and not already in
    /// `chunks_head/`. Counts the samples it passes over, without locking the series.
    fn wants(&self, t: i64, min_valid: i64, st: &mut ShardStats) -> bool {
        if t < min_valid {
            st.samples_before_min_valid_time += 1;
            false
        } else if t <= self.covered {
            st.samples_in_mmapped_chunks += 1;
            false
        } else {
            true
        }
    }

    /// The series' state, locked for the rest of a run, its open chunk resumed (or dropped and counted when it
    /// cannot be).
    fn lock_open(&self, st: &mut ShardStats) -> MutexGuard<'_, SeriesState> {
        let mut state = lock(&self.series.state);
        if let Err(e) = state.resume_open() {
            log_dropped_open_chunk(self.series.series_ref, &e);
            st.open_chunks_dropped += 1;
        }
        state
    }
}

/// What a shard applied.
#[derive(Debug)]
struct ShardStats {
    samples: u64,
    histogram_samples: u64,
    unknown_ref_samples: u64,
    skipped_samples: u64,
    open_chunks_dropped: u64,
    samples_in_mmapped_chunks: u64,
    samples_before_min_valid_time: u64,
    range: (i64, i64),
}

impl Default for ShardStats {
    fn default() -> Self {
        Self {
            samples: 0,
            histogram_samples: 0,
            unknown_ref_samples: 0,
            skipped_samples: 0,
            open_chunks_dropped: 0,
            samples_in_mmapped_chunks: 0,
            samples_before_min_valid_time: 0,
            range: (i64::MAX, i64::MIN),
        }
    }
}

impl ShardStats {
    fn add(&mut self, o: &ShardStats) {
        self.samples += o.samples;
        self.histogram_samples += o.histogram_samples;
        self.unknown_ref_samples += o.unknown_ref_samples;
        self.skipped_samples += o.skipped_samples;
        self.open_chunks_dropped += o.open_chunks_dropped;
        self.samples_in_mmapped_chunks += o.samples_in_mmapped_chunks;
        self.samples_before_min_valid_time += o.samples_before_min_valid_time;
        self.range = (self.range.0.min(o.range.0), self.range.1.max(o.range.1));
    }
}

/// Series records decoded on a worker, with their label hashes and symbol hashes.
struct DecodedSeries {
    records: Vec<RefSeries>,
    hashes: Vec<u64>,
    symbols: Vec<u64>,
    symbol_ranges: Vec<(usize, usize)>,
}

/// A WAL record as a worker leaves it.
enum Decoded {
    Series(DecodedSeries),
    Samples(Vec<RefSample>),
    Exemplars(Vec<RefExemplar>),
    /// Integer and float histogram samples: (ref, t, value).
    Histograms(Vec<(u64, i64, HistogramValue)>),
    Ignored,
    Undecodable(String),
}

fn decode_batch(raw: &RawBatch, hasher: &StrHasher) -> Vec<Decoded> {
    raw.records()
        .map(|(rec, _)| match record::decode(rec) {
            Ok(Record::Series(records)) => {
                let mut d = DecodedSeries {
                    hashes: Vec::with_capacity(records.len()),
                    symbols: Vec::new(),
                    symbol_ranges: Vec::with_capacity(records.len()),
                    records: Vec::new(),
                };
                for r in &records {
                    let labels: Vec<LabelRef<'_>> = r.labels.iter().collect();
                    d.hashes.push(hash_labels(&labels));
                    let from = d.symbols.len();
                    symbol_hashes(hasher, &labels, &mut d.symbols);
                    d.symbol_ranges.push((from, d.symbols.len()));
                }
                d.records = records;
                Decoded::Series(d)
            }
            Ok(Record::Samples(samples)) => Decoded::Samples(samples),
            Ok(Record::Exemplars(exemplars)) => Decoded::Exemplars(exemplars),
            Ok(Record::Histograms(h)) => Decoded::Histograms(
                h.into_iter()
                    .map(|s| (s.series_ref, s.t, HistogramValue::Int(s.h)))
                    .collect(),
            ),
            Ok(Record::FloatHistograms(h)) => Decoded::Histograms(
                h.into_iter()
                    .map(|s| (s.series_ref, s.t, HistogramValue::Float(s.h)))
                    .collect(),
            ),
            Ok(_) => Decoded::Ignored,
            Err(e) => Decoded::Undecodable(e.to_string()),
        })
        .collect()
}
