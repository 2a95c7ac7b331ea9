//! Who may call what: the cluster token guarding the internal ingester gRPC API, and the refusal counter
//! every credential check (cluster and admin) feeds.
//!
//! The rule, decided once for the whole process (docs/ARCHITECTURE.md, "Internal and admin APIs"):
//! - the ingester API is served only by processes that others dial (an ingester in a cluster), never by the
//!   single process; in a cluster it requires the cluster token (`--server.cluster-token-file`) when one is
//!   set, and mutual TLS when the listener requires client certificates;
//! - admin routes (gRPC Admin, `/ingester/*`, `/distributor/ha_tracker`) require the admin token on every
//!   listener when one is set, and are served only on the admin listener when it has its own port.

use heddle_model::error_id::CLUSTER_UNAUTHENTICATED;
use heddle_proto::transport::{AUTHORIZATION_METADATA, BearerToken, CredentialsRefusal};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::path::Path;

/// The API a refused call was made to (the `api` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `heddle.ingester.v1.Ingester` over gRPC.
    IngesterGrpc,
    /// `heddle.admin.v1.Admin` over gRPC.
    AdminGrpc,
    /// The admin HTTP routes.
    AdminHttp,
}

impl Api {
    fn label(self) -> &'static str {
        match self {
            Api::IngesterGrpc => "ingester_grpc",
            Api::AdminGrpc => "admin_grpc",
            Api::AdminHttp => "admin_http",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusalLabels {
    api: &'static str,
    reason: &'static str,
}

/// `heddle_auth_refused_requests_total{api, reason}`: calls refused for missing or wrong credentials
/// (`missing_token`, `wrong_token`), made on a listener that does not serve them (`admin_listener_only`), or
/// sent by a browser from another origin to change an admin route's state (`cross_origin`).
#[derive(Debug, Clone, Default)]
pub struct AuthRefusals(Family<RefusalLabels, Counter>);

impl AuthRefusals {
    /// Creates the family and registers it.
    pub fn register(registry: &mut Registry) -> Self {
        let me = Self::default();
        registry.register(
            "heddle_auth_refused_requests",
            "Calls to the ingester or admin APIs refused for missing or wrong credentials, made on a listener \
             that does not serve them, or sent by a browser from another origin to change an admin route's state",
            me.0.clone(),
        );
        me
    }

    /// Counts one refusal.
    pub fn count(&self, api: Api, reason: &'static str) {
        self.0
            .get_or_create(&RefusalLabels {
                api: api.label(),
                reason,
            })
            .inc();
    }

    /// The count of one `api`/`reason` pair (tests).
    #[cfg(test)]
    pub fn get(&self, api: Api, reason: &'static str) -> u64 {
        self.0
            .get_or_create(&RefusalLabels {
                api: api.label(),
                reason,
            })
            .get()
    }
}

/// The cluster token the ingester API requires (`--server.cluster-token-file`); distributors and queriers send
/// it. None: the ingester API is not checked by token (mutual TLS may still guard it).
#[derive(Debug, Clone, Default)]
pub struct ClusterToken(BearerToken);

impl ClusterToken {
    /// Reads the token file; an empty path means no token.
    pub fn load(path: &Path) -> Result<Self, String> {
        BearerToken::load(path, "server.cluster_token_file").map(Self)
    }

    /// The token, to send with every ingester call.
    pub fn bearer(&self) -> &BearerToken {
        &self.0
    }

    /// The message of a refused ingester call.
    fn message(refusal: CredentialsRefusal) -> String {
        match refusal {
            CredentialsRefusal::Missing => format!(
                "{CLUSTER_UNAUTHENTICATED}: ingester call without cluster credentials: this ingester requires \
                 `authorization: Bearer <token>` with the token of --server.cluster-token-file; give the \
                 distributors and queriers the same file"
            ),
            CredentialsRefusal::Wrong => format!(
                "{CLUSTER_UNAUTHENTICATED}: cluster token rejected: it does not match this ingester's \
                 --server.cluster-token-file; give every process the same file"
            ),
        }
    }

    /// The tonic interceptor of the ingester service: calls without the token get `Unauthenticated`, counted
    /// in `refusals`. Open when no token is set.
    pub fn interceptor(&self, refusals: AuthRefusals) -> impl tonic::service::Interceptor + Clone + use<> {
        let token = self.0.clone();
        move |req: tonic::Request<()>| {
            let header = req.metadata().get(AUTHORIZATION_METADATA).map(|v| v.as_bytes());
            match token.verify(header) {
                Ok(()) => Ok(req),
                Err(refusal) => {
                    refusals.count(Api::IngesterGrpc, refusal.reason());
                    Err(tonic::Status::unauthenticated(Self::message(refusal)))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::service::Interceptor as _;

    fn with_auth(value: &str) -> tonic::Request<()> {
        let mut r = tonic::Request::new(());
        r.metadata_mut().insert("authorization", value.parse().unwrap());
        r
    }

    #[test]
    fn cluster_interceptor_refuses_missing_and_wrong_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cluster-token");
        std::fs::write(&p, "c1uster\n").unwrap();
        let refusals = AuthRefusals::default();
        let mut i = ClusterToken::load(&p).unwrap().interceptor(refusals.clone());
        let cases = [
            ("missing", tonic::Request::new(()), Some("without cluster credentials")),
            ("wrong", with_auth("Bearer nope"), Some("cluster token rejected")),
            (
                "admin-style basic",
                with_auth("Basic c1uster"),
                Some("without cluster credentials"),
            ),
            ("right", with_auth("Bearer c1uster"), None),
        ];
        for (name, req, want) in cases {
            match (i.call(req), want) {
                (Ok(_), None) => {}
                (Err(status), Some(text)) => {
                    assert_eq!(status.code(), tonic::Code::Unauthenticated, "case {name}");
                    assert!(status.message().starts_with(CLUSTER_UNAUTHENTICATED), "case {name}");
                    assert!(status.message().contains(text), "case {name}: {}", status.message());
                    assert!(status.message().contains("--server.cluster-token-file"), "case {name}");
                }
                (got, want) => panic!("case {name}: got {got:?}, want refusal {want:?}"),
            }
        }
        assert_eq!(refusals.get(Api::IngesterGrpc, "missing_token"), 2);
        assert_eq!(refusals.get(Api::IngesterGrpc, "wrong_token"), 1);
    }

    #[test]
    fn no_token_means_open() {
        let mut i = ClusterToken::default().interceptor(AuthRefusals::default());
        assert!(i.call(tonic::Request::new(())).is_ok());
    }

    #[test]
    fn the_metric_is_exposed_with_its_labels() {
        let mut registry = Registry::default();
        let r = AuthRefusals::register(&mut registry);
        r.count(Api::AdminHttp, "admin_listener_only");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(r#"heddle_auth_refused_requests_total{api="admin_http",reason="admin_listener_only"} 1"#),
            "{text}"
        );
    }
}
