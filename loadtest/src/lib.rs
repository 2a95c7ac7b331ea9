//! `heddle-loadtest`: pushes deterministic node-exporter-like series with remote write, then reads them back
//! with remote read and checks every sample bit for bit.
//!
//! Owns the command line, the push loop (bounded concurrency, Prometheus-style retries, progress and latency
//! reporting) and the verifier. The data itself ([`heddle_testkit::SeriesGen`]) and the wire clients come from
//! `heddle-testkit`, so integration tests and this tool agree on every series. It knows nothing of heddle's
//! internals: it only speaks the public HTTP contracts.

pub mod args;
mod error;
mod push;
mod retry;
mod stats;
mod verify;

pub use error::LoadtestError;
pub use push::{PushReport, run_push};
pub use retry::{Attempt, Backoff, classify};
pub use stats::{Latencies, LatencySummary};
pub use verify::{Examples, VerifyReport, compare_metric, run_verify};
