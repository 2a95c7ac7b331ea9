//! Persistent blocks in Prometheus' on-disk format: `<ULID>/{meta.json, index, chunks/000001..., tombstones}`.
//!
//! `meta` is the block's `meta.json`; `files` is where a reader gets its bytes (a local directory or a bucket).
//! The formats live beside their code: `chunks` (segment files), `index` (v2 index), `tombstones`, and
//! `index_header` (a block's index header kept on local disk by the processes that read bucket blocks).
//! [`BlockWriter`] writes a block from series given in label order; [`BlockReader`] queries one.

mod chunks;
mod encoding;
mod fetch;
pub mod files;
mod index;
mod index_header;
pub mod meta;
mod reader;
mod tombstones;
mod writer;

#[cfg(test)]
mod histogram_tests;
#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod prometheus_tests;
#[cfg(test)]
mod tests;

pub use files::{BlockFiles, LocalBlockFiles};
pub use index_header::{HeaderOrigin, INDEX_HEADER_FILENAME};
pub use meta::{BlockMeta, META_FILENAME, new_ulid};
pub use reader::{BlockReader, SelectPlan};
pub use writer::{BlockWriter, TMP_SUFFIX, list_local_blocks, remove_incomplete_blocks};
