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
    for (run, bytes) in frame_runs(offsets, limit, guess) {
        let (start, end) = (bytes.start, bytes.end);
        if start >= limit {
            return Err(corrupt(start, format!("offset beyond the end at {limit}")));
        }
        let buf = files.read(name, start..end)?;
        for &off in &offsets[run] {
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
    }
    Ok(out)
}

/// How [`fetch_frames`] reads the frames at `offsets` of a file ending by `limit`: one read per run of offsets
/// close to each other, as (the run's positions in `offsets`, the bytes read). A frame longer than `guess`
/// whose end falls past its run's read costs one more read of its own.
pub(crate) fn frame_runs(offsets: &[u64], limit: u64, guess: u64) -> Vec<(Range<usize>, Range<u64>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < offsets.len() {
        let start = offsets[i];
        let mut end = start.saturating_add(guess).min(limit);
        let mut j = i + 1;
        while let Some(&off) = offsets.get(j) {
            let far = off > end.saturating_add(MAX_GAP) || off.saturating_sub(start) > MAX_RUN;
            // Out-of-order offsets (never produced by the callers) simply start a new read.
            if off >= limit || off < start || far {
                break;
            }
            end = end.max(off.saturating_add(guess).min(limit));
            j += 1;
        }
        out.push((i..j, start..end));
        i = j;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One file in memory that counts reads.
    #[derive(Debug, Default)]
    struct OneFile(Vec<u8>, std::sync::atomic::AtomicUsize);

    impl BlockFiles for OneFile {
        fn size(&self, _: &str) -> Result<u64, TsdbError> {
            Ok(self.0.len() as u64)
        }

        fn read(&self, _: &str, r: Range<u64>) -> Result<Bytes, TsdbError> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            assert!(
                r.start <= r.end && r.end <= self.0.len() as u64,
                "read {r:?} outside the file"
            );
            Ok(Bytes::copy_from_slice(&self.0[r.start as usize..r.end as usize]))
        }
    }

    /// Frames are `len u16 | len bytes`.
    fn total(b: &[u8]) -> Option<DecodeResult<u64>> {
        b.get(..2).map(|h| Ok(2 + u64::from(u16::from_be_bytes([h[0], h[1]]))))
    }

    fn corrupt(at: u64, reason: String) -> TsdbError {
        TsdbError::Corruption {
            what: format!("offset {at}"),
            reason,
        }
    }

    #[test]
    fn frames_near_far_large_and_out_of_order_come_back_whole() {
        let mut file = Vec::new();
        let mut offsets = Vec::new();
        for (i, len) in [3usize, 5000, 1, 0, 7, 40_000, 2].into_iter().enumerate() {
            if i == 5 {
                file.resize(file.len() + 100_000, 0xee);
            }
            offsets.push(file.len() as u64);
            file.extend_from_slice(&(len as u16).to_be_bytes());
            file.extend(std::iter::repeat_n(i as u8, len));
        }
        let files = OneFile(file.clone(), Default::default());
        let limit = file.len() as u64;
        let mut asked = offsets.clone();
        asked.swap(1, 2);
        let got = fetch_frames(&files, "f", limit, &asked, 16, &total, &corrupt).unwrap();
        for (off, frame) in asked.iter().zip(&got) {
            let len = u16::from_be_bytes([frame[0], frame[1]]) as usize;
            assert_eq!(frame.len(), 2 + len);
            assert_eq!(&frame[..], &file[*off as usize..*off as usize + 2 + len]);
        }
        let reads = files.1.load(std::sync::atomic::Ordering::Relaxed);
        assert!(reads < 2 * asked.len(), "{reads} reads for {} frames", asked.len());
        // A frame running past the limit, and an offset beyond it.
        let err = fetch_frames(&files, "f", offsets[1] + 100, &offsets[1..2], 16, &total, &corrupt).unwrap_err();
        assert!(err.to_string().contains("runs past"), "{err}");
        assert!(fetch_frames(&files, "f", limit, &[limit], 16, &total, &corrupt).is_err());
        let ranges = [offsets[5]..offsets[6], offsets[0]..offsets[1], offsets[2]..offsets[3]];
        let got = fetch_ranges(&files, "f", &ranges).unwrap();
        for (r, b) in ranges.iter().zip(&got) {
            assert_eq!(&b[..], &file[r.start as usize..r.end as usize]);
        }
    }
}
