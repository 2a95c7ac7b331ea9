//! Persistent blocks in Prometheus' on-disk format: `<ULID>/{meta.json, index, chunks/000001..., tombstones}`.
//!
//! `meta` is the block's `meta.json`.

pub mod meta;

pub use meta::{BlockMeta, META_FILENAME, new_ulid};
