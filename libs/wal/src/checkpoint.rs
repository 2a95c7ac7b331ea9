//! Checkpoints: the records of old segments still needed, folded into `checkpoint.%08d` so the segments can go.
//!
//! Layout (Prometheus `tsdb/wlog/checkpoint.go`): `wal/checkpoint.N/` is a directory of segments in the WAL
//! format holding what a replay needs from the previous checkpoint and segments up to N. It is built in
//! `checkpoint.N.tmp` and renamed when complete, so a crash never leaves a partial checkpoint under the real
//! name. A replay reads the last checkpoint, then segments after N. Which records to keep is the caller's
//! business (this crate does not know what records mean): a filter decides per record.

use std::io;
use std::path::{Path, PathBuf};

use crate::reader::{Position, Reader};
use crate::segment::{list_segments, segment_path, sync_dir};
use crate::{Wal, WalError, WalOptions};

const PREFIX: &str = "checkpoint.";
const TMP_SUFFIX: &str = ".tmp";
/// Records are handed to the checkpoint writer in batches of about this many bytes.
const BATCH_BYTES: usize = 1 << 20;

/// The directory of checkpoint `index` in `wal_dir`.
pub fn checkpoint_path(wal_dir: &Path, index: u32) -> PathBuf {
    wal_dir.join(format!("{PREFIX}{index:08}"))
}

/// Indices of the complete checkpoints in `wal_dir`, ascending (temporary ones are ignored).
pub fn list_checkpoints(wal_dir: &Path) -> Result<Vec<u32>, WalError> {
    let mut out: Vec<u32> = checkpoint_entries(wal_dir)?
        .into_iter()
        .filter_map(|(name, _)| parse_name(&name))
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// The newest complete checkpoint in `wal_dir`.
pub fn last_checkpoint(wal_dir: &Path) -> Result<Option<u32>, WalError> {
    Ok(list_checkpoints(wal_dir)?.last().copied())
}

/// What to do with one record while checkpointing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Leave it out.
    Drop,
    /// Copy it as it is.
    Original,
    /// Write the bytes the filter put in its output buffer instead (e.g. a record with some entries removed).
    Replaced,
}

/// What [`write_checkpoint`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckpointStats {
    /// The checkpoint written (`checkpoint.<index>`).
    pub index: u32,
    /// The previous checkpoint folded in.
    pub previous: Option<u32>,
    /// The first and last WAL segments folded in.
    pub segments: Option<(u32, u32)>,
    /// Records the filter saw.
    pub records_read: u64,
    /// Records written to the checkpoint.
    pub records_written: u64,
}

/// Writes `checkpoint.<through>` from the last checkpoint (if any) and the segments after it up to `through`,
/// passing every record to `filter`, which returns what to keep and may write a replacement into its buffer
/// (cleared before each call). `opts` are the checkpoint's own segment options.
///
/// Corruption in the sources is an error (replay and repair the WAL first). Nothing is deleted: afterwards call
/// [`delete_segments_before`]`(through + 1)` and [`delete_checkpoints_before`]`(through)`. The segment being
/// written must be after `through` (see [`Wal::cut_segment`]).
pub fn write_checkpoint<E, F>(
    wal_dir: &Path,
    through: u32,
    opts: WalOptions,
    mut filter: F,
) -> Result<CheckpointStats, E>
where
    F: FnMut(&[u8], &mut Vec<u8>) -> Result<Keep, E>,
    E: From<WalError>,
{
    let previous = last_checkpoint(wal_dir)?;
    if let Some(p) = previous
        && p >= through
    {
        return Err(WalError::InvalidOptions(format!("checkpoint {p:08} already covers segment {through:08}")).into());
    }
    let first = previous.map_or(0, |p| p + 1);
    let segments: Vec<u32> = list_segments(wal_dir)?
        .into_iter()
        .filter(|&s| s >= first && s <= through)
        .collect();
    if segments.last() != Some(&through) {
        return Err(
            WalError::InvalidOptions(format!("segment {through:08} to checkpoint through does not exist")).into(),
        );
    }
    remove_temporaries(wal_dir)?;
    let tmp = wal_dir.join(format!("{PREFIX}{through:08}{TMP_SUFFIX}"));
    let result = build(wal_dir, &tmp, previous, &segments, through, opts, &mut filter);
    let stats = match result {
        Ok(stats) => stats,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
    };
    let dest = checkpoint_path(wal_dir, through);
    std::fs::rename(&tmp, &dest).map_err(|e| WalError::io(&dest, e))?;
    sync_dir(wal_dir)?;
    Ok(stats)
}

fn build<E, F>(
    wal_dir: &Path,
    tmp: &Path,
    previous: Option<u32>,
    segments: &[u32],
    through: u32,
    opts: WalOptions,
    filter: &mut F,
) -> Result<CheckpointStats, E>
where
    F: FnMut(&[u8], &mut Vec<u8>) -> Result<Keep, E>,
    E: From<WalError>,
{
    let mut stats = CheckpointStats {
        index: through,
        previous,
        segments: segments.first().copied().zip(segments.last().copied()),
        ..CheckpointStats::default()
    };
    let mut out = Wal::open(tmp, opts)?;
    let mut batch: Vec<Vec<u8>> = Vec::new();
    let mut batch_bytes = 0;
    let mut replacement = Vec::new();
    let mut readers = Vec::new();
    if let Some(p) = previous {
        readers.push(Reader::open(&checkpoint_path(wal_dir, p))?);
    }
    if let Some(&first) = segments.first() {
        readers.push(Reader::open_range(
            wal_dir,
            Position {
                segment: first,
                offset: 0,
            },
            through,
        )?);
    }
    for mut reader in readers {
        while let Some(rec) = reader.next_record()? {
            stats.records_read += 1;
            replacement.clear();
            let kept = match filter(rec.data, &mut replacement)? {
                Keep::Drop => continue,
                Keep::Original => rec.data.to_vec(),
                Keep::Replaced => std::mem::take(&mut replacement),
            };
            batch_bytes += kept.len();
            batch.push(kept);
            if batch_bytes >= BATCH_BYTES {
                flush(&mut out, &mut batch, &mut stats)?;
                batch_bytes = 0;
            }
        }
    }
    flush(&mut out, &mut batch, &mut stats)?;
    out.close()?;
    Ok(stats)
}

fn flush(out: &mut Wal, batch: &mut Vec<Vec<u8>>, stats: &mut CheckpointStats) -> Result<(), WalError> {
    let refs: Vec<&[u8]> = batch.iter().map(|r| r.as_slice()).collect();
    out.log(&refs)?;
    stats.records_written += batch.len() as u64;
    batch.clear();
    Ok(())
}

/// Deletes the segments of `wal_dir` with an index below `before` (folded into a checkpoint); returns how many.
pub fn delete_segments_before(wal_dir: &Path, before: u32) -> Result<u32, WalError> {
    let mut n = 0;
    for index in list_segments(wal_dir)?.into_iter().filter(|&s| s < before) {
        remove(&segment_path(wal_dir, index), false)?;
        n += 1;
    }
    if n > 0 {
        sync_dir(wal_dir)?;
    }
    Ok(n)
}

/// Deletes the checkpoints of `wal_dir` with an index below `before`, and leftover temporary ones; returns how
/// many complete checkpoints were deleted.
pub fn delete_checkpoints_before(wal_dir: &Path, before: u32) -> Result<u32, WalError> {
    let mut n = 0;
    for index in list_checkpoints(wal_dir)?.into_iter().filter(|&c| c < before) {
        remove(&checkpoint_path(wal_dir, index), true)?;
        n += 1;
    }
    remove_temporaries(wal_dir)?;
    if n > 0 {
        sync_dir(wal_dir)?;
    }
    Ok(n)
}

fn remove_temporaries(wal_dir: &Path) -> Result<(), WalError> {
    for (name, path) in checkpoint_entries(wal_dir)? {
        if name.ends_with(TMP_SUFFIX) {
            remove(&path, true)?;
        }
    }
    Ok(())
}

fn remove(path: &Path, dir: bool) -> Result<(), WalError> {
    let r = if dir {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    match r {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(WalError::io(path, e)),
    }
}

/// Directories in `wal_dir` whose names start with the checkpoint prefix.
fn checkpoint_entries(wal_dir: &Path) -> Result<Vec<(String, PathBuf)>, WalError> {
    let entries = match std::fs::read_dir(wal_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(WalError::io(wal_dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| WalError::io(wal_dir, e))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if name.starts_with(PREFIX) && entry.file_type().map_err(|e| WalError::io(entry.path(), e))?.is_dir() {
            out.push((name, entry.path()));
        }
    }
    Ok(out)
}

/// `checkpoint.` followed by decimal digits only.
fn parse_name(name: &str) -> Option<u32> {
    let digits = name.strip_prefix(PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests;
