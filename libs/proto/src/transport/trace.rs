//! W3C trace context (`traceparent`) across the ingester gRPC hop: the client copies the current span's
//! context into the request metadata, the server continues it in the call's span, so one trace covers the
//! distributor and the ingesters.
//!
//! Both sides go through the global OpenTelemetry propagator, a no-op until the process installs one (it does
//! when trace export is configured): without it nothing is written or read.

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry::trace::TraceContextExt as _;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Writes the current span's trace context into `metadata` (nothing when there is no sampled-or-not span
/// context, e.g. trace export is off).
pub(crate) fn inject(metadata: &mut MetadataMap) {
    let cx = tracing::Span::current().context();
    if !cx.span().span_context().is_valid() {
        return;
    }
    opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&cx, &mut MetadataInjector(metadata)));
}

/// The caller's trace context in `metadata`, if it sent one and this process propagates traces.
pub(crate) fn remote_parent(metadata: &MetadataMap) -> Option<Context> {
    let parent = opentelemetry::global::get_text_map_propagator(|p| p.extract(&MetadataExtractor(metadata)));
    parent.span().span_context().is_valid().then_some(parent)
}

/// Makes `span` (not yet entered) a child of `parent`.
pub(crate) fn set_parent(span: &tracing::Span, parent: Context) {
    // Fails only when the span was already entered or tracing is off; either way there is nothing to do.
    let _ = span.set_parent(parent);
}

/// The server span of one ingester RPC (named `$name`, with a `tenant` field to record), continuing the
/// caller's trace when it sent one. Only then does it carry the OpenTelemetry name and kind, which would
/// otherwise only lengthen every log line written inside the call.
macro_rules! rpc_span {
    ($name:literal, $method:literal, $metadata:expr) => {{
        match $crate::transport::trace::remote_parent($metadata) {
            Some(parent) => {
                let span = tracing::info_span!(
                    $name,
                    otel.name = concat!("heddle.ingester.v1.Ingester/", $method),
                    otel.kind = "server",
                    tenant = tracing::field::Empty,
                );
                $crate::transport::trace::set_parent(&span, parent);
                span
            }
            None => tracing::info_span!($name, tenant = tracing::field::Empty),
        }
    }};
}
pub(crate) use rpc_span;

struct MetadataInjector<'a>(&'a mut MetadataMap);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(key), Ok(value)) = (
            MetadataKey::from_bytes(key.as_bytes()),
            MetadataValue::try_from(value.as_str()),
        ) {
            self.0.insert(key, value);
        }
    }
}

struct MetadataExtractor<'a>(&'a MetadataMap);

impl Extractor for MetadataExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|k| match k {
                tonic::metadata::KeyRef::Ascii(k) => Some(k.as_str()),
                tonic::metadata::KeyRef::Binary(_) => None,
            })
            .collect()
    }
}
