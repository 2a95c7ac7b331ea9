//! The in-memory head of one tenant's TSDB: series with their chunks, the index that finds them, and the
//! WAL that makes appends durable.
//!
//! Layout on disk: `<dir>/wal/` (Prometheus WAL segments) and `<dir>/chunks_head/` (completed chunks, memory
//! mapped for reads; see [`crate::chunks_head`]). A series holds only its open chunk in memory.
//!
//! Split by concern as Prometheus splits `head.go`: `append` (batches, WAL, chunk appends), `read`
//! (queries), `replay` and `snapshot` (startup, on all cores through `pipeline`), `index` (symbols, series
//! lookup, postings, matchers), `series` (one series' chunks and cut policy), `lifecycle` (the hook asked
//! before a series is created and told when series go: where a tenant's series limits plug in), `exemplars`
//! (the bounded ring of exemplars, logged and replayed like samples).

mod append;
mod compact;
mod exemplars;
mod histograms;
pub(crate) mod idhash;
mod index;
mod label_ids;
mod lifecycle;
mod pipeline;
pub(crate) mod postings;
mod read;
mod replay;
mod series;
mod snapshot;
mod symbols;
mod truncate;

#[cfg(test)]
mod compact_tests;
#[cfg(test)]
mod histogram_tests;
#[cfg(test)]
mod lifecycle_tests;
#[cfg(test)]
mod mmap_tests;
#[cfg(test)]
mod replay_tests;
#[cfg(test)]
mod snapshot_tests;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod truncate_tests;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub use append::{AppendBounds, AppendErrorKind, AppendOutcome, AppendSeries, SeriesAppendError};
pub use compact::{CompactStats, range_start};
pub use exemplars::{AppendExemplars, Exemplar, ExemplarOutcome};
pub use lifecycle::{RefusalScope, SeriesLifecycle, SeriesRefusal};
pub use read::{ChunkData, HeadStats, SeriesChunks};
pub use replay::ReplayStats;
pub use snapshot::SnapshotStats;
pub use truncate::TruncateStats;

use append::Appender;
use index::HeadIndex;
use series::CutPolicy;

use crate::chunks_head::{CHUNKS_HEAD_DIR, ChunkDiskMapper};
use crate::error::TsdbError;
use crate::file::{FileCreator, StdFiles};

/// Name of the WAL directory inside a head directory.
pub const WAL_DIR: &str = "wal";

/// How a head stores data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadOptions {
    /// Snappy-compress WAL records (`--blocks-storage.tsdb.wal-compression-enabled`). Default true.
    pub wal_compression: bool,
    /// WAL segment size in bytes, a multiple of 32 KiB. Default 128 MiB.
    pub wal_segment_size: usize,
    /// Samples per chunk before it is cut. Default 120, as Prometheus.
    pub chunk_target_samples: u16,
    /// Chunks never cross a multiple of this range (ms). Default 2 h, the block range.
    pub chunk_range_ms: i64,
    /// Maximum size of a `chunks_head/` file. Default 128 MiB, as Prometheus.
    pub chunks_head_file_size: u64,
    /// Samples before this time are not loaded at open: `chunks_head/` chunks that end before it and older
    /// WAL samples are dropped (Prometheus' `minValidTime`). Whoever truncated the head (after writing a
    /// block) passes the truncation time here, e.g. the newest block's end. Default `i64::MIN`.
    pub min_valid_time: i64,
    /// Exemplars kept in the head's ring (Prometheus' `max_exemplars`); 0 keeps none. Default 0. Changed later
    /// with [`Head::set_max_exemplars`].
    pub max_exemplars: usize,
}

impl Default for HeadOptions {
    fn default() -> Self {
        Self {
            wal_compression: true,
            wal_segment_size: heddle_wal::DEFAULT_SEGMENT_SIZE,
            chunk_target_samples: 120,
            chunk_range_ms: 2 * 60 * 60 * 1000,
            chunks_head_file_size: crate::chunks_head::DEFAULT_MAX_FILE_SIZE,
            min_valid_time: i64::MIN,
            max_exemplars: 0,
        }
    }
}

impl HeadOptions {
    fn validate(&self) -> Result<(), TsdbError> {
        if self.chunk_target_samples == 0 {
            return Err(TsdbError::InvalidOptions(
                "chunk target samples must be at least 1".into(),
            ));
        }
        if self.chunk_range_ms <= 0 {
            return Err(TsdbError::InvalidOptions(format!(
                "chunk range must be positive, got {} ms",
                self.chunk_range_ms
            )));
        }
        Ok(())
    }
}

/// The head of one tenant's TSDB. Shared by reference (`&self` everywhere): appends are serialized
/// internally, queries run concurrently with them.
#[derive(Debug)]
pub struct Head {
    dir: PathBuf,
    policy: CutPolicy,
    wal_compression: bool,
    /// Appends of samples before this time are refused ([`AppendErrorKind::OutOfBounds`]): a block covers
    /// that range already. Raised by compaction, under the appender lock.
    min_valid_time: AtomicI64,
    index: RwLock<HeadIndex>,
    chunks: ChunkDiskMapper,
    appender: Mutex<Appender>,
    /// Serializes compactions (and the truncations they end with).
    compacting: Mutex<()>,
    /// The newest exemplars; changed under the appender lock, read by queries.
    exemplars: Mutex<exemplars::CircularExemplars>,
    num_series: AtomicU64,
    samples_appended: AtomicU64,
    min_time: AtomicI64,
    max_time: AtomicI64,
}

impl Head {
    /// Opens the head in `dir` (created if missing): scans `chunks_head/` (cutting off a corrupt tail), replays
    /// `dir/wal` (repairing a corrupt tail) skipping samples already in those chunks, then opens the WAL for
    /// appending in a new segment.
    pub fn open(dir: &Path, opts: HeadOptions) -> Result<(Head, ReplayStats), TsdbError> {
        Self::open_with_files(dir, opts, Arc::new(StdFiles))
    }

    /// [`Head::open`] with the file interface `chunks_head/` files are written through (tests inject faults).
    pub fn open_with_files(
        dir: &Path,
        opts: HeadOptions,
        files: Arc<dyn FileCreator>,
    ) -> Result<(Head, ReplayStats), TsdbError> {
        Self::open_with_workers(dir, opts, files, pipeline::default_workers())
    }

    /// [`Head::open_with_files`] with `workers` decode threads and as many sample shards for the replay
    /// (tests compare several counts against one).
    pub(crate) fn open_with_workers(
        dir: &Path,
        opts: HeadOptions,
        files: Arc<dyn FileCreator>,
        workers: usize,
    ) -> Result<(Head, ReplayStats), TsdbError> {
        opts.validate()?;
        std::fs::create_dir_all(dir).map_err(|source| TsdbError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let started = std::time::Instant::now();
        let chunks_dir = dir.join(CHUNKS_HEAD_DIR);
        let head = Head {
            dir: dir.to_path_buf(),
            policy: CutPolicy {
                target_samples: opts.chunk_target_samples,
                range_ms: opts.chunk_range_ms,
            },
            wal_compression: opts.wal_compression,
            min_valid_time: AtomicI64::new(opts.min_valid_time),
            index: RwLock::new(HeadIndex::new()),
            chunks: ChunkDiskMapper::new(&chunks_dir, opts.chunks_head_file_size, files),
            appender: Mutex::new(Appender::default()),
            compacting: Mutex::new(()),
            exemplars: Mutex::new(exemplars::CircularExemplars::new(opts.max_exemplars)),
            num_series: AtomicU64::new(0),
            samples_appended: AtomicU64::new(0),
            min_time: AtomicI64::new(i64::MAX),
            max_time: AtomicI64::new(i64::MIN),
        };
        let wal_dir = dir.join(WAL_DIR);
        let mut stats = ReplayStats::default();
        // The `chunks_head/` scan (reading and checking every chunk) runs beside the snapshot load, which waits
        // for it before attaching the first series' chunks.
        let (scanned, loaded) = std::thread::scope(|scope| {
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            let chunks_dir = &chunks_dir;
            std::thread::Builder::new()
                .name("chunks-head-scan".to_owned())
                .spawn_scoped(scope, move || {
                    // The receiver is gone only when the load failed; its error is returned.
                    let _ = tx.send(crate::chunks_head::scan(chunks_dir));
                })
                .map_err(|source| TsdbError::Io {
                    path: chunks_dir.clone(),
                    source,
                })?;
            let mut scan = snapshot::PendingScan::new(rx, opts.min_valid_time);
            let loaded = head.load_snapshot(&mut stats, workers, &mut scan)?;
            Ok::<_, TsdbError>((scan.finish(), loaded))
        })?;
        let (scanned, before_min_valid_time) = scanned?;
        head.chunks.adopt(&scanned)?;
        stats.mmapped_chunks = scanned.num_chunks;
        stats.mmapped_chunks_before_min_valid_time = before_min_valid_time;
        stats.chunks_head_repaired = scanned.corruption.clone();
        let mapped = scanned.chunks;
        head.replay_wal(&wal_dir, loaded.position, mapped, &mut stats, workers)?;
        tracing::info!(
            dir = %dir.display(),
            series = stats.series,
            samples = stats.samples,
            snapshot_series = stats.snapshot_series,
            snapshots_discarded = stats.snapshots_discarded,
            mmapped_chunks = stats.mmapped_chunks,
            samples_in_mmapped_chunks = stats.samples_in_mmapped_chunks,
            unknown_ref_samples = stats.unknown_ref_samples,
            wal_repaired = stats.wal_repaired.is_some(),
            chunks_head_repaired = stats.chunks_head_repaired.is_some(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "head replayed chunks_head and its wal"
        );
        let wal = heddle_wal::Wal::open(
            &wal_dir,
            heddle_wal::WalOptions {
                segment_size: opts.wal_segment_size,
                compress: opts.wal_compression,
            },
        )?;
        lock(&head.appender).wal = Some(wal);
        if let Some(used) = loaded.dir {
            // See `snapshot`: a snapshot serves one start only.
            snapshot::retire(&head.dir, &used)?;
        }
        Ok((head, stats))
    }

    /// The head's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Fsyncs the WAL (and writes buffered `chunks_head/` chunks to their file).
    pub fn sync(&self) -> Result<(), TsdbError> {
        self.chunks.flush()?;
        let mut app = lock(&self.appender);
        let wal = app.wal.as_mut().ok_or(TsdbError::Closed)?;
        Ok(wal.sync()?)
    }

    /// Closes the WAL (padding and fsyncing it) and flushes `chunks_head/`. Later appends fail with
    /// [`TsdbError::Closed`]; queries still work. Closing twice is a no-op.
    pub fn close(&self) -> Result<(), TsdbError> {
        let wal = lock(&self.appender).wal.take();
        self.chunks.close()?;
        match wal {
            Some(wal) => Ok(wal.close()?),
            None => Ok(()),
        }
    }

    fn sink(&self) -> series::ChunkSink<'_> {
        series::ChunkSink {
            policy: self.policy,
            mapper: &self.chunks,
        }
    }

    fn note_samples(&self, n: u64, min_t: i64, max_t: i64) {
        if n == 0 {
            return;
        }
        self.samples_appended.fetch_add(n, Ordering::Relaxed);
        self.min_time.fetch_min(min_t, Ordering::Relaxed);
        self.max_time.fetch_max(max_t, Ordering::Relaxed);
    }
}

/// Locks a mutex; a panic elsewhere while it was held does not make the head unusable.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}
