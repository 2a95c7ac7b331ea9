//! Replay: read a whole WAL once at startup, repairing a torn or corrupt tail.

use std::fmt;
use std::fs::OpenOptions;
use std::io;
use std::path::Path;

use crate::WalError;
use crate::checkpoint::{checkpoint_path, last_checkpoint};
use crate::reader::{Position, Reader};
use crate::segment::{PAGE_SIZE, list_segments, segment_path, sync_dir};

/// What a [`replay`] read and repaired.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Records handed to the callback (checkpoint included).
    pub records: u64,
    /// Segments opened (checkpoint included).
    pub segments: u32,
    /// Bytes of segment files consumed (records and padding), up to the corruption if any.
    pub bytes: u64,
    /// The checkpoint read first, if any (`checkpoint.<n>`; WAL segments up to n were skipped).
    pub checkpoint: Option<u32>,
    /// Corruption found in that checkpoint, already repaired (its `segment` is within the checkpoint).
    pub checkpoint_repaired: Option<Corruption>,
    /// The corruption that ended the replay of the WAL segments, already repaired.
    pub repaired: Option<Corruption>,
}

/// Where a WAL stopped being readable, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corruption {
    pub segment: u32,
    /// Start of the first unreadable record: everything before it was replayed and kept.
    pub offset: u64,
    pub reason: String,
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "segment {:08} offset {}: {}", self.segment, self.offset, self.reason)
    }
}

/// Reads every record of the WAL in `dir` in order and calls `f` with each: the last checkpoint's records
/// first (see [`crate::checkpoint`]), then those of the segments after it.
///
/// A torn or corrupt tail (bad CRC, bad fragment type, truncated fragment, zeros inside a record or data after
/// the padding that closes a segment, a missing segment) ends the replay and is repaired as Prometheus does:
/// the segment is cut at the start of the bad record (its last page zero-padded), later segments are deleted,
/// and the report says where and why. Records after a corruption are lost even if readable, because later
/// records may depend on earlier ones. A corrupt checkpoint is repaired the same way inside the checkpoint, and
/// the segments after it are still replayed. A missing directory replays as empty.
///
/// The callback's error stops the replay at once (nothing is repaired) and is returned; WAL errors are
/// converted into the same type, so `E` is typically the caller's crate error with a `From<WalError>`.
pub fn replay<E, F>(dir: &Path, mut f: F) -> Result<ReplayReport, E>
where
    F: FnMut(&[u8]) -> Result<(), E>,
    E: From<WalError>,
{
    let mut report = ReplayReport::default();
    let mut from = Position::default();
    if let Some(cp) = last_checkpoint(dir)? {
        report.checkpoint = Some(cp);
        report.checkpoint_repaired = replay_dir(&checkpoint_path(dir, cp), Position::default(), &mut f, &mut report)?;
        from = Position {
            segment: cp.saturating_add(1),
            offset: 0,
        };
    }
    report.repaired = replay_dir(dir, from, &mut f, &mut report)?;
    Ok(report)
}

/// [`replay`] of the WAL segments from `from` on, without the checkpoint: segments before `from.segment` are
/// skipped and `from.segment` is read from `from.offset`, a record boundary such as the position a chunk
/// snapshot was taken at. Repairs like [`replay`].
pub fn replay_from<E, F>(dir: &Path, from: Position, mut f: F) -> Result<ReplayReport, E>
where
    F: FnMut(&[u8]) -> Result<(), E>,
    E: From<WalError>,
{
    let mut report = ReplayReport::default();
    report.repaired = replay_dir(dir, from, &mut f, &mut report)?;
    Ok(report)
}

/// Replays the segments of one directory into `report`; returns the corruption it repaired, if any.
fn replay_dir<E, F>(dir: &Path, from: Position, f: &mut F, report: &mut ReplayReport) -> Result<Option<Corruption>, E>
where
    F: FnMut(&[u8]) -> Result<(), E>,
    E: From<WalError>,
{
    let mut reader = Reader::open_from(dir, from)?;
    let mut repaired = None;
    loop {
        match reader.next_record() {
            Ok(Some(rec)) => {
                f(rec.data)?;
                report.records += 1;
            }
            Ok(None) => break,
            Err(WalError::Corruption {
                segment,
                offset,
                reason,
            }) => {
                let corruption = Corruption {
                    segment,
                    offset,
                    reason,
                };
                repair(dir, &corruption)?;
                repaired = Some(corruption);
                break;
            }
            Err(e) => return Err(e.into()),
        }
    }
    report.segments += reader.segments_opened();
    report.bytes += reader.bytes_read();
    Ok(repaired)
}

/// Repairs `dir` after `corruption`: deletes the segments after it and cuts its segment at its offset, then
/// zero-pads that last page to the page boundary (the state a Prometheus repair leaves), and fsyncs.
pub fn repair(dir: &Path, corruption: &Corruption) -> Result<(), WalError> {
    tracing::warn!(
        dir = %dir.display(),
        segment = corruption.segment,
        offset = corruption.offset,
        reason = %corruption.reason,
        "repairing corrupt wal: cutting the segment and deleting later ones"
    );
    for index in list_segments(dir)?.into_iter().rev() {
        if index <= corruption.segment {
            break;
        }
        let path = segment_path(dir, index);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(WalError::io(&path, e)),
        }
    }
    let path = segment_path(dir, corruption.segment);
    let file = OpenOptions::new()
        .write(true)
        .open(&path)
        .map_err(|e| WalError::io(&path, e))?;
    let page = PAGE_SIZE as u64;
    let padded = corruption.offset.div_ceil(page) * page;
    // Shrinking first zeroes the bytes between the cut and the page end when the file grows back.
    file.set_len(corruption.offset).map_err(|e| WalError::io(&path, e))?;
    file.set_len(padded).map_err(|e| WalError::io(&path, e))?;
    file.sync_all().map_err(|e| WalError::io(&path, e))?;
    sync_dir(dir)
}

#[cfg(test)]
mod tests;
