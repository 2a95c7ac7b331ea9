//! `heddle`: every Heddle role in one binary, chosen by `--target`.
//!
//! With no flags it runs the single-process default: distributor, ingester and querier in one process, an
//! in-memory ring holding this one ingester (replication factor 1), data under `./tsdb`.

mod access;
mod admin;
mod config;
mod ring_metrics;
mod run;

use config::Config;
use std::process::ExitCode;

/// jemalloc instead of glibc malloc: a head holds millions of small chunk buffers that all grow at once, and
/// glibc leaves the ones they outgrew as holes (about 10 % more RSS per series at full open chunks, and the pages
/// of chunks freed at a cut are kept); jemalloc also hands freed request memory back to the OS without tuning
/// (docs/ARCHITECTURE.md "jemalloc as the binary's allocator").
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let specs = config::flags();
    let (cfg, source) = match heddle_config::load::<Config>(
        "heddle",
        "Heddle: a horizontally sharded Prometheus remote-write ingester (distributor, ingester, querier)",
        &specs,
        std::env::args(),
    ) {
        Ok(loaded) => loaded,
        Err(heddle_config::LoadError::Cli(e)) => e.exit(),
        Err(heddle_config::LoadError::PrintConfig { yaml }) => {
            print!("{yaml}");
            return ExitCode::SUCCESS;
        }
        Err(heddle_config::LoadError::Config(e)) => {
            eprintln!("heddle: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = cfg.validate() {
        eprintln!("heddle: invalid configuration: {e}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("heddle: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Inside the runtime: the OTLP gRPC exporter's channel lives on it.
    let role = format!("{:?}", cfg.target).to_lowercase();
    let telemetry = {
        let _runtime = runtime.enter();
        heddle_server::init_telemetry(&cfg.server.log_level, cfg.server.log_format, &role)
    };
    tracing::info!(version = env!("CARGO_PKG_VERSION"), target = ?cfg.target, config = ?source, "starting heddle");
    match heddle_server::raise_open_files_limit() {
        Ok(l) => tracing::info!(
            soft_before = l.soft_before,
            soft = l.soft,
            hard = l.hard,
            "open files limit (RLIMIT_NOFILE): soft limit raised to the hard limit"
        ),
        Err(e) => tracing::warn!(error = %e, "could not raise the open files limit; keeping the inherited one"),
    }
    let code = match runtime.block_on(run::run(cfg)) {
        Ok(()) => {
            tracing::info!("stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "heddle failed");
            eprintln!("heddle: {e:#}");
            ExitCode::FAILURE
        }
    };
    // Send the spans still buffered while the runtime (and the exporter's connection on it) is still up.
    telemetry.shutdown();
    // Dropping the runtime would wait for every blocking task, and a compaction can run for minutes: `run`
    // already bounded the stop by the graceful shutdown timeout and closed the heads, so work still running
    // now is abandoned (a block half-written is deleted at the next start).
    runtime.shutdown_timeout(RUNTIME_STOP_TIMEOUT);
    code
}

/// How long the runtime waits for tasks still running once `run` returned.
const RUNTIME_STOP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);
