//! The gRPC listeners: the ingester API (when others dial this process), the Admin service and the standard
//! health service, with Admin (and the admin HTTP routes) optionally on their own address.

use super::{AdminCore, AdminGrpc, AdminToken};
use crate::access::{AuthRefusals, ClusterToken};
use crate::config::ServerConfig;
use anyhow::Context;
use heddle_proto::IngesterClient;
use heddle_proto::admin::admin_server::AdminServer;
use heddle_proto::transport::{ClientAuth, ServerTls};
use std::sync::Arc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

/// The running gRPC servers and the health status they report.
#[derive(Debug)]
pub struct GrpcServers {
    /// One task per listener; each ends when `stop` is cancelled and in-flight calls finished.
    pub tasks: Vec<JoinHandle<Result<(), tonic::transport::Error>>>,
    health: HealthReporter,
}

impl GrpcServers {
    /// Sets the overall (`""`) health status `grpc.health.v1.Health/Check` reports.
    pub async fn set_serving(&self, serving: bool) {
        let status = if serving {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        self.health.set_service_status("", status).await;
    }
}

fn listen_addr(address: &str, port: u16) -> String {
    let host = if address.is_empty() { "0.0.0.0" } else { address };
    format!("{host}:{port}")
}

async fn bind(addr: &str, what: &str) -> anyhow::Result<tokio_stream::wrappers::TcpListenerStream> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen for {what} on {addr}"))?;
    tracing::info!(addr, what, "listening");
    Ok(tokio_stream::wrappers::TcpListenerStream::new(listener))
}

/// A server builder, serving TLS when `tls` is given (the same certificate and client policy on every listener).
fn builder(tls: Option<&ServerTls>) -> anyhow::Result<tonic::transport::Server> {
    let builder = tonic::transport::Server::builder();
    match tls {
        Some(tls) => builder
            .tls_config(tls.config())
            .context("setting up gRPC TLS (server.grpc_tls_config)"),
        None => Ok(builder),
    }
}

/// What the gRPC listeners serve, and the credentials each API needs.
#[derive(Debug)]
pub struct GrpcApis {
    /// The ingester API: only where other processes dial it (an ingester in a cluster). The single process's
    /// distributor and querier call its ingester in memory, so it never serves this.
    pub ingester: Option<Arc<dyn IngesterClient>>,
    /// Required on every ingester call when set.
    pub cluster_token: ClusterToken,
    pub admin: Arc<AdminCore>,
    /// Required on every Admin call when set.
    pub admin_token: AdminToken,
    /// The admin HTTP routes, already behind their gate: served on the admin listener as well when it has its
    /// own port, so a lockdown to that listener leaves operators every admin call.
    pub admin_http: axum::Router,
    pub refusals: AuthRefusals,
}

/// Binds and serves gRPC until `stop`. With `server.admin_grpc_listen_port` 0 the Admin service shares the
/// main listener; otherwise it gets its own (so it can be bound to a private interface), which also answers
/// the admin HTTP routes (HTTP/1.1 or HTTP/2, TLS when gRPC has it). With `tls` every listener serves TLS only,
/// and with a client auth policy also checks client certificates.
pub async fn serve_grpc(
    server: &ServerConfig,
    tls: Option<&ServerTls>,
    apis: GrpcApis,
    stop: CancellationToken,
) -> anyhow::Result<GrpcServers> {
    let GrpcApis {
        ingester,
        cluster_token,
        admin,
        admin_token,
        admin_http,
        refusals,
    } = apis;
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_service_status("", ServingStatus::NotServing).await;
    let admin_service = AdminServer::with_interceptor(AdminGrpc(admin), admin_token.interceptor(refusals.clone()));
    let separate = server.admin_grpc_listen_port != 0;
    tracing::info!(
        separate_listener = separate,
        token_required = admin_token.is_set(),
        tls = tls.is_some(),
        client_auth = ?tls.map(ServerTls::client_auth),
        "serving the Admin API"
    );
    let ingester_service = ingester.map(|ing| {
        let mtls = tls.map(ServerTls::client_auth) == Some(ClientAuth::RequireAndVerifyClientCert);
        if cluster_token.bearer().is_set() || mtls {
            tracing::info!(
                cluster_token_required = cluster_token.bearer().is_set(),
                mtls,
                "serving the ingester API"
            );
        } else {
            // Allowed only without multitenancy and admin token (config validation refuses the rest).
            tracing::warn!(
                "serving the ingester API without credentials: anyone reaching this gRPC port can read and write \
                 every tenant; set --server.cluster-token-file or mutual TLS"
            );
        }
        InterceptedService::new(
            heddle_proto::ingester_service(ing),
            cluster_token.interceptor(refusals.clone()),
        )
    });

    let main_addr = listen_addr(&server.grpc_listen_address, server.grpc_listen_port);
    let main_incoming = bind(&main_addr, "gRPC").await?;
    let admin_incoming = if separate {
        let addr = listen_addr(&server.admin_grpc_listen_address, server.admin_grpc_listen_port);
        Some(bind(&addr, "admin gRPC and HTTP").await?)
    } else {
        None
    };

    let mut tasks = Vec::new();
    let main = builder(tls)?
        .add_service(health_service)
        .add_optional_service(ingester_service)
        .add_optional_service((!separate).then(|| admin_service.clone()));
    let s = stop.clone();
    tasks
        .push(tokio::spawn(
            main.serve_with_incoming_shutdown(main_incoming, async move { s.cancelled().await }),
        ));
    if let Some(incoming) = admin_incoming {
        let routes = tonic::service::Routes::from(admin_http).add_service(admin_service);
        let router = builder(tls)?.accept_http1(true).add_routes(routes);
        let s = stop.clone();
        tasks.push(tokio::spawn(
            router.serve_with_incoming_shutdown(incoming, async move { s.cancelled().await }),
        ));
    }
    Ok(GrpcServers { tasks, health })
}
