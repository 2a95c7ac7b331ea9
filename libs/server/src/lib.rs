//! What every Heddle role shares to run as a server.
//!
//! Owns logging and OpenTelemetry trace export setup, the metrics registry and its exposition, the HTTP
//! scaffolding every process serves (`/ready`, `/metrics`, tenant resolution, trace context), the process
//! metrics and open-files limit, the removal of idle tenants' metric series, the budget of bytes held by
//! in-flight requests, and shutdown signalling. It knows nothing of what the roles do with requests; config
//! loading is `heddle-config`.

mod html;
mod http;
mod inflight;
mod metrics;
mod otel;
mod process;
mod serve;
mod shutdown;
mod telemetry;
mod tenant_metrics;

pub use html::{format_age_ms, html_escape};
pub use http::{Readiness, metrics_and_ready_routes, tenant_layer};
pub use inflight::{InflightBytes, InflightRefused, Reservation};
pub use metrics::{DiscardLabels, DiscardedSamples, encode_metrics};
pub use otel::trace_http;
pub use process::{OpenFilesLimit, raise_open_files_limit, register_process_metrics};
pub use serve::{HttpServerMetrics, HttpServerOptions, serve_http};
pub use shutdown::shutdown_signal;
pub use telemetry::{LogFormat, Telemetry, init_logging, init_telemetry};
pub use tenant_metrics::{DEFAULT_TENANT_METRICS_IDLE_TIMEOUT, TenantFamily, TenantLabelSet, TenantMetrics};
