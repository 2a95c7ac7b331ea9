//! `heddle-loadtest`: pushes deterministic node-exporter-like series with remote write, then reads them back
//! with remote read and checks every sample bit for bit.
//!
//! Owns the command line, the push loop (bounded concurrency, Prometheus-style retries, progress and latency
//! reporting) and the verifier. The data itself ([`heddle_testkit::SeriesGen`]) and the wire clients come from
//! `heddle-testkit`, so integration tests and this tool agree on every series. It knows nothing of heddle's
//! internals: it only speaks the public HTTP contracts.
//!
//! ```text
//! heddle-loadtest push --url=http://127.0.0.1:8080/api/v1/push --series=2000 --metrics=20 --rounds=5 \
//!     --batch-size=500 --concurrency=4 --seed=42 [--tenant=team-a] [--job=node]
//! # stdout: {"samples_sent":..,"samples_acknowledged":..,"requests":..,"errors":0,"retries":0,"duration_s":..,
//! #          "samples_per_second":..,"latency_ms":{"p50":..,"p90":..,"p99":..,"max":..},"start_ms":S,..}
//! heddle-loadtest verify --read-url=http://127.0.0.1:8080/prometheus --series=2000 --metrics=20 --rounds=5 \
//!     --seed=42 --start-ms=S [--mode=samples|chunks] [--tenant=team-a] [--job=node]
//! # stdout: {"verified":true,"series_checked":..,"samples_expected":..,"samples_found":..,"missing":0,
//! #          "unexpected":0,"mismatched":0,..}
//! ```
//! Exit status 0 = every request acknowledged / everything verified, 1 = a request failed or verification found
//! a difference, 2 = unusable flags.
//!
//! `run` and `compare` drive scenario files ([`scenario`]): the load of [`workload`] at the pace of
//! [`run::Pacer`], the target's CPU and RSS from [`procstat`], verification through remote read or
//! VictoriaMetrics' export API ([`readback`]), `result.json` and a self-contained `report.html` ([`report`],
//! [`svg`]); targets it can start itself are in [`target`]; see `loadtest/README.md`.
//!
//! ```text
//! heddle-loadtest run --scenario loadtest/scenarios/steady.yaml --url http://127.0.0.1:8080/api/v1/push \
//!     --read-url http://127.0.0.1:8080/prometheus [--target-pid PID] --out out/steady
//! heddle-loadtest run --scenario loadtest/scenarios/steady.yaml --start heddle --out out/steady
//! heddle-loadtest compare --scenario loadtest/scenarios/steady.yaml --a heddle --b prometheus --repeat 2 --out out/cmp
//! ```

pub mod args;
pub mod compare;
mod error;
pub mod probe;
pub mod procstat;
mod push;
pub mod readback;
pub mod report;
mod retry;
pub mod run;
pub mod scenario;
pub mod soak;
mod stats;
pub mod svg;
pub mod target;
mod verify;
pub mod workload;

pub use error::LoadtestError;
pub use push::{PushReport, run_push};
pub use retry::{Attempt, Backoff, classify};
pub use stats::{Latencies, LatencySummary};
pub use verify::{Examples, ValueMatch, VerifyReport, compare_expected, compare_metric, run_verify};
