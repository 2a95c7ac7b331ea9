//! The per-tenant bucket index, `<tenant>/bucket-index.json.gz`, in Mimir's layout (`pkg/storage/tsdb/
//! bucketindex`): the tenant's complete blocks and their deletion marks as of `updated_at`, gzipped JSON. The
//! compactor writes it after each pass over the tenant; queriers read it instead of listing the bucket.
//! ```json
//! {"version": 1, "updated_at": <unix s>,
//!  "blocks": [{"block_id": "<ULID>", "min_time": <ms>, "max_time": <ms>, "uploaded_at": <unix s>,
//!              "compaction_level": 1, "source": "receive"}],
//!  "block_deletion_marks": [{"block_id": "<ULID>", "deletion_time": <unix s>}]}
//! ```
//! `updated_at` is when the listing the index was made from started: every block complete before then is in it.

use std::io::{Read, Write};

use heddle_tsdb::block::BlockMeta;
use serde::{Deserialize, Serialize};

use crate::markers::DeletionMark;

/// Object name of the index inside a tenant's prefix.
pub const BUCKET_INDEX_FILENAME: &str = "bucket-index.json.gz";
/// The index version Mimir writes (`IndexVersion1`).
pub const BUCKET_INDEX_VERSION: u32 = 1;
/// Largest decompressed index accepted: about two million blocks. A larger one is refused as corrupt rather
/// than inflated without bound.
const MAX_DECOMPRESSED: u64 = 512 << 20;

/// A tenant's bucket index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketIndex {
    pub version: u32,
    #[serde(default)]
    pub blocks: Vec<IndexBlock>,
    #[serde(default)]
    pub block_deletion_marks: Vec<IndexDeletionMark>,
    /// Unix seconds.
    pub updated_at: i64,
}

/// One complete block in the index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexBlock {
    pub block_id: String,
    /// Milliseconds, inclusive.
    pub min_time: i64,
    /// Milliseconds, exclusive.
    pub max_time: i64,
    /// Unix seconds; the time in the block's ULID (when the block was made), as Mimir falls back to.
    #[serde(default)]
    pub uploaded_at: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub compaction_level: u32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
}

/// One deletion mark in the index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexDeletionMark {
    pub block_id: String,
    /// Unix seconds.
    pub deletion_time: i64,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

impl IndexBlock {
    /// The index entry of a block.
    pub fn from_meta(meta: &BlockMeta) -> Self {
        let made_ms = meta.ulid.parse::<ulid::Ulid>().map(|u| u.timestamp_ms()).unwrap_or(0);
        Self {
            block_id: meta.ulid.clone(),
            min_time: meta.min_time,
            max_time: meta.max_time,
            uploaded_at: i64::try_from(made_ms / 1000).unwrap_or(i64::MAX),
            compaction_level: meta.compaction.level,
            source: meta.thanos.as_ref().map(|t| t.source.clone()).unwrap_or_default(),
        }
    }

    /// What a block reader needs of a `meta.json` (ULID and range) when the index is all there is.
    pub fn to_meta(&self) -> BlockMeta {
        let ulid = self.block_id.parse::<ulid::Ulid>().unwrap_or_default();
        let mut meta = BlockMeta::new(ulid, self.min_time, self.max_time, None);
        meta.ulid.clone_from(&self.block_id);
        meta.compaction.level = self.compaction_level;
        meta
    }
}

impl BucketIndex {
    /// The index of `blocks` and `marks` as listed from `updated_at` (unix seconds).
    pub fn new(blocks: &[BlockMeta], marks: &[DeletionMark], updated_at: i64) -> Self {
        Self {
            version: BUCKET_INDEX_VERSION,
            blocks: blocks.iter().map(IndexBlock::from_meta).collect(),
            block_deletion_marks: marks
                .iter()
                .map(|m| IndexDeletionMark {
                    block_id: m.id.clone(),
                    deletion_time: m.deletion_time,
                })
                .collect(),
            updated_at,
        }
    }

    /// Gzipped JSON.
    pub fn encode(&self) -> Vec<u8> {
        let json = serde_json::to_vec(self).expect("bucket index serializes");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&json).expect("writing to memory");
        gz.finish().expect("writing to memory")
    }

    /// Parses gzipped JSON; the error says what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut json = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .take(MAX_DECOMPRESSED + 1)
            .read_to_end(&mut json)
            .map_err(|e| format!("not gzip: {e}"))?;
        if json.len() as u64 > MAX_DECOMPRESSED {
            return Err(format!("decompresses to more than {MAX_DECOMPRESSED} bytes"));
        }
        let index: Self = serde_json::from_slice(&json).map_err(|e| format!("invalid JSON: {e}"))?;
        if index.version != BUCKET_INDEX_VERSION {
            return Err(format!("version {} is not {BUCKET_INDEX_VERSION}", index.version));
        }
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use heddle_tsdb::block::new_ulid;

    #[test]
    fn round_trips_in_mimirs_layout() {
        let a = BlockMeta::new(new_ulid(), 0, 7_200_000, Some("t"));
        let index = BucketIndex::new(
            std::slice::from_ref(&a),
            &[DeletionMark::new(&a.ulid, 1_700_000_000)],
            1_700_000_100,
        );
        let back = BucketIndex::decode(&index.encode()).unwrap();
        assert_eq!(back, index);
        let json: serde_json::Value = serde_json::to_value(&index).unwrap();
        assert_eq!(json["version"], 1);
        assert_eq!(json["blocks"][0]["block_id"], a.ulid.as_str());
        assert_eq!(json["blocks"][0]["max_time"], 7_200_000);
        assert_eq!(json["blocks"][0]["compaction_level"], 1);
        assert_eq!(json["block_deletion_marks"][0]["deletion_time"], 1_700_000_000);
        assert_eq!(json["updated_at"], 1_700_000_100);
        let meta = back.blocks[0].to_meta();
        assert_eq!(
            (meta.ulid.as_str(), meta.min_time, meta.max_time),
            (a.ulid.as_str(), 0, 7_200_000)
        );
    }

    #[test]
    fn reads_an_index_mimir_wrote() {
        let mimir = br#"{"version":1,"blocks":[{"block_id":"01FXW5ZRJ8M0G0AW1Z2QK8VRGZ","min_time":1,"max_time":2,
            "uploaded_at":1646400000,"segments_format":"1b6d","segments_num":1}],"block_deletion_marks":[],
            "updated_at":1646400100}"#;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(mimir).unwrap();
        let index = BucketIndex::decode(&gz.finish().unwrap()).unwrap();
        assert_eq!(index.blocks[0].block_id, "01FXW5ZRJ8M0G0AW1Z2QK8VRGZ");
        assert_eq!(index.blocks[0].compaction_level, 0);
    }

    #[test]
    fn refuses_garbage_and_other_versions() {
        assert!(BucketIndex::decode(b"{}").unwrap_err().contains("not gzip"));
        let mut v2 = BucketIndex::new(&[], &[], 0);
        v2.version = 2;
        assert!(BucketIndex::decode(&v2.encode()).unwrap_err().contains("version 2"));
    }
}
