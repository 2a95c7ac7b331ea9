//! Blocks on the ingester: compacting a tenant's head into blocks (kept in its `LocalBlocks`), shipping them to
//! the bucket, and deleting shipped blocks past the local retention.
//!
//! One background loop (the ingester's) runs these for every tenant on tickers, as Mimir's ingester does: every
//! `head_compaction_interval` each head cuts the block ranges that are due, and a head idle for
//! `head_compaction_idle_timeout` is compacted whole; every `ship_interval` new blocks are uploaded and expired
//! ones deleted. A failed upload is retried on the next tick; nothing local is deleted before it is in the bucket.

use crate::error::IngesterError;
use crate::metrics::BlockMetrics;
use crate::tenant::Tenant;
use heddle_bucket::ShipReport;
use heddle_tsdb::block::{BlockMeta, BlockReader};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a flush or a compaction tick did for one tenant.
#[derive(Debug, Clone, Default)]
pub struct TenantFlush {
    /// Blocks written from the head.
    pub blocks_written: Vec<BlockMeta>,
    /// Blocks uploaded (this call's and earlier ones').
    pub shipped: Option<ShipReport>,
}

/// Compacts the tenant's head: the due block ranges of `range_ms`, or (`force`) everything it holds. The new
/// blocks are queried from the moment before the head lets go of their samples (reads take the head first, then
/// the blocks: see `crate::read`), so no read finds a sample in neither. Runs on a blocking thread.
pub(crate) async fn compact(
    tenant: &Tenant,
    range_ms: i64,
    metrics: &BlockMetrics,
    force: bool,
) -> Result<Vec<BlockMeta>, IngesterError> {
    let head = tenant.head().clone();
    let dir = head.dir().to_path_buf();
    let t = tenant.id().clone();
    let local = Arc::clone(tenant.blocks());
    let started = Instant::now();
    let result = tokio::task::spawn_blocking(move || {
        head.compact_then(&dir, range_ms, Some(t.as_str()), force, |written| {
            let mut readers = Vec::with_capacity(written.len());
            for meta in written {
                readers.push(Arc::new(BlockReader::open_dir(&dir.join(&meta.ulid))?));
            }
            local.add(readers);
            Ok(())
        })
    })
    .await
    .map_err(|e| IngesterError::Task(e.to_string()))?;
    let stats = match result {
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
    let before = shipper.shipped();
    let result = shipper.ship().await;
    // Also after a failure: an upload before it may have succeeded.
    tenant.note_shipped(shipper.shipped().into_iter().filter(|u| !before.contains(u)));
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
/// bucket. A block shipped less than `grace` ago stays, however old its samples (a backfill, a bucket outage
/// longer than the retention): reads still answer it here because the querier may not list it yet.
pub(crate) async fn delete_expired(tenant: &Tenant, retention: Duration, grace: Duration, metrics: &BlockMetrics) {
    let Some(shipper) = tenant.shipper() else {
        return;
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let keep = tenant.still_answered(grace);
    match shipper.delete_expired_except(retention, now_ms, &keep).await {
        Ok(deleted) if !deleted.is_empty() => {
            metrics.blocks_deleted.inc_by(deleted.len() as u64);
            tenant.blocks().remove(&deleted);
            tenant.forget_shipped(&deleted);
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
    let old = tenant.blocks().swap_pending(pending);
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
