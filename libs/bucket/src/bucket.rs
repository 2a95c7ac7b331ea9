//! The bucket: blocks of every tenant under `<tenant>/<ULID>/{index, chunks/NNNNNN, tombstones, meta.json}`.
//!
//! A block is visible when its `meta.json` exists, so `meta.json` is written last on upload and read first on
//! download: a reader never sees half a block, and a re-upload after a failure simply overwrites.

mod files;
mod store;
mod tenant;

pub use tenant::TenantListing;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use heddle_model::TenantId;
use heddle_tsdb::block::{BlockFiles, BlockMeta, META_FILENAME};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use prometheus_client::registry::Registry;

use crate::config::BucketConfig;
use crate::error::BucketError;
use crate::metrics::BucketMetrics;
use crate::retry::BucketOptions;

/// Name of the file holding a block's index.
const INDEX_FILENAME: &str = "index";
/// How many `meta.json` objects a listing fetches at once.
const META_FETCH_CONCURRENCY: usize = 8;

/// Blocks in object storage. Cheap to clone; clones share the client and the metrics.
#[derive(Clone, Debug)]
pub struct Bucket {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Arc<dyn ObjectStore>,
    backend: &'static str,
    opts: BucketOptions,
    metrics: BucketMetrics,
}

impl Bucket {
    /// A bucket for `cfg` with the default [`BucketOptions`]; registers the bucket and shipper metrics.
    pub fn new(cfg: &BucketConfig, registry: &mut Registry) -> Result<Self, BucketError> {
        Self::with_options(cfg, registry, BucketOptions::default())
    }

    /// A bucket for `cfg` with explicit retry, multipart and timeout settings.
    pub fn with_options(cfg: &BucketConfig, registry: &mut Registry, opts: BucketOptions) -> Result<Self, BucketError> {
        cfg.validate().map_err(BucketError::Config)?;
        let store = store::build(cfg, &opts)?;
        Ok(Self::from_store(store, cfg.backend.as_str(), registry, opts))
    }

    /// A bucket over any `object_store` (unit tests use the in-memory one).
    pub(crate) fn from_store(
        store: Arc<dyn ObjectStore>,
        backend: &'static str,
        registry: &mut Registry,
        opts: BucketOptions,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                backend,
                opts,
                metrics: BucketMetrics::new(registry),
            }),
        }
    }

    /// `filesystem`, `s3` (or `memory` in unit tests).
    pub fn backend(&self) -> &'static str {
        self.inner.backend
    }

    pub(crate) fn metrics(&self) -> &BucketMetrics {
        &self.inner.metrics
    }

    /// Uploads the block in `block_dir` (named by its ULID) to `<tenant>/<ULID>/`: every file but `meta.json`
    /// first (files above the multipart threshold in parts), `meta.json` last. Each object is retried on its
    /// own. Returns the block's metadata.
    pub async fn upload_block(&self, tenant: &TenantId, block_dir: &Path) -> Result<BlockMeta, BucketError> {
        let (meta, meta_bytes) = read_local_meta(block_dir).await?;
        let dir_name = block_dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if dir_name != meta.ulid {
            return Err(BucketError::InvalidBlock {
                what: block_dir.display().to_string(),
                reason: format!("directory name is not the block's ULID {}", meta.ulid),
            });
        }
        if let Some(owner) = meta.tenant()
            && owner != tenant.as_str()
        {
            return Err(BucketError::InvalidBlock {
                what: block_dir.display().to_string(),
                reason: format!("meta.json names tenant {owner:?}, not {:?}", tenant.as_str()),
            });
        }
        let files = local_block_files(block_dir).await?;
        if !files.iter().any(|(name, _)| name == INDEX_FILENAME) {
            return Err(BucketError::InvalidBlock {
                what: block_dir.display().to_string(),
                reason: "no index file".into(),
            });
        }
        for (name, size) in &files {
            let key = object_key(tenant, &meta.ulid, name);
            self.upload_file(&key, &block_dir.join(name), *size).await?;
        }
        // Crash tests stop here: every file is up but meta.json, so the block must stay invisible.
        heddle_tsdb::file::failpoint("upload-before-meta");
        let key = object_key(tenant, &meta.ulid, META_FILENAME);
        let len = meta_bytes.len() as u64;
        self.call("upload", &key, || {
            self.inner.store.put(&key, PutPayload::from(meta_bytes.clone()))
        })
        .await?;
        self.inner.metrics.uploaded(len);
        tracing::info!(tenant = %tenant, block = %meta.ulid, objects = files.len() + 1, "uploaded block");
        Ok(meta)
    }

    /// The complete blocks (those with a `meta.json`) of `tenant`, sorted by `min_time`, then ULID. A
    /// `meta.json` that does not parse is skipped with a warning rather than hiding the tenant's other blocks.
    pub async fn list_blocks(&self, tenant: &TenantId) -> Result<Vec<BlockMeta>, BucketError> {
        let prefix = object_path(tenant.as_str());
        let objects = self
            .call("iter", &prefix, || {
                self.inner.store.list(Some(&prefix)).try_collect::<Vec<_>>()
            })
            .await?;
        let meta_keys: Vec<ObjectPath> = objects
            .into_iter()
            .map(|o| o.location)
            .filter(|loc| {
                let parts: Vec<_> = loc.parts().collect();
                parts.len() == 3 && parts[2].as_ref() == META_FILENAME && is_ulid(parts[1].as_ref())
            })
            .collect();
        let fetched: Vec<Option<BlockMeta>> = futures::stream::iter(meta_keys)
            .map(|key| async move { self.fetch_meta(&key).await })
            .buffer_unordered(META_FETCH_CONCURRENCY)
            .try_collect()
            .await?;
        let mut metas: Vec<BlockMeta> = fetched.into_iter().flatten().collect();
        metas.sort_by(|a, b| (a.min_time, &a.ulid).cmp(&(b.min_time, &b.ulid)));
        Ok(metas)
    }

    async fn fetch_meta(&self, key: &ObjectPath) -> Result<Option<BlockMeta>, BucketError> {
        let bytes = match self.get_bytes(key).await {
            Ok(b) => b,
            // Deleted between the listing and the read.
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        let dir_ulid = key.parts().nth(1).map(|p| p.as_ref().to_owned()).unwrap_or_default();
        match BlockMeta::parse(&bytes, key.as_ref()) {
            Ok(meta) if meta.ulid == dir_ulid => Ok(Some(meta)),
            Ok(meta) => {
                tracing::warn!(key = %key, ulid = %meta.ulid, "skipping block whose meta.json names another ULID");
                Ok(None)
            }
            Err(e) => {
                tracing::warn!(key = %key, error = %e, "skipping block with an unreadable meta.json");
                Ok(None)
            }
        }
    }

    /// Tenants that have anything in the bucket (top-level prefixes that are valid tenant ids), sorted.
    pub async fn tenants(&self) -> Result<Vec<TenantId>, BucketError> {
        let root = ObjectPath::default();
        let listing = self
            .call("iter", &root, || self.inner.store.list_with_delimiter(None))
            .await?;
        let mut tenants: Vec<TenantId> = listing
            .common_prefixes
            .iter()
            .filter_map(|p| {
                let name = p.parts().next_back()?;
                match TenantId::new(name.as_ref()) {
                    Ok(t) => Some(t),
                    Err(e) => {
                        tracing::warn!(prefix = %p, error = %e, "ignoring a bucket prefix that is not a tenant id");
                        None
                    }
                }
            })
            .collect();
        tenants.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        Ok(tenants)
    }

    /// Downloads block `ulid` of `tenant` into `<dest_parent>/<ulid>` and returns that path. Files land in
    /// `<ulid>.tmp-download` first, `meta.json` last, then the directory is renamed, so a crash never leaves a
    /// complete-looking partial block. Fails if the block has no `meta.json` or the destination exists.
    pub async fn download_block(
        &self,
        tenant: &TenantId,
        ulid: &str,
        dest_parent: &Path,
    ) -> Result<PathBuf, BucketError> {
        check_ulid(ulid)?;
        let dest = dest_parent.join(ulid);
        if tokio::fs::try_exists(&dest).await.unwrap_or(false) {
            return Err(local_err(
                &dest,
                std::io::Error::new(std::io::ErrorKind::AlreadyExists, "block directory already exists"),
            ));
        }
        let prefix = object_path(&format!("{}/{ulid}", tenant.as_str()));
        let objects = self
            .call("iter", &prefix, || {
                self.inner.store.list(Some(&prefix)).try_collect::<Vec<_>>()
            })
            .await?;
        let mut names: Vec<String> = objects
            .iter()
            .filter_map(|o| {
                let rel: Vec<_> = o
                    .location
                    .prefix_match(&prefix)?
                    .map(|p| p.as_ref().to_owned())
                    .collect();
                (!rel.is_empty()).then(|| rel.join("/"))
            })
            .collect();
        if !names.iter().any(|n| n == META_FILENAME) {
            return Err(BucketError::InvalidBlock {
                what: prefix.to_string(),
                reason: format!("not in the {} bucket, or incomplete (no meta.json)", self.backend()),
            });
        }
        // meta.json last: a crash before the rename leaves only the .tmp-download directory.
        names.retain(|n| n != META_FILENAME);
        names.sort();
        names.push(META_FILENAME.to_owned());

        let tmp = dest_parent.join(format!("{ulid}.tmp-download"));
        if tokio::fs::try_exists(&tmp).await.unwrap_or(false) {
            tokio::fs::remove_dir_all(&tmp).await.map_err(|e| local_err(&tmp, e))?;
        }
        tokio::fs::create_dir_all(&tmp).await.map_err(|e| local_err(&tmp, e))?;
        for name in &names {
            let key = object_key(tenant, ulid, name);
            self.download_file(&key, &tmp.join(name)).await?;
        }
        BlockMeta::read(&tmp).map_err(|e| BucketError::InvalidBlock {
            what: prefix.to_string(),
            reason: e.to_string(),
        })?;
        let (tmp2, dest2, parent) = (tmp.clone(), dest.clone(), dest_parent.to_owned());
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            if tmp2.join("chunks").is_dir() {
                sync_dir(&tmp2.join("chunks"))?;
            }
            sync_dir(&tmp2)?;
            std::fs::rename(&tmp2, &dest2)?;
            sync_dir(&parent)
        })
        .await
        .map_err(|e| local_err(&dest, std::io::Error::other(e)))?
        .map_err(|e| local_err(&dest, e))?;
        Ok(dest)
    }

    /// Ranged reads of one bucket block for heddle_tsdb's block reader. Blocking calls: they use the runtime
    /// handle captured here (`tokio::runtime::Handle::current()`, so this must be called inside a runtime), and
    /// callers must run them on a blocking thread (`spawn_blocking`), never on a runtime worker.
    pub fn block_files(&self, tenant: &TenantId, ulid: &str) -> Arc<dyn BlockFiles> {
        Arc::new(files::BucketBlockFiles::new(
            self.clone(),
            object_path(&format!("{}/{ulid}", tenant.as_str())),
            tokio::runtime::Handle::current(),
        ))
    }

    /// Runs one object store operation with the retry policy, counting every attempt in the metrics.
    async fn call<T, F, Fut>(&self, operation: &'static str, key: &ObjectPath, mut op: F) -> Result<T, BucketError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = object_store::Result<T>>,
    {
        let metrics = &self.inner.metrics;
        let (result, attempts) = self
            .inner
            .opts
            .retry
            .run(|| {
                let fut = op();
                async move {
                    let start = Instant::now();
                    let result = fut.await;
                    // A missing object is an answer, not a failing bucket.
                    let ok = matches!(&result, Ok(_) | Err(object_store::Error::NotFound { .. }));
                    metrics.observe(operation, ok, start.elapsed().as_secs_f64());
                    result
                }
            })
            .await;
        result.map_err(|source| BucketError::Store {
            backend: self.inner.backend,
            operation,
            key: key.to_string(),
            attempts,
            source: Box::new(source),
        })
    }

    pub(crate) async fn get_bytes(&self, key: &ObjectPath) -> Result<Bytes, BucketError> {
        self.call("get", key, || async { self.inner.store.get(key).await?.bytes().await })
            .await
    }

    pub(crate) async fn get_range(&self, key: &ObjectPath, range: std::ops::Range<u64>) -> Result<Bytes, BucketError> {
        self.call("get_range", key, || self.inner.store.get_range(key, range.clone()))
            .await
    }

    pub(crate) async fn object_size(&self, key: &ObjectPath) -> Result<u64, BucketError> {
        self.call("attributes", key, || async {
            Ok(self.inner.store.head(key).await?.size)
        })
        .await
    }

    async fn upload_file(&self, key: &ObjectPath, path: &Path, size: u64) -> Result<(), BucketError> {
        if size > self.inner.opts.multipart_threshold {
            self.call("upload", key, || {
                store::put_multipart_file(&self.inner.store, key, path, self.inner.opts.part_size)
            })
            .await?;
        } else {
            let bytes = Bytes::from(tokio::fs::read(path).await.map_err(|e| local_err(path, e))?);
            self.call("upload", key, || {
                self.inner.store.put(key, PutPayload::from(bytes.clone()))
            })
            .await?;
        }
        self.inner.metrics.uploaded(size);
        Ok(())
    }

    async fn download_file(&self, key: &ObjectPath, dest: &Path) -> Result<(), BucketError> {
        if let Some(parent) = dest.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| local_err(parent, e))?;
        }
        self.call("get", key, || store::get_to_file(&self.inner.store, key, dest))
            .await
    }
}

/// `<tenant>/<ulid>/<name>` (`name` may contain `/`, as `chunks/000001`).
fn object_key(tenant: &TenantId, ulid: &str, name: &str) -> ObjectPath {
    object_path(&format!("{}/{ulid}/{name}", tenant.as_str()))
}

/// The key `s` as it is, so a tenant id with `*` (valid in Mimir) keeps Mimir's object names instead of
/// `object_store`'s percent-encoding (`Path::from` encodes characters AWS advises against). Tenant ids, ULIDs
/// and block file names never hold what `Path::parse` refuses (control characters, empty or `.`/`..` segments);
/// anything else falls back to the encoded form.
pub(crate) fn object_path(s: &str) -> ObjectPath {
    ObjectPath::parse(s).unwrap_or_else(|_| ObjectPath::from(s))
}

/// Whether `s` is a ULID as Prometheus names block directories: 26 Crockford base32 characters.
pub(crate) fn is_ulid(s: &str) -> bool {
    s.len() == 26
        && s.as_bytes()[0] <= b'7'
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b.is_ascii_uppercase() && !matches!(b, b'I' | b'L' | b'O' | b'U')))
}

fn check_ulid(ulid: &str) -> Result<(), BucketError> {
    if is_ulid(ulid) {
        Ok(())
    } else {
        Err(BucketError::InvalidBlock {
            what: ulid.to_owned(),
            reason: "not a ULID".into(),
        })
    }
}

pub(crate) fn local_err(path: &Path, source: std::io::Error) -> BucketError {
    BucketError::Local {
        path: path.to_owned(),
        source,
    }
}

/// `meta.json` of a local block: parsed, and its exact bytes (uploaded as they are).
async fn read_local_meta(block_dir: &Path) -> Result<(BlockMeta, Bytes), BucketError> {
    let path = block_dir.join(META_FILENAME);
    let bytes = tokio::fs::read(&path).await.map_err(|e| local_err(&path, e))?;
    let meta = BlockMeta::parse(&bytes, &path.display().to_string()).map_err(|e| BucketError::InvalidBlock {
        what: block_dir.display().to_string(),
        reason: e.to_string(),
    })?;
    Ok((meta, Bytes::from(bytes)))
}

/// Every regular file of a block directory but `meta.json`, as (`/`-separated relative name, size), sorted so
/// `chunks/...` come before `index` and `tombstones`.
async fn local_block_files(block_dir: &Path) -> Result<Vec<(String, u64)>, BucketError> {
    let dir = block_dir.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        let mut stack = vec![(dir.clone(), String::new())];
        while let Some((path, rel)) = stack.pop() {
            let entries = std::fs::read_dir(&path).map_err(|e| local_err(&path, e))?;
            for entry in entries {
                let entry = entry.map_err(|e| local_err(&path, e))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                let rel_name = if rel.is_empty() { name } else { format!("{rel}/{name}") };
                let meta = entry.metadata().map_err(|e| local_err(&entry.path(), e))?;
                if meta.is_dir() {
                    stack.push((entry.path(), rel_name));
                } else if meta.is_file() && rel_name != META_FILENAME {
                    out.push((rel_name, meta.len()));
                }
            }
        }
        out.sort();
        Ok(out)
    })
    .await
    .map_err(|e| local_err(block_dir, std::io::Error::other(e)))?
}

pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests;
