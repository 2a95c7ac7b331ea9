//! Writing a block: series come in label order with their chunks; chunks go to the segment files at once,
//! labels and chunk metas stay in memory until [`BlockWriter::finish`] writes the index, the tombstones,
//! `meta.json`, and renames the directory into place.
//!
//! Crash safety: everything is written under `<ulid>.tmp-for-creation/` (Prometheus' suffix), fsynced, then
//! renamed; a crash leaves only a temporary directory, which [`remove_incomplete_blocks`] deletes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use heddle_model::Labels;

use super::chunks::{CHUNKS_DIR, DEFAULT_SEGMENT_SIZE, SegmentWriter};
use super::index::{ChunkMeta, INDEX_FILENAME, IndexSeries, write_index};
use super::meta::{BlockMeta, META_FILENAME};
use super::tombstones::{TOMBSTONES_FILENAME, empty};
use crate::chunkenc::Encoding;
use crate::error::TsdbError;
use crate::file::sync_dir;
use crate::head::ChunkData;

/// Suffix of a block directory being written.
pub const TMP_SUFFIX: &str = ".tmp-for-creation";

/// Writes one block. Dropping it without [`BlockWriter::finish`] leaves the temporary directory behind
/// (deleted by [`remove_incomplete_blocks`]).
#[derive(Debug)]
pub struct BlockWriter {
    meta: BlockMeta,
    parent: PathBuf,
    tmp: PathBuf,
    chunks: SegmentWriter,
    /// Interned label strings: `strings[id]`.
    strings: Vec<Box<str>>,
    ids: HashMap<Arc<str>, u32>,
    series: Vec<IndexSeries>,
    last: Option<Labels>,
    num_float_samples: u64,
    num_histogram_samples: u64,
    num_chunks: u64,
}

impl BlockWriter {
    /// Creates `<parent>/<meta.ulid>.tmp-for-creation/` (replacing a leftover one) and opens `chunks/000001`.
    pub fn new(parent: &Path, meta: BlockMeta) -> Result<Self, TsdbError> {
        Self::with_segment_size(parent, meta, DEFAULT_SEGMENT_SIZE)
    }

    /// [`BlockWriter::new`] with another chunk segment size limit (tests use tiny ones).
    pub(crate) fn with_segment_size(parent: &Path, meta: BlockMeta, segment_size: u64) -> Result<Self, TsdbError> {
        if meta.min_time > meta.max_time {
            return Err(TsdbError::Corruption {
                what: format!("block {}", meta.ulid),
                reason: format!("min_time {} is after max_time {}", meta.min_time, meta.max_time),
            });
        }
        let tmp = parent.join(format!("{}{TMP_SUFFIX}", meta.ulid));
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| TsdbError::Io { path, source }
        };
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
        }
        std::fs::create_dir_all(&tmp).map_err(io(&tmp))?;
        let chunks = SegmentWriter::create(&tmp.join(CHUNKS_DIR), segment_size)?;
        Ok(Self {
            meta,
            parent: parent.to_path_buf(),
            tmp,
            chunks,
            strings: Vec::new(),
            ids: HashMap::new(),
            series: Vec::new(),
            last: None,
            num_float_samples: 0,
            num_histogram_samples: 0,
            num_chunks: 0,
        })
    }

    fn invalid(&self, reason: String) -> TsdbError {
        TsdbError::Corruption {
            what: format!("block {} being written", self.meta.ulid),
            reason,
        }
    }

    /// Adds one series; calls must come in strictly increasing label order (error otherwise, naming both
    /// series). Chunks (oldest first, non-overlapping, each within `[meta.min_time, meta.max_time)`, XOR,
    /// integer or float histogram with at least one sample; error otherwise, and nothing of the series is
    /// written) go to the chunk segment right away with their encoding byte; only the labels (interned) and
    /// chunk metas stay in memory. A series with no chunks is skipped.
    pub fn add_series(&mut self, labels: &Labels, chunks: &[ChunkData]) -> Result<(), TsdbError> {
        if labels.is_empty() {
            return Err(self.invalid("series without labels".to_owned()));
        }
        if let Some(last) = &self.last
            && last >= labels
        {
            return Err(self.invalid(format!(
                "series {labels} added after {last}: series must come in strictly increasing label order"
            )));
        }
        let (mut floats, mut histograms) = (0u64, 0u64);
        let mut prev_max: Option<i64> = None;
        for (i, c) in chunks.iter().enumerate() {
            let n = match c.data.get(..2) {
                Some(h) => u16::from_be_bytes([h[0], h[1]]),
                None => 0,
            };
            // Every encoding opens with the sample count, big-endian u16.
            let problem = if c.encoding == Encoding::None {
                Some("has no encoding".to_owned())
            } else if n == 0 {
                Some("holds no samples".to_owned())
            } else if c.min_time > c.max_time {
                Some("has min_time after max_time".to_owned())
            } else if c.min_time < self.meta.min_time || c.max_time >= self.meta.max_time {
                Some(format!(
                    "is outside the block's range [{}, {})",
                    self.meta.min_time, self.meta.max_time
                ))
            } else if prev_max.is_some_and(|p| c.min_time <= p) {
                Some("overlaps or precedes the chunk before it".to_owned())
            } else {
                None
            };
            if let Some(p) = problem {
                return Err(self.invalid(format!(
                    "series {labels}: chunk {i} [{}, {}] {p}",
                    c.min_time, c.max_time
                )));
            }
            prev_max = Some(c.max_time);
            if c.encoding == Encoding::Xor {
                floats += u64::from(n);
            } else {
                histograms += u64::from(n);
            }
        }
        self.last = Some(labels.clone());
        if chunks.is_empty() {
            return Ok(());
        }
        let mut metas = Vec::with_capacity(chunks.len());
        for c in chunks {
            let chunk_ref = self.chunks.write(c.encoding as u8, &c.data)?;
            metas.push(ChunkMeta {
                min_time: c.min_time,
                max_time: c.max_time,
                chunk_ref,
            });
        }
        let pairs: Box<[(u32, u32)]> = labels
            .iter()
            .map(|l| (self.intern(l.name), self.intern(l.value)))
            .collect();
        self.series.push(IndexSeries {
            labels: pairs,
            chunks: metas.into_boxed_slice(),
        });
        self.num_float_samples += floats;
        self.num_histogram_samples += histograms;
        self.num_chunks += chunks.len() as u64;
        Ok(())
    }

    fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.strings.len() as u32;
        self.strings.push(s.into());
        self.ids.insert(Arc::from(s), id);
        id
    }

    /// Writes the index, an empty `tombstones` file and `meta.json` with its stats (samples, float and
    /// histogram ones apart, series, chunks), fsyncs files and directories, and renames the directory to `<parent>/<ulid>`. Returns the
    /// final meta.
    pub fn finish(self) -> Result<BlockMeta, TsdbError> {
        let Self {
            mut meta,
            parent,
            tmp,
            chunks,
            strings,
            ids,
            series,
            num_float_samples,
            num_histogram_samples,
            num_chunks,
            ..
        } = self;
        drop(ids);
        chunks.finish()?;
        write_index(&tmp.join(INDEX_FILENAME), &strings, &series)?;
        meta.stats.num_series = series.len() as u64;
        drop(series);
        drop(strings);
        meta.stats.num_samples = num_float_samples + num_histogram_samples;
        meta.stats.num_float_samples = num_float_samples;
        meta.stats.num_histogram_samples = num_histogram_samples;
        meta.stats.num_chunks = num_chunks;
        write_synced(&tmp.join(TOMBSTONES_FILENAME), &empty())?;
        write_synced(&tmp.join(META_FILENAME), &meta.to_json())?;
        for dir in [tmp.join(CHUNKS_DIR), tmp.clone()] {
            sync_dir(&dir).map_err(|source| TsdbError::Io { path: dir, source })?;
        }
        let dst = parent.join(&meta.ulid);
        std::fs::rename(&tmp, &dst).map_err(|source| TsdbError::Io {
            path: dst.clone(),
            source,
        })?;
        sync_dir(&parent).map_err(|source| TsdbError::Io { path: parent, source })?;
        Ok(meta)
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), TsdbError> {
    use std::io::Write;
    let io = |source| TsdbError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::File::create(path).map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)
}

/// Deletes leftover `*.tmp-for-creation` directories under `parent` (a crash mid-write); returns how many.
pub fn remove_incomplete_blocks(parent: &Path) -> Result<usize, TsdbError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| TsdbError::Io { path, source }
    };
    let entries = match std::fs::read_dir(parent) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io(parent)(e)),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry.map_err(io(parent))?;
        let name = entry.file_name();
        let is_tmp = name.to_str().is_some_and(|n| n.ends_with(TMP_SUFFIX));
        if is_tmp && entry.file_type().map_err(io(&entry.path()))?.is_dir() {
            std::fs::remove_dir_all(entry.path()).map_err(io(&entry.path()))?;
            removed += 1;
        }
    }
    if removed > 0 {
        sync_dir(parent).map_err(io(parent))?;
    }
    Ok(removed)
}

/// Local block directories (ULID-named, with a readable `meta.json`) under `parent`, sorted by min_time
/// (then ULID). Directories with an unreadable `meta.json` are skipped with a warning.
pub fn list_local_blocks(parent: &Path) -> Result<Vec<(PathBuf, BlockMeta)>, TsdbError> {
    let entries = match std::fs::read_dir(parent) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(TsdbError::Io {
                path: parent.to_path_buf(),
                source,
            });
        }
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| TsdbError::Io {
            path: parent.to_path_buf(),
            source,
        })?;
        let path = entry.path();
        let is_ulid = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.parse::<ulid::Ulid>().is_ok());
        if !is_ulid || !path.is_dir() {
            continue;
        }
        match BlockMeta::read(&path) {
            Ok(meta) => out.push((path, meta)),
            Err(e) => {
                tracing::warn!(dir = %path.display(), error = %e, "skipping block directory without a readable meta.json")
            }
        }
    }
    out.sort_by(|a, b| (a.1.min_time, &a.1.ulid).cmp(&(b.1.min_time, &b.1.ulid)));
    Ok(out)
}
