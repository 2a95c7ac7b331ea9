//! Fetching many small pieces of one file with few reads: pieces close to each other are read as one range
//! (one GET against a bucket), then cut apart. Every read stays inside the file, whatever the bytes say.

use std::ops::Range;

use bytes::Bytes;

use super::encoding::DecodeResult;
use super::files::BlockFiles;
use crate::error::TsdbError;

/// Pieces closer than this are read together.
const MAX_GAP: u64 = 16 * 1024;
/// A combined read stops growing past this size.
const MAX_RUN: u64 = 1024 * 1024;

/// What failed, at which offset of the file.
pub(crate) type Corrupt<'a> = &'a dyn Fn(u64, String) -> TsdbError;

/// The bytes of `ranges` of file `name`, in the order given.
pub(crate) fn fetch_ranges(files: &dyn BlockFiles, name: &str, ranges: &[Range<u64>]) -> Result<Vec<Bytes>, TsdbError> {
    let mut order: Vec<usize> = (0..ranges.len()).collect();
    order.sort_unstable_by_key(|&i| ranges[i].start);
    let mut out = vec![Bytes::new(); ranges.len()];
    let mut i = 0;
    while i < order.len() {
        let start = ranges[order[i]].start;
        let mut end = ranges[order[i]].end.max(start);
        let mut j = i + 1;
        while let Some(&k) = order.get(j) {
            let r = &ranges[k];
            if r.start > end.saturating_add(MAX_GAP) || r.end.saturating_sub(start) > MAX_RUN {
                break;
            }
            end = end.max(r.end);
            j += 1;
        }
        let buf = files.read(name, start..end)?;
        for &k in &order[i..j] {
            let r = &ranges[k];
            let from = (r.start - start) as usize;
            let to = (r.end.max(r.start) - start) as usize;
            out[k] = buf.slice(from..to);
        }
        i = j;
    }
    Ok(out)
}

/// The frames (self-delimiting records) starting at `offsets` (ascending) of file `name`, which must end by
/// `limit`. `total` gives a frame's full length from its first bytes, or `None` while those are too few
/// to tell; `guess` is the size read past the last offset of a combined read.
pub(crate) fn fetch_frames(
    files: &dyn BlockFiles,
    name: &str,
    limit: u64,
    offsets: &[u64],
    guess: u64,
    total: &dyn Fn(&[u8]) -> Option<DecodeResult<u64>>,
    corrupt: Corrupt<'_>,
) -> Result<Vec<Bytes>, TsdbError> {
    let mut out = Vec::with_capacity(offsets.len());
    let mut i = 0;
    while i < offsets.len() {
        let start = offsets[i];
        if start >= limit {
            return Err(corrupt(start, format!("offset beyond the end at {limit}")));
        }
        let mut end = start.saturating_add(guess).min(limit);
        let mut j = i + 1;
        while let Some(&off) = offsets.get(j) {
            if off >= limit || off > end.saturating_add(MAX_GAP) || off.saturating_sub(start) > MAX_RUN {
                break;
            }
            end = end.max(off.saturating_add(guess).min(limit));
            j += 1;
        }
        let buf = files.read(name, start..end)?;
        for &off in &offsets[i..j] {
            let avail = buf.slice((off - start) as usize..);
            let len = match total(&avail) {
                Some(Ok(n)) => n,
                Some(Err(e)) => return Err(corrupt(off, e)),
                None => {
                    let head_end = off.saturating_add(16).min(limit);
                    if head_end <= off + avail.len() as u64 {
                        return Err(corrupt(off, "record header cut off by the end".to_owned()));
                    }
                    let head = files.read(name, off..head_end)?;
                    match total(&head) {
                        Some(Ok(n)) => n,
                        Some(Err(e)) => return Err(corrupt(off, e)),
                        None => return Err(corrupt(off, "record header cut off by the end".to_owned())),
                    }
                }
            };
            if off.checked_add(len).is_none_or(|e| e > limit) {
                return Err(corrupt(
                    off,
                    format!("record of {len} bytes runs past the end at {limit}"),
                ));
            }
            if len as usize <= avail.len() {
                out.push(avail.slice(..len as usize));
            } else {
                out.push(files.read(name, off..off + len)?);
            }
        }
        i = j;
    }
    Ok(out)
}
