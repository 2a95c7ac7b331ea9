//! Command-line flags. The generation flags are shared by `push` and `verify`, so a verify run given the same
//! values recomputes exactly what was pushed.

use crate::LoadtestError;
use clap::{Args, Parser, Subcommand, ValueEnum};
use heddle_testkit::{ReadMode, SeriesGen};
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
            Command::Push(_) => panic!("wrong subcommand"),
        }
    }
}
