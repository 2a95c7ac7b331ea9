use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::*;
use crate::file::DurableFile;
use crate::segment::{FLAG_SNAPPY, TYPE_FIRST, TYPE_LAST, TYPE_MIDDLE};

fn opts(pages: usize, compress: bool) -> WalOptions {
    WalOptions {
        segment_size: pages * PAGE_SIZE,
        compress,
    }
}

fn read_segment(dir: &Path, index: u32) -> Vec<u8> {
    std::fs::read(segment_path(dir, index)).unwrap()
}

fn replay_all(dir: &Path) -> (Vec<Vec<u8>>, crate::ReplayReport) {
    let mut out = Vec::new();
    let report = crate::replay(dir, |r: &[u8]| -> Result<(), WalError> {
        out.push(r.to_vec());
        Ok(())
    })
    .unwrap();
    (out, report)
}

/// Deterministic bytes that snappy cannot shrink.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn small_record_golden_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let mut wal = Wal::open(dir.path(), opts(4, false)).unwrap();
    wal.log(&[b"hello"]).unwrap();
    let crc = crc32c::crc32c(b"hello").to_be_bytes();
    let mut want = vec![0x01, 0x00, 0x05, crc[0], crc[1], crc[2], crc[3]];
    want.extend_from_slice(b"hello");
    // Written with write(2) before log returns; the partial page is not padded yet.
    assert_eq!(read_segment(dir.path(), 0), want);
    assert_eq!(wal.position(), Position { segment: 0, offset: 12 });
    assert_eq!(wal.bytes_written(), 12);
    wal.close().unwrap();
    want.resize(PAGE_SIZE, 0);
    assert_eq!(read_segment(dir.path(), 0), want, "close pads the last page");
}

#[test]
fn empty_record_is_a_full_fragment_of_length_zero() {
    let dir = tempfile::tempdir().unwrap();
    let mut wal = Wal::open(dir.path(), opts(4, true)).unwrap();
    wal.log(&[b""]).unwrap();
    assert_eq!(read_segment(dir.path(), 0), vec![0x01, 0, 0, 0, 0, 0, 0]);
}

#[test]
fn record_spanning_pages_is_first_middle_last() {
    let dir = tempfile::tempdir().unwrap();
    let mut wal = Wal::open(dir.path(), opts(4, false)).unwrap();
    let rec = noise(2 * PAGE_SIZE + 100, 1);
    wal.log(&[&rec]).unwrap();
    let bytes = read_segment(dir.path(), 0);
    let per_page = PAGE_SIZE - HEADER_SIZE;
    assert_eq!(bytes[0], TYPE_FIRST);
    assert_eq!(u16::from_be_bytes([bytes[1], bytes[2]]) as usize, per_page);
    assert_eq!(bytes[PAGE_SIZE], TYPE_MIDDLE);
    assert_eq!(bytes[2 * PAGE_SIZE], TYPE_LAST);
    let last_len = rec.len() - 2 * per_page;
    assert_eq!(
        u16::from_be_bytes([bytes[2 * PAGE_SIZE + 1], bytes[2 * PAGE_SIZE + 2]]) as usize,
        last_len
    );
    assert_eq!(bytes.len(), 2 * PAGE_SIZE + HEADER_SIZE + last_len);
    assert_eq!(&bytes[2 * PAGE_SIZE + HEADER_SIZE..], &rec[2 * per_page..]);
}

#[test]
fn page_with_less_than_a_header_left_is_padded() {
    let dir = tempfile::tempdir().unwrap();
    let mut wal = Wal::open(dir.path(), opts(4, false)).unwrap();
    // Leaves 3 bytes in the first page: too few for a header, so they are zeros and the next record starts on
    // the next page.
    let first = vec![7u8; PAGE_SIZE - HEADER_SIZE - 3];
    wal.log(&[&first, b"x"]).unwrap();
    let bytes = read_segment(dir.path(), 0);
    assert_eq!(&bytes[PAGE_SIZE - 3..PAGE_SIZE], &[0, 0, 0]);
    assert_eq!(bytes[PAGE_SIZE], TYPE_FULL);
    assert_eq!(bytes.len(), PAGE_SIZE + HEADER_SIZE + 1);
    let (records, _) = replay_all(dir.path());
    assert_eq!(records, vec![first, b"x".to_vec()]);
}

#[test]
fn record_that_does_not_fit_cuts_a_segment() {
    let dir = tempfile::tempdir().unwrap();
    let mut wal = Wal::open(dir.path(), opts(2, false)).unwrap();
    wal.log(&[&noise(PAGE_SIZE, 2)]).unwrap();
    assert_eq!(wal.current_segment(), 0);
    // Needs more than the rest of segment 0.
    let big = noise(PAGE_SIZE, 3);
    wal.log(&[&big]).unwrap();
    assert_eq!(wal.current_segment(), 1);
    assert_eq!(
        read_segment(dir.path(), 0).len(),
        2 * PAGE_SIZE,
        "closed segment holds whole pages"
    );
    assert_eq!(read_segment(dir.path(), 1)[0], TYPE_FIRST);
    let (records, report) = replay_all(dir.path());
    assert_eq!(records.len(), 2);
    assert_eq!(records[1], big);
    assert_eq!(report.segments, 2);
    assert_eq!(report.repaired, None);
}

#[test]
fn a_record_filling_a_whole_segment_fits() {
    let dir = tempfile::tempdir().unwrap();
    let mut wal = Wal::open(dir.path(), opts(2, false)).unwrap();
    let max = wal.max_record_len();
    let rec = noise(max, 4);
    wal.log(&[b"a", &rec, b""]).unwrap();
    assert_eq!(
        wal.current_segment(),
        2,
        "the full segment is followed by a new one for the empty record"
    );
    assert_eq!(read_segment(dir.path(), 1).len(), 2 * PAGE_SIZE);
    let (records, _) = replay_all(dir.path());
    assert_eq!(records, vec![b"a".to_vec(), rec, Vec::new()]);
}

#[test]
fn too_large_record_is_refused_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let mut wal = Wal::open(dir.path(), opts(1, true)).unwrap();
    let big = vec![0u8; PAGE_SIZE];
    let err = wal.log(&[b"ok", &big]).unwrap_err();
    assert!(matches!(err, WalError::RecordTooLarge { len, max, .. } if len == PAGE_SIZE && max == PAGE_SIZE - 7));
    assert!(
        read_segment(dir.path(), 0).is_empty(),
        "nothing of the batch is written"
    );
}

#[test]
fn compression_sets_the_flag_only_when_it_saves_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let mut wal = Wal::open(dir.path(), opts(4, true)).unwrap();
    let zeros = vec![0u8; 1000];
    wal.log(&[&zeros]).unwrap();
    let bytes = read_segment(dir.path(), 0);
    assert_eq!(bytes[0], TYPE_FULL | FLAG_SNAPPY);
    let len = u16::from_be_bytes([bytes[1], bytes[2]]) as usize;
    assert!(len < 100, "1000 zeros compress well, got {len}");
    assert_eq!(
        snap::raw::Decoder::new().decompress_vec(&bytes[7..7 + len]).unwrap(),
        zeros
    );

    let random = noise(1000, 5);
    wal.log(&[&random]).unwrap();
    let bytes = read_segment(dir.path(), 0);
    let at = 7 + len;
    assert_eq!(bytes[at], TYPE_FULL, "incompressible records are stored raw");
    assert_eq!(&bytes[at + 7..], &random[..]);
}

#[test]
fn open_starts_a_new_segment_after_the_last() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(segment_path(dir.path(), 5), b"").unwrap();
    let wal = Wal::open(dir.path(), WalOptions::default()).unwrap();
    assert_eq!(wal.current_segment(), 6);
    assert!(segment_path(dir.path(), 6).exists());
}

#[test]
fn invalid_segment_sizes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for size in [0, PAGE_SIZE - 1, PAGE_SIZE + 1] {
        let err = Wal::open(
            dir.path(),
            WalOptions {
                segment_size: size,
                compress: true,
            },
        )
        .unwrap_err();
        assert!(matches!(err, WalError::InvalidOptions(_)), "size {size}: {err}");
    }
}

#[test]
fn cut_segment_pads_and_advances() {
    let dir = tempfile::tempdir().unwrap();
    let mut wal = Wal::open(dir.path(), opts(4, false)).unwrap();
    wal.log(&[b"abc"]).unwrap();
    assert_eq!(wal.cut_segment().unwrap(), 1);
    assert_eq!(read_segment(dir.path(), 0).len(), PAGE_SIZE);
    wal.log(&[b"def"]).unwrap();
    wal.sync().unwrap();
    let (records, _) = replay_all(dir.path());
    assert_eq!(records, vec![b"abc".to_vec(), b"def".to_vec()]);
}

/// Shared switches of the faulty files.
#[derive(Debug, Default)]
struct Faults {
    /// Bytes the disk still accepts (a write beyond it is short, then fails with "no space").
    budget: Mutex<Option<usize>>,
    fail_truncate: AtomicBool,
    /// fsync fails.
    fail_sync: AtomicBool,
    writes: AtomicUsize,
}

#[derive(Debug)]
struct FaultyCreator(Arc<Faults>);

#[derive(Debug)]
struct FaultyFile {
    inner: Box<dyn DurableFile>,
    faults: Arc<Faults>,
}

impl FileCreator for FaultyCreator {
    fn create(&self, path: &Path) -> io::Result<Box<dyn DurableFile>> {
        Ok(Box::new(FaultyFile {
            inner: StdFiles.create(path)?,
            faults: self.0.clone(),
        }))
    }
}

impl DurableFile for FaultyFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.faults.writes.fetch_add(1, Ordering::Relaxed);
        let mut budget = self.faults.budget.lock().unwrap();
        match *budget {
            None => self.inner.write(buf),
            Some(0) => Err(io::Error::new(io::ErrorKind::StorageFull, "no space left on device")),
            Some(left) => {
                let n = self.inner.write(&buf[..buf.len().min(left)])?;
                *budget = Some(left - n);
                Ok(n)
            }
        }
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        if self.faults.fail_truncate.load(Ordering::Relaxed) {
            return Err(io::Error::other("injected truncate failure"));
        }
        self.inner.truncate(len)
    }

    fn sync(&mut self) -> io::Result<()> {
        if self.faults.fail_sync.load(Ordering::Relaxed) {
            return Err(io::Error::other("injected fsync failure"));
        }
        self.inner.sync()
    }
}

fn faulty_wal(dir: &Path, pages: usize) -> (Wal, Arc<Faults>) {
    let faults = Arc::new(Faults::default());
    let wal = Wal::open_with(dir, opts(pages, false), Box::new(FaultyCreator(faults.clone()))).unwrap();
    (wal, faults)
}

#[test]
fn a_write_failing_half_way_is_undone_and_writing_continues() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, faults) = faulty_wal(dir.path(), 4);
    wal.log(&[b"one", b"two"]).unwrap();
    let before = wal.position();

    // The disk fills up in the middle of the second page of a three-page record.
    *faults.budget.lock().unwrap() = Some(PAGE_SIZE + 1000);
    let big = noise(2 * PAGE_SIZE + 10, 6);
    let err = wal.log(&[b"three", &big]).unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert_eq!(wal.position(), before, "state is back where the call started");
    assert_eq!(
        read_segment(dir.path(), 0).len() as u64,
        before.offset,
        "the file is cut back"
    );

    *faults.budget.lock().unwrap() = None;
    wal.log(&[b"four"]).unwrap();
    wal.close().unwrap();
    let (records, report) = replay_all(dir.path());
    assert_eq!(records, vec![b"one".to_vec(), b"two".to_vec(), b"four".to_vec()]);
    assert_eq!(report.repaired, None);
}

#[test]
fn failure_after_a_segment_cut_keeps_the_earlier_records() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, faults) = faulty_wal(dir.path(), 1);
    wal.log(&[b"a"]).unwrap();
    let fill = noise(PAGE_SIZE - 2 * HEADER_SIZE - 1 - 100, 7);
    // `fill` fits in segment 0; `next` needs a new segment, whose write fails.
    let next = noise(200, 8);
    *faults.budget.lock().unwrap() = Some(PAGE_SIZE - 8 + 50);
    let err = wal.log(&[&fill, &next]).unwrap_err();
    assert!(matches!(err, WalError::Io { .. }), "{err}");
    assert_eq!(wal.current_segment(), 1);
    assert_eq!(wal.position().offset, 0);
    *faults.budget.lock().unwrap() = None;
    wal.log(&[b"z"]).unwrap();
    let (records, report) = replay_all(dir.path());
    assert_eq!(records, vec![b"a".to_vec(), fill, b"z".to_vec()]);
    assert_eq!(report.repaired, None);
}

#[test]
fn failed_undo_poisons_until_the_undo_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, faults) = faulty_wal(dir.path(), 4);
    wal.log(&[b"one"]).unwrap();
    *faults.budget.lock().unwrap() = Some(3);
    faults.fail_truncate.store(true, Ordering::Relaxed);
    wal.log(&[b"two"]).unwrap_err();
    *faults.budget.lock().unwrap() = None;
    let err = wal.log(&[b"three"]).unwrap_err();
    assert!(matches!(err, WalError::Poisoned { segment: 0, .. }), "{err}");
    let writes = faults.writes.load(Ordering::Relaxed);
    wal.log(&[b"three"]).unwrap_err();
    assert_eq!(
        faults.writes.load(Ordering::Relaxed),
        writes,
        "a poisoned writer writes nothing"
    );

    faults.fail_truncate.store(false, Ordering::Relaxed);
    wal.log(&[b"three"]).unwrap();
    wal.close().unwrap();
    let (records, report) = replay_all(dir.path());
    assert_eq!(records, vec![b"one".to_vec(), b"three".to_vec()]);
    assert_eq!(report.repaired, None);
}

/// Descriptors of this process open on files under `dir`, and how many of those files were deleted.
fn open_files_under(dir: &Path) -> (usize, usize) {
    let (mut open, mut deleted) = (0, 0);
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        let target = target.to_string_lossy().into_owned();
        if target.starts_with(&*dir.to_string_lossy()) {
            open += 1;
            deleted += usize::from(target.ends_with(" (deleted)"));
        }
    }
    (open, deleted)
}

/// Cut segments are fsynced and closed while the writer runs, not at its next `sync` (which may be at
/// shutdown): a long-running writer holds one descriptor, and deleting old segments frees their space.
#[test]
fn cut_segments_are_closed_without_waiting_for_sync() {
    let dir = tempfile::tempdir().unwrap();
    let mut wal = Wal::open(dir.path(), opts(2, false)).unwrap();
    let record = noise(PAGE_SIZE / 2, 7);
    for _ in 0..40 {
        wal.log(&[&record]).unwrap();
    }
    assert!(wal.current_segment() >= 10, "segment {}", wal.current_segment());
    for index in 0..wal.current_segment() {
        std::fs::remove_file(segment_path(dir.path(), index)).unwrap();
    }
    // The closer thread works in the background: poll, bounded in count and time.
    let mut seen = open_files_under(dir.path());
    for _ in 0..500 {
        if seen == (1, 0) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        seen = open_files_under(dir.path());
    }
    assert_eq!(
        seen,
        (1, 0),
        "(open, deleted but held open): only the current segment stays open"
    );
    wal.log(&[b"after"]).unwrap();
    wal.close().unwrap();
}

/// A closed segment whose background fsync fails is reported by the next `sync`, naming the segment; later
/// syncs succeed once the disk does.
#[test]
fn a_failed_background_fsync_is_reported_by_sync() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, faults) = faulty_wal(dir.path(), 2);
    faults.fail_sync.store(true, Ordering::Relaxed);
    wal.log(&[b"one"]).unwrap();
    assert_eq!(wal.cut_segment().unwrap(), 1);
    let err = wal.sync().unwrap_err();
    assert!(err.to_string().contains("00000000"), "names the segment: {err}");
    assert_eq!(wal.pending.queued(), 0, "the segment was closed all the same");
    faults.fail_sync.store(false, Ordering::Relaxed);
    wal.sync().unwrap();
    wal.close().unwrap();
}
