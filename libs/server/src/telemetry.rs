//! Structured logging.

use serde::{Deserialize, Serialize};

/// Log line format, Mimir's `-log.format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// `key=value` lines for people.
    #[default]
    Logfmt,
    /// One JSON object per line for log pipelines.
    Json,
}

/// Installs the global `tracing` subscriber. `level` is an `EnvFilter` directive (`info`,
/// `heddle_ingester=debug,info`); `RUST_LOG`, when set, wins. Safe to call more than once (later calls no-op).
pub fn init_logging(level: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(true);
    let result = match format {
        LogFormat::Logfmt => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    if result.is_err() {
        tracing::debug!("logging was already initialised");
    }
}
