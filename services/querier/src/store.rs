//! Reading blocks straight from the bucket (the role Mimir gives its store-gateways): data older than what the
//! ingesters still hold.
//!
//! Per tenant, the list of blocks is refreshed at most every `sync_interval`; each block is opened once through
//! ranged reads of the bucket, and its index header (TOC, symbols, postings offset table) stays in memory, so a
//! query costs ranged GETs of the postings, series entries and chunks it touches.
//!
//! The list comes from the tenant's bucket index (`bucket-index.json.gz`, written by the compactor) when there
//! is one no older than `bucket_index_max_stale_period`, else from listing the tenant's prefix (deletion marks
//! first, blocks second, so the list holds the replacement of every block whose mark it honours). Either way a
//! block whose deletion mark is older than `ignore_deletion_marks_delay` is left out: the compactor has put
//! its samples in another block (or it is past retention), so the two are not both read for long, and the
//! block is gone from every querier's list before the compactor's (longer) deletion delay deletes it.
//!
//! Every answer says what the blocks read hold ([`BlockCoverage`]: each block and its compaction sources), so
//! the querier can check it against the blocks the ingesters no longer answer, and list again at once
//! ([`BucketStore::refresh_now`]) when one is missing. A listed block found gone from the bucket (deleted
//! under a list made before) makes the store list the bucket again and read what the new list holds, once.
//!
//! With a sync dir ([`BucketStore::with_sync_dir`], `blocks_storage.bucket_store.sync_dir`), each block's
//! index header is also kept on local disk, at `<sync dir>/<tenant>/<ULID>/index-header` (format and
//! checks in `heddle_tsdb::block`'s `index_header`): a restarted querier opens its blocks from those files
//! without reading their index headers from the bucket, and an unusable file is rebuilt from the bucket. Each
//! refresh removes the directories of the tenant's blocks no longer in its list (compacted away, past
//! retention, marked long enough), so the directory holds the tenant's current blocks and no more.

use crate::error::{FetchLimit, QuerierError};
use crate::limits::QueryLimiter;
use crate::metrics::{ForcedRefreshes, IndexHeaderMetrics, RefreshReason};
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
    forced_refreshes: ForcedRefreshes,
    /// Held only to find or add a tenant: a slow bucket listing for one tenant never blocks another's queries.
    tenants: std::sync::Mutex<HashMap<TenantId, Arc<TenantBlocks>>>,
}

#[derive(Debug, Default)]
struct TenantBlocks {
    /// When the list was last refreshed; held during a refresh, so concurrent queries of the tenant wait for
    /// one listing instead of each making their own.
    synced: tokio::sync::Mutex<Synced>,
    /// The blocks as of the last refresh; queries take a snapshot and never wait on a refresh that is
    /// opening blocks.
    state: std::sync::RwLock<Arc<BlockSet>>,
}

/// When a tenant's list was last refreshed, from the index or a listing, and when from a listing.
#[derive(Debug, Default, Clone, Copy)]
struct Synced {
    any: Option<Instant>,
    listing: Option<Instant>,
}

#[derive(Debug, Default, Clone)]
struct BlockSet {
    /// Open blocks by ULID.
    open: HashMap<String, Arc<BlockReader>>,
    /// Blocks that could not be opened, by ULID. A query overlapping one fails naming it rather than silently
    /// returning less; a query elsewhere is answered. Retried each refresh.
    broken: HashMap<String, Broken>,
}

/// A block that could not be opened.
#[derive(Debug, Clone)]
struct Broken {
    min_time: i64,
    max_time: i64,
    reason: String,
    /// Not (any more) in the bucket: listed by an index or listing made before its deletion. A new listing
    /// no longer holds it, so a query that meets it lists again instead of failing.
    gone: bool,
}

/// How a refresh gets the tenant's blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fresh {
    /// After `sync_interval`: the bucket index when fresh enough, else a listing.
    Periodic,
    /// Now, by listing the bucket: the list was found behind the bucket, and the index it came from may be too.
    Listing,
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
            forced_refreshes: ForcedRefreshes::new(registry),
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
    /// the blocks whose deletion mark is older than the delay. The flag says whether they came from the index,
    /// whose entries carry no compaction sources.
    async fn current_blocks(&self, tenant: &TenantId, fresh: Fresh) -> Result<(Vec<BlockMeta>, bool), QuerierError> {
        let store_err = |e: heddle_bucket::BucketError| QuerierError::Store {
            tenant: tenant.to_string(),
            reason: e.to_string(),
        };
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let now_secs = now_ms.div_euclid(1000);
        let max_stale_ms = i64::try_from(self.bucket_index_max_stale_period.as_millis()).unwrap_or(i64::MAX);
        // `updated_at` is whole seconds, rounded down: the index is at least as old as that says, so its age is
        // judged from it in milliseconds, never a second younger than it is.
        let index = match self.bucket.read_bucket_index(tenant).await {
            _ if fresh == Fresh::Listing => None,
            Ok(Some(index)) if now_ms.saturating_sub(index.updated_at.saturating_mul(1000)) <= max_stale_ms => {
                Some(index)
            }
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
                let blocks = index
                    .blocks
                    .iter()
                    .filter(|b| !gone.contains(&b.block_id))
                    .map(IndexBlock::to_meta)
                    .collect();
                return Ok((blocks, true));
            }
            None => {
                // Marks before blocks (see `Bucket::list_deletion_marks`): a source is left out only when the
                // listing of blocks that follows holds the block that replaced it.
                let marks = self.bucket.list_deletion_marks(tenant).await.map_err(store_err)?;
                let listing = self.bucket.list_tenant(tenant).await.map_err(store_err)?;
                let gone = ignored(marks);
                listing.blocks.into_iter().filter(|b| !gone.contains(&b.ulid)).collect()
            }
        };
        Ok((blocks, false))
    }

    fn tenant(&self, tenant: &TenantId) -> Arc<TenantBlocks> {
        let mut all = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(all.entry(tenant.clone()).or_default())
    }

    /// Refreshes the tenant's block list when it was listed before `stale_before` (a query's: `sync_interval`
    /// ago; a consistency check's: now): drops blocks no longer in the bucket and opens the new ones
    /// concurrently. Concurrent callers wait for one listing.
    async fn refresh(
        &self,
        tenant: &TenantId,
        blocks: &TenantBlocks,
        stale_before: Instant,
        fresh: Fresh,
    ) -> Result<(), QuerierError> {
        let mut synced = blocks.synced.lock().await;
        let last = match fresh {
            Fresh::Periodic => synced.any,
            Fresh::Listing => synced.listing,
        };
        if last.is_some_and(|t| t >= stale_before) {
            return Ok(());
        }
        // The list is as fresh as the moment the listing starts, not the moment the new blocks are open (from
        // a bucket index, as fresh as the index, at most `bucket_index_max_stale_period` older): an ingester
        // stops answering a block `sync_interval` plus that period after its upload, counting on the next
        // refresh of a list that missed it to start by then. Its answers name the blocks it no longer answers,
        // and a query that did not read them refreshes at once (`Querier`'s consistency check).
        let listed_at = Instant::now();
        let (metas, from_index) = self.current_blocks(tenant, fresh).await?;
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
        let opens = to_open.into_iter().map(|meta| async move {
            let (ulid, range) = (meta.ulid.clone(), (meta.min_time, meta.max_time));
            // An index entry has no compaction sources, which the consistency check needs: the block's own
            // `meta.json` has them (one small GET per block, once).
            let meta = if from_index {
                match self.bucket.read_block_meta(tenant, &ulid).await {
                    Ok(Some(full)) => full,
                    Ok(None) => {
                        let gone = "its meta.json is gone: deleted since the index was made".to_owned();
                        return (ulid, range, Err((gone, true)));
                    }
                    Err(e) => return (ulid, range, Err((e.to_string(), false))),
                }
            } else {
                meta
            };
            let files = self.bucket.block_files(tenant, &ulid);
            let header_file = self.header_file(tenant, &ulid);
            let metrics = self.metrics.clone();
            let task = tokio::task::spawn_blocking(move || match header_file {
                Some(path) => BlockReader::open_with_header_file(files, meta, &path).map(|(reader, origin)| {
                    metrics.loaded(&origin);
                    reader
                }),
                None => BlockReader::open(files, meta),
            });
            let opened = match task.await {
                Ok(Ok(reader)) => Ok(reader),
                Ok(Err(e)) => Err((e.to_string(), is_not_found(&e))),
                Err(e) => Err((e.to_string(), false)),
            };
            (ulid, range, opened)
        });
        for (ulid, (min_time, max_time), opened) in futures::future::join_all(opens).await {
            match opened {
                Ok(reader) => {
                    next.open.insert(ulid, Arc::new(reader));
                }
                Err((reason, gone)) => {
                    tracing::warn!(tenant = %tenant, block = %ulid, error = %reason, gone, "cannot open bucket block");
                    let broken = Broken {
                        min_time,
                        max_time,
                        reason,
                        gone,
                    };
                    next.broken.insert(ulid, broken);
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
        synced.any = Some(listed_at);
        if fresh == Fresh::Listing || !from_index {
            synced.listing = Some(listed_at);
        }
        Ok(())
    }

    /// Lists the tenant's blocks again, from the bucket itself (the index may be what is behind), unless a
    /// listing started since this call (another query found the list behind too): what a consistency check
    /// that found a block missing does before reading again.
    pub(crate) async fn refresh_now(&self, tenant: &TenantId) -> Result<(), QuerierError> {
        let since = Instant::now();
        self.forced_refreshes.inc(RefreshReason::BlockLeftByIngester);
        let blocks = self.tenant(tenant);
        self.refresh(tenant, &blocks, since, Fresh::Listing).await
    }

    /// The tenant's open blocks overlapping `[mint, maxt]`, after refreshing the list if it was refreshed
    /// before `stale_before`, and a listed block overlapping it that is gone from the bucket, if any. Another
    /// block that cannot be opened fails the query.
    async fn blocks(
        &self,
        tenant: &TenantId,
        (mint, maxt): (i64, i64),
        stale_before: Instant,
        fresh: Fresh,
    ) -> Result<(Vec<Arc<BlockReader>>, Option<String>), QuerierError> {
        let blocks = self.tenant(tenant);
        self.refresh(tenant, &blocks, stale_before, fresh).await?;
        let set = Arc::clone(&blocks.state.read().unwrap_or_else(|p| p.into_inner()));
        let overlaps = |min_time: i64, max_time: i64| min_time <= maxt && max_time > mint;
        let mut broken: Vec<(&String, &Broken)> = set
            .broken
            .iter()
            .filter(|(_, b)| overlaps(b.min_time, b.max_time))
            .collect();
        broken.sort_by(|a, b| a.0.cmp(b.0));
        if let Some((ulid, b)) = broken.iter().find(|(_, b)| !b.gone) {
            return Err(QuerierError::Store {
                tenant: tenant.to_string(),
                reason: format!("cannot open bucket block {ulid}: {}", b.reason),
            });
        }
        let gone = broken.first().map(|(ulid, _)| (*ulid).clone());
        let mut out: Vec<Arc<BlockReader>> = set
            .open
            .values()
            .filter(|b| overlaps(b.meta().min_time, b.meta().max_time))
            .cloned()
            .collect();
        out.sort_by_key(|b| b.meta().min_time);
        Ok((out, gone))
    }

    /// Runs `f` on every block of the tenant overlapping the range but those `read` holds already (a second
    /// read after a consistency check reads only what the first did not), on blocking threads (each call makes
    /// ranged GETs), and returns one answer per block, oldest block first, with what those blocks hold.
    ///
    /// A block that is gone from the bucket while still in the list (deleted by the compactor before this
    /// querier's next refresh: `compactor.deletion_delay` shorter than the querier's delays) does not fail the
    /// query at once: the list is refreshed and what the blocks read so far do not hold is read, once.
    async fn each_block<T: Send + 'static>(
        &self,
        tenant: &TenantId,
        mint: i64,
        maxt: i64,
        read: &BlockCoverage,
        f: impl Fn(&BlockReader) -> Result<T, BlockError> + Send + Sync + 'static,
    ) -> Result<StoreAnswer<T>, QuerierError> {
        let f = Arc::new(f);
        let mut stale_before = Instant::now()
            .checked_sub(self.sync_interval)
            .unwrap_or_else(Instant::now);
        let mut done = read.clone();
        let mut answer = StoreAnswer::default();
        let mut fresh = Fresh::Periodic;
        for attempt in 0..2 {
            let (mut blocks, mut gone) = self.blocks(tenant, (mint, maxt), stale_before, fresh).await?;
            if let (Some(ulid), 1) = (&gone, attempt) {
                return Err(QuerierError::Store {
                    tenant: tenant.to_string(),
                    reason: format!("bucket block {ulid} is gone from the bucket, yet a new listing holds it"),
                });
            }
            blocks.retain(|b| !done.holds(&b.meta().ulid));
            let tasks = blocks.into_iter().map(|b| {
                let f = Arc::clone(&f);
                tokio::task::spawn_blocking(move || {
                    let answer = f(&b);
                    (b, answer)
                })
            });
            for r in futures::future::join_all(tasks).await {
                let (block, result) = r.map_err(|e| QuerierError::Store {
                    tenant: tenant.to_string(),
                    reason: e.to_string(),
                })?;
                match result {
                    Ok(v) => {
                        let held = BlockCoverage::of(std::slice::from_ref(&block));
                        done.extend(held.clone());
                        answer.coverage.extend(held);
                        answer.parts.push(v);
                    }
                    Err(BlockError::Refused(e)) => return Err(e),
                    Err(BlockError::Tsdb(e)) if is_not_found(&e) && attempt == 0 => {
                        gone = Some(block.meta().ulid.clone())
                    }
                    Err(BlockError::Tsdb(e)) => {
                        return Err(QuerierError::Store {
                            tenant: tenant.to_string(),
                            reason: format!("reading bucket block {}: {e}", block.meta().ulid),
                        });
                    }
                }
            }
            let Some(ulid) = gone else { break };
            tracing::info!(tenant = %tenant, block = %ulid, "a listed bucket block is gone from the bucket; listing again");
            self.forced_refreshes.inc(RefreshReason::BlockGone);
            // A listing of the bucket that starts from now on no longer holds it.
            (stale_before, fresh) = (Instant::now(), Fresh::Listing);
        }
        Ok(answer)
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
        (mint, maxt): (i64, i64),
        matchers: &[Matcher],
        limiter: &Arc<QueryLimiter>,
        read: &BlockCoverage,
    ) -> Result<StoreAnswer<Vec<SeriesChunks>>, QuerierError> {
        let m = matchers.to_vec();
        let limiter = Arc::clone(limiter);
        self.each_block(tenant, mint, maxt, read, move |b| {
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
        (mint, maxt): (i64, i64),
        matchers: &[Matcher],
        read: &BlockCoverage,
    ) -> Result<StoreAnswer<Vec<Labels>>, QuerierError> {
        let m = matchers.to_vec();
        self.each_block(tenant, mint, maxt, read, move |b| Ok(b.series(mint, maxt, &m)?))
            .await
    }

    /// Label names of the series matching `matchers` in blocks overlapping `[mint, maxt]`.
    pub(crate) async fn label_names(
        &self,
        tenant: &TenantId,
        (mint, maxt): (i64, i64),
        matchers: &[Matcher],
        read: &BlockCoverage,
    ) -> Result<StoreAnswer<Vec<String>>, QuerierError> {
        let m = matchers.to_vec();
        self.each_block(tenant, mint, maxt, read, move |b| Ok(b.label_names(&m)?))
            .await
    }

    /// Values of label `name` on the series matching `matchers` in blocks overlapping `[mint, maxt]`.
    pub(crate) async fn label_values(
        &self,
        tenant: &TenantId,
        name: &str,
        (mint, maxt): (i64, i64),
        matchers: &[Matcher],
        read: &BlockCoverage,
    ) -> Result<StoreAnswer<Vec<String>>, QuerierError> {
        let (m, name) = (matchers.to_vec(), name.to_owned());
        self.each_block(tenant, mint, maxt, read, move |b| Ok(b.label_values(&name, &m)?))
            .await
    }
}

/// What the bucket answered for one query: one part per block read, and what those blocks hold.
#[derive(Debug)]
pub(crate) struct StoreAnswer<T> {
    /// One answer per block, oldest block first.
    pub(crate) parts: Vec<T>,
    pub(crate) coverage: BlockCoverage,
}

impl<T> Default for StoreAnswer<T> {
    /// The answer of a query the bucket was not asked: nothing read, nothing held.
    fn default() -> Self {
        Self {
            parts: Vec::new(),
            coverage: BlockCoverage::default(),
        }
    }
}

/// The blocks whose samples a set of bucket blocks holds: each block itself and its compaction sources (the
/// level-1 blocks it was made from). An ingester's block is read from the bucket when it is in here: as
/// shipped, or inside a block the compactor made from it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct BlockCoverage(HashSet<String>);

impl BlockCoverage {
    fn of(blocks: &[Arc<BlockReader>]) -> Self {
        Self(
            blocks
                .iter()
                .flat_map(|b| {
                    let meta = b.meta();
                    std::iter::once(&meta.ulid).chain(&meta.compaction.sources).cloned()
                })
                .collect(),
        )
    }

    /// Whether the samples of block `ulid` are in here.
    pub(crate) fn holds(&self, ulid: &str) -> bool {
        self.0.contains(ulid)
    }

    /// Adds what `other` holds.
    pub(crate) fn extend(&mut self, other: BlockCoverage) {
        self.0.extend(other.0);
    }

    /// Those of `blocks` not held, sorted.
    pub(crate) fn missing<'a>(&self, blocks: impl IntoIterator<Item = &'a String>) -> Vec<String> {
        let mut out: Vec<String> = blocks.into_iter().filter(|u| !self.0.contains(*u)).cloned().collect();
        out.sort();
        out.dedup();
        out
    }
}

/// Whether a block read failed because an object of the block is not in the bucket (any more).
fn is_not_found(e: &heddle_tsdb::TsdbError) -> bool {
    matches!(e, heddle_tsdb::TsdbError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
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
#[path = "store/consistency_tests.rs"]
mod consistency_tests;
#[cfg(test)]
#[path = "store/sync_dir_tests.rs"]
mod sync_dir_tests;
#[cfg(test)]
#[path = "store/tests.rs"]
mod tests;
