//! Prometheus reads what we write: `promtool tsdb dump` replays a WAL directory into a head and prints every
//! sample. Covers several segments, a short (crashed, never closed) segment followed by newer ones, records
//! spanning pages, both compression modes, and a WAL repaired by our replay. Records are encoded by hand here
//! (the record layer lives in heddle-tsdb): one Series record, then Samples records.
//! Skipped only where promtool is not installed and CI is not set.

use std::path::Path;
use std::process::Command;

use heddle_wal::{PAGE_SIZE, Wal, WalError, WalOptions, replay, segment_path};

fn promtool_available() -> bool {
    if Command::new("promtool").arg("--version").output().is_ok() {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "promtool is required in CI");
    eprintln!("promtool not installed: skipping");
    false
}

fn uvarint(buf: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        buf.push(x as u8 | 0x80);
        x >>= 7;
    }
    buf.push(x as u8);
}

/// Series record: `heddle_wal_compat{n="<ref>", pad="<padding>"}` for refs 1..=count; the padding makes it long.
fn series_record(count: u64, pad: &str) -> Vec<u8> {
    let mut b = vec![1u8];
    for r in 1..=count {
        b.extend_from_slice(&r.to_be_bytes());
        uvarint(&mut b, 3);
        let n = r.to_string();
        for s in ["__name__", "heddle_wal_compat", "n", &n, "pad", pad] {
            uvarint(&mut b, s.len() as u64);
            b.extend_from_slice(s.as_bytes());
        }
    }
    b
}

/// Samples record with one sample per ref at time `t`; see [`value`].
fn samples_record(count: u64, t: i64) -> Vec<u8> {
    let mut b = vec![2u8];
    b.extend_from_slice(&1u64.to_be_bytes());
    b.extend_from_slice(&t.to_be_bytes());
    for r in 1..=count {
        let dref = (r - 1) as i64;
        uvarint(&mut b, ((dref << 1) ^ (dref >> 63)) as u64); // zigzag, dt = 0
        b.push(0);
        b.extend_from_slice(&value(r, t).to_bits().to_be_bytes());
    }
    b
}

/// Small values with fractions, which Go's and Rust's shortest float formats print alike.
fn value(r: u64, t: i64) -> f64 {
    r as f64 + ((t / 1000) % 1000) as f64 / 4.0
}

fn dump(dir: &Path) -> Vec<String> {
    let out = Command::new("promtool")
        .args(["tsdb", "dump"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

fn expected(count: u64, pad: &str, times: &[i64]) -> Vec<String> {
    let mut v: Vec<String> = (1..=count)
        .flat_map(|r| {
            times.iter().map(move |t| {
                let v = value(r, *t);
                format!("{{__name__=\"heddle_wal_compat\", n=\"{r}\", pad=\"{pad}\"}} {v} {t}")
            })
        })
        .collect();
    v.sort();
    v
}

#[test]
fn promtool_reads_segments_written_across_restarts() {
    if !promtool_available() {
        return;
    }
    for compress in [true, false] {
        let root = tempfile::tempdir().unwrap();
        let wal_dir = root.path().join("wal");
        let opts = WalOptions {
            segment_size: 4 * PAGE_SIZE,
            compress,
        };
        let count = 300;
        let pad = "p".repeat(200); // ~70 KB of series: spans pages, most of a segment
        let t0 = 1_700_000_000_000i64;
        let times: Vec<i64> = (0..40).map(|i| t0 + i * 15_000).collect();

        let mut wal = Wal::open(&wal_dir, opts.clone()).unwrap();
        wal.log(&[&series_record(count, &pad)]).unwrap();
        for &t in &times[..20] {
            wal.log(&[&samples_record(count, t)]).unwrap();
        }
        drop(wal); // a crash: the last segment keeps a short last page
        let mut wal = Wal::open(&wal_dir, opts.clone()).unwrap();
        for &t in &times[20..] {
            wal.log(&[&samples_record(count, t)]).unwrap();
        }
        wal.close().unwrap();
        let segments = heddle_wal::list_segments(&wal_dir).unwrap().len();
        assert!(
            segments >= if compress { 2 } else { 3 },
            "compress={compress}: {segments} segments"
        );

        assert_eq!(dump(root.path()), expected(count, &pad, &times), "compress={compress}");
    }
}

#[test]
fn promtool_reads_a_repaired_wal() {
    if !promtool_available() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let wal_dir = root.path().join("wal");
    let t0 = 1_700_000_000_000i64;
    let mut wal = Wal::open(&wal_dir, WalOptions::default()).unwrap();
    wal.log(&[&series_record(5, "x"), &samples_record(5, t0)]).unwrap();
    let torn_at = wal.position().offset;
    wal.log(&[&samples_record(5, t0 + 1000)]).unwrap();
    drop(wal);
    // Tear the last record: cut it in the middle.
    let seg = segment_path(&wal_dir, 0);
    let len = std::fs::metadata(&seg).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(torn_at + (len - torn_at) / 2)
        .unwrap();

    let report = replay(&wal_dir, |_| Ok::<(), WalError>(())).unwrap();
    assert_eq!(report.records, 2);
    assert_eq!(report.repaired.as_ref().map(|c| c.offset), Some(torn_at));
    let mut wal = Wal::open(&wal_dir, WalOptions::default()).unwrap();
    wal.log(&[&samples_record(5, t0 + 2000)]).unwrap();
    wal.close().unwrap();

    assert_eq!(dump(root.path()), expected(5, "x", &[t0, t0 + 2000]));
}

#[test]
fn promtool_reads_a_checkpoint() {
    if !promtool_available() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let wal_dir = root.path().join("wal");
    let opts = WalOptions {
        segment_size: 4 * PAGE_SIZE,
        compress: false,
    };
    let count = 200;
    let t0 = 1_700_000_000_000i64;
    let times: Vec<i64> = (0..120).map(|i| t0 + i * 15_000).collect();
    let mut wal = Wal::open(&wal_dir, opts.clone()).unwrap();
    wal.log(&[&series_record(count, "c")]).unwrap();
    for &t in &times {
        wal.log(&[&samples_record(count, t)]).unwrap();
    }
    let through = wal.current_segment() - 1;
    assert!(through >= 1, "several segments are folded");
    // Keep everything: promtool must see the checkpoint's records and the segments after it.
    heddle_wal::write_checkpoint(&wal_dir, through, opts, |_: &[u8], _: &mut Vec<u8>| {
        Ok::<_, WalError>(heddle_wal::Keep::Original)
    })
    .unwrap();
    heddle_wal::delete_segments_before(&wal_dir, through + 1).unwrap();
    wal.close().unwrap();

    assert_eq!(dump(root.path()), expected(count, "c", &times));
}
