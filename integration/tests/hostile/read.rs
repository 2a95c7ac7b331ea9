//! Remote read and the series and label API: broken bodies and selectors, and the fetch budget.

use super::case::*;
use heddle_model::METRIC_NAME;
use heddle_proto::prometheus::label_matcher::Type as MatcherType;
use heddle_testkit::{matcher, query};

pub(crate) fn cases(now: i64) -> Vec<Case> {
    let all = |name| matcher(MatcherType::Re, METRIC_NAME, name);
    vec![
        Case::read(
            "regex that does not compile",
            &read_req(vec![query(now - HOUR, now, vec![matcher(MatcherType::Re, "job", "(")])]),
        )
        .want(400, &["regex"]),
        Case::read(
            "query with no matchers",
            &read_req(vec![query(now - HOUR, now, vec![])]),
        )
        .want(400, &["matcher"]),
        Case::read(
            "a regex matching the empty string selects only the tenant's own series",
            &read_req(vec![query(
                now - HOUR,
                now + HOUR,
                vec![matcher(MatcherType::Re, "job", ".*")],
            )]),
        )
        .want(200, &["odd_values"])
        .lacks(&["witness_metric"]),
        Case::read(
            "start after end",
            &read_req(vec![query(now, now - HOUR, vec![all(".+")])]),
        )
        .want(200, &[])
        .lacks(&["witness_metric"]),
        Case::post(
            "read body that is not snappy",
            "/prometheus/api/v1/read",
            b"plain".to_vec(),
        )
        .header("Content-Type", PROTOBUF)
        .header("Content-Encoding", "snappy")
        .want(400, &["snappy"]),
        Case::post(
            "read body of garbage protobuf",
            "/prometheus/api/v1/read",
            snappy(&[0xff; 32]),
        )
        .header("Content-Type", PROTOBUF)
        .header("Content-Encoding", "snappy")
        .want(400, &["not a prometheus.ReadRequest"]),
        Case::read(
            "read without a tenant",
            &read_req(vec![query(now - HOUR, now, vec![all(".+")])]),
        )
        .tenants(&[])
        .want(401, &["no org id"]),
        Case::read(
            "fifty copies of a full scan share one fetch budget",
            &read_req(
                (0..50)
                    .map(|_| query(now - HOUR, now + HOUR, vec![all(".+")]))
                    .collect(),
            ),
        )
        .want(
            422,
            &[
                "err-heddle-max-series-per-query",
                "--querier.max-fetched-series-per-query",
            ],
        ),
        Case::read(
            "a regex of 100 KB",
            &read_req(vec![query(now - HOUR, now, vec![all(&"a|".repeat(50_000))])]),
        )
        .want(400, &["err-heddle-regex-too-long", "--querier.max-regex-length"]),
        Case::get("series without match[]", "/prometheus/api/v1/series").want(400, &["match[]"]),
        Case::get(
            "series with a broken selector",
            "/prometheus/api/v1/series?match[]=%7Bjob%3D",
        )
        .want(400, &[]),
        Case::get(
            "series with start that is not a time",
            "/prometheus/api/v1/series?match[]=up&start=yesterday",
        )
        .want(400, &["start"]),
        Case::get(
            "values of an invalid label name",
            "/prometheus/api/v1/label/bad-name/values",
        )
        .want(400, &[]),
    ]
}
