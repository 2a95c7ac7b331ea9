//! Object storage for blocks (`blocks_storage.backend`): a local directory (`filesystem`, the default) or any
//! S3-compatible endpoint (`s3`), through `object_store`. Layout, as in Mimir and Cortex:
//! `<tenant>/<ULID>/{meta.json, index, chunks/000001, tombstones}`, with `meta.json` written last so a block is
//! visible only when complete.
//!
//! Owns: the bucket config and flags ([`BucketConfig`], [`BUCKET_FLAGS`]), block upload, listing and download,
//! ranged reads of bucket blocks for the block reader ([`Bucket::block_files`]), and the [`Shipper`] that uploads
//! a tenant's local blocks once each and deletes them only after a confirmed upload; the compactor's marks and
//! the per-tenant bucket index ([`DeletionMark`], [`BucketIndex`]) with the listing, marking and deleting they
//! need. It does not write, read or compact blocks (`heddle-tsdb` does) and does not decide when to ship (the
//! ingester does) or what to mark (the compactor does).

mod bucket;
mod bucket_index;
mod config;
mod error;
mod markers;
mod metrics;
mod retry;
mod shipper;
#[cfg(test)]
mod testing;

pub use bucket::{Bucket, TenantListing};
pub use bucket_index::{BUCKET_INDEX_FILENAME, BucketIndex, IndexBlock, IndexDeletionMark};
pub use config::{BUCKET_FLAGS, Backend, BucketConfig, FilesystemConfig, S3Config};
pub use error::BucketError;
pub use markers::{DELETION_MARK_FILENAME, DeletionMark};
pub use retry::{BucketOptions, RetryOptions};
pub use shipper::{SHIPPER_FILENAME, ShipReport, Shipper};
