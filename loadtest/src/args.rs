//! Command-line flags. The generation flags are shared by `push` and `verify`, so a verify run given the same
//! values recomputes exactly what was pushed.

use crate::LoadtestError;
use crate::readback::ReadBackend;
use crate::retry::Backoff;
use crate::run::RunOptions;
use crate::scenario::{Scenario, parse_duration};
use crate::target::TargetKind;
use clap::{Args, Parser, Subcommand, ValueEnum};
use heddle_testkit::{ReadMode, SeriesGen};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `heddle-loadtest`: remote-write load generator and read-back verifier.
#[derive(Debug, Parser)]
#[command(name = "heddle-loadtest", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Push deterministic series with remote write and print a JSON summary.
    Push(PushArgs),
    /// Read back what `push` sent (same generation flags) and check every sample, bit for bit.
    Verify(VerifyArgs),
    /// Run a scenario file against one target, verify, and write `result.json` and `report.html`.
    Run(RunArgs),
    /// Run a scenario against two targets the driver starts, alternating, and report the ratios.
    Compare(CompareArgs),
    /// Start heddle with time compressed, let tenants come and go, and report how open files, RSS, threads
    /// and disk moved; then read every acknowledged sample back.
    Soak(SoakArgs),
    /// Send the small requests that once cost heddle gigabytes or a query slot past its timeout to each
    /// binary in turn (default flags), and report each answer, peak RSS growth and time side by side.
    Probe(ProbeArgs),
}

/// Flags of `probe`.
#[derive(Debug, Clone, Args)]
pub struct ProbeArgs {
    /// A heddle binary to probe (repeatable, in the order the table shows them; default: the one next to this
    /// executable).
    #[arg(long)]
    pub bin: Vec<PathBuf>,
}

/// What data is generated: identical for `push` and `verify`.
#[derive(Debug, Clone, Args)]
pub struct GenArgs {
    /// Number of series.
    #[arg(long, default_value_t = 1000)]
    pub series: usize,
    /// Number of metric names the series are spread over.
    #[arg(long, default_value_t = 10)]
    pub metrics: usize,
    /// Samples per series (one per round).
    #[arg(long, default_value_t = 10)]
    pub rounds: u32,
    /// Milliseconds between the timestamps of consecutive rounds.
    #[arg(long, default_value_t = 15_000)]
    pub interval_ms: i64,
    /// Timestamp of round 0. `push` defaults to now minus the whole run, aligned to the interval (so every
    /// sample is in the past) and prints it; `verify` requires it.
    #[arg(long)]
    pub start_ms: Option<i64>,
    /// Tenant sent as `X-Scope-OrgID` (none when unset).
    #[arg(long)]
    pub tenant: Option<String>,
    /// Seed of values and timestamp jitter.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The `job` label of every series; runs with different jobs do not see each other's series.
    #[arg(long, default_value = "node")]
    pub job: String,
}

impl GenArgs {
    /// Checks the flags and resolves the start time (`now` is used only when `--start-ms` is absent).
    pub fn generator(&self, now: SystemTime) -> Result<SeriesGen, LoadtestError> {
        if self.series == 0 || self.metrics == 0 || self.rounds == 0 {
            return Err(LoadtestError::Flags(format!(
                "--series ({}), --metrics ({}) and --rounds ({}) must be at least 1",
                self.series, self.metrics, self.rounds
            )));
        }
        if self.interval_ms <= 0 {
            return Err(LoadtestError::Flags(format!(
                "--interval-ms must be positive, got {}",
                self.interval_ms
            )));
        }
        let start_ms = match self.start_ms {
            Some(s) => s,
            None => {
                let now_ms = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
                let span = i64::from(self.rounds) * self.interval_ms;
                let start = now_ms - span;
                start - start.rem_euclid(self.interval_ms)
            }
        };
        Ok(SeriesGen {
            seed: self.seed,
            series: self.series,
            metrics: self.metrics,
            job: self.job.clone(),
            start_ms,
            interval_ms: self.interval_ms,
        })
    }
}

/// Flags of `push`.
#[derive(Debug, Clone, Args)]
pub struct PushArgs {
    /// Remote-write URL, e.g. `http://127.0.0.1:8080/api/v1/push`.
    #[arg(long)]
    pub url: String,
    #[command(flatten)]
    pub generate: GenArgs,
    /// Series per request (each carries one sample per series).
    #[arg(long, default_value_t = 500)]
    pub batch_size: usize,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Retries of one request after a 5xx, 429 or transport error, before it counts as an error.
    #[arg(long, default_value_t = 10)]
    pub max_retries: u32,
    /// First retry delay; doubles on every retry (Prometheus' `min_backoff`).
    #[arg(long, default_value_t = 30)]
    pub min_backoff_ms: u64,
    /// Largest retry delay (Prometheus' `max_backoff`).
    #[arg(long, default_value_t = 5_000)]
    pub max_backoff_ms: u64,
    /// Timeout of one HTTP request.
    #[arg(long, default_value_t = 30_000)]
    pub timeout_ms: u64,
    /// Seconds between progress lines on stderr (0 = none).
    #[arg(long, default_value_t = 1)]
    pub progress_s: u64,
    /// Protocol to send: `rw1` (`prometheus.WriteRequest`), `rw2` (`io.prometheus.write.v2.Request`, labels
    /// in a symbol table) or `otlp` (OTLP/HTTP protobuf, gzip, to a `/otlp/v1/metrics` URL), to compare the
    /// receiver's cost of each.
    #[arg(long, value_enum, default_value_t = Protocol::Rw1)]
    pub protocol: Protocol,
}

/// The protocol `push` sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Protocol {
    /// Remote write 1.0.
    #[default]
    Rw1,
    /// Remote write 2.0 (float samples).
    Rw2,
    /// OTLP/HTTP metrics, protobuf and gzip as the OpenTelemetry Collector sends them: each series a gauge
    /// point, `job` and `instance` as the resource's `service.name` and `service.instance.id`, so the
    /// translation stores exactly the generated series.
    Otlp,
}

impl PushArgs {
    /// Validates the non-generation flags.
    pub fn check(&self) -> Result<(), LoadtestError> {
        if self.batch_size == 0 || self.concurrency == 0 {
            return Err(LoadtestError::Flags(format!(
                "--batch-size ({}) and --concurrency ({}) must be at least 1",
                self.batch_size, self.concurrency
            )));
        }
        if self.min_backoff_ms > self.max_backoff_ms {
            return Err(LoadtestError::Flags(format!(
                "--min-backoff-ms ({}) exceeds --max-backoff-ms ({})",
                self.min_backoff_ms, self.max_backoff_ms
            )));
        }
        Ok(())
    }

    /// The per-request timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
}

/// Remote-read response type to ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReadModeArg {
    /// `SAMPLES`: one snappy `ReadResponse`.
    Samples,
    /// `STREAMED_XOR_CHUNKS`: framed XOR chunks.
    Chunks,
}

impl From<ReadModeArg> for ReadMode {
    fn from(m: ReadModeArg) -> Self {
        match m {
            ReadModeArg::Samples => ReadMode::Samples,
            ReadModeArg::Chunks => ReadMode::StreamedChunks,
        }
    }
}

/// Flags of `verify`.
#[derive(Debug, Clone, Args)]
pub struct VerifyArgs {
    /// Prometheus API prefix; remote read is `<this>/api/v1/read`, e.g. `http://127.0.0.1:8080/prometheus`.
    #[arg(long)]
    pub read_url: String,
    #[command(flatten)]
    pub generate: GenArgs,
    /// Remote-read response type.
    #[arg(long, value_enum, default_value_t = ReadModeArg::Samples)]
    pub mode: ReadModeArg,
    /// Metric names queried per remote-read request (one query each).
    #[arg(long, default_value_t = 1)]
    pub metrics_per_request: usize,
    /// Read requests in flight at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Timeout of one HTTP request.
    #[arg(long, default_value_t = 60_000)]
    pub timeout_ms: u64,
    /// Problems (missing or unexpected samples) printed to stderr as examples.
    #[arg(long, default_value_t = 10)]
    pub max_examples: usize,
}

/// Scenario flags shared by `run` and `compare`: the file and the values that override it.
#[derive(Debug, Clone, Args)]
pub struct ScenarioArgs {
    /// Scenario YAML file (see `loadtest/scenarios/`).
    #[arg(long)]
    pub scenario: PathBuf,
    /// Active series (overrides the scenario's `series`).
    #[arg(long)]
    pub series: Option<usize>,
    /// Push duration such as `30s` or `5m` (overrides the scenario's `duration`).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Tenant sent as `X-Scope-OrgID` (the name prefix in multi-tenant scenarios).
    #[arg(long)]
    pub tenant: Option<String>,
    /// `job` label (prefix) of every series; default `lt-<scenario>-<unix seconds>`, unique per run.
    #[arg(long)]
    pub job: Option<String>,
    /// Output directory.
    #[arg(long)]
    pub out: PathBuf,
    /// No progress line on stderr.
    #[arg(long)]
    pub no_progress: bool,
    /// Retries of one request after a 5xx, 429 or transport error.
    #[arg(long, default_value_t = 10)]
    pub max_retries: u32,
    /// Timeout of one HTTP request.
    #[arg(long, default_value_t = 30_000)]
    pub timeout_ms: u64,
}

impl ScenarioArgs {
    /// Loads the scenario and applies the overrides.
    pub fn load(&self) -> Result<Scenario, LoadtestError> {
        let mut s = Scenario::load(&self.scenario)?;
        if let Some(n) = self.series {
            s.series = n;
        }
        if let Some(d) = self.duration {
            s.duration = d;
        }
        s.validate()?;
        Ok(s)
    }

    /// Run options for a target at `write_url` / `read`.
    pub fn run_options(&self, scenario: &Scenario, write_url: String, read: ReadBackend) -> RunOptions {
        let job = self.job.clone().unwrap_or_else(|| {
            let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
            format!("lt-{}-{secs}", scenario.name)
        });
        RunOptions {
            write_url,
            read,
            tenant: self.tenant.clone(),
            job,
            target_pid: None,
            target_name: "external".to_owned(),
            progress: !self.no_progress,
            backoff: Backoff {
                max_retries: self.max_retries,
                min: Duration::from_millis(30),
                max: Duration::from_millis(5_000),
            },
            timeout: Duration::from_millis(self.timeout_ms),
        }
    }

    /// Whether the workload sends `X-Scope-OrgID` (a started heddle then needs multitenancy).
    pub fn sends_tenant(&self, scenario: &Scenario) -> bool {
        self.tenant.is_some() || scenario.tenants.is_some()
    }
}

/// Which read API `run` verifies through, for a target it did not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReadApi {
    /// Prometheus remote read at `<read-url>/api/v1/read` (heddle, Prometheus).
    RemoteRead,
    /// VictoriaMetrics' `<read-url>/api/v1/export`.
    VmExport,
}

/// Flags of `run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Remote-write URL (not with `--start`).
    #[arg(long, required_unless_present = "start", conflicts_with = "start")]
    pub url: Option<String>,
    /// Prometheus API prefix to read back from, e.g. `http://127.0.0.1:8080/prometheus` (not with `--start`).
    #[arg(long, required_unless_present = "start", conflicts_with = "start")]
    pub read_url: Option<String>,
    /// Read API of `--read-url`.
    #[arg(long, value_enum, default_value_t = ReadApi::RemoteRead)]
    pub read_api: ReadApi,
    /// Remote-read response type.
    #[arg(long, value_enum, default_value_t = ReadModeArg::Samples)]
    pub read_mode: ReadModeArg,
    /// Process whose CPU and RSS are sampled (the target's).
    #[arg(long, conflicts_with = "start")]
    pub target_pid: Option<u32>,
    /// Start this target on a free 127.0.0.1 port in a temporary directory, and stop it at the end.
    #[arg(long, value_enum)]
    pub start: Option<TargetKind>,
    /// Binary of the started target (default: `heddle` next to this executable, others on PATH).
    #[arg(long)]
    pub bin: Option<PathBuf>,
}

/// Flags of `compare`.
#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// First target (ratios are a / b and a / c).
    #[arg(long, value_enum)]
    pub a: TargetKind,
    /// Second target.
    #[arg(long, value_enum)]
    pub b: TargetKind,
    /// Optional third target, run side by side with the other two.
    #[arg(long, value_enum)]
    pub c: Option<TargetKind>,
    /// Runs of each target.
    #[arg(long, default_value_t = 2)]
    pub repeat: u32,
    /// Binary of target a.
    #[arg(long)]
    pub a_bin: Option<PathBuf>,
    /// Binary of target b.
    #[arg(long)]
    pub b_bin: Option<PathBuf>,
    /// Binary of target c.
    #[arg(long)]
    pub c_bin: Option<PathBuf>,
}

/// Flags of `soak` (defaults: the 30-minute benchmark, [`crate::soak::SoakConfig::benchmark`]).
#[derive(Debug, Clone, Args)]
pub struct SoakArgs {
    /// How long rounds are pushed.
    #[arg(long, value_parser = parse_duration, default_value = "30m")]
    pub duration: Duration,
    /// Time between rounds.
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    pub interval: Duration,
    /// Series per tenant.
    #[arg(long, default_value_t = 500)]
    pub series: usize,
    /// Tenants pushing at any time.
    #[arg(long, default_value_t = 40)]
    pub active_tenants: usize,
    /// Tenant names the slots reuse (a tenant returns after going idle).
    #[arg(long, default_value_t = 120)]
    pub tenant_pool: usize,
    /// How long one tenant pushes before it goes idle.
    #[arg(long, value_parser = parse_duration, default_value = "2m")]
    pub tenant_lifetime: Duration,
    /// Time between readings of the target's open files, RSS, threads and disk.
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    pub sample_every: Duration,
    /// heddle's close-idle timeout (its head-compaction idle timeout is half of it).
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    pub close_idle: Duration,
    /// Share of the run left out of the slopes.
    #[arg(long, default_value_t = 0.25)]
    pub warmup: f64,
    /// Every this many rounds each active tenant also sends OTLP, remote write 2.0 histograms with exemplars,
    /// PromQL and exemplar queries (0: floats only).
    #[arg(long, default_value_t = 5)]
    pub surfaces_every: u64,
    /// The heddle binary (default: next to this executable).
    #[arg(long)]
    pub bin: Option<PathBuf>,
    /// Output directory (`soak.json`).
    #[arg(long)]
    pub out: PathBuf,
    /// No progress line on stderr.
    #[arg(long)]
    pub no_progress: bool,
}

impl SoakArgs {
    /// The run these flags describe.
    pub fn config(&self) -> crate::soak::SoakConfig {
        crate::soak::SoakConfig {
            duration: self.duration,
            interval: self.interval,
            series: self.series,
            active_tenants: self.active_tenants,
            tenant_pool: self.tenant_pool,
            tenant_lifetime: self.tenant_lifetime,
            sample_every: self.sample_every,
            close_idle: self.close_idle,
            warmup: self.warmup,
            surfaces_every: self.surfaces_every,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gen_args() -> GenArgs {
        GenArgs {
            series: 10,
            metrics: 2,
            rounds: 4,
            interval_ms: 15_000,
            start_ms: None,
            tenant: None,
            seed: 1,
            job: "node".into(),
        }
    }

    #[test]
    fn default_start_is_aligned_and_in_the_past() {
        let now = UNIX_EPOCH + Duration::from_millis(1_700_000_007_123);
        let g = gen_args().generator(now).expect("gen");
        assert_eq!(g.start_ms % 15_000, 0);
        let (_, hi) = g.time_range(4);
        assert!(hi < 1_700_000_007_123, "{hi}");
        assert!(g.start_ms >= 1_700_000_007_123 - 5 * 15_000);
    }

    #[test]
    fn explicit_start_wins_and_bad_flags_fail() {
        let mut a = gen_args();
        a.start_ms = Some(42);
        assert_eq!(a.generator(SystemTime::now()).expect("gen").start_ms, 42);
        a.rounds = 0;
        assert!(a.generator(SystemTime::now()).is_err());
        let mut b = gen_args();
        b.interval_ms = 0;
        assert!(b.generator(SystemTime::now()).is_err());
    }

    #[test]
    fn cli_parses() {
        let cli = Cli::try_parse_from([
            "heddle-loadtest",
            "verify",
            "--read-url=http://x/prometheus",
            "--series=5",
            "--start-ms=1000",
            "--mode=chunks",
        ])
        .expect("parse");
        match cli.command {
            Command::Verify(v) => {
                assert_eq!(v.generate.series, 5);
                assert_eq!(v.mode, ReadModeArg::Chunks);
            }
            other => panic!("wrong subcommand {other:?}"),
        }
    }
}
