//! The tenant map and the ingester's lifecycle: open (replay every tenant found on disk), serve, close.

use crate::config::{IngesterConfig, TsdbConfig};
use crate::error::IngesterError;
use crate::limits::IngesterLimits;
use crate::metrics::Metrics;
use heddle_model::TenantId;
use heddle_proto::ArenaPool;
use heddle_server::DiscardedSamples;
use heddle_tsdb::{Head, HeadOptions};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, RwLock};

const STARTING: u8 = 0;
const RUNNING: u8 = 1;
const STOPPING: u8 = 2;

/// One ingester: a TSDB head per tenant under `blocks_storage.tsdb.dir/<tenant>/`.
#[derive(Debug)]
pub struct Ingester {
    pub(crate) tsdb: TsdbConfig,
    pub(crate) heads: RwLock<HashMap<TenantId, Arc<Head>>>,
    /// Serializes the slow path that opens a new tenant's head, so two pushes never open it twice.
    opening: tokio::sync::Mutex<()>,
    pub(crate) arenas: ArenaPool,
    pub(crate) metrics: Metrics,
    pub(crate) discarded: DiscardedSamples,
    pub(crate) limits: IngesterLimits,
    /// Local blocks per tenant, oldest first (see `blocks`).
    pub(crate) blocks: RwLock<HashMap<TenantId, crate::blocks::LocalBlocks>>,
    /// Where blocks are shipped; `None` when shipping is off.
    pub(crate) bucket: Option<heddle_bucket::Bucket>,
    pub(crate) shippers: std::sync::Mutex<HashMap<TenantId, Arc<heddle_bucket::Shipper>>>,
    /// Recent appended-sample counts per tenant, for the ingestion rate the admin API reports.
    pub(crate) rates: crate::rates::TenantRates,
    state: AtomicU8,
}

impl Ingester {
    /// Creates the ingester and registers its metrics; no I/O until [`Ingester::open_existing`]. Blocks are
    /// shipped to `bucket` when one is given and `ship_interval` is not 0.
    pub fn new(
        cfg: &IngesterConfig,
        tsdb: TsdbConfig,
        bucket: Option<heddle_bucket::Bucket>,
        registry: &mut Registry,
        discarded: DiscardedSamples,
    ) -> Arc<Self> {
        Arc::new(Self {
            tsdb,
            heads: RwLock::new(HashMap::new()),
            opening: tokio::sync::Mutex::new(()),
            arenas: ArenaPool::new(cfg.arena_pool_size, cfg.arena_max_retained_bytes),
            metrics: Metrics::register(registry),
            discarded,
            limits: IngesterLimits::new(cfg.instance_limits.clone(), registry),
            blocks: RwLock::new(HashMap::new()),
            bucket,
            shippers: std::sync::Mutex::new(HashMap::new()),
            rates: crate::rates::TenantRates::default(),
            state: AtomicU8::new(STARTING),
        })
    }

    /// Opens the head of every tenant directory found under the TSDB dir, replaying their WALs in parallel
    /// (one blocking task per tenant), then starts accepting pushes. Until it returns, pushes are refused
    /// with `Unavailable` so senders retry.
    pub async fn open_existing(&self) -> Result<(), IngesterError> {
        let dir = self.tsdb.dir.clone();
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| IngesterError::NotReady(format!("cannot create {}: {e}", dir.display())))?;
        let mut tenants = Vec::new();
        let mut entries = tokio::fs::read_dir(&dir)
            .await
            .map_err(|e| IngesterError::NotReady(format!("cannot list {}: {e}", dir.display())))?;
        while let Ok(Some(entry)) = entries.next_entry().await {
            let is_dir = entry.file_type().await.map(|t| t.is_dir()).unwrap_or(false);
            let name = entry.file_name();
            match (is_dir, name.to_str().map(TenantId::new)) {
                (true, Some(Ok(tenant))) => tenants.push(tenant),
                _ => tracing::warn!(path = %entry.path().display(), "ignoring entry that is not a tenant directory"),
            }
        }
        let started = std::time::Instant::now();
        let total = tenants.len();
        self.metrics.replay.tenants_pending.set(total as i64);
        tracing::info!(tenants = total, "replaying tenant heads");
        let opened = futures::future::join_all(tenants.into_iter().map(|t| async {
            let result = self.open_head(t).await;
            let left = self.metrics.replay.tenants_pending.dec() - 1;
            tracing::info!(done = total as i64 - left, of = total, "replay progress");
            result
        }))
        .await;
        for result in opened {
            result?;
        }
        let elapsed = started.elapsed();
        self.metrics.replay.duration_seconds.set(elapsed.as_secs_f64());
        tracing::info!(
            tenants = self.heads.read().unwrap_or_else(|e| e.into_inner()).len(),
            elapsed_ms = elapsed.as_millis() as u64,
            "replayed tenant heads"
        );
        self.state.store(RUNNING, Ordering::Release);
        Ok(())
    }

    /// Whether replay has finished and the ingester accepts writes.
    pub fn is_running(&self) -> bool {
        self.state.load(Ordering::Acquire) == RUNNING
    }

    /// Refuses new pushes, then closes every head (flushing the WAL's last page and syncing it), writing a chunk
    /// snapshot of each when `blocks_storage.tsdb.memory_snapshot_on_shutdown` is on.
    pub async fn close(&self) {
        let snapshot = self.tsdb.memory_snapshot_on_shutdown;
        self.state.store(STOPPING, Ordering::Release);
        if self.tsdb.flush_blocks_on_shutdown {
            for tenant in self.tenants() {
                if let Err(e) = self.flush_tenant(&tenant, true).await {
                    tracing::error!(%tenant, error = %e, "flushing blocks on shutdown failed; the WAL keeps the samples");
                }
            }
        }
        let heads: Vec<(TenantId, Arc<Head>)> = self
            .heads
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(t, h)| (t.clone(), h.clone()))
            .collect();
        for (tenant, head) in heads {
            let result = tokio::task::spawn_blocking(move || {
                if snapshot {
                    head.close_with_snapshot().map(|s| s.map(|s| s.series))
                } else {
                    head.close().map(|()| None)
                }
            })
            .await;
            match result {
                Ok(Ok(Some(series))) => {
                    tracing::info!(%tenant, snapshot_series = series, "closed tenant head with a chunk snapshot")
                }
                Ok(Ok(None)) => tracing::info!(%tenant, "closed tenant head"),
                Ok(Err(e)) => tracing::error!(%tenant, error = %e, "closing tenant head failed"),
                Err(e) => tracing::error!(%tenant, error = %e, "closing tenant head panicked"),
            }
        }
    }

    pub(crate) fn check_accepting(&self) -> Result<(), IngesterError> {
        match self.state.load(Ordering::Acquire) {
            RUNNING => Ok(()),
            STARTING => Err(IngesterError::NotReady("replaying the WAL".into())),
            _ => Err(IngesterError::Stopping),
        }
    }

    /// The head of `tenant` if it exists (reads never create one).
    pub(crate) fn head(&self, tenant: &TenantId) -> Option<Arc<Head>> {
        self.heads
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(tenant)
            .cloned()
    }

    /// The head of `tenant`, opened (and its WAL replayed) on first use.
    pub(crate) async fn head_or_open(&self, tenant: &TenantId) -> Result<Arc<Head>, IngesterError> {
        if let Some(h) = self.head(tenant) {
            return Ok(h);
        }
        self.open_head(tenant.clone()).await
    }

    async fn open_head(&self, tenant: TenantId) -> Result<Arc<Head>, IngesterError> {
        let _guard = self.opening.lock().await;
        if let Some(h) = self.head(&tenant) {
            return Ok(h);
        }
        let dir = self.tsdb.dir.join(tenant.as_str());
        let mut opts = HeadOptions {
            wal_compression: self.tsdb.wal_compression_enabled,
            wal_segment_size: self.tsdb.wal_segment_size_bytes,
            chunk_range_ms: self.tsdb.block_range_ms(),
            ..HeadOptions::default()
        };
        let t = tenant.clone();
        let (head, stats, blocks) = tokio::task::spawn_blocking(move || {
            let (blocks, newest_end) = crate::blocks::open_local_blocks(&dir)?;
            opts.min_valid_time = newest_end;
            Head::open(&dir, opts).map(|(h, s)| (h, s, blocks))
        })
        .await
        .map_err(|e| IngesterError::Task(e.to_string()))?
        .map_err(|source| IngesterError::Tsdb { tenant: t, source })?;
        if !blocks.is_empty() {
            tracing::info!(%tenant, blocks = blocks.len(), "opened local blocks");
            self.blocks
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(tenant.clone(), blocks);
        }
        if let Some(c) = &stats.wal_repaired {
            self.metrics.wal_corruptions_repaired.inc();
            tracing::warn!(%tenant, segment = c.segment, offset = c.offset, reason = %c.reason, "repaired a corrupt WAL tail; records after it were dropped");
        }
        if let Some(c) = &stats.chunks_head_repaired {
            self.metrics.replay.chunks_head_corruptions_repaired.inc();
            tracing::warn!(%tenant, file = c.file, offset = c.offset, reason = %c.reason, files_deleted = c.files_deleted, "cut chunks_head at a corrupt chunk; the WAL replayed its samples");
        }
        if stats.snapshots_discarded > 0 {
            self.metrics
                .replay
                .snapshots_discarded
                .inc_by(stats.snapshots_discarded);
            tracing::warn!(%tenant, discarded = stats.snapshots_discarded, "deleted unusable chunk snapshots; the WAL was replayed instead");
        }
        let rp = &self.metrics.replay;
        rp.tenants_done.inc();
        rp.samples.inc_by(stats.samples);
        rp.samples_in_mmapped_chunks.inc_by(stats.samples_in_mmapped_chunks);
        rp.mmapped_chunks.inc_by(stats.mmapped_chunks);
        rp.snapshot_series.inc_by(stats.snapshot_series);
        if stats.snapshot.is_some() {
            rp.snapshots_loaded.inc();
        }
        self.metrics.replayed_records.inc_by(stats.wal_records);
        self.metrics.open_chunks_dropped.inc_by(stats.open_chunks_dropped);
        self.metrics
            .memory_series
            .inc_by((stats.series + stats.snapshot_series) as i64);
        self.metrics.tenants.inc();
        tracing::info!(
            %tenant,
            series = stats.series + stats.snapshot_series,
            from_snapshot = stats.snapshot.is_some(),
            samples = stats.samples,
            mmapped_chunks = stats.mmapped_chunks,
            records = stats.wal_records,
            "opened tenant head"
        );
        let head = Arc::new(head);
        self.heads
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(tenant, head.clone());
        Ok(head)
    }
}

#[cfg(test)]
mod tests;
