//! Compatibility with the real thing: Prometheus reads WALs of our records, and we read Prometheus' WAL.
//! Skipped only where the Prometheus binaries are not installed and CI is not set.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use heddle_model::Labels;

use super::*;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    Labels::from_sorted(pairs.iter().copied()).unwrap()
}

fn installed(binary: &str) -> bool {
    if Command::new(binary).arg("--version").output().is_ok() {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "{binary} is required in CI");
    eprintln!("{binary} not installed: skipping");
    false
}

/// Prometheus itself reads a WAL of our records: `promtool tsdb dump` replays the WAL into a head and prints
/// every sample. The series record spans several pages and is snappy-compressed, so this checks the WAL
/// framing as well as the record layout. Skipped only where promtool is not installed and CI is not set.
#[test]
fn promtool_dumps_our_wal() {
    if std::process::Command::new("promtool")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(std::env::var_os("CI").is_none(), "promtool is required in CI");
        eprintln!("promtool not installed: skipping");
        return;
    }
    for compress in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = heddle_wal::Wal::open(
            &dir.path().join("wal"),
            heddle_wal::WalOptions {
                compress,
                ..heddle_wal::WalOptions::default()
            },
        )
        .unwrap();
        let names: Vec<String> = (0..3000).map(|i| format!("series_{i:04}")).collect();
        let sets: Vec<Labels> = names
            .iter()
            .map(|n| labels(&[("__name__", "heddle_compat"), ("instance", "host:9090"), ("series", n)]))
            .collect();
        let mut series = Vec::new();
        encode_series(
            sets.iter().enumerate().map(|(i, l)| (i as u64 + 1, l.iter())),
            &mut series,
        );
        assert!(series.len() > 3 * heddle_wal::PAGE_SIZE, "the record spans pages");
        let samples: Vec<RefSample> = (0..sets.len() as u64)
            .flat_map(|r| {
                [0i64, 15_000].map(|dt| RefSample {
                    series_ref: r + 1,
                    t: 1_700_000_000_000 + dt,
                    v: r as f64 + dt as f64 / 1000.0 - 0.5,
                })
            })
            .collect();
        let mut sample_recs = Vec::new();
        for chunk in samples.chunks(1000) {
            let mut buf = Vec::new();
            encode_samples(chunk, &mut buf);
            sample_recs.push(buf);
        }
        let mut records: Vec<&[u8]> = vec![&series];
        records.extend(sample_recs.iter().map(|r| r.as_slice()));
        wal.log(&records).unwrap();
        wal.close().unwrap();

        let out = std::process::Command::new("promtool")
            .args(["tsdb", "dump"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut got: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        got.sort();
        let mut want: Vec<String> = samples
            .iter()
            .map(|s| {
                let l = &sets[(s.series_ref - 1) as usize];
                let inner: Vec<String> = l.iter().map(|l| format!("{}=\"{}\"", l.name, l.value)).collect();
                format!("{{{}}} {} {}", inner.join(", "), s.v, s.t)
            })
            .collect();
        want.sort();
        assert_eq!(got.len(), want.len(), "compress={compress}");
        assert_eq!(got, want, "compress={compress}");
    }
}

/// Reads a WAL that Prometheus wrote while scraping itself, stopped gracefully: every record is framed and
/// encoded as we expect, and the `up` series has its samples.
#[test]
fn we_read_prometheus_wal() {
    if !installed("prometheus") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: self\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let mut child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", data.display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let wal = data.join("wal");
    // Wait for a few scrapes (bounded), then stop it with SIGTERM so it closes the WAL.
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline && wal_bytes(&wal) < 12_000 {
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
    let mut exited = false;
    for _ in 0..100 {
        if child.try_wait().unwrap().is_some() {
            exited = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
    }

    let mut series: Vec<RefSeries> = Vec::new();
    let mut samples: Vec<RefSample> = Vec::new();
    let mut other = 0;
    let mut errors = Vec::new();
    let report = heddle_wal::replay(&wal, |rec: &[u8]| -> Result<(), heddle_wal::WalError> {
        match decode(rec) {
            Ok(Record::Series(s)) => series.extend(s),
            Ok(Record::Samples(s)) => samples.extend(s),
            Ok(_) => other += 1,
            Err(e) => errors.push(e),
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(
        report.repaired, None,
        "a gracefully stopped prometheus leaves a clean wal"
    );
    assert_eq!(errors, Vec::new());
    assert!(series.len() > 50, "{} series, {other} other records", series.len());
    let up = series
        .iter()
        .find(|s| s.labels.metric_name() == Some("up"))
        .expect("the up series");
    assert_eq!(up.labels.get("job"), Some("self"));
    let up_samples: Vec<&RefSample> = samples.iter().filter(|s| s.series_ref == up.series_ref).collect();
    assert!(up_samples.len() >= 2, "{} up samples", up_samples.len());
    assert!(up_samples.iter().all(|s| s.v == 1.0));
    assert!(up_samples.windows(2).all(|w| w[0].t < w[1].t));
}

fn wal_bytes(dir: &Path) -> u64 {
    heddle_wal::list_segments(dir)
        .unwrap_or_default()
        .iter()
        .filter_map(|&s| std::fs::metadata(heddle_wal::segment_path(dir, s)).ok())
        .map(|m| m.len())
        .sum()
}

/// An Exemplars record byte for byte as Prometheus' `record.Encoder.Exemplars` writes it (`tsdb/record`:
/// base ref and time big-endian, then per exemplar zigzag deltas, the value's bits and `EncodeLabels`),
/// built here by hand from that layout, decodes to the exemplars it holds; and ours encodes to the same bytes.
#[test]
fn a_prometheus_exemplars_record_decodes() {
    let mut rec = vec![4u8];
    rec.extend(7u64.to_be_bytes());
    rec.extend(1_700_000_000_000i64.to_be_bytes());
    // Exemplar 1: ref +0, t +0, 1.5, {trace_id="abc"}.
    rec.extend([0, 0]);
    rec.extend(1.5f64.to_bits().to_be_bytes());
    rec.extend([1, 8]);
    rec.extend(b"trace_id");
    rec.extend([3]);
    rec.extend(b"abc");
    // Exemplar 2: ref -2 (zigzag 3), t +5000 (zigzag 10000 = 0x90 0x4e), -2.0, no labels.
    rec.extend([3, 0x90, 0x4e]);
    rec.extend((-2.0f64).to_bits().to_be_bytes());
    rec.extend([0]);
    let want = vec![
        RefExemplar {
            series_ref: 7,
            t: 1_700_000_000_000,
            v: 1.5,
            labels: vec![heddle_model::Label {
                name: "trace_id".into(),
                value: "abc".into(),
            }],
        },
        RefExemplar {
            series_ref: 5,
            t: 1_700_000_005_000,
            v: -2.0,
            labels: vec![],
        },
    ];
    assert_eq!(decode(&rec).unwrap(), Record::Exemplars(want.clone()));
    let mut ours = Vec::new();
    encode_exemplars(&want, &mut ours);
    assert_eq!(ours, rec);
}

/// Prometheus replays a WAL holding our Exemplars records: `promtool tsdb dump` decodes every record of the
/// WAL as it loads the head (a record that does not decode is a corruption that cuts off the rest), so the
/// samples logged after the exemplars are dumped only if Prometheus read the exemplars as the records they
/// are. A damaged Exemplars record in the same place makes promtool fail on it, which shows the check is real.
#[test]
fn promtool_replays_our_exemplars_records() {
    if !installed("promtool") {
        return;
    }
    let dump = |exemplars: &[u8]| -> Result<Vec<String>, String> {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = heddle_wal::Wal::open(&dir.path().join("wal"), heddle_wal::WalOptions::default()).unwrap();
        let set = labels(&[("__name__", "heddle_exemplar_compat"), ("job", "a")]);
        let mut series = Vec::new();
        encode_series([(1u64, set.iter())], &mut series);
        let t0 = 1_700_000_000_000;
        let mut first = Vec::new();
        encode_samples(
            &[RefSample {
                series_ref: 1,
                t: t0,
                v: 1.0,
            }],
            &mut first,
        );
        let mut after = Vec::new();
        encode_samples(
            &[RefSample {
                series_ref: 1,
                t: t0 + 15_000,
                v: 2.0,
            }],
            &mut after,
        );
        wal.log(&[&series, &first, exemplars, &after]).unwrap();
        wal.close().unwrap();
        let out = Command::new("promtool")
            .args(["tsdb", "dump"])
            .arg(dir.path())
            .output()
            .unwrap();
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect())
    };
    let mut good = Vec::new();
    encode_exemplars(
        &[
            RefExemplar {
                series_ref: 1,
                t: 1_700_000_000_000,
                v: 0.5,
                labels: vec![heddle_model::Label {
                    name: "trace_id".into(),
                    value: "0af7651916cd43dd8448eb211c80319c".into(),
                }],
            },
            RefExemplar {
                series_ref: 1,
                t: 1_700_000_001_000,
                v: 0.25,
                labels: vec![],
            },
        ],
        &mut good,
    );
    let all = dump(&good).unwrap_or_else(|e| panic!("promtool failed: {e}"));
    assert_eq!(all.len(), 2, "both samples, the one after the exemplars too: {all:?}");
    // The same record cut inside its second exemplar's value.
    let damaged = dump(&good[..good.len() - 4]).expect_err("a damaged exemplars record is refused");
    assert!(damaged.contains("decode exemplars"), "{damaged}");
}
