//! The querier's own budgets: a remote read decoded only once what prost will allocate is reserved, request
//! bodies and forms within `querier.max_body_size` and the in-flight budget, regular expressions bounded on
//! every PromQL entry point before anything compiles them, and exemplar reads beside pushes.

use super::case::*;
use heddle_proto::prometheus::{Exemplar, Label};

/// The querier's in-flight budget in the suite (`--querier.max-inflight-requests-bytes`): what a case that
/// could cost memory may grow the process by, at most.
pub(crate) const QUERIER_BUDGET: u64 = 128 << 20;
/// The attacker tenant's exemplar ring (`--ingester.max-global-exemplars-per-user`).
pub(crate) const EXEMPLARS: usize = 5_000;
const _: () = assert!(
    EXEMPLARS == 5_000,
    "the exemplar query case names the newest trace, trace-4999"
);

const READ: &str = "/prometheus/api/v1/read";
const FORM: &str = "application/x-www-form-urlencoded";

/// `pairs` URL-encoded as a form body.
fn form(pairs: &[(&str, &str)]) -> Vec<u8> {
    let encode = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect::<Vec<_>>()
        .join("&")
        .into_bytes()
}

fn post_form(name: &'static str, path: &str, pairs: &[(&str, &str)]) -> Case {
    Case::post(name, path, form(pairs)).header("Content-Type", FORM)
}

pub(crate) fn cases(now: i64) -> Vec<Case> {
    // 70 KiB of alternatives: over the 64 KiB `querier.max_regex_length`.
    let regex = (0..10_240).map(|i| format!("v{i:05}")).collect::<Vec<_>>().join("|");
    let selector = format!("up{{job=~\"{regex}\"}}");
    let (start, end) = ((now / 1000 - 3600).to_string(), (now / 1000).to_string());
    // 10,240 alternatives of 6 bytes and their separators.
    let regex_words = &[
        "err-heddle-regex-too-long",
        "is 71679 bytes",
        "--querier.max-regex-length",
    ];
    // After `now`: earlier cases' data up to `now` may have been flushed into a block already.
    let mut exemplar_series = series(
        &[("__name__", "exemplar_metric"), ("job", "e")],
        &(0..EXEMPLARS as i64)
            .map(|i| (now + 1 + i, i as f64))
            .collect::<Vec<_>>(),
    );
    exemplar_series.exemplars = (0..EXEMPLARS as i64)
        .map(|i| Exemplar {
            labels: vec![Label {
                name: "trace_id".into(),
                value: format!("trace-{i}"),
            }],
            value: i as f64,
            timestamp: now + 1 + i,
        })
        .collect();
    let mut big_series_form = b"match%5B%5D=up".to_vec();
    while big_series_form.len() < 9 << 20 {
        big_series_form.extend_from_slice(b"&match%5B%5D=up");
    }
    vec![
        Case::post(
            "remote read of 15 million empty queries",
            READ,
            snappy(&[0x0a, 0x00].repeat(15_000_000)),
        )
        .header("Content-Type", PROTOBUF)
        .header("Content-Encoding", "snappy")
        .want(
            413,
            &[
                "err-heddle-query-request-too-large",
                "the decoded remote read request",
                "--querier.max-inflight-requests-bytes",
            ],
        )
        // Only the body and its decompressed copy (30 MB) were ever allocated: within the budget.
        .peak_growth_below(QUERIER_BUDGET),
        Case::post("remote read body over the body size limit", READ, vec![0; 11 << 20])
            .header("Content-Type", PROTOBUF)
            .header("Content-Encoding", "snappy")
            .want(413, &["err-heddle-query-request-too-large", "--querier.max-body-size"])
            .peak_growth_below(QUERIER_BUDGET),
        post_form(
            "a 70 KiB regex on /query",
            "/prometheus/api/v1/query",
            &[("query", &format!("sum(rate({selector}[5m]))"))],
        )
        .want(400, regex_words),
        post_form(
            "a 70 KiB regex on /query_range",
            "/prometheus/api/v1/query_range",
            &[("query", &selector), ("start", &start), ("end", &end), ("step", "60")],
        )
        .want(400, regex_words),
        post_form(
            "a 70 KiB regex on /query_exemplars",
            "/prometheus/api/v1/query_exemplars",
            &[("query", &selector), ("start", &start), ("end", &end)],
        )
        .want(400, regex_words),
        post_form(
            "a 70 KiB regex on /format_query",
            "/prometheus/api/v1/format_query",
            &[("query", &selector)],
        )
        .want(400, regex_words),
        post_form(
            "a 70 KiB regex in match[] of label values",
            "/prometheus/api/v1/label/job/values",
            &[("match[]", &selector)],
        )
        .want(400, regex_words),
        Case::post(
            "a 9 MiB POST /series form of tiny selectors",
            "/prometheus/api/v1/series",
            big_series_form,
        )
        .header("Content-Type", FORM)
        .want(
            413,
            &[
                "err-heddle-query-request-too-large",
                "--querier.max-inflight-requests-bytes",
            ],
        )
        .peak_growth_below(QUERIER_BUDGET),
        Case::post(
            "a POST /series form over the body size limit",
            "/prometheus/api/v1/series",
            {
                let mut body = b"match[]=".to_vec();
                body.resize(11 << 20, b'a');
                body
            },
        )
        .header("Content-Type", FORM)
        .want(413, &["err-heddle-query-request-too-large", "--querier.max-body-size"])
        .peak_growth_below(QUERIER_BUDGET),
        Case::push("a push filling the exemplar ring", write(vec![exemplar_series])).want(200, &[]),
        // Read beside the bystander's pushes, the ring's lock taken a bounded part at a time.
        post_form(
            "an exemplar query over the whole ring",
            "/prometheus/api/v1/query_exemplars",
            &[
                ("query", "exemplar_metric"),
                ("start", &start),
                ("end", &(now / 1000 + 60).to_string()),
            ],
        )
        // The oldest and the newest exemplar (`EXEMPLARS` of them).
        .want(200, &["\"trace-0\"", "\"trace-4999\""])
        .lacks(&["witness_metric", "bystander_metric"]),
    ]
}
