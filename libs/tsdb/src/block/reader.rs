//! Queries on a block: series with their chunks, series labels, label names and values, with the head's
//! matcher semantics (a missing label has the value ""), reading through [`BlockFiles`].
//!
//! Opening reads the "index header" (TOC, symbols, postings offset table) into memory. A query then reads
//! the postings lists it needs, the series entries of the candidates and the chunks of the selected series,
//! each kind grouped into as few ranged reads as their positions allow (one GET per group on a bucket).
//!
//! Chunks come back with their encoding (XOR floats, integer or float native histograms). A chunk of an
//! encoding this version does not know (none, or one newer than float histograms) is skipped: counted in
//! [`BlockReader::skipped_chunks`] and logged at debug level, so a reader never hands out bytes it cannot
//! decode.

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use heddle_model::{Labels, MatchType, Matcher};

use super::chunks::{SEGMENT_HEADER_LEN, check_header, decode_frame, frame_total, segment_name};
use super::fetch::{fetch_frames, fetch_ranges, frame_runs};
use super::files::{BlockFiles, LocalBlockFiles};
use super::index::{INDEX_FILENAME, IndexHeader, SERIES_ALIGN, SeriesEntry, decode_postings};
use super::index_header::{self, HeaderOrigin};
use super::meta::BlockMeta;
use crate::chunkenc::Encoding;
use crate::error::TsdbError;
use crate::file::{FileCreator, StdFiles};
use crate::head::postings::intersect;
use crate::head::{ChunkData, SeriesChunks};

/// Bytes read past the last series entry of a group (entries are usually far smaller).
const SERIES_GUESS: u64 = 1024;
/// Bytes read past the last chunk of a group (Prometheus caps XOR chunks near 1 KiB; a longer histogram chunk
/// costs one more read).
const CHUNK_GUESS: u64 = 1100;

/// What [`BlockReader::plan_select`] found: the matching series, sorted, with the chunks overlapping the
/// range, before any chunk is read.
#[derive(Debug)]
pub struct SelectPlan {
    selected: Vec<SeriesEntry>,
}

impl SelectPlan {
    /// Series to read.
    pub fn series(&self) -> usize {
        self.selected.len()
    }

    /// Chunks to read, all series together.
    pub fn chunks(&self) -> usize {
        self.selected.iter().map(|s| s.chunks.len()).sum()
    }

    /// Bytes [`BlockReader::read_selected`] fetches to read the chunks: its coalesced reads, with the gaps
    /// between neighbouring chunks and the guess past each run's last chunk. An upper bound, but for a chunk
    /// longer than the guess at the end of a run (read again whole) and for runs cut by a segment's end.
    pub fn fetch_bytes(&self) -> u64 {
        let mut refs: Vec<u64> = self
            .selected
            .iter()
            .flat_map(|s| s.chunks.iter().map(|c| c.chunk_ref))
            .collect();
        refs.sort_unstable();
        refs.chunk_by(|a, b| a >> 32 == b >> 32)
            .map(|segment| {
                let offsets: Vec<u64> = segment.iter().map(|r| r & 0xffff_ffff).collect();
                frame_runs(&offsets, u64::MAX, CHUNK_GUESS)
                    .into_iter()
                    .map(|(_, bytes)| bytes.end - bytes.start)
                    .sum::<u64>()
            })
            .sum()
    }
}

/// A block opened for queries. Cheap to share: queries take `&self`.
#[derive(Debug)]
pub struct BlockReader {
    meta: BlockMeta,
    files: Arc<dyn BlockFiles>,
    index: IndexHeader,
    /// Sizes of the chunk segments read so far, checked headers included.
    segments: Mutex<HashMap<u32, u64>>,
    skipped: AtomicU64,
}

impl BlockReader {
    /// Reads the TOC, the symbol table and the postings offset table (the "index header") and keeps them
    /// in memory; series entries, postings lists and chunks are read by range on demand through `files`.
    pub fn open(files: Arc<dyn BlockFiles>, meta: BlockMeta) -> Result<Self, TsdbError> {
        let index = IndexHeader::open(files.as_ref(), &format!("block {}", meta.ulid))?;
        Ok(Self::with_index(files, meta, index))
    }

    /// As [`BlockReader::open`], with the index header taken from the file at `header_file` when it is valid,
    /// else read through `files` and written there for the next open (see `index_header`). Says where the
    /// header came from.
    pub fn open_with_header_file(
        files: Arc<dyn BlockFiles>,
        meta: BlockMeta,
        header_file: &Path,
    ) -> Result<(Self, HeaderOrigin), TsdbError> {
        Self::open_with_header_file_on(files, meta, header_file, &StdFiles)
    }

    /// [`BlockReader::open_with_header_file`], writing through `creator`.
    pub(crate) fn open_with_header_file_on(
        files: Arc<dyn BlockFiles>,
        meta: BlockMeta,
        header_file: &Path,
        creator: &dyn FileCreator,
    ) -> Result<(Self, HeaderOrigin), TsdbError> {
        let what = format!("block {}", meta.ulid);
        let (index, origin) = index_header::open(files.as_ref(), &what, &meta.ulid, header_file, creator)?;
        Ok((Self::with_index(files, meta, index), origin))
    }

    fn with_index(files: Arc<dyn BlockFiles>, meta: BlockMeta, index: IndexHeader) -> Self {
        Self {
            meta,
            files,
            index,
            segments: Mutex::new(HashMap::new()),
            skipped: AtomicU64::new(0),
        }
    }

    /// A local block directory (`meta.json`, then index and chunks through [`LocalBlockFiles`]).
    pub fn open_dir(dir: &Path) -> Result<Self, TsdbError> {
        let meta = BlockMeta::read(dir)?;
        Self::open(Arc::new(LocalBlockFiles::new(dir)), meta)
    }

    /// The block's `meta.json`.
    pub fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    /// Chunks skipped so far because their encoding is unknown.
    pub fn skipped_chunks(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    /// Series matching all `matchers` with a chunk overlapping `[mint, maxt]` (inclusive), sorted by labels,
    /// with those chunks and their encodings (chunks of unknown encodings are skipped, see the module docs). A series
    /// left without chunks after skipping is left out. [`BlockReader::plan_select`] then
    /// [`BlockReader::read_selected`].
    pub fn select(&self, mint: i64, maxt: i64, matchers: &[Matcher]) -> Result<Vec<SeriesChunks>, TsdbError> {
        let plan = self.plan_select(mint, maxt, matchers)?;
        self.read_selected(plan)
    }

    /// The index half of [`BlockReader::select`]: the matching series and their chunk references, read from
    /// the index only, so a caller can weigh the cost (series, chunks) before any chunk is read.
    pub fn plan_select(&self, mint: i64, maxt: i64, matchers: &[Matcher]) -> Result<SelectPlan, TsdbError> {
        let mut selected: Vec<SeriesEntry> = self
            .matching(matchers)?
            .into_iter()
            .filter_map(|mut s| {
                s.chunks.retain(|c| c.min_time <= maxt && c.max_time >= mint);
                (!s.chunks.is_empty()).then_some(s)
            })
            .collect();
        selected.sort_unstable_by(|a, b| a.labels.cmp(&b.labels));
        Ok(SelectPlan { selected })
    }

    /// The chunk half of [`BlockReader::select`]: reads the chunks `plan` names.
    pub fn read_selected(&self, plan: SelectPlan) -> Result<Vec<SeriesChunks>, TsdbError> {
        let selected = plan.selected;
        // All chunks, read in file order, then handed back to their series.
        let mut wanted: Vec<(u64, usize, usize)> = selected
            .iter()
            .enumerate()
            .flat_map(|(s, e)| e.chunks.iter().enumerate().map(move |(c, m)| (m.chunk_ref, s, c)))
            .collect();
        wanted.sort_unstable();
        let mut data: Vec<Vec<Option<(Encoding, Bytes)>>> =
            selected.iter().map(|s| vec![None; s.chunks.len()]).collect();
        for group in wanted.chunk_by(|a, b| a.0 >> 32 == b.0 >> 32) {
            let segment = (group[0].0 >> 32) as u32;
            let offsets: Vec<u64> = group.iter().map(|w| w.0 & 0xffff_ffff).collect();
            let frames = self.read_chunks(segment, &offsets)?;
            for (w, frame) in group.iter().zip(frames) {
                data[w.1][w.2] = frame;
            }
        }
        let mut out = Vec::with_capacity(selected.len());
        for (s, data) in selected.into_iter().zip(data) {
            let chunks: Vec<ChunkData> = s
                .chunks
                .iter()
                .zip(data)
                .filter_map(|(m, d)| {
                    d.map(|(encoding, data)| ChunkData {
                        encoding,
                        min_time: m.min_time,
                        max_time: m.max_time,
                        data,
                    })
                })
                .collect();
            if !chunks.is_empty() {
                out.push(SeriesChunks {
                    labels: s.labels,
                    chunks,
                });
            }
        }
        Ok(out)
    }

    /// Ids of every series of the block, ascending. A block's series ids follow its series' label order (the
    /// index stores entries sorted by labels), so reading them in batches with [`BlockReader::read_series`]
    /// walks the block in label order without holding more than a batch: how compaction streams a block.
    pub fn series_ids(&self) -> Result<Vec<u32>, TsdbError> {
        let all = self.index.all_postings()?;
        Ok(self.postings(&[all])?.into_iter().flatten().collect())
    }

    /// The series `ids` (ascending, from [`BlockReader::series_ids`]) with all their chunks, in id order (which
    /// is label order). Chunks of a skipped encoding are left out and counted as in [`BlockReader::select`].
    pub fn read_series(&self, ids: &[u32]) -> Result<Vec<SeriesChunks>, TsdbError> {
        let selected = self.read_series_entries(ids)?;
        if let Some(w) = selected.windows(2).find(|w| w[0].labels >= w[1].labels) {
            return Err(self.index.corrupt(
                self.index.toc.series,
                format!("series {} comes before {} in the index", w[0].labels, w[1].labels),
            ));
        }
        self.read_selected(SelectPlan { selected })
    }

    /// Labels of the series matching all `matchers` with a chunk overlapping `[mint, maxt]`, sorted. Only the
    /// index is read (a series whose chunks are all of a skipped encoding is still listed).
    pub fn series(&self, mint: i64, maxt: i64, matchers: &[Matcher]) -> Result<Vec<Labels>, TsdbError> {
        let mut out: Vec<Labels> = self
            .matching(matchers)?
            .into_iter()
            .filter(|s| s.chunks.iter().any(|c| c.min_time <= maxt && c.max_time >= mint))
            .map(|s| s.labels)
            .collect();
        out.sort_unstable();
        Ok(out)
    }

    /// Label names, sorted: every name in the block without matchers, else the names of the matching series.
    pub fn label_names(&self, matchers: &[Matcher]) -> Result<Vec<String>, TsdbError> {
        if matchers.is_empty() {
            return Ok(self.index.label_names().map(str::to_owned).collect());
        }
        let names: BTreeSet<String> = self
            .matching(matchers)?
            .into_iter()
            .flat_map(|s| s.labels.iter().map(|l| l.name.to_owned()).collect::<Vec<_>>())
            .collect();
        Ok(names.into_iter().collect())
    }

    /// Values of label `name`, sorted: every value in the block without matchers, else the values the
    /// matching series have.
    pub fn label_values(&self, name: &str, matchers: &[Matcher]) -> Result<Vec<String>, TsdbError> {
        if matchers.is_empty() {
            return self
                .index
                .values_of(name)
                .iter()
                .map(|v| self.index.symbol(v.value).map(str::to_owned))
                .collect::<Result<_, _>>()
                .map_err(|e| self.index.corrupt(self.index.toc.postings_table, e));
        }
        let values: BTreeSet<String> = self
            .matching(matchers)?
            .into_iter()
            .filter_map(|s| s.labels.get(name).map(str::to_owned))
            .collect();
        Ok(values.into_iter().collect())
    }

    /// Series entries matching all `matchers`, in series id order.
    ///
    /// As the head: candidates are the intersection of the postings of the `name="value"` matchers (value
    /// not empty), or without one the union of the postings of the values matching the first matcher that
    /// does not match "", or else all series; the other matchers are checked on each candidate's labels.
    fn matching(&self, matchers: &[Matcher]) -> Result<Vec<SeriesEntry>, TsdbError> {
        let mut equal: Vec<Range<u64>> = Vec::new();
        let mut rest: Vec<&Matcher> = Vec::new();
        let mut none = false;
        for m in matchers {
            if m.kind() == MatchType::Equal && !m.value().is_empty() {
                match self.index.postings_range(m.name(), m.value()) {
                    Some(r) => equal.push(r),
                    None => none = true,
                }
            } else {
                rest.push(m);
            }
        }
        if none {
            return Ok(Vec::new());
        }
        let candidates: Vec<u32> = if !equal.is_empty() {
            let lists = self.postings(&equal)?;
            let mut lists = lists.into_iter();
            let first = lists.next().unwrap_or_default();
            lists.fold(first, |acc, l| intersect(&acc, &l))
        } else if let Some(pos) = rest.iter().position(|m| !m.matches_empty()) {
            let m = rest.remove(pos);
            let ranges: Vec<Range<u64>> = self
                .index
                .values_of(m.name())
                .iter()
                .filter(|v| self.index.symbol(v.value).is_ok_and(|s| m.matches(s)))
                .map(|v| v.start..v.end)
                .collect();
            let mut ids: Vec<u32> = self.postings(&ranges)?.into_iter().flatten().collect();
            ids.sort_unstable();
            ids.dedup();
            ids
        } else {
            let all = self.index.all_postings()?;
            self.postings(&[all])?.into_iter().flatten().collect()
        };
        let mut entries = self.read_series_entries(&candidates)?;
        entries.retain(|s| rest.iter().all(|m| m.matches(s.labels.get(m.name()).unwrap_or(""))));
        Ok(entries)
    }

    /// The postings lists at `ranges`.
    fn postings(&self, ranges: &[Range<u64>]) -> Result<Vec<Vec<u32>>, TsdbError> {
        let bytes = fetch_ranges(self.files.as_ref(), INDEX_FILENAME, ranges)?;
        bytes
            .iter()
            .zip(ranges)
            .map(|(b, r)| decode_postings(b).map_err(|e| self.index.corrupt(r.start, format!("postings list: {e}"))))
            .collect()
    }

    /// The series entries of `ids` (ascending).
    fn read_series_entries(&self, ids: &[u32]) -> Result<Vec<SeriesEntry>, TsdbError> {
        let offsets: Vec<u64> = ids.iter().map(|&id| u64::from(id) * SERIES_ALIGN).collect();
        let start = self.index.toc.series;
        if let Some(&bad) = offsets.iter().find(|&&o| o < start) {
            return Err(self.index.corrupt(bad, "series id points before the series section"));
        }
        let corrupt = |at: u64, reason: String| self.index.corrupt(at, format!("series entry: {reason}"));
        let frames = fetch_frames(
            self.files.as_ref(),
            INDEX_FILENAME,
            self.index.series_end,
            &offsets,
            SERIES_GUESS,
            &super::index::series_frame_total,
            &corrupt,
        )?;
        frames
            .iter()
            .zip(&offsets)
            .map(|(f, &at)| self.index.decode_series(f).map_err(|e| corrupt(at, e)))
            .collect()
    }

    /// The encoding and data of the chunks at `offsets` (ascending) of segment `segment`; `None` for unknown
    /// encodings.
    fn read_chunks(&self, segment: u32, offsets: &[u64]) -> Result<Vec<Option<(Encoding, Bytes)>>, TsdbError> {
        let name = segment_name(segment);
        let what = format!("block {} {name}", self.meta.ulid);
        let corrupt = |at: u64, reason: String| TsdbError::Corruption {
            what: format!("{what} offset {at}"),
            reason,
        };
        let size = self.segment_size(segment, &name, &corrupt)?;
        if let Some(&bad) = offsets.iter().find(|&&o| o < SEGMENT_HEADER_LEN) {
            return Err(corrupt(
                bad,
                "chunk reference points into the segment header".to_owned(),
            ));
        }
        let frames = fetch_frames(
            self.files.as_ref(),
            &name,
            size,
            offsets,
            CHUNK_GUESS,
            &frame_total,
            &corrupt,
        )?;
        let mut skipped = 0;
        let out = frames
            .into_iter()
            .zip(offsets)
            .map(|(frame, &at)| {
                let (encoding, data) = decode_frame(&frame).map_err(|e| corrupt(at, e))?;
                // Bit 7 flags out-of-order chunks in head chunk files only; in a block it makes the byte unknown.
                let encoding = match Encoding::from_u8(encoding) {
                    Some(e) if e != Encoding::None && encoding & 0x80 == 0 => e,
                    _ => {
                        skipped += 1;
                        return Ok(None);
                    }
                };
                let start = data.as_ptr() as usize - frame.as_ptr() as usize;
                Ok(Some((encoding, frame.slice(start..start + data.len()))))
            })
            .collect::<Result<Vec<_>, TsdbError>>()?;
        if skipped > 0 {
            self.skipped.fetch_add(skipped, Ordering::Relaxed);
            tracing::debug!(block = %self.meta.ulid, segment = %name, skipped, "skipped chunks of unknown encodings");
        }
        Ok(out)
    }

    fn segment_size(&self, segment: u32, name: &str, corrupt: super::fetch::Corrupt<'_>) -> Result<u64, TsdbError> {
        let mut sizes = self.segments.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(&s) = sizes.get(&segment) {
            return Ok(s);
        }
        let size = self.files.size(name)?;
        if size < SEGMENT_HEADER_LEN {
            return Err(corrupt(
                0,
                format!("segment of {size} bytes is shorter than its header"),
            ));
        }
        let header = self.files.read(name, 0..SEGMENT_HEADER_LEN)?;
        check_header(&header).map_err(|e| corrupt(0, e))?;
        sizes.insert(segment, size);
        Ok(size)
    }
}
