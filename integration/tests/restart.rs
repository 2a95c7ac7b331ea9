//! Durability across restarts: data pushed with `heddle-loadtest` is all there, bit for bit, after a graceful
//! stop (SIGTERM) and after a crash (SIGKILL), and tenants never see each other's data.

use heddle_model::METRIC_NAME;
use heddle_proto::prometheus::label_matcher::Type as MatcherType;
use heddle_testkit::{HeddleOptions, HeddleProcess, ReadClient, ReadMode, http_client, matcher, query, run_loadtest};
use serde_json::Value;
use std::time::Duration;

/// Upper bound of any single loadtest run.
const RUN_TIMEOUT: Duration = Duration::from_secs(180);

/// Generation flags shared by a push and its verifications.
#[derive(Debug, Clone)]
struct Dataset {
    series: usize,
    metrics: usize,
    rounds: u32,
    seed: u64,
    job: &'static str,
    tenant: Option<&'static str>,
}

impl Dataset {
    fn gen_flags(&self) -> Vec<String> {
        let mut f = vec![
            format!("--series={}", self.series),
            format!("--metrics={}", self.metrics),
            format!("--rounds={}", self.rounds),
            "--interval-ms=15000".to_owned(),
            format!("--seed={}", self.seed),
            format!("--job={}", self.job),
        ];
        if let Some(t) = self.tenant {
            f.push(format!("--tenant={t}"));
        }
        f
    }

    fn samples(&self) -> u64 {
        self.series as u64 * u64::from(self.rounds)
    }

    /// Pushes the dataset and returns its `start_ms`.
    fn push(&self, h: &HeddleProcess) -> i64 {
        let mut args = vec!["push".to_owned(), format!("--url={}", h.push_url())];
        args.extend(self.gen_flags());
        args.extend(["--batch-size=500", "--concurrency=4", "--progress-s=0"].map(String::from));
        let out = run_loadtest(&args, RUN_TIMEOUT).expect("run heddle-loadtest push");
        let summary: Value = serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("push printed no JSON ({e}): {}\n{}", out.stdout, out.stderr));
        assert!(
            out.status.success(),
            "push failed: {summary}\n{}\n{}",
            out.stderr,
            h.log_tail(30)
        );
        assert_eq!(summary["errors"], 0, "{summary}");
        assert_eq!(
            summary["samples_acknowledged"].as_u64(),
            Some(self.samples()),
            "{summary}"
        );
        summary["start_ms"].as_i64().expect("start_ms in push summary")
    }

    /// Runs `verify` (both response types) and returns the reports.
    fn verify(&self, h: &HeddleProcess, start_ms: i64, mode: &str) -> Value {
        let mut args = vec![
            "verify".to_owned(),
            format!("--read-url={}", h.prometheus_url()),
            format!("--start-ms={start_ms}"),
            format!("--mode={mode}"),
        ];
        args.extend(self.gen_flags());
        let out = run_loadtest(&args, RUN_TIMEOUT).expect("run heddle-loadtest verify");
        serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("verify printed no JSON ({e}): {}\n{}", out.stdout, out.stderr))
    }

    fn assert_intact(&self, h: &HeddleProcess, start_ms: i64, when: &str) {
        for mode in ["samples", "chunks"] {
            let report = self.verify(h, start_ms, mode);
            assert_eq!(
                report["verified"], true,
                "{when}, job {}, mode {mode}: {report}",
                self.job
            );
            assert_eq!(
                report["samples_found"].as_u64(),
                Some(self.samples()),
                "{when}, mode {mode}: {report}"
            );
        }
    }
}

fn fast_options(multitenancy: bool) -> HeddleOptions {
    HeddleOptions {
        multitenancy,
        // The default per-tenant rate (10k samples/s) would throttle the pushes into 429 retries.
        args: vec![
            "--distributor.ingestion-rate-limit=10000000".into(),
            "--distributor.ingestion-burst-size=10000000".into(),
        ],
        ..HeddleOptions::default()
    }
}

#[test]
fn nothing_is_lost_across_sigterm_and_kill9() {
    let mut h = HeddleProcess::start(fast_options(false)).expect("start heddle");
    let before = Dataset {
        series: 2000,
        metrics: 20,
        rounds: 5,
        seed: 42,
        job: "node-before",
        tenant: None,
    };
    let start = before.push(&h);
    before.assert_intact(&h, start, "after push");

    let metrics = heddle_testkit::http_get(h.http_addr(), "/metrics", Duration::from_secs(10)).expect("GET /metrics");
    assert_eq!(metrics.0, 200, "GET /metrics: {}", metrics.1);
    assert!(
        metrics.1.contains("# TYPE heddle_"),
        "no heddle metrics in /metrics:\n{}",
        metrics.1
    );

    let status = h.sigterm_and_wait().expect("graceful stop");
    assert!(
        status.success(),
        "heddle exited with {status} on SIGTERM\n{}",
        h.log_tail(30)
    );
    h.restart().expect("restart after SIGTERM");
    before.assert_intact(&h, start, "after SIGTERM and restart");

    // Written after a replay, so the crash below must recover both the replayed and the new WAL records.
    let after = Dataset {
        series: 500,
        metrics: 7,
        rounds: 3,
        seed: 7,
        job: "node-after",
        tenant: None,
    };
    let start_after = after.push(&h);
    after.assert_intact(&h, start_after, "after second push");

    h.kill9().expect("kill -9");
    h.restart().expect("restart after kill -9");
    before.assert_intact(&h, start, "after kill -9 and restart");
    after.assert_intact(&h, start_after, "after kill -9 and restart");
}

/// Every series visible to `tenant` (any metric name) in the range.
fn read_all(
    h: &HeddleProcess,
    tenant: Option<&str>,
    lo: i64,
    hi: i64,
) -> Result<Vec<heddle_testkit::SeriesSamples>, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let client = ReadClient::new(
            http_client(Duration::from_secs(30)).expect("client"),
            &h.prometheus_url(),
            tenant,
        );
        let q = query(lo, hi, vec![matcher(MatcherType::Re, METRIC_NAME, ".+")]);
        client
            .read(ReadMode::Samples, vec![q])
            .await
            .map(|mut r| r.pop().unwrap_or_default())
            .map_err(|e| e.to_string())
    })
}

/// `GET <heddle>/prometheus/api/v1/<path>` as `tenant`; asserts a 200 with `"status":"success"`.
fn api_get(h: &HeddleProcess, tenant: &str, path: &str) -> Value {
    let url = format!("{}/api/v1/{path}", h.prometheus_url());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let http = http_client(Duration::from_secs(30)).expect("client");
        let resp = http
            .get(&url)
            .header(heddle_model::TENANT_HEADER, tenant)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        assert!(status.is_success(), "GET {url}: {status}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {url}: not JSON ({e}): {body}"));
        assert_eq!(v["status"], "success", "GET {url}: {v}");
        v
    })
}

#[test]
fn tenants_are_isolated_and_survive_a_crash() {
    let mut h = HeddleProcess::start(fast_options(true)).expect("start heddle");
    let a = Dataset {
        series: 300,
        metrics: 5,
        rounds: 4,
        seed: 1,
        job: "node-a",
        tenant: Some("team-a"),
    };
    let b = Dataset {
        series: 200,
        metrics: 3,
        rounds: 6,
        seed: 2,
        job: "node-b",
        tenant: Some("team-b"),
    };
    let start_a = a.push(&h);
    let start_b = b.push(&h);

    // A request without a tenant is refused and stores nothing.
    let anonymous = Dataset {
        tenant: None,
        ..a.clone()
    };
    let mut args = vec![
        "push".to_owned(),
        format!("--url={}", h.push_url()),
        "--progress-s=0".to_owned(),
    ];
    args.extend(anonymous.gen_flags());
    let out = run_loadtest(&args, RUN_TIMEOUT).expect("run push without tenant");
    assert_eq!(
        out.status.code(),
        Some(1),
        "push without tenant must fail: {}",
        out.stdout
    );
    assert!(out.stderr.contains("401"), "{}", out.stderr);

    for when in ["before restart", "after kill -9"] {
        a.assert_intact(&h, start_a, when);
        b.assert_intact(&h, start_b, when);
        let lo = start_a.min(start_b) - 60_000;
        let hi = lo + 3_600_000;
        for (tenant, job, series) in [("team-a", "node-a", a.series), ("team-b", "node-b", b.series)] {
            let seen = read_all(&h, Some(tenant), lo, hi).expect("read all series of tenant");
            assert_eq!(seen.len(), series, "{when}: tenant {tenant} sees {} series", seen.len());
            assert!(
                seen.iter().all(|s| s.labels.get("job") == Some(job)),
                "{when}: tenant {tenant} sees another tenant's series"
            );
        }
        for (tenant, job, series) in [("team-a", "node-a", a.series), ("team-b", "node-b", b.series)] {
            let range = format!("start={}&end={}", lo / 1000, hi / 1000);
            let values = api_get(&h, tenant, &format!("label/job/values?{range}"));
            assert_eq!(
                values["data"],
                serde_json::json!([job]),
                "{when}: tenant {tenant}: {values}"
            );
            let names = api_get(&h, tenant, &format!("labels?{range}"));
            for name in ["__name__", "instance", "job"] {
                assert!(
                    names["data"].as_array().is_some_and(|a| a.iter().any(|v| v == name)),
                    "{when}: tenant {tenant} lacks label {name}: {names}"
                );
            }
            let listed = api_get(&h, tenant, &format!("series?match[]=%7Bjob%3D%22{job}%22%7D&{range}"));
            assert_eq!(
                listed["data"].as_array().map(Vec::len),
                Some(series),
                "{when}: tenant {tenant} series API"
            );
        }
        // The other tenant's flags against this tenant: nothing is found.
        let crossed = Dataset {
            tenant: Some("team-b"),
            ..a.clone()
        }
        .verify(&h, start_a, "samples");
        assert_eq!(crossed["verified"], false, "{when}: {crossed}");
        assert_eq!(crossed["samples_found"], 0, "{when}: {crossed}");
        if when == "before restart" {
            h.kill9().expect("kill -9");
            h.restart().expect("restart");
        }
    }
}
