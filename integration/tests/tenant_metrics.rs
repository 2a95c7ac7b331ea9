//! Per-tenant series leave `/metrics` once their tenant is idle (`--server.tenant-metrics-idle-timeout`),
//! against the real binary: a churn of tenants pushes (accepted samples, series the distributor refuses,
//! samples the ingester refuses as out of order), a steady tenant keeps pushing, and once the timeout has
//! passed `/metrics` names the steady tenant only, with its counts intact; a churned tenant that returns
//! counts again from zero.

use heddle_proto::prometheus::WriteRequest;
use heddle_testkit::{HeddleOptions, HeddleProcess, http_client, http_get, now_ms, push, timeseries, wait_until};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(30);
const IDLE: Duration = Duration::from_secs(3);
const CHURN: usize = 30;
const STEADY: &str = "steady";

/// One push of `tenant`: a good series, a series without a metric name (refused by the distributor) and a
/// sample older than the one stored before it (refused by the ingester as out of order).
async fn push_once(http: &reqwest::Client, url: &str, tenant: &str, t: i64) -> u16 {
    let first = WriteRequest {
        timeseries: vec![timeseries(&[("__name__", "up"), ("job", tenant)], &[(t, 1.0)])],
        ..Default::default()
    };
    let out = push(http, url, Some(tenant), &first).await.expect("push");
    assert_eq!(out.status, 200, "{tenant}: {}", out.body);
    let refused = WriteRequest {
        timeseries: vec![
            timeseries(&[("__name__", "up"), ("job", tenant)], &[(t - 1000, 2.0)]),
            timeseries(&[("job", tenant)], &[(t, 3.0)]),
        ],
        ..Default::default()
    };
    push(http, url, Some(tenant), &refused).await.expect("push").status
}

/// The tenants `/metrics` names in a `tenant` label, sorted and deduplicated.
fn exposed_tenants(metrics: &str) -> Vec<String> {
    let mut out: Vec<String> = metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split("tenant=\"").nth(1)?.split('"').next().map(str::to_owned))
        .collect();
    out.sort();
    out.dedup();
    out
}

fn value(metrics: &str, prefix: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_tenants_leave_metrics_and_active_ones_stay() {
    let heddle = HeddleProcess::start(HeddleOptions {
        multitenancy: true,
        args: vec![format!("--server.tenant-metrics-idle-timeout={}s", IDLE.as_secs())],
        ..HeddleOptions::default()
    })
    .expect("start heddle");
    let http = http_client(TIMEOUT).unwrap();
    let url = heddle.push_url();
    let metrics = || http_get(heddle.http_addr(), "/metrics", TIMEOUT).expect("metrics").1;

    let t0 = now_ms();
    for i in 0..CHURN {
        let status = push_once(&http, &url, &format!("churn-{i:02}"), t0).await;
        assert_eq!(status, 400, "churn-{i:02}: the refused series answer 400");
    }
    assert_eq!(push_once(&http, &url, STEADY, t0).await, 400);
    let before = metrics();
    let names = exposed_tenants(&before);
    assert_eq!(names.len(), CHURN + 1, "every tenant is listed first: {names:?}");
    assert!(
        value(
            &before,
            "heddle_distributor_received_samples_total{tenant=\"churn-00\"}"
        )
        .is_some_and(|v| v >= 1.0),
        "{before}"
    );
    let steady_received = |m: &str| value(m, "heddle_distributor_received_samples_total{tenant=\"steady\"}");
    let steady_before = steady_received(&before).expect("steady's received samples");
    for family in [
        "heddle_discarded_samples_total{tenant=\"churn-00\",reason=\"err-heddle-missing-metric-name\"}",
        "heddle_discarded_samples_total{tenant=\"churn-00\",reason=\"err-heddle-sample-out-of-order\"}",
    ] {
        assert_eq!(value(&before, family), Some(1.0), "{family}\n{before}");
    }

    // The churned tenants stop; the steady one pushes every 500 ms, well within the timeout.
    let mut t = t0;
    let mut steady_pushes = 0;
    let deadline = std::time::Instant::now() + IDLE * 4;
    let mut gone = false;
    while std::time::Instant::now() < deadline {
        t += 1000;
        let out = push(
            &http,
            &url,
            Some(STEADY),
            &WriteRequest {
                timeseries: vec![timeseries(&[("__name__", "up"), ("job", STEADY)], &[(t, 1.0)])],
                ..Default::default()
            },
        )
        .await
        .expect("steady push");
        assert_eq!(out.status, 200, "{}", out.body);
        steady_pushes += 1;
        if exposed_tenants(&metrics()) == [STEADY] {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let after = metrics();
    assert!(gone, "the idle tenants are still listed after {:?}:\n{after}", IDLE * 4);
    assert_eq!(
        steady_received(&after),
        Some(steady_before + f64::from(steady_pushes)),
        "the steady tenant's counters were kept:\n{after}"
    );
    assert_eq!(
        value(
            &after,
            "heddle_discarded_samples_total{tenant=\"steady\",reason=\"err-heddle-sample-out-of-order\"}"
        ),
        Some(1.0),
        "the steady tenant's old discards stay while it pushes:\n{after}"
    );

    // A churned tenant that comes back counts from zero.
    let back = WriteRequest {
        timeseries: vec![timeseries(&[("__name__", "up"), ("job", "back")], &[(now_ms(), 1.0)])],
        ..Default::default()
    };
    assert_eq!(push(&http, &url, Some("churn-07"), &back).await.unwrap().status, 200);
    let again = metrics();
    assert_eq!(exposed_tenants(&again), ["churn-07", STEADY]);
    assert_eq!(
        value(&again, "heddle_distributor_received_samples_total{tenant=\"churn-07\"}"),
        Some(1.0)
    );
    assert!(
        wait_until(TIMEOUT, || http_get(heddle.http_addr(), "/ready", TIMEOUT)
            .is_ok_and(|(s, _)| s == 200)),
        "still ready"
    );
}
