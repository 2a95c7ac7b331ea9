//! Per-tenant overrides in the runtime config file change a running heddle's limits without a restart: a
//! tightened limit refuses a tenant's series (and only that tenant's), a loosened one accepts it again, and a
//! broken file keeps the last good limits and says so in `/metrics`.

use heddle_proto::prometheus::{Label, Sample, TimeSeries, WriteRequest};
use heddle_testkit::{HeddleOptions, HeddleProcess, http_client, metrics_text, push, wait_until_async};
use std::time::Duration;

/// A series with `labels` labels (the metric name included), one sample now.
fn request(labels: usize) -> WriteRequest {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mut l = vec![Label {
        name: "__name__".into(),
        value: "wide".into(),
    }];
    l.extend((1..labels).map(|i| Label {
        name: format!("l{i:02}"),
        value: "v".into(),
    }));
    WriteRequest {
        timeseries: vec![TimeSeries {
            labels: l,
            samples: vec![Sample {
                value: 1.0,
                timestamp: now,
            }],
            ..TimeSeries::default()
        }],
        ..WriteRequest::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overrides_reload_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("runtime.yaml");
    std::fs::write(&file, "overrides:\n  team-a:\n    max_label_names_per_series: 3\n").unwrap();
    let h = HeddleProcess::start(HeddleOptions {
        multitenancy: true,
        args: vec![
            format!("--runtime-config.file={}", file.display()),
            "--runtime-config.reload-period=200ms".into(),
        ],
        ..HeddleOptions::default()
    })
    .expect("heddle starts");
    let http = http_client(Duration::from_secs(10)).unwrap();
    let status = |tenant: &'static str| {
        let (http, url) = (http.clone(), h.push_url());
        async move { push(&http, &url, Some(tenant), &request(5)).await.unwrap() }
    };

    let a = status("team-a").await;
    assert_eq!(a.status, 400, "team-a's override (3 labels) refuses 5: {}", a.body);
    assert!(
        a.body.contains("err-heddle-max-label-names-per-series") && a.body.contains("team-a"),
        "{}",
        a.body
    );
    assert_eq!(status("team-b").await.status, 200, "team-b keeps the default (30)");

    // Loosen team-a's limit: the next reload applies it, with no restart.
    std::fs::write(&file, "overrides:\n  team-a:\n    max_label_names_per_series: 10\n").unwrap();
    assert!(
        wait_until_async(Duration::from_secs(30), || async {
            status("team-a").await.status == 200
        })
        .await,
        "the loosened limit was not applied\n{}",
        h.log_tail(20)
    );

    // A broken file is refused: the last good limits stay and /metrics says the reload failed.
    std::fs::write(
        &file,
        "overrides:\n  team-a:\n    max_label_names_per_series: [not a number\n",
    )
    .unwrap();
    let url = h.url();
    let reported = || {
        let (http, url) = (http.clone(), url.clone());
        async move {
            let text = metrics_text(&http, &url).await.unwrap_or_default();
            text.contains("heddle_runtime_config_last_reload_successful 0")
        }
    };
    assert!(
        wait_until_async(Duration::from_secs(30), reported).await,
        "a broken runtime config must be reported"
    );
    assert_eq!(status("team-a").await.status, 200, "the last good limits stay");
}

/// `heddle --print-config` prints the effective configuration (defaults, then the file, then flags) as YAML
/// that heddle itself accepts back as a config file, and exits 0 without starting anything.
#[test]
fn print_config_shows_the_effective_config_and_round_trips() {
    let heddle = heddle_testkit::cargo_bin("heddle").expect("heddle binary");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("heddle.yaml");
    std::fs::write(&file, "limits:\n  ingestion_rate: 12345\n").expect("write config");
    let run = |args: &[String]| {
        let mut cmd = std::process::Command::new(&heddle);
        cmd.args(args);
        heddle_testkit::run_bounded(cmd, Duration::from_secs(30)).expect("run heddle")
    };
    let out = run(&[
        format!("--config.file={}", file.display()),
        "--distributor.ha-tracker.failover-timeout=45s".into(),
        "--print-config".into(),
    ]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        out.stdout.contains("ingestion_rate: 12345"),
        "file value: {}",
        out.stdout
    );
    assert!(
        out.stdout.contains("ha_tracker_failover_timeout: 45s"),
        "flag value: {}",
        out.stdout
    );
    assert!(
        out.stdout.contains("replication_factor: 3"),
        "defaults too: {}",
        out.stdout
    );

    let printed = dir.path().join("printed.yaml");
    std::fs::write(&printed, &out.stdout).expect("write printed config");
    let again = run(&[format!("--config.file={}", printed.display()), "--print-config".into()]);
    assert!(again.status.success(), "{again:?}");
    assert_eq!(again.stdout, out.stdout, "the printed config loads back unchanged");
}
