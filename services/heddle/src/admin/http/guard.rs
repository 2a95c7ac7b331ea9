//! One gate in front of every admin HTTP route (`/ingester/*`, the ring page, `/distributor/ha_tracker`), so
//! no route can be added without it:
//! - on the public HTTP port, when admin calls have their own listener (`--server.admin-grpc-listen-port`),
//!   every admin route answers 403 naming that listener: the lockdown holds whichever protocol is used;
//! - a request that changes state and that a browser sent from another origin is refused (403), before the
//!   token is looked at: a browser that cached the Basic credentials of the ring page would otherwise attach
//!   them to a form another site makes it post (cross-site request forgery). The rule is Go's
//!   `net/http.CrossOriginProtection`: `GET`, `HEAD` and `OPTIONS` pass (but for Mimir's `GET /ingester/flush`,
//!   which flushes), then `Sec-Fetch-Site` decides when present (`same-origin` and `none`, a typed URL or a
//!   bookmark, pass; `same-site` and `cross-site` do not), else an `Origin` must name this host, and a request
//!   with neither header (curl, heddlectl, scripts, Kubernetes hooks) passes;
//! - wherever they are served, with `--server.admin-token-file` they need `Authorization: Bearer <token>`, or
//!   HTTP Basic credentials whose password is the token (so a browser can ask for it on the ring page); 401
//!   with a Basic challenge otherwise.

use crate::access::{Api, AuthRefusals};
use crate::admin::AdminToken;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use heddle_model::error_id::{ADMIN_CROSS_ORIGIN, ADMIN_LISTENER_ONLY};
use std::sync::Arc;

/// Admin routes whose `GET` changes state (Mimir's flush answers `GET` too): checked as a `POST` is.
const GET_CHANGES_STATE: &[&str] = &["/ingester/flush"];

/// How one HTTP listener treats the admin routes.
#[derive(Debug, Clone)]
pub struct AdminAccess {
    token: AdminToken,
    /// Set on the public port while admin calls have their own listener: that listener's address.
    elsewhere: Option<Arc<str>>,
    refusals: AuthRefusals,
}

impl AdminAccess {
    /// The listener serves the admin routes, to callers with the token when one is set.
    pub fn serve(token: AdminToken, refusals: AuthRefusals) -> Self {
        Self {
            token,
            elsewhere: None,
            refusals,
        }
    }

    /// The listener refuses every admin route: they are served on the admin listener at `admin_addr`.
    pub fn refuse(admin_addr: &str, refusals: AuthRefusals) -> Self {
        Self {
            token: AdminToken::default(),
            elsewhere: Some(admin_addr.into()),
            refusals,
        }
    }

    /// Puts the gate in front of every route of `routes` (unknown paths stay 404).
    pub fn guard(self, routes: axum::Router) -> axum::Router {
        routes.route_layer(axum::middleware::from_fn_with_state(self, check))
    }
}

async fn check(State(access): State<AdminAccess>, request: Request, next: Next) -> Response {
    if let Some(addr) = &access.elsewhere {
        access.refusals.count(Api::AdminHttp, "admin_listener_only");
        let msg = format!(
            "{ADMIN_LISTENER_ONLY}: {} {} is an admin route, served only on the admin listener {addr} \
             (--server.admin-grpc-listen-address, --server.admin-grpc-listen-port), not on this public HTTP port",
            request.method(),
            request.uri().path(),
        );
        return (StatusCode::FORBIDDEN, msg).into_response();
    }
    if let Err(why) = same_origin(&request) {
        access.refusals.count(Api::AdminHttp, "cross_origin");
        let msg = format!(
            "{ADMIN_CROSS_ORIGIN}: {} {} refused: a cross-origin browser request ({why}) may not change an admin \
             route's state, with or without credentials; use the page served by this process (same origin), or \
             call the route from a client that is not a browser (curl, heddlectl), which sends no Origin",
            request.method(),
            request.uri().path(),
        );
        return (StatusCode::FORBIDDEN, msg).into_response();
    }
    let presented = request.headers().get(header::AUTHORIZATION).map(|v| v.as_bytes());
    let bearer = presented.and_then(|v| match v.strip_prefix(b"Basic ") {
        Some(b64) => basic_password(b64).map(|p| [b"Bearer ".as_slice(), &p].concat()),
        None => Some(v.to_vec()),
    });
    if let Err((refusal, msg)) = access.token.check(bearer.as_deref()) {
        access.refusals.count(Api::AdminHttp, refusal.reason());
        let mut response = (StatusCode::UNAUTHORIZED, msg).into_response();
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"heddle admin\", charset=\"UTF-8\""),
        );
        return response;
    }
    next.run(request).await
}

/// Go's `CrossOriginProtection` check: `Err` with what gave the request away when a browser sent a
/// state-changing request from another origin.
fn same_origin(request: &Request) -> Result<(), String> {
    let method = request.method();
    let safe = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    if safe && !(*method == Method::GET && GET_CHANGES_STATE.contains(&request.uri().path())) {
        return Ok(());
    }
    let headers = request.headers();
    if let Some(site) = headers.get("sec-fetch-site") {
        return match site.as_bytes() {
            b"same-origin" | b"none" => Ok(()),
            other => Err(format!("Sec-Fetch-Site: {}", String::from_utf8_lossy(other))),
        };
    }
    // No Sec-Fetch-Site: an older browser, or no browser at all.
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    // HTTP/1.1 names the host in `Host`, HTTP/2 in the `:authority` the URI carries.
    let host = request
        .uri()
        .authority()
        .map(|a| a.as_str().as_bytes())
        .or_else(|| headers.get(header::HOST).map(|h| h.as_bytes()))
        .unwrap_or_default();
    let origin_host = origin_host(origin.as_bytes());
    if !host.is_empty() && origin_host.is_some_and(|o| o.eq_ignore_ascii_case(host)) {
        Ok(())
    } else {
        Err(format!(
            "Origin: {} is not this host {}",
            String::from_utf8_lossy(origin.as_bytes()),
            String::from_utf8_lossy(host)
        ))
    }
}

/// The `host[:port]` of a serialized origin (`scheme://host[:port]`); `None` for `null` and anything else.
fn origin_host(origin: &[u8]) -> Option<&[u8]> {
    let pos = origin.windows(3).position(|w| w == b"://")?;
    let rest = &origin[pos + 3..];
    (!rest.is_empty() && !rest.contains(&b'/')).then_some(rest)
}

/// The password of a Basic credential (`base64(user:password)`).
fn basic_password(b64: &[u8]) -> Option<Vec<u8>> {
    let decoded = base64_decode(b64)?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    Some(decoded[colon + 1..].to_vec())
}

fn base64_decode(input: &[u8]) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let input: Vec<u8> = input.iter().copied().take_while(|&c| c != b'=').collect();
    let mut out = Vec::with_capacity(input.len() * 3 / 4);
    for chunk in input.chunks(4) {
        if chunk.len() == 1 {
            return None;
        }
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= value(c)? << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::{get, post};
    use tower::ServiceExt as _;

    fn routes() -> axum::Router {
        axum::Router::new()
            .route("/ingester/shutdown", post(|| async { StatusCode::NO_CONTENT }))
            .route("/distributor/ha_tracker", get(|| async { "page" }))
    }

    async fn call(app: &axum::Router, method: &str, path: &str, auth: Option<&str>) -> (u16, String) {
        let mut req = axum::http::Request::builder().method(method).uri(path);
        if let Some(a) = auth {
            req = req.header(header::AUTHORIZATION, a);
        }
        let resp = app.clone().oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
        let status = resp.status().as_u16();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16).await.unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn the_public_port_refuses_admin_routes_when_they_have_their_own_listener() {
        let refusals = AuthRefusals::default();
        let app = AdminAccess::refuse("127.0.0.1:9096", refusals.clone()).guard(routes());
        for (method, path) in [("POST", "/ingester/shutdown"), ("GET", "/distributor/ha_tracker")] {
            let (status, body) = call(&app, method, path, Some("Bearer anything")).await;
            assert_eq!(status, 403, "{method} {path}: {body}");
            assert!(body.starts_with(ADMIN_LISTENER_ONLY), "{body}");
            assert!(
                body.contains("127.0.0.1:9096") && body.contains("--server.admin-grpc-listen-port"),
                "{body}"
            );
            assert!(body.contains(path), "{body}");
        }
        assert_eq!(
            call(&app, "GET", "/other", None).await.0,
            404,
            "unknown paths are not admin routes"
        );
        assert_eq!(refusals.get(Api::AdminHttp, "admin_listener_only"), 2);
    }

    #[tokio::test]
    async fn the_token_is_required_on_every_route() {
        let refusals = AuthRefusals::default();
        let app = AdminAccess::serve(AdminToken::from_str("s3cret"), refusals.clone()).guard(routes());
        // base64("admin:s3cret").
        let cases = [
            ("none", None, 401),
            ("wrong", Some("Bearer nope"), 401),
            ("bearer", Some("Bearer s3cret"), 204),
            ("basic password", Some("Basic YWRtaW46czNjcmV0"), 204),
        ];
        for (name, auth, want) in cases {
            let (status, body) = call(&app, "POST", "/ingester/shutdown", auth).await;
            assert_eq!(status, want, "case {name}: {body}");
        }
        assert_eq!(call(&app, "GET", "/distributor/ha_tracker", None).await.0, 401);
        assert_eq!(
            call(&app, "GET", "/distributor/ha_tracker", Some("Bearer s3cret"))
                .await
                .0,
            200
        );
        assert_eq!(refusals.get(Api::AdminHttp, "missing_token"), 2);
        assert_eq!(refusals.get(Api::AdminHttp, "wrong_token"), 1);
        let open = AdminAccess::serve(AdminToken::default(), refusals).guard(routes());
        assert_eq!(
            call(&open, "POST", "/ingester/shutdown", None).await.0,
            204,
            "no token: open"
        );
    }

    /// One request with `headers`, as a browser or a script would send it.
    async fn call_with(app: &axum::Router, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
        let mut req = axum::http::Request::builder().method(method).uri(path);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = app.clone().oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
        let status = resp.status().as_u16();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16).await.unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn cross_origin_browser_requests_cannot_change_state() {
        let refusals = AuthRefusals::default();
        let routes = routes()
            .route(
                "/ingester/flush",
                get(|| async { StatusCode::NO_CONTENT }).post(|| async { StatusCode::NO_CONTENT }),
            )
            .route(
                "/ingester/ring",
                get(|| async { "page" }).post(|| async { StatusCode::SEE_OTHER }),
            );
        let app = AdminAccess::serve(AdminToken::from_str("s3cret"), refusals.clone()).guard(routes);
        let host = ("Host", "heddle.internal:8080");
        let bearer = ("Authorization", "Bearer s3cret");
        // The credentials a browser cached for the ring page: base64("admin:s3cret").
        let basic = ("Authorization", "Basic YWRtaW46czNjcmV0");
        // (name, method, path, headers, status, words of the refusal)
        type Case<'a> = (&'a str, &'a str, &'a str, Vec<(&'a str, &'a str)>, u16, Option<&'a str>);
        let cases: Vec<Case<'_>> = vec![
            (
                "curl: no Origin",
                "POST",
                "/ingester/shutdown",
                vec![host, bearer],
                204,
                None,
            ),
            (
                "own page, modern browser",
                "POST",
                "/ingester/ring",
                vec![host, basic, ("Sec-Fetch-Site", "same-origin")],
                303,
                None,
            ),
            (
                "own page, old browser",
                "POST",
                "/ingester/ring",
                vec![host, basic, ("Origin", "http://heddle.internal:8080")],
                303,
                None,
            ),
            (
                "typed or bookmarked",
                "POST",
                "/ingester/flush",
                vec![host, bearer, ("Sec-Fetch-Site", "none")],
                204,
                None,
            ),
            (
                "cross-site form with cached Basic",
                "POST",
                "/ingester/shutdown",
                vec![
                    host,
                    basic,
                    ("Sec-Fetch-Site", "cross-site"),
                    ("Origin", "https://evil.example"),
                ],
                403,
                Some("Sec-Fetch-Site: cross-site"),
            ),
            (
                "a sibling subdomain",
                "POST",
                "/ingester/ring",
                vec![
                    host,
                    basic,
                    ("Sec-Fetch-Site", "same-site"),
                    ("Origin", "https://wiki.internal"),
                ],
                403,
                Some("Sec-Fetch-Site: same-site"),
            ),
            (
                "Sec-Fetch-Site decides over a matching Origin",
                "POST",
                "/ingester/shutdown",
                vec![
                    host,
                    bearer,
                    ("Sec-Fetch-Site", "cross-site"),
                    ("Origin", "http://heddle.internal:8080"),
                ],
                403,
                Some("cross-site"),
            ),
            (
                "old browser, other origin",
                "POST",
                "/ingester/shutdown",
                vec![host, basic, ("Origin", "https://evil.example")],
                403,
                Some("Origin: https://evil.example is not this host heddle.internal:8080"),
            ),
            (
                "opaque origin",
                "POST",
                "/ingester/flush",
                vec![host, bearer, ("Origin", "null")],
                403,
                Some("Origin: null"),
            ),
            (
                "other port",
                "POST",
                "/ingester/flush",
                vec![host, bearer, ("Origin", "http://heddle.internal:9999")],
                403,
                Some("not this host"),
            ),
            (
                "no token either: still 403, no login prompt",
                "POST",
                "/ingester/shutdown",
                vec![host, ("Sec-Fetch-Site", "cross-site")],
                403,
                Some("with or without credentials"),
            ),
            (
                "a cross-site <img> flushing",
                "GET",
                "/ingester/flush",
                vec![host, basic, ("Sec-Fetch-Site", "cross-site")],
                403,
                Some("GET /ingester/flush"),
            ),
            (
                "a link to the ring page from elsewhere",
                "GET",
                "/ingester/ring",
                vec![host, basic, ("Sec-Fetch-Site", "cross-site")],
                200,
                None,
            ),
        ];
        for (name, method, path, headers, want, words) in cases {
            let (status, body) = call_with(&app, method, path, &headers).await;
            assert_eq!(status, want, "case {name}: {body}");
            if let Some(words) = words {
                assert!(body.starts_with(ADMIN_CROSS_ORIGIN), "case {name}: {body}");
                assert!(body.contains(words), "case {name}: {body}");
                assert!(body.contains(path), "case {name}: {body}");
            }
        }
        assert_eq!(refusals.get(Api::AdminHttp, "cross_origin"), 8);
        assert_eq!(
            refusals.get(Api::AdminHttp, "missing_token"),
            0,
            "refused before the token was looked at"
        );
    }

    #[test]
    fn origin_hosts() {
        assert_eq!(origin_host(b"https://a.example:8443"), Some(&b"a.example:8443"[..]));
        assert_eq!(origin_host(b"null"), None);
        assert_eq!(origin_host(b"https://a.example/path"), None);
        assert_eq!(origin_host(b"https://"), None);
    }

    #[test]
    fn basic_credentials_carry_the_token_as_password() {
        // base64("admin:s3cret") and base64("x:ab") (padding).
        assert_eq!(basic_password(b"YWRtaW46czNjcmV0").unwrap(), b"s3cret");
        assert_eq!(basic_password(b"eDphYg==").unwrap(), b"ab");
        assert_eq!(basic_password(b"bm9jb2xvbg=="), None, "no colon");
        assert_eq!(basic_password(b"!!!!"), None, "not base64");
    }
}
