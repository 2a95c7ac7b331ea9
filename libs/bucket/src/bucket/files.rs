//! [`BlockFiles`] over the objects of one bucket block: sizes from HEAD (cached), bytes from ranged GETs.

use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Mutex;

use bytes::Bytes;
use heddle_tsdb::TsdbError;
use heddle_tsdb::block::BlockFiles;
use object_store::path::Path as ObjectPath;

use super::Bucket;
use crate::error::BucketError;

/// The files of the block under `prefix` (`<tenant>/<ULID>`), read with blocking calls on `handle`.
#[derive(Debug)]
pub(super) struct BucketBlockFiles {
    bucket: Bucket,
    prefix: ObjectPath,
    handle: tokio::runtime::Handle,
    /// Objects of a block never change once `meta.json` exists, so one HEAD per file is enough.
    sizes: Mutex<HashMap<String, u64>>,
}

impl BucketBlockFiles {
    pub(super) fn new(bucket: Bucket, prefix: ObjectPath, handle: tokio::runtime::Handle) -> Self {
        Self {
            bucket,
            prefix,
            handle,
            sizes: Mutex::new(HashMap::new()),
        }
    }

    fn key(&self, name: &str) -> ObjectPath {
        super::object_path(&format!("{}/{name}", self.prefix))
    }

    fn tsdb_err(&self, key: &ObjectPath, e: BucketError) -> TsdbError {
        let kind = if e.is_not_found() {
            std::io::ErrorKind::NotFound
        } else {
            std::io::ErrorKind::Other
        };
        TsdbError::Io {
            path: PathBuf::from(format!("{}:{key}", self.bucket.backend())),
            source: std::io::Error::new(kind, e),
        }
    }
}

impl BlockFiles for BucketBlockFiles {
    fn size(&self, name: &str) -> Result<u64, TsdbError> {
        if let Some(size) = self.sizes.lock().expect("sizes lock").get(name) {
            return Ok(*size);
        }
        let key = self.key(name);
        let size = self
            .handle
            .block_on(self.bucket.object_size(&key))
            .map_err(|e| self.tsdb_err(&key, e))?;
        self.sizes.lock().expect("sizes lock").insert(name.to_owned(), size);
        Ok(size)
    }

    fn read(&self, name: &str, range: Range<u64>) -> Result<Bytes, TsdbError> {
        let size = self.size(name)?;
        let key = self.key(name);
        if range.start > range.end || range.end > size {
            return Err(TsdbError::Corruption {
                what: format!("{}:{key}", self.bucket.backend()),
                reason: format!(
                    "read of bytes {}..{} past the end of the {size}-byte object",
                    range.start, range.end
                ),
            });
        }
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        let bytes = self
            .handle
            .block_on(self.bucket.get_range(&key, range.clone()))
            .map_err(|e| self.tsdb_err(&key, e))?;
        if bytes.len() as u64 != range.end - range.start {
            return Err(TsdbError::Corruption {
                what: format!("{}:{key}", self.bucket.backend()),
                reason: format!("asked for bytes {}..{}, got {}", range.start, range.end, bytes.len()),
            });
        }
        Ok(bytes)
    }
}
