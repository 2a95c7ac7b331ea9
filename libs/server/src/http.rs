//! HTTP scaffolding every process serves: readiness, metrics, tenant resolution.

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use heddle_model::{TENANT_HEADER, TenantId};
use prometheus_client::registry::Registry;
use std::sync::{Arc, RwLock};

/// Whether this process can serve, and if not, why. `/ready` answers 200 only when every part that
/// registered a reason has cleared it.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<RwLock<Vec<(&'static str, String)>>>);

impl Readiness {
    /// Marks `part` as not ready, with a reason shown by `/ready`.
    pub fn not_ready(&self, part: &'static str, reason: impl Into<String>) {
        let mut v = self.0.write().unwrap_or_else(|e| e.into_inner());
        v.retain(|(p, _)| *p != part);
        v.push((part, reason.into()));
    }

    /// Marks `part` as ready.
    pub fn ready(&self, part: &'static str) {
        self.0
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(p, _)| *p != part);
    }

    /// `None` when ready, else the reasons.
    pub fn blockers(&self) -> Option<String> {
        let v = self.0.read().unwrap_or_else(|e| e.into_inner());
        if v.is_empty() {
            None
        } else {
            Some(
                v.iter()
                    .map(|(p, r)| format!("{p}: {r}"))
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        }
    }
}

/// `GET /ready` and `GET /metrics`.
pub fn metrics_and_ready_routes(registry: Arc<Registry>, readiness: Readiness) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(r): State<Arc<Registry>>| async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
                    )],
                    crate::encode_metrics(&r),
                )
            })
            .with_state(registry),
        )
        .route(
            "/ready",
            get(|State(r): State<Readiness>| async move {
                match r.blockers() {
                    None => (StatusCode::OK, "ready\n".to_owned()),
                    Some(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")),
                }
            })
            .with_state(readiness),
        )
}

/// Wraps `router` so every request carries a [`TenantId`] extension: from `X-Scope-OrgID` when multitenancy
/// is enabled (401 when missing, 400 when invalid or given more than once: a proxy that adds the header in
/// front of a client that also sent one must not let the client's win), else the `anonymous` tenant (the header is ignored, as in
/// Mimir).
pub fn tenant_layer(router: Router, multitenancy_enabled: bool) -> Router {
    router.layer(axum::middleware::from_fn_with_state(
        multitenancy_enabled,
        resolve_tenant,
    ))
}

async fn resolve_tenant(State(multitenancy): State<bool>, mut req: Request, next: Next) -> Response {
    let tenant = if multitenancy {
        let mut given = req.headers().get_all(TENANT_HEADER).iter();
        let (Some(raw), None) = (given.next(), given.next()) else {
            if req.headers().contains_key(TENANT_HEADER) {
                return (
                    StatusCode::BAD_REQUEST,
                    format!("invalid {TENANT_HEADER} header: given more than once; send exactly one tenant\n"),
                )
                    .into_response();
            }
            return (
                StatusCode::UNAUTHORIZED,
                format!("no org id: the {TENANT_HEADER} header is required\n"),
            )
                .into_response();
        };
        let parsed = raw.to_str().map_err(|_| "not ASCII".to_owned()).and_then(|s| {
            // Mimir accepts a `|`-separated list for federated reads; a write needs exactly one tenant.
            TenantId::new(s.trim()).map_err(|e| e.to_string())
        });
        match parsed {
            Ok(t) => t,
            Err(why) => {
                return (
                    StatusCode::BAD_REQUEST,
                    format!("invalid {TENANT_HEADER} header: {why}\n"),
                )
                    .into_response();
            }
        }
    } else {
        TenantId::anonymous()
    };
    req.extensions_mut().insert(tenant);
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio_util::sync::CancellationToken;

    #[test]
    fn readiness_tracks_every_part() {
        let r = Readiness::default();
        assert_eq!(r.blockers(), None);
        r.not_ready("ingester", "replaying WAL");
        r.not_ready("ring", "joining");
        assert_eq!(r.blockers().unwrap(), "ingester: replaying WAL; ring: joining");
        r.ready("ingester");
        assert_eq!(r.blockers().unwrap(), "ring: joining");
        r.ready("ring");
        assert_eq!(r.blockers(), None);
    }

    #[tokio::test]
    async fn tenant_resolution() {
        async fn echo(axum::Extension(t): axum::Extension<TenantId>) -> String {
            t.to_string()
        }
        let app = |mt| tenant_layer(Router::new().route("/x", get(echo)), mt);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let on = app(true);
        let options = crate::HttpServerOptions::new(Duration::from_secs(10), 100, &mut Registry::default());
        let server = tokio::spawn(crate::serve_http(listener, on, stop.clone(), options));
        let cases: &[(&str, Option<&str>, u16, &str)] = &[
            ("missing header", None, 401, "X-Scope-OrgID"),
            ("valid", Some("team-a"), 200, "team-a"),
            ("invalid", Some("a/b"), 400, "invalid X-Scope-OrgID"),
            (
                "twice",
                Some("team-a\r\nX-Scope-OrgID: team-b"),
                400,
                "given more than once",
            ),
            (
                "twice, the same",
                Some("team-a\r\nX-Scope-OrgID: team-a"),
                400,
                "given more than once",
            ),
        ];
        for (name, header, status, body) in cases {
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            let h = header.map(|v| format!("X-Scope-OrgID: {v}\r\n")).unwrap_or_default();
            let req = format!("GET /x HTTP/1.1\r\nHost: x\r\n{h}Connection: close\r\n\r\n");
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            stream.write_all(req.as_bytes()).await.unwrap();
            let mut resp = String::new();
            stream.read_to_string(&mut resp).await.unwrap();
            assert!(resp.starts_with(&format!("HTTP/1.1 {status}")), "case {name}: {resp}");
            assert!(resp.contains(body), "case {name}: {resp}");
        }
        stop.cancel();
        server.await.unwrap().unwrap();
    }
}
