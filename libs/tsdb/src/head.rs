//! The in-memory head of one tenant's TSDB: series with their chunks, the index that finds them, and the
//! WAL that makes appends durable.
//!
//! Layout on disk: `<dir>/wal/` (Prometheus WAL segments). Completed chunks are still held in memory; they
//! move to `chunks_head/` files later (see `series::HeadChunk`).
//!
//! Split by concern as Prometheus splits `head.go`: `append` (batches, WAL, chunk appends), `read`
//! (queries), `replay` (startup), `index` (symbols, series lookup, postings, matchers), `series` (one
//! series' chunks and cut policy).

mod append;
mod index;
mod postings;
mod read;
mod replay;
mod series;
mod symbols;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub use append::{AppendErrorKind, AppendOutcome, AppendSeries, SeriesAppendError};
pub use read::{ChunkData, HeadStats, SeriesChunks};
pub use replay::ReplayStats;

use append::Appender;
use index::HeadIndex;
use series::CutPolicy;

use crate::error::TsdbError;

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
}

impl Default for HeadOptions {
    fn default() -> Self {
        Self {
            wal_compression: true,
            wal_segment_size: heddle_wal::DEFAULT_SEGMENT_SIZE,
            chunk_target_samples: 120,
            chunk_range_ms: 2 * 60 * 60 * 1000,
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
    index: RwLock<HeadIndex>,
    appender: Mutex<Appender>,
    num_series: AtomicU64,
    samples_appended: AtomicU64,
    min_time: AtomicI64,
    max_time: AtomicI64,
}

impl Head {
    /// Opens the head in `dir` (created if missing): replays `dir/wal`, repairing a corrupt tail, then opens the
    /// WAL for appending in a new segment.
    pub fn open(dir: &Path, opts: HeadOptions) -> Result<(Head, ReplayStats), TsdbError> {
        opts.validate()?;
        std::fs::create_dir_all(dir).map_err(|source| TsdbError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let head = Head {
            dir: dir.to_path_buf(),
            policy: CutPolicy {
                target_samples: opts.chunk_target_samples,
                range_ms: opts.chunk_range_ms,
            },
            index: RwLock::new(HeadIndex::new()),
            appender: Mutex::new(Appender::default()),
            num_series: AtomicU64::new(0),
            samples_appended: AtomicU64::new(0),
            min_time: AtomicI64::new(i64::MAX),
            max_time: AtomicI64::new(i64::MIN),
        };
        let wal_dir = dir.join(WAL_DIR);
        let started = std::time::Instant::now();
        let stats = head.replay_wal(&wal_dir)?;
        tracing::info!(
            dir = %dir.display(),
            series = stats.series,
            samples = stats.samples,
            unknown_ref_samples = stats.unknown_ref_samples,
            repaired = stats.wal_repaired.is_some(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "head replayed its wal"
        );
        let wal = heddle_wal::Wal::open(
            &wal_dir,
            heddle_wal::WalOptions {
                segment_size: opts.wal_segment_size,
                compress: opts.wal_compression,
            },
        )?;
        lock(&head.appender).wal = Some(wal);
        Ok((head, stats))
    }

    /// The head's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Fsyncs the WAL.
    pub fn sync(&self) -> Result<(), TsdbError> {
        let mut app = lock(&self.appender);
        let wal = app.wal.as_mut().ok_or(TsdbError::Closed)?;
        Ok(wal.sync()?)
    }

    /// Closes the WAL (padding and fsyncing it). Later appends fail with [`TsdbError::Closed`]; queries still
    /// work. Closing twice is a no-op.
    pub fn close(&self) -> Result<(), TsdbError> {
        let wal = lock(&self.appender).wal.take();
        match wal {
            Some(wal) => Ok(wal.close()?),
            None => Ok(()),
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
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}
