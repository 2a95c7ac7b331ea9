//! `run`: drives one scenario against one target, samples the target's CPU and RSS once a second, shows
//! progress on stderr, reads everything back, and summarises it all in a [`RunResult`].
//!
//! Rounds go out one after another (all batches of every tenant, then the next round), so each series' samples
//! arrive in timestamp order. A run ends after `duration` or `max_rounds`, always at a round boundary.

use crate::LoadtestError;
use crate::procstat::{ProcSample, read_proc};
use crate::readback::{ReadBackend, verify_workload};
use crate::retry::{Attempt, Backoff, classify};
use crate::scenario::{Bursts, Scenario};
use crate::stats::{Latencies, LatencySummary};
use crate::verify::VerifyReport;
use crate::workload::{FailedBatches, Workload};
use heddle_testkit::{codec::encode_write_request, http_client, push_body};
use serde::Serialize;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Everything a run needs besides the scenario.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Remote-write URL.
    pub write_url: String,
    /// Where verification reads.
    pub read: ReadBackend,
    /// Tenant (or tenant name prefix, for multi-tenant scenarios).
    pub tenant: Option<String>,
    /// `job` label (prefix) of every series; unique per run by default so runs never see each other.
    pub job: String,
    /// Process whose CPU and RSS are sampled.
    pub target_pid: Option<u32>,
    /// Name of the target in the report.
    pub target_name: String,
    /// Show the progress line on stderr.
    pub progress: bool,
    /// Retry policy of one request.
    pub backoff: Backoff,
    /// Timeout of one HTTP request.
    pub timeout: Duration,
}

/// One point of the per-second time series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TimelinePoint {
    /// Seconds since the push started.
    pub t_s: f64,
    pub samples_acknowledged: u64,
    /// Acknowledged samples per second over the last interval.
    pub samples_per_second: f64,
    pub errors: u64,
    /// Push latency percentiles of the requests that finished in the last interval.
    pub latency_ms: LatencySummary,
    /// Target CPU time so far (since the push started).
    pub cpu_seconds: Option<f64>,
    /// Target CPU cores in use over the last interval.
    pub cpu_cores: Option<f64>,
    pub rss_bytes: Option<u64>,
}

/// The JSON result of a run (`result.json`).
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// Every acknowledged sample was read back bit for bit and nothing else was there.
    pub verified: bool,
    /// Verification and every other end check passed.
    pub checks_passed: bool,
    /// The checks that failed, in words.
    pub failed_checks: Vec<String>,
    pub scenario: Scenario,
    pub target: String,
    pub job: String,
    /// Timestamp of round 0.
    pub start_ms: i64,
    pub rounds: u32,
    pub tenants: usize,
    /// Series per round.
    pub series_active: usize,
    /// Distinct series sent (more than active with churn).
    pub series_created: u64,
    pub samples_sent: u64,
    pub samples_acknowledged: u64,
    pub requests: u64,
    pub errors: u64,
    pub retries: u64,
    /// Time from the first request to the last answer.
    pub duration_s: f64,
    /// Acknowledged samples per second of `duration_s`.
    pub samples_per_second: f64,
    /// Per-attempt push latency.
    pub latency_ms: LatencySummary,
    /// Target CPU time during the push.
    pub cpu_seconds: Option<f64>,
    pub cpu_seconds_per_million_samples: Option<f64>,
    /// Target RSS before the first request.
    pub rss_bytes_idle: Option<u64>,
    /// Target RSS after the last answer.
    pub rss_bytes_end: Option<u64>,
    pub rss_bytes_peak: Option<u64>,
    /// (end - idle) / active series.
    pub rss_bytes_per_series: Option<f64>,
    pub verify: Option<VerifyReport>,
    pub verify_duration_s: f64,
    /// For a target the driver started: time from a graceful stop and start on the same data until it was
    /// ready again (measured after verification).
    pub restart_seconds: Option<f64>,
    pub timeline: Vec<TimelinePoint>,
}

#[derive(Debug, Default)]
struct Counters {
    sent: AtomicU64,
    acked: AtomicU64,
    requests: AtomicU64,
    errors: AtomicU64,
    retries: AtomicU64,
    round: AtomicU32,
    total: Mutex<Latencies>,
    window: Mutex<Latencies>,
    failed: Mutex<FailedBatches>,
}

/// When each request may go out: spreads samples at `rate` per second and keeps silent in the `off` part of
/// each burst cycle.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pacer {
    /// Samples per second; 0 = unlimited.
    pub rate: u64,
    pub bursts: Option<Bursts>,
}

impl Pacer {
    /// Time since the push started at which a request may go out, given `now` (the same clock) and the samples
    /// sent before it.
    pub fn send_at(&self, now: Duration, samples_before: u64) -> Duration {
        let mut at = now;
        if self.rate > 0 {
            let active = Duration::from_secs_f64(samples_before as f64 / self.rate as f64);
            // With bursts, only `on` time counts towards the rate.
            let wall = match self.bursts {
                Some(b) => {
                    let cycles = (active.as_nanos() / b.on.as_nanos()) as u32;
                    (b.on + b.off) * cycles + (active - b.on * cycles)
                }
                None => active,
            };
            at = at.max(wall);
        }
        if let Some(b) = self.bursts {
            let cycle = b.on + b.off;
            let into = Duration::from_nanos((at.as_nanos() % cycle.as_nanos()) as u64);
            if into >= b.on {
                at += cycle - into;
            }
        }
        at
    }
}

/// Runs `scenario` with `opts`. Request failures and verification differences are in the result, not errors.
pub async fn run_scenario(scenario: &Scenario, opts: &RunOptions) -> Result<RunResult, LoadtestError> {
    scenario.validate()?;
    let interval_ms = scenario.interval.as_millis() as i64;
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let start = now_ms - i64::from(scenario.max_rounds) * interval_ms;
    let start_ms = start - start.rem_euclid(interval_ms);
    let workload = Arc::new(Workload::new(scenario, opts.tenant.as_deref(), &opts.job, start_ms));
    let client = http_client(opts.timeout)?;
    let counters = Arc::new(Counters::default());
    let pacer = Pacer {
        rate: scenario.rate,
        bursts: scenario.bursts,
    };
    let before = opts.target_pid.and_then(read_proc);
    let started = Instant::now();
    let timeline = Arc::new(Mutex::new(Vec::new()));
    let sampler = tokio::spawn(sample_loop(
        counters.clone(),
        timeline.clone(),
        opts.target_pid,
        before,
        started,
        scenario.duration,
        opts.progress,
    ));
    let semaphore = Arc::new(Semaphore::new(scenario.concurrency));
    let deadline = started + scenario.duration;
    let mut rounds = 0;
    let mut scheduled = 0u64;
    'rounds: for round in 0..scenario.max_rounds {
        if Instant::now() >= deadline {
            break;
        }
        counters.round.store(round, Relaxed);
        let mut tasks = JoinSet::new();
        for t in 0..workload.tenants.len() {
            for first in workload.batch_starts(t) {
                let wait = pacer
                    .send_at(started.elapsed(), scheduled)
                    .saturating_sub(started.elapsed());
                if !wait.is_zero() {
                    if Instant::now() + wait > deadline + Duration::from_secs(1) && round > 0 {
                        // A long pause would overrun the run: stop here; this partial round is not verified.
                        drain(&mut tasks).await?;
                        rounds = round;
                        break 'rounds;
                    }
                    tokio::time::sleep(wait).await;
                }
                let permit = semaphore
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|e| LoadtestError::Task(e.to_string()))?;
                let slots = workload.batch_slots(t, first);
                scheduled += slots.len() as u64;
                let (workload, counters, client) = (workload.clone(), counters.clone(), client.clone());
                let (url, backoff) = (opts.write_url.clone(), opts.backoff);
                tasks.spawn(async move {
                    send(&client, &url, backoff, &workload, &counters, t, first, round).await;
                    drop(permit);
                });
            }
        }
        drain(&mut tasks).await?;
        rounds = round + 1;
    }
    let duration = started.elapsed();
    sampler.abort();
    tokio::time::sleep(scenario.settle).await;
    let after = opts.target_pid.and_then(read_proc);
    if opts.progress {
        eprintln!();
    }
    let mut timeline = std::mem::take(&mut *timeline.lock().unwrap_or_else(PoisonError::into_inner));
    push_point(&mut timeline, &counters, duration, before, after);
    // A run that ended in the middle of a round drops that round from verification (its samples are optional).
    let failed = std::mem::take(&mut *counters.failed.lock().unwrap_or_else(PoisonError::into_inner));
    let verify_started = Instant::now();
    let verify = if scenario.checks.verify {
        crate::target::settle(&opts.read).await;
        Some(verify_workload(&workload, rounds, &failed, &opts.read, 4, 10).await?)
    } else {
        None
    };
    let acked = counters.acked.load(Relaxed);
    let cpu_seconds = before.zip(after).map(|(b, a)| a.cpu_seconds - b.cpu_seconds);
    let active = workload.active_series();
    let mut result = RunResult {
        verified: verify.as_ref().is_some_and(|v| v.verified),
        checks_passed: false,
        failed_checks: Vec::new(),
        scenario: scenario.clone(),
        target: opts.target_name.clone(),
        job: opts.job.clone(),
        start_ms,
        rounds,
        tenants: workload.tenants.len(),
        series_active: active,
        series_created: workload.series_created(rounds),
        samples_sent: counters.sent.load(Relaxed),
        samples_acknowledged: acked,
        requests: counters.requests.load(Relaxed),
        errors: counters.errors.load(Relaxed),
        retries: counters.retries.load(Relaxed),
        duration_s: duration.as_secs_f64(),
        samples_per_second: acked as f64 / duration.as_secs_f64().max(1e-9),
        latency_ms: counters.total.lock().unwrap_or_else(PoisonError::into_inner).summary(),
        cpu_seconds,
        cpu_seconds_per_million_samples: cpu_seconds.filter(|_| acked > 0).map(|c| c / acked as f64 * 1e6),
        rss_bytes_idle: before.map(|b| b.rss_bytes),
        rss_bytes_end: after.map(|a| a.rss_bytes),
        rss_bytes_peak: timeline.iter().filter_map(|p| p.rss_bytes).max(),
        rss_bytes_per_series: before
            .zip(after)
            .map(|(b, a)| (a.rss_bytes as f64 - b.rss_bytes as f64) / active as f64),
        verify,
        verify_duration_s: verify_started.elapsed().as_secs_f64(),
        restart_seconds: None,
        timeline,
    };
    result.failed_checks = failed_checks(&result);
    result.checks_passed = result.failed_checks.is_empty();
    Ok(result)
}

async fn drain(tasks: &mut JoinSet<()>) -> Result<(), LoadtestError> {
    while let Some(res) = tasks.join_next().await {
        res.map_err(|e| LoadtestError::Task(e.to_string()))?;
    }
    Ok(())
}

/// The end checks of the scenario that `result` fails.
fn failed_checks(r: &RunResult) -> Vec<String> {
    let c = &r.scenario.checks;
    let mut out = Vec::new();
    if let Some(v) = &r.verify
        && !v.verified
    {
        out.push(format!(
            "verification: {} samples missing, {} unexpected, {} read errors",
            v.missing, v.unexpected, v.read_errors
        ));
    }
    if r.samples_acknowledged == 0 {
        out.push("no sample was acknowledged".to_owned());
    }
    if r.errors > c.max_errors {
        out.push(format!(
            "{} failed requests, at most {} allowed",
            r.errors, c.max_errors
        ));
    }
    if let Some(max) = c.max_p99_ms
        && r.latency_ms.p99 > max
    {
        out.push(format!("p99 push latency {:.1} ms above {max} ms", r.latency_ms.p99));
    }
    if let Some(min) = c.min_samples_per_second
        && r.samples_per_second < min
    {
        out.push(format!("{:.0} samples/s below {min}", r.samples_per_second));
    }
    out
}

#[allow(clippy::too_many_arguments)]
async fn send(
    client: &reqwest::Client,
    url: &str,
    backoff: Backoff,
    workload: &Workload,
    counters: &Counters,
    t: usize,
    first: usize,
    round: u32,
) {
    let slots = workload.batch_slots(t, first);
    let samples = slots.len() as u64;
    let fail = |what: String| {
        let n = counters.errors.fetch_add(1, Relaxed);
        counters
            .failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((t, round, first));
        if n < 10 {
            eprintln!("\nrun: request failed: tenant {t} slots {slots:?} round {round}: {what}");
        }
    };
    let body = match encode_write_request(&workload.request(t, slots.clone(), round)) {
        Ok(b) => b,
        Err(e) => return fail(e.to_string()),
    };
    counters.sent.fetch_add(samples, Relaxed);
    let tenant = workload.tenants[t].tenant.as_deref();
    let mut retry = 0;
    loop {
        counters.requests.fetch_add(1, Relaxed);
        let t0 = Instant::now();
        let res = push_body(client, url, tenant, body.clone()).await;
        let took = t0.elapsed();
        counters
            .total
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(took);
        counters
            .window
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(took);
        let (attempt, detail) = match res {
            Ok(out) => (
                classify(out.status, out.retry_after),
                format!("status {}: {}", out.status, out.body.trim()),
            ),
            Err(e) => (Attempt::Retryable { retry_after: None }, e.to_string()),
        };
        match attempt {
            Attempt::Success => {
                counters.acked.fetch_add(samples, Relaxed);
                return;
            }
            Attempt::Permanent => return fail(format!("{detail} (not retried)")),
            Attempt::Retryable { retry_after } => match backoff.delay(retry, retry_after) {
                Some(delay) => {
                    counters.retries.fetch_add(1, Relaxed);
                    retry += 1;
                    tokio::time::sleep(delay).await;
                }
                None => return fail(format!("{detail} (gave up after {retry} retries)")),
            },
        }
    }
}

fn push_point(
    timeline: &mut Vec<TimelinePoint>,
    counters: &Counters,
    at: Duration,
    before: Option<ProcSample>,
    now: Option<ProcSample>,
) {
    let acked = counters.acked.load(Relaxed);
    let t_s = at.as_secs_f64();
    let (prev_t, prev_acked, prev_cpu) = timeline
        .last()
        .map_or((0.0, 0, Some(0.0)), |p| (p.t_s, p.samples_acknowledged, p.cpu_seconds));
    let dt = (t_s - prev_t).max(1e-9);
    let cpu_seconds = before.zip(now).map(|(b, n)| n.cpu_seconds - b.cpu_seconds);
    let window = std::mem::take(&mut *counters.window.lock().unwrap_or_else(PoisonError::into_inner));
    timeline.push(TimelinePoint {
        t_s,
        samples_acknowledged: acked,
        samples_per_second: (acked - prev_acked) as f64 / dt,
        errors: counters.errors.load(Relaxed),
        latency_ms: window.summary(),
        cpu_seconds,
        cpu_cores: cpu_seconds.zip(prev_cpu).map(|(c, p)| (c - p) / dt),
        rss_bytes: now.map(|n| n.rss_bytes),
    });
}

async fn sample_loop(
    counters: Arc<Counters>,
    timeline: Arc<Mutex<Vec<TimelinePoint>>>,
    pid: Option<u32>,
    before: Option<ProcSample>,
    started: Instant,
    duration: Duration,
    progress: bool,
) {
    let tty = std::io::stderr().is_terminal();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    loop {
        tick.tick().await;
        let now = pid.and_then(read_proc);
        let point = {
            let mut tl = timeline.lock().unwrap_or_else(PoisonError::into_inner);
            push_point(&mut tl, &counters, started.elapsed(), before, now);
            tl.last().copied()
        };
        if let (true, Some(p)) = (progress, point) {
            let line = format!(
                "[{:>4.0}s/{}s] round {} acked {} ({:.0}/s) errors {} retries {} p99 {:.1} ms{}{}",
                p.t_s,
                duration.as_secs(),
                counters.round.load(Relaxed) + 1,
                p.samples_acknowledged,
                p.samples_per_second,
                p.errors,
                counters.retries.load(Relaxed),
                p.latency_ms.p99,
                p.cpu_cores.map(|c| format!(" cpu {c:.2} cores")).unwrap_or_default(),
                p.rss_bytes
                    .map(|r| format!(" rss {:.1} MiB", r as f64 / 1048576.0))
                    .unwrap_or_default(),
            );
            if tty {
                eprint!("\r\x1b[2K{line}");
            } else {
                eprintln!("{line}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn pacing() {
        let free = Pacer { rate: 0, bursts: None };
        assert_eq!(free.send_at(ms(123), 1_000_000), ms(123));
        let rated = Pacer {
            rate: 1000,
            bursts: None,
        };
        assert_eq!(rated.send_at(ms(100), 500), ms(500));
        assert_eq!(rated.send_at(ms(900), 500), ms(900));
        let bursty = Pacer {
            rate: 0,
            bursts: Some(Bursts {
                on: ms(200),
                off: ms(800),
            }),
        };
        assert_eq!(bursty.send_at(ms(150), 0), ms(150));
        assert_eq!(bursty.send_at(ms(250), 0), ms(1000));
        assert_eq!(bursty.send_at(ms(1100), 0), ms(1100));
        // 1000 samples/s only during `on`: the 300th sample is 100 ms into the second burst.
        let both = Pacer {
            rate: 1000,
            bursts: Some(Bursts {
                on: ms(200),
                off: ms(800),
            }),
        };
        assert_eq!(both.send_at(ms(0), 300), ms(1100));
    }
}
