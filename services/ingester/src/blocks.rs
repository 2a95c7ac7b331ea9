//! Blocks on the ingester: compacting a tenant's head into blocks, the local blocks queries read beside the
//! head, shipping blocks to the bucket, and deleting shipped blocks past the local retention.
//!
//! One background loop (the ingester's) runs these for every tenant on tickers, as Mimir's ingester does: every
//! `head_compaction_interval` each head cuts the block ranges that are due, and a head idle for
//! `head_compaction_idle_timeout` is compacted whole; every `ship_interval` new blocks are uploaded and expired
//! ones deleted. A failed upload is retried on the next tick; nothing local is deleted before it is in the bucket.

use crate::error::IngesterError;
use crate::metrics::BlockMetrics;
use crate::tenant::Tenant;
use heddle_bucket::ShipReport;
use heddle_tsdb::block::{BlockMeta, BlockReader, list_local_blocks, remove_incomplete_blocks};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

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

    fn add(&self, readers: Vec<Arc<BlockReader>>) {
        let mut list = self.list_mut();
        list.extend(readers);
        list.sort_by_key(|b| b.meta().min_time);
    }

    fn remove(&self, ulids: &[String]) {
        self.list_mut().retain(|b| !ulids.contains(&b.meta().ulid));
    }

    /// Blocks not in `shipped`.
    fn count_unshipped(&self, shipped: &BTreeSet<String>) -> usize {
        self.list().iter().filter(|b| !shipped.contains(&b.meta().ulid)).count()
    }
}

/// What a flush or a compaction tick did for one tenant.
#[derive(Debug, Clone, Default)]
pub struct TenantFlush {
    /// Blocks written from the head.
    pub blocks_written: Vec<BlockMeta>,
    /// Blocks uploaded (this call's and earlier ones').
    pub shipped: Option<ShipReport>,
}

/// Compacts the tenant's head: the due block ranges of `range_ms`, or (`force`) everything it holds. The new
/// blocks are queried from now on. Runs on a blocking thread.
pub(crate) async fn compact(
    tenant: &Tenant,
    range_ms: i64,
    metrics: &BlockMetrics,
    force: bool,
) -> Result<Vec<BlockMeta>, IngesterError> {
    let head = tenant.head().clone();
    let dir = head.dir().to_path_buf();
    let t = tenant.id().clone();
    let started = Instant::now();
    let result = tokio::task::spawn_blocking(move || {
        let stats = head.compact(&dir, range_ms, Some(t.as_str()), force)?;
        let mut readers = Vec::with_capacity(stats.blocks.len());
        for meta in &stats.blocks {
            readers.push(Arc::new(BlockReader::open_dir(&dir.join(&meta.ulid))?));
        }
        Ok::<_, heddle_tsdb::TsdbError>((stats, readers))
    })
    .await
    .map_err(|e| IngesterError::Task(e.to_string()))?;
    let (stats, readers) = match result {
        Ok(r) => r,
        Err(source) => {
            metrics.compaction_failures.inc();
            return Err(IngesterError::Tsdb {
                tenant: tenant.id().clone(),
                source,
            });
        }
    };
    if stats.blocks.is_empty() {
        return Ok(Vec::new());
    }
    metrics.compactions.inc();
    metrics
        .compaction_duration_seconds
        .observe(started.elapsed().as_secs_f64());
    metrics.blocks_written.inc_by(stats.blocks.len() as u64);
    tenant.blocks().add(readers);
    recount_pending(tenant, metrics);
    tracing::info!(
        tenant = %tenant.id(),
        blocks = stats.blocks.len(),
        series_removed = stats.truncate.as_ref().map_or(0, |t| t.series_removed),
        elapsed_ms = started.elapsed().as_millis() as u64,
        force,
        "compacted tenant head"
    );
    Ok(stats.blocks)
}

/// Uploads the tenant's blocks that are not in the bucket yet (none when shipping is off).
pub(crate) async fn ship(tenant: &Tenant, metrics: &BlockMetrics) -> Result<Option<ShipReport>, IngesterError> {
    let Some(shipper) = tenant.shipper() else {
        return Ok(None);
    };
    let result = shipper.ship().await;
    // Also after a failure: an upload before it may have succeeded.
    recount_pending(tenant, metrics);
    let report = result.map_err(|e| IngesterError::Bucket {
        tenant: tenant.id().clone(),
        source: Box::new(e),
    })?;
    for (ulid, error) in &report.failed {
        tracing::warn!(tenant = %tenant.id(), block = %ulid, %error, "block upload failed; retrying on the next ship tick");
    }
    if !report.uploaded.is_empty() {
        tracing::info!(tenant = %tenant.id(), blocks = report.uploaded.len(), "shipped blocks");
    }
    Ok(Some(report))
}

/// Compacts (everything when `force`) and ships one tenant: what `/ingester/flush` does per tenant.
pub(crate) async fn flush(
    tenant: &Tenant,
    range_ms: i64,
    metrics: &BlockMetrics,
    force: bool,
) -> Result<TenantFlush, IngesterError> {
    let blocks_written = compact(tenant, range_ms, metrics, force).await?;
    let shipped = ship(tenant, metrics).await?;
    Ok(TenantFlush {
        blocks_written,
        shipped,
    })
}

/// Deletes the tenant's local blocks that are shipped and past `retention`; the querier reads them from the
/// bucket (they were no longer answered here since they were shipped).
pub(crate) async fn delete_expired(tenant: &Tenant, retention: Duration, metrics: &BlockMetrics) {
    let Some(shipper) = tenant.shipper() else {
        return;
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    match shipper.delete_expired(retention, now_ms).await {
        Ok(deleted) if !deleted.is_empty() => {
            metrics.blocks_deleted.inc_by(deleted.len() as u64);
            tenant.blocks().remove(&deleted);
            tracing::info!(tenant = %tenant.id(), blocks = deleted.len(), "deleted local blocks past the retention period");
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(tenant = %tenant.id(), error = %e, "deleting expired local blocks failed"),
    }
}

/// Sets the tenant's term of `heddle_ingester_blocks_pending_upload`: its local blocks its shipper has not
/// uploaded. O(the tenant's blocks), run by the events that change it (a block written, a ship), never by a
/// scrape. The first ship tick after start-up counts the blocks found on disk.
fn recount_pending(tenant: &Tenant, metrics: &BlockMetrics) {
    let Some(shipper) = tenant.shipper() else {
        return;
    };
    let pending = tenant.blocks().count_unshipped(&shipper.shipped()) as i64;
    let old = tenant.blocks().pending.swap(pending, Ordering::AcqRel);
    metrics.pending_upload.inc_by(pending - old);
}

/// The tenant's local blocks not yet uploaded, counted now (the admin API's `blocks_pending_upload`); 0 when
/// shipping is off.
pub(crate) fn pending_upload(tenant: &Tenant) -> u64 {
    tenant
        .shipper()
        .map_or(0, |s| tenant.blocks().count_unshipped(&s.shipped()) as u64)
}

#[cfg(test)]
mod tests;
