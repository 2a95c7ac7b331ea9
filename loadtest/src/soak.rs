//! `soak`: weeks of an ingester's life compressed into minutes, to catch what only uptime shows (leaked files,
//! threads, memory or disk).
//!
//! The driver starts heddle with time compressed: one-minute blocks, compaction, shipping and bucket syncs every
//! few seconds, two-page WAL segments, and idle heads closed after seconds. Tenants come and go: tenant slot `j`
//! starts `j * lifetime / active` after the start and pushes one round every `interval` for `lifetime`, so
//! `active` tenants push at any time; slots reuse `pool` tenant names, so a tenant returns after
//! `(pool - active) * lifetime / active` of silence: long enough for its head to be compacted, shipped, closed
//! and reopened. Every sample's timestamp is the round's start time, so it is never older than the head allows.
//!
//! Every `surfaces_every` rounds each active tenant also drives the other surfaces (`soak/surfaces.rs`): OTLP,
//! remote write 2.0 with native histograms and exemplars, PromQL and exemplar queries.
//!
//! While it runs, the target's open files, RSS, threads, disk use and the size of its `/metrics` are sampled; at the end every acknowledged
//! sample is read back through remote read (from heads, local blocks and the bucket), and the slope of each
//! resource over the run after a warm-up is reported per hour. A leak shows as a slope that does not vanish
//! when the run gets longer.

mod surfaces;

pub use surfaces::{SurfaceCounts, Surfaces};

use crate::LoadtestError;
use crate::procstat::read_proc;
use crate::target::{StartOptions, StartedTarget, TargetKind};
use crate::{Attempt, Backoff, classify};
use heddle_model::METRIC_NAME;
use heddle_proto::prometheus::{TimeSeries, WriteRequest};
use heddle_testkit::client::error_chain;
use heddle_testkit::{ReadClient, ReadMode, eq, http_client, now_ms, push, query};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The metric every soak series carries.
const METRIC: &str = "soak_samples";

/// What a soak run does.
#[derive(Debug, Clone, Serialize)]
pub struct SoakConfig {
    /// How long rounds are pushed.
    #[serde(with = "crate::scenario::human_duration")]
    pub duration: Duration,
    /// Time between rounds (and between the timestamps of consecutive samples of a series).
    #[serde(with = "crate::scenario::human_duration")]
    pub interval: Duration,
    /// Series per tenant.
    pub series: usize,
    /// Tenants pushing at any time.
    pub active_tenants: usize,
    /// Tenant names reused by the slots; more than `active_tenants`.
    pub tenant_pool: usize,
    /// How long one tenant slot pushes.
    #[serde(with = "crate::scenario::human_duration")]
    pub tenant_lifetime: Duration,
    /// Time between two readings of the target's resources.
    #[serde(with = "crate::scenario::human_duration")]
    pub sample_every: Duration,
    /// How long idle heads wait before they are closed (the target's close-idle timeout).
    #[serde(with = "crate::scenario::human_duration")]
    pub close_idle: Duration,
    /// Share of the run left out of the slopes (heads, caches and pools fill up first).
    pub warmup: f64,
    /// Every this many rounds each active tenant also sends OTLP, remote write 2.0 histograms with exemplars,
    /// PromQL and exemplar queries (0: floats only).
    pub surfaces_every: u64,
}

impl SoakConfig {
    /// The benchmark: 30 minutes, 40 tenants at a time out of 120, 500 series each.
    pub fn benchmark() -> Self {
        Self {
            duration: Duration::from_secs(30 * 60),
            interval: Duration::from_secs(1),
            series: 500,
            active_tenants: 40,
            tenant_pool: 120,
            tenant_lifetime: Duration::from_secs(120),
            sample_every: Duration::from_secs(5),
            close_idle: Duration::from_secs(60),
            warmup: 0.25,
            surfaces_every: 5,
        }
    }

    /// OTLP gauge series per tenant, beside its float series.
    fn otlp_series(&self) -> usize {
        (self.series / 10).max(1)
    }

    /// Native histogram series per tenant (remote write 2.0, one exemplar each).
    fn histogram_series(&self) -> usize {
        (self.series / 25).max(1)
    }

    /// Checks that the schedule makes sense: tenants really go idle long enough to be closed, and return.
    pub fn validate(&self) -> Result<(), LoadtestError> {
        let bad = |m: String| Err(LoadtestError::Flags(m));
        if self.series == 0 || self.active_tenants == 0 || self.interval.is_zero() || self.sample_every.is_zero() {
            return bad("--series, --active-tenants, --interval and --sample-every must be positive".into());
        }
        if self.tenant_pool <= self.active_tenants {
            return bad(format!(
                "--tenant-pool ({}) must exceed --active-tenants ({}): a tenant has to go idle before it returns",
                self.tenant_pool, self.active_tenants
            ));
        }
        if self.tenant_lifetime < self.interval * 2 {
            return bad("--tenant-lifetime must hold at least two rounds".into());
        }
        if !(0.0..0.9).contains(&self.warmup) {
            return bad(format!("--warmup {} is not in [0, 0.9)", self.warmup));
        }
        Ok(())
    }

    /// Time between the starts of two tenant slots.
    fn stride(&self) -> Duration {
        self.tenant_lifetime / self.active_tenants as u32
    }

    /// The tenant slots pushing at `elapsed` since the start.
    fn active_slots(&self, elapsed: Duration) -> std::ops::Range<u64> {
        let stride = self.stride().as_millis().max(1) as u64;
        let (now, life) = (elapsed.as_millis() as u64, self.tenant_lifetime.as_millis() as u64);
        let first = now.saturating_sub(life) / stride + u64::from(now >= life);
        first..now / stride + 1
    }

    /// The tenant name of slot `j`.
    fn tenant(&self, slot: u64) -> String {
        format!("soak-{}", slot % self.tenant_pool as u64)
    }

    /// How long a returning tenant has been silent.
    pub fn idle_gap(&self) -> Duration {
        self.stride() * (self.tenant_pool - self.active_tenants) as u32
    }

    /// heddle's flags that compress its time: everything a month of uptime does to files happens in minutes.
    pub fn heddle_flags(&self) -> Vec<String> {
        let idle = self.close_idle.as_secs().max(1);
        vec![
            "--blocks-storage.tsdb.block-ranges-period=1m".into(),
            "--blocks-storage.tsdb.head-compaction-interval=5s".into(),
            format!(
                "--blocks-storage.tsdb.head-compaction-idle-timeout={}s",
                (idle / 2).max(1)
            ),
            format!("--blocks-storage.tsdb.close-idle-tsdb-timeout={idle}s"),
            // Per-tenant series leave /metrics on the same clock as the heads.
            format!("--server.tenant-metrics-idle-timeout={idle}s"),
            "--blocks-storage.tsdb.ship-interval=5s".into(),
            "--blocks-storage.tsdb.retention-period=1m".into(),
            "--blocks-storage.tsdb.wal-segment-size-bytes=65536".into(),
            "--blocks-storage.bucket-store.sync-interval=5s".into(),
            // The histogram series' exemplars of every active tenant fit its ring, so a query finds a round's.
            format!(
                "--ingester.max-global-exemplars-per-user={}",
                (self.histogram_series() * 100).max(1000)
            ),
        ]
    }
}

/// One reading of the target.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ResourceSample {
    /// Seconds since the start.
    pub t_s: f64,
    pub open_files: u64,
    /// Open files whose path is gone: deleted files whose space is still held.
    pub deleted_open_files: u64,
    pub rss_bytes: u64,
    pub threads: u64,
    /// Bytes allocated on disk under the target's local data directory (heads, WAL, local blocks).
    pub disk_bytes: u64,
    /// Bytes in the bucket (a filesystem bucket here): what was shipped, growing with the data.
    pub bucket_bytes: u64,
    /// Size of the target's `/metrics` answer.
    pub metrics_bytes: u64,
    /// Sample lines in it (lines that are not comments).
    pub metrics_series: u64,
}

/// How one resource moved.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Trend {
    pub first: f64,
    pub last: f64,
    pub max: f64,
    /// Least-squares slope over the run after the warm-up, per hour.
    pub slope_per_hour: f64,
    /// Mean of the last quarter of the run minus the mean of the quarter after the warm-up.
    pub late_growth: f64,
}

/// What a soak run found.
#[derive(Debug, Clone, Serialize)]
pub struct SoakResult {
    pub config: SoakConfig,
    pub rounds: u64,
    pub tenant_slots: u64,
    pub requests: u64,
    /// Attempts repeated after a 5xx, 429 or transport error, as Prometheus repeats them.
    pub retries: u64,
    /// Requests still refused after their retries: their samples are not acknowledged.
    pub errors: u64,
    /// The first few push errors.
    pub error_examples: Vec<String>,
    pub samples_acknowledged: u64,
    pub samples_read_back: u64,
    pub missing: u64,
    pub unexpected: u64,
    pub mismatched: u64,
    /// Every acknowledged sample read back with its value, nothing else.
    pub verified: bool,
    pub open_files: Trend,
    pub deleted_open_files: Trend,
    pub rss_bytes: Trend,
    pub threads: Trend,
    pub disk_bytes: Trend,
    pub bucket_bytes: Trend,
    pub metrics_bytes: Trend,
    pub metrics_series: Trend,
    /// What the other surfaces answered.
    pub surfaces: Surfaces,
    pub samples: Vec<ResourceSample>,
}

/// The value of `series` of `tenant` at round `round`: distinct per tenant, series and round, exact in f64.
fn value(tenant: &str, series: usize, round: u64) -> f64 {
    let t: u64 = tenant
        .bytes()
        .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
        % 1000;
    (round * 1_000_000 + series as u64 * 1000 + t) as f64
}

fn request(cfg: &SoakConfig, job: &str, tenant: &str, round: u64, ts: i64) -> WriteRequest {
    let timeseries = (0..cfg.series)
        .map(|i| {
            heddle_testkit::timeseries(
                &[(METRIC_NAME, METRIC), ("job", job), ("series", &i.to_string())],
                &[(ts, value(tenant, i, round))],
            )
        })
        .collect::<Vec<TimeSeries>>();
    WriteRequest {
        timeseries,
        ..WriteRequest::default()
    }
}

/// The target's local data directory and its filesystem bucket.
struct Dirs {
    data: PathBuf,
    bucket: PathBuf,
}

/// Sends one request as Prometheus does: 5xx, 429 and transport errors are retried with backoff (at most five
/// times); the result and the number of retries.
async fn push_retrying(
    http: &reqwest::Client,
    url: &str,
    tenant: &str,
    req: &WriteRequest,
) -> (Result<(), String>, u32) {
    let backoff = Backoff {
        max_retries: 5,
        min: Duration::from_millis(100),
        max: Duration::from_secs(2),
    };
    let mut retry = 0;
    loop {
        let (attempt, error) = match push(http, url, Some(tenant), req).await {
            Ok(o) => (
                classify(o.status, o.retry_after),
                format!("{} {}", o.status, o.body.trim()),
            ),
            Err(e) => (Attempt::Retryable { retry_after: None }, error_chain(&e)),
        };
        match attempt {
            Attempt::Success => return (Ok(()), retry),
            Attempt::Permanent => return (Err(error), retry),
            Attempt::Retryable { retry_after } => match backoff.delay(retry, retry_after) {
                Some(d) => {
                    tokio::time::sleep(d).await;
                    retry += 1;
                }
                None => return (Err(format!("{error} (after {retry} retries)")), retry),
            },
        }
    }
}

/// Reads `/proc/<pid>`, the size of `dirs` and of the target's `/metrics`.
async fn sample(
    http: &reqwest::Client,
    metrics_url: &str,
    pid: u32,
    dirs: &Dirs,
    t: Duration,
) -> Option<ResourceSample> {
    let exposition = match http.get(metrics_url).send().await {
        Ok(resp) => resp.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    let proc = read_proc(pid)?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())?;
    let (mut open, mut deleted) = (0, 0);
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.flatten() {
        open += 1;
        if std::fs::read_link(entry.path()).is_ok_and(|p| p.to_string_lossy().ends_with(" (deleted)")) {
            deleted += 1;
        }
    }
    Some(ResourceSample {
        t_s: t.as_secs_f64(),
        open_files: open,
        deleted_open_files: deleted,
        rss_bytes: proc.rss_bytes,
        threads,
        disk_bytes: disk_usage(&dirs.data, 0),
        bucket_bytes: disk_usage(&dirs.bucket, 0),
        metrics_bytes: exposition.len() as u64,
        metrics_series: exposition
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .count() as u64,
    })
}

/// Bytes allocated to the files under `dir` (files vanishing during the walk are skipped).
fn disk_usage(dir: &Path, depth: usize) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut total = 0;
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        total += meta.blocks() * 512;
        if meta.is_dir() && depth < 16 {
            total += disk_usage(&entry.path(), depth + 1);
        }
    }
    total
}

/// The trend of one resource over `samples`.
pub fn trend(samples: &[ResourceSample], warmup: f64, get: impl Fn(&ResourceSample) -> f64) -> Trend {
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return Trend {
            first: 0.0,
            last: 0.0,
            max: 0.0,
            slope_per_hour: 0.0,
            late_growth: 0.0,
        };
    };
    let end = last.t_s;
    let after: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| s.t_s >= end * warmup)
        .map(|s| (s.t_s, get(s)))
        .collect();
    let n = after.len() as f64;
    let (mx, my) = (
        after.iter().map(|p| p.0).sum::<f64>() / n,
        after.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let (sxy, sxx) = after.iter().fold((0.0, 0.0), |(sxy, sxx), (x, y)| {
        (sxy + (x - mx) * (y - my), sxx + (x - mx) * (x - mx))
    });
    let slope = if sxx > 0.0 { sxy / sxx * 3600.0 } else { 0.0 };
    let mean_in = |lo: f64, hi: f64| {
        let v: Vec<f64> = samples
            .iter()
            .filter(|s| s.t_s >= lo && s.t_s <= hi)
            .map(&get)
            .collect();
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    let start = end * warmup;
    let quarter = (end - start) / 4.0;
    Trend {
        first: get(first),
        last: get(last),
        max: samples.iter().map(&get).fold(f64::MIN, f64::max),
        slope_per_hour: slope,
        late_growth: mean_in(end - quarter, end) - mean_in(start, start + quarter),
    }
}

/// Acknowledged rounds per tenant: `(round, timestamp)`.
type Acked = BTreeMap<String, Vec<(u64, i64)>>;

/// Starts heddle (`binary`, or the one next to this executable) with time compressed, runs the soak, verifies and
/// stops it.
pub async fn run_soak(cfg: &SoakConfig, binary: Option<PathBuf>, progress: bool) -> Result<SoakResult, LoadtestError> {
    cfg.validate()?;
    let target = StartedTarget::start(
        TargetKind::Heddle,
        &StartOptions {
            binary,
            multitenancy: true,
            extra_args: cfg.heddle_flags(),
        },
    )?;
    let pid = target
        .pid()
        .ok_or_else(|| LoadtestError::Target("the started heddle has no pid".into()))?;
    let dirs = Dirs {
        data: target.dir().join("data"),
        bucket: target.dir().join("blocks"),
    };
    let read_base = match &target.read {
        crate::readback::ReadBackend::RemoteRead { base, .. } => base.clone(),
        crate::readback::ReadBackend::VmExport { base } => base.clone(),
    };
    let result = soak_against(cfg, &target.write_url, &read_base, pid, &dirs, progress).await;
    if result.is_err() {
        eprintln!("soak: heddle's logs are in {}", target.dir().display());
    }
    target.stop()?;
    result
}

async fn soak_against(
    cfg: &SoakConfig,
    write_url: &str,
    read_base: &str,
    pid: u32,
    dirs: &Dirs,
    progress: bool,
) -> Result<SoakResult, LoadtestError> {
    let http = http_client(Duration::from_secs(30))?;
    let urls = surfaces::Urls::new(write_url, read_base);
    let metrics_url = format!(
        "{}/metrics",
        write_url.strip_suffix("/api/v1/push").unwrap_or(write_url)
    );
    let mut surfaces = Surfaces::default();
    let job = format!("soak-{}", now_ms() / 1000);
    let started = Instant::now();
    let mut acked: Acked = BTreeMap::new();
    let mut samples = Vec::new();
    let (mut requests, mut retries, mut errors, mut examples) = (0u64, 0u64, 0u64, Vec::new());
    let mut next_sample = Duration::ZERO;
    let mut round = 0u64;
    let mut last_slot = 0;
    // Bounded: one round per interval until the duration is over.
    while started.elapsed() < cfg.duration {
        let due = cfg.interval * round as u32;
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        let elapsed = started.elapsed();
        if elapsed >= next_sample {
            if let Some(s) = sample(&http, &metrics_url, pid, dirs, elapsed).await {
                if progress {
                    eprintln!(
                        "soak {:>5.0}s round {round}: open files {} ({} deleted), rss {} MiB, threads {}, disk {} MiB, bucket {} MiB, errors {errors}",
                        s.t_s,
                        s.open_files,
                        s.deleted_open_files,
                        s.rss_bytes >> 20,
                        s.threads,
                        s.disk_bytes >> 20,
                        s.bucket_bytes >> 20
                    );
                }
                samples.push(s);
            }
            next_sample += cfg.sample_every;
        }
        let ts = now_ms();
        let slots = cfg.active_slots(due);
        last_slot = last_slot.max(slots.end);
        let surfaces_due = cfg.surfaces_every > 0 && round.is_multiple_of(cfg.surfaces_every);
        let pushes = slots.clone().map(|slot| {
            let (http, tenant) = (http.clone(), cfg.tenant(slot));
            let req = request(cfg, &job, &tenant, round, ts);
            async move {
                let outcome = push_retrying(&http, write_url, &tenant, &req).await;
                (tenant, outcome)
            }
        });
        for (tenant, (outcome, tries)) in futures::future::join_all(pushes).await {
            requests += 1;
            retries += u64::from(tries);
            match outcome {
                Ok(()) => acked.entry(tenant).or_default().push((round, ts)),
                Err(e) => {
                    errors += 1;
                    if examples.len() < 10 {
                        examples.push(format!("{tenant} round {round}: {e}"));
                    }
                }
            }
        }
        if surfaces_due {
            // After the float pushes, so that a PromQL count sees the round's series.
            let (urls, surfaces_ref) = (&urls, &mut surfaces);
            let mut per_tenant = Vec::new();
            for slot in slots {
                let (http, tenant, job) = (http.clone(), cfg.tenant(slot), job.clone());
                per_tenant.push(async move {
                    let mut mine = Surfaces::default();
                    surfaces::exercise(&http, urls, cfg, (&tenant, &job), (round, ts), &mut mine).await;
                    mine
                });
            }
            for mine in futures::future::join_all(per_tenant).await {
                surfaces_ref.absorb(mine);
            }
        }
        round += 1;
    }
    // Let the last heads go idle and close, so the end state includes closing and reading from the bucket.
    let settle = cfg.close_idle + Duration::from_secs(15);
    let settle_end = started.elapsed() + settle;
    while started.elapsed() < settle_end {
        tokio::time::sleep(cfg.sample_every).await;
        if let Some(s) = sample(&http, &metrics_url, pid, dirs, started.elapsed()).await {
            samples.push(s);
        }
    }
    let (found, missing, unexpected, mismatched) = verify(cfg, &http, read_base, &job, &acked).await?;
    let acknowledged = acked.values().map(|r| r.len() as u64).sum::<u64>() * cfg.series as u64;
    let w = cfg.warmup * cfg.duration.as_secs_f64() / (cfg.duration + settle).as_secs_f64();
    Ok(SoakResult {
        config: cfg.clone(),
        rounds: round,
        tenant_slots: last_slot,
        requests,
        retries,
        errors,
        error_examples: examples,
        samples_acknowledged: acknowledged,
        samples_read_back: found,
        missing,
        unexpected,
        mismatched,
        verified: acknowledged > 0 && found == acknowledged && missing + unexpected + mismatched == 0,
        open_files: trend(&samples, w, |s| s.open_files as f64),
        deleted_open_files: trend(&samples, w, |s| s.deleted_open_files as f64),
        rss_bytes: trend(&samples, w, |s| s.rss_bytes as f64),
        threads: trend(&samples, w, |s| s.threads as f64),
        disk_bytes: trend(&samples, w, |s| s.disk_bytes as f64),
        bucket_bytes: trend(&samples, w, |s| s.bucket_bytes as f64),
        metrics_bytes: trend(&samples, w, |s| s.metrics_bytes as f64),
        metrics_series: trend(&samples, w, |s| s.metrics_series as f64),
        surfaces,
        samples,
    })
}

/// Reads every tenant back over the time range it pushed: (samples found, missing, unexpected, mismatched).
async fn verify(
    cfg: &SoakConfig,
    http: &reqwest::Client,
    read_base: &str,
    job: &str,
    acked: &Acked,
) -> Result<(u64, u64, u64, u64), LoadtestError> {
    let (mut found, mut missing, mut unexpected, mut mismatched) = (0, 0, 0, 0);
    for (tenant, rounds) in acked {
        let (lo, hi) = rounds
            .iter()
            .fold((i64::MAX, i64::MIN), |(lo, hi), &(_, t)| (lo.min(t), hi.max(t)));
        let client = ReadClient::new(http.clone(), read_base, Some(tenant));
        let q = query(lo, hi, vec![eq(METRIC_NAME, METRIC), eq("job", job)]);
        let series = client
            .read(ReadMode::Samples, vec![q])
            .await
            .map_err(|e| LoadtestError::Target(format!("reading back tenant {tenant}: {e}")))?
            .into_iter()
            .next()
            .unwrap_or_default();
        let mut got: HashMap<usize, BTreeMap<i64, f64>> = HashMap::new();
        for s in series {
            let Some(i) = s.labels.get("series").and_then(|v| v.parse::<usize>().ok()) else {
                unexpected += s.samples.len() as u64;
                continue;
            };
            got.entry(i).or_default().extend(s.samples.iter().map(|x| (x.t, x.v)));
        }
        for i in 0..cfg.series {
            let mut have = got.remove(&i).unwrap_or_default();
            for &(round, ts) in rounds {
                match have.remove(&ts) {
                    None => missing += 1,
                    Some(v) if v.to_bits() == value(tenant, i, round).to_bits() => found += 1,
                    Some(_) => mismatched += 1,
                }
            }
            unexpected += have.len() as u64;
        }
        unexpected += got.values().map(|m| m.len() as u64).sum::<u64>();
    }
    Ok((found, missing, unexpected, mismatched))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> SoakConfig {
        SoakConfig {
            duration: Duration::from_secs(60),
            interval: Duration::from_secs(1),
            series: 10,
            active_tenants: 4,
            tenant_pool: 10,
            tenant_lifetime: Duration::from_secs(8),
            sample_every: Duration::from_secs(5),
            close_idle: Duration::from_secs(5),
            warmup: 0.25,
            surfaces_every: 5,
        }
    }

    #[test]
    fn slots_overlap_so_that_the_active_count_holds() {
        let c = cfg();
        assert_eq!(c.stride(), Duration::from_secs(2));
        assert_eq!(c.active_slots(Duration::ZERO), 0..1);
        assert_eq!(c.active_slots(Duration::from_secs(7)), 0..4);
        // Slot 0 lived [0, 8): at 8 s slots 1..=4 push.
        assert_eq!(c.active_slots(Duration::from_secs(8)), 1..5);
        for s in 8..60 {
            assert_eq!(c.active_slots(Duration::from_secs(s)).count(), 4, "at {s}s");
        }
        assert_eq!(c.tenant(3), c.tenant(13), "names are reused");
        assert_eq!(c.idle_gap(), Duration::from_secs(12));
    }

    #[test]
    fn bad_schedules_are_refused() {
        let mut c = cfg();
        c.tenant_pool = 4;
        assert!(c.validate().is_err());
        let mut c = cfg();
        c.tenant_lifetime = Duration::from_millis(1500);
        assert!(c.validate().is_err());
        assert!(cfg().validate().is_ok());
        assert!(SoakConfig::benchmark().validate().is_ok());
    }

    #[test]
    fn values_differ_per_tenant_series_and_round() {
        let a = value("soak-1", 2, 3);
        assert_ne!(a, value("soak-2", 2, 3));
        assert_ne!(a, value("soak-1", 3, 3));
        assert_ne!(a, value("soak-1", 2, 4));
    }

    fn at(t_s: f64, open_files: u64) -> ResourceSample {
        ResourceSample {
            t_s,
            open_files,
            deleted_open_files: 0,
            rss_bytes: 0,
            threads: 0,
            disk_bytes: 0,
            bucket_bytes: 0,
            metrics_bytes: 0,
            metrics_series: 0,
        }
    }

    #[test]
    fn a_leak_shows_as_a_slope_and_a_plateau_does_not() {
        // One file more every 10 s after a warm-up: 360 per hour.
        let leak: Vec<_> = (0..100).map(|i| at(i as f64 * 10.0, 50 + i)).collect();
        let t = trend(&leak, 0.25, |s| s.open_files as f64);
        assert!((t.slope_per_hour - 360.0).abs() < 1.0, "{t:?}");
        assert!(t.late_growth > 40.0, "{t:?}");
        // Climbs during the warm-up, then flat with noise.
        let flat: Vec<_> = (0..100)
            .map(|i| at(i as f64 * 10.0, if i < 20 { 10 + i } else { 40 + i % 3 }))
            .collect();
        let t = trend(&flat, 0.25, |s| s.open_files as f64);
        assert!(t.slope_per_hour.abs() < 5.0, "{t:?}");
        assert!(t.late_growth.abs() < 2.0, "{t:?}");
        assert_eq!((t.first, t.max), (10.0, 42.0));
    }
}
