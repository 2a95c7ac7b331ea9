//! The compaction loop: every `compaction_interval`, each tenant of the bucket in turn, under the tenant's lock.
//!
//! A tenant's pass repeats, until the planner has nothing left:
//! 1. list the tenant's prefix (blocks, deletion marks);
//! 2. delete the blocks whose deletion mark is older than `deletion_delay`;
//! 3. mark the blocks another block supersedes, and the blocks past the tenant's retention;
//! 4. compact the group the planner picks: download its blocks, merge them locally, upload the merged block
//!    (`meta.json` last), and only then mark the sources for deletion.
//!
//! and ends by writing the tenant's bucket index from a fresh listing.
//!
//! Killed at any point, the bucket stays consistent and the next pass finishes the work: before the upload's
//! `meta.json` the merged block is invisible (partial); after it and before the marks, the sources are
//! superseded by it and step 3 marks them; a deletion cut short has removed `meta.json` first and keeps its
//! mark last, so step 2 finishes it. No sample is lost (sources are marked only once the merged block is
//! complete in the bucket, and deleted only after the delay), and none is read twice for long (superseded
//! blocks are marked, and queriers skip marked blocks after their own delay).

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use heddle_bucket::{Bucket, BucketIndex, DeletionMark, TenantListing};
use heddle_limits::Overrides;
use heddle_model::{Clock, TenantId};
use heddle_tsdb::block::meta::{TENANT_EXTERNAL_LABEL, ThanosMeta};
use heddle_tsdb::block::{BlockMeta, BlockReader, BlockWriter, new_ulid};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::config::CompactorConfig;
use crate::error::CompactorError;
use crate::lock::TenantLock;
use crate::merge::merge_blocks;
use crate::metrics::{MarkReason, Metrics};
use crate::planner::{self, Plan};

/// How long a tenant's lock lasts without renewal; it is renewed before every compaction of a group.
const LOCK_LEASE_MS: i64 = 15 * 60 * 1000;

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunReport {
    /// Tenants passed over completely.
    pub tenants: usize,
    /// Tenants skipped because another compactor held their lock.
    pub skipped: usize,
    /// Tenants whose pass failed (logged).
    pub failed: usize,
    /// Groups compacted.
    pub compactions: usize,
    /// Blocks marked for deletion.
    pub marked: usize,
    /// Blocks deleted.
    pub deleted: usize,
}

/// The compactor of one process.
#[derive(Debug)]
pub struct Compactor {
    cfg: CompactorConfig,
    bucket: Bucket,
    overrides: Arc<Overrides>,
    clock: Arc<dyn Clock>,
    holder: String,
    /// The lock this compactor holds now: released on a graceful stop that cuts its pass short, so a restarted
    /// pod (whose holder name may differ) does not wait out the lease.
    locked: std::sync::Mutex<Option<Arc<TenantLock>>>,
    metrics: Metrics,
}

impl Compactor {
    /// A compactor of `bucket`, naming itself `holder` in tenant locks (stable across restarts: the process's
    /// host and port), with per-tenant retention from `overrides`.
    pub fn new(
        cfg: CompactorConfig,
        bucket: Bucket,
        overrides: Arc<Overrides>,
        clock: Arc<dyn Clock>,
        holder: String,
        registry: &mut Registry,
    ) -> Self {
        Self {
            cfg,
            bucket,
            overrides,
            clock,
            holder,
            locked: std::sync::Mutex::new(None),
            metrics: Metrics::register(registry),
        }
    }

    /// Runs at once, then every `compaction_interval`, until `stop`. A run cut short by `stop` leaves the bucket
    /// as a kill would (see the module docs).
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        loop {
            tokio::select! {
                _ = stop.cancelled() => {
                    self.release_cut_lock().await;
                    return;
                }
                report = self.run_once() => tracing::info!(?report, "compaction run done"),
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(self.cfg.compaction_interval) => {}
            }
        }
    }

    /// One pass over every tenant of the bucket.
    #[tracing::instrument(skip_all)]
    pub async fn run_once(&self) -> RunReport {
        let started = Instant::now();
        self.metrics.runs_started.inc();
        let mut report = RunReport::default();
        let tenants = match self.bucket.tenants().await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the bucket's tenants");
                report.failed += 1;
                self.finish_run(started, &report);
                return report;
            }
        };
        // Tenants whose gauges stay: passed over now, or failed (their last values stay until the next pass).
        let mut kept = HashSet::new();
        for tenant in tenants {
            match self.compact_tenant(&tenant, &mut report).await {
                Ok(true) => {
                    report.tenants += 1;
                    kept.insert(tenant.to_string());
                }
                Ok(false) => {
                    report.skipped += 1;
                    self.metrics.skipped_tenants.inc();
                }
                Err(e) => {
                    tracing::warn!(tenant = %tenant, error = %e, "tenant compaction failed");
                    report.failed += 1;
                    kept.insert(tenant.to_string());
                }
            }
        }
        self.metrics.keep_tenants(&kept);
        self.finish_run(started, &report);
        report
    }

    fn finish_run(&self, started: Instant, report: &RunReport) {
        self.metrics.run_duration.observe(started.elapsed().as_secs_f64());
        if report.failed == 0 {
            self.metrics.runs_completed.inc();
            self.metrics.last_success.set(self.clock.now_ms() as f64 / 1000.0);
        } else {
            self.metrics.runs_failed.inc();
        }
    }

    /// Releases the lock of the tenant whose pass a stop cut short (the pass's future was dropped mid-way,
    /// which the crash-safe order of its steps allows; see the module docs).
    async fn release_cut_lock(&self) {
        let lock = self.locked.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(lock) = lock {
            let tenant = lock.tenant();
            match lock.release().await {
                Ok(()) => tracing::info!(tenant = %tenant, "stopped mid-pass; released the tenant's lock"),
                Err(e) => {
                    tracing::warn!(tenant = %tenant, error = %e, "cannot release the tenant's lock; it runs out by itself")
                }
            }
        }
    }

    /// The tenant's pass under its lock; `false` when another compactor holds it.
    #[tracing::instrument(skip_all, fields(tenant = %tenant))]
    async fn compact_tenant(&self, tenant: &TenantId, report: &mut RunReport) -> Result<bool, CompactorError> {
        let bucket_err = |source| CompactorError::Bucket {
            tenant: tenant.to_string(),
            source,
        };
        let lock = TenantLock::acquire(&self.bucket, tenant, &self.holder, LOCK_LEASE_MS, self.clock.now_ms())
            .await
            .map_err(bucket_err)?;
        let Some(lock) = lock else { return Ok(false) };
        let lock = Arc::new(lock);
        *self.locked.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::clone(&lock));
        let result = self.compact_locked(tenant, &lock, report).await;
        *self.locked.lock().unwrap_or_else(|p| p.into_inner()) = None;
        if let Err(CompactorError::LockLost { .. }) = &result {
            // The lease ran out during the pass and another compactor holds the tenant now: nothing to release.
            tracing::info!(tenant = %tenant, "lost the tenant's lock to another compactor; leaving the tenant to it");
            return Ok(false);
        }
        if let Err(e) = lock.release().await {
            tracing::warn!(tenant = %tenant, error = %e, "cannot release the tenant's lock; it runs out by itself");
        }
        result.map(|()| true)
    }

    async fn compact_locked(
        &self,
        tenant: &TenantId,
        lock: &TenantLock,
        report: &mut RunReport,
    ) -> Result<(), CompactorError> {
        let bucket_err = |source| CompactorError::Bucket {
            tenant: tenant.to_string(),
            source,
        };
        // Each compaction leaves at least one block fewer, so the blocks of the first listing bound the turns.
        let mut turns: Option<usize> = None;
        loop {
            let listing = self.bucket.list_tenant(tenant).await.map_err(bucket_err)?;
            let live = self.clean_up(tenant, &listing, report).await?;
            let turns = turns.get_or_insert(live.len());
            let now_ms = self.clock.now_ms();
            let wait_ms = i64::try_from(self.cfg.first_level_compaction_wait_period.as_millis()).unwrap_or(i64::MAX);
            let plan = match planner::plan(&live, &self.cfg.ranges_ms(), now_ms, wait_ms) {
                Some(p) if *turns > 0 => p,
                _ => break,
            };
            *turns -= 1;
            if !lock.renew(now_ms).await.map_err(bucket_err)? {
                return Err(CompactorError::LockLost {
                    tenant: tenant.to_string(),
                });
            }
            self.compact_group(tenant, &plan).await.inspect_err(|_| {
                self.metrics.compaction_failures.inc();
            })?;
            report.compactions += 1;
            report.marked += plan.blocks.len();
        }
        self.write_index(tenant).await
    }

    /// Steps 2 and 3: deletes blocks whose mark is old enough and old partial blocks, marks superseded blocks
    /// and blocks past retention. Returns the blocks left to plan with (complete, not marked).
    async fn clean_up(
        &self,
        tenant: &TenantId,
        listing: &TenantListing,
        report: &mut RunReport,
    ) -> Result<Vec<BlockMeta>, CompactorError> {
        let bucket_err = |source| CompactorError::Bucket {
            tenant: tenant.to_string(),
            source,
        };
        let now_secs = self.clock.now_ms().div_euclid(1000);
        for mark in &listing.deletion_marks {
            if mark.older_than(self.cfg.deletion_delay, now_secs) {
                let objects = self.bucket.delete_block(tenant, &mark.id).await.map_err(bucket_err)?;
                tracing::info!(tenant = %tenant, block = %mark.id, objects, "deleted block");
                self.metrics.deleted.inc();
                report.deleted += 1;
            }
        }
        let marked: HashSet<&str> = listing.deletion_marks.iter().map(|m| m.id.as_str()).collect();
        let partial_delay = self.cfg.partial_block_deletion_delay;
        if !partial_delay.is_zero() {
            let now = std::time::UNIX_EPOCH + std::time::Duration::from_millis(self.clock.now_ms().max(0) as u64);
            for (ulid, newest) in &listing.partial {
                let old_enough = newest.is_some_and(|t| now.duration_since(t).is_ok_and(|age| age >= partial_delay));
                if old_enough && !marked.contains(ulid.as_str()) {
                    let objects = self.bucket.delete_block(tenant, ulid).await.map_err(bucket_err)?;
                    tracing::info!(tenant = %tenant, block = %ulid, objects, "deleted a partial block");
                    self.metrics.deleted.inc();
                    report.deleted += 1;
                }
            }
        }
        let mut live: Vec<BlockMeta> = listing
            .blocks
            .iter()
            .filter(|b| !marked.contains(b.ulid.as_str()))
            .cloned()
            .collect();
        let mut to_mark: Vec<(String, MarkReason)> = planner::superseded(&live)
            .into_iter()
            .map(|(ulid, by)| {
                tracing::info!(tenant = %tenant, block = %ulid, by = %by, "block superseded by a compacted block");
                (ulid, MarkReason::Superseded)
            })
            .collect();
        let retention = self.overrides.get(tenant.as_str()).compactor_blocks_retention_period;
        let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
        for ulid in planner::past_retention(&live, retention_ms, self.clock.now_ms()) {
            if !to_mark.iter().any(|(u, _)| *u == ulid) {
                tracing::info!(tenant = %tenant, block = %ulid, ?retention, "block past retention");
                to_mark.push((ulid, MarkReason::Retention));
            }
        }
        for (ulid, reason) in &to_mark {
            self.mark(tenant, ulid, *reason).await?;
            report.marked += 1;
        }
        live.retain(|b| !to_mark.iter().any(|(u, _)| *u == b.ulid));
        Ok(live)
    }

    async fn mark(&self, tenant: &TenantId, ulid: &str, reason: MarkReason) -> Result<(), CompactorError> {
        let mark = DeletionMark::new(ulid, self.clock.now_ms().div_euclid(1000));
        self.bucket
            .mark_for_deletion(tenant, mark)
            .await
            .map_err(|source| CompactorError::Bucket {
                tenant: tenant.to_string(),
                source,
            })?;
        self.metrics.marked(reason);
        Ok(())
    }

    /// Step 4 for one group: download, merge, upload, then mark the sources. The scratch directory is removed
    /// whether the compaction succeeds or fails, so a tenant that fails and is never planned again leaves no
    /// downloaded blocks on disk.
    async fn compact_group(&self, tenant: &TenantId, plan: &Plan) -> Result<(), CompactorError> {
        let work = self.cfg.data_dir.join(tenant.as_str());
        reset_dir(&work).await?;
        let outcome = self.compact_group_in(tenant, plan, &work).await;
        let cleaned = reset_dir(&work).await;
        outcome.and(cleaned)
    }

    async fn compact_group_in(&self, tenant: &TenantId, plan: &Plan, work: &Path) -> Result<(), CompactorError> {
        let started = Instant::now();
        let bucket_err = |source| CompactorError::Bucket {
            tenant: tenant.to_string(),
            source,
        };
        let (sources, out) = (work.join("sources"), work.join("out"));
        for dir in [&sources, &out] {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|source| CompactorError::Local {
                    path: dir.clone(),
                    source,
                })?;
        }
        let mut dirs = Vec::with_capacity(plan.blocks.len());
        for b in &plan.blocks {
            dirs.push(
                self.bucket
                    .download_block(tenant, &b.ulid, &sources)
                    .await
                    .map_err(bucket_err)?,
            );
            // Crash tests stop here: one source downloaded, the others not.
            heddle_tsdb::file::failpoint("compactor-mid-download");
        }
        let mut meta = BlockMeta::compacted(new_ulid(), &plan.blocks);
        if meta.thanos.is_none() {
            // Sources written by Prometheus tools carry no tenant; the compacted block names it, as an
            // ingester's block does.
            meta.thanos = Some(ThanosMeta {
                labels: [(TENANT_EXTERNAL_LABEL.to_owned(), tenant.to_string())].into(),
                source: heddle_tsdb::block::meta::SOURCE_COMPACTOR.to_owned(),
                ..ThanosMeta::default()
            });
        }
        let blocks = plan
            .blocks
            .iter()
            .map(|b| b.ulid.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let out_dir = out.clone();
        let merged = tokio::task::spawn_blocking(move || {
            let readers = dirs
                .iter()
                .map(|d| BlockReader::open_dir(d))
                .collect::<Result<Vec<_>, _>>()?;
            let mut writer = BlockWriter::new(&out_dir, meta)?;
            let stats = merge_blocks(&readers, &mut writer)?;
            // Crash tests stop here: the merged chunks are on local disk, the block's index is not.
            heddle_tsdb::file::failpoint("compactor-mid-merge");
            Ok::<_, heddle_tsdb::TsdbError>((writer.finish()?, stats))
        })
        .await
        .map_err(|e| CompactorError::Task {
            tenant: tenant.to_string(),
            reason: e.to_string(),
        })?
        .map_err(|source| CompactorError::Tsdb {
            tenant: tenant.to_string(),
            blocks: blocks.clone(),
            source,
        })?;
        let (meta, stats) = merged;
        self.bucket
            .upload_block(tenant, &out.join(&meta.ulid))
            .await
            .map_err(bucket_err)?;
        // Crash tests stop here: the merged block is complete, its sources not marked yet.
        heddle_tsdb::file::failpoint("compactor-after-upload");
        for b in &plan.blocks {
            self.mark(tenant, &b.ulid, MarkReason::Compacted).await?;
        }
        // Crash tests stop here: the sources are marked, not deleted yet.
        heddle_tsdb::file::failpoint("compactor-after-mark");
        self.metrics.compactions.inc();
        self.metrics.samples_written.inc_by(stats.samples_out);
        tracing::info!(
            tenant = %tenant,
            kind = plan.kind.as_str(),
            sources = %blocks,
            block = %meta.ulid,
            level = meta.compaction.level,
            min_time = meta.min_time,
            max_time = meta.max_time,
            series = stats.series,
            samples_in = stats.samples_in,
            samples_out = stats.samples_out,
            chunks_reencoded = stats.chunks_reencoded,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "compacted blocks"
        );
        Ok(())
    }

    /// Writes the tenant's bucket index from a fresh listing, and the tenant's gauges.
    async fn write_index(&self, tenant: &TenantId) -> Result<(), CompactorError> {
        let bucket_err = |source| CompactorError::Bucket {
            tenant: tenant.to_string(),
            source,
        };
        let listed_at = self.clock.now_ms().div_euclid(1000);
        // Marks before blocks (`Bucket::list_deletion_marks`): queriers leave out a block marked in the index
        // counting on the index to hold its replacement, which another compactor may be uploading meanwhile.
        let marks = self.bucket.list_deletion_marks(tenant).await.map_err(bucket_err)?;
        let listing = self.bucket.list_tenant(tenant).await.map_err(bucket_err)?;
        let index = BucketIndex::new(&listing.blocks, &marks, listed_at);
        self.bucket
            .write_bucket_index(tenant, &index)
            .await
            .map_err(bucket_err)?;
        let marked: HashSet<&str> = listing.deletion_marks.iter().map(|m| m.id.as_str()).collect();
        let uncompacted = listing
            .blocks
            .iter()
            .filter(|b| b.compaction.level <= 1 && !marked.contains(b.ulid.as_str()))
            .count();
        self.metrics.tenant_state(tenant.as_str(), listing.bytes, uncompacted);
        Ok(())
    }
}

/// Removes `dir` and everything in it (what a compaction cut short left), if it exists.
async fn reset_dir(dir: &Path) -> Result<(), CompactorError> {
    match tokio::fs::remove_dir_all(dir).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(CompactorError::Local {
            path: dir.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests;
