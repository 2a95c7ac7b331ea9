//! Persistent blocks in Prometheus' on-disk format: `<ULID>/{meta.json, index, chunks/000001..., tombstones}`.
//!
//! `meta` is the block's `meta.json`; `files` is where a reader gets its bytes (a local directory or a bucket).

pub mod files;
pub mod meta;

pub use files::BlockFiles;
pub use meta::{BlockMeta, META_FILENAME, new_ulid};
