//! Object storage for blocks (`blocks_storage.backend`): `filesystem` or any S3-compatible endpoint, through
//! `object_store`. Layout, as in Mimir and Cortex: `<tenant>/<ULID>/{meta.json,index,chunks/000001,tombstones}`.
