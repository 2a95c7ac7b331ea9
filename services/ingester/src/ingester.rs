//! The tenant map and the ingester's lifecycle: open (every tenant found on disk), serve, close; the entry
//! points of the API (`service`) and the background blocks loop (`blocks_loop`).
//!
//! A tenant's state is one [`Tenant`] in one map; the per-tenant work is in `push`, `read`, `blocks` and `admin`,
//! which take a `&Tenant` and know nothing of this map.

mod blocks_loop;
mod service;

use crate::admin::{FlushReport, TenantStats};
use crate::blocks::TenantFlush;
use crate::config::{IngesterConfig, TsdbConfig};
use crate::error::IngesterError;
use crate::limits::{IngesterLimits, SeriesAdmission, TopologySource};
use crate::metrics::Metrics;
use crate::tenant::Tenant;
use heddle_model::{Clock, SystemClock, TenantId};
use heddle_proto::ArenaPool;
use heddle_server::DiscardedSamples;
use heddle_tsdb::block::BlockMeta;
use heddle_tsdb::{HeadOptions, ReplayStats};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

const STARTING: u8 = 0;
const RUNNING: u8 = 1;
const STOPPING: u8 = 2;

/// One ingester: a [`Tenant`] (head, local blocks, shipper, limits state, rate) per tenant under
/// `blocks_storage.tsdb.dir/<tenant>/`.
#[derive(Debug)]
pub struct Ingester {
    tsdb: TsdbConfig,
    tenants: RwLock<HashMap<TenantId, Arc<Tenant>>>,
    /// Serializes the slow path that opens a new tenant, so two pushes never open it twice.
    opening: tokio::sync::Mutex<()>,
    arenas: ArenaPool,
    metrics: Metrics,
    discarded: DiscardedSamples,
    limits: Arc<IngesterLimits>,
    /// Where blocks are shipped; `None` when shipping is off.
    bucket: Option<heddle_bucket::Bucket>,
    /// How long reads still answer a block after its upload, in ms (see [`Ingester::set_shipped_blocks_grace`]).
    shipped_blocks_grace_ms: AtomicU64,
    state: AtomicU8,
    /// The time the push path's bounds are taken from (tests set a manual one).
    clock: RwLock<Arc<dyn Clock>>,
    /// How long metric metadata is kept after its last push (`ingester.metadata_retain_period`).
    metadata_retain: Duration,
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
            tenants: RwLock::new(HashMap::new()),
            opening: tokio::sync::Mutex::new(()),
            arenas: ArenaPool::new(cfg.arena_pool_size, cfg.arena_max_retained_bytes),
            metrics: Metrics::register(registry, discarded.tenant_metrics()),
            discarded,
            limits: Arc::new(IngesterLimits::new(cfg.instance_limits.clone(), registry)),
            bucket,
            shipped_blocks_grace_ms: AtomicU64::new(0),
            state: AtomicU8::new(STARTING),
            clock: RwLock::new(Arc::new(SystemClock)),
            metadata_retain: cfg.metadata_retain_period,
        })
    }

    /// Drops every tenant's metric metadata not pushed within `ingester.metadata_retain_period` of the
    /// ingester's clock, and recounts `heddle_ingester_memory_metadata`.
    pub(crate) fn purge_metadata(&self) {
        let before = self
            .now_ms()
            .saturating_sub(i64::try_from(self.metadata_retain.as_millis()).unwrap_or(i64::MAX));
        let mut held = 0;
        for tenant in self.all_tenants() {
            let dropped = tenant.metadata().purge(before);
            if dropped > 0 {
                tracing::debug!(tenant = %tenant.id(), dropped, "expired metric metadata");
            }
            held += tenant.metadata().len();
        }
        self.metrics
            .memory_metadata
            .set(i64::try_from(held).unwrap_or(i64::MAX));
    }

    /// Reads per-tenant series limits from `overrides` from now on (the default gives every tenant Mimir's
    /// defaults). The binary passes the runtime-config overrides the distributor reads too.
    pub fn set_overrides(&self, overrides: Arc<heddle_limits::Overrides>) {
        self.limits.set_overrides(overrides);
    }

    /// Divides the global series limits by what `topology` says from now on (the default is a single process:
    /// RF 1, one ingester). The binary passes the ring here in a cluster.
    pub fn set_topology_source(&self, topology: Arc<dyn TopologySource>) {
        self.limits.set_topology(topology);
    }

    /// How long after its upload a block is still answered here (default 0: reads leave a shipped block to the
    /// querier at once). The binary passes the querier's bucket sync interval, so that the querier lists a block
    /// before the ingester stops answering it.
    pub fn set_shipped_blocks_grace(&self, grace: Duration) {
        let ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
        self.shipped_blocks_grace_ms.store(ms, Ordering::Relaxed);
    }

    /// Takes "now" from `clock` from now on (default: the system clock): the push path refuses samples past
    /// now + the tenant's creation grace period, and, for an empty head, before now - one block range (or
    /// `empty_head_sample_age_limit`).
    pub fn set_clock(&self, clock: Arc<dyn Clock>) {
        *self.clock.write().unwrap_or_else(|p| p.into_inner()) = clock;
    }

    fn now_ms(&self) -> i64 {
        self.clock.read().unwrap_or_else(|p| p.into_inner()).now_ms()
    }

    /// The time bounds of a push of `tenant` now (see [`Ingester::set_clock`]).
    fn append_bounds(&self, tenant: &TenantId) -> heddle_tsdb::AppendBounds {
        let now = self.now_ms();
        let grace = i64::try_from(self.limits.creation_grace_period(tenant).as_millis()).unwrap_or(i64::MAX);
        heddle_tsdb::AppendBounds {
            empty_head_min: now.saturating_sub(self.tsdb.empty_head_sample_age_limit_ms()),
            max: now.saturating_add(grace),
        }
    }

    fn shipped_blocks_grace(&self) -> Duration {
        Duration::from_millis(self.shipped_blocks_grace_ms.load(Ordering::Relaxed))
    }

    /// Opens every tenant directory found under the TSDB dir, replaying their heads in parallel (one blocking
    /// task per tenant), then starts accepting pushes. Until it returns, pushes are refused with `Unavailable`
    /// so senders retry.
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
            let result = self.open_tenant(t).await;
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
            tenants = self.read_tenants().len(),
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

    /// Refuses new pushes, then closes every tenant (flushing its WAL's last page and syncing it), writing a
    /// chunk snapshot of each head when `blocks_storage.tsdb.memory_snapshot_on_shutdown` is on.
    pub async fn close(&self) {
        let far = tokio::time::Instant::now() + Duration::from_secs(365 * 24 * 3600);
        self.close_by(far, far).await;
    }

    /// [`Ingester::close`] within deadlines: the flush of `flush_blocks_on_shutdown` stops at `flush_until`
    /// (the WAL keeps what it did not write as blocks), and closing the heads, which runs after it in any case,
    /// stops waiting at `close_until`. A head still closing then (a slow snapshot) is left to the process
    /// exit: its WAL holds every acknowledged sample already (written before the ack; only its last fsync
    /// is missing). Returns whether every head was closed.
    pub async fn close_by(&self, flush_until: tokio::time::Instant, close_until: tokio::time::Instant) -> bool {
        let snapshot = self.tsdb.memory_snapshot_on_shutdown;
        self.state.store(STOPPING, Ordering::Release);
        if self.tsdb.flush_blocks_on_shutdown {
            let flush = async {
                for tenant in self.tenants() {
                    if let Err(e) = self.flush_tenant(&tenant, true).await {
                        tracing::error!(%tenant, error = %e, "flushing blocks on shutdown failed; the WAL keeps the samples");
                    }
                }
            };
            if tokio::time::timeout_at(flush_until, flush).await.is_err() {
                tracing::warn!(
                    "flushing blocks on shutdown did not finish in time; skipped the rest, the WAL keeps the samples"
                );
            }
        }
        let tenants = self.all_tenants();
        let total = tenants.len();
        let closed = std::sync::atomic::AtomicUsize::new(0);
        // In parallel: each close is mostly an fsync (and a snapshot when enabled).
        let close_all = futures::future::join_all(tenants.into_iter().map(|tenant| {
            let closed = &closed;
            async move {
                let t = tenant.clone();
                let result = tokio::task::spawn_blocking(move || t.close(snapshot)).await;
                let tenant = tenant.id();
                match result {
                    Ok(Ok(Some(series))) => {
                        tracing::info!(%tenant, snapshot_series = series, "closed tenant head with a chunk snapshot")
                    }
                    Ok(Ok(None)) => tracing::info!(%tenant, "closed tenant head"),
                    Ok(Err(e)) => tracing::error!(%tenant, error = %e, "closing tenant head failed"),
                    Err(e) => tracing::error!(%tenant, error = %e, "closing tenant head panicked"),
                }
                closed.fetch_add(1, Ordering::Relaxed);
            }
        }));
        if tokio::time::timeout_at(close_until, close_all).await.is_err() {
            let done = closed.load(Ordering::Relaxed);
            tracing::warn!(
                closed = done,
                not_closed = total - done,
                "tenant heads did not all close in time; the rest were not synced (their WAL holds every acknowledged \
                 sample, written before it was acknowledged)"
            );
            return false;
        }
        true
    }

    /// Closes every tenant that may be closed as idle ([`Tenant::closable`], `close_idle_tsdb_timeout`);
    /// returns how many were. Run by the blocks loop after its compaction tick.
    pub(crate) async fn close_idle_tenants(&self) -> usize {
        let timeout = self.tsdb.close_idle_tsdb_timeout;
        if timeout.is_zero() || !self.is_running() {
            return 0;
        }
        let mut closed = 0;
        for tenant in self.all_tenants() {
            if tenant.closable(timeout, std::time::Instant::now()).is_err() {
                continue;
            }
            match self.close_idle_tenant(tenant.id(), timeout).await {
                Ok(true) => closed += 1,
                Ok(false) => {}
                Err(e) => tracing::error!(tenant = %tenant.id(), error = %e, "closing idle tenant failed"),
            }
        }
        closed
    }

    /// Closes `tenant` if it is still closable, as Mimir closes idle TSDBs. Race-free with pushes: the tenant
    /// leaves the map under the lock that serializes opening tenants, so a new push waits and then opens it
    /// afresh; a push that found the old tenant before either lands in its head before the head closes (its
    /// samples are then in the WAL, and the directory is kept for the next open to replay), or finds the head
    /// closed and, having stored nothing, retries in the reopened tenant (`service`).
    async fn close_idle_tenant(&self, tenant: &TenantId, timeout: Duration) -> Result<bool, IngesterError> {
        let _guard = self.opening.lock().await;
        let Some(t) = self.tenant(tenant) else {
            return Ok(false);
        };
        if let Err(why) = t.closable(timeout, std::time::Instant::now()) {
            tracing::debug!(%tenant, why, "idle tenant not closed");
            return Ok(false);
        }
        self.tenants.write().unwrap_or_else(|e| e.into_inner()).remove(tenant);
        self.metrics.tenants.dec();
        let samples_before = t.head().stats().samples_appended;
        let closing = t.clone();
        let tsdb_err = |source| IngesterError::Tsdb {
            tenant: tenant.clone(),
            source,
        };
        tokio::task::spawn_blocking(move || closing.close(false))
            .await
            .map_err(|e| IngesterError::Task(e.to_string()))?
            .map_err(tsdb_err)?;
        // A push that raced the close landed in the WAL: keep the directory, and open the tenant again at once
        // so that those samples stay readable.
        let untouched = t.head().stats().samples_appended == samples_before && t.head().stats().series == 0;
        if !untouched {
            tracing::info!(%tenant, "a push reached the idle tenant while it closed; opened it again");
            self.open_tenant_locked(tenant.clone()).await?;
            return Ok(false);
        }
        let dir = t.head().dir().to_path_buf();
        let d = dir.clone();
        tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&d))
            .await
            .map_err(|e| IngesterError::Task(e.to_string()))?
            .map_err(|source| tsdb_err(heddle_tsdb::TsdbError::Io { path: dir, source }))?;
        self.metrics.idle_tenants_closed.inc();
        tracing::info!(
            %tenant,
            idle_for = ?timeout,
            "closed idle tenant: head closed, files released, local directory deleted; the next push opens it again"
        );
        Ok(true)
    }

    /// The tenants that are open here, sorted.
    pub fn tenants(&self) -> Vec<TenantId> {
        let mut tenants: Vec<TenantId> = self.read_tenants().keys().cloned().collect();
        tenants.sort();
        tenants
    }

    /// Statistics of `tenant`, or `None` when it is not open on this ingester.
    pub async fn tenant_stats(&self, tenant: &TenantId) -> Option<TenantStats> {
        let t = self.tenant(tenant)?;
        Some(crate::admin::tenant_stats(&t, !self.tsdb.ship_interval.is_zero()).await)
    }

    /// Compacts `tenant`'s head: the due block ranges, or (`force`) everything it holds. The new blocks are
    /// queried from now on. Runs on a blocking thread.
    pub async fn compact_tenant(&self, tenant: &TenantId, force: bool) -> Result<Vec<BlockMeta>, IngesterError> {
        let Some(t) = self.tenant(tenant) else {
            return Ok(Vec::new());
        };
        crate::blocks::compact(&t, self.tsdb.block_range_ms(), &self.metrics.blocks, force).await
    }

    /// Uploads `tenant`'s blocks that are not in the bucket yet (none when shipping is off).
    pub async fn ship_tenant(&self, tenant: &TenantId) -> Result<Option<heddle_bucket::ShipReport>, IngesterError> {
        let Some(t) = self.tenant(tenant) else {
            return Ok(None);
        };
        crate::blocks::ship(&t, &self.metrics.blocks).await
    }

    /// Compacts (everything when `force`) and ships one tenant: what `/ingester/flush` does per tenant.
    pub async fn flush_tenant(&self, tenant: &TenantId, force: bool) -> Result<TenantFlush, IngesterError> {
        let Some(t) = self.tenant(tenant) else {
            return Ok(TenantFlush::default());
        };
        crate::blocks::flush(&t, self.tsdb.block_range_ms(), &self.metrics.blocks, force).await
    }

    /// Compacts the whole head of each named tenant (every tenant when `tenants` is empty) into blocks and
    /// ships them to the bucket now (Mimir's `/ingester/flush`): used before scale-down and in tests. Samples
    /// older than the newest flushed one are refused afterwards (that range is in a block). Tenants that are not
    /// open are skipped. Fails on the first tenant whose compaction or upload fails; blocks already written
    /// stay, and the next flush or ship tick uploads them.
    pub async fn flush(&self, tenants: &[TenantId]) -> Result<FlushReport, IngesterError> {
        let selected: Vec<Arc<Tenant>> = if tenants.is_empty() {
            self.all_tenants()
        } else {
            let mut t: Vec<Arc<Tenant>> = tenants.iter().filter_map(|t| self.tenant(t)).collect();
            t.sort_by(|a, b| a.id().cmp(b.id()));
            t.dedup_by(|a, b| a.id() == b.id());
            t
        };
        let mut report = FlushReport {
            tenants: selected.iter().map(|t| t.id().clone()).collect(),
            blocks_written: 0,
            blocks_shipped: 0,
        };
        for tenant in &selected {
            let done = crate::blocks::flush(tenant, self.tsdb.block_range_ms(), &self.metrics.blocks, true).await?;
            report.blocks_written += done.blocks_written.len() as u64;
            if let Some(shipped) = &done.shipped {
                report.blocks_shipped += shipped.uploaded.len() as u64;
                if let Some((ulid, error)) = shipped.failed.first() {
                    return Err(IngesterError::ShipFailed {
                        tenant: tenant.id().clone(),
                        block: ulid.clone(),
                        reason: error.clone(),
                    });
                }
            }
        }
        tracing::info!(
            tenants = selected.len(),
            blocks_written = report.blocks_written,
            blocks_shipped = report.blocks_shipped,
            "flushed tenant heads"
        );
        Ok(report)
    }

    /// Reads wait for the replay like writes: before it ends a tenant's head holds only part of its data, and
    /// an answer from it would be a 200 with samples missing. After the replay, reads are served until the
    /// heads are closed.
    pub(crate) fn check_readable(&self) -> Result<(), IngesterError> {
        match self.state.load(Ordering::Acquire) {
            STARTING => Err(IngesterError::NotReady(
                "replaying the WAL; its data is incomplete until the replay ends".into(),
            )),
            _ => Ok(()),
        }
    }

    fn check_accepting(&self) -> Result<(), IngesterError> {
        match self.state.load(Ordering::Acquire) {
            RUNNING => Ok(()),
            STARTING => Err(IngesterError::NotReady("replaying the WAL".into())),
            _ => Err(IngesterError::Stopping),
        }
    }

    fn read_tenants(&self) -> std::sync::RwLockReadGuard<'_, HashMap<TenantId, Arc<Tenant>>> {
        self.tenants.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Every open tenant, sorted by id.
    fn all_tenants(&self) -> Vec<Arc<Tenant>> {
        let mut all: Vec<Arc<Tenant>> = self.read_tenants().values().cloned().collect();
        all.sort_by(|a, b| a.id().cmp(b.id()));
        all
    }

    /// `tenant` if it is open (reads never open one).
    pub(crate) fn tenant(&self, tenant: &TenantId) -> Option<Arc<Tenant>> {
        self.read_tenants().get(tenant).cloned()
    }

    /// The head of `tenant` if it is open (tests).
    #[cfg(test)]
    pub(crate) fn head(&self, tenant: &TenantId) -> Option<Arc<heddle_tsdb::Head>> {
        self.tenant(tenant).map(|t| t.head().clone())
    }

    #[cfg(test)]
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    #[cfg(test)]
    pub(crate) fn limits(&self) -> &IngesterLimits {
        &self.limits
    }

    /// `tenant`, opened (its blocks, its head replayed) on first use.
    async fn tenant_or_open(&self, tenant: &TenantId) -> Result<Arc<Tenant>, IngesterError> {
        if let Some(t) = self.tenant(tenant) {
            return Ok(t);
        }
        self.open_tenant(tenant.clone()).await
    }

    async fn open_tenant(&self, tenant: TenantId) -> Result<Arc<Tenant>, IngesterError> {
        let _guard = self.opening.lock().await;
        if let Some(t) = self.tenant(&tenant) {
            return Ok(t);
        }
        self.open_tenant_locked(tenant).await
    }

    /// Opens `tenant` and adds it to the map; the caller holds `opening`.
    async fn open_tenant_locked(&self, tenant: TenantId) -> Result<Arc<Tenant>, IngesterError> {
        let dir = self.tsdb.dir.join(tenant.as_str());
        let opts = HeadOptions {
            wal_compression: self.tsdb.wal_compression_enabled,
            wal_segment_size: self.tsdb.wal_segment_size_bytes,
            chunk_range_ms: self.tsdb.block_range_ms(),
            // The ring replays the WAL's exemplars at the tenant's current size; pushes resize it as limits change.
            max_exemplars: self.limits.local_entry_limits(&tenant).max_exemplars,
            ..HeadOptions::default()
        };
        let admission = Arc::new(SeriesAdmission::new(
            tenant.clone(),
            self.limits.clone(),
            self.metrics.memory_series.clone(),
        ));
        let (t, bucket) = (tenant.clone(), self.bucket.clone());
        let (opened, stats) = tokio::task::spawn_blocking(move || Tenant::open(t, dir, opts, bucket, admission))
            .await
            .map_err(|e| IngesterError::Task(e.to_string()))?
            .map_err(|source| IngesterError::Tsdb {
                tenant: tenant.clone(),
                source,
            })?;
        let blocks = opened.blocks().len();
        if blocks > 0 {
            tracing::info!(%tenant, blocks, "opened local blocks");
        }
        self.record_replay(&tenant, &stats);
        let opened = Arc::new(opened);
        self.tenants
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(tenant, opened.clone());
        Ok(opened)
    }

    /// Metrics and logs of one tenant's replay. `heddle_ingester_memory_series` is not here: the tenant's series
    /// admission counted the replayed series when it was installed on the head.
    fn record_replay(&self, tenant: &TenantId, stats: &ReplayStats) {
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
    }
}

#[cfg(test)]
mod tests;
