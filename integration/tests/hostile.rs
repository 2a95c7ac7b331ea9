//! Hostile input against one real heddle with multitenancy and an admin token: semantic attacks rather than
//! fuzzed bytes, across remote write, remote read, the series and label API, the admin routes and gRPC (the
//! single process serves no ingester API; Admin needs the token). Each case states the status and the words its
//! answer must hold; a case that could cost memory also states how far the process's peak resident set may grow
//! while it is answered. Before the cases a witness tenant stores known samples, and while they run a bystander
//! tenant pushes normally; afterwards the witness still reads back exactly, every bystander push was accepted
//! and reads back, the process is still ready, and no case's data leaked into the witness tenant or out of its
//! own.
//!
//! The cases live beside this file, one file per surface (`hostile/<surface>.rs`); `hostile/case.rs` holds
//! what a case is made of.

#[path = "hostile/admin.rs"]
mod admin;
#[path = "hostile/case.rs"]
mod case;
#[path = "hostile/doors.rs"]
mod doors;
#[path = "hostile/histograms.rs"]
mod histograms;
#[path = "hostile/otlp.rs"]
mod otlp;
#[path = "hostile/promql.rs"]
mod promql;
#[path = "hostile/push.rs"]
mod push;
#[path = "hostile/querier.rs"]
mod querier;
#[path = "hostile/read.rs"]
mod read;
#[path = "hostile/tenancy.rs"]
mod tenancy;

use case::{Case, TOKEN, WITNESS, send, series};
use heddle_model::METRIC_NAME;
use heddle_proto::prometheus::WriteRequest;
use heddle_proto::prometheus::label_matcher::Type as MatcherType;
use heddle_testkit::{HeddleOptions, HeddleProcess, ReadClient, ReadMode, http_client, matcher, now_ms, query};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const WITNESS_SAMPLES: usize = 20;
const MAX_SERIES: usize = 100;
const BYSTANDER: &str = "bystander";

fn all_cases(now: i64) -> Vec<Case> {
    [
        tenancy::cases(now),
        push::cases(now),
        read::cases(now),
        admin::cases(now),
        doors::cases(now),
        otlp::cases(now),
        histograms::cases(now),
        querier::cases(now),
        promql::cases(now),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// A `kB` field of `/proc/<pid>/status`, in bytes.
fn status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("process status");
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"));
    kb * 1024
}

/// Resets the process's peak resident set (`VmHWM`) to its current one (Linux `clear_refs` 5) and returns it.
fn reset_peak(pid: u32) -> u64 {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset VmHWM");
    status_bytes(pid, "VmRSS:")
}

/// Pushes one sample every 100 ms to the bystander tenant until `stop`; returns each push's timestamp and
/// status.
async fn bystander(http: reqwest::Client, url: String, stop: Arc<AtomicBool>) -> Vec<(i64, u16, String)> {
    let mut sent = Vec::new();
    let mut t = now_ms();
    // Bounded: the cases take a few minutes at most.
    for _ in 0..10 * 600 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        t = t.max(now_ms());
        let req = WriteRequest {
            timeseries: vec![series(&[(METRIC_NAME, "bystander_metric")], &[(t, t as f64)])],
            ..Default::default()
        };
        let out = heddle_testkit::push(&http, &url, Some(BYSTANDER), &req).await;
        match out {
            Ok(out) => sent.push((t, out.status, out.body)),
            Err(e) => sent.push((t, 0, e.to_string())),
        }
        t += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sent
}

async fn read_all(heddle: &HeddleProcess, tenant: &str, now: i64) -> Vec<(String, Vec<(i64, f64)>)> {
    let reader = ReadClient::new(
        http_client(Duration::from_secs(30)).expect("client"),
        &heddle.prometheus_url(),
        Some(tenant),
    );
    let got = reader
        .read(
            ReadMode::Samples,
            vec![query(
                now - 3_600_000,
                now + 3_600_000,
                vec![matcher(MatcherType::Re, METRIC_NAME, ".+")],
            )],
        )
        .await
        .unwrap_or_else(|e| panic!("read {tenant}: {e}"));
    got.into_iter()
        .flatten()
        .map(|s| {
            (
                format!("{:?}", s.labels),
                s.samples.iter().map(|s| (s.t, s.v)).collect(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_are_refused_and_harm_nobody() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("admin-token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("token file");
    let runtime_config = dir.path().join("runtime.yaml");
    std::fs::write(&runtime_config, histograms::runtime_config()).expect("runtime config");
    let opts = HeddleOptions {
        multitenancy: true,
        args: vec![
            format!("--server.admin-token-file={}", token_file.display()),
            // Small enough that fifty copies of one full scan of the attacker's few series exceed it.
            format!("--querier.max-fetched-series-per-query={MAX_SERIES}"),
            // Per-tenant histogram limits of the histogram cases' own tenants, and a fetch sample limit that
            // 30 histograms of the ceiling's size pass by weight (every other case reads a few hundred samples).
            format!("--runtime-config.file={}", runtime_config.display()),
            format!("--querier.max-samples-per-query={}", histograms::MAX_SAMPLES_PER_QUERY),
            // The querier's cases bound what they may cost by its in-flight budget.
            format!("--querier.max-inflight-requests-bytes={}", querier::QUERIER_BUDGET),
            format!("--ingester.max-global-exemplars-per-user={}", querier::EXEMPLARS),
            // One PromQL query at a time: a query that kept its slot past its timeout delays the next one.
            "--querier.max-concurrent=1".to_owned(),
        ],
        ..HeddleOptions::default()
    };
    let mut heddle = tokio::task::spawn_blocking(move || HeddleProcess::start(opts))
        .await
        .expect("join")
        .expect("start heddle");
    let pid = heddle.pid().expect("pid");
    let http = heddle_testkit::http_client_unpooled(Duration::from_secs(60)).expect("client");
    let now = now_ms();
    let witness_samples: Vec<(i64, f64)> = (0..WITNESS_SAMPLES as i64)
        .map(|i| (now - 60_000 + i * 1000, i as f64))
        .collect();
    let out = heddle_testkit::push(
        &http,
        &heddle.push_url(),
        Some(WITNESS),
        &WriteRequest {
            timeseries: vec![series(
                &[(METRIC_NAME, "witness_metric"), ("job", "w")],
                &witness_samples,
            )],
            ..Default::default()
        },
    )
    .await
    .expect("push witness");
    assert_eq!(out.status, 200, "witness push: {}", out.body);

    let stop = Arc::new(AtomicBool::new(false));
    let pushes = tokio::spawn(bystander(http.clone(), heddle.push_url(), stop.clone()));

    let base = format!("http://{}", heddle.http_addr());
    let mut failures = Vec::new();
    let cases = all_cases(now);
    for case in &cases {
        let before = case.peak_growth.map(|_| reset_peak(pid));
        let (status, text) = send(&http, &base, case).await;
        if let (Some(limit), Some(before)) = (case.peak_growth, before) {
            let growth = status_bytes(pid, "VmHWM:").saturating_sub(before);
            if growth > limit {
                failures.push(format!(
                    "{:?}: the peak resident set grew by {} MiB, the bound is {} MiB",
                    case.name,
                    growth >> 20,
                    limit >> 20
                ));
            }
        }
        if status != case.status {
            let shown: String = text.chars().take(2000).collect();
            failures.push(format!(
                "{:?}: status {status}, want {}: {shown}",
                case.name, case.status
            ));
            continue;
        }
        for want in &case.contains {
            if !text.contains(want) {
                let shown: String = text.chars().take(2000).collect();
                failures.push(format!("{:?}: answer lacks {want:?}: {shown}", case.name));
            }
        }
        for word in &case.lacks {
            if text.contains(word) {
                failures.push(format!("{:?}: answer holds {word:?}", case.name));
            }
        }
    }
    let grpc = admin::grpc_cases();
    for case in &grpc {
        match (case.call)(heddle.grpc_addr()).await {
            Ok(answer) => failures.push(format!("{:?}: answered {answer}, want {:?}", case.name, case.code)),
            Err(status) if status.code() != case.code => failures.push(format!(
                "{:?}: status {:?}, want {:?}: {}",
                case.name,
                status.code(),
                case.code,
                status.message()
            )),
            Err(status) if !status.message().contains(case.contains) => failures.push(format!(
                "{:?}: message lacks {:?}: {}",
                case.name,
                case.contains,
                status.message()
            )),
            Err(_) => {}
        }
    }
    stop.store(true, Ordering::Relaxed);
    let pushed = pushes.await.expect("bystander task");
    assert!(
        heddle.is_running(),
        "a case stopped the process: {}",
        heddle.log_tail(30)
    );
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}\n{}",
        failures.len(),
        cases.len() + grpc.len(),
        failures.join("\n"),
        heddle.log_tail(20)
    );
    let ready = http.get(format!("{base}/ready")).send().await.expect("ready");
    assert_eq!(ready.status().as_u16(), 200, "still ready after the cases");

    let witness = read_all(&heddle, WITNESS, now).await;
    assert_eq!(
        witness.len(),
        1,
        "the witness tenant holds only its own series: {witness:?}"
    );
    assert_eq!(witness[0].1, witness_samples, "the witness samples are intact");

    let refused: Vec<_> = pushed.iter().filter(|(_, status, _)| *status != 200).collect();
    assert!(
        refused.is_empty(),
        "the bystander's pushes were refused while the cases ran: {refused:?}"
    );
    assert!(
        pushed.len() >= 2,
        "the bystander pushed while the cases ran: {pushed:?}"
    );
    let acked: Vec<(i64, f64)> = pushed.iter().map(|(t, _, _)| (*t, *t as f64)).collect();
    let bystander = read_all(&heddle, BYSTANDER, now).await;
    assert_eq!(bystander.len(), 1, "the bystander holds one series: {bystander:?}");
    assert_eq!(bystander[0].1, acked, "every acknowledged bystander sample reads back");
    assert!(cases.len() + grpc.len() >= 70, "{} cases", cases.len() + grpc.len());
}
