//! Bounded time and bounded files with the real binary: samples far from the clock never reach a head (and a
//! flush still answers), SIGTERM stops the process within the graceful shutdown timeout while a compaction
//! runs, and the standard process metrics report the open files against their (raised) limit.

use heddle_proto::prometheus::{TimeSeries, WriteRequest};
use heddle_testkit::{
    HeddleOptions, HeddleProcess, ReadClient, ReadMode, eq, http_client, http_get, now_ms, push, query, wait_until,
};
use std::time::Duration;

const TENANT: &str = "fresh";

fn series(name: &str, samples: &[(i64, f64)]) -> TimeSeries {
    heddle_testkit::timeseries(&[("__name__", name)], samples)
}

fn request(ts: Vec<TimeSeries>) -> WriteRequest {
    WriteRequest {
        timeseries: ts,
        ..WriteRequest::default()
    }
}

/// `POST /ingester/flush?wait=true` with a bounded wait: the status, or `None` if it did not answer in time.
async fn flush(heddle: &HeddleProcess, timeout: Duration) -> Option<u16> {
    let resp = http_client(timeout)
        .unwrap()
        .post(format!("{}/ingester/flush?wait=true", heddle.url()))
        .send()
        .await
        .ok()?;
    Some(resp.status().as_u16())
}

/// The samples of `metric` the querier answers for the fresh tenant around now.
async fn stored(heddle: &HeddleProcess, metric: &str) -> usize {
    let reader = ReadClient::new(
        http_client(Duration::from_secs(30)).unwrap(),
        &heddle.prometheus_url(),
        Some(TENANT),
    );
    let now = now_ms();
    let q = query(now - 3_600_000, now + 3_600_000, vec![eq("__name__", metric)]);
    let got = reader.read(ReadMode::Samples, vec![q]).await.expect("remote read");
    got[0].iter().map(|s| s.samples.len()).sum()
}

/// A fresh tenant sent `i64::MIN` and `i64::MAX` timestamps: both refused with 400 and messages naming the
/// sample, the bound and the flag; the request's valid sample lands; nothing far away reached the head, so a
/// flush answers at once (it used to walk 2-hour ranges from the year -292 million).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timestamps_at_the_ends_of_time_are_refused_for_a_fresh_tenant() {
    let heddle = HeddleProcess::start(HeddleOptions {
        multitenancy: true,
        ..HeddleOptions::default()
    })
    .expect("heddle starts");
    let http = http_client(Duration::from_secs(30)).unwrap();
    let now = now_ms();
    let out = push(
        &http,
        &heddle.push_url(),
        Some(TENANT),
        &request(vec![
            series("ancient", &[(i64::MIN, 1.0)]),
            series("future", &[(i64::MAX, 1.0)]),
            series("ok", &[(now, 1.0)]),
        ]),
    )
    .await
    .expect("push sent");
    assert_eq!(out.status, 400, "{out:?}");
    for want in [
        "err-heddle-sample-out-of-bounds",
        &format!("ts={}", i64::MIN),
        "too old for the tenant's empty head",
        "--blocks-storage.tsdb.block-ranges-period",
        "err-heddle-too-far-in-future",
        &format!("first: {} ms", i64::MAX),
        "--validation.create-grace-period",
    ] {
        assert!(out.body.contains(want), "{want:?} not in {}", out.body);
    }
    assert_eq!(stored(&heddle, "ok").await, 1, "the valid sample of the request landed");
    assert_eq!(stored(&heddle, "ancient").await, 0);

    let status = flush(&heddle, Duration::from_secs(60)).await;
    assert!(
        matches!(status, Some(200..=299)),
        "flush?wait=true answered {status:?}\n{}",
        heddle.log_tail(30)
    );
    assert_eq!(stored(&heddle, "ok").await, 1, "still readable after the flush");
    let (status, metrics) = http_get(heddle.http_addr(), "/metrics", Duration::from_secs(10)).expect("scrape");
    assert_eq!(status, 200);
    assert!(
        metrics
            .contains(r#"heddle_discarded_samples_total{tenant="fresh",reason="err-heddle-sample-out-of-bounds"} 1"#),
        "{metrics}"
    );
}

/// SIGTERM while a compaction is stuck (a failpoint sleeps ten minutes in it) and a `flush?wait=true` waits
/// for that compaction: the process still exits within the graceful shutdown timeout plus a small margin,
/// after closing the tenant's head (its WAL synced), and says what it cut short.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_within_the_timeout_while_a_compaction_runs() {
    let timeout = Duration::from_secs(3);
    let mut heddle = HeddleProcess::start(HeddleOptions {
        args: vec![format!("--server.graceful-shutdown-timeout={}s", timeout.as_secs())],
        env: vec![("HEDDLE_FAILPOINT".into(), "compact-before-block=sleep:600000".into())],
        ..HeddleOptions::default()
    })
    .expect("heddle starts");
    let http = http_client(Duration::from_secs(30)).unwrap();
    let out = push(
        &http,
        &heddle.push_url(),
        None,
        &request(vec![series("up", &[(now_ms(), 1.0)])]),
    )
    .await
    .expect("push sent");
    assert!(out.is_success(), "{out:?}");
    let url = heddle.url();
    // Never answers before the stop: the flush waits for the compaction the failpoint holds.
    let stuck = tokio::spawn(async move {
        http_client(Duration::from_secs(60))
            .unwrap()
            .post(format!("{url}/ingester/flush?wait=true"))
            .send()
            .await
            .map(|r| r.status().as_u16())
    });
    let reached = wait_until(Duration::from_secs(30), || {
        heddle.log_tail(200).contains("failpoint compact-before-block reached")
    });
    assert!(
        reached,
        "the compaction never reached the failpoint\n{}",
        heddle.log_tail(30)
    );

    // A bounded wait, not a performance figure: without the bound the process never exits.
    let margin = Duration::from_secs(7);
    let stopped = heddle.sigterm_and_wait_within(timeout + margin);
    let log = heddle.log_tail(200);
    let (status, took) = stopped.unwrap_or_else(|e| panic!("no exit within {:?}: {e}\n{log}", timeout + margin));
    assert!(status.success(), "exit status {status:?}\n{log}");
    for want in [
        "in-flight requests did not finish in time",
        "closed tenant head",
        "shutdown sequence done",
    ] {
        assert!(log.contains(want), "{want:?} not logged\n{log}");
    }
    eprintln!("exited {took:?} after SIGTERM with --server.graceful-shutdown-timeout={timeout:?}");
    stuck.abort();
}

/// Every process exports the standard process metrics; the open files are counted against the soft limit
/// the process raised to its hard limit at start (logged).
#[test]
fn process_metrics_report_open_files_against_the_raised_limit() {
    let heddle = HeddleProcess::start(HeddleOptions::default()).expect("heddle starts");
    let (status, text) = http_get(heddle.http_addr(), "/metrics", Duration::from_secs(10)).expect("scrape");
    assert_eq!(status, 200);
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
            .unwrap_or_else(|| panic!("{name} missing\n{text}"))
            .parse()
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let (open, max) = (value("process_open_fds"), value("process_max_fds"));
    assert!(open > 0.0 && open <= max, "open {open}, max {max}");
    assert!(value("process_resident_memory_bytes") > 0.0);
    assert!(value("process_virtual_memory_bytes") >= value("process_resident_memory_bytes"));
    assert!(value("process_threads") >= 1.0);
    assert!(value("process_cpu_seconds_total") >= 0.0);
    let start = value("process_start_time_seconds");
    let now = now_ms() as f64 / 1000.0;
    assert!(start <= now + 1.0 && start > now - 3600.0, "start {start}, now {now}");
    let log = heddle.log_tail(100);
    assert!(log.contains("open files limit"), "{log}");
    let hard = std::fs::read_to_string(format!("/proc/{}/limits", heddle.pid().unwrap()))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(4).map(str::to_owned))
        .unwrap();
    if let Ok(hard) = hard.parse::<f64>() {
        assert_eq!(max, hard, "the soft limit was raised to the hard one");
    }
}

/// The process's open descriptors on files under `dir`, from `/proc/<pid>/fd`.
fn fds_under(pid: u32, dir: &std::path::Path) -> Vec<String> {
    let dir = dir.to_string_lossy().into_owned();
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|entries| {
            entries
                .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .map(|p| p.to_string_lossy().into_owned())
                .filter(|p| p.starts_with(&dir))
                .collect()
        })
        .unwrap_or_default()
}

/// The value of an unlabelled sample line `name value` of an exposition, 0 when absent.
fn sample_value(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// A tenant that goes idle is compacted, shipped and then closed: it leaves `heddle_ingester_tenants`, the
/// process holds no descriptor under its directory and the directory is gone; its samples are read from the
/// bucket, and the next push opens it again with the earlier samples still readable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_tenant_is_closed_and_its_files_released_then_reopened_by_a_push() {
    let heddle = HeddleProcess::start(HeddleOptions {
        multitenancy: true,
        args: [
            "--blocks-storage.tsdb.head-compaction-interval=300ms",
            "--blocks-storage.tsdb.head-compaction-idle-timeout=1s",
            "--blocks-storage.tsdb.ship-interval=300ms",
            "--blocks-storage.bucket-store.sync-interval=300ms",
            "--blocks-storage.tsdb.close-idle-tsdb-timeout=3s",
        ]
        .map(String::from)
        .to_vec(),
        ..HeddleOptions::default()
    })
    .expect("heddle starts");
    let pid = heddle.pid().expect("running");
    let tenant_dir = heddle.data_dir().join(TENANT);
    let http = http_client(Duration::from_secs(30)).unwrap();
    let now = now_ms();
    let first: Vec<(i64, f64)> = (0..5).map(|i| (now - 60_000 + i * 1000, i as f64)).collect();
    let out = push(
        &http,
        &heddle.push_url(),
        Some(TENANT),
        &request(vec![series("m", &first)]),
    )
    .await
    .expect("push sent");
    assert!(out.is_success(), "{out:?}");
    assert!(
        !fds_under(pid, &tenant_dir).is_empty(),
        "an open tenant holds its WAL open"
    );

    let metrics = || {
        http_get(heddle.http_addr(), "/metrics", Duration::from_secs(10))
            .expect("scrape")
            .1
    };
    let closed = wait_until(Duration::from_secs(60), || {
        sample_value(&metrics(), "heddle_ingester_idle_tenants_closed_total") == 1.0
    });
    assert!(closed, "the idle tenant was not closed\n{}", heddle.log_tail(40));
    let text = metrics();
    assert_eq!(sample_value(&text, "heddle_ingester_tenants"), 0.0, "{text}");
    assert_eq!(
        fds_under(pid, &tenant_dir),
        Vec::<String>::new(),
        "descriptors left under the closed tenant"
    );
    assert!(!tenant_dir.exists(), "the closed tenant's directory is deleted");
    assert!(
        sample_value(&text, "process_open_fds") <= sample_value(&text, "process_max_fds"),
        "{text}"
    );
    assert_eq!(
        stored(&heddle, "m").await,
        5,
        "the closed tenant's samples are read from the bucket"
    );

    let out = push(
        &http,
        &heddle.push_url(),
        Some(TENANT),
        &request(vec![series("m", &[(now_ms(), 9.0)])]),
    )
    .await
    .expect("push sent");
    assert!(out.is_success(), "the next push opens the tenant again: {out:?}");
    assert!(tenant_dir.exists());
    assert_eq!(sample_value(&metrics(), "heddle_ingester_tenants"), 1.0);
    assert_eq!(
        stored(&heddle, "m").await,
        6,
        "earlier samples (bucket) and the new one (head)"
    );
}
