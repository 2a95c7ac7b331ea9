//! Serving HTTP: the accept loop every listener runs, with a header-read timeout and a connection limit.
//!
//! - **Header-read timeout** (`server.http_server_read_header_timeout`): a connection must deliver a complete
//!   request head within it, or hyper closes the connection. A client that opens connections and sends half a
//!   header (slowloris) therefore holds each for at most that long. Bodies are the handlers' business (the push
//!   endpoint has its own body timeout).
//! - **Connection limit** (`server.http_conn_limit`): at most that many connections are open at once. At the
//!   limit the loop stops accepting, as dskit's limit listener does: further clients wait in the kernel's
//!   accept queue (they are not refused) until a connection closes. A flood of idle connections cannot run
//!   the process out of file descriptors or memory.
//!
//! Shutdown stops accepting, asks every open connection to finish its request in flight and close, and
//! returns once all of them have.

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Permits standing for "no connection limit": far more connections than a process can hold.
const UNLIMITED: usize = 1 << 28;

/// How an HTTP listener treats its connections.
#[derive(Debug, Clone)]
pub struct HttpServerOptions {
    /// Longest time a connection may take to deliver a request head (`Duration::ZERO`: no limit).
    pub read_header_timeout: Duration,
    /// Most connections open at once (0: no limit).
    pub conn_limit: usize,
    /// Where the listener counts its connections.
    pub metrics: HttpServerMetrics,
}

impl HttpServerOptions {
    /// Options with metrics registered on `registry`.
    pub fn new(read_header_timeout: Duration, conn_limit: usize, registry: &mut Registry) -> Self {
        Self {
            read_header_timeout,
            conn_limit,
            metrics: HttpServerMetrics::register(registry),
        }
    }
}

/// The connection metrics of the HTTP listener.
#[derive(Debug, Clone, Default)]
pub struct HttpServerMetrics {
    open: Gauge,
    limit_waits: Counter,
    header_timeouts: Counter,
}

impl HttpServerMetrics {
    /// Registers `heddle_http_open_connections`, `heddle_http_connection_limit_waits_total` and
    /// `heddle_http_header_read_timeouts_total`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "heddle_http_open_connections",
            "HTTP connections open now",
            m.open.clone(),
        );
        registry.register(
            "heddle_http_connection_limit_waits",
            "Times the HTTP listener stopped accepting because server.http_conn_limit connections were open",
            m.limit_waits.clone(),
        );
        registry.register(
            "heddle_http_header_read_timeouts",
            "HTTP connections closed because a request head did not arrive within \
             server.http_server_read_header_timeout",
            m.header_timeouts.clone(),
        );
        m
    }
}

/// Serves `router` on `listener` until `shutdown` is cancelled, then finishes in-flight requests. Each request
/// runs in a span continuing the caller's W3C trace context when trace export is on ([`crate::trace_http`]).
/// See the module docs for the timeout and the limit.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: CancellationToken,
    options: HttpServerOptions,
) -> std::io::Result<()> {
    let router = router.layer(axum::middleware::from_fn(crate::trace_http));
    let limit = match options.conn_limit {
        0 => UNLIMITED,
        n => n.min(UNLIMITED),
    };
    let permits = Arc::new(Semaphore::new(limit));
    loop {
        let permit = match Arc::clone(&permits).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                options.metrics.limit_waits.inc();
                tokio::select! {
                    permit = Arc::clone(&permits).acquire_owned() => match permit {
                        Ok(permit) => permit,
                        Err(_) => break,
                    },
                    () = shutdown.cancelled() => break,
                }
            }
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: the condition passes, the listener stays.
                    tracing::warn!(error = %e, "accepting an HTTP connection failed");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        () = shutdown.cancelled() => break,
                    }
                }
            },
            () = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        options.metrics.open.inc();
        let (router, shutdown, metrics) = (router.clone(), shutdown.clone(), options.metrics.clone());
        let header_timeout = options.read_header_timeout;
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new());
            // hyper's own default with a timer is 30 s; zero means none at all.
            builder.header_read_timeout((!header_timeout.is_zero()).then_some(header_timeout));
            let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(router));
            tokio::pin!(conn);
            let result = tokio::select! {
                result = conn.as_mut() => result,
                () = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                if e.is_timeout() {
                    metrics.header_timeouts.inc();
                }
                tracing::debug!(error = %e, "HTTP connection ended with an error");
            }
            metrics.open.dec();
            drop(permit);
        });
    }
    // Every open connection holds a permit: all of them back means all connections are closed.
    let all = u32::try_from(limit).unwrap_or(u32::MAX);
    let _ = permits.acquire_many(all).await;
    Ok(())
}

#[cfg(test)]
mod tests;
