//! `push`: sends every round of every series with bounded concurrency and Prometheus-style retries.
//!
//! Rounds go out one after another (a round starts when the previous one is fully acknowledged or given up on),
//! so each series' samples arrive in timestamp order, as they would from one Prometheus.

use crate::LoadtestError;
use crate::args::{Protocol, PushArgs};
use crate::retry::{Attempt, Backoff, classify};
use crate::stats::{Latencies, LatencySummary};
use heddle_testkit::codec::{encode_write_request, encode_write_request_v2};
use heddle_testkit::otlp::{encode_otlp_request, push_otlp};
use heddle_testkit::{PushOutcome, RemoteWriteProtocol, SeriesGen, TestkitError, http_client, push_body_as};
use serde::Serialize;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Errors printed to stderr in full; later ones are only counted.
const MAX_ERROR_EXAMPLES: u64 = 10;

/// The JSON summary of a push run.
#[derive(Debug, Clone, Serialize)]
pub struct PushReport {
    /// Samples in all requests (counted once per request, not per retry).
    pub samples_sent: u64,
    /// Samples in requests answered 2xx.
    pub samples_acknowledged: u64,
    /// Request body bytes as sent (compressed), once per request, not per retry.
    pub wire_bytes: u64,
    /// `wire_bytes` per sample sent.
    pub wire_bytes_per_sample: f64,
    /// HTTP attempts, retries included.
    pub requests: u64,
    /// Requests that finally failed (4xx other than 429, or retries exhausted).
    pub errors: u64,
    /// Retries after 5xx, 429 or transport failures.
    pub retries: u64,
    pub duration_s: f64,
    /// Acknowledged samples per second.
    pub samples_per_second: f64,
    /// Per-attempt latency.
    pub latency_ms: LatencySummary,
    /// Timestamp of round 0: pass it to `verify --start-ms`.
    pub start_ms: i64,
    pub series: usize,
    pub rounds: u32,
}

#[derive(Debug, Default)]
struct Counters {
    sent: AtomicU64,
    wire_bytes: AtomicU64,
    acked: AtomicU64,
    requests: AtomicU64,
    errors: AtomicU64,
    retries: AtomicU64,
    round: AtomicU32,
    total: Mutex<Latencies>,
    window: Mutex<Latencies>,
}

impl Counters {
    fn record_latency(&self, d: Duration) {
        self.total.lock().unwrap_or_else(PoisonError::into_inner).record(d);
        self.window.lock().unwrap_or_else(PoisonError::into_inner).record(d);
    }

    fn error(&self, what: &str) {
        let n = self.errors.fetch_add(1, Relaxed);
        if n < MAX_ERROR_EXAMPLES {
            eprintln!("push: request failed: {what}");
        } else if n == MAX_ERROR_EXAMPLES {
            eprintln!("push: more request failures; only counting them from now on");
        }
    }
}

#[derive(Debug)]
struct Target {
    client: reqwest::Client,
    url: String,
    tenant: Option<String>,
    backoff: Backoff,
    generator: SeriesGen,
    protocol: Protocol,
}

/// Runs `push` and returns its summary. Request failures are counted in the report, not returned as errors.
pub async fn run_push(args: &PushArgs) -> Result<PushReport, LoadtestError> {
    args.check()?;
    let generator = args.generate.generator(SystemTime::now())?;
    let target = Arc::new(Target {
        client: http_client(args.timeout())?,
        url: args.url.clone(),
        tenant: args.generate.tenant.clone(),
        backoff: Backoff {
            max_retries: args.max_retries,
            min: Duration::from_millis(args.min_backoff_ms),
            max: Duration::from_millis(args.max_backoff_ms),
        },
        generator,
        protocol: args.protocol,
    });
    let counters = Arc::new(Counters::default());
    let started = Instant::now();
    let progress = (args.progress_s > 0).then(|| {
        tokio::spawn(report_progress(
            counters.clone(),
            Duration::from_secs(args.progress_s),
            args.generate.rounds,
        ))
    });
    let semaphore = Arc::new(Semaphore::new(args.concurrency));
    let series = target.generator.series;
    for round in 0..args.generate.rounds {
        counters.round.store(round, Relaxed);
        let mut tasks = JoinSet::new();
        for first in (0..series).step_by(args.batch_size) {
            let permit = semaphore
                .clone()
                .acquire_owned()
                .await
                .map_err(|e| LoadtestError::Task(e.to_string()))?;
            let (target, counters) = (target.clone(), counters.clone());
            let batch = first..(first + args.batch_size).min(series);
            tasks.spawn(async move {
                send_batch(&target, &counters, batch, round).await;
                drop(permit);
            });
        }
        while let Some(res) = tasks.join_next().await {
            res.map_err(|e| LoadtestError::Task(e.to_string()))?;
        }
    }
    if let Some(p) = progress {
        p.abort();
    }
    let duration = started.elapsed().as_secs_f64();
    let acked = counters.acked.load(Relaxed);
    let latency_ms = counters.total.lock().unwrap_or_else(PoisonError::into_inner).summary();
    let (sent, wire_bytes) = (counters.sent.load(Relaxed), counters.wire_bytes.load(Relaxed));
    Ok(PushReport {
        samples_sent: sent,
        samples_acknowledged: acked,
        wire_bytes,
        wire_bytes_per_sample: if sent > 0 { wire_bytes as f64 / sent as f64 } else { 0.0 },
        requests: counters.requests.load(Relaxed),
        errors: counters.errors.load(Relaxed),
        retries: counters.retries.load(Relaxed),
        duration_s: duration,
        samples_per_second: if duration > 0.0 { acked as f64 / duration } else { 0.0 },
        latency_ms,
        start_ms: target.generator.start_ms,
        series,
        rounds: args.generate.rounds,
    })
}

/// Sends series `batch` of round `round` (one sample each), retrying as the remote-write spec says.
async fn send_batch(target: &Target, counters: &Counters, batch: Range<usize>, round: u32) {
    let samples = batch.len() as u64;
    let request = target.generator.write_request(batch.clone(), round..round + 1);
    let encoded = match target.protocol {
        Protocol::Rw1 => encode_write_request(&request),
        Protocol::Rw2 => encode_write_request_v2(&request),
        Protocol::Otlp => encode_otlp_request(&request),
    };
    let body = match encoded {
        Ok(b) => b,
        Err(e) => return counters.error(&format!("series {batch:?} round {round}: {e}")),
    };
    counters.sent.fetch_add(samples, Relaxed);
    counters.wire_bytes.fetch_add(body.len() as u64, Relaxed);
    let mut retry = 0;
    loop {
        counters.requests.fetch_add(1, Relaxed);
        let t0 = Instant::now();
        let res = send(target, body.clone()).await;
        counters.record_latency(t0.elapsed());
        let (attempt, detail) = match res {
            // An OTLP 200 whose partial success refused points: those points are lost, as a 4xx would lose them.
            Ok(out) if target.protocol == Protocol::Otlp && out.status == 200 && !out.body.is_empty() => {
                (Attempt::Permanent, format!("status 200: {}", out.body.trim()))
            }
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
            Attempt::Permanent => {
                return counters.error(&format!("series {batch:?} round {round}: {detail} (not retried)"));
            }
            Attempt::Retryable { retry_after } => match target.backoff.delay(retry, retry_after) {
                Some(delay) => {
                    counters.retries.fetch_add(1, Relaxed);
                    retry += 1;
                    tokio::time::sleep(delay).await;
                }
                None => {
                    return counters.error(&format!(
                        "series {batch:?} round {round}: {detail} (gave up after {retry} retries)"
                    ));
                }
            },
        }
    }
}

/// One attempt of `body` in the target's protocol.
async fn send(target: &Target, body: Vec<u8>) -> Result<PushOutcome, TestkitError> {
    let tenant = target.tenant.as_deref();
    match target.protocol {
        Protocol::Rw1 => push_body_as(&target.client, &target.url, tenant, RemoteWriteProtocol::V1, body).await,
        Protocol::Rw2 => push_body_as(&target.client, &target.url, tenant, RemoteWriteProtocol::V2, body).await,
        Protocol::Otlp => push_otlp(&target.client, &target.url, tenant, body).await,
    }
}

async fn report_progress(counters: Arc<Counters>, every: Duration, rounds: u32) {
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    let mut last_acked = 0;
    let mut last = Instant::now();
    loop {
        tick.tick().await;
        let acked = counters.acked.load(Relaxed);
        let now = Instant::now();
        let rate = (acked - last_acked) as f64 / now.duration_since(last).as_secs_f64().max(1e-9);
        (last_acked, last) = (acked, now);
        let window = std::mem::take(&mut *counters.window.lock().unwrap_or_else(PoisonError::into_inner));
        let lat = window.summary();
        eprintln!(
            "push: round {}/{rounds} sent={} acked={} requests={} errors={} retries={} rate={rate:.0} samples/s \
             latency p50={:.1}ms p99={:.1}ms",
            counters.round.load(Relaxed) + 1,
            counters.sent.load(Relaxed),
            acked,
            counters.requests.load(Relaxed),
            counters.errors.load(Relaxed),
            counters.retries.load(Relaxed),
            lat.p50,
            lat.p99,
        );
    }
}
