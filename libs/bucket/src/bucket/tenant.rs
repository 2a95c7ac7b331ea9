//! What the compactor and queriers need of a tenant's prefix beyond uploading and reading blocks: one listing
//! that finds blocks, deletion marks, partial blocks and the bytes stored; marking and deleting blocks; the
//! bucket index; and small objects of the tenant's own (the compactor's lock).

use std::time::SystemTime;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use heddle_model::TenantId;
use heddle_tsdb::block::{BlockMeta, META_FILENAME};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use super::{Bucket, META_FETCH_CONCURRENCY, is_ulid, object_key, object_path};
use crate::bucket_index::{BUCKET_INDEX_FILENAME, BucketIndex};
use crate::error::BucketError;
use crate::markers::{DELETION_MARK_FILENAME, DeletionMark};

/// A tenant's prefix as one listing saw it.
#[derive(Debug, Clone, Default)]
pub struct TenantListing {
    /// Complete blocks (with a readable `meta.json`), sorted by `min_time`, then ULID.
    pub blocks: Vec<BlockMeta>,
    /// Deletion marks that parse, of complete and partial blocks alike, sorted by ULID.
    pub deletion_marks: Vec<DeletionMark>,
    /// Block directories without `meta.json` (an upload in progress or cut short, or a deletion cut short),
    /// with the time of their newest object.
    pub partial: Vec<(String, Option<SystemTime>)>,
    /// Bytes of every object under the tenant's prefix.
    pub bytes: u64,
}

impl Bucket {
    /// Lists everything under `<tenant>/` once and reads the `meta.json` and `deletion-mark.json` objects found.
    pub async fn list_tenant(&self, tenant: &TenantId) -> Result<TenantListing, BucketError> {
        let prefix = object_path(tenant.as_str());
        let objects = self
            .call("iter", &prefix, || {
                self.inner.store.list(Some(&prefix)).try_collect::<Vec<_>>()
            })
            .await?;
        let mut out = TenantListing::default();
        // Per block directory: has meta.json, has a mark, newest object.
        let mut dirs: std::collections::BTreeMap<String, (bool, bool, Option<SystemTime>)> = Default::default();
        for o in &objects {
            out.bytes += o.size;
            let parts: Vec<_> = o.location.parts().collect();
            if parts.len() < 3 || !is_ulid(parts[1].as_ref()) {
                continue;
            }
            let d = dirs.entry(parts[1].as_ref().to_owned()).or_default();
            let modified: SystemTime = o.last_modified.into();
            d.2 = Some(d.2.map_or(modified, |t| t.max(modified)));
            if parts.len() == 3 {
                d.0 |= parts[2].as_ref() == META_FILENAME;
                d.1 |= parts[2].as_ref() == DELETION_MARK_FILENAME;
            }
        }
        // Keys collected first: a stream borrowing the map would make this future not `Send`.
        let metas: Vec<ObjectPath> = dirs
            .iter()
            .filter(|d| d.1.0)
            .map(|(u, _)| object_key(tenant, u, META_FILENAME))
            .collect();
        let fetched: Vec<Option<BlockMeta>> = futures::stream::iter(metas)
            .map(|key| async move { self.fetch_meta(&key).await })
            .buffer_unordered(META_FETCH_CONCURRENCY)
            .try_collect()
            .await?;
        out.blocks = fetched.into_iter().flatten().collect();
        out.blocks
            .sort_by(|a, b| (a.min_time, &a.ulid).cmp(&(b.min_time, &b.ulid)));
        let marks: Vec<(String, ObjectPath)> = dirs
            .iter()
            .filter(|d| d.1.1)
            .map(|(u, _)| (u.clone(), object_key(tenant, u, DELETION_MARK_FILENAME)))
            .collect();
        let fetched: Vec<Option<DeletionMark>> = futures::stream::iter(marks)
            .map(|(ulid, key)| async move { self.fetch_mark(&ulid, &key).await })
            .buffer_unordered(META_FETCH_CONCURRENCY)
            .try_collect()
            .await?;
        out.deletion_marks = fetched.into_iter().flatten().collect();
        out.deletion_marks.sort_by(|a, b| a.id.cmp(&b.id));
        out.partial = dirs.into_iter().filter(|d| !d.1.0).map(|(u, d)| (u, d.2)).collect();
        Ok(out)
    }

    /// The tenant's deletion marks alone (one listing, then the marks found), sorted by ULID.
    ///
    /// A reader that wants marks and blocks consistent takes the marks first and the blocks
    /// ([`Bucket::list_tenant`]) after: a compactor uploads a merged block before it marks the sources, so every
    /// mark seen by the first listing has its replacement complete before the second one starts. One listing of
    /// both can see a mark and miss its replacement on a store whose listing is not a snapshot and not in key
    /// order (the filesystem backend walks directories in the order the OS gives).
    pub async fn list_deletion_marks(&self, tenant: &TenantId) -> Result<Vec<DeletionMark>, BucketError> {
        let prefix = object_path(tenant.as_str());
        let objects = self
            .call("iter", &prefix, || {
                self.inner.store.list(Some(&prefix)).try_collect::<Vec<_>>()
            })
            .await?;
        let marks: Vec<(String, ObjectPath)> = objects
            .iter()
            .filter_map(|o| {
                let parts: Vec<_> = o.location.parts().collect();
                let ulid = parts.get(1)?.as_ref();
                (parts.len() == 3 && parts[2].as_ref() == DELETION_MARK_FILENAME && is_ulid(ulid))
                    .then(|| (ulid.to_owned(), o.location.clone()))
            })
            .collect();
        let fetched: Vec<Option<DeletionMark>> = futures::stream::iter(marks)
            .map(|(ulid, key)| async move { self.fetch_mark(&ulid, &key).await })
            .buffer_unordered(META_FETCH_CONCURRENCY)
            .try_collect()
            .await?;
        let mut out: Vec<DeletionMark> = fetched.into_iter().flatten().collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// The `meta.json` of block `ulid`, `None` when the block is not (or no longer) complete in the bucket.
    pub async fn read_block_meta(&self, tenant: &TenantId, ulid: &str) -> Result<Option<BlockMeta>, BucketError> {
        super::check_ulid(ulid)?;
        self.fetch_meta(&object_key(tenant, ulid, META_FILENAME)).await
    }

    async fn fetch_mark(&self, ulid: &str, key: &ObjectPath) -> Result<Option<DeletionMark>, BucketError> {
        let bytes = match self.get_bytes(key).await {
            Ok(b) => b,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        match serde_json::from_slice::<DeletionMark>(&bytes) {
            Ok(mark) if mark.id == ulid => Ok(Some(mark)),
            Ok(mark) => {
                tracing::warn!(key = %key, id = %mark.id, "ignoring a deletion mark naming another block");
                Ok(None)
            }
            Err(e) => {
                tracing::warn!(key = %key, error = %e, "ignoring an unreadable deletion mark");
                Ok(None)
            }
        }
    }

    /// Writes `mark` as `<tenant>/<ULID>/deletion-mark.json`, unless the block already has a readable one: the
    /// first mark's time is the one the delays count from. Returns the mark in force.
    pub async fn mark_for_deletion(&self, tenant: &TenantId, mark: DeletionMark) -> Result<DeletionMark, BucketError> {
        let key = object_key(tenant, &mark.id, DELETION_MARK_FILENAME);
        if let Some(existing) = self.fetch_mark(&mark.id, &key).await? {
            return Ok(existing);
        }
        let body = Bytes::from(serde_json::to_vec(&mark).expect("deletion mark serializes"));
        self.call("upload", &key, || {
            self.inner.store.put(&key, PutPayload::from(body.clone()))
        })
        .await?;
        Ok(mark)
    }

    /// Deletes block `ulid` of `tenant`: `meta.json` first, so the block turns partial (invisible) at once and a
    /// deletion cut short is never mistaken for a complete block; then its other files; its deletion mark last,
    /// so a deletion cut short is found and finished by the next pass. Returns the objects deleted.
    pub async fn delete_block(&self, tenant: &TenantId, ulid: &str) -> Result<usize, BucketError> {
        super::check_ulid(ulid)?;
        let meta = object_key(tenant, ulid, META_FILENAME);
        let mut deleted = usize::from(self.delete_object(&meta).await?);
        // Crash tests stop here: the block is invisible (no meta.json), its other objects are still there.
        heddle_tsdb::file::failpoint("delete-after-meta");
        let prefix = object_path(&format!("{}/{ulid}", tenant.as_str()));
        let objects = self
            .call("iter", &prefix, || {
                self.inner.store.list(Some(&prefix)).try_collect::<Vec<_>>()
            })
            .await?;
        let mark = object_key(tenant, ulid, DELETION_MARK_FILENAME);
        for o in objects.iter().filter(|o| o.location != mark) {
            deleted += usize::from(self.delete_object(&o.location).await?);
        }
        deleted += usize::from(self.delete_object(&mark).await?);
        Ok(deleted)
    }

    /// The tenant's bucket index, `None` when there is none. An index that does not parse is an error.
    pub async fn read_bucket_index(&self, tenant: &TenantId) -> Result<Option<BucketIndex>, BucketError> {
        let key = tenant_object(tenant, BUCKET_INDEX_FILENAME);
        let bytes = match self.get_bytes(&key).await {
            Ok(b) => b,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        BucketIndex::decode(&bytes)
            .map(Some)
            .map_err(|reason| BucketError::InvalidBlock {
                what: key.to_string(),
                reason,
            })
    }

    /// Replaces the tenant's bucket index (one PUT: readers see the old index or the new one).
    pub async fn write_bucket_index(&self, tenant: &TenantId, index: &BucketIndex) -> Result<(), BucketError> {
        self.put_tenant_object(tenant, BUCKET_INDEX_FILENAME, Bytes::from(index.encode()))
            .await
    }

    /// `<tenant>/<name>`, `None` when absent.
    pub async fn get_tenant_object(&self, tenant: &TenantId, name: &str) -> Result<Option<Bytes>, BucketError> {
        match self.get_bytes(&tenant_object(tenant, name)).await {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes `<tenant>/<name>`, replacing it.
    pub async fn put_tenant_object(&self, tenant: &TenantId, name: &str, body: Bytes) -> Result<(), BucketError> {
        let key = tenant_object(tenant, name);
        self.call("upload", &key, || {
            self.inner.store.put(&key, PutPayload::from(body.clone()))
        })
        .await
        .map(|_| ())
    }

    /// Creates `<tenant>/<name>` only if it does not exist (a conditional PUT, `If-None-Match: *` on S3);
    /// `false` when it already existed.
    pub async fn create_tenant_object(&self, tenant: &TenantId, name: &str, body: Bytes) -> Result<bool, BucketError> {
        let key = tenant_object(tenant, name);
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        let result = self
            .call("upload", &key, || {
                self.inner
                    .store
                    .put_opts(&key, PutPayload::from(body.clone()), opts.clone())
            })
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(BucketError::Store { source, .. }) if matches!(*source, object_store::Error::AlreadyExists { .. }) => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// The names of the objects directly under `<tenant>/<dir>/` (not their paths), in no particular order;
    /// empty when there are none.
    pub async fn list_tenant_dir(&self, tenant: &TenantId, dir: &str) -> Result<Vec<String>, BucketError> {
        let prefix = tenant_object(tenant, dir);
        let listing = self
            .call("iter", &prefix, || self.inner.store.list_with_delimiter(Some(&prefix)))
            .await?;
        Ok(listing
            .objects
            .iter()
            .filter_map(|o| o.location.filename().map(str::to_owned))
            .collect())
    }

    /// Deletes `<tenant>/<name>`; `false` when the store said it was not there (S3 does not say).
    pub async fn delete_tenant_object(&self, tenant: &TenantId, name: &str) -> Result<bool, BucketError> {
        self.delete_object(&tenant_object(tenant, name)).await
    }

    async fn delete_object(&self, key: &ObjectPath) -> Result<bool, BucketError> {
        match self.call("delete", key, || self.inner.store.delete(key)).await {
            Ok(()) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }
}

fn tenant_object(tenant: &TenantId, name: &str) -> ObjectPath {
    object_path(&format!("{}/{name}", tenant.as_str()))
}
