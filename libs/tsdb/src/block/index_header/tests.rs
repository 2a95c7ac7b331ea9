//! The index-header file: round trip, every truncation and bit flip refused, unusable files rebuilt with the
//! same answers, a failed write costing nothing but the file.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use heddle_model::{Labels, MatchType, Matcher};

use super::*;
use crate::block::{BlockMeta, BlockReader, BlockWriter, LocalBlockFiles, new_ulid};
use crate::chunkenc::XorChunk;
use crate::file::{DurableFile, StdFiles};
use crate::head::ChunkData;

/// Block files that count the bytes read of the index.
#[derive(Debug)]
struct Counting {
    inner: LocalBlockFiles,
    index_bytes: AtomicU64,
}

impl BlockFiles for Counting {
    fn size(&self, name: &str) -> Result<u64, TsdbError> {
        self.inner.size(name)
    }

    fn read(&self, name: &str, range: Range<u64>) -> Result<Bytes, TsdbError> {
        if name == INDEX_FILENAME {
            self.index_bytes.fetch_add(range.end - range.start, Ordering::Relaxed);
        }
        self.inner.read(name, range)
    }
}

struct Block {
    _dir: tempfile::TempDir,
    path: PathBuf,
    meta: BlockMeta,
}

impl Block {
    fn files(&self) -> Arc<Counting> {
        Arc::new(Counting {
            inner: LocalBlockFiles::new(&self.path),
            index_bytes: AtomicU64::new(0),
        })
    }
}

/// A block of 40 series `up{job="job-<i % 4>", instance="host-<i>"}`, one chunk each.
fn block() -> Block {
    let dir = tempfile::tempdir().unwrap();
    let meta = BlockMeta::new(new_ulid(), 0, 7_200_000, Some("t"));
    let mut w = BlockWriter::new(dir.path(), meta).unwrap();
    let mut series: Vec<Labels> = (0..40)
        .map(|i| {
            let (job, instance) = (format!("job-{}", i % 4), format!("host-{i:02}"));
            Labels::from_unsorted([
                ("__name__", "up"),
                ("instance", instance.as_str()),
                ("job", job.as_str()),
            ])
            .unwrap()
        })
        .collect();
    series.sort();
    for (i, l) in series.iter().enumerate() {
        let mut c = XorChunk::new();
        c.append(1000, i as f64).unwrap();
        let data = Bytes::from(c.into_bytes());
        w.add_series(
            l,
            &[ChunkData {
                encoding: crate::chunkenc::Encoding::Xor,
                min_time: 1000,
                max_time: 1000,
                data,
            }],
        )
        .unwrap();
    }
    let meta = w.finish().unwrap();
    Block {
        path: dir.path().join(&meta.ulid),
        _dir: dir,
        meta,
    }
}

/// What a few queries answer, to compare readers.
fn answers(r: &BlockReader) -> String {
    let eq = |n: &str, v: &str| Matcher::new(MatchType::Equal, n, v).unwrap();
    let re = Matcher::new(MatchType::RegexMatch, "instance", "host-1.").unwrap();
    let selected = r.select(0, 7_200_000, &[eq("job", "job-2"), re.clone()]).unwrap();
    format!(
        "{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
        selected,
        r.series(0, 7_200_000, &[re]).unwrap(),
        r.label_names(&[]).unwrap(),
        r.label_values("instance", &[]).unwrap(),
        r.label_values("instance", &[eq("job", "job-1")]).unwrap(),
    )
}

fn open(b: &Block, file: &Path) -> (BlockReader, HeaderOrigin, u64) {
    let files = b.files();
    let (r, origin) = BlockReader::open_with_header_file(files.clone(), b.meta.clone(), file).unwrap();
    let read = files.index_bytes.load(Ordering::Relaxed);
    (r, origin, read)
}

#[test]
fn a_header_file_round_trips_and_answers_as_the_index_does() {
    let b = block();
    let want = answers(&BlockReader::open_dir(&b.path).unwrap());
    let cache = tempfile::tempdir().unwrap();
    let file = cache.path().join("t").join(&b.meta.ulid).join(INDEX_HEADER_FILENAME);

    let (first, origin, read) = open(&b, &file);
    assert_eq!(
        origin,
        HeaderOrigin::Files {
            bytes: read,
            replaced: None
        },
        "built from the index"
    );
    assert!(read > 0);
    assert_eq!(answers(&first), want);
    let len = std::fs::metadata(&file).unwrap().len();
    let index_len = std::fs::metadata(b.path.join(INDEX_FILENAME)).unwrap().len();
    assert!(
        len < index_len,
        "the file ({len} bytes) holds less than the index ({index_len})"
    );
    assert!(!file.with_extension("tmp").exists(), "no temporary file left");

    let (second, origin, read) = open(&b, &file);
    assert_eq!(origin, HeaderOrigin::Disk { bytes: len });
    assert_eq!(read, 0, "nothing of the index read to open");
    assert_eq!(answers(&second), want);
}

#[test]
fn every_truncation_and_bit_flip_is_refused() {
    let b = block();
    let cache = tempfile::tempdir().unwrap();
    let file = cache.path().join(INDEX_HEADER_FILENAME);
    open(&b, &file);
    let good = std::fs::read(&file).unwrap();
    let load = |bytes: Vec<u8>| {
        decode(Bytes::from(bytes), &b.meta.ulid).and_then(|s| IndexHeader::open(&s, "t").map_err(|e| e.to_string()))
    };
    assert!(load(good.clone()).is_ok());
    for len in 0..good.len() {
        assert!(load(good[..len].to_vec()).is_err(), "cut to {len} bytes");
    }
    for at in 0..good.len() {
        for bit in [0x01, 0x80] {
            let mut bad = good.clone();
            bad[at] ^= bit;
            assert!(load(bad).is_err(), "bit {bit:#x} of byte {at} flipped");
        }
    }
}

/// `body` (a file without its CRC) with a valid CRC: damage the CRC cannot see.
fn with_crc(mut body: Vec<u8>) -> Vec<u8> {
    let crc = crc32c::crc32c(&body);
    body.extend_from_slice(&crc.to_be_bytes());
    body
}

#[test]
fn unusable_files_are_rebuilt_with_the_same_answers() {
    let b = block();
    let other = block();
    let want = answers(&BlockReader::open_dir(&b.path).unwrap());
    let cache = tempfile::tempdir().unwrap();
    let file = cache.path().join(INDEX_HEADER_FILENAME);
    open(&b, &file);
    let good = std::fs::read(&file).unwrap();
    let body = good[..good.len() - 4].to_vec();
    // Offsets in the file: magic 4, version 1, size 8, ulid length 2, ulid 26, count 4, then the ranges.
    let ranges_at = 4 + 1 + 8 + 2 + b.meta.ulid.len() + 4;
    let count = u32::from_be_bytes(good[ranges_at - 4..ranges_at].try_into().unwrap()) as usize;
    let data_at = ranges_at + count * 16;
    let other_file = cache.path().join("other");
    open(&other, &other_file);

    let edit = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut v = body.clone();
        f(&mut v);
        with_crc(v)
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", Vec::new(), "truncated"),
        ("cut in half", good[..good.len() / 2].to_vec(), "corrupt"),
        ("last byte lost", good[..good.len() - 1].to_vec(), "corrupt"),
        ("garbage", vec![0xA5; 300], "corrupt"),
        ("another version", edit(&|v| v[4] = 2), "version 2"),
        (
            "another block's file",
            std::fs::read(&other_file).unwrap(),
            "holds block",
        ),
        ("a range moved", edit(&|v| v[ranges_at + 7] ^= 1), "not in it"),
        (
            "a range longer than the index",
            edit(&|v| v[ranges_at + 8] = 0xff),
            "runs past",
        ),
        (
            "a symbol changed",
            edit(&|v| v[data_at + 20] ^= 0x20),
            "offset 5: checksum mismatch",
        ),
        ("the TOC changed", edit(&|v| *v.last_mut().unwrap() ^= 1), "TOC"),
    ];
    for (name, bytes, reason) in cases {
        std::fs::write(&file, &bytes).unwrap();
        let (r, origin, read) = open(&b, &file);
        match &origin {
            HeaderOrigin::Files {
                bytes,
                replaced: Some(why),
            } => {
                assert_eq!(*bytes, read, "{name}");
                assert!(why.contains(reason), "{name}: {why}");
            }
            other => panic!("{name}: {other:?}"),
        }
        assert_eq!(answers(&r), want, "{name}");
        assert_eq!(std::fs::read(&file).unwrap(), good, "{name}: rewritten");
        assert!(matches!(open(&b, &file).1, HeaderOrigin::Disk { .. }), "{name}");
    }
}

/// Files that take `budget` bytes in short writes, then fail as a full disk does.
#[derive(Debug)]
struct FullDisk {
    budget: Arc<AtomicUsize>,
    created: Mutex<u32>,
}

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
        let n = self.inner.write(&buf[..buf.len().min(left).min(100)])?;
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

impl FileCreator for FullDisk {
    fn create(&self, path: &Path) -> io::Result<Box<dyn DurableFile>> {
        *self.created.lock().unwrap() += 1;
        Ok(Box::new(Faulty {
            budget: Arc::clone(&self.budget),
            inner: StdFiles.create(path)?,
        }))
    }
}

#[test]
fn a_failed_write_leaves_no_file_and_the_block_still_opens() {
    let b = block();
    let want = answers(&BlockReader::open_dir(&b.path).unwrap());
    let cache = tempfile::tempdir().unwrap();
    let file = cache.path().join("t").join(&b.meta.ulid).join(INDEX_HEADER_FILENAME);
    let disk = FullDisk {
        budget: Arc::new(AtomicUsize::new(250)),
        created: Mutex::new(0),
    };
    let (r, origin) = BlockReader::open_with_header_file_on(b.files(), b.meta.clone(), &file, &disk).unwrap();
    assert_eq!(*disk.created.lock().unwrap(), 1, "a write was tried");
    assert!(
        matches!(origin, HeaderOrigin::Files { replaced: None, .. }),
        "{origin:?}"
    );
    assert_eq!(answers(&r), want);
    assert!(!file.exists(), "no torn file");
    assert!(!file.with_extension("tmp").exists(), "the temporary file is removed");

    // A file the process cannot even create (its directory is a file): the block opens all the same.
    let blocked = cache.path().join("blocked");
    std::fs::write(&blocked, b"").unwrap();
    let (r, _) = BlockReader::open_with_header_file(b.files(), b.meta.clone(), &blocked.join("x").join("y")).unwrap();
    assert_eq!(answers(&r), want);

    // With room again, the next open writes it.
    let (_, origin, _) = open(&b, &file);
    assert!(matches!(origin, HeaderOrigin::Files { .. }));
    assert!(matches!(open(&b, &file).1, HeaderOrigin::Disk { .. }));
}
