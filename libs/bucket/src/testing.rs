//! Unit-test helpers: an in-memory store that logs writes and fails on demand, and fake block directories.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::stream::BoxStream;
use heddle_tsdb::block::{BlockMeta, new_ulid};
use object_store::memory::InMemory;
use object_store::path::Path as ObjectPath;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions,
    PutOptions, PutPayload, PutResult,
};
use prometheus_client::registry::Registry;

use crate::{Bucket, BucketOptions, RetryOptions};

/// [`InMemory`] that records the key of every write (in order; multipart uploads when they start) and fails
/// writes to keys ending with a configured suffix.
#[derive(Debug, Default)]
pub(crate) struct FlakyStore {
    inner: InMemory,
    state: Mutex<FlakyState>,
}

#[derive(Debug, Default)]
struct FlakyState {
    writes: Vec<String>,
    multipart: Vec<String>,
    /// (key suffix, failures left, transient?)
    failures: Vec<(String, u32, bool)>,
}

impl FlakyStore {
    /// The next `times` writes of keys ending with `suffix` fail; `transient` ones are retryable.
    pub(crate) fn fail_writes(&self, suffix: &str, times: u32, transient: bool) {
        self.state
            .lock()
            .unwrap()
            .failures
            .push((suffix.to_owned(), times, transient));
    }

    pub(crate) fn heal(&self) {
        self.state.lock().unwrap().failures.clear();
    }

    /// Keys written successfully (or multipart uploads started), in order.
    pub(crate) fn writes(&self) -> Vec<String> {
        self.state.lock().unwrap().writes.clone()
    }

    pub(crate) fn multipart_keys(&self) -> Vec<String> {
        self.state.lock().unwrap().multipart.clone()
    }

    fn check(&self, location: &ObjectPath) -> object_store::Result<()> {
        let mut state = self.state.lock().unwrap();
        let key = location.to_string();
        for (suffix, left, transient) in state.failures.iter_mut() {
            if *left > 0 && key.ends_with(suffix.as_str()) {
                *left -= 1;
                let source = format!("injected failure writing {key}").into();
                return Err(if *transient {
                    object_store::Error::Generic { store: "flaky", source }
                } else {
                    object_store::Error::PermissionDenied { path: key, source }
                });
            }
        }
        Ok(())
    }
}

impl std::fmt::Display for FlakyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FlakyStore")
    }
}

#[async_trait::async_trait]
impl ObjectStore for FlakyStore {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.check(location)?;
        let result = self.inner.put_opts(location, payload, opts).await?;
        self.state.lock().unwrap().writes.push(location.to_string());
        Ok(result)
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.check(location)?;
        let upload = self.inner.put_multipart_opts(location, opts).await?;
        let mut state = self.state.lock().unwrap();
        state.writes.push(location.to_string());
        state.multipart.push(location.to_string());
        Ok(upload)
    }

    async fn get_opts(&self, location: &ObjectPath, options: GetOptions) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&ObjectPath>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&ObjectPath>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &ObjectPath, to: &ObjectPath, options: CopyOptions) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// Options with retries that finish at once (the tests use a paused clock or tiny waits).
pub(crate) fn fast_options() -> BucketOptions {
    BucketOptions {
        retry: RetryOptions {
            max_attempts: 3,
            initial_backoff: std::time::Duration::from_millis(1),
            max_backoff: std::time::Duration::from_millis(2),
            max_elapsed: std::time::Duration::from_secs(5),
        },
        ..BucketOptions::default()
    }
}

/// A bucket over a fresh [`FlakyStore`], its store, and the registry holding its metrics.
pub(crate) fn memory_bucket(opts: BucketOptions) -> (Bucket, Arc<FlakyStore>, Registry) {
    let store = Arc::new(FlakyStore::default());
    let mut registry = Registry::default();
    let bucket = Bucket::from_store(store.clone(), "memory", &mut registry, opts);
    (bucket, store, registry)
}

/// Writes a fake block `<parent>/<ULID>/` of `tenant` covering `[min_time, max_time)`: a real `meta.json`,
/// and `index`, `chunks/000001`, `chunks/000002` and `tombstones` with recognisable bytes (`chunk_len` bytes
/// for `chunks/000001`). Returns the ULID and the directory.
pub(crate) fn fake_block(
    parent: &Path,
    tenant: &str,
    min_time: i64,
    max_time: i64,
    chunk_len: usize,
) -> (String, PathBuf) {
    let meta = BlockMeta::new(new_ulid(), min_time, max_time, Some(tenant));
    let dir = parent.join(&meta.ulid);
    std::fs::create_dir_all(dir.join("chunks")).unwrap();
    std::fs::write(dir.join("index"), format!("index of {}", meta.ulid)).unwrap();
    let chunk: Vec<u8> = (0..chunk_len).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.join("chunks/000001"), chunk).unwrap();
    std::fs::write(dir.join("chunks/000002"), b"second segment").unwrap();
    std::fs::write(dir.join("tombstones"), b"\x01\x30\xba\x30\x01\x00\x00\x00\x00").unwrap();
    std::fs::write(dir.join("meta.json"), meta.to_json()).unwrap();
    (meta.ulid, dir)
}
