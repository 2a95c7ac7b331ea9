//! PromQL against the real Prometheus as the judge. The same remote-write requests go to a real Prometheus 2.42
//! and to heddle; then every expression of `promql/queries.txt` runs as instant queries at several times and as
//! range queries on both, and heddle's answers must equal Prometheus' (result type, series by exact label set,
//! timestamps, values to 1e-9 relative, NaN and infinities; an error where Prometheus errs, of the same
//! `errorType`). Expressions listed in `promql/known_differences.txt` must still differ, so the list stays
//! true. Another test replays the calls Grafana's Prometheus data source makes; a last one runs both against a
//! three-ingester cluster.
//!
//! Needs `/usr/bin/prometheus` (Debian package `prometheus`; `PROMETHEUS_BIN` overrides the path). Without it the
//! tests skip, unless `CI` is set. `PROMQL_ORACLE_CANDIDATE=prometheus` puts a second Prometheus in heddle's
//! place: every expression must then agree, which checks the data, the corpus and the comparison themselves.

#[path = "promql/api.rs"]
mod api;
#[path = "promql/compare.rs"]
mod compare;
#[path = "promql/data.rs"]
mod data;
#[path = "promql/grafana.rs"]
mod grafana;

use api::{Answer, Api, Prometheus, secs, write_all};
use data::Dataset;
use heddle_testkit::{Cluster, ClusterOptions, HeddleOptions, HeddleProcess, http_client, now_ms, prometheus_tool};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// Expressions evaluated at once (each runs every evaluation on both servers).
const IN_FLIGHT: usize = 4;

/// Heddle's default per-tenant limits would throttle writing 100 minutes of data in a second (the cluster
/// harness raises them itself).
fn heddle_args() -> Vec<String> {
    vec![
        "--distributor.ingestion-rate-limit=10000000".to_owned(),
        "--distributor.ingestion-burst-size=10000000".to_owned(),
    ]
}

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/promql")
}

/// The expressions of `queries.txt`: one per line; blank lines and `#` comments skipped.
fn corpus() -> Vec<String> {
    let path = corpus_dir().join("queries.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// `known_differences.txt`: `expression<TAB>reason` per line, `#` comments.
fn known_differences() -> BTreeMap<String, String> {
    let path = corpus_dir().join("known_differences.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (query, reason) = l
                .split_once('\t')
                .unwrap_or_else(|| panic!("{}: no TAB between query and reason in {l:?}", path.display()));
            (query.trim().to_owned(), reason.trim().to_owned())
        })
        .collect()
}

/// Replaces `${START}`, `${MID}` and `${END}` by times inside the data (decimal seconds), for `@` modifiers.
fn expand(query: &str, data: &Dataset) -> String {
    query
        .replace("${START}", &secs(data.start_ms))
        .replace("${MID}", &secs(mid(data)))
        .replace("${END}", &secs(data.end_ms))
}

/// 47 min 13 s into the data: inside the stale and gap stretches of the irregular series.
fn mid(data: &Dataset) -> i64 {
    data.start_ms + 47 * 60_000 + 13_000
}

/// One way to evaluate an expression: an instant query at a time, or a range query.
struct Evaluation {
    name: String,
    path: &'static str,
    params: Vec<(&'static str, String)>,
}

fn evaluations(data: &Dataset) -> Vec<Evaluation> {
    let instant = |name: &str, t: i64| Evaluation {
        name: name.to_owned(),
        path: "/api/v1/query",
        params: vec![("time", secs(t))],
    };
    let range = |name: &str, start: i64, end: i64, step: &str| Evaluation {
        name: name.to_owned(),
        path: "/api/v1/query_range",
        params: vec![("start", secs(start)), ("end", secs(end)), ("step", step.to_owned())],
    };
    vec![
        instant("instant at mid", mid(data)),
        // Between two scrapes of the last round.
        instant("instant at end", data.end_ms + 7_500),
        // Inside the lookback after the last sample.
        instant("instant 4m after end", data.end_ms + 240_000),
        // Exactly 5 minutes after gap_metric's last sample before its gap: the edge of the lookback and of
        // `[5m]` ranges, which Prometheus 2.42 includes.
        instant("instant at the lookback edge", data::gap_start_ms(data) + 300_000),
        range("range step 60s", data.start_ms + 600_000, data.end_ms, "60s"),
        // 37 s does not divide the range, which runs past the lookback after the data.
        range("range step 37s", mid(data) - 900_000, data.end_ms + 420_000, "37"),
    ]
}

/// Requests whose parameters, rather than expression, are unusual: time and step formats Prometheus accepts,
/// and the ones it refuses. Each is named `[parameters] <what>` in reports and in `known_differences.txt`.
fn parameter_cases(data: &Dataset) -> Vec<Evaluation> {
    let q = |query: &str| ("query", query.to_owned());
    let (start, end) = (secs(data.start_ms + 600_000), secs(data.end_ms));
    let range = |step: &str| {
        vec![
            q("sum(up)"),
            ("start", start.clone()),
            ("end", end.clone()),
            ("step", step.to_owned()),
        ]
    };
    let case = |name: &str, path, params| Evaluation {
        name: format!("[parameters] {name}"),
        path,
        params,
    };
    vec![
        case(
            "time as RFC 3339",
            "/api/v1/query",
            vec![q("sum(up)"), ("time", rfc3339(data.end_ms))],
        ),
        case(
            "time with a fraction",
            "/api/v1/query",
            vec![q("sum(up)"), ("time", format!("{}.25", data.end_ms / 1000))],
        ),
        case(
            "time not a number",
            "/api/v1/query",
            vec![q("up"), ("time", "soon".to_owned())],
        ),
        case("no query", "/api/v1/query", vec![("time", end.clone())]),
        case("empty query", "/api/v1/query", vec![q(""), ("time", end.clone())]),
        case("step as a duration", "/api/v1/query_range", range("1m30s")),
        case("step in fractional seconds", "/api/v1/query_range", range("45.5")),
        case("step zero", "/api/v1/query_range", range("0")),
        case("step negative", "/api/v1/query_range", range("-15")),
        case("step not a number", "/api/v1/query_range", range("often")),
        case("more than 11000 steps", "/api/v1/query_range", range("0.1")),
        case("step longer than the range", "/api/v1/query_range", range("86400")),
        case(
            "start equal to end",
            "/api/v1/query_range",
            vec![
                q("sum(up)"),
                ("start", end.clone()),
                ("end", end.clone()),
                ("step", "15".to_owned()),
            ],
        ),
        case(
            "end before start",
            "/api/v1/query_range",
            vec![
                q("up"),
                ("start", end.clone()),
                ("end", start.clone()),
                ("step", "60".to_owned()),
            ],
        ),
        case(
            "no step",
            "/api/v1/query_range",
            vec![q("up"), ("start", start.clone()), ("end", end.clone())],
        ),
        case(
            "start as RFC 3339",
            "/api/v1/query_range",
            vec![
                q("sum(up)"),
                ("start", rfc3339(data.start_ms + 600_000)),
                ("end", end.clone()),
                ("step", "60".to_owned()),
            ],
        ),
    ]
}

/// `2026-12-01T21:58:00.000Z` for a time in milliseconds (proleptic Gregorian, UTC).
fn rfc3339(ms: i64) -> String {
    let (days, rem) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (year, month, day) = heddle_model::civil::civil_from_days(days);
    let (h, m, s, milli) = (rem / 3_600_000, rem / 60_000 % 60, rem / 1000 % 60, rem % 1000);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z")
}

/// Runs every [`parameter_cases`] request on both servers; returns each case with what differed.
async fn run_parameter_cases(oracle: &Api, candidate: &Api, data: &Dataset) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for e in parameter_cases(data) {
        let (want, got) = (
            oracle.get(e.path, &e.params).await,
            candidate.get(e.path, &e.params).await,
        );
        out.push((e.name, compare::compare(&want, &got, false).into_iter().collect()));
    }
    out
}

/// Whether the order of an instant vector is defined: the whole expression is `sort`, `sort_desc`, or `topk` or
/// `bottomk` without grouping.
fn ordered(query: &str) -> bool {
    let Some(open) = query.find('(') else {
        return false;
    };
    let head = query[..open].trim();
    matches!(head, "sort" | "sort_desc" | "topk" | "bottomk") && closing_paren(query, open) == Some(query.len() - 1)
}

fn closing_paren(s: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in s.char_indices().skip_while(|(i, _)| *i < open) {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Runs one expression every way on both servers; returns what differed, per evaluation.
async fn check_expression(oracle: &Api, candidate: &Api, query: String, evals: &[Evaluation]) -> Vec<String> {
    let mut diffs = Vec::new();
    for e in evals {
        let mut params = vec![("query", query.clone())];
        params.extend(e.params.iter().cloned());
        let want = oracle.get(e.path, &params).await;
        let got = candidate.get(e.path, &params).await;
        let in_order = e.path.ends_with("/query") && ordered(&query);
        if let Some(d) = compare::compare(&want, &got, in_order) {
            diffs.push(format!("{}: {d}", e.name));
        }
    }
    diffs
}

/// Runs the whole corpus with at most [`IN_FLIGHT`] expressions at once; returns each expression (as written
/// in the corpus) with its differences, in corpus order.
async fn run_corpus(oracle: &Api, candidate: &Api, data: &Dataset) -> Vec<(String, Vec<String>)> {
    let evals = Arc::new(evaluations(data));
    let permits = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut tasks = tokio::task::JoinSet::new();
    for (i, raw) in corpus().into_iter().enumerate() {
        let (oracle, candidate, evals, permits) = (oracle.clone(), candidate.clone(), evals.clone(), permits.clone());
        let query = expand(&raw, data);
        tasks.spawn(async move {
            let _permit = permits.acquire().await.expect("semaphore");
            (i, raw, check_expression(&oracle, &candidate, query, &evals).await)
        });
    }
    let mut results: Vec<(usize, String, Vec<String>)> = tasks.join_all().await;
    results.sort_by_key(|r| r.0);
    results.into_iter().map(|(_, raw, diffs)| (raw, diffs)).collect()
}

/// Processes held only so that they run until the test ends (dropping them stops them).
type KeepAlive = Box<dyn std::any::Any + Send>;

/// The servers under test, kept alive for the test's duration.
struct Setup {
    _prometheus: Prometheus,
    /// The candidate's processes (a heddle, a cluster or a Prometheus), stopped when the test ends.
    _candidate: KeepAlive,
    oracle: Api,
    candidate: Api,
    data: Dataset,
    /// Whether the candidate is a second Prometheus (a self-check of the harness).
    self_check: bool,
    /// Prometheus' data and logs; declared last so it is deleted after the processes stopped.
    _dir: TempDir,
}

enum Target {
    Heddle,
    Cluster,
}

/// Starts Prometheus and the candidate, writes the data to both, and asserts both accepted all of it.
async fn setup(bin: PathBuf, target: Target) -> Setup {
    let started = Instant::now();
    let dir = tempfile::Builder::new()
        .prefix("heddle-promql-")
        .tempdir()
        .expect("tempdir");
    let http = http_client(Duration::from_secs(30)).expect("client");
    let self_check = std::env::var("PROMQL_ORACLE_CANDIDATE").is_ok_and(|v| v == "prometheus");
    let prometheus = Prometheus::start(&bin, dir.path(), "prometheus-oracle");
    let (candidate, base, write_url) = if self_check {
        let p = Prometheus::start(&bin, dir.path(), "prometheus-candidate");
        let (base, write) = (p.api_base(), p.write_url());
        (Box::new(p) as KeepAlive, base, write)
    } else {
        match target {
            Target::Heddle => {
                let opts = HeddleOptions {
                    args: heddle_args(),
                    ..HeddleOptions::default()
                };
                let h = tokio::task::spawn_blocking(|| HeddleProcess::start(opts))
                    .await
                    .expect("join")
                    .expect("start heddle");
                let (base, write) = (h.prometheus_url(), h.push_url());
                (Box::new(h) as KeepAlive, base, write)
            }
            Target::Cluster => {
                // One distributor is enough to write through; the replicas are what the querier must merge.
                let opts = ClusterOptions {
                    distributors: 1,
                    ..ClusterOptions::default()
                };
                let c = tokio::task::spawn_blocking(|| Cluster::start(opts))
                    .await
                    .expect("join")
                    .expect("start cluster");
                let (base, write) = (c.querier().prometheus_url(), c.distributor(0).push_url());
                (Box::new(c) as KeepAlive, base, write)
            }
        }
    };
    let data = Dataset::generate(now_ms());
    write_all(&http, &[prometheus.write_url(), write_url], &data.requests).await;
    eprintln!(
        "servers started and {} series ({} samples, {} requests) written to both in {:?}",
        data.series,
        data.samples,
        data.requests.len(),
        started.elapsed()
    );
    Setup {
        oracle: Api {
            http: http.clone(),
            base: prometheus.api_base(),
        },
        candidate: Api { http, base },
        _prometheus: prometheus,
        _candidate: candidate,
        data,
        self_check,
        _dir: dir,
    }
}

/// Fails at once, with one clear message, when the candidate has no query API at all.
async fn assert_serves_queries(candidate: &Api, data: &Dataset) {
    let answer = candidate
        .get(
            "/api/v1/query",
            &[("query", "1".to_owned()), ("time", secs(data.end_ms))],
        )
        .await;
    if let Answer::Error { status: 404, .. } = answer {
        panic!(
            "{}/api/v1/query answers 404: the PromQL query API is not served",
            candidate.base
        );
    }
}

/// Prints the pass rate and every difference, then fails on a difference not listed in `known_differences.txt`
/// and on a listed expression that now agrees (or is no longer in the corpus).
fn judge(results: &[(String, Vec<String>)], known: &BTreeMap<String, String>) {
    let passed = results.iter().filter(|(_, d)| d.is_empty()).count();
    let total = results.len();
    let mut unexpected = Vec::new();
    for (query, diffs) in results.iter().filter(|(_, d)| !d.is_empty()) {
        let note = known.get(query).map_or(String::new(), |r| format!(" (known: {r})"));
        eprintln!("DIFFERS{note}: {query}");
        for d in diffs {
            eprintln!("    {d}");
        }
        if !known.contains_key(query) {
            unexpected.push(query.as_str());
        }
    }
    let now_agree: Vec<&str> = known
        .keys()
        .filter(|k| !results.iter().any(|(q, d)| q == *k && !d.is_empty()))
        .map(String::as_str)
        .collect();
    eprintln!(
        "promql oracle: {passed}/{total} expressions agree with Prometheus ({:.1}%), {} known differences",
        100.0 * passed as f64 / total as f64,
        known.len()
    );
    assert!(
        unexpected.is_empty(),
        "{} expressions differ from Prometheus and are not in known_differences.txt: {unexpected:#?}",
        unexpected.len()
    );
    assert!(
        now_agree.is_empty(),
        "listed in known_differences.txt but now agreeing (or no longer in queries.txt): remove {now_agree:#?}"
    );
}

/// Runs the corpus and the parameter cases, prints the report and judges it against `known_differences.txt`.
async fn assert_corpus_agrees(s: &Setup) {
    assert_serves_queries(&s.candidate, &s.data).await;
    let started = Instant::now();
    let mut results = run_corpus(&s.oracle, &s.candidate, &s.data).await;
    eprintln!(
        "{} expressions x {} evaluations compared in {:?}",
        results.len(),
        evaluations(&s.data).len(),
        started.elapsed()
    );
    assert!(
        results.len() >= 300,
        "the corpus has only {} expressions",
        results.len()
    );
    results.extend(run_parameter_cases(&s.oracle, &s.candidate, &s.data).await);
    let known = if s.self_check {
        BTreeMap::new()
    } else {
        known_differences()
    };
    judge(&results, &known);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promql_agrees_with_prometheus() {
    let Some(bin) = prometheus_tool("PROMETHEUS_BIN", "prometheus", "PromQL oracle test") else {
        return;
    };
    let s = setup(bin, Target::Heddle).await;
    assert_corpus_agrees(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grafana_data_source_calls_agree_on_one_process() {
    let Some(bin) = prometheus_tool("PROMETHEUS_BIN", "prometheus", "Grafana data source test") else {
        return;
    };
    let s = setup(bin, Target::Heddle).await;
    grafana::assert_session_agrees(&s.oracle, &s.candidate, &s.data).await;
}

/// Three ingesters with RF 3 behind a querier: the querier merges and de-duplicates the replicas' series, and
/// the answers must not change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_agrees_with_prometheus() {
    let Some(bin) = prometheus_tool("PROMETHEUS_BIN", "prometheus", "PromQL oracle cluster test") else {
        return;
    };
    let s = setup(bin, Target::Cluster).await;
    grafana::assert_session_agrees(&s.oracle, &s.candidate, &s.data).await;
    assert_corpus_agrees(&s).await;
}

#[test]
fn rfc3339_times() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
    assert_eq!(rfc3339(1_796_162_632_500), "2026-12-01T22:03:52.500Z");
}

#[test]
fn ordered_expressions_are_recognised() {
    for (query, want) in [
        ("sort(x)", true),
        ("sort_desc(rate(x[5m]))", true),
        ("topk(3, x)", true),
        ("bottomk(2, sum by (a) (x))", true),
        ("topk by (job) (3, x)", false),
        ("topk(3, x) by (job)", false),
        ("sort(x) + 1", false),
        ("sum(x)", false),
        ("x", false),
    ] {
        assert_eq!(ordered(query), want, "{query}");
    }
}
