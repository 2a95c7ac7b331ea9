//! Reading blocks straight from the bucket (the role Mimir gives its store-gateways): data older than what the
//! ingesters still hold.
//!
//! Per tenant, the list of blocks is refreshed at most every `sync_interval`; each block is opened once through
//! ranged reads of the bucket, and its index header (TOC, symbols, postings offset table) stays in memory, so a
//! query costs ranged GETs of the postings, series entries and chunks it touches.
//!
//! The list comes from the tenant's bucket index (`bucket-index.json.gz`, written by the compactor) when there
//! is one no older than `bucket_index_max_stale_period`, else from listing the tenant's prefix. Either way a
//! block whose deletion mark is older than `ignore_deletion_marks_delay` is left out: the compactor has put
//! its samples in another block (or it is past retention), so the two are not both read for long, and the
//! block is gone from every querier's list before the compactor's (longer) deletion delay deletes it.
//!
//! With a sync dir ([`BucketStore::with_sync_dir`], `blocks_storage.bucket_store.sync_dir`), each block's
//! index header is also kept on local disk, at `<sync dir>/<tenant>/<ULID>/index-header` (format and
//! checks in `heddle_tsdb::block`'s `index_header`): a restarted querier opens its blocks from those files
//! without reading their index headers from the bucket, and an unusable file is rebuilt from the bucket. Each
//! refresh removes the directories of the tenant's blocks no longer in its list (compacted away, past
//! retention, marked long enough), so the directory holds the tenant's current blocks and no more.

use crate::error::{FetchLimit, QuerierError};
use crate::limits::QueryLimiter;
use crate::metrics::IndexHeaderMetrics;
use heddle_bucket::{Bucket, DeletionMark, IndexBlock};
use heddle_model::{Labels, Matcher, TenantId};
use heddle_tsdb::SeriesChunks;
use heddle_tsdb::block::{BlockMeta, BlockReader, INDEX_HEADER_FILENAME};
use prometheus_client::registry::Registry;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The bucket's blocks, as the querier reads them.
#[derive(Debug)]
pub struct BucketStore {
    bucket: Bucket,
    sync_interval: Duration,
    ignore_deletion_marks_delay: Duration,
    bucket_index_max_stale_period: Duration,
    /// Where blocks' index headers are kept on disk; `None`: in memory only.
    sync_dir: Option<PathBuf>,
    metrics: IndexHeaderMetrics,
    /// Held only to find or add a tenant: a slow bucket listing for one tenant never blocks another's queries.
    tenants: std::sync::Mutex<HashMap<TenantId, Arc<TenantBlocks>>>,
}

#[derive(Debug, Default)]
struct TenantBlocks {
    /// When the list was last refreshed; held during a refresh, so concurrent queries of the tenant wait for
    /// one listing instead of each making their own.
    synced: tokio::sync::Mutex<Option<Instant>>,
    /// The blocks as of the last refresh; queries take a snapshot and never wait on a refresh that is
    /// opening blocks.
    state: std::sync::RwLock<Arc<BlockSet>>,
}

#[derive(Debug, Default, Clone)]
struct BlockSet {
    /// Open blocks by ULID.
    open: HashMap<String, Arc<BlockReader>>,
    /// Blocks that could not be opened, by ULID: their time range and why. A query overlapping one fails
    /// naming it rather than silently returning less; a query elsewhere is answered. Retried each refresh.
    broken: HashMap<String, (i64, i64, String)>,
}

impl BucketStore {
    /// Reads `bucket`, listing a tenant's blocks again when its list is older than `sync_interval`.
    /// Marked blocks are ignored after an hour and a bucket index is used up to an hour old (Mimir's defaults);
    /// see [`BucketStore::with_deletion_marks`]. Index headers stay in memory only unless a sync dir is set
    /// ([`BucketStore::with_sync_dir`]). Registers the index-header metrics on `registry`.
    pub fn new(bucket: Bucket, sync_interval: Duration, registry: &mut Registry) -> Self {
        Self {
            bucket,
            sync_interval,
            ignore_deletion_marks_delay: Duration::from_secs(3600),
            bucket_index_max_stale_period: Duration::from_secs(3600),
            sync_dir: None,
            metrics: IndexHeaderMetrics::new(registry),
            tenants: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Keeps each block's index header under `dir` too (see the module docs); the directory is created as
    /// needed.
    pub fn with_sync_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.sync_dir = Some(dir.into());
        self
    }

    /// The index-header file of block `ulid`, when there is a sync dir and the id is a plain file name (a
    /// ULID always is; a listing or bucket index naming anything else must not reach outside the directory).
    fn header_file(&self, tenant: &TenantId, ulid: &str) -> Option<PathBuf> {
        let plain = !ulid.is_empty() && ulid.bytes().all(|b| b.is_ascii_alphanumeric());
        let dir = self.sync_dir.as_ref().filter(|_| plain)?;
        Some(dir.join(tenant.as_str()).join(ulid).join(INDEX_HEADER_FILENAME))
    }

    /// Leaves out blocks marked for deletion longer than `ignore_deletion_marks_delay` ago, and reads a
    /// tenant's bucket index instead of listing when it is at most `bucket_index_max_stale_period` old.
    pub fn with_deletion_marks(
        mut self,
        ignore_deletion_marks_delay: Duration,
        bucket_index_max_stale_period: Duration,
    ) -> Self {
        self.ignore_deletion_marks_delay = ignore_deletion_marks_delay;
        self.bucket_index_max_stale_period = bucket_index_max_stale_period;
        self
    }

    /// The tenant's blocks to read: from its bucket index when fresh enough, else from a listing; without
    /// the blocks whose deletion mark is older than the delay.
    async fn current_blocks(&self, tenant: &TenantId) -> Result<Vec<BlockMeta>, QuerierError> {
        let store_err = |e: heddle_bucket::BucketError| QuerierError::Store {
            tenant: tenant.to_string(),
            reason: e.to_string(),
        };
        let now_secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let max_stale = i64::try_from(self.bucket_index_max_stale_period.as_secs()).unwrap_or(i64::MAX);
        let index = match self.bucket.read_bucket_index(tenant).await {
            Ok(Some(index)) if now_secs.saturating_sub(index.updated_at) <= max_stale => Some(index),
            Ok(Some(index)) => {
                tracing::debug!(tenant = %tenant, updated_at = index.updated_at, "bucket index too old; listing");
                None
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(tenant = %tenant, error = %e, "cannot read the bucket index; listing");
                None
            }
        };
        let delay = self.ignore_deletion_marks_delay;
        let ignored = |marks: Vec<DeletionMark>| -> HashSet<String> {
            marks
                .into_iter()
                .filter(|m| m.older_than(delay, now_secs))
                .map(|m| m.id)
                .collect()
        };
        let blocks = match index {
            Some(index) => {
                let gone = ignored(
                    index
                        .block_deletion_marks
                        .iter()
                        .map(|m| DeletionMark::new(&m.block_id, m.deletion_time))
                        .collect(),
                );
                index
                    .blocks
                    .iter()
                    .filter(|b| !gone.contains(&b.block_id))
                    .map(IndexBlock::to_meta)
                    .collect()
            }
            None => {
                let listing = self.bucket.list_tenant(tenant).await.map_err(store_err)?;
                let gone = ignored(listing.deletion_marks);
                listing.blocks.into_iter().filter(|b| !gone.contains(&b.ulid)).collect()
            }
        };
        Ok(blocks)
    }

    fn tenant(&self, tenant: &TenantId) -> Arc<TenantBlocks> {
        let mut all = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(all.entry(tenant.clone()).or_default())
    }

    /// Refreshes the tenant's block list when it is older than `sync_interval`: drops blocks no longer in the
    /// bucket and opens the new ones concurrently.
    async fn refresh(&self, tenant: &TenantId, blocks: &TenantBlocks) -> Result<(), QuerierError> {
        let mut synced = blocks.synced.lock().await;
        if synced.is_some_and(|t| t.elapsed() < self.sync_interval) {
            return Ok(());
        }
        // The list is as fresh as the moment the listing starts, not the moment the new blocks are open (from
        // a bucket index, as fresh as the index, at most `bucket_index_max_stale_period` older): an ingester
        // stops answering a block `sync_interval` plus that period after its upload, counting on the next
        // refresh of a list that missed it to start by then.
        let listed_at = Instant::now();
        let metas = self.current_blocks(tenant).await?;
        let listed: HashSet<String> = metas.iter().map(|m| m.ulid.clone()).collect();
        let current = Arc::clone(&blocks.state.read().unwrap_or_else(|p| p.into_inner()));
        let mut next = BlockSet::default();
        let mut to_open = Vec::new();
        for meta in metas {
            match current.open.get(&meta.ulid) {
                Some(reader) => {
                    next.open.insert(meta.ulid.clone(), Arc::clone(reader));
                }
                None => to_open.push(meta),
            }
        }
        let opens = to_open.into_iter().map(|meta| {
            let files = self.bucket.block_files(tenant, &meta.ulid);
            let (ulid, range) = (meta.ulid.clone(), (meta.min_time, meta.max_time));
            let header_file = self.header_file(tenant, &meta.ulid);
            let metrics = self.metrics.clone();
            let task = tokio::task::spawn_blocking(move || match header_file {
                Some(path) => BlockReader::open_with_header_file(files, meta, &path).map(|(reader, origin)| {
                    metrics.loaded(&origin);
                    reader
                }),
                None => BlockReader::open(files, meta),
            });
            async move { (ulid, range, task.await) }
        });
        for (ulid, (min_time, max_time), opened) in futures::future::join_all(opens).await {
            match opened {
                Ok(Ok(reader)) => {
                    next.open.insert(ulid, Arc::new(reader));
                }
                Ok(Err(e)) => {
                    tracing::warn!(tenant = %tenant, block = %ulid, error = %e, "cannot open bucket block");
                    next.broken.insert(ulid, (min_time, max_time, e.to_string()));
                }
                Err(e) => {
                    next.broken.insert(ulid, (min_time, max_time, e.to_string()));
                }
            }
        }
        *blocks.state.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(next);
        if let Some(dir) = &self.sync_dir {
            let (dir, tenant) = (dir.join(tenant.as_str()), tenant.clone());
            let removed = tokio::task::spawn_blocking(move || remove_unlisted(&dir, &listed)).await;
            if let Ok(Err(e)) = removed {
                tracing::warn!(tenant = %tenant, error = %e, "cannot clean the tenant's index-header directory");
            }
        }
        *synced = Some(listed_at);
        Ok(())
    }

    /// The tenant's blocks overlapping `[mint, maxt]`, after refreshing the list if it is stale.
    async fn blocks(&self, tenant: &TenantId, mint: i64, maxt: i64) -> Result<Vec<Arc<BlockReader>>, QuerierError> {
        let blocks = self.tenant(tenant);
        self.refresh(tenant, &blocks).await?;
        let set = Arc::clone(&blocks.state.read().unwrap_or_else(|p| p.into_inner()));
        let overlaps = |min_time: i64, max_time: i64| min_time <= maxt && max_time > mint;
        if let Some((ulid, (_, _, reason))) = set
            .broken
            .iter()
            .filter(|(_, (lo, hi, _))| overlaps(*lo, *hi))
            .min_by(|a, b| a.0.cmp(b.0))
        {
            return Err(QuerierError::Store {
                tenant: tenant.to_string(),
                reason: format!("cannot open bucket block {ulid}: {reason}"),
            });
        }
        let mut out: Vec<Arc<BlockReader>> = set
            .open
            .values()
            .filter(|b| overlaps(b.meta().min_time, b.meta().max_time))
            .cloned()
            .collect();
        out.sort_by_key(|b| b.meta().min_time);
        Ok(out)
    }

    /// Runs `f` on every block of the tenant overlapping the range, on blocking threads (each call makes ranged
    /// GETs), and returns one answer per block, oldest block first.
    async fn each_block<T: Send + 'static>(
        &self,
        tenant: &TenantId,
        mint: i64,
        maxt: i64,
        f: impl Fn(&BlockReader) -> Result<T, BlockError> + Send + Sync + 'static,
    ) -> Result<Vec<T>, QuerierError> {
        let blocks = self.blocks(tenant, mint, maxt).await?;
        if blocks.is_empty() {
            return Ok(Vec::new());
        }
        let f = Arc::new(f);
        let tasks = blocks.into_iter().map(|b| {
            let f = Arc::clone(&f);
            tokio::task::spawn_blocking(move || f(&b).map_err(|e| (b.meta().ulid.clone(), e)))
        });
        let mut out = Vec::new();
        for r in futures::future::join_all(tasks).await {
            match r {
                Ok(Ok(v)) => out.push(v),
                Ok(Err((_, BlockError::Refused(e)))) => return Err(e),
                Ok(Err((ulid, BlockError::Tsdb(e)))) => {
                    return Err(QuerierError::Store {
                        tenant: tenant.to_string(),
                        reason: format!("reading bucket block {ulid}: {e}"),
                    });
                }
                Err(e) => {
                    return Err(QuerierError::Store {
                        tenant: tenant.to_string(),
                        reason: e.to_string(),
                    });
                }
            }
        }
        Ok(out)
    }

    /// Series matching `matchers` with their chunks overlapping `[mint, maxt]`: one list per block (oldest
    /// block first), each sorted by labels, in the model's types (nothing is converted).
    ///
    /// Each block's cost is weighed against `limiter` from its index before its chunks are read: a block whose
    /// series alone would take the request past its series limit, or whose chunks or chunk bytes would pass
    /// their limits, is never read. The chunk bytes of a block are what its reads fetch: chunks close to each
    /// other are read together, one GET per run, and the gaps between them count as fetched.
    pub(crate) async fn query(
        &self,
        tenant: &TenantId,
        mint: i64,
        maxt: i64,
        matchers: &[Matcher],
        limiter: &Arc<QueryLimiter>,
    ) -> Result<Vec<Vec<SeriesChunks>>, QuerierError> {
        let m = matchers.to_vec();
        let limiter = Arc::clone(limiter);
        self.each_block(tenant, mint, maxt, move |b| {
            let plan = b.plan_select(mint, maxt, &m)?;
            // Series are counted when the merge yields them; here only the room for them is checked.
            limiter.check_room(FetchLimit::Series, plan.series())?;
            limiter.add(FetchLimit::Chunks, plan.chunks())?;
            limiter.add(
                FetchLimit::ChunkBytes,
                usize::try_from(plan.fetch_bytes()).unwrap_or(usize::MAX),
            )?;
            Ok(b.read_selected(plan)?)
        })
        .await
    }

    /// Label sets of the series matching `matchers` in `[mint, maxt]`.
    pub(crate) async fn series(
        &self,
        tenant: &TenantId,
        mint: i64,
        maxt: i64,
        matchers: &[Matcher],
    ) -> Result<Vec<Labels>, QuerierError> {
        let m = matchers.to_vec();
        let parts = self
            .each_block(tenant, mint, maxt, move |b| Ok(b.series(mint, maxt, &m)?))
            .await?;
        Ok(parts.into_iter().flatten().collect())
    }

    /// Label names of the series matching `matchers` in blocks overlapping `[mint, maxt]`.
    pub(crate) async fn label_names(
        &self,
        tenant: &TenantId,
        mint: i64,
        maxt: i64,
        matchers: &[Matcher],
    ) -> Result<Vec<String>, QuerierError> {
        let m = matchers.to_vec();
        let parts = self
            .each_block(tenant, mint, maxt, move |b| Ok(b.label_names(&m)?))
            .await?;
        Ok(parts.into_iter().flatten().collect())
    }

    /// Values of label `name` on the series matching `matchers` in blocks overlapping `[mint, maxt]`.
    pub(crate) async fn label_values(
        &self,
        tenant: &TenantId,
        name: &str,
        mint: i64,
        maxt: i64,
        matchers: &[Matcher],
    ) -> Result<Vec<String>, QuerierError> {
        let (m, name) = (matchers.to_vec(), name.to_owned());
        let parts = self
            .each_block(tenant, mint, maxt, move |b| Ok(b.label_values(&name, &m)?))
            .await?;
        Ok(parts.into_iter().flatten().collect())
    }
}

/// Removes everything in the tenant's sync directory `dir` but the directories of the `listed` blocks.
/// Only a successful listing gets here, so a bucket outage never empties the directory.
fn remove_unlisted(dir: &Path, listed: &HashSet<String>) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        if entry.file_name().to_str().is_some_and(|name| listed.contains(name)) {
            continue;
        }
        let path = entry.path();
        let removed = if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match removed {
            Ok(()) => tracing::debug!(path = %path.display(), "removed the index header of a block no longer listed"),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove an unlisted block's index header")
            }
        }
    }
    Ok(())
}

/// Why reading one block stopped: the block failed, or the request reached a fetch limit.
enum BlockError {
    Tsdb(heddle_tsdb::TsdbError),
    Refused(QuerierError),
}

impl From<heddle_tsdb::TsdbError> for BlockError {
    fn from(e: heddle_tsdb::TsdbError) -> Self {
        BlockError::Tsdb(e)
    }
}

impl From<QuerierError> for BlockError {
    fn from(e: QuerierError) -> Self {
        BlockError::Refused(e)
    }
}

#[cfg(test)]
#[path = "store/sync_dir_tests.rs"]
mod sync_dir_tests;
#[cfg(test)]
#[path = "store/tests.rs"]
mod tests;
