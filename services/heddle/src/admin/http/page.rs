//! `/ingester/ring`: the ring as a server-rendered HTML page, as dskit's ring page, for an operator with a
//! browser. `GET` lists every member (state, zone, address, heartbeat age, tokens, ownership, health) as this
//! process sees the ring; unhealthy members get a Forget button, a plain form `POST` of `forget=<id>` to the
//! same path, answered with a redirect back to the page. Both go through the same [`AdminCore`] calls as the
//! Admin gRPC `RingStatus` and `ForgetMember`.
//!
//! The page is an admin surface like the others (see [`super::guard`]): with `--server.admin-token-file` a
//! browser is asked for the token as the password of a Basic login prompt. The guard refuses a Forget `POST`
//! that a browser sends from another origin, so a page elsewhere cannot make a visitor's browser forget members.

use super::{AdminCore, AdminState};
use crate::admin::MemberStatus;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use heddle_server::{format_age_ms, html_escape};
use std::fmt::Write as _;

/// The page's path; the Forget form posts back to it.
pub const PATH: &str = "/ingester/ring";

/// `GET /ingester/ring`.
pub async fn show(State(s): State<AdminState>) -> Response {
    Html(render(&s.core, None).await).into_response()
}

/// `POST /ingester/ring` with the form field `forget=<member id>`.
pub async fn forget(State(s): State<AdminState>, body: String) -> Response {
    let ids: Vec<String> = super::query_pairs(&body)
        .into_iter()
        .filter(|(k, _)| k == "forget")
        .map(|(_, v)| v)
        .collect();
    let [id] = ids.as_slice() else {
        let msg = format!("expected one forget=<member id> form field, got {}", ids.len());
        return (StatusCode::BAD_REQUEST, Html(render(&s.core, Some(&msg)).await)).into_response();
    };
    match s.core.forget(id).await {
        // Post/redirect/get: reloading the page does not post the form again.
        Ok(()) => Redirect::to(PATH).into_response(),
        Err(e) => {
            let msg = format!("cannot forget {id}: {e}");
            (e.http_status(), Html(render(&s.core, Some(&msg)).await)).into_response()
        }
    }
}

async fn render(core: &AdminCore, error: Option<&str>) -> String {
    let (members, backend) = core.ring_status().await;
    render_members(&members, backend, core.target(), error)
}

fn render_members(members: &[MemberStatus], backend: &str, target: &str, error: Option<&str>) -> String {
    let mut h = String::with_capacity(2048 + 512 * members.len());
    h.push_str(concat!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Heddle ingester ring</title>\n",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}",
        "th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left}",
        "tr.unhealthy{background:#fdd}.error{color:#a00}</style></head>\n<body>\n",
        "<h1>Ingester ring</h1>\n"
    ));
    let healthy = members.iter().filter(|m| m.state != "UNHEALTHY").count();
    let _ = writeln!(
        h,
        "<p>As seen by this process ({} ring, target {}): {} members, {} healthy.</p>",
        html_escape(backend),
        html_escape(target),
        members.len(),
        healthy
    );
    if let Some(e) = error {
        let _ = writeln!(h, "<p class=\"error\" id=\"error\">{}</p>", html_escape(e));
    }
    h.push_str(concat!(
        "<table id=\"members\">\n<thead><tr><th>Instance ID</th><th>State</th><th>Health</th><th>Zone</th>",
        "<th>Address</th><th>Last heartbeat</th><th>Tokens</th><th>Ownership</th><th>Actions</th></tr></thead>\n",
        "<tbody>\n"
    ));
    for m in members {
        let unhealthy = m.state == "UNHEALTHY";
        let id = html_escape(&m.id);
        let _ = write!(
            h,
            "<tr id=\"member-{id}\" class=\"{}\"><td>{id}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{:.1}%</td><td>",
            if unhealthy { "unhealthy" } else { "healthy" },
            html_escape(&m.state),
            if unhealthy { "unhealthy" } else { "healthy" },
            html_escape(&m.zone),
            html_escape(&m.address),
            format_age_ms(m.heartbeat_age_ms),
            m.tokens,
            m.ownership_percent,
        );
        if unhealthy {
            let _ = write!(
                h,
                "<form method=\"post\" action=\"{PATH}\"><input type=\"hidden\" name=\"forget\" value=\"{id}\">\
                 <button type=\"submit\">Forget</button></form>"
            );
        }
        h.push_str("</td></tr>\n");
    }
    h.push_str("</tbody></table>\n</body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, state: &str) -> MemberStatus {
        MemberStatus {
            id: id.into(),
            state: state.into(),
            zone: "zone-a".into(),
            address: "10.0.0.1:9095".into(),
            tokens: 128,
            ownership_percent: 33.333,
            heartbeat_age_ms: 2500,
        }
    }

    #[test]
    fn forget_button_only_for_unhealthy_members() {
        let html = render_members(
            &[member("ing-1", "ACTIVE"), member("ing-2", "UNHEALTHY")],
            "gossip",
            "ingester",
            None,
        );
        assert_eq!(html.matches("<button").count(), 1, "{html}");
        assert!(html.contains("name=\"forget\" value=\"ing-2\""), "{html}");
        assert!(html.contains("<td>33.3%</td>"), "{html}");
        assert!(html.contains("2.5s ago"), "{html}");
        assert!(html.contains("2 members, 1 healthy"), "{html}");
    }

    #[test]
    fn member_fields_are_escaped() {
        let html = render_members(
            &[member("<script>x</script>", "UNHEALTHY")],
            "gossip",
            "all",
            Some("a&b"),
        );
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;x&lt;/script&gt;"), "{html}");
        assert!(html.contains("a&amp;b"), "{html}");
    }
}
