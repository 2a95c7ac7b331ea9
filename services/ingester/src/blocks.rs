//! Blocks on the ingester: compacting tenant heads into blocks, the local blocks queries read beside the head,
//! shipping blocks to the bucket, and deleting shipped blocks past the local retention.
//!
//! One background loop does it all (Mimir's ingester runs the same three on tickers): every
//! `head_compaction_interval` each head cuts the block ranges that are due, and a head idle for
//! `head_compaction_idle_timeout` is compacted whole; every `ship_interval` new blocks are uploaded and expired
//! ones deleted. A failed upload is retried on the next tick; nothing local is deleted before it is in the bucket.

use crate::error::IngesterError;
use crate::ingester::Ingester;
use heddle_bucket::{ShipReport, Shipper};
use heddle_model::TenantId;
use heddle_tsdb::block::{BlockMeta, BlockReader, list_local_blocks, remove_incomplete_blocks};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// A tenant's local blocks, oldest first.
pub(crate) type LocalBlocks = Vec<Arc<BlockReader>>;

/// Opens the blocks under a tenant directory, after deleting blocks a crash left half-written. Returns the
/// readers and the newest block end: the head's minimum valid time, so WAL samples a block already holds are
/// not loaded again.
pub(crate) fn open_local_blocks(dir: &Path) -> Result<(LocalBlocks, i64), heddle_tsdb::TsdbError> {
    if !dir.exists() {
        return Ok((Vec::new(), i64::MIN));
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
    Ok((readers, newest_end))
}

/// What a flush or a compaction tick did for one tenant.
#[derive(Debug, Clone, Default)]
pub struct TenantFlush {
    /// Blocks written from the head.
    pub blocks_written: Vec<BlockMeta>,
    /// Blocks uploaded (this call's and earlier ones').
    pub shipped: Option<ShipReport>,
}

impl Ingester {
    /// The local blocks of `tenant` overlapping `[mint, maxt]`.
    pub(crate) fn blocks_overlapping(&self, tenant: &TenantId, mint: i64, maxt: i64) -> LocalBlocks {
        self.blocks
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(tenant)
            .map(|all| {
                all.iter()
                    .filter(|b| b.meta().min_time <= maxt && b.meta().max_time > mint)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Compacts `tenant`'s head: the due block ranges, or (`force`) everything it holds. The new blocks are
    /// queried from now on. Runs on a blocking thread.
    pub async fn compact_tenant(&self, tenant: &TenantId, force: bool) -> Result<Vec<BlockMeta>, IngesterError> {
        let Some(head) = self.head(tenant) else {
            return Ok(Vec::new());
        };
        let range = self.tsdb.block_range_ms();
        let dir = self.tsdb.dir.join(tenant.as_str());
        let t = tenant.clone();
        let started = Instant::now();
        let result = tokio::task::spawn_blocking(move || {
            let stats = head.compact(&dir, range, Some(t.as_str()), force)?;
            let mut readers = Vec::with_capacity(stats.blocks.len());
            for meta in &stats.blocks {
                readers.push(Arc::new(BlockReader::open_dir(&dir.join(&meta.ulid))?));
            }
            Ok::<_, heddle_tsdb::TsdbError>((stats, readers))
        })
        .await
        .map_err(|e| IngesterError::Task(e.to_string()))?;
        let m = &self.metrics.blocks;
        let (stats, readers) = match result {
            Ok(r) => r,
            Err(source) => {
                m.compaction_failures.inc();
                return Err(IngesterError::Tsdb {
                    tenant: tenant.clone(),
                    source,
                });
            }
        };
        if stats.blocks.is_empty() {
            return Ok(Vec::new());
        }
        m.compactions.inc();
        m.compaction_duration_seconds.observe(started.elapsed().as_secs_f64());
        m.blocks_written.inc_by(stats.blocks.len() as u64);
        if let Some(tr) = &stats.truncate {
            self.metrics.memory_series.dec_by(tr.series_removed as i64);
        }
        {
            let mut blocks = self.blocks.write().unwrap_or_else(|e| e.into_inner());
            let list = blocks.entry(tenant.clone()).or_default();
            list.extend(readers);
            list.sort_by_key(|b| b.meta().min_time);
        }
        if let Some(shipper) = self.shipper(tenant) {
            self.recount_pending(tenant, &shipper);
        }
        tracing::info!(
            %tenant,
            blocks = stats.blocks.len(),
            series_removed = stats.truncate.as_ref().map_or(0, |t| t.series_removed),
            elapsed_ms = started.elapsed().as_millis() as u64,
            force,
            "compacted tenant head"
        );
        Ok(stats.blocks)
    }

    /// Uploads `tenant`'s blocks that are not in the bucket yet (none when shipping is off).
    pub async fn ship_tenant(&self, tenant: &TenantId) -> Result<Option<ShipReport>, IngesterError> {
        let Some(shipper) = self.shipper(tenant) else {
            return Ok(None);
        };
        let result = shipper.ship().await;
        // Also after a failure: an upload before it may have succeeded.
        self.recount_pending(tenant, &shipper);
        let report = result.map_err(|e| IngesterError::Bucket {
            tenant: tenant.clone(),
            source: Box::new(e),
        })?;
        for (ulid, error) in &report.failed {
            tracing::warn!(%tenant, block = %ulid, %error, "block upload failed; retrying on the next ship tick");
        }
        if !report.uploaded.is_empty() {
            tracing::info!(%tenant, blocks = report.uploaded.len(), "shipped blocks");
        }
        Ok(Some(report))
    }

    /// Deletes `tenant`'s local blocks that are shipped and past the retention; they stop being queried here
    /// (the querier reads them from the bucket).
    async fn delete_expired(&self, tenant: &TenantId) {
        let Some(shipper) = self.shipper(tenant) else {
            return;
        };
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        match shipper.delete_expired(self.tsdb.retention_period, now_ms).await {
            Ok(deleted) if !deleted.is_empty() => {
                self.metrics.blocks.blocks_deleted.inc_by(deleted.len() as u64);
                let mut blocks = self.blocks.write().unwrap_or_else(|e| e.into_inner());
                if let Some(list) = blocks.get_mut(tenant) {
                    list.retain(|b| !deleted.contains(&b.meta().ulid));
                }
                tracing::info!(%tenant, blocks = deleted.len(), "deleted local blocks past the retention period");
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(%tenant, error = %e, "deleting expired local blocks failed"),
        }
    }

    /// Sets `tenant`'s share of `heddle_ingester_blocks_pending_upload`: its local blocks that `shipper` has not
    /// uploaded. O(the tenant's blocks), run by the events that change it (a block written, a ship), never by a
    /// scrape. The first ship tick after start-up counts the blocks found on disk.
    fn recount_pending(&self, tenant: &TenantId, shipper: &Shipper) {
        let pending = self.count_unshipped(tenant, shipper);
        let m = &self.metrics.blocks;
        let mut by_tenant = m.pending_by_tenant.lock().unwrap_or_else(|e| e.into_inner());
        let old = by_tenant.insert(tenant.clone(), pending as i64).unwrap_or(0);
        m.pending_upload.inc_by(pending as i64 - old);
    }

    /// `tenant`'s local blocks that `shipper` has not uploaded.
    fn count_unshipped(&self, tenant: &TenantId, shipper: &Shipper) -> usize {
        let shipped = shipper.shipped();
        self.blocks
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(tenant)
            .map_or(0, |list| {
                list.iter().filter(|b| !shipped.contains(&b.meta().ulid)).count()
            })
    }

    /// `tenant`'s local blocks not yet uploaded, counted now (the admin API's `blocks_pending_upload`); 0 when
    /// shipping is off.
    pub(crate) fn blocks_pending_upload(&self, tenant: &TenantId) -> u64 {
        if self.tsdb.ship_interval.is_zero() {
            return 0;
        }
        self.shipper(tenant)
            .map_or(0, |shipper| self.count_unshipped(tenant, &shipper) as u64)
    }

    fn shipper(&self, tenant: &TenantId) -> Option<Arc<Shipper>> {
        let bucket = self.bucket.as_ref()?;
        let mut shippers = self.shippers.lock().unwrap_or_else(|e| e.into_inner());
        Some(
            shippers
                .entry(tenant.clone())
                .or_insert_with(|| {
                    Arc::new(Shipper::new(
                        tenant.clone(),
                        self.tsdb.dir.join(tenant.as_str()),
                        bucket.clone(),
                    ))
                })
                .clone(),
        )
    }

    /// Compacts (everything when `force`) and ships one tenant: what `/ingester/flush` does per tenant.
    pub async fn flush_tenant(&self, tenant: &TenantId, force: bool) -> Result<TenantFlush, IngesterError> {
        let blocks_written = self.compact_tenant(tenant, force).await?;
        let shipped = self.ship_tenant(tenant).await?;
        Ok(TenantFlush {
            blocks_written,
            shipped,
        })
    }

    /// The background loop: compaction ticks, idle-head compaction, shipping and retention, until `stop`.
    pub async fn run_blocks_loop(self: Arc<Self>, stop: CancellationToken) {
        let mut compact_tick = tokio::time::interval(self.tsdb.head_compaction_interval);
        compact_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let ship_every = if self.tsdb.ship_interval.is_zero() || self.bucket.is_none() {
            // Still tick (rarely) so the select below stays simple; shipping does nothing without a bucket.
            Duration::from_secs(3600)
        } else {
            self.tsdb.ship_interval
        };
        let mut ship_tick = tokio::time::interval(ship_every);
        ship_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut rate_tick = tokio::time::interval(crate::rates::RATE_TICK);
        rate_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Per tenant: samples appended at the last tick that saw them change, and when.
        let mut activity: HashMap<TenantId, (u64, Instant)> = HashMap::new();
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = rate_tick.tick() => {
                    let tenants = self.tenants();
                    let now = Instant::now();
                    for tenant in &tenants {
                        if let Some(head) = self.head(tenant) {
                            self.rates.observe(tenant, now, head.stats().samples_appended);
                        }
                    }
                    self.rates.retain(&tenants);
                }
                _ = compact_tick.tick() => {
                    if !self.is_running() { continue; }
                    for tenant in self.tenants() {
                        let force = self.idle(&tenant, &mut activity);
                        if let Err(e) = self.compact_tenant(&tenant, force).await {
                            tracing::error!(%tenant, error = %e, "head compaction failed; retrying on the next tick");
                        }
                    }
                }
                _ = ship_tick.tick() => {
                    if !self.is_running() || self.bucket.is_none() || self.tsdb.ship_interval.is_zero() { continue; }
                    for tenant in self.tenants() {
                        if let Err(e) = self.ship_tenant(&tenant).await {
                            tracing::warn!(%tenant, error = %e, "shipping blocks failed; retrying on the next tick");
                        }
                        self.delete_expired(&tenant).await;
                    }
                }
            }
        }
    }

    /// Whether `tenant`'s head has samples and received none for the idle timeout.
    fn idle(&self, tenant: &TenantId, activity: &mut HashMap<TenantId, (u64, Instant)>) -> bool {
        let timeout = self.tsdb.head_compaction_idle_timeout;
        let Some(head) = self.head(tenant) else {
            return false;
        };
        let stats = head.stats();
        let now = Instant::now();
        let entry = activity.entry(tenant.clone()).or_insert((stats.samples_appended, now));
        if entry.0 != stats.samples_appended {
            *entry = (stats.samples_appended, now);
            return false;
        }
        let has_samples = stats.max_time.is_some_and(|t| t >= head.min_valid_time());
        !timeout.is_zero() && has_samples && now.duration_since(entry.1) >= timeout
    }
}

#[cfg(test)]
mod tests;
