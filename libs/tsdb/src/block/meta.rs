//! `meta.json` of a persistent block (Prometheus `tsdb/block.go` `BlockMeta`, plus the `thanos` section Mimir's
//! ingesters write: the tenant as the `__org_id__` external label, and where the block came from).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::TsdbError;

/// Name of the metadata file inside a block directory.
pub const META_FILENAME: &str = "meta.json";
/// The only `meta.json` version Prometheus writes and reads.
pub const META_VERSION: u32 = 1;
/// External label naming the tenant of a block (Cortex' and Mimir's `TenantIDExternalLabel`).
pub const TENANT_EXTERNAL_LABEL: &str = "__org_id__";
/// `thanos.source` of blocks cut by an ingester (the value Mimir's ingesters write).
pub const SOURCE_INGESTER: &str = "receive";
/// `thanos.source` of blocks the compactor wrote (the value Thanos' and Mimir's compactors write).
pub const SOURCE_COMPACTOR: &str = "compactor";

/// A block's `meta.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockMeta {
    /// The block's ULID, also its directory name.
    pub ulid: String,
    /// Oldest sample time (ms), inclusive.
    #[serde(rename = "minTime")]
    pub min_time: i64,
    /// End of the block's range (ms), exclusive: every sample is before it.
    #[serde(rename = "maxTime")]
    pub max_time: i64,
    /// Counts of what the block holds.
    #[serde(default)]
    pub stats: BlockStats,
    /// Compaction lineage.
    #[serde(default)]
    pub compaction: BlockCompaction,
    /// Always [`META_VERSION`].
    pub version: u32,
    /// Thanos/Mimir metadata: external labels (the tenant) and the source. Absent in blocks Prometheus wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thanos: Option<ThanosMeta>,
}

/// `stats` of a block.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockStats {
    #[serde(rename = "numSamples", default)]
    pub num_samples: u64,
    #[serde(rename = "numFloatSamples", default, skip_serializing_if = "is_zero")]
    pub num_float_samples: u64,
    #[serde(rename = "numHistogramSamples", default, skip_serializing_if = "is_zero")]
    pub num_histogram_samples: u64,
    #[serde(rename = "numSeries", default)]
    pub num_series: u64,
    #[serde(rename = "numChunks", default)]
    pub num_chunks: u64,
    #[serde(rename = "numTombstones", default, skip_serializing_if = "is_zero")]
    pub num_tombstones: u64,
}

/// `compaction` of a block: level 1 and its own ULID as the only source for a block cut from a head; for a
/// compacted block, one more than the highest level of its parents, the union of their sources (the level-1
/// blocks it holds, sorted) and the parents themselves, as Prometheus' `LeveledCompactor` writes them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockCompaction {
    #[serde(default)]
    pub level: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<BlockDesc>,
}

/// A parent of a compacted block (`compaction.parents[]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockDesc {
    pub ulid: String,
    #[serde(rename = "minTime")]
    pub min_time: i64,
    #[serde(rename = "maxTime")]
    pub max_time: i64,
}

/// The `thanos` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThanosMeta {
    /// External labels; Mimir's ingesters set `__org_id__` to the tenant.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Downsampling; always resolution 0 (raw) here.
    #[serde(default)]
    pub downsample: ThanosDownsample,
    /// What wrote the block (`receive` for ingesters, as Mimir).
    #[serde(default)]
    pub source: String,
}

/// `thanos.downsample`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThanosDownsample {
    #[serde(default)]
    pub resolution: i64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl BlockMeta {
    /// Metadata of a new level-1 block of `tenant` (when given) covering `[min_time, max_time)`.
    pub fn new(ulid: ulid::Ulid, min_time: i64, max_time: i64, tenant: Option<&str>) -> Self {
        let ulid = ulid.to_string();
        Self {
            compaction: BlockCompaction {
                level: 1,
                sources: vec![ulid.clone()],
                parents: Vec::new(),
            },
            ulid,
            min_time,
            max_time,
            stats: BlockStats::default(),
            version: META_VERSION,
            thanos: tenant.map(|t| ThanosMeta {
                labels: BTreeMap::from([(TENANT_EXTERNAL_LABEL.to_owned(), t.to_owned())]),
                downsample: ThanosDownsample::default(),
                source: SOURCE_INGESTER.to_owned(),
            }),
        }
    }

    /// Metadata of block `ulid` made by compacting `parents` (at least one): it covers their whole range,
    /// its level is one above the highest parent's, its sources are the union of theirs, and it keeps the
    /// `thanos` section of the first parent that has one, with the compactor as its source.
    pub fn compacted(ulid: ulid::Ulid, parents: &[BlockMeta]) -> Self {
        let ulid = ulid.to_string();
        let mut sources: Vec<String> = parents
            .iter()
            .flat_map(|p| p.compaction.sources.iter().cloned())
            .collect();
        sources.sort();
        sources.dedup();
        let thanos = parents.iter().find_map(|p| p.thanos.clone()).map(|mut t| {
            t.source = SOURCE_COMPACTOR.to_owned();
            t
        });
        Self {
            ulid,
            min_time: parents.iter().map(|p| p.min_time).min().unwrap_or(0),
            max_time: parents.iter().map(|p| p.max_time).max().unwrap_or(0),
            stats: BlockStats::default(),
            compaction: BlockCompaction {
                level: parents.iter().map(|p| p.compaction.level).max().unwrap_or(0) + 1,
                sources,
                parents: parents
                    .iter()
                    .map(|p| BlockDesc {
                        ulid: p.ulid.clone(),
                        min_time: p.min_time,
                        max_time: p.max_time,
                    })
                    .collect(),
            },
            version: META_VERSION,
            thanos,
        }
    }

    /// The tenant named by the `__org_id__` external label, if any.
    pub fn tenant(&self) -> Option<&str> {
        self.thanos
            .as_ref()
            .and_then(|t| t.labels.get(TENANT_EXTERNAL_LABEL))
            .map(String::as_str)
    }

    /// Parses `meta.json` bytes, naming `what` (a path or object key) in the error.
    pub fn parse(bytes: &[u8], what: &str) -> Result<Self, TsdbError> {
        let meta: BlockMeta = serde_json::from_slice(bytes).map_err(|e| TsdbError::Corruption {
            what: what.to_owned(),
            reason: format!("invalid meta.json: {e}"),
        })?;
        if meta.version != META_VERSION {
            return Err(TsdbError::Corruption {
                what: what.to_owned(),
                reason: format!("meta.json version {} is not {META_VERSION}", meta.version),
            });
        }
        if meta.ulid.parse::<ulid::Ulid>().is_err() {
            return Err(TsdbError::Corruption {
                what: what.to_owned(),
                reason: format!("meta.json ulid {:?} is not a ULID", meta.ulid),
            });
        }
        Ok(meta)
    }

    /// Reads `<block_dir>/meta.json`.
    pub fn read(block_dir: &Path) -> Result<Self, TsdbError> {
        let path = block_dir.join(META_FILENAME);
        let bytes = std::fs::read(&path).map_err(|source| TsdbError::Io {
            path: path.clone(),
            source,
        })?;
        Self::parse(&bytes, &path.display().to_string())
    }

    /// The JSON Prometheus writes (indented with tabs is not required; promtool reads any JSON).
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).expect("block meta serializes");
        out.push(b'\n');
        out
    }
}

/// A new block ULID for a block made now: the current time and 80 random bits.
pub fn new_ulid() -> ulid::Ulid {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    ulid::Ulid::from_parts(now_ms, rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_names_the_tenant() {
        let m = BlockMeta::new(new_ulid(), 0, 7_200_000, Some("team-a"));
        let back = BlockMeta::parse(&m.to_json(), "x").unwrap();
        assert_eq!(back, m);
        assert_eq!(back.tenant(), Some("team-a"));
        let json: serde_json::Value = serde_json::from_slice(&m.to_json()).unwrap();
        assert_eq!(json["thanos"]["labels"]["__org_id__"], "team-a");
        assert_eq!(json["compaction"]["level"], 1);
        assert_eq!(json["minTime"], 0);
        assert_eq!(json["maxTime"], 7_200_000);
    }

    #[test]
    fn a_compacted_block_records_its_lineage() {
        let a = BlockMeta::new(new_ulid(), 0, 7_200_000, Some("team-a"));
        let b = BlockMeta::new(new_ulid(), 10, 7_200_000, Some("team-a"));
        let ab = BlockMeta::compacted(new_ulid(), &[a.clone(), b.clone()]);
        assert_eq!((ab.min_time, ab.max_time), (0, 7_200_000));
        assert_eq!(ab.compaction.level, 2);
        let mut want = vec![a.ulid.clone(), b.ulid.clone()];
        want.sort();
        assert_eq!(ab.compaction.sources, want);
        assert_eq!(ab.tenant(), Some("team-a"));
        let c = BlockMeta::new(new_ulid(), 7_200_000, 14_400_000, Some("team-a"));
        let abc = BlockMeta::compacted(new_ulid(), &[ab.clone(), c.clone()]);
        assert_eq!(abc.compaction.level, 3);
        assert_eq!(
            abc.compaction.sources.len(),
            3,
            "sources are the level-1 blocks, not the parents"
        );
        let json: serde_json::Value = serde_json::from_slice(&abc.to_json()).unwrap();
        assert_eq!(json["compaction"]["parents"][0]["ulid"], ab.ulid.as_str());
        assert_eq!(json["compaction"]["parents"][1]["minTime"], 7_200_000);
        assert_eq!(json["thanos"]["source"], SOURCE_COMPACTOR);
        assert_eq!(BlockMeta::parse(&abc.to_json(), "abc").unwrap(), abc);
    }

    #[test]
    fn reads_a_prometheus_meta() {
        let prom = br#"{
  "ulid": "01BKGV7JC0RY8A6MACW02A2PJD",
  "minTime": 1602237600000,
  "maxTime": 1602244800000,
  "stats": {"numSamples": 553673232, "numSeries": 1346066, "numChunks": 4440437},
  "compaction": {"level": 1, "sources": ["01BKGV7JC0RY8A6MACW02A2PJD"]},
  "version": 1
}"#;
        let m = BlockMeta::parse(prom, "prom").unwrap();
        assert_eq!(m.stats.num_series, 1_346_066);
        assert_eq!(m.tenant(), None);
    }

    #[test]
    fn refuses_bad_versions_and_ulids() {
        let mut m = BlockMeta::new(new_ulid(), 0, 1, None);
        m.version = 2;
        let err = BlockMeta::parse(&m.to_json(), "blk").unwrap_err().to_string();
        assert!(err.contains("version 2"), "{err}");
        m.version = 1;
        m.ulid = "nope".into();
        let err = BlockMeta::parse(&m.to_json(), "blk").unwrap_err().to_string();
        assert!(err.contains("not a ULID"), "{err}");
    }
}
