//! `probe`: the small requests that once cost heddle gigabytes or held a query slot past its timeout, sent one
//! at a time to a heddle the driver starts (default flags, single process), each with the process's peak
//! resident set reset before it (`/proc/<pid>/clear_refs`), so its answer, peak RSS growth and time can be
//! compared between two binaries.

use crate::LoadtestError;
use crate::target::{StartOptions, StartedTarget, TargetKind};
use heddle_testkit::client::error_chain;
use heddle_testkit::hostile;
use serde::Serialize;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// One probe request.
struct Probe {
    name: &'static str,
    method: reqwest::Method,
    path: String,
    headers: Vec<(&'static str, &'static str)>,
    body: Vec<u8>,
}

/// What one probe cost.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeResult {
    pub name: &'static str,
    pub body_bytes: usize,
    pub status: u16,
    /// The start of the answer.
    pub answer: String,
    /// Growth of the process's peak resident set while it answered.
    pub peak_growth_bytes: u64,
    pub seconds: f64,
    /// Whether the process still answered `/ready` afterwards.
    pub alive: bool,
}

const REMOTE_WRITE: [(&str, &str); 3] = [
    ("Content-Type", "application/x-protobuf"),
    ("Content-Encoding", "snappy"),
    ("X-Prometheus-Remote-Write-Version", "0.1.0"),
];

fn probes(now_ms: i64) -> Result<Vec<Probe>, LoadtestError> {
    let enc = |e: heddle_testkit::TestkitError| LoadtestError::Target(e.to_string());
    let post = |name, path: &str, headers: Vec<(&'static str, &'static str)>, body| Probe {
        name,
        method: reqwest::Method::POST,
        path: path.to_owned(),
        headers,
        body,
    };
    let otlp = vec![("Content-Type", "application/x-protobuf"), ("Content-Encoding", "gzip")];
    // Ends in `b` so that it does not match the empty string (a selector needs one such matcher).
    let regex = format!("{{__name__=~\"{}b\"}}", "a|".repeat(35 * 1024));
    let start = now_ms / 1000 - 11_000;
    let quantile = "quantile_over_time(0.5, probe_up[2h])";
    Ok(vec![
        post(
            "OTLP: an unknown group, then 40M empty points",
            "/otlp/v1/metrics",
            otlp.clone(),
            hostile::gzip(&hostile::otlp_group_then_empty_points(40_000_000)).map_err(enc)?,
        ),
        post(
            "OTLP: one histogram point, 1,000 bounds, a 700 KiB attribute",
            "/otlp/v1/metrics",
            otlp,
            hostile::gzip(&hostile::otlp_label_amplification(1000, 700 << 10)).map_err(enc)?,
        ),
        post(
            "remote read of 15M empty queries",
            "/prometheus/api/v1/read",
            vec![
                ("Content-Type", "application/x-protobuf"),
                ("Content-Encoding", "snappy"),
                ("X-Prometheus-Remote-Read-Version", "0.1.0"),
            ],
            hostile::remote_read_empty_queries(15_000_000).map_err(enc)?,
        ),
        post(
            "remote write 1.0: a histogram of 40M buckets",
            "/api/v1/push",
            REMOTE_WRITE.to_vec(),
            hostile::histogram_buckets_request(40_000_000, now_ms, false).map_err(enc)?,
        ),
        post(
            "remote write 2.0: a histogram of 40M buckets",
            "/api/v1/push",
            vec![
                (
                    "Content-Type",
                    "application/x-protobuf;proto=io.prometheus.write.v2.Request",
                ),
                ("Content-Encoding", "snappy"),
                ("X-Prometheus-Remote-Write-Version", "2.0.0"),
            ],
            hostile::histogram_buckets_request(40_000_000, now_ms + 1, true).map_err(enc)?,
        ),
        Probe {
            name: "PromQL: a 70 KiB regex selector",
            method: reqwest::Method::POST,
            path: "/prometheus/api/v1/query".into(),
            headers: vec![("Content-Type", "application/x-www-form-urlencoded")],
            body: form(&[("query", &regex)]),
        },
        Probe {
            name: "PromQL: quantile_over_time of 110 min at 1 s over 11,000 steps, timeout 1s",
            method: reqwest::Method::POST,
            path: "/prometheus/api/v1/query_range".into(),
            headers: vec![("Content-Type", "application/x-www-form-urlencoded")],
            body: form(&[
                ("query", quantile),
                ("start", &start.to_string()),
                ("end", &(now_ms / 1000).to_string()),
                ("step", "1"),
                ("timeout", "1s"),
            ]),
        },
    ])
}

fn form(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut out = String::new();
    for (k, v) in pairs {
        if !out.is_empty() {
            out.push('&');
        }
        out.push_str(k);
        out.push('=');
        for b in v.bytes() {
            match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
                _ => out.push_str(&format!("%{b:02X}")),
            }
        }
    }
    out.into_bytes()
}

/// CPU ticks (user + system) the process has used.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// Waits (at most a minute) until the process used less than a tenth of a CPU over a second.
async fn settle(pid: u32) {
    let mut last = cpu_ticks(pid);
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = cpu_ticks(pid);
        if let (Some(a), Some(b)) = (last, now)
            && b.saturating_sub(a) < 10
        {
            return;
        }
        last = now;
    }
}

fn status_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = status.lines().find_map(|l| l.strip_prefix(field))?;
    kb.trim().trim_end_matches("kB").trim().parse().ok()
}

/// Starts `binary` (default flags beside the driver's ports and directories, and no rate or series limit), stores an hour of one series
/// for the PromQL probes, sends every probe, and stops it.
pub async fn run_probes(binary: Option<PathBuf>) -> Result<Vec<ProbeResult>, LoadtestError> {
    let target = StartedTarget::start(
        TargetKind::Heddle,
        &StartOptions {
            binary,
            multitenancy: false,
            // The driver's target already lifts the rate limit, so a refusal comes from the guard probed.
            extra_args: Vec::new(),
        },
    )?;
    let pid = target
        .pid()
        .ok_or_else(|| LoadtestError::Target("the started heddle has no pid".into()))?;
    let origin = target
        .write_url
        .strip_suffix("/api/v1/push")
        .unwrap_or(&target.write_url)
        .to_owned();
    let http = heddle_testkit::http_client(Duration::from_secs(300))?;
    let now = heddle_testkit::now_ms();
    // 110 minutes of one series at 1 s (a fresh head takes samples up to one block range old), for the range query to chew on.
    for chunk in (0..6_600i64).collect::<Vec<_>>().chunks(1000) {
        let samples: Vec<(i64, f64)> = chunk.iter().map(|i| (now - (6_600 - i) * 1000, *i as f64)).collect();
        let req = heddle_proto::prometheus::WriteRequest {
            timeseries: vec![heddle_testkit::timeseries(&[("__name__", "probe_up")], &samples)],
            ..Default::default()
        };
        let out = heddle_testkit::push(&http, &target.write_url, None, &req).await?;
        if out.status != 200 {
            return Err(LoadtestError::Target(format!(
                "seeding the probe series: {} {}",
                out.status, out.body
            )));
        }
    }
    let mut results = Vec::new();
    for probe in probes(now)? {
        std::fs::write(format!("/proc/{pid}/clear_refs"), "5")
            .map_err(|e| LoadtestError::Target(format!("resetting the peak RSS: {e}")))?;
        let before = status_kb(pid, "VmRSS:").unwrap_or(0);
        let mut req = http
            .request(probe.method.clone(), format!("{origin}{}", probe.path))
            .body(probe.body.clone());
        for (k, v) in &probe.headers {
            req = req.header(*k, *v);
        }
        let started = Instant::now();
        let (status, answer) = match req.send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let bytes = resp.bytes().await.unwrap_or_default();
                (
                    status,
                    String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned(),
                )
            }
            Err(e) => (0, error_chain(&e)),
        };
        let seconds = started.elapsed().as_secs_f64();
        // Work may go on after the answer (an ingester finishing a push its distributor gave up on): the peak is
        // read once the process has used no CPU for a second.
        settle(pid).await;
        let peak = status_kb(pid, "VmHWM:").unwrap_or(0);
        let alive = http
            .get(format!("{origin}/ready"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        results.push(ProbeResult {
            name: probe.name,
            body_bytes: probe.body.len(),
            status,
            answer: answer.replace('\n', " "),
            peak_growth_bytes: peak.saturating_sub(before) * 1024,
            seconds,
            alive,
        });
        if !alive {
            break;
        }
    }
    target.stop()?;
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_are_percent_encoded() {
        assert_eq!(
            form(&[("query", "up{a=\"b\"}"), ("step", "1")]),
            b"query=up%7Ba%3D%22b%22%7D&step=1"
        );
    }
}
