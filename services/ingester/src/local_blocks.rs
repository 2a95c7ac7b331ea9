//! A tenant's local blocks: the blocks written from its head and still on disk, which reads answer beside the
//! head until they are shipped (see `crate::tenant::Tenant::queryable_blocks`), and its term of
//! `heddle_ingester_blocks_pending_upload`.

use heddle_tsdb::block::{BlockReader, list_local_blocks, remove_incomplete_blocks};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};

/// A tenant's local blocks, oldest first, and its term of `heddle_ingester_blocks_pending_upload`.
#[derive(Debug, Default)]
pub(crate) struct LocalBlocks {
    list: RwLock<Vec<Arc<BlockReader>>>,
    pending: AtomicI64,
}

impl LocalBlocks {
    /// Opens the blocks under a tenant directory, after deleting blocks a crash left half-written. Returns them
    /// and the newest block end: the head's minimum valid time, so WAL samples a block already holds are not
    /// loaded again.
    pub(crate) fn open(dir: &Path) -> Result<(LocalBlocks, i64), heddle_tsdb::TsdbError> {
        if !dir.exists() {
            return Ok((LocalBlocks::default(), i64::MIN));
        }
        let removed = remove_incomplete_blocks(dir)?;
        if removed > 0 {
            tracing::warn!(dir = %dir.display(), removed, "deleted blocks left half-written by a crash");
        }
        let mut readers = Vec::new();
        let mut newest_end = i64::MIN;
        for (path, meta) in list_local_blocks(dir)? {
            newest_end = newest_end.max(meta.max_time);
            match BlockReader::open_dir(&path) {
                Ok(r) => readers.push(Arc::new(r)),
                // Still counts for the minimum valid time: its samples must not come back from the WAL.
                Err(e) => {
                    tracing::error!(block = %path.display(), error = %e, "cannot open local block; it is not queried")
                }
            }
        }
        let blocks = LocalBlocks {
            list: RwLock::new(readers),
            pending: AtomicI64::new(0),
        };
        Ok((blocks, newest_end))
    }

    fn list(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<BlockReader>>> {
        self.list.read().unwrap_or_else(|e| e.into_inner())
    }

    fn list_mut(&self) -> std::sync::RwLockWriteGuard<'_, Vec<Arc<BlockReader>>> {
        self.list.write().unwrap_or_else(|e| e.into_inner())
    }

    /// How many there are.
    pub(crate) fn len(&self) -> usize {
        self.list().len()
    }

    /// The blocks overlapping `[mint, maxt]`, except those named in `skip`.
    pub(crate) fn overlapping(&self, mint: i64, maxt: i64, skip: &BTreeSet<String>) -> Vec<Arc<BlockReader>> {
        self.list()
            .iter()
            .filter(|b| b.meta().min_time <= maxt && b.meta().max_time > mint && !skip.contains(&b.meta().ulid))
            .cloned()
            .collect()
    }

    /// The ULIDs of the blocks overlapping `[mint, maxt]` that are named in `of`, sorted.
    pub(crate) fn overlapping_of(&self, mint: i64, maxt: i64, of: &BTreeSet<String>) -> Vec<String> {
        let mut out: Vec<String> = self
            .list()
            .iter()
            .filter(|b| b.meta().min_time <= maxt && b.meta().max_time > mint && of.contains(&b.meta().ulid))
            .map(|b| b.meta().ulid.clone())
            .collect();
        out.sort();
        out
    }

    /// Adds new blocks, keeping the list oldest first.
    pub(crate) fn add(&self, readers: Vec<Arc<BlockReader>>) {
        let mut list = self.list_mut();
        list.extend(readers);
        list.sort_by_key(|b| b.meta().min_time);
    }

    /// Drops the blocks named in `ulids` (deleted from disk).
    pub(crate) fn remove(&self, ulids: &[String]) {
        self.list_mut().retain(|b| !ulids.contains(&b.meta().ulid));
    }

    /// Blocks not in `shipped`.
    pub(crate) fn count_unshipped(&self, shipped: &BTreeSet<String>) -> usize {
        self.list().iter().filter(|b| !shipped.contains(&b.meta().ulid)).count()
    }

    /// Replaces this tenant's term of `heddle_ingester_blocks_pending_upload` with `pending`; returns the old one.
    pub(crate) fn swap_pending(&self, pending: i64) -> i64 {
        self.pending.swap(pending, Ordering::AcqRel)
    }
}
