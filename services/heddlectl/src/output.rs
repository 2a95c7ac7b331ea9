//! Rendering answers as aligned tables (people) or JSON (scripts).

use heddle_proto::admin as pb;
use serde_json::{Value, json};

/// Left-aligned columns separated by two spaces; the header row first.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        padded.join("  ").trim_end().to_owned()
    };
    let mut out = vec![line(header.to_vec())];
    out.extend(rows.iter().map(|r| line(r.iter().map(String::as_str).collect())));
    out.join("\n")
}

fn pretty(v: Value) -> String {
    serde_json::to_string_pretty(&v).unwrap_or_else(|_| v.to_string())
}

/// `ring`.
pub fn ring(r: &pb::RingStatusResponse, json: bool) -> String {
    if json {
        let members: Vec<Value> = r
            .members
            .iter()
            .map(|m| {
                json!({
                    "id": m.id, "state": m.state, "zone": m.zone, "address": m.address, "tokens": m.tokens,
                    "ownership_percent": m.ownership_percent, "heartbeat_age_ms": m.heartbeat_age_ms,
                })
            })
            .collect();
        return pretty(json!({ "backend": r.backend, "members": members }));
    }
    let rows: Vec<Vec<String>> = r
        .members
        .iter()
        .map(|m| {
            vec![
                m.id.clone(),
                m.state.clone(),
                if m.zone.is_empty() { "-".into() } else { m.zone.clone() },
                m.address.clone(),
                m.tokens.to_string(),
                format!("{:.1}%", m.ownership_percent),
                format!("{:.1}s", m.heartbeat_age_ms as f64 / 1000.0),
            ]
        })
        .collect();
    table(
        &["ID", "STATE", "ZONE", "ADDRESS", "TOKENS", "OWNERSHIP", "HEARTBEAT"],
        &rows,
    )
}

/// A one-line answer.
pub fn message(msg: &str, json: bool) -> String {
    if json {
        pretty(json!({ "message": msg }))
    } else {
        msg.to_owned()
    }
}

/// Flush and snapshot answers.
pub fn tenants_message(tenants: &[String], msg: &str, json: bool) -> String {
    if json {
        return pretty(json!({ "tenants": tenants, "message": msg }));
    }
    let list = if tenants.is_empty() {
        "(none)".to_owned()
    } else {
        tenants.join(", ")
    };
    format!("{msg}\ntenants: {list}")
}

/// PrepareShutdown answers.
pub fn prepared(prepared: bool, json: bool) -> String {
    if json {
        return pretty(json!({ "prepared": prepared }));
    }
    if prepared {
        "prepared: the next shutdown leaves the ring and flushes".into()
    } else {
        "not prepared: the next shutdown follows the configuration".into()
    }
}

/// `tenants`.
pub fn tenants(tenants: &[String], json: bool) -> String {
    if json {
        return pretty(json!({ "tenants": tenants }));
    }
    let rows: Vec<Vec<String>> = tenants.iter().map(|t| vec![t.clone()]).collect();
    table(&["TENANT"], &rows)
}

/// `stats <tenant>`.
pub fn stats(s: &pb::TenantStatsResponse, json: bool) -> String {
    if json {
        return pretty(json!({
            "tenant": s.tenant, "series": s.series, "samples_appended": s.samples_appended,
            "head_min_time_ms": s.head_min_time_ms, "head_max_time_ms": s.head_max_time_ms,
            "wal_bytes": s.wal_bytes, "wal_segments": s.wal_segments,
            "samples_per_second": s.samples_per_second, "blocks_pending_upload": s.blocks_pending_upload,
        }));
    }
    let opt = |v: Option<i64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
    let rows = vec![
        vec!["tenant".into(), s.tenant.clone()],
        vec!["series".into(), s.series.to_string()],
        vec!["samples appended".into(), s.samples_appended.to_string()],
        vec!["samples/s (last minute)".into(), format!("{:.1}", s.samples_per_second)],
        vec!["head min time (ms)".into(), opt(s.head_min_time_ms)],
        vec!["head max time (ms)".into(), opt(s.head_max_time_ms)],
        vec!["WAL bytes".into(), s.wal_bytes.to_string()],
        vec!["WAL segments".into(), s.wal_segments.to_string()],
        vec!["blocks pending upload".into(), s.blocks_pending_upload.to_string()],
    ];
    table(&["FIELD", "VALUE"], &rows)
}

/// `version`.
pub fn version(b: &pb::BuildInfoResponse, json: bool) -> String {
    if json {
        return pretty(json!({
            "version": b.version, "git_commit": b.git_commit, "rustc": b.rustc, "target": b.target,
            "heddlectl_version": env!("CARGO_PKG_VERSION"),
        }));
    }
    format!(
        "server:    heddle {} (commit {}, {}, target {})\nheddlectl: {}",
        b.version,
        b.git_commit,
        b.rustc,
        b.target,
        env!("CARGO_PKG_VERSION")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let t = table(
            &["A", "LONG"],
            &[vec!["xyz".into(), "1".into()], vec!["q".into(), "22".into()]],
        );
        assert_eq!(t, "A    LONG\nxyz  1\nq    22");
    }

    #[test]
    fn json_outputs_parse() {
        let r = pb::RingStatusResponse {
            members: vec![pb::RingMember {
                id: "a".into(),
                state: "ACTIVE".into(),
                ownership_percent: 100.0,
                ..Default::default()
            }],
            backend: "local".into(),
        };
        let v: Value = serde_json::from_str(&ring(&r, true)).unwrap();
        assert_eq!(v["members"][0]["id"], "a");
        let s = pb::TenantStatsResponse {
            tenant: "t".into(),
            head_min_time_ms: None,
            ..Default::default()
        };
        let v: Value = serde_json::from_str(&stats(&s, true)).unwrap();
        assert!(v["head_min_time_ms"].is_null());
        assert!(ring(&r, false).contains("100.0%"));
    }
}
