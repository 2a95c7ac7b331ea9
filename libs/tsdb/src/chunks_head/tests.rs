use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::*;
use crate::file::StdFiles;

fn open(dir: &Path, max: u64) -> (ChunkDiskMapper, ScanReport) {
    let scanned = scan(dir).unwrap();
    let m = ChunkDiskMapper::open(dir, max, Arc::new(StdFiles), &scanned).unwrap();
    (m, scanned)
}

/// Chunk `i` of the test data: 50..250 bytes depending on `i`.
fn data(i: u64) -> Vec<u8> {
    (0..50 + (i * 37) % 200)
        .map(|j| (i as u8).wrapping_mul(31).wrapping_add(j as u8))
        .collect()
}

/// Writes `n` chunks for series 1..=5 and returns their refs in order.
fn write_n(m: &ChunkDiskMapper, n: u64) -> Vec<(u64, u64)> {
    (0..n)
        .map(|i| {
            let series = i % 5 + 1;
            let r = m
                .write_chunk(series, i as i64 * 10, i as i64 * 10 + 9, Encoding::Xor, &data(i))
                .unwrap();
            (i, r)
        })
        .collect()
}

#[test]
fn written_chunks_read_back_before_and_after_flush_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = open(dir.path(), 4096);
    let refs = write_n(&m, 100);
    for (i, r) in &refs {
        assert_eq!(
            m.chunk(*r).unwrap().1.as_ref(),
            data(*i).as_slice(),
            "chunk {i} from the buffer"
        );
    }
    assert!(m.num_files() > 3, "small files rotate: {} files", m.num_files());
    m.flush().unwrap();
    for (i, r) in &refs {
        assert_eq!(
            m.chunk(*r).unwrap().1.as_ref(),
            data(*i).as_slice(),
            "chunk {i} from the map"
        );
    }
    m.close().unwrap();
    drop(m);

    let (m, scanned) = open(dir.path(), 4096);
    assert!(scanned.corruption.is_none());
    assert_eq!(scanned.num_chunks, 100);
    for series in 1..=5u64 {
        let listed: Vec<u64> = scanned.chunks.of(series).iter().map(|c| c.chunk_ref).collect();
        let want: Vec<u64> = refs
            .iter()
            .filter(|(i, _)| i % 5 + 1 == series)
            .map(|(_, r)| *r)
            .collect();
        assert_eq!(listed, want, "series {series}");
        for c in &scanned.chunks.of(series) {
            let (i, _) = refs.iter().find(|(_, r)| *r == c.chunk_ref).unwrap();
            assert_eq!((c.min_time, c.max_time), (*i as i64 * 10, *i as i64 * 10 + 9));
        }
    }
    // New chunks go to a new file after the last one.
    let last = *scanned.files.last().unwrap();
    let r = m.write_chunk(9, 0, 1, Encoding::Xor, b"xy").unwrap();
    assert_eq!(format::split_ref(r), (last + 1, FILE_HEADER_LEN as u32));
    assert_eq!(m.chunk(r).unwrap().1.as_ref(), b"xy");
}

#[test]
fn files_are_in_prometheus_layout() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = open(dir.path(), DEFAULT_MAX_FILE_SIZE);
    let r = m.write_chunk(0x0102, -5, 7, Encoding::Xor, &[0xAA, 0xBB]).unwrap();
    m.close().unwrap();
    assert_eq!(r, (1 << 32) | 8);
    let bytes = std::fs::read(dir.path().join("000001")).unwrap();
    let mut want = vec![0x01, 0x30, 0xBC, 0x91, 1, 0, 0, 0];
    want.extend_from_slice(&0x0102u64.to_be_bytes());
    want.extend_from_slice(&(-5i64).to_be_bytes());
    want.extend_from_slice(&7i64.to_be_bytes());
    want.extend_from_slice(&[1, 2, 0xAA, 0xBB]);
    let crc = crc32c::crc32c(&want[8..]);
    want.extend_from_slice(&crc.to_be_bytes());
    assert_eq!(bytes, want);
}

/// Damage done to the files after 100 chunks were written to 4 KiB files, and what a scan must keep.
#[test]
fn corruption_is_cut_off_precisely() {
    type Damage = fn(&Path, &[u32]);
    let cases: [(&str, Damage, &str); 5] = [
        (
            "torn last chunk",
            |d, files| {
                let p = file_path(d, *files.last().unwrap());
                let len = std::fs::metadata(&p).unwrap().len();
                let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
                f.set_len(len - 3).unwrap();
            },
            "past the end",
        ),
        (
            "crc mismatch in the second file",
            |d, files| {
                let p = file_path(d, files[1]);
                let mut b = std::fs::read(&p).unwrap();
                b[FILE_HEADER_LEN + 30] ^= 0x40;
                std::fs::write(&p, b).unwrap();
            },
            "crc mismatch",
        ),
        (
            "bad header of the third file",
            |d, files| {
                let p = file_path(d, files[2]);
                let mut b = std::fs::read(&p).unwrap();
                b[0] = 0x85;
                std::fs::write(&p, b).unwrap();
            },
            "bad magic",
        ),
        (
            "truncated file header",
            |d, files| {
                let p = file_path(d, files[3]);
                let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
                f.set_len(5).unwrap();
            },
            "shorter than its 8-byte header",
        ),
        (
            "zero padding after the last chunk (Prometheus preallocation) is not corruption",
            |d, files| {
                let p = file_path(d, *files.last().unwrap());
                let len = std::fs::metadata(&p).unwrap().len();
                let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
                f.set_len(len + 10_000).unwrap();
            },
            "",
        ),
    ];
    for (name, damage, reason) in cases {
        let dir = tempfile::tempdir().unwrap();
        let (m, _) = open(dir.path(), 4096);
        let refs = write_n(&m, 100);
        m.close().unwrap();
        drop(m);
        let files = scan(dir.path()).unwrap().files;
        damage(dir.path(), &files);

        let (m, scanned) = open(dir.path(), 4096);
        let kept: Vec<u64> = {
            let mut all: Vec<u64> = scanned.chunks.iter().map(|(_, c)| c.chunk_ref).collect();
            all.sort_unstable();
            all
        };
        let expected_prefix: Vec<u64> = refs.iter().map(|(_, r)| *r).take(kept.len()).collect();
        assert_eq!(
            kept, expected_prefix,
            "{name}: kept chunks are a prefix of the written ones"
        );
        for (i, r) in refs.iter().take(kept.len()) {
            assert_eq!(
                m.chunk(*r).unwrap().1.as_ref(),
                data(*i).as_slice(),
                "{name}: chunk {i}"
            );
        }
        match &scanned.corruption {
            None => {
                assert!(reason.is_empty(), "{name}: corruption not found");
                assert_eq!(kept.len(), 100, "{name}");
            }
            Some(c) => {
                assert!(c.reason.contains(reason), "{name}: reason {:?}", c.reason);
                assert!(kept.len() < 100, "{name}");
                // The next chunk after the kept prefix started exactly where the file was cut.
                let (seq, offset) = format::split_ref(refs[kept.len()].1);
                if c.offset > 0 {
                    assert_eq!((c.file, c.offset), (seq, u64::from(offset)), "{name}: cut position");
                    assert_eq!(
                        std::fs::metadata(file_path(dir.path(), seq)).unwrap().len(),
                        c.offset,
                        "{name}"
                    );
                } else {
                    assert!(
                        !file_path(dir.path(), c.file).exists(),
                        "{name}: file with a bad header deleted"
                    );
                }
                let later = files.iter().filter(|&&f| f > c.file).count() as u32;
                assert_eq!(c.files_deleted, later, "{name}");
                // A second scan finds nothing more to repair.
                drop(m);
                let again = scan(dir.path()).unwrap();
                assert!(again.corruption.is_none(), "{name}: repaired for good");
                assert_eq!(again.num_chunks, kept.len() as u64, "{name}");
            }
        }
    }
}

#[test]
fn a_chunk_damaged_after_startup_is_reported_not_served() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = open(dir.path(), DEFAULT_MAX_FILE_SIZE);
    let r = m.write_chunk(1, 0, 10, Encoding::Xor, &data(3)).unwrap();
    m.close().unwrap();
    drop(m);
    let (m, _) = open(dir.path(), DEFAULT_MAX_FILE_SIZE);
    let p = file_path(dir.path(), 1);
    let mut b = std::fs::read(&p).unwrap();
    b[FILE_HEADER_LEN + 40] ^= 1;
    // Rewriting in place keeps the inode, so the existing map sees the damage.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .and_then(|mut f| std::io::Write::write_all(&mut f, &b))
        .unwrap();
    let err = m.chunk(r).unwrap_err();
    assert!(err.to_string().contains("crc mismatch"), "{err}");
}

#[test]
fn truncation_deletes_whole_files_before_mint() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = open(dir.path(), 4096);
    let refs = write_n(&m, 100);
    m.flush().unwrap();
    let before = m.num_files();
    // Chunk i spans [10 i, 10 i + 9]: files whose chunks all end before 500 go.
    let deleted = m.truncate_before(500).unwrap();
    assert!(deleted > 0 && deleted < before, "{deleted} of {before} files deleted");
    let mut readable = 0;
    for (i, r) in &refs {
        if let Ok((_, d)) = m.chunk(*r) {
            assert_eq!(d.as_ref(), data(*i).as_slice());
            readable += 1;
        } else {
            assert!(*i < 50, "chunk {i} ends after 500 and must stay");
        }
    }
    assert!(readable >= 50);
    // Everything ends before i64::MAX: all files go, the active one is sealed and replaced later.
    m.truncate_before(i64::MAX).unwrap();
    assert_eq!(scan(dir.path()).unwrap().num_chunks, 0);
    let r = m.write_chunk(1, 0, 1, Encoding::Xor, b"z").unwrap();
    assert_eq!(m.chunk(r).unwrap().1.as_ref(), b"z");
}

/// A file that accepts at most `budget` more bytes (shared), then fails; writes may be short.
#[derive(Debug)]
struct Faulty {
    budget: Arc<AtomicUsize>,
    inner: Box<dyn DurableFile>,
}

impl DurableFile for Faulty {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let left = self.budget.load(Ordering::SeqCst);
        if left == 0 {
            return Err(io::Error::other("injected: disk full"));
        }
        // Short writes: at most 1000 bytes at a time.
        let n = buf.len().min(left).min(1000);
        let n = self.inner.write(&buf[..n])?;
        self.budget.fetch_sub(n, Ordering::SeqCst);
        Ok(n)
    }
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.inner.truncate(len)
    }
    fn sync(&mut self) -> io::Result<()> {
        self.inner.sync()
    }
}

#[derive(Debug)]
struct FaultyFiles {
    budget: Arc<AtomicUsize>,
    created: Mutex<u32>,
}

impl FileCreator for FaultyFiles {
    fn create(&self, path: &Path) -> io::Result<Box<dyn DurableFile>> {
        *self.created.lock().unwrap() += 1;
        Ok(Box::new(Faulty {
            budget: Arc::clone(&self.budget),
            inner: StdFiles.create(path)?,
        }))
    }
}

#[test]
fn a_failed_write_leaves_the_file_at_a_chunk_boundary_and_is_retried() {
    let dir = tempfile::tempdir().unwrap();
    let budget = Arc::new(AtomicUsize::new(3000));
    let files = Arc::new(FaultyFiles {
        budget: Arc::clone(&budget),
        created: Mutex::new(0),
    });
    let m = ChunkDiskMapper::open(dir.path(), DEFAULT_MAX_FILE_SIZE, files, &ScanReport::default()).unwrap();
    let refs = write_n(&m, 40);
    let err = m.flush().unwrap_err();
    assert!(err.to_string().contains("disk full"), "{err}");
    // The file was cut back to its header: no torn chunk on disk.
    assert_eq!(
        std::fs::metadata(file_path(dir.path(), 1)).unwrap().len(),
        FILE_HEADER_LEN as u64
    );
    // Buffered chunks are still served.
    for (i, r) in &refs {
        assert_eq!(
            m.chunk(*r).unwrap().1.as_ref(),
            data(*i).as_slice(),
            "chunk {i} while the disk is full"
        );
    }
    budget.store(usize::MAX, Ordering::SeqCst);
    m.close().unwrap();
    drop(m);
    let scanned = scan(dir.path()).unwrap();
    assert!(scanned.corruption.is_none());
    assert_eq!(scanned.num_chunks, 40);
}

/// Chunks come back grouped by series in file order, each series once, and the count of those not taken is
/// what orphan accounting reads.
#[test]
fn chunks_by_series_hands_each_series_its_chunks_once() {
    let c = |seq: u32, offset: u32, t: i64| super::MappedChunk {
        chunk_ref: super::format::chunk_ref(seq, offset),
        min_time: t,
        max_time: t + 9,
    };
    // File order: series 9, 3, 9, 5, 3, 7 (as chunks of different series interleave in a file).
    let mut by = super::ChunksBySeries::new(vec![
        (9, c(1, 8, 0)),
        (3, c(1, 40, 0)),
        (9, c(1, 80, 10)),
        (5, c(2, 8, 10)),
        (3, c(2, 40, 10)),
        (7, c(2, 80, 0)),
    ]);
    assert_eq!(by.len(), 6);
    assert_eq!(by.untaken_series(), 4);
    assert_eq!(by.take(3), Some(&[c(1, 40, 0), c(2, 40, 10)][..]));
    assert_eq!(by.take(3), None, "taken once");
    assert_eq!(by.take(4), None, "no chunks");
    assert_eq!(by.len(), 4);
    assert_eq!(by.untaken_series(), 3);
    assert_eq!(
        by.drop_unless(|c| c.max_time >= 10),
        2,
        "series 7's and 9's first chunks end before 10"
    );
    assert_eq!(by.len(), 2);
    assert_eq!(by.untaken_series(), 2, "series 5 and 9");
    assert_eq!(by.take(3), None, "still taken after the drop");
    assert_eq!(by.take(9), Some(&[c(1, 80, 10)][..]));
    by.untake_all();
    assert_eq!(by.len(), 4, "a failed load puts back what it took");
    assert_eq!(by.take(3), Some(&[c(1, 40, 0), c(2, 40, 10)][..]));
    assert_eq!(by.take(5), Some(&[c(2, 8, 10)][..]));
    assert_eq!(by.take(9), Some(&[c(1, 80, 10)][..]));
    assert!(by.iter().next().is_none());
}

/// `take` finds every series whatever the order it is asked in (ascending as a WAL replay asks, descending,
/// scattered), including refs that have no chunks.
#[test]
fn chunks_by_series_take_finds_series_in_any_order() {
    let chunks: Vec<(u64, super::MappedChunk)> = (0..2000u32)
        .map(|i| {
            let series = u64::from(i.wrapping_mul(2_654_435_761) % 700) * 3;
            let chunk = super::MappedChunk {
                chunk_ref: super::format::chunk_ref(1, 8 + i * 40),
                min_time: i64::from(i),
                max_time: i64::from(i),
            };
            (series, chunk)
        })
        .collect();
    let mut want: std::collections::BTreeMap<u64, Vec<i64>> = Default::default();
    for (s, c) in &chunks {
        want.entry(*s).or_default().push(c.min_time);
    }
    let ascending: Vec<u64> = (0..2200).collect();
    let descending: Vec<u64> = ascending.iter().rev().copied().collect();
    let scattered: Vec<u64> = (0..2200u64).map(|i| i.wrapping_mul(7919) % 2200).collect();
    for (name, order) in [
        ("ascending", ascending),
        ("descending", descending),
        ("scattered", scattered),
    ] {
        let mut by = super::ChunksBySeries::new(chunks.clone());
        for r in order {
            let got = by.take(r).map(|c| c.iter().map(|c| c.min_time).collect::<Vec<_>>());
            assert_eq!(got.as_ref(), want.get(&r), "{name}: series {r}");
        }
        assert_eq!(by.len(), 0, "{name}");
    }
}
