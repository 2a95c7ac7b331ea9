//! The soak scenario in two minutes against the real heddle binary: tenants come and go for 75 s with time
//! compressed (one-minute blocks, shipping every 5 s, idle heads closed after 6 s), then everything must read
//! back and the process must hold no more files, threads or local disk than when it started, and no deleted
//! file may still be open. Beside the floats, tenants use OTLP, remote write 2.0 histograms with exemplars and
//! the query APIs, and every answer must hold what was pushed. A leak of one file per tenant lifetime leaves dozens behind here.

use heddle_testkit::{cargo_bin, run_bounded};
use std::process::Command;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_heddle-loadtest");

#[test]
fn tenants_come_and_go_and_nothing_is_left_behind() {
    let heddle = cargo_bin("heddle").expect("heddle binary");
    let out = tempfile::tempdir().expect("tempdir");
    let mut cmd = Command::new(BIN);
    cmd.args([
        "soak",
        "--duration=75s",
        "--interval=500ms",
        "--series=50",
        "--active-tenants=4",
        "--tenant-pool=14",
        "--tenant-lifetime=10s",
        "--sample-every=2s",
        "--close-idle=6s",
        "--no-progress",
    ])
    .arg(format!("--bin={}", heddle.display()))
    .arg(format!("--out={}", out.path().display()));
    let run = run_bounded(cmd, Duration::from_secs(240)).expect("soak finished");
    let text = std::fs::read_to_string(out.path().join("soak.json"))
        .unwrap_or_else(|e| panic!("no soak.json ({e}); stdout {} stderr {}", run.stdout, run.stderr));
    let r: serde_json::Value = serde_json::from_str(&text).expect("soak.json is JSON");
    let summary = format!("stdout {} stderr {}", run.stdout, run.stderr);
    assert!(run.status.success(), "{summary}");
    assert_eq!(r["errors"], 0, "{summary}");
    assert_eq!(r["verified"], true, "{summary}");
    assert!(r["samples_acknowledged"].as_u64().unwrap() > 10_000, "{summary}");
    // Every few rounds each tenant also sent OTLP, remote write 2.0 histograms with exemplars, PromQL and
    // exemplar queries: all answered, all with the pushed data.
    for surface in ["otlp", "remote_write_2", "promql", "exemplars"] {
        let s = &r["surfaces"][surface];
        assert!(s["requests"].as_u64().unwrap() > 20, "{surface}: {s} {summary}");
        assert_eq!(
            (&s["errors"], &s["wrong"]),
            (&0.into(), &0.into()),
            "{surface}: {} {summary}",
            r["surfaces"]
        );
    }
    // Tenants returned after going idle: more slots than names.
    assert!(r["tenant_slots"].as_u64().unwrap() > 14, "{summary}");

    let f = |k: &str, field: &str| r[k][field].as_f64().unwrap_or_else(|| panic!("{k}.{field} in {text}"));
    // Every tenant is idle at the end, so its head is closed: back to the files of a fresh process.
    assert!(
        f("open_files", "last") <= f("open_files", "first") + 16.0,
        "open files grew: {}",
        r["open_files"]
    );
    assert!(
        f("open_files", "max") > f("open_files", "first"),
        "the heads' files never showed: {}",
        r["open_files"]
    );
    assert_eq!(f("deleted_open_files", "last"), 0.0, "{}", r["deleted_open_files"]);
    assert!(
        f("threads", "last") <= f("threads", "first") + 16.0,
        "threads grew: {}",
        r["threads"]
    );
    // Closed tenants' directories are gone once everything is shipped; the bucket holds the data.
    assert!(
        f("disk_bytes", "last") <= f("disk_bytes", "max") / 2.0,
        "local disk was not released: {}",
        r["disk_bytes"]
    );
    assert!(
        f("bucket_bytes", "last") > 0.0,
        "nothing was shipped: {}",
        r["bucket_bytes"]
    );
}
