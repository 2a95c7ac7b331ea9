//! The addresses of one `heddle` process a test talks to: its HTTP and gRPC ports on 127.0.0.1.

use std::net::SocketAddr;

/// HTTP and gRPC ports of a process, and the URLs derived from them. [`crate::HeddleProcess`] and
/// [`crate::cluster::Node`] dereference to it, so `h.push_url()` works on either.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoints {
    pub http_port: u16,
    pub grpc_port: u16,
}

impl Endpoints {
    /// `http://127.0.0.1:<http port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// The remote-write endpoint (distributors), `<url>/api/v1/push`.
    pub fn push_url(&self) -> String {
        format!("{}/api/v1/push", self.url())
    }

    /// The Prometheus-compatible API prefix (queriers), `<url>/prometheus`.
    pub fn prometheus_url(&self) -> String {
        format!("{}/prometheus", self.url())
    }

    /// The remote-read endpoint, `<url>/prometheus/api/v1/read`.
    pub fn read_url(&self) -> String {
        format!("{}/api/v1/read", self.prometheus_url())
    }

    /// HTTP listen address.
    pub fn http_addr(&self) -> SocketAddr {
        ([127, 0, 0, 1], self.http_port).into()
    }

    /// gRPC listen address (Admin everywhere, the ingester API on ingesters).
    pub fn grpc_addr(&self) -> SocketAddr {
        ([127, 0, 0, 1], self.grpc_port).into()
    }
}
