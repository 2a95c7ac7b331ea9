//! Queries never miss data while the compactor replaces blocks (issue 40), with real processes: three ingesters
//! at RF 3, a distributor, a querier and a compactor on one filesystem bucket, multitenancy with the cluster
//! token and the gossip key, every interval shortened so that one run goes through dozens of compactions.
//!
//! A writer pushes one half hour of samples per cycle (timestamps hours in the past, so each cycle is its own
//! block), and once the push is acknowledged flushes the three ingesters at once, so each cycle ships three
//! replica blocks. Meanwhile the compactor merges the replicas (vertical compaction), compacts the merged blocks
//! into 4 h and then 8 h blocks, marks every source and deletes it, and the ingesters stop answering a shipped
//! block 4 s after its upload. Readers query the querier without pause, by remote read (samples and streamed
//! chunks, the whole range) and by the series API (one cycle's window at a time); each answer that comes back
//! 200 must hold every sample acknowledged before the query was sent, exactly, and nothing else. An answer that
//! fails is allowed (a query may fail rather than answer partially) but counted, and must stay rare.
//!
//! - `every_answer_is_complete_while_blocks_are_replaced`: the recommended delays (a marked block leaves the
//!   querier's list before the compactor deletes it).
//! - `every_answer_is_complete_when_sources_are_deleted_under_the_querier`: the settings in small, the
//!   compactor deleting sources while the querier still lists them.
//!
//! Bounded: about a minute and a half of cycles each (run one at a time), every HTTP call with a timeout, the
//! processes killed on drop. `HEDDLE_COMPACTION_READS_BIN=<path>` runs another `heddle` build (an older one, to
//! see it fail).

use heddle_model::Labels;
use heddle_testkit::{
    Cluster, ClusterOptions, ManagedProcess, ReadClient, ReadMode, SeriesGen, cargo_bin, eq, free_port, http_client,
    metric_value, metrics_text, now_ms, push, query,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const TENANT: &str = "complete";
const JOB: &str = "compaction-reads";
const SERIES: usize = 120;
const METRICS: usize = 6;
/// Simulated time per cycle: one block per cycle and ingester, inside one 2 h range.
const CYCLE_MS: i64 = 30 * 60 * 1000;
const INTERVAL_MS: i64 = 5 * 60 * 1000;
const ROUNDS_PER_CYCLE: u32 = (CYCLE_MS / INTERVAL_MS) as u32;
/// 30 cycles: 30 vertical compactions, 3 or 4 of 4 h, 1 or 2 of 8 h, and the deletion of their sources.
const CYCLES: u32 = 30;
/// Pause between cycles, so the compactor and the readers interleave with the writer.
const CYCLE_PAUSE: Duration = Duration::from_millis(1500);
const RANGE_MS: i64 = 2 * 3600 * 1000;
const HTTP_TIMEOUT: Duration = Duration::from_secs(20);

/// Timings every process gets (one config for the cluster, as the chart renders it), but the three delays that
/// decide how long a querier reads marked blocks and when the compactor deletes them: `delays`.
fn shortened_intervals(delays: &Delays) -> Vec<String> {
    let mut args: Vec<String> = [
        // Queriers list a tenant's blocks again every second and use a bucket index up to 3 s old; ingesters
        // therefore answer a shipped block for 4 s after its upload.
        "--blocks-storage.bucket-store.sync-interval=1s",
        "--blocks-storage.bucket-store.bucket-index.max-stale-period=3s",
        "--compactor.compaction-interval=1s",
        "--compactor.first-level-compaction-wait-period=0s",
        "--compactor.block-ranges=2h,4h,8h",
        "--blocks-storage.tsdb.ship-interval=1s",
        // Every cycle starts with an empty head (the flush cut it) and samples hours old.
        "--blocks-storage.tsdb.empty-head-sample-age-limit=48h",
    ]
    .map(String::from)
    .to_vec();
    args.push(format!(
        "--blocks-storage.bucket-store.ignore-deletion-marks-delay={}",
        delays.ignore_marks
    ));
    args.push(format!("--compactor.deletion-delay={}", delays.deletion));
    args
}

/// How long queriers read a marked block, and when the compactor deletes it.
struct Delays {
    ignore_marks: &'static str,
    deletion: &'static str,
}

/// The recommended order: a block is out of every querier's list (2 s + 3 s of index staleness + 1 s of sync)
/// before it is deleted.
const RECOMMENDED: Delays = Delays {
    ignore_marks: "2s",
    deletion: "8s",
};

/// The settings in small (`--compactor.deletion-delay=1m`, queriers at their 1 h): sources deleted while
/// every querier still lists them.
const DELETION_BEFORE_QUERIERS_LET_GO: Delays = Delays {
    ignore_marks: "20s",
    deletion: "3s",
};

/// The workload: cycle `c` is rounds `c * ROUNDS_PER_CYCLE ..`, at most 22 h old and at least an hour, so no
/// block is past the ingesters' 24 h local retention and none is still being filled by the clock.
fn workload() -> SeriesGen {
    let start = (now_ms() - 22 * 3600 * 1000).div_euclid(RANGE_MS) * RANGE_MS + RANGE_MS;
    let mut g = SeriesGen::new(40, SERIES, METRICS, start);
    g.interval_ms = INTERVAL_MS;
    g.job = JOB.to_owned();
    g
}

/// Every sample of cycles `0..cycles`, per series: timestamp -> value bits.
type Expected = BTreeMap<Labels, BTreeMap<i64, u64>>;

fn expected(g: &SeriesGen, cycles: u32) -> Expected {
    (0..g.series)
        .map(|i| {
            let points = (0..cycles * ROUNDS_PER_CYCLE)
                .map(|r| (g.timestamp(i, r), g.value(i, r).to_bits()))
                .collect();
            (g.model_labels(i), points)
        })
        .collect()
}

/// The cycle a timestamp of the workload belongs to.
fn cycle_of(g: &SeriesGen, t: i64) -> i64 {
    (t - g.start_ms).div_euclid(CYCLE_MS)
}

/// How an answer differs from what was acknowledged: samples of acknowledged cycles missing or changed, and
/// samples the writer never sent. Samples of cycles acknowledged after the query was sent are ignored.
fn compare(g: &SeriesGen, want: &Expected, acked: u32, got: &BTreeMap<Labels, BTreeMap<i64, u64>>) -> Vec<String> {
    let mut problems = Vec::new();
    let mut missing_by_cycle: BTreeMap<i64, usize> = BTreeMap::new();
    let mut missing_series = 0;
    for (labels, points) in want {
        let have = got.get(labels);
        if have.is_none() {
            missing_series += 1;
        }
        for (t, v) in points.iter().filter(|(t, _)| cycle_of(g, **t) < i64::from(acked)) {
            match have.and_then(|h| h.get(t)) {
                Some(got_v) if got_v == v => {}
                Some(_) => problems.push(format!("{labels} at {t}: another value")),
                None => *missing_by_cycle.entry(cycle_of(g, *t)).or_default() += 1,
            }
        }
    }
    if missing_series > 0 {
        problems.push(format!("{missing_series} of {} series absent", want.len()));
    }
    if !missing_by_cycle.is_empty() {
        problems.push(format!("samples missing per cycle: {missing_by_cycle:?}"));
    }
    for (labels, points) in got {
        let sent = want.get(labels);
        for (t, v) in points {
            if sent.and_then(|s| s.get(t)) != Some(v) {
                problems.push(format!("{labels} at {t}: a sample never sent"));
                break;
            }
        }
    }
    problems.truncate(8);
    problems
}

/// What the readers saw.
#[derive(Default)]
struct Tally {
    complete: AtomicU64,
    failed: AtomicU64,
    incomplete: std::sync::Mutex<Vec<String>>,
    failures: std::sync::Mutex<Vec<String>>,
}

impl Tally {
    fn incomplete(&self, what: String) {
        let mut all = self.incomplete.lock().unwrap();
        eprintln!("INCOMPLETE: {what}");
        all.push(what);
    }

    fn failed(&self, what: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let mut all = self.failures.lock().unwrap();
        if all.len() < 5 {
            all.push(what);
        }
    }
}

/// The bucket's blocks of the tenant as `ULID [min, max) level [marked]`, for messages.
fn bucket_state(bucket: &Path) -> String {
    let dir = bucket.join(TENANT);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return "(no tenant directory)".to_owned();
    };
    let mut out: Vec<String> = entries
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| {
            let meta = std::fs::read(e.path().join("meta.json"))
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
            let marked = e.path().join("deletion-mark.json").exists();
            match meta {
                Some(m) => format!(
                    "{} [{}, {}) level {}{}",
                    e.file_name().to_string_lossy(),
                    m["minTime"],
                    m["maxTime"],
                    m["compaction"]["level"],
                    if marked { " marked" } else { "" }
                ),
                None => format!(
                    "{} partial{}",
                    e.file_name().to_string_lossy(),
                    if marked { " marked" } else { "" }
                ),
            }
        })
        .collect();
    out.sort();
    out.join("; ")
}

/// A remote-read reader: the whole range, alternately as samples and as streamed chunks.
async fn remote_reader(
    g: Arc<SeriesGen>,
    want: Arc<Expected>,
    url: String,
    acked: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
    bucket: PathBuf,
) {
    let client = ReadClient::new(http_client(HTTP_TIMEOUT).unwrap(), &url, Some(TENANT));
    let (lo, hi) = g.time_range(CYCLES * ROUNDS_PER_CYCLE);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let mode = if n.is_multiple_of(2) {
            ReadMode::Samples
        } else {
            ReadMode::StreamedChunks
        };
        let k = acked.load(Ordering::SeqCst);
        if k == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let sent = Instant::now();
        match client.read(mode, vec![query(lo, hi, vec![eq("job", JOB)])]).await {
            Ok(mut results) => {
                let got: BTreeMap<Labels, BTreeMap<i64, u64>> = results
                    .pop()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|s| (s.labels, s.samples.iter().map(|p| (p.t, p.v.to_bits())).collect()))
                    .collect();
                let problems = compare(&g, &want, k, &got);
                if problems.is_empty() {
                    tally.complete.fetch_add(1, Ordering::Relaxed);
                } else {
                    tally.incomplete(format!(
                        "remote read {mode:?} (sent with {k} cycles acknowledged, {:?} ago): {}\n  bucket now: {}",
                        sent.elapsed(),
                        problems.join("; "),
                        bucket_state(&bucket)
                    ));
                }
            }
            Err(e) => tally.failed(format!("remote read {mode:?}: {e}")),
        }
    }
}

/// A series-API reader: one acknowledged cycle's window at a time, which must list every series.
async fn series_reader(
    g: Arc<SeriesGen>,
    url: String,
    acked: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
    bucket: PathBuf,
) {
    let http = http_client(HTTP_TIMEOUT).unwrap();
    let want: BTreeSet<Labels> = (0..g.series).map(|i| g.model_labels(i)).collect();
    let mut n = 0u32;
    while !stop.load(Ordering::Relaxed) {
        let k = acked.load(Ordering::SeqCst);
        if k == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        n = n.wrapping_add(7);
        let cycle = n % k;
        let lo = g.start_ms + i64::from(cycle) * CYCLE_MS;
        let hi = lo + CYCLE_MS - 1;
        // Milliseconds as fractional seconds, as Prometheus clients send them.
        let q = format!(
            "{url}/api/v1/series?match[]=%7Bjob%3D%22{JOB}%22%7D&start={}.{:03}&end={}.{:03}",
            lo / 1000,
            lo % 1000,
            hi / 1000,
            hi % 1000
        );
        let sent = Instant::now();
        let answer = async {
            let resp = http
                .get(&q)
                .header("X-Scope-OrgID", TENANT)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let status = resp.status().as_u16();
            let body = resp.bytes().await.map_err(|e| e.to_string())?;
            if status != 200 {
                return Err(format!("status {status}: {}", String::from_utf8_lossy(&body)));
            }
            let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
            let series = v["data"].as_array().cloned().unwrap_or_default();
            series
                .iter()
                .map(|s| {
                    let mut pairs: Vec<(String, String)> = s
                        .as_object()
                        .into_iter()
                        .flatten()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                        .collect();
                    pairs.sort();
                    Labels::from_sorted(pairs.iter().map(|(n, v)| (n.as_str(), v.as_str()))).map_err(|e| e.to_string())
                })
                .collect::<Result<BTreeSet<Labels>, String>>()
        }
        .await;
        match answer {
            Ok(got) if got == want => {
                tally.complete.fetch_add(1, Ordering::Relaxed);
            }
            Ok(got) => tally.incomplete(format!(
                "series API over cycle {cycle} (sent with {k} cycles acknowledged, {:?} ago): {} of {} series, {} \
                 never sent\n  bucket now: {}",
                sent.elapsed(),
                got.intersection(&want).count(),
                want.len(),
                got.difference(&want).count(),
                bucket_state(&bucket)
            )),
            Err(e) => tally.failed(format!("series API over cycle {cycle}: {e}")),
        }
    }
}

/// Flushes every ingester at once (`/ingester/flush?wait=true`): each cuts its head into a block and ships it.
async fn flush_all(http: &reqwest::Client, cluster: &Cluster) {
    let mut flushes = tokio::task::JoinSet::new();
    for ing in cluster.ingesters() {
        let (http, url, name) = (
            http.clone(),
            format!("{}/ingester/flush?wait=true", ing.url()),
            ing.name().to_owned(),
        );
        flushes.spawn(async move {
            let resp = http.post(&url).send().await.expect("flush answered");
            let status = resp.status().as_u16();
            assert_eq!(
                status,
                204,
                "flush of {name}: {}",
                resp.text().await.unwrap_or_default()
            );
        });
    }
    while let Some(done) = flushes.join_next().await {
        done.expect("flush task");
    }
}

/// The `heddle` to run: `HEDDLE_COMPACTION_READS_BIN` when set, else the workspace's.
fn binary() -> PathBuf {
    std::env::var_os("HEDDLE_COMPACTION_READS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| cargo_bin("heddle").expect("heddle builds"))
}

/// A `--target=compactor` process on the cluster's bucket (the harness's cluster has none).
fn start_compactor(cluster: &Cluster, extra: &[String]) -> (ManagedProcess, u16) {
    let dir = cluster.root_dir().join("compactor");
    std::fs::create_dir_all(&dir).unwrap();
    let (http_port, mut grpc_port) = (free_port().unwrap(), free_port().unwrap());
    while grpc_port == http_port {
        grpc_port = free_port().unwrap();
    }
    let mut cmd = Command::new(binary());
    cmd.args([
        "--target=compactor".to_owned(),
        "--server.http-listen-address=127.0.0.1".to_owned(),
        format!("--server.http-listen-port={http_port}"),
        "--server.grpc-listen-address=127.0.0.1".to_owned(),
        format!("--server.grpc-listen-port={grpc_port}"),
        format!(
            "--blocks-storage.filesystem.dir={}",
            cluster.root_dir().join("bucket").display()
        ),
        format!("--compactor.data-dir={}", dir.join("data").display()),
        format!("--blocks-storage.tsdb.dir={}", dir.join("tsdb").display()),
        format!(
            "--blocks-storage.bucket-store.sync-dir={}",
            dir.join("tsdb-sync").display()
        ),
    ]);
    cmd.args(extra);
    let mut process = ManagedProcess::spawn("compactor", cmd, &dir).expect("compactor spawns");
    process
        .wait_http_ok(([127, 0, 0, 1], http_port).into(), "/ready", Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("compactor ready: {e}"));
    (process, http_port)
}

/// One cluster at a time: each is six processes on a machine the tests share.
static ONE_CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_answer_is_complete_while_blocks_are_replaced() {
    let _one = ONE_CLUSTER.lock().await;
    replace_blocks_under_queries(&RECOMMENDED).await;
}

/// The operator's settings of issue 40 in small: the compactor deletes sources while the querier's list still
/// holds them. Queries must still be complete (the querier lists again and reads the merged block), not fail
/// for a sync interval, nor answer without the sources.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_answer_is_complete_when_sources_are_deleted_under_the_querier() {
    let _one = ONE_CLUSTER.lock().await;
    replace_blocks_under_queries(&DELETION_BEFORE_QUERIERS_LET_GO).await;
}

/// The run described in the module docs, with `delays`.
async fn replace_blocks_under_queries(delays: &Delays) {
    let secrets = tempfile::tempdir().unwrap();
    let (token, key) = (secrets.path().join("cluster-token"), secrets.path().join("gossip.key"));
    std::fs::write(&token, "complete-cluster-token-of-some-length\n").unwrap();
    std::fs::write(&key, "complete-gossip-key-of-some-length\n").unwrap();
    let mut args = vec![
        "--auth.multitenancy-enabled".to_owned(),
        format!("--server.cluster-token-file={}", token.display()),
        format!("--memberlist.cluster-key-file={}", key.display()),
    ];
    args.extend(shortened_intervals(delays));
    let cluster = tokio::task::spawn_blocking({
        let args = args.clone();
        move || {
            Cluster::start(ClusterOptions {
                distributors: 1,
                args,
                binary: Some(binary()),
                ..ClusterOptions::default()
            })
        }
    })
    .await
    .unwrap()
    .expect("cluster starts");
    let bucket = cluster.root_dir().join("bucket");
    let (compactor, compactor_port) = {
        let extra = args.clone();
        let c = &cluster;
        tokio::task::block_in_place(|| start_compactor(c, &extra))
    };

    let g = Arc::new(workload());
    let want = Arc::new(expected(&g, CYCLES));
    let acked = Arc::new(AtomicU32::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let querier = cluster.querier().prometheus_url();
    let mut readers = Vec::new();
    for _ in 0..2 {
        readers.push(tokio::spawn(remote_reader(
            Arc::clone(&g),
            Arc::clone(&want),
            querier.clone(),
            Arc::clone(&acked),
            Arc::clone(&stop),
            Arc::clone(&tally),
            bucket.clone(),
        )));
    }
    readers.push(tokio::spawn(series_reader(
        Arc::clone(&g),
        querier.clone(),
        Arc::clone(&acked),
        Arc::clone(&stop),
        Arc::clone(&tally),
        bucket.clone(),
    )));

    let http = http_client(Duration::from_secs(60)).unwrap();
    let started = Instant::now();
    for c in 0..CYCLES {
        let rounds = c * ROUNDS_PER_CYCLE..(c + 1) * ROUNDS_PER_CYCLE;
        let batch = g.write_request(0..g.series, rounds);
        let out = push(&http, &cluster.distributor(0).push_url(), Some(TENANT), &batch)
            .await
            .expect("push sent");
        assert!(out.is_success(), "push of cycle {c} refused: {out:?}");
        acked.store(c + 1, Ordering::SeqCst);
        flush_all(&http, &cluster).await;
        tokio::time::sleep(CYCLE_PAUSE).await;
    }
    // The last cycles' blocks through their compactions and deletions, still read all along.
    tokio::time::sleep(Duration::from_secs(12)).await;
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.await.expect("reader");
    }
    let elapsed = started.elapsed();

    let metrics = metrics_text(&http, &format!("http://127.0.0.1:{compactor_port}"))
        .await
        .expect("compactor metrics");
    let metric = |name: &str| metric_value(&metrics, name).unwrap_or(0.0);
    let (compactions, deleted) = (
        metric("heddle_compactor_group_compactions_total"),
        metric("heddle_compactor_blocks_deleted_total"),
    );
    let (complete, failed) = (
        tally.complete.load(Ordering::Relaxed),
        tally.failed.load(Ordering::Relaxed),
    );
    let incomplete = tally.incomplete.lock().unwrap().clone();
    // How often the querier's list was found behind and listed again (absent from builds that predate it).
    let querier_metrics = metrics_text(&http, &cluster.querier().url()).await.unwrap_or_default();
    let refreshes = ["block_left_by_ingester", "block_gone"].map(|reason| {
        let series = format!("heddle_querier_bucket_store_forced_refreshes_total{{reason=\"{reason}\"}}");
        format!("{reason}={}", metric_value(&querier_metrics, &series).unwrap_or(0.0))
    });
    eprintln!(
        "ignore marks after {}, delete after {}: {CYCLES} cycles in {elapsed:?}: {compactions} compactions, {deleted} blocks deleted; answers: {complete} \
         complete, {} incomplete, {failed} failed; forced refreshes: {}; {:?}",
        delays.ignore_marks,
        delays.deletion,
        incomplete.len(),
        refreshes.join(" "),
        tally.failures.lock().unwrap()
    );
    assert!(
        incomplete.is_empty(),
        "{} of {} answers were 200 with acknowledged samples missing; the first:\n{}\nquerier:\n{}\ncompactor:\n{}",
        incomplete.len(),
        complete + incomplete.len() as u64,
        incomplete.iter().take(3).cloned().collect::<Vec<_>>().join("\n"),
        cluster.querier().log_tail(20),
        compactor.log_tail(20)
    );
    // The run went through what it is about: every cycle's replicas merged, longer ranges, deletions.
    assert!(
        compactions >= f64::from(CYCLES) + 3.0,
        "only {compactions} compactions\n{}",
        compactor.log_tail(30)
    );
    assert!(
        deleted >= f64::from(CYCLES) * 3.0,
        "only {deleted} blocks deleted\n{}",
        compactor.log_tail(30)
    );
    // Failing rather than answering partially is allowed, but a querier that mostly fails is no answer either;
    // and the readers kept reading all along (a few answers per cycle at the least, on a loaded machine).
    assert!(
        complete >= u64::from(CYCLES) * 3 && failed * 20 <= complete,
        "{complete} complete answers, {failed} failed: {:?}",
        tally.failures.lock().unwrap()
    );
}
