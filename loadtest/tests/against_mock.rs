//! `push` and `verify` against the in-memory receiver of heddle-testkit: retries, error accounting, and that
//! verification catches missing, altered and extra samples.

use clap::Parser;
use heddle_loadtest::args::{Cli, Command, PushArgs, VerifyArgs};
use heddle_loadtest::{run_push, run_verify};
use heddle_testkit::{MockReceiver, SeriesGen};
use std::process::Command as Process;

fn push_args(url: &str, extra: &[&str]) -> PushArgs {
    let mut argv = vec![
        "heddle-loadtest".to_owned(),
        "push".to_owned(),
        format!("--url={url}"),
        "--series=300".to_owned(),
        "--metrics=7".to_owned(),
        "--rounds=4".to_owned(),
        "--batch-size=64".to_owned(),
        "--min-backoff-ms=1".to_owned(),
        "--max-backoff-ms=5".to_owned(),
        "--progress-s=0".to_owned(),
        "--start-ms=1700000000000".to_owned(),
    ];
    argv.extend(extra.iter().map(|s| s.to_string()));
    match Cli::try_parse_from(argv).expect("flags").command {
        Command::Push(a) => a,
        _ => unreachable!("push flags"),
    }
}

fn verify_args(base: &str, extra: &[&str]) -> VerifyArgs {
    let mut argv = vec![
        "heddle-loadtest".to_owned(),
        "verify".to_owned(),
        format!("--read-url={base}"),
        "--series=300".to_owned(),
        "--metrics=7".to_owned(),
        "--rounds=4".to_owned(),
        "--start-ms=1700000000000".to_owned(),
        "--max-examples=3".to_owned(),
    ];
    argv.extend(extra.iter().map(|s| s.to_string()));
    match Cli::try_parse_from(argv).expect("flags").command {
        Command::Verify(a) => a,
        _ => unreachable!("verify flags"),
    }
}

#[tokio::test]
async fn retries_then_verifies_in_both_read_modes() {
    let mock = MockReceiver::start(false).await.expect("mock");
    mock.fail_next([503, 429, 500]);
    let report = run_push(&push_args(&mock.push_url(), &[])).await.expect("push");
    assert_eq!(report.errors, 0, "{report:?}");
    assert_eq!(report.retries, 3, "{report:?}");
    assert_eq!(report.samples_sent, 1200);
    assert_eq!(report.samples_acknowledged, 1200);
    // 5 batches per round x 4 rounds, plus the 3 retried attempts.
    assert_eq!(report.requests, 23);
    assert_eq!(mock.sample_count("anonymous"), 1200);
    for mode in ["--mode=samples", "--mode=chunks"] {
        for per_request in ["--metrics-per-request=1", "--metrics-per-request=3"] {
            let v = run_verify(&verify_args(&mock.prometheus_url(), &[mode, per_request]))
                .await
                .expect("verify");
            assert!(v.verified, "{mode} {per_request}: {v:?}");
            assert_eq!(
                (v.series_checked, v.samples_expected, v.samples_found),
                (300, 1200, 1200),
                "{mode}"
            );
        }
    }
}

/// `--protocol rw2` sends the same series and samples as remote write 2.0 requests (the mock decodes them by
/// content type), so `verify` finds every sample.
#[tokio::test]
async fn remote_write_2_pushes_verify() {
    let mock = MockReceiver::start(false).await.expect("mock");
    let report = run_push(&push_args(&mock.push_url(), &["--protocol=rw2"]))
        .await
        .expect("push");
    assert_eq!((report.errors, report.samples_acknowledged), (0, 1200), "{report:?}");
    assert_eq!(mock.sample_count("anonymous"), 1200);
    let v = run_verify(&verify_args(&mock.prometheus_url(), &[]))
        .await
        .expect("verify");
    assert!(v.verified, "{v:?}");
}

#[tokio::test]
async fn client_errors_are_not_retried_and_are_counted() {
    let mock = MockReceiver::start(false).await.expect("mock");
    mock.fail_next([400]);
    let report = run_push(&push_args(&mock.push_url(), &["--concurrency=1"]))
        .await
        .expect("push");
    assert_eq!((report.errors, report.retries), (1, 0), "{report:?}");
    assert_eq!(report.samples_acknowledged, 1200 - 64);
    let v = run_verify(&verify_args(&mock.prometheus_url(), &[]))
        .await
        .expect("verify");
    assert!(!v.verified);
    assert_eq!(v.missing, 64, "{v:?}");
}

#[tokio::test]
async fn retries_are_bounded() {
    let mock = MockReceiver::start(false).await.expect("mock");
    mock.fail_next([503; 3]);
    let report = run_push(&push_args(&mock.push_url(), &["--concurrency=1", "--max-retries=2"]))
        .await
        .expect("push");
    assert_eq!((report.errors, report.retries), (1, 2), "{report:?}");
}

#[tokio::test]
async fn verify_catches_loss_corruption_extras_and_tenants() {
    let mock = MockReceiver::start(true).await.expect("mock");
    let report = run_push(&push_args(&mock.push_url(), &["--tenant=team-a"]))
        .await
        .expect("push");
    assert_eq!(report.errors, 0, "{report:?}");
    let g = SeriesGen {
        interval_ms: 15_000,
        ..SeriesGen::new(1, 300, 7, 1_700_000_000_000)
    };
    let base = mock.prometheus_url();
    let ok = run_verify(&verify_args(&base, &["--tenant=team-a"]))
        .await
        .expect("verify");
    assert!(ok.verified, "{ok:?}");
    // Another tenant sees nothing: every sample is missing.
    let other = run_verify(&verify_args(&base, &["--tenant=team-b"]))
        .await
        .expect("verify");
    assert_eq!(
        (other.verified, other.missing, other.series_missing),
        (false, 1200, 300)
    );

    let lost = g.sample(17, 2);
    assert!(mock.remove_sample("team-a", &g.model_labels(17), lost.t));
    let v = run_verify(&verify_args(&base, &["--tenant=team-a", "--mode=chunks"]))
        .await
        .expect("verify");
    assert_eq!(
        (v.verified, v.missing, v.unexpected, v.samples_found),
        (false, 1, 0, 1199),
        "{v:?}"
    );

    let s = g.sample(18, 0);
    mock.insert_sample("team-a", g.model_labels(18), s.t, s.v + 1.0);
    mock.insert_sample("team-a", g.model_labels(19), s.t + 1, 5.0);
    let v = run_verify(&verify_args(&base, &["--tenant=team-a"]))
        .await
        .expect("verify");
    assert_eq!((v.missing, v.unexpected, v.mismatched), (2, 2, 1), "{v:?}");
}

#[tokio::test]
async fn binary_prints_json_and_exit_codes() {
    let mock = MockReceiver::start(false).await.expect("mock");
    let bin = env!("CARGO_BIN_EXE_heddle-loadtest");
    let url = mock.push_url();
    let base = mock.prometheus_url();
    let push = tokio::task::spawn_blocking(move || {
        Process::new(bin)
            .args([
                "push",
                &format!("--url={url}"),
                "--series=50",
                "--metrics=3",
                "--rounds=2",
                "--seed=9",
            ])
            .output()
    })
    .await
    .expect("join")
    .expect("run push");
    assert!(push.status.success(), "{}", String::from_utf8_lossy(&push.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&push.stdout).expect("json");
    for key in [
        "samples_sent",
        "samples_acknowledged",
        "requests",
        "errors",
        "duration_s",
        "samples_per_second",
    ] {
        assert!(summary.get(key).is_some(), "missing {key} in {summary}");
    }
    for key in ["p50", "p90", "p99", "max"] {
        assert!(
            summary["latency_ms"].get(key).is_some(),
            "missing latency_ms.{key} in {summary}"
        );
    }
    assert_eq!(summary["samples_acknowledged"], 100);
    let start = summary["start_ms"].as_i64().expect("start_ms");

    let verify = |extra: Vec<String>| {
        let base = base.clone();
        tokio::task::spawn_blocking(move || {
            let mut cmd = Process::new(bin);
            cmd.args([
                "verify",
                &format!("--read-url={base}"),
                "--series=50",
                "--metrics=3",
                "--rounds=2",
            ]);
            cmd.args(extra).output()
        })
    };
    let ok = verify(vec![format!("--start-ms={start}"), "--seed=9".into()])
        .await
        .expect("join")
        .expect("run");
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let report: serde_json::Value = serde_json::from_slice(&ok.stdout).expect("json");
    assert_eq!(report["verified"], true, "{report}");
    for key in [
        "series_checked",
        "samples_expected",
        "samples_found",
        "missing",
        "unexpected",
    ] {
        assert!(report.get(key).is_some(), "missing {key} in {report}");
    }

    let wrong_seed = verify(vec![format!("--start-ms={start}"), "--seed=10".into()])
        .await
        .expect("join")
        .expect("run");
    assert_eq!(wrong_seed.status.code(), Some(1));
    let no_start = verify(vec![]).await.expect("join").expect("run");
    assert_eq!(no_start.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&no_start.stderr).contains("--start-ms is required"));
}
