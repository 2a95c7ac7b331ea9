//! Startup scan of `chunks_head/`: validate every chunk, cut the files at the first bad one, and list each
//! series' chunks.

use std::collections::BTreeMap;
use std::path::Path;

use super::format::{FILE_HEADER_LEN, HEAD_ENCODINGS, OOO_FLAG, check_file_header, chunk_ref, decode_chunk};
use super::{MappedChunk, file_path, map_file};
use crate::error::TsdbError;
use crate::file::sync_dir;

/// Where `chunks_head/` stopped being readable, and what was cut off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunksHeadCorruption {
    /// Sequence number of the file (its name).
    pub file: u32,
    /// Byte offset of the first bad chunk; the file was cut there (a file with a bad header is deleted).
    pub offset: u64,
    /// What was wrong.
    pub reason: String,
    /// Later files deleted with it.
    pub files_deleted: u32,
}

/// The chunks a scan found, grouped by series: sorted by (series ref, chunk ref), so each series' chunks are
/// adjacent and in file (time) order. A million series cost a few flat arrays and one sort instead of a hash
/// map of a million small vectors (which took a quarter of a snapshot load).
#[derive(Debug, Default)]
pub(crate) struct ChunksBySeries {
    /// The series ref of each chunk.
    refs: Vec<u64>,
    chunks: Vec<MappedChunk>,
    /// Whether each chunk was taken.
    taken: Vec<bool>,
    /// Where the last [`Self::take`] ended: loads ask for series in ascending ref order (snapshots are written
    /// in that order, WAL series records mostly are), so the next search gallops forward from here instead of
    /// bisecting the whole list.
    cursor: usize,
}

impl ChunksBySeries {
    /// Groups `chunks` (in file order) by series.
    pub(crate) fn new(mut chunks: Vec<(u64, MappedChunk)>) -> Self {
        // Chunk refs grow in file order, so sorting by both keeps each series' chunks in time order.
        chunks.sort_unstable_by_key(|(series, c)| (*series, c.chunk_ref));
        let (refs, chunks): (Vec<u64>, Vec<MappedChunk>) = chunks.into_iter().unzip();
        Self {
            taken: vec![false; refs.len()],
            refs,
            chunks,
            cursor: 0,
        }
    }

    /// Chunks not taken yet.
    pub(crate) fn len(&self) -> usize {
        self.taken.iter().filter(|t| !**t).count()
    }

    /// Distinct series whose chunks have not been taken: a WAL replay's estimate of the series it will create.
    pub(crate) fn untaken_series(&self) -> usize {
        let mut last = None;
        let mut n = 0;
        for (r, taken) in self.refs.iter().zip(&self.taken) {
            if !taken && last != Some(*r) {
                n += 1;
                last = Some(*r);
            }
        }
        n
    }

    /// Takes the chunks of `series_ref`, oldest first (`None` if it has none, or they were taken).
    pub(crate) fn take(&mut self, series_ref: u64) -> Option<&[MappedChunk]> {
        let from = self.find(series_ref);
        let n = self.refs[from..].iter().take_while(|&&s| s == series_ref).count();
        if n == 0 || self.taken[from] {
            return None;
        }
        self.taken[from..from + n].fill(true);
        self.cursor = from + n;
        Some(&self.chunks[from..from + n])
    }

    /// Puts back every chunk taken (a snapshot that failed to load half-way gave some away).
    pub(crate) fn untake_all(&mut self) {
        self.taken.fill(false);
        self.cursor = 0;
    }

    /// The index of the first entry of `series_ref` or above.
    fn find(&self, series_ref: u64) -> usize {
        let below = |i: usize| self.refs.get(i).is_some_and(|&s| s < series_ref);
        let start = self.cursor.min(self.refs.len());
        if start > 0 && !below(start - 1) {
            return self.refs.partition_point(|&s| s < series_ref);
        }
        // Gallop forward from the cursor: steps of 1, 2, 4... until past `series_ref`, then bisect that span.
        let (mut lo, mut step) = (start, 1);
        while below(lo + step - 1) {
            lo += step;
            step *= 2;
        }
        let hi = (lo + step).min(self.refs.len());
        lo + self.refs[lo..hi].partition_point(|&s| s < series_ref)
    }

    /// Drops the chunks (not taken yet) `keep` refuses; returns how many.
    pub(crate) fn drop_unless(&mut self, keep: impl Fn(&MappedChunk) -> bool) -> usize {
        let before = self.refs.len();
        let mut w = 0;
        for i in 0..before {
            if self.taken[i] || keep(&self.chunks[i]) {
                self.refs[w] = self.refs[i];
                self.chunks[w] = self.chunks[i];
                self.taken[w] = self.taken[i];
                w += 1;
            }
        }
        self.refs.truncate(w);
        self.chunks.truncate(w);
        self.taken.truncate(w);
        self.cursor = 0;
        before - w
    }

    /// Every chunk not taken yet, with its series ref.
    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &MappedChunk)> {
        self.refs
            .iter()
            .zip(&self.chunks)
            .zip(&self.taken)
            .filter(|(_, t)| !**t)
            .map(|((s, c), _)| (*s, c))
    }

    /// The chunks of `series_ref` not taken yet, oldest first.
    #[cfg(test)]
    pub(crate) fn of(&self, series_ref: u64) -> Vec<MappedChunk> {
        self.iter().filter(|(s, _)| *s == series_ref).map(|(_, c)| *c).collect()
    }
}

/// What a scan found.
#[derive(Debug, Default)]
pub(crate) struct ScanReport {
    /// Files kept, ascending.
    pub(crate) files: Vec<u32>,
    /// Chunks by series ref, in file order (which is time order within a series).
    pub(crate) chunks: ChunksBySeries,
    /// Newest chunk end per file.
    pub(crate) file_maxt: BTreeMap<u32, i64>,
    /// Chunks listed.
    pub(crate) num_chunks: u64,
    /// Valid chunks that are not in-order float or histogram chunks (out-of-order chunks written by Prometheus).
    pub(crate) skipped_chunks: u64,
    /// The repaired corruption, if any.
    pub(crate) corruption: Option<ChunksHeadCorruption>,
}

/// Sequence numbers of the chunk files in `dir`, ascending; a missing directory has none.
fn list_files(dir: &Path) -> Result<Vec<u32>, TsdbError> {
    let io = |source| TsdbError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(seq) = name.parse::<u32>()
            && entry.file_type().map_err(io)?.is_file()
        {
            out.push(seq);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Reads every chunk of every file in `dir`, checking CRCs. At the first unreadable chunk (torn write, CRC
/// mismatch, bad header) the file is cut there and later files are deleted: their chunks' samples are still in
/// the WAL, which the head replays next.
pub(crate) fn scan(dir: &Path) -> Result<ScanReport, TsdbError> {
    let files = list_files(dir)?;
    let mut report = ScanReport::default();
    let mut chunks = Vec::new();
    let mut bad: Option<(usize, u64, String)> = None;
    'files: for (i, &seq) in files.iter().enumerate() {
        let map = map_file(&file_path(dir, seq))?;
        let bytes: &[u8] = &map;
        if let Err(reason) = check_file_header(bytes) {
            bad = Some((i, 0, reason));
            break;
        }
        let mut offset = FILE_HEADER_LEN;
        while let Some(rest) = bytes.get(offset..).filter(|r| !r.is_empty()) {
            match decode_chunk(rest) {
                Ok(c) => {
                    if c.encoding & OOO_FLAG != 0 || !HEAD_ENCODINGS.contains(&c.encoding) {
                        report.skipped_chunks += 1;
                    } else {
                        chunks.push((
                            c.series_ref,
                            MappedChunk {
                                chunk_ref: chunk_ref(seq, offset as u32),
                                min_time: c.mint,
                                max_time: c.maxt,
                            },
                        ));
                        report.num_chunks += 1;
                        let e = report.file_maxt.entry(seq).or_insert(i64::MIN);
                        *e = (*e).max(c.maxt);
                    }
                    offset += c.len;
                }
                // Prometheus preallocates its files: zeros after the last chunk end the file.
                Err(_) if rest.iter().all(|&b| b == 0) => break,
                Err(reason) => {
                    bad = Some((i, offset as u64, reason));
                    break 'files;
                }
            }
        }
        report.files.push(seq);
    }
    report.chunks = ChunksBySeries::new(chunks);
    if let Some((i, offset, reason)) = bad {
        let seq = files[i];
        let later = &files[i + 1..];
        tracing::warn!(
            dir = %dir.display(),
            file = seq,
            offset,
            reason = %reason,
            later_files = later.len(),
            "chunks_head is corrupt: cutting the file at the bad chunk and deleting later files; the wal replays their samples"
        );
        for &s in later {
            remove(&file_path(dir, s))?;
        }
        let path = file_path(dir, seq);
        if offset < FILE_HEADER_LEN as u64 {
            remove(&path)?;
        } else {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(|source| TsdbError::Io {
                    path: path.clone(),
                    source,
                })?;
            f.set_len(offset)
                .and_then(|()| f.sync_all())
                .map_err(|source| TsdbError::Io {
                    path: path.clone(),
                    source,
                })?;
            report.files.push(seq);
        }
        sync_dir(dir).map_err(|source| TsdbError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        report.corruption = Some(ChunksHeadCorruption {
            file: seq,
            offset,
            reason,
            files_deleted: later.len() as u32,
        });
    }
    Ok(report)
}

fn remove(path: &Path) -> Result<(), TsdbError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(TsdbError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}
