//! `GET /distributor/ha_tracker` (Mimir's path): the elections this distributor knows, for an operator
//! checking which Prometheus replica of a pair is being ingested and when it would fail over.

use super::{Election, HaTracker};
use axum::Router;
use axum::extract::State;
use axum::response::Html;
use axum::routing::get;
use heddle_model::Clock;
use heddle_server::{format_age_ms, html_escape};
use std::fmt::Write as _;
use std::sync::Arc;

/// The page's route, reading `tracker` with `clock`'s time.
pub fn router(tracker: Arc<HaTracker>, clock: Arc<dyn Clock>) -> Router {
    Router::new()
        .route("/distributor/ha_tracker", get(page))
        .with_state((tracker, clock))
}

async fn page(State((tracker, clock)): State<(Arc<HaTracker>, Arc<dyn Clock>)>) -> Html<String> {
    Html(render(
        &tracker.elections(),
        clock.now_ms(),
        tracker.failover_timeout_ms(),
    ))
}

fn render(elections: &[(String, String, Election)], now_ms: i64, failover_ms: i64) -> String {
    let mut h = String::from(concat!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Heddle HA tracker</title>\n",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}",
        "td,th{border:1px solid #999;padding:.3em .6em;text-align:left}</style></head><body>\n",
        "<h1>HA tracker</h1>\n",
    ));
    let _ = writeln!(
        h,
        "<p>{} elected replicas. Another replica is elected after {} s without samples from the elected one.</p>",
        elections.len(),
        failover_ms / 1000
    );
    h.push_str(concat!(
        "<table><thead><tr><th>Tenant</th><th>Cluster</th><th>Elected replica</th><th>Elected</th>",
        "<th>Last sample</th><th>Failover possible</th></tr></thead><tbody>\n"
    ));
    for (tenant, cluster, e) in elections {
        let failover_in = e.received_at_ms.saturating_add(failover_ms).saturating_sub(now_ms);
        let failover = if failover_in <= 0 {
            "now".to_owned()
        } else {
            format!("in {:.1}s", failover_in as f64 / 1000.0)
        };
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td class=\"replica\">{}</td><td>{}</td><td>{}</td><td>{failover}</td></tr>",
            html_escape(tenant),
            html_escape(cluster),
            html_escape(&e.replica),
            format_age_ms(now_ms.saturating_sub(e.elected_at_ms)),
            format_age_ms(now_ms.saturating_sub(e.received_at_ms)),
        );
    }
    h.push_str("</tbody></table>\n</body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_each_election_escaped_with_its_failover_time() {
        let e = |replica: &str, elected_at_ms, received_at_ms| Election {
            replica: replica.into(),
            elected_at_ms,
            received_at_ms,
        };
        let html = render(
            &[
                ("t1".into(), "c<1>".into(), e("r-a", 1_000, 95_000)),
                ("t2".into(), "c".into(), e("r-b", 1_000, 40_000)),
            ],
            100_000,
            30_000,
        );
        assert!(html.contains("2 elected replicas"), "{html}");
        assert!(
            html.contains("<td>c&lt;1&gt;</td><td class=\"replica\">r-a</td>"),
            "{html}"
        );
        assert!(html.contains("<td>5.0s ago</td><td>in 25.0s</td>"), "{html}");
        assert!(html.contains("<td>1m 00s ago</td><td>now</td>"), "{html}");
    }
}
