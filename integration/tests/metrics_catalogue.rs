//! The metrics catalogue, `docs/metrics.md`: every `heddle_*` family with its type, labels, the processes that
//! expose it and its meaning, generated from what real processes expose and checked against what the code
//! registers.
//!
//! The test starts `heddle --target=all` and a small cluster (one distributor, ingester and querier), pushes
//! (valid series, a series over an instance limit, an invalid one, an out-of-order sample), flushes (a block
//! is compacted and shipped), queries, and scrapes every process. Type, meaning (`# HELP`), label names and
//! processes come from those scrapes. A family with no child yet is not in the exposition at all
//! (prometheus-client skips empty families), so [`FAMILIES`] gives, for the few the test cannot make appear,
//! their type, meaning and processes by hand; for every family it gives the label names, which the test checks
//! against the scrapes wherever the family appears. [`FAMILIES`] must name exactly the families the code
//! registers (every `"heddle_..."` literal in the non-test sources of `libs/` and `services/`).
//!
//! Every scrape must also pass `promtool check metrics` (Prometheus' lint of names, units and types).
//!
//! Regenerate with `HEDDLE_UPDATE_DOCS=1 cargo test -p heddle-integration --test metrics_catalogue`.

use heddle_proto::prometheus::{Label, Sample, TimeSeries, WriteRequest};
use heddle_testkit::{
    Cluster, ClusterOptions, HeddleOptions, HeddleProcess, ReadClient, ReadMode, eq, http_client, http_get, push,
    query, run_bounded, workspace_root,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

/// A family the test cannot make appear: its type, meaning and processes, by hand.
struct Unseen {
    kind: &'static str,
    help: &'static str,
    processes: &'static str,
}

/// One registered family (the name it is registered under, without the `_total` prometheus-client appends to
/// counters) and its label names.
struct Family {
    name: &'static str,
    labels: &'static [&'static str],
    unseen: Option<Unseen>,
}

const fn f(name: &'static str, labels: &'static [&'static str]) -> Family {
    Family {
        name,
        labels,
        unseen: None,
    }
}

const fn unseen(
    name: &'static str,
    labels: &'static [&'static str],
    kind: &'static str,
    processes: &'static str,
    help: &'static str,
) -> Family {
    Family {
        name,
        labels,
        unseen: Some(Unseen { kind, help, processes }),
    }
}

const DISTRIBUTOR: &str = "all, distributor";

/// Every family the code registers.
const FAMILIES: &[Family] = &[
    f("heddle_discarded_samples", &["tenant", "reason"]),
    f("heddle_runtime_config_last_reload_successful", &[]),
    f("heddle_runtime_config_reload_failures", &[]),
    f("heddle_runtime_config_overridden_tenants", &[]),
    f("heddle_ring_members", &["state"]),
    unseen(
        "heddle_auth_refused_requests",
        &["api", "reason"],
        "counter",
        "all, distributor, ingester, querier",
        "Calls to the ingester or admin APIs refused for missing or wrong credentials, made on a listener that \
         does not serve them, or sent by a browser from another origin to change an admin route's state.",
    ),
    f("heddle_memberlist_dropped_datagrams", &["reason"]),
    unseen(
        "heddle_memberlist_future_values",
        &["field"],
        "counter",
        "distributor, ingester, querier",
        "Times values read from gossip were dated beyond now + memberlist.max_clock_skew, by field: a heartbeat \
         or forget marker is ignored, a registered_at is clamped to now.",
    ),
    f("heddle_distributor_requests", &["status"]),
    f("heddle_distributor_request_duration_seconds", &[]),
    f("heddle_distributor_received_bytes", &[]),
    f("heddle_distributor_received_samples", &["tenant"]),
    unseen(
        "heddle_distributor_discarded_exemplars",
        &["tenant", "reason"],
        "counter",
        DISTRIBUTOR,
        "Exemplars dropped by the distributor, by tenant and reason.",
    ),
    unseen(
        "heddle_distributor_discarded_metadata",
        &["tenant", "reason"],
        "counter",
        DISTRIBUTOR,
        "Metric metadata entries dropped by the distributor's validation, by tenant and reason (error id).",
    ),
    unseen(
        "heddle_distributor_received_metadata",
        &["tenant"],
        "counter",
        DISTRIBUTOR,
        "Metric metadata entries that passed validation and were forwarded to ingesters.",
    ),
    unseen(
        "heddle_distributor_received_exemplars",
        &["tenant"],
        "counter",
        DISTRIBUTOR,
        "Exemplars that passed validation and were forwarded to ingesters.",
    ),
    f("heddle_distributor_arena_retained_bytes", &[]),
    f("heddle_distributor_inflight_push_requests_bytes", &[]),
    f("heddle_distributor_inflight_push_requests_bytes_refused", &[]),
    f("heddle_distributor_ingester_pushes", &["ingester", "outcome"]),
    f("heddle_distributor_ingester_push_duration_seconds", &["ingester"]),
    unseen(
        "heddle_distributor_deduped_samples",
        &["tenant", "cluster"],
        "counter",
        DISTRIBUTOR,
        "Samples dropped because they came from a non-elected replica of a Prometheus HA pair (with \
         `distributor.ha_tracker.enable_ha_tracker`).",
    ),
    unseen(
        "heddle_distributor_ha_elected_replica_changes",
        &["tenant", "cluster"],
        "counter",
        DISTRIBUTOR,
        "Times this distributor saw another replica elected for an HA cluster, by itself or by another \
         distributor (the first election counts).",
    ),
    unseen(
        "heddle_distributor_ha_tracker_future_elections",
        &[],
        "counter",
        DISTRIBUTOR,
        "Elections read from other distributors dated beyond now + memberlist.max_clock_skew, ignored: they would \
         win every election, or never fail over, until the clock caught up (with \
         `distributor.ha_tracker.enable_ha_tracker`).",
    ),
    f("heddle_ingester_ingested_samples", &[]),
    f("heddle_ingester_ingested_native_histograms", &[]),
    f("heddle_ingester_created_timestamp_zero_samples", &[]),
    f("heddle_ingester_deduplicated_samples", &[]),
    unseen(
        "heddle_ingester_discarded_metadata",
        &["tenant", "reason"],
        "counter",
        "all, ingester",
        "Metric metadata entries refused by the tenant metadata limits, by tenant and reason (error id).",
    ),
    f("heddle_ingester_memory_metadata", &[]),
    f("heddle_ingester_exemplars_appended", &[]),
    unseen(
        "heddle_ingester_exemplars_refused",
        &["reason"],
        "counter",
        "all, ingester",
        "Exemplars tenant heads refused: out-of-order (not newer than their series' newest), unknown-series (no samples created the series), disabled (limits.max_global_exemplars_per_user is 0).",
    ),
    f("heddle_ingester_series_created", &[]),
    f("heddle_ingester_memory_series", &[]),
    f("heddle_ingester_open_chunks_dropped", &[]),
    f("heddle_ingester_tenants", &[]),
    f("heddle_ingester_idle_tenants_closed", &[]),
    f("heddle_ingester_instance_limit_rejections", &["limit"]),
    f("heddle_ingester_inflight_push_requests_bytes", &[]),
    f("heddle_ingester_arena_retained_bytes", &[]),
    f("heddle_ingester_arenas_dropped", &[]),
    f("heddle_ingester_wal_written_bytes", &[]),
    f("heddle_ingester_wal_replayed_records", &[]),
    f("heddle_ingester_wal_corruptions_repaired", &[]),
    f("heddle_ingester_replay_tenants", &[]),
    f("heddle_ingester_replay_tenants_pending", &[]),
    f("heddle_ingester_replay_duration_seconds", &[]),
    f("heddle_ingester_replay_samples", &[]),
    f("heddle_ingester_replay_samples_in_mmapped_chunks", &[]),
    f("heddle_ingester_replay_mmapped_chunks", &[]),
    f("heddle_ingester_replay_snapshot_series", &[]),
    f("heddle_ingester_replay_snapshots_loaded", &[]),
    f("heddle_ingester_replay_snapshots_discarded", &[]),
    f("heddle_ingester_replay_chunks_head_corruptions_repaired", &[]),
    f("heddle_ingester_compactions", &[]),
    f("heddle_ingester_compaction_failures", &[]),
    f("heddle_ingester_compaction_duration_seconds", &[]),
    f("heddle_ingester_blocks_written", &[]),
    f("heddle_ingester_blocks_deleted", &[]),
    f("heddle_ingester_blocks_pending_upload", &[]),
    f("heddle_shipper_uploads", &[]),
    f("heddle_shipper_upload_failures", &[]),
    f("heddle_shipper_last_successful_upload_timestamp_seconds", &[]),
    f("heddle_bucket_operations", &["operation"]),
    unseen(
        "heddle_bucket_operation_failures",
        &["operation"],
        "counter",
        "all, ingester, querier",
        "Object store calls that failed, by operation, each retry counted.",
    ),
    f("heddle_bucket_operation_duration_seconds", &["operation"]),
    f("heddle_bucket_uploaded_bytes", &[]),
    f("heddle_querier_requests", &["endpoint", "status"]),
    f("heddle_querier_request_duration_seconds", &["endpoint"]),
    f("heddle_querier_series_returned", &["endpoint"]),
    f("heddle_querier_samples_returned", &["endpoint"]),
    f("heddle_querier_inflight_requests_bytes", &[]),
    f("heddle_querier_inflight_requests_bytes_refused", &[]),
    unseen(
        "heddle_querier_refused_queries",
        &["reason"],
        "counter",
        "all, querier",
        "Queries refused by a limit, by reason (the error id): fetched series, chunks, chunk bytes, samples, regex length, PromQL samples in memory, range query length.",
    ),
    unseen(
        "heddle_querier_queries",
        &["endpoint", "outcome"],
        "counter",
        "all, querier",
        "PromQL queries (query, query_range) by endpoint and outcome: success, bad_data, execution, timeout, canceled (the client left first), internal.",
    ),
    f("heddle_querier_query_samples_processed", &[]),
    f("heddle_querier_index_header_loaded_bytes", &["source"]),
    f("heddle_querier_index_header_corrupt_files", &[]),
    f("heddle_querier_bucket_store_forced_refreshes", &["reason"]),
    f("heddle_compactor_runs_started", &[]),
    f("heddle_compactor_runs_completed", &[]),
    f("heddle_compactor_runs_failed", &[]),
    f("heddle_compactor_run_duration_seconds", &[]),
    f("heddle_compactor_last_successful_run_timestamp_seconds", &[]),
    f("heddle_compactor_group_compactions", &[]),
    f("heddle_compactor_group_compaction_failures", &[]),
    f("heddle_compactor_samples_written", &[]),
    unseen(
        "heddle_compactor_blocks_marked_for_deletion",
        &["reason"],
        "counter",
        "all, compactor",
        "Blocks marked for deletion, by reason: compacted (into a block uploaded before the mark), superseded (another block holds all its samples), retention.",
    ),
    f("heddle_compactor_blocks_deleted", &[]),
    f("heddle_compactor_tenants_skipped", &[]),
    unseen(
        "heddle_compactor_bucket_bytes",
        &["tenant"],
        "gauge",
        "all, compactor",
        "Bytes a tenant holds in the bucket, as of the compactor's last pass over it.",
    ),
    unseen(
        "heddle_compactor_tenant_uncompacted_blocks",
        &["tenant"],
        "gauge",
        "all, compactor",
        "Level-1 blocks (as ingesters shipped them) of a tenant not compacted yet, as of the compactor's last pass.",
    ),
    f("heddle_http_open_connections", &[]),
    f("heddle_http_connection_limit_waits", &[]),
    f("heddle_http_header_read_timeouts", &[]),
];

/// The standard process families every process exposes (`heddle_server::register_process_metrics`), as
/// exposed.
const PROCESS_FAMILIES: &[&str] = &[
    "process_cpu_seconds_total",
    "process_max_fds",
    "process_open_fds",
    "process_resident_memory_bytes",
    "process_start_time_seconds",
    "process_threads",
    "process_virtual_memory_bytes",
];

/// One family as the scrapes showed it.
#[derive(Debug, Default)]
struct Seen {
    kind: String,
    help: String,
    labels: BTreeSet<String>,
    processes: BTreeSet<&'static str>,
}

/// The exposition name of a registered family.
fn exposed_name(name: &str, kind: &str) -> String {
    if kind == "counter" {
        format!("{name}_total")
    } else {
        name.to_owned()
    }
}

/// Adds the `heddle_*` families of one exposition, scraped from `process`.
fn parse_exposition(text: &str, process: &'static str, seen: &mut BTreeMap<String, Seen>) {
    let mut kinds: BTreeMap<String, String> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE line");
            kinds.insert(name.to_owned(), kind.to_owned());
            let s = seen.entry(name.to_owned()).or_default();
            s.kind = kind.to_owned();
            s.processes.insert(process);
        } else if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP line");
            seen.entry(name.to_owned()).or_default().help = help.to_owned();
        } else if !line.starts_with('#') && !line.is_empty() {
            let sample = line.split([' ', '{']).next().expect("sample name");
            let family = kinds.keys().find(|f| {
                sample == f.as_str()
                    || (kinds[f.as_str()] == "histogram"
                        && ["_bucket", "_sum", "_count"]
                            .iter()
                            .any(|s| sample == format!("{f}{s}")))
            });
            let Some(family) = family else {
                panic!("{process}: sample {sample} has no # TYPE line");
            };
            if let Some((_, labels)) = line.split_once('{') {
                let labels = labels.split_once('}').expect("closing brace").0;
                for pair in split_labels(labels) {
                    let name = pair.split_once('=').expect("label pair").0;
                    if name != "le" {
                        seen.get_mut(family).expect("family").labels.insert(name.to_owned());
                    }
                }
            }
        }
    }
}

/// `a="x",b="y,z"` into its pairs (commas inside quoted values kept).
fn split_labels(s: &str) -> Vec<&str> {
    let (mut out, mut start, mut quoted, mut escaped) = (Vec::new(), 0, false, false);
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

/// Every `"heddle_..."` string literal in the non-test Rust sources under `dir`.
fn registered_names(dir: &Path, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).expect("read source dir") {
        let path = entry.expect("dir entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        if path.is_dir() {
            if name != "tests" && name != "target" {
                registered_names(&path, out);
            }
            continue;
        }
        if !name.ends_with(".rs") || name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read source");
        // Unit tests sit at the end of a file, after `#[cfg(test)]`.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let mut rest = code;
        while let Some(at) = rest.find("\"heddle_") {
            let tail = &rest[at + 1..];
            let end = tail.find('"').expect("closing quote");
            let literal = &tail[..end];
            if literal
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            {
                out.insert(literal.to_owned());
            }
            rest = &tail[end + 1..];
        }
    }
}

fn series(name: &str, job: &str, ts: i64) -> TimeSeries {
    let mut labels = vec![Label {
        name: "job".into(),
        value: job.into(),
    }];
    if !name.is_empty() {
        labels.insert(
            0,
            Label {
                name: "__name__".into(),
                value: name.into(),
            },
        );
    }
    TimeSeries {
        labels,
        samples: vec![Sample {
            value: 1.0,
            timestamp: ts,
        }],
        ..TimeSeries::default()
    }
}

const CALL_TIMEOUT: Duration = Duration::from_secs(20);

/// Pushes, queries and flushes through a process with the HTTP API at `url`.
async fn exercise(http: &reqwest::Client, url: &str, push_url: &str) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    for req in [
        vec![series("up", "a", now), series("up", "b", now)],
        vec![series("up", "c", now)],
        vec![series("", "no-name", now)],
        // Older than the newest sample of its series: refused by the ingester as out of order.
        vec![series("up", "a", now - 60_000)],
    ] {
        let req = WriteRequest {
            timeseries: req,
            ..WriteRequest::default()
        };
        push(http, push_url, None, &req).await.expect("push");
    }
    for path in [
        "/prometheus/api/v1/labels",
        "/prometheus/api/v1/series?match[]=up",
        "/prometheus/api/v1/label/job/values",
    ] {
        let resp = http.get(format!("{url}{path}")).send().await.expect("query");
        assert!(resp.status().is_success(), "{path}: {}", resp.status());
    }
    let reader = ReadClient::new(http.clone(), &format!("{url}/prometheus"), None);
    let read = reader
        .read(
            ReadMode::Samples,
            vec![query(now - 60_000, now + 60_000, vec![eq("__name__", "up")])],
        )
        .await
        .expect("remote read");
    assert_eq!(read[0].len(), 2, "the two accepted series are read back");
}

async fn flush(http: &reqwest::Client, url: &str) {
    let resp = http
        .post(format!("{url}/ingester/flush?wait=true"))
        .send()
        .await
        .expect("flush");
    assert!(resp.status().is_success(), "flush: {}", resp.status());
}

/// Scrapes `process`, lints the exposition with `promtool check metrics` (Prometheus' naming and type rules)
/// and adds its families to `seen`.
fn scrape(addr: std::net::SocketAddr, process: &'static str, seen: &mut BTreeMap<String, Seen>) {
    let (status, text) = http_get(addr, "/metrics", CALL_TIMEOUT).expect("scrape");
    assert_eq!(status, 200, "{process} /metrics");
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("metrics.txt");
    std::fs::write(&file, &text).expect("write exposition");
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg("promtool check metrics < \"$1\"")
        .arg("sh")
        .arg(&file);
    let out = run_bounded(cmd, CALL_TIMEOUT).expect("run promtool check metrics");
    assert!(
        out.status.success() && out.stdout.trim().is_empty() && out.stderr.trim().is_empty(),
        "{process}: promtool check metrics found problems:\n{}{}",
        out.stdout,
        out.stderr
    );
    parse_exposition(&text, process, seen);
}

/// Scrapes of `heddle --target=all` and of each cluster role after use.
fn scrape_everything() -> BTreeMap<String, Seen> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let http = http_client(CALL_TIMEOUT).expect("client");
    let mut seen = BTreeMap::new();
    {
        // An instance limit of 2 series: the push of a third is refused.
        let all = HeddleProcess::start(HeddleOptions {
            args: vec!["--ingester.instance-limits.max-series=2".into()],
            ready_timeout: Duration::from_secs(120),
            ..HeddleOptions::default()
        })
        .expect("start heddle --target=all");
        runtime.block_on(async {
            exercise(&http, &all.url(), &all.push_url()).await;
            flush(&http, &all.url()).await;
        });
        scrape(all.http_addr(), "all", &mut seen);
    }
    let cluster = Cluster::start(ClusterOptions {
        ingesters: 1,
        distributors: 1,
        replication_factor: 1,
        args: vec!["--ingester.instance-limits.max-series=2".into()],
        ready_timeout: Duration::from_secs(120),
        ..ClusterOptions::default()
    })
    .expect("start a cluster");
    runtime.block_on(async {
        let d = cluster.distributor(0);
        exercise(&http, &cluster.querier().url(), &d.push_url()).await;
        flush(&http, &cluster.ingester(0).url()).await;
    });
    scrape(cluster.distributor(0).http_addr(), "distributor", &mut seen);
    scrape(cluster.ingester(0).http_addr(), "ingester", &mut seen);
    scrape(cluster.querier().http_addr(), "querier", &mut seen);
    seen.retain(|name, _| name.starts_with("heddle_") || name.starts_with("process_"));
    seen
}

fn render(rows: &[(String, String, String, String, String)]) -> String {
    let mut out = String::from(
        "# Metrics catalogue\n\n\
         Every `heddle_*` metric family a Heddle process exposes on `/metrics`, as PromQL names it (counters end in\n\
         `_total`; a histogram also has `_bucket`, `_sum` and `_count` series). Families with labels appear once they\n\
         have a first series. Processes: `all` is the single-process default, the others are `--target` roles in a\n\
         cluster (`heddle_ring_members` exists only in clustered processes). Every process also exposes the\n\
         standard `process_*` families (read from `/proc/self` at scrape time, Linux only); `up` (used by\n\
         `HeddleTargetDown`) is the one Prometheus records per scrape.\n\n\
         GENERATED by `HEDDLE_UPDATE_DOCS=1 cargo test -p heddle-integration --test metrics_catalogue` from what\n\
         real processes expose (`integration/tests/metrics_catalogue.rs`); the test fails when this file is stale\n\
         or when the code registers a family the catalogue does not list.\n\n\
         A scrape costs O(families), not O(series): every gauge is kept current by the event that changes it (see\n\
         [loadtest/README.md](../loadtest/README.md#scrape-cost)).\n\n\
         | Metric | Type | Labels | Exposed by | Meaning |\n|---|---|---|---|---|\n",
    );
    for (name, kind, labels, processes, help) in rows {
        out.push_str(&format!("| `{name}` | {kind} | {labels} | {processes} | {help} |\n"));
    }
    out
}

#[test]
fn metrics_catalogue_is_current() {
    let root = workspace_root();
    let mut registered = BTreeSet::new();
    for dir in ["libs", "services"] {
        for krate in std::fs::read_dir(root.join(dir)).expect("crates") {
            let src = krate.expect("crate").path().join("src");
            if src.is_dir() && !src.starts_with(root.join("libs/testkit")) {
                registered_names(&src, &mut registered);
            }
        }
    }
    let listed: BTreeSet<String> = FAMILIES.iter().map(|f| f.name.to_owned()).collect();
    assert_eq!(
        registered.difference(&listed).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "families the code registers that FAMILIES does not list"
    );
    assert_eq!(
        listed.difference(&registered).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "families FAMILIES lists that the code no longer registers"
    );

    let seen = scrape_everything();
    let mut rows = Vec::new();
    let mut accounted = BTreeSet::new();
    for family in FAMILIES {
        let by_kind = ["counter", "gauge", "histogram"]
            .iter()
            .map(|k| exposed_name(family.name, k))
            .find(|n| seen.contains_key(n));
        let want_labels: BTreeSet<String> = family.labels.iter().map(|l| (*l).to_owned()).collect();
        let row = match (by_kind, &family.unseen) {
            (Some(name), None) => {
                let s = &seen[&name];
                if !s.labels.is_empty() || want_labels.is_empty() {
                    assert_eq!(s.labels, want_labels, "{name}: label names in the exposition");
                }
                accounted.insert(name.clone());
                let processes: Vec<&str> = s.processes.iter().copied().collect();
                (
                    name,
                    s.kind.clone(),
                    labels_cell(family.labels),
                    processes.join(", "),
                    s.help.clone(),
                )
            }
            (Some(name), Some(_)) => panic!("{name} now appears in the scrapes: drop its hand-written entry"),
            (None, Some(u)) => (
                exposed_name(family.name, u.kind),
                u.kind.to_owned(),
                labels_cell(family.labels),
                u.processes.to_owned(),
                u.help.to_owned(),
            ),
            (None, None) => panic!(
                "{}: registered but absent from every scrape; exercise it in this test or give it an `unseen` entry",
                family.name
            ),
        };
        rows.push(row);
    }
    for name in PROCESS_FAMILIES {
        let s = seen
            .get(*name)
            .unwrap_or_else(|| panic!("{name}: not exposed by any process"));
        let processes: Vec<&str> = s.processes.iter().copied().collect();
        assert_eq!(
            processes,
            vec!["all", "distributor", "ingester", "querier"],
            "{name}: every process exposes it"
        );
        accounted.insert((*name).to_owned());
        rows.push((
            (*name).to_owned(),
            s.kind.clone(),
            String::new(),
            processes.join(", "),
            s.help.clone(),
        ));
    }
    let stray: Vec<&String> = seen.keys().filter(|n| !accounted.contains(*n)).collect();
    assert!(stray.is_empty(), "exposed but not registered in the sources? {stray:?}");
    rows.sort();
    let doc = render(&rows);
    let path = root.join("docs/metrics.md");
    if std::env::var_os("HEDDLE_UPDATE_DOCS").is_some() {
        std::fs::write(&path, &doc).expect("write docs/metrics.md");
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == doc,
        "docs/metrics.md is stale; run `HEDDLE_UPDATE_DOCS=1 cargo test -p heddle-integration --test metrics_catalogue`\n\
         --- generated now ---\n{doc}"
    );
}

fn labels_cell(labels: &[&str]) -> String {
    if labels.is_empty() {
        "".to_owned()
    } else {
        labels.iter().map(|l| format!("`{l}`")).collect::<Vec<_>>().join(", ")
    }
}
