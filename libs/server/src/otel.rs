//! OpenTelemetry traces: OTLP export configured by the standard `OTEL_*` environment variables, and W3C trace
//! context (`traceparent`) taken from incoming HTTP requests.
//!
//! Export is on only when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set and
//! `OTEL_SDK_DISABLED` is not `true`; then every `tracing` span at INFO or above becomes an OpenTelemetry span.
//! The protocol follows `OTEL_EXPORTER_OTLP_PROTOCOL` (`grpc` or `http/protobuf`, the default); plaintext only.
//! Without an endpoint nothing of this runs and the HTTP middleware is a pass-through.

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use opentelemetry::propagation::{Extractor, TextMapPropagator as _};
use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::sync::atomic::{AtomicBool, Ordering};
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Set once an exporter is installed; the HTTP middleware skips all work while it is false.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Why trace export could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up the OTLP trace exporter ({endpoint}): {source}")]
pub(crate) struct TracingError {
    endpoint: String,
    #[source]
    source: opentelemetry_otlp::ExporterBuildError,
}

/// The OTLP endpoint from the environment, when trace export is asked for.
pub(crate) fn configured_endpoint() -> Option<String> {
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"));
    if disabled {
        return None;
    }
    ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"]
        .into_iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.trim().is_empty()))
}

/// Builds the tracer provider for `endpoint`. `role` (the `--target`) is a resource attribute; the service
/// name is `OTEL_SERVICE_NAME` (or `service.name` in `OTEL_RESOURCE_ATTRIBUTES`), else `heddle`.
///
/// Must run inside a Tokio runtime: the gRPC exporter's channel lives on it, and the runtime must outlive the
/// provider's shutdown.
pub(crate) fn build_provider(endpoint: &str, role: &str) -> Result<SdkTracerProvider, TracingError> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .build()
        .map_err(|source| TracingError {
            endpoint: endpoint.to_owned(),
            source,
        })?;
    let named_by_env = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| v.contains("service.name="));
    let mut resource = opentelemetry_sdk::Resource::builder().with_attributes([
        KeyValue::new("heddle.target", role.to_owned()),
        KeyValue::new("process.pid", i64::from(std::process::id())),
        KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
    ]);
    if !named_by_env {
        resource = resource.with_service_name("heddle");
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    ENABLED.store(true, Ordering::Release);
    Ok(provider)
}

/// The `tracing` layer that turns spans into OpenTelemetry spans of `provider`.
pub(crate) fn layer<S>(
    provider: &SdkTracerProvider,
) -> tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("heddle"))
        .with_tracked_inactivity(false)
}

/// HTTP middleware: runs each request in an `http_request` span whose parent is the caller's W3C trace
/// context (`traceparent`/`tracestate` headers), so a client's trace continues through the distributor into
/// the ingesters. A pass-through when trace export is off.
pub async fn trace_http(req: Request, next: Next) -> Response {
    if !ENABLED.load(Ordering::Acquire) {
        return next.run(req).await;
    }
    let parent = extract_http(req.headers());
    // Probes and scrapes every few seconds would bury the traces that matter; trace them only when asked to.
    let probe = matches!(req.uri().path(), "/ready" | "/metrics");
    if probe && !parent.span().span_context().is_valid() {
        return next.run(req).await;
    }
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| req.uri().path().to_owned(), |p| p.as_str().to_owned());
    let span = tracing::info_span!(
        "http_request",
        otel.name = %format_args!("{} {route}", req.method()),
        otel.kind = "server",
        http.request.method = %req.method(),
        url.path = %req.uri().path(),
        http.response.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if parent.span().span_context().is_valid() {
        // Cannot fail: the span has not been entered yet.
        let _ = span.set_parent(parent);
    }
    let response = next.run(req).instrument(span.clone()).await;
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "error");
    }
    response
}

fn extract_http(headers: &axum::http::HeaderMap) -> Context {
    TraceContextPropagator::new().extract(&HeaderExtractor(headers))
}

struct HeaderExtractor<'a>(&'a axum::http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TraceId;

    #[test]
    fn traceparent_header_is_read() {
        let mut headers = axum::http::HeaderMap::new();
        headers.insert(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                .parse()
                .unwrap(),
        );
        let cx = extract_http(&headers);
        let sc = cx.span().span_context().clone();
        assert!(sc.is_valid(), "traceparent should give a valid remote context");
        assert!(sc.is_remote());
        assert_eq!(
            sc.trace_id(),
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
        );
    }

    #[test]
    fn malformed_traceparent_is_ignored() {
        let mut headers = axum::http::HeaderMap::new();
        headers.insert("traceparent", "00-nothex-00f067aa0ba902b7-01".parse().unwrap());
        assert!(!extract_http(&headers).span().span_context().is_valid());
    }
}
