//! Tenancy: tenant headers that are missing, doubled or malformed, and reads that must not cross tenants.

use super::case::*;
use heddle_model::METRIC_NAME;
use heddle_testkit::{eq, query};

pub(crate) fn cases(now: i64) -> Vec<Case> {
    vec![
        Case::push(
            "two tenant headers",
            write(vec![series(&[(METRIC_NAME, "dup_tenant")], &[(now, 1.0)])]),
        )
        .tenants(&[ATTACKER, WITNESS])
        .want(400, &["X-Scope-OrgID"]),
        Case::push(
            "no tenant header",
            write(vec![series(&[(METRIC_NAME, "no_tenant")], &[(now, 1.0)])]),
        )
        .tenants(&[])
        .want(401, &["no org id"]),
        Case::push(
            "tenant '..'",
            write(vec![series(&[(METRIC_NAME, "dots")], &[(now, 1.0)])]),
        )
        .tenants(&[".."])
        .want(400, &["invalid X-Scope-OrgID"]),
        Case::push(
            "tenant of 1000 bytes",
            write(vec![series(&[(METRIC_NAME, "long")], &[(now, 1.0)])]),
        )
        .tenants(&[&"t".repeat(1000)])
        .want(400, &["invalid X-Scope-OrgID"]),
        Case::get(
            "labels of another tenant are not listed",
            "/prometheus/api/v1/label/__name__/values",
        )
        .want(200, &["\"status\":\"success\""])
        .lacks(&["witness_metric"]),
        Case::get(
            "series of another tenant are not listed",
            "/prometheus/api/v1/series?match[]=%7B__name__%3D~%22.%2B%22%7D",
        )
        .want(200, &["\"status\":\"success\""])
        .lacks(&["witness_metric"]),
        Case::read(
            "remote read of another tenant's metric finds nothing",
            &read_req(vec![query(
                now - HOUR,
                now + HOUR,
                vec![eq(METRIC_NAME, "witness_metric")],
            )]),
        )
        .want(200, &[])
        .lacks(&["witness_metric"]),
        Case::push(
            "tenant header of 100 KB",
            write(vec![series(&[(METRIC_NAME, "huge_tenant")], &[(now, 1.0)])]),
        )
        .tenants(&[&"x".repeat(100_000)])
        .want(400, &["100000 bytes long", "the limit is 150"]),
    ]
}
