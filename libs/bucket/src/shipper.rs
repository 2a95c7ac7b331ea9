//! The shipper: uploads a tenant's local blocks to the bucket once each, and deletes local blocks only after
//! their upload is confirmed and they are past retention.
//!
//! What was shipped is recorded in `<tenant_dir>/shipper.json`, in Thanos' format
//! (`{"version": 1, "uploaded": ["<ULID>", ...]}`), rewritten atomically after every confirmed upload, so a
//! restart neither re-uploads nor forgets a block.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use heddle_model::TenantId;
use heddle_tsdb::block::{BlockMeta, META_FILENAME};
use serde::{Deserialize, Serialize};

use crate::bucket::{Bucket, is_ulid, local_err, sync_dir};
use crate::error::BucketError;

/// Name of the shipper's state file inside a tenant directory.
pub const SHIPPER_FILENAME: &str = "shipper.json";
/// The only `shipper.json` version (Thanos' `MetaVersion1`).
const SHIPPER_VERSION: u32 = 1;
/// Suffix of a block directory being deleted: skipped by every scan, finished by the next `delete_expired`.
const DELETING_SUFFIX: &str = ".tmp-delete";

#[derive(Debug, Serialize, Deserialize)]
struct ShipperFile {
    version: u32,
    uploaded: Vec<String>,
}

/// A ULID-named directory with a `meta.json` in the tenant directory.
#[derive(Debug)]
struct LocalBlock {
    ulid: String,
    dir: PathBuf,
    /// The parsed `meta.json`, or why it does not parse.
    meta: Result<BlockMeta, String>,
}

/// What one [`Shipper::ship`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShipReport {
    /// Blocks uploaded by this call, oldest first.
    pub uploaded: Vec<String>,
    /// Blocks whose upload failed, with the error; they stay local and are tried again next time.
    pub failed: Vec<(String, String)>,
}

/// Ships the blocks of one tenant directory.
#[derive(Debug)]
pub struct Shipper {
    tenant: TenantId,
    tenant_dir: PathBuf,
    bucket: Bucket,
    shipped: Mutex<BTreeSet<String>>,
    /// Serialises `ship` and `delete_expired`: neither may see the other's half-done work.
    busy: tokio::sync::Mutex<()>,
}

impl Shipper {
    /// A shipper for `tenant_dir`, starting from its `shipper.json`. A missing file means nothing was shipped;
    /// an unreadable one is logged and treated the same (re-uploading a block overwrites the same objects).
    pub fn new(tenant: TenantId, tenant_dir: PathBuf, bucket: Bucket) -> Self {
        let shipped = read_shipper_file(&tenant_dir.join(SHIPPER_FILENAME));
        Self {
            tenant,
            tenant_dir,
            bucket,
            shipped: Mutex::new(shipped),
            busy: tokio::sync::Mutex::new(()),
        }
    }

    /// ULIDs of the blocks known to be in the bucket.
    pub fn shipped(&self) -> BTreeSet<String> {
        self.shipped.lock().expect("shipped lock").clone()
    }

    /// Uploads every local block (a ULID-named directory with a `meta.json`; `*.tmp*` directories are skipped)
    /// not yet shipped, oldest first, recording each in `shipper.json` as soon as its upload is confirmed. A
    /// failed upload leaves the block for the next call; after a retryable failure (the bucket is unreachable)
    /// the remaining blocks wait for the next call too. Never deletes anything.
    #[tracing::instrument(skip_all, fields(tenant = %self.tenant))]
    pub async fn ship(&self) -> Result<ShipReport, BucketError> {
        let _busy = self.busy.lock().await;
        let mut report = ShipReport::default();
        let metrics = self.bucket.metrics();
        for LocalBlock { ulid, dir, meta } in self.local_blocks().await? {
            if self.shipped.lock().expect("shipped lock").contains(&ulid) {
                continue;
            }
            let meta = match meta {
                Ok(meta) => meta,
                Err(reason) => {
                    metrics.shipper_upload_failures.inc();
                    tracing::warn!(block = %ulid, %reason, "not shipping a block with an unreadable meta.json");
                    report.failed.push((ulid, reason));
                    continue;
                }
            };
            match self.bucket.upload_block(&self.tenant, &dir).await {
                Ok(_) => {
                    let uploaded = {
                        let mut shipped = self.shipped.lock().expect("shipped lock");
                        shipped.insert(ulid.clone());
                        shipped.clone()
                    };
                    self.write_shipper_file(uploaded).await?;
                    metrics.shipped_block();
                    tracing::info!(block = %ulid, min_time = meta.min_time, max_time = meta.max_time, "shipped block");
                    report.uploaded.push(ulid);
                }
                Err(e) => {
                    metrics.shipper_upload_failures.inc();
                    tracing::warn!(block = %ulid, error = %e, "block upload failed; will retry on the next ship");
                    let retryable = e.is_retryable();
                    report.failed.push((ulid, e.to_string()));
                    if retryable {
                        break;
                    }
                }
            }
        }
        Ok(report)
    }

    /// Deletes the local blocks that are in `shipper.json` and whose `maxTime` is before `now_ms - retention`.
    /// Returns their ULIDs. A block is first renamed to `<ULID>.tmp-delete`, so a crash mid-delete leaves
    /// nothing that looks like a block; leftovers of such crashes are removed here too.
    pub async fn delete_expired(&self, retention: Duration, now_ms: i64) -> Result<Vec<String>, BucketError> {
        self.delete_expired_except(retention, now_ms, &BTreeSet::new()).await
    }

    /// [`Shipper::delete_expired`], keeping the blocks named in `keep` whatever their age (the ingester's
    /// reads still answer them: the querier may not list them yet).
    #[tracing::instrument(skip_all, fields(tenant = %self.tenant))]
    pub async fn delete_expired_except(
        &self,
        retention: Duration,
        now_ms: i64,
        keep: &BTreeSet<String>,
    ) -> Result<Vec<String>, BucketError> {
        let _busy = self.busy.lock().await;
        let cutoff = now_ms.saturating_sub(i64::try_from(retention.as_millis()).unwrap_or(i64::MAX));
        let mut shipped = self.shipped();
        shipped.retain(|u| !keep.contains(u));
        let expired: Vec<(String, PathBuf)> = self
            .local_blocks()
            .await?
            .into_iter()
            .filter(|b| shipped.contains(&b.ulid) && b.meta.as_ref().is_ok_and(|m| m.max_time < cutoff))
            .map(|b| (b.ulid, b.dir))
            .collect();
        let tenant_dir = self.tenant_dir.clone();
        let deleted = tokio::task::spawn_blocking(move || -> Result<Vec<String>, BucketError> {
            // Leftovers of a crash mid-delete first: one may have the name a rename below needs.
            for entry in std::fs::read_dir(&tenant_dir).map_err(|e| local_err(&tenant_dir, e))? {
                let entry = entry.map_err(|e| local_err(&tenant_dir, e))?;
                if entry.file_name().to_string_lossy().ends_with(DELETING_SUFFIX) {
                    std::fs::remove_dir_all(entry.path()).map_err(|e| local_err(&entry.path(), e))?;
                }
            }
            let mut deleted = Vec::new();
            for (ulid, dir) in expired {
                let doomed = tenant_dir.join(format!("{ulid}{DELETING_SUFFIX}"));
                std::fs::rename(&dir, &doomed).map_err(|e| local_err(&dir, e))?;
                sync_dir(&tenant_dir).map_err(|e| local_err(&tenant_dir, e))?;
                std::fs::remove_dir_all(&doomed).map_err(|e| local_err(&doomed, e))?;
                deleted.push(ulid);
            }
            Ok(deleted)
        })
        .await
        .map_err(|e| local_err(&self.tenant_dir, std::io::Error::other(e)))??;
        for ulid in &deleted {
            tracing::info!(block = %ulid, "deleted local block: shipped and past retention");
        }
        Ok(deleted)
    }

    /// Local blocks, oldest first (by `minTime`, then ULID), each with its meta or why it cannot be read.
    async fn local_blocks(&self) -> Result<Vec<LocalBlock>, BucketError> {
        let dir = self.tenant_dir.clone();
        tokio::task::spawn_blocking(move || scan_blocks(&dir))
            .await
            .map_err(|e| local_err(&self.tenant_dir, std::io::Error::other(e)))?
    }

    /// Writes `shipper.json` with `uploaded` (dropping ULIDs whose local directory is gone): tmp file, fsync,
    /// rename, fsync of the directory.
    async fn write_shipper_file(&self, uploaded: BTreeSet<String>) -> Result<(), BucketError> {
        let dir = self.tenant_dir.clone();
        tokio::task::spawn_blocking(move || {
            let uploaded: Vec<String> = uploaded.into_iter().filter(|u| dir.join(u).is_dir()).collect();
            let file = ShipperFile {
                version: SHIPPER_VERSION,
                uploaded,
            };
            let mut bytes = serde_json::to_vec_pretty(&file).expect("shipper file serializes");
            bytes.push(b'\n');
            write_atomically(&dir, SHIPPER_FILENAME, &bytes)
        })
        .await
        .map_err(|e| local_err(&self.tenant_dir, std::io::Error::other(e)))?
    }
}

fn scan_blocks(dir: &Path) -> Result<Vec<LocalBlock>, BucketError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(local_err(dir, e)),
    };
    let mut blocks = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| local_err(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        // `is_ulid` also rules out `<ULID>.tmp-*` directories of blocks being written or deleted.
        if !is_ulid(&name) || !entry.path().join(META_FILENAME).is_file() {
            continue;
        }
        let meta = BlockMeta::read(&entry.path()).map_err(|e| e.to_string());
        blocks.push(LocalBlock {
            ulid: name,
            dir: entry.path(),
            meta,
        });
    }
    // Unreadable metas sort last; they are reported, never uploaded.
    blocks.sort_by(|a, b| {
        let key = |blk: &LocalBlock| blk.meta.as_ref().map_or(i64::MAX, |m| m.min_time);
        (key(a), &a.ulid).cmp(&(key(b), &b.ulid))
    });
    Ok(blocks)
}

fn read_shipper_file(path: &Path) -> BTreeSet<String> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return BTreeSet::new(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read shipper.json; treating every block as not shipped");
            return BTreeSet::new();
        }
    };
    match serde_json::from_slice::<ShipperFile>(&bytes) {
        Ok(f) if f.version == SHIPPER_VERSION => f.uploaded.into_iter().collect(),
        Ok(f) => {
            tracing::warn!(path = %path.display(), version = f.version, "unknown shipper.json version; treating every block as not shipped");
            BTreeSet::new()
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "corrupt shipper.json; treating every block as not shipped");
            BTreeSet::new()
        }
    }
}

/// Replaces `dir/name` with `bytes` so a crash leaves either the old or the new content.
fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), BucketError> {
    use std::io::Write;
    let tmp = dir.join(format!("{name}.tmp"));
    let path = dir.join(name);
    let mut file = std::fs::File::create(&tmp).map_err(|e| local_err(&tmp, e))?;
    file.write_all(bytes).map_err(|e| local_err(&tmp, e))?;
    file.sync_all().map_err(|e| local_err(&tmp, e))?;
    drop(file);
    std::fs::rename(&tmp, &path).map_err(|e| local_err(&path, e))?;
    sync_dir(dir).map_err(|e| local_err(dir, e))
}

#[cfg(test)]
mod tests;
