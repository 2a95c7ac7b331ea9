//! The gRPC transport of [`crate::IngesterClient`]: a client ([`GrpcIngesterClient`]) that calls a remote
//! `heddle.ingester.v1.Ingester`, and a server adapter ([`ingester_service`]) that serves any
//! `IngesterClient` implementation (the ingester's in-process one) under that service.
//!
//! The tenant travels as the `x-scope-orgid` request metadata entry, as in Mimir, and the caller's W3C trace
//! context as `traceparent` when trace export is on. `Push` carries the encoded `prometheus.WriteRequest` as raw
//! bytes end to end ([`crate::RawPushCodec`]).
//!
//! A cluster may also require a shared bearer token on every call ([`BearerToken`]): the client sends it as
//! `authorization` metadata, the server side checks it (the check lives with the process that serves).
//!
//! Either side may run over TLS ([`ServerTls`], [`ClientTls`]), mutual when the server requires client
//! certificates.

mod auth;
mod client;
mod server;
mod tls;
mod trace;

pub use auth::{AUTHORIZATION_METADATA, BearerToken, CredentialsRefusal, constant_time_eq};
pub use client::GrpcIngesterClient;
pub use server::{IngesterAdapter, ingester_service, tenant_from_metadata};
pub use tls::{ClientAuth, ClientTls, PemSource, ServerTls, TlsError, describe_error, grpc_endpoint, grpc_uri};

/// gRPC metadata key of the tenant id (HTTP header `X-Scope-OrgID`, lowercased as gRPC requires).
pub const TENANT_METADATA: &str = "x-scope-orgid";

/// Largest message either side accepts or sends, by default: 100 MiB, Mimir's
/// `-server.grpc-max-recv-msg-size-bytes` default (tonic's own default, 4 MiB, is below a large push).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 100 << 20;

#[cfg(test)]
mod tests;
