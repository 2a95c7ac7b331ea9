//! Reading blocks straight from the bucket (the role Mimir gives its store-gateways): data older than what the
//! ingesters still hold.
//!
//! Per tenant, the list of blocks (their `meta.json`) is refreshed at most every `sync_interval`; each block is
//! opened once through ranged reads of the bucket, and its index header (TOC, symbols, postings offset table)
//! stays in memory, so a query costs ranged GETs of the postings, series entries and chunks it touches.

use crate::error::QuerierError;
use heddle_bucket::Bucket;
use heddle_model::{Labels, Matcher, TenantId};
use heddle_proto::prometheus as pb;
use heddle_proto::xor_chunked_series;
use heddle_tsdb::block::{BlockMeta, BlockReader};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The bucket's blocks, as the querier reads them.
#[derive(Debug)]
pub struct BucketStore {
    bucket: Bucket,
    sync_interval: Duration,
    tenants: tokio::sync::Mutex<HashMap<TenantId, TenantBlocks>>,
}

#[derive(Debug, Default)]
struct TenantBlocks {
    synced: Option<Instant>,
    /// Open blocks by ULID.
    open: HashMap<String, Arc<BlockReader>>,
}

impl BucketStore {
    /// Reads `bucket`, listing a tenant's blocks again when its list is older than `sync_interval`.
    pub fn new(bucket: Bucket, sync_interval: Duration) -> Self {
        Self {
            bucket,
            sync_interval,
            tenants: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The tenant's blocks overlapping `[mint, maxt]`, after refreshing the list if it is stale.
    async fn blocks(&self, tenant: &TenantId, mint: i64, maxt: i64) -> Result<Vec<Arc<BlockReader>>, QuerierError> {
        let mut tenants = self.tenants.lock().await;
        let entry = tenants.entry(tenant.clone()).or_default();
        if entry.synced.is_none_or(|t| t.elapsed() >= self.sync_interval) {
            let metas = self.bucket.list_blocks(tenant).await.map_err(|e| QuerierError::Store {
                tenant: tenant.to_string(),
                reason: e.to_string(),
            })?;
            let listed: BTreeSet<&str> = metas.iter().map(|m| m.ulid.as_str()).collect();
            entry.open.retain(|ulid, _| listed.contains(ulid.as_str()));
            let new: Vec<BlockMeta> = metas
                .into_iter()
                .filter(|m| !entry.open.contains_key(&m.ulid))
                .collect();
            for meta in new {
                let files = self.bucket.block_files(tenant, &meta.ulid);
                let ulid = meta.ulid.clone();
                let opened = tokio::task::spawn_blocking(move || BlockReader::open(files, meta))
                    .await
                    .map_err(|e| QuerierError::Store {
                        tenant: tenant.to_string(),
                        reason: e.to_string(),
                    })?;
                match opened {
                    Ok(reader) => {
                        entry.open.insert(ulid, Arc::new(reader));
                    }
                    // A block that cannot be opened fails queries that need it, naming it, rather than
                    // silently returning less; it is tried again on the next sync.
                    Err(e) => {
                        return Err(QuerierError::Store {
                            tenant: tenant.to_string(),
                            reason: format!("cannot open bucket block {ulid}: {e}"),
                        });
                    }
                }
            }
            entry.synced = Some(Instant::now());
        }
        let mut out: Vec<Arc<BlockReader>> = entry
            .open
            .values()
            .filter(|b| b.meta().min_time <= maxt && b.meta().max_time > mint)
            .cloned()
            .collect();
        out.sort_by_key(|b| b.meta().min_time);
        Ok(out)
    }

    /// Runs `f` on every block of the tenant overlapping the range, on blocking threads (each call makes ranged
    /// GETs), and returns one answer per block.
    async fn each_block<T: Send + 'static>(
        &self,
        tenant: &TenantId,
        mint: i64,
        maxt: i64,
        f: impl Fn(&BlockReader) -> Result<T, heddle_tsdb::TsdbError> + Send + Sync + 'static,
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
                Ok(Err((ulid, e))) => {
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

    /// Series matching `matchers` with their chunks overlapping `[mint, maxt]`, in the shape ingesters answer.
    pub(crate) async fn query(
        &self,
        tenant: &TenantId,
        mint: i64,
        maxt: i64,
        matchers: &[Matcher],
    ) -> Result<Vec<pb::ChunkedSeries>, QuerierError> {
        let m = matchers.to_vec();
        let parts = self
            .each_block(tenant, mint, maxt, move |b| b.select(mint, maxt, &m))
            .await?;
        Ok(parts
            .into_iter()
            .flatten()
            .map(|s| {
                xor_chunked_series(
                    &s.labels,
                    s.chunks.iter().map(|c| (c.min_time, c.max_time, &c.data[..])),
                )
            })
            .collect())
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
            .each_block(tenant, mint, maxt, move |b| b.series(mint, maxt, &m))
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
        let parts = self.each_block(tenant, mint, maxt, move |b| b.label_names(&m)).await?;
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
            .each_block(tenant, mint, maxt, move |b| b.label_values(&name, &m))
            .await?;
        Ok(parts.into_iter().flatten().collect())
    }
}
