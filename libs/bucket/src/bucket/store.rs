//! The `object_store` client for a config, and the streaming file transfers (multipart upload, download to a
//! file) that one retry attempt runs.

use std::path::Path;
use std::sync::Arc;

use futures::StreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::{Backend, BucketConfig};
use crate::error::BucketError;
use crate::retry::BucketOptions;

/// The client for `cfg`. For s3, settings left empty in the config come from the `AWS_*` environment.
pub(super) fn build(cfg: &BucketConfig, opts: &BucketOptions) -> Result<Arc<dyn ObjectStore>, BucketError> {
    match cfg.backend {
        Backend::Filesystem => {
            let dir = &cfg.filesystem.dir;
            std::fs::create_dir_all(dir).map_err(|e| super::local_err(dir, e))?;
            let fs = LocalFileSystem::new_with_prefix(dir)
                .map_err(|e| BucketError::Config(format!("blocks_storage.filesystem.dir {}: {e}", dir.display())))?;
            Ok(Arc::new(fs))
        }
        Backend::S3 => {
            let s3 = &cfg.s3;
            let mut builder = AmazonS3Builder::from_env()
                .with_bucket_name(&s3.bucket_name)
                .with_virtual_hosted_style_request(false)
                .with_client_options(
                    ClientOptions::new()
                        .with_timeout(opts.request_timeout)
                        .with_connect_timeout(opts.connect_timeout),
                )
                // Whole objects are retried by `RetryOptions`; these are the client's own retries of single
                // requests (a multipart part cannot be retried from outside).
                .with_retry(RetryConfig {
                    backoff: BackoffConfig {
                        init_backoff: opts.retry.initial_backoff,
                        max_backoff: opts.retry.max_backoff,
                        base: 2.0,
                    },
                    max_retries: opts.client_retries,
                    retry_timeout: opts.retry.max_elapsed,
                });
            let env_endpoint_is_http = std::env::var("AWS_ENDPOINT_URL")
                .or_else(|_| std::env::var("AWS_ENDPOINT"))
                .is_ok_and(|e| e.starts_with("http://"));
            if let Some(url) = s3.endpoint_url() {
                builder = builder.with_allow_http(url.starts_with("http://")).with_endpoint(url);
            } else {
                builder = builder.with_allow_http(s3.insecure || env_endpoint_is_http);
            }
            if !s3.region.is_empty() {
                builder = builder.with_region(&s3.region);
            }
            if !s3.access_key_id.is_empty() {
                builder = builder
                    .with_access_key_id(&s3.access_key_id)
                    .with_secret_access_key(&s3.secret_access_key);
            }
            let store = builder
                .build()
                .map_err(|e| BucketError::Config(format!("blocks_storage.s3: {e}")))?;
            Ok(Arc::new(store))
        }
    }
}

/// Wraps a local I/O failure during a transfer so the retry loop can treat it like a transient store error.
fn local_io(path: &Path, e: std::io::Error) -> object_store::Error {
    object_store::Error::Generic {
        store: "local file",
        source: format!("{}: {e}", path.display()).into(),
    }
}

/// Uploads the file at `path` to `key` in `part_size` parts, one after the other (memory stays at one part).
/// On failure the upload is aborted so the store can drop the parts.
pub(super) async fn put_multipart_file(
    store: &Arc<dyn ObjectStore>,
    key: &ObjectPath,
    path: &Path,
    part_size: usize,
) -> object_store::Result<()> {
    let mut upload = store.put_multipart(key).await?;
    let parts = async {
        let mut file = tokio::fs::File::open(path).await.map_err(|e| local_io(path, e))?;
        loop {
            let mut part = Vec::with_capacity(part_size);
            (&mut file)
                .take(part_size as u64)
                .read_to_end(&mut part)
                .await
                .map_err(|e| local_io(path, e))?;
            if part.is_empty() {
                return Ok(());
            }
            upload.put_part(PutPayload::from(part)).await?;
        }
    }
    .await;
    match parts {
        Ok(()) => upload.complete().await.map(|_| ()),
        Err(e) => {
            if let Err(abort) = upload.abort().await {
                tracing::debug!(key = %key, error = %abort, "aborting a failed multipart upload failed too");
            }
            Err(e)
        }
    }
}

/// Streams object `key` into a new file at `dest` (replacing it) and fsyncs it.
pub(super) async fn get_to_file(
    store: &Arc<dyn ObjectStore>,
    key: &ObjectPath,
    dest: &Path,
) -> object_store::Result<()> {
    let mut stream = store.get(key).await?.into_stream();
    let mut file = tokio::fs::File::create(dest).await.map_err(|e| local_io(dest, e))?;
    while let Some(chunk) = stream.next().await {
        file.write_all(&chunk?).await.map_err(|e| local_io(dest, e))?;
    }
    file.sync_all().await.map_err(|e| local_io(dest, e))?;
    Ok(())
}
