//! Mimir's ingester admin endpoints, so existing runbooks and Kubernetes preStop hooks work unchanged:
//! - `GET|POST /ingester/flush[?tenant=a&tenant=b][&wait=true]`: 204 once started (or done, with `wait`)
//! - `POST /ingester/shutdown`: leave the ring, flush and stop the process; 204
//! - `GET /ingester/prepare-shutdown`: 200 `set` or `unset`; `POST` sets it (204); `DELETE` reverts it (204)
//! - `GET /ingester/ring`: the ring as an HTML page with Forget buttons (`POST`), see [`page`]
//!
//! Who may call them is decided in one place, [`guard`], put in front of these routes and the distributor's
//! `/distributor/ha_tracker` page alike.

mod guard;
mod page;

pub use guard::AdminAccess;

use super::AdminCore;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use std::sync::Arc;

#[derive(Debug, Clone)]
struct AdminState {
    core: Arc<AdminCore>,
}

/// The `/ingester/*` routes, without their gate: wrap them (with any other admin route) in
/// [`AdminAccess::guard`].
pub fn router(core: Arc<AdminCore>) -> axum::Router {
    axum::Router::new()
        .route("/ingester/flush", get(flush).post(flush))
        .route("/ingester/shutdown", post(shutdown))
        .route(page::PATH, get(page::show).post(page::forget))
        .route(
            "/ingester/prepare-shutdown",
            get(prepare_get).post(prepare_set).delete(prepare_unset),
        )
        .with_state(AdminState { core })
}

async fn flush(State(s): State<AdminState>, RawQuery(query): RawQuery) -> Response {
    let mut tenants = Vec::new();
    let mut wait = false;
    for (k, v) in query_pairs(query.as_deref().unwrap_or("")) {
        match k.as_str() {
            "tenant" => tenants.push(v),
            "wait" => wait = v == "true" || v == "1",
            _ => {}
        }
    }
    match s.core.flush(&tenants, wait).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => (e.http_status(), e.to_string()).into_response(),
    }
}

async fn shutdown(State(s): State<AdminState>) -> Response {
    match s.core.shutdown() {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => (e.http_status(), e.to_string()).into_response(),
    }
}

async fn prepare_get(State(s): State<AdminState>) -> Response {
    let state = if s.core.is_prepared() { "set" } else { "unset" };
    (StatusCode::OK, state).into_response()
}

async fn prepare_set(State(s): State<AdminState>) -> Response {
    s.core.set_prepared(true);
    StatusCode::NO_CONTENT.into_response()
}

async fn prepare_unset(State(s): State<AdminState>) -> Response {
    s.core.set_prepared(false);
    StatusCode::NO_CONTENT.into_response()
}

/// `a=1&b=x%20y` as decoded pairs; repeated keys are kept (Mimir's `tenant` is repeatable).
fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16) {
                    Ok(v) => {
                        out.push(v);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parsing() {
        let cases = [
            ("", vec![]),
            ("tenant=a&tenant=b", vec![("tenant", "a"), ("tenant", "b")]),
            ("wait=true&tenant=x%2Dy", vec![("wait", "true"), ("tenant", "x-y")]),
            ("tenant=%zz&k", vec![("tenant", "%zz"), ("k", "")]),
            ("t=%4", vec![("t", "%4")]),
            ("t=a+b", vec![("t", "a b")]),
        ];
        for (q, want) in cases {
            let got = query_pairs(q);
            let want: Vec<(String, String)> = want.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
            assert_eq!(got, want, "query {q:?}");
        }
    }
}
