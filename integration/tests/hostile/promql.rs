//! Hostile PromQL: a query that would evaluate for minutes, times at the edges of i64 (offsets, `@`, ranges,
//! durations written as numbers), a subquery of a millisecond step over years, and `histogram_quantile` over
//! buckets with NaN bounds. The process runs with one query slot (`--querier.max-concurrent=1`), so a query
//! that kept its slot past its timeout would make the next one wait.

use crate::case::Case;

/// A GET of a PromQL API path with its parameters encoded.
fn get(name: &'static str, path: &str, params: &[(&str, &str)]) -> Case {
    let mut url = reqwest::Url::parse("http://heddle").expect("base url");
    url.set_path(path);
    url.query_pairs_mut().extend_pairs(params);
    let query = url.query().unwrap_or_default().to_owned();
    Case::get(name, &format!("{path}?{query}"))
}

fn instant(name: &'static str, query: &str) -> Case {
    get(name, "/prometheus/api/v1/query", &[("query", query)])
}

/// Five classic buckets made from nothing (`label_replace` of `vector`), in the order given: (`le`, count).
fn buckets(order: &[(&str, &str)]) -> String {
    let parts: Vec<String> = order
        .iter()
        .map(|(le, count)| format!("label_replace(vector({count}), \"le\", \"{le}\", \"\", \"\")"))
        .collect();
    format!("histogram_quantile(0.5, {})", parts.join(" or "))
}

pub(crate) fn cases(_now: i64) -> Vec<Case> {
    // 11,000 steps, each a quantile over a window of 36,000 values in no order: about five minutes of one core
    // in a release build, no data and some 20 MB needed (256k subquery steps). The bound is a small fraction of
    // the engine's budget, `-querier.max-samples` (50M samples, 800 MB of values).
    let heavy = get(
        "promql: an 11,000-step quantile_over_time past its 2 s timeout is answered at the timeout",
        "/prometheus/api/v1/query_range",
        &[
            ("query", "quantile_over_time(0.5, sin(vector(time()))[30m:50ms])"),
            ("start", "1700000000"),
            ("end", "1700010999"),
            ("step", "1"),
            ("timeout", "2s"),
        ],
    )
    .want(
        503,
        &[
            "err-heddle-query-timeout",
            "query timed out after 2000ms",
            r#""errorType":"timeout""#,
        ],
    )
    .peak_growth_below(256 << 20);
    // The query before stopped at its deadline and freed the only slot: this one gets it within its 1 s.
    let next = get(
        "promql: the query after a timed-out one is served at once (the slot is free)",
        "/prometheus/api/v1/query",
        &[("query", "vector(42)"), ("timeout", "1s")],
    )
    .want(200, &[r#""status":"success""#, r#""42""#]);
    let nan_a = buckets(&[("1", "10"), ("NaN", "5"), ("2", "20"), ("+Inf", "30")]);
    let nan_b = buckets(&[("NaN", "5"), ("1", "10"), ("2", "20"), ("+Inf", "30")]);
    vec![
        heavy,
        next,
        instant("promql: a negative offset past i64::MAX", "up offset -292471208y").want(
            400,
            &[
                "err-heddle-query-timestamp-out-of-range",
                "64-bit millisecond timestamp",
                "offset",
                r#""errorType":"bad_data""#,
            ],
        ),
        // Milliseconds 9223372036854774000: 1.8 s below i64::MAX, the window of a minute before it fits.
        instant(
            "promql: @ a second below i64::MAX is evaluated exactly",
            "count_over_time(up[1m] @ 9223372036854774)",
        )
        .want(200, &[r#""status":"success""#, r#""result":[]"#]),
        instant(
            "promql: @ plus a negative offset past i64::MAX",
            "up @ 9223372036854774 offset -1h",
        )
        .want(
            400,
            &[
                "err-heddle-query-timestamp-out-of-range",
                "offset",
                r#""errorType":"bad_data""#,
            ],
        ),
        instant("promql: a range longer than i64 milliseconds", "rate(up[4294967295y])").want(
            400,
            &[
                "err-heddle-query-timestamp-out-of-range",
                "range",
                r#""errorType":"bad_data""#,
            ],
        ),
        // `Duration::from_secs_f64(1e30)` would panic in the parser (the panic's report cost 200 MB); refused before
        // parsing, it costs nothing of the engine's budget (64 MiB: a twelfth of `-querier.max-samples`' 800 MB).
        instant("promql: a range written in seconds past any duration", "up[1e30]")
            .want(
                400,
                &[
                    "err-heddle-query-timestamp-out-of-range",
                    "1e30",
                    r#""errorType":"bad_data""#,
                ],
            )
            .peak_growth_below(64 << 20),
        // 315 billion steps, refused before any is allocated: the process grows by far less than the engine's
        // budget (`-querier.max-samples`, 800 MB of values); 64 MiB is a twelfth of it.
        instant(
            "promql: a subquery of a 1 ms step over ten years",
            "count_over_time(vector(1)[10y:1ms])",
        )
        .want(
            422,
            &[
                "err-heddle-max-query-samples",
                "querier.max_samples",
                r#""errorType":"execution""#,
            ],
        )
        .peak_growth_below(64 << 20),
        // Bounds sort NaN first (Prometheus 3's order), whatever the order of the bucket series: the same
        // answer both ways; a sort that took NaN as equal to every bound answered NaN for the first order.
        instant(
            "promql: histogram_quantile over a NaN bound, NaN bucket listed second",
            &nan_a,
        )
        .want(200, &[r#""status":"success""#, r#""1.5""#]),
        instant(
            "promql: histogram_quantile over a NaN bound, NaN bucket listed first",
            &nan_b,
        )
        .want(200, &[r#""status":"success""#, r#""1.5""#]),
    ]
}
