//! Structured logging, and OpenTelemetry trace export beside it (see [`crate::otel`]).

use crate::otel;
use opentelemetry_sdk::trace::SdkTracerProvider;
use serde::{Deserialize, Serialize};
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

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

/// Installs the global `tracing` subscriber for logs only. `level` is an `EnvFilter` directive (`info`,
/// `heddle_ingester=debug,info`); `RUST_LOG`, when set, wins. Safe to call more than once (later calls no-op).
pub fn init_logging(level: &str, format: LogFormat) {
    install(level, format, None);
}

/// What [`init_telemetry`] installed. Call [`Telemetry::shutdown`] before the process exits (and before the
/// Tokio runtime is dropped) so buffered spans are sent.
#[derive(Debug)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported (an OTLP endpoint was configured).
    pub fn exports_traces(&self) -> bool {
        self.provider.is_some()
    }

    /// Flushes and stops trace export; blocks until the exporter has sent what it holds or timed out.
    pub fn shutdown(mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(e) = provider.shutdown()
        {
            tracing::warn!(error = %e, "flushing traces at shutdown failed");
        }
    }
}

/// Installs logging as [`init_logging`] does and, when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, OpenTelemetry
/// trace export over OTLP configured by the standard `OTEL_*` environment variables (`OTEL_SERVICE_NAME`,
/// `OTEL_EXPORTER_OTLP_PROTOCOL`, `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_BSP_*`, ...). `role` is recorded as the
/// `heddle.target` resource attribute. When the exporter cannot be built, logging still works and a warning
/// says why traces are not exported.
///
/// Must be called inside a Tokio runtime (`Runtime::enter`), which must outlive [`Telemetry::shutdown`].
pub fn init_telemetry(level: &str, format: LogFormat, role: &str) -> Telemetry {
    let Some(endpoint) = otel::configured_endpoint() else {
        install(level, format, None);
        return Telemetry { provider: None };
    };
    match otel::build_provider(&endpoint, role) {
        Ok(provider) => {
            install(level, format, Some(&provider));
            tracing::info!(%endpoint, "exporting traces over OTLP");
            Telemetry {
                provider: Some(provider),
            }
        }
        Err(e) => {
            install(level, format, None);
            tracing::warn!(error = %e, "trace export is off");
            Telemetry { provider: None }
        }
    }
}

fn install(level: &str, format: LogFormat, provider: Option<&SdkTracerProvider>) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour codes only on a terminal: in a file, a pipe or a log collector they are noise in every line.
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(true);
    // The log filter applies to log lines only: traces keep every INFO span even when logs are at `warn`.
    let fmt = match format {
        LogFormat::Logfmt => fmt.with_filter(filter).boxed(),
        LogFormat::Json => fmt.json().flatten_event(true).with_filter(filter).boxed(),
    };
    let traces = provider.map(|p| otel::layer(p).with_filter(tracing_subscriber::filter::LevelFilter::INFO));
    let result = tracing_subscriber::registry().with(fmt).with(traces).try_init();
    if result.is_err() {
        tracing::debug!("logging was already initialised");
    }
}
