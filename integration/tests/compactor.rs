//! The compactor end to end, against a real S3-compatible server (s3s-fs), with promtool as the judge.
//!
//! - `rf3_replicas_become_one_block_per_range`: a 3-ingester cluster at RF 3 ships three copies of every 2 h
//!   range; the compactor (`--target=compactor`) leaves one block per range, whose `promtool tsdb dump` is
//!   exactly the acknowledged samples, each once, and the querier answers the same before and after.
//! - `promtool_blocks_through_crashes_and_retention`: blocks made by `promtool tsdb create-blocks-from
//!   openmetrics` (three overlapping "replicas" of two ranges, each missing other samples) are compacted by a
//!   compactor killed after uploading a merged block and again after marking sources: after each restart no
//!   sample is lost or doubled (remote read through a querier, and promtool on the result). Then a retention
//!   set for the tenant in the runtime config file, without a restart, deletes exactly the older range.
//! - `the_compactor_killed_at_every_step_loses_and_doubles_nothing`: killed mid-download, mid-merge, mid-upload
//!   and mid-deletion, each followed by an exact read, then an exact promtool dump once it is let finish.
//! - `blocks_written_by_prometheus_are_compacted`: Prometheus' own blocks, three times each, merged exactly.
//! - `a_compactor_stopped_mid_merge_releases_its_lock`: a graceful stop leaves the tenant unlocked.
//! - `two_compactors_share_one_bucket`: two compactor processes at once leave the same result as one.
//! - `a_replicated_day_becomes_one_24h_block`: the default ranges take three replicas of a day through 2h, 12h
//!   and 24h.
//! - `the_bucket_answers_only_past_query_store_after`: the query split by time, seen from a read.
//! - Measurements, ignored by default: `footprint_at_rf3` and `week_query_before_and_after_compaction`.

use heddle_bucket::{Backend, Bucket, BucketConfig, S3Config};
use heddle_model::TenantId;
use heddle_testkit::promtool::{Dump, check, parse_dump};
use heddle_testkit::s3::S3Server;
use heddle_testkit::{
    Cluster, ClusterOptions, HeddleOptions, HeddleProcess, ReadClient, ReadMode, SeriesGen, copy_dir, eq, http_client,
    now_ms, prometheus_tool, push, query, run_bounded, wait_until,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const TENANT: &str = "anonymous";
const RANGE_MS: i64 = 2 * 3600 * 1000;
const WAIT: Duration = Duration::from_secs(90);
const PROMTOOL_TIMEOUT: Duration = Duration::from_secs(120);

fn promtool() -> Option<PathBuf> {
    prometheus_tool("PROMTOOL_BIN", "promtool", "compactor")
}

/// Whether `dir` holds a file, at any depth (a deleted block may leave empty directories behind).
fn has_files(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|rd| {
        rd.filter_map(Result::ok)
            .any(|e| e.path().is_file() || (e.path().is_dir() && has_files(&e.path())))
    })
}

/// Block directories of `TENANT` in the bucket s3s-fs serves: `(ulid, complete, marked)`, sorted.
fn bucket_blocks(s3: &S3Server) -> Vec<(String, bool, bool)> {
    let dir = s3.bucket_dir().join(TENANT);
    let mut out: Vec<(String, bool, bool)> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter_map(|e| {
                    let name = e.file_name().into_string().ok()?;
                    (name.len() == 26 && has_files(&e.path())).then(|| {
                        (
                            name,
                            e.path().join("meta.json").is_file(),
                            e.path().join("deletion-mark.json").is_file(),
                        )
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// The complete blocks that are not marked for deletion.
fn live_blocks(s3: &S3Server) -> Vec<String> {
    bucket_blocks(s3)
        .into_iter()
        .filter(|(_, complete, marked)| *complete && !marked)
        .map(|(u, ..)| u)
        .collect()
}

fn meta(s3: &S3Server, ulid: &str) -> serde_json::Value {
    let path = s3.bucket_dir().join(TENANT).join(ulid).join("meta.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Copies `blocks` of the bucket into `scratch/<what>` (with the empty `wal/` promtool wants), runs
/// `promtool tsdb analyze` on each and `promtool tsdb dump` on all, and returns the dump.
fn judge(promtool: &Path, s3: &S3Server, blocks: &[String], scratch: &Path, what: &str) -> Dump {
    let dir = scratch.join(what);
    std::fs::create_dir_all(dir.join("wal")).unwrap();
    for ulid in blocks {
        copy_dir(&s3.bucket_dir().join(TENANT).join(ulid), &dir.join(ulid)).unwrap();
        let mut cmd = Command::new(promtool);
        cmd.args(["tsdb", "analyze"]).arg(&dir).arg(ulid);
        let out = run_bounded(cmd, PROMTOOL_TIMEOUT).expect("promtool tsdb analyze runs");
        assert!(
            out.status.success() && out.stdout.contains("Block ID: "),
            "{what}: promtool tsdb analyze {ulid} failed ({}):\n{}\n{}",
            out.status,
            out.stdout,
            out.stderr
        );
    }
    let mut cmd = Command::new(promtool);
    cmd.args(["tsdb", "dump"]).arg(&dir);
    let out = run_bounded(cmd, PROMTOOL_TIMEOUT).expect("promtool tsdb dump runs");
    assert!(
        out.status.success(),
        "{what}: promtool tsdb dump failed:\n{}",
        out.stderr
    );
    parse_dump(&out.stdout).unwrap_or_else(|e| panic!("{what}: unreadable dump: {e}"))
}

/// A client of the bucket s3s-fs serves.
fn bucket(s3: &S3Server) -> Bucket {
    Bucket::new(
        &BucketConfig {
            backend: Backend::S3,
            s3: S3Config {
                endpoint: s3.addr().to_string(),
                bucket_name: s3.bucket().to_owned(),
                access_key_id: s3.access_key().to_owned(),
                secret_access_key: s3.secret_key().to_owned(),
                insecure: true,
                region: String::new(),
            },
            ..BucketConfig::default()
        },
        &mut prometheus_client::registry::Registry::default(),
    )
    .unwrap()
}

/// Blocks made by `promtool tsdb create-blocks-from openmetrics` of `file` in `out` (2 h each), uploaded for
/// `TENANT`; `out` is removed afterwards.
async fn upload_openmetrics(promtool: &Path, bucket: &Bucket, file: &Path, out: &Path) {
    std::fs::create_dir_all(out).unwrap();
    let mut cmd = Command::new(promtool);
    cmd.args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(file)
        .arg(out);
    let res = run_bounded(cmd, Duration::from_secs(600)).expect("promtool runs");
    assert!(res.status.success(), "create-blocks-from: {}", res.stderr);
    let tenant = TenantId::new(TENANT).unwrap();
    for entry in std::fs::read_dir(out).unwrap() {
        bucket.upload_block(&tenant, &entry.unwrap().path()).await.unwrap();
    }
    std::fs::remove_dir_all(out).unwrap();
}

fn assert_exactly(what: &str, got: &Dump, want: &Dump) {
    let problems = check(got, want, &Dump::new());
    assert!(
        problems.is_empty(),
        "{what}: {} problems, first: {:?}",
        problems.len(),
        &problems[..problems.len().min(5)]
    );
}

/// Remote read (samples) of `job` over `[start, end]` through the querier at `url`.
async fn read_job(url: &str, job: &str, start: i64, end: i64) -> Dump {
    let client = ReadClient::new(http_client(Duration::from_secs(60)).unwrap(), url, None);
    let answer = client
        .read(ReadMode::Samples, vec![query(start, end, vec![eq("job", job)])])
        .await
        .unwrap_or_else(|e| panic!("remote read: {e}"));
    answer
        .into_iter()
        .flatten()
        .map(|s| (s.labels, s.samples.iter().map(|p| (p.t, p.v.to_bits())).collect()))
        .collect()
}

/// A compactor process on the S3 server: compacts at once and then every `interval`, deletes marked blocks on
/// the next pass, and compacts blocks as soon as they are listed.
fn start_compactor(s3: &S3Server, interval: &str, extra: &[String]) -> HeddleProcess {
    HeddleProcess::start(compactor_options(s3, interval, extra)).expect("compactor starts")
}

/// The options [`start_compactor`] starts a compactor with.
fn compactor_options(s3: &S3Server, interval: &str, extra: &[String]) -> HeddleOptions {
    let mut args = s3.heddle_args();
    args.push(format!("--compactor.compaction-interval={interval}"));
    args.extend(
        [
            "--compactor.deletion-delay=0s",
            "--compactor.first-level-compaction-wait-period=0s",
        ]
        .map(String::from),
    );
    args.extend(extra.iter().cloned());
    HeddleOptions {
        target: "compactor".to_owned(),
        args,
        ..HeddleOptions::default()
    }
}

/// The compactor flag that leaves only the merge of overlapping blocks: the three 2 h ranges `ship_rf3` writes
/// cross a 12 h boundary when the test runs between 02:00 and 06:00 or 14:00 and 18:00 UTC, and the default
/// ranges then, rightly, compact the finished window's blocks into one: the count of blocks per range would
/// depend on the clock. Compaction into longer ranges has its own test
/// (`heddle-compactor`, `replicas_become_one_block_then_longer_ranges`).
const VERTICAL_ONLY: &str = "--compactor.block-ranges=2h";

/// Flags of processes that read the bucket: fresh block lists, marked blocks ignored at once.
fn reader_args() -> Vec<String> {
    [
        "--blocks-storage.bucket-store.sync-interval=200ms",
        "--blocks-storage.bucket-store.ignore-deletion-marks-delay=0s",
    ]
    .map(String::from)
    .to_vec()
}

/// A 3-ingester RF-3 cluster on `s3` that has shipped `series` series of one sample a minute over five hours
/// (three 2 h ranges, from a range boundary six hours ago) as three replicas of each range, and what it
/// acknowledged.
struct ShippedCluster {
    cluster: Cluster,
    g: SeriesGen,
    rounds: u32,
    want: Dump,
}

async fn ship_rf3(s3: &S3Server, series: usize) -> ShippedCluster {
    let mut args = s3.heddle_args();
    args.extend(reader_args());
    args.extend(
        [
            "--blocks-storage.tsdb.head-compaction-interval=500ms",
            "--blocks-storage.tsdb.ship-interval=500ms",
            "--blocks-storage.tsdb.empty-head-sample-age-limit=24h",
            // Ingesters stop answering a shipped block 200 ms after its upload (the sync interval plus the bucket
            // index's staleness): reads come from the bucket.
            "--blocks-storage.bucket-store.bucket-index.max-stale-period=0s",
        ]
        .map(String::from),
    );
    let cluster = Cluster::start(ClusterOptions {
        distributors: 1,
        args,
        ..ClusterOptions::default()
    })
    .expect("cluster starts");
    let start = (now_ms() - 6 * 3600 * 1000).div_euclid(RANGE_MS) * RANGE_MS;
    let mut g = SeriesGen::new(11, series, 4, start);
    g.interval_ms = 60_000;
    g.job = "compactor".to_owned();
    let rounds = 300;
    let http = http_client(Duration::from_secs(30)).unwrap();
    let per_request = (20_000 / series).clamp(1, 20) as u32;
    for r in (0..rounds).step_by(per_request as usize) {
        let to = (r + per_request).min(rounds);
        for part in (0..g.series).step_by(1000) {
            let batch = g.write_request(part..(part + 1000).min(g.series), r..to);
            let out = push(&http, &cluster.distributor(0).push_url(), None, &batch)
                .await
                .expect("push sent");
            assert!(out.is_success(), "push of rounds {r}..{to} refused: {out:?}");
        }
    }
    let want: Dump = (0..g.series)
        .map(|i| {
            let points = (0..rounds)
                .map(|r| (g.timestamp(i, r), g.value(i, r).to_bits()))
                .collect();
            (g.model_labels(i), points)
        })
        .collect();
    for ing in cluster.ingesters() {
        let resp = http_client(Duration::from_secs(300))
            .unwrap()
            .post(format!("{}/ingester/flush?wait=true", ing.url()))
            .send()
            .await
            .expect("flush answered");
        let status = resp.status().as_u16();
        assert_eq!(
            status,
            204,
            "flush of {}: {}\n{}",
            ing.name(),
            resp.text().await.unwrap_or_default(),
            ing.log_tail(20)
        );
    }
    assert!(
        wait_until(WAIT, || live_blocks(s3).len() == 9),
        "three replicas of three ranges were not shipped: {:?}",
        bucket_blocks(s3)
    );
    ShippedCluster {
        cluster,
        g,
        rounds,
        want,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rf3_replicas_become_one_block_per_range() {
    let Some(promtool) = promtool() else { return };
    let s3 = S3Server::start().expect("s3s-fs starts");
    let ShippedCluster {
        cluster,
        g,
        rounds,
        want,
    } = ship_rf3(&s3, 40).await;
    let (lo, hi) = g.time_range(rounds);
    let querier = cluster.querier().prometheus_url();
    assert_exactly(
        "read before compaction",
        &read_job(&querier, &g.job, lo, hi).await,
        &want,
    );

    let index = s3.bucket_dir().join(TENANT).join("bucket-index.json.gz");
    let compactor = start_compactor(&s3, "1s", &[VERTICAL_ONLY.to_owned()]);
    assert!(
        wait_until(WAIT, || bucket_blocks(&s3).len() == 3
            && live_blocks(&s3).len() == 3
            && index.is_file()),
        "the replicas were not compacted into one block per range, with a bucket index: {:?}\n{}",
        bucket_blocks(&s3),
        compactor.log_tail(30)
    );
    let blocks = live_blocks(&s3);
    for ulid in &blocks {
        let m = meta(&s3, ulid);
        assert_eq!(m["compaction"]["level"], 2, "block {ulid}: {m}");
        assert_eq!(
            m["compaction"]["sources"].as_array().map(Vec::len),
            Some(3),
            "block {ulid}: {m}"
        );
        assert_eq!(
            m["compaction"]["parents"].as_array().map(Vec::len),
            Some(3),
            "block {ulid}: {m}"
        );
        assert_eq!(m["thanos"]["labels"]["__org_id__"], TENANT, "block {ulid}: {m}");
    }
    let scratch = tempfile::tempdir().unwrap();
    let got = judge(&promtool, &s3, &blocks, scratch.path(), "compacted");
    assert_exactly("promtool dump of the compacted blocks", &got, &want);
    assert_exactly(
        "read after compaction",
        &read_job(&querier, &g.job, lo, hi).await,
        &want,
    );
}

/// Bytes of every file under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |rd| {
        rd.filter_map(Result::ok)
            .map(|e| {
                let p = e.path();
                if p.is_dir() {
                    dir_bytes(&p)
                } else {
                    e.metadata().map_or(0, |m| m.len())
                }
            })
            .sum()
    })
}

/// A gauge or counter of `name` (no labels) in the exposition of `process`.
fn scrape(process: &HeddleProcess, name: &str) -> f64 {
    let (_, text) = heddle_testkit::http_get(process.http_addr(), "/metrics", Duration::from_secs(10)).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The footprint the compactor removes: bucket bytes per acknowledged sample at RF 3 before and after
/// compaction (the goal: at most 1.05 times one replica's), the compaction's throughput and the compactor's
/// peak memory. A measurement, run by hand (`loadtest/README.md`); it prints its figures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: cargo test -p heddle-integration --test compactor -- --ignored --nocapture footprint"]
async fn footprint_at_rf3() {
    let s3 = S3Server::start().expect("s3s-fs starts");
    let series = 3000;
    let ShippedCluster { want, .. } = ship_rf3(&s3, series).await;
    let samples: usize = want.values().map(Vec::len).sum();
    let tenant_dir = s3.bucket_dir().join(TENANT);
    let before = dir_bytes(&tenant_dir);
    let compactor = start_compactor(&s3, "1h", &[VERTICAL_ONLY.to_owned()]);
    assert!(
        wait_until(Duration::from_secs(600), || bucket_blocks(&s3).len() == 3
            && scrape(&compactor, "heddle_compactor_runs_completed_total") >= 1.0),
        "compaction did not finish: {:?}",
        bucket_blocks(&s3)
    );
    // The bucket index and the lock are the compactor's own; the blocks are what is compared.
    let after = dir_bytes(&tenant_dir) - dir_bytes_of(&tenant_dir, &["bucket-index.json.gz"]);
    let written = scrape(&compactor, "heddle_compactor_samples_written_total");
    let run_seconds = scrape(&compactor, "heddle_compactor_run_duration_seconds_sum");
    let status = std::fs::read_to_string(format!("/proc/{}/status", compactor.pid().unwrap())).unwrap();
    let peak_rss = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .unwrap_or("VmHWM: ?")
        .to_owned();
    let one_replica = before as f64 / 3.0;
    println!(
        "footprint: {series} series, {samples} acknowledged samples; bucket before {before} B ({:.3} B/sample, \
         3 replicas), after {after} B ({:.3} B/sample) = {:.3}x one replica; compaction wrote {written} samples \
         in {run_seconds:.2} s ({:.0} samples/s); compactor {peak_rss}",
        before as f64 / samples as f64,
        after as f64 / samples as f64,
        after as f64 / one_replica,
        written / run_seconds.max(f64::EPSILON),
    );
    assert_eq!(written as usize, samples, "each acknowledged sample written once");
    assert!(
        after as f64 <= 1.05 * one_replica,
        "after compaction {after} B > 1.05 x one replica ({one_replica} B)"
    );
}

/// Bytes of the files `names` directly under `dir`.
fn dir_bytes_of(dir: &Path, names: &[&str]) -> u64 {
    names
        .iter()
        .map(|n| std::fs::metadata(dir.join(n)).map_or(0, |m| m.len()))
        .sum()
}

/// What [`upload_replicas`] put in the bucket: the two ranges' starts, and the samples of the newer range
/// and of both.
struct Replicas {
    old: i64,
    new: i64,
    new_want: Dump,
    want: Dump,
}

/// Three overlapping "replicas" of two 2 h ranges, 50 and 6 hours ago ([`openmetrics_replicas`]), made into
/// blocks by promtool and uploaded: six blocks in the bucket.
async fn upload_replicas(promtool: &Path, s3: &S3Server, scratch: &Path) -> Replicas {
    let now = now_ms();
    let old = (now - 50 * 3600 * 1000).div_euclid(RANGE_MS) * RANGE_MS;
    let new = (now - 6 * 3600 * 1000).div_euclid(RANGE_MS) * RANGE_MS;
    let (files, old_want, new_want) = openmetrics_replicas(scratch, old, new);
    let want: Dump = heddle_testkit::promtool::union(old_want, new_want.clone());
    let bucket = bucket(s3);
    for (r, file) in files.iter().enumerate() {
        upload_openmetrics(promtool, &bucket, file, &scratch.join(format!("blocks-{r}"))).await;
    }
    assert_eq!(live_blocks(s3).len(), 6, "two ranges, three replicas");
    Replicas {
        old,
        new,
        new_want,
        want,
    }
}

/// Three "replicas" of the same series over two 2 h ranges a day apart, as OpenMetrics files: replica `r`
/// misses the samples whose index is `r` modulo 5, so every sample is in two replicas at least. Returns the
/// files and the samples all of them hold together, per range.
fn openmetrics_replicas(dir: &Path, old: i64, new: i64) -> (Vec<PathBuf>, Dump, Dump) {
    let (mut old_want, mut new_want) = (Dump::new(), Dump::new());
    let mut files = Vec::new();
    for r in 0..3 {
        let mut text = String::new();
        for m in 0..3 {
            let name = format!("om_metric_{m}");
            text.push_str(&format!("# TYPE {name} gauge\n"));
            for s in 0..10 {
                let labels = heddle_model::Labels::from_unsorted([
                    ("__name__", name.as_str()),
                    ("instance", &format!("i-{s}")),
                    ("job", "om"),
                ])
                .unwrap();
                for (base, want) in [(old, &mut old_want), (new, &mut new_want)] {
                    for k in 0..240i64 {
                        let t = base + k * 30_000;
                        let v = (k * 7 + s * 3 + m) as f64 / 4.0;
                        if (k + s) % 5 != r {
                            text.push_str(&format!(
                                "{name}{{instance=\"i-{s}\",job=\"om\"}} {v} {}.{:03}\n",
                                t / 1000,
                                t % 1000
                            ));
                        }
                        let points = want.entry(labels.clone()).or_default();
                        if r == 0 {
                            points.push((t, v.to_bits()));
                        }
                    }
                }
            }
        }
        text.push_str("# EOF\n");
        let path = dir.join(format!("replica-{r}.om"));
        std::fs::write(&path, text).unwrap();
        files.push(path);
    }
    (files, old_want, new_want)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_blocks_through_crashes_and_retention() {
    let Some(promtool) = promtool() else { return };
    let s3 = S3Server::start().expect("s3s-fs starts");
    let scratch = tempfile::tempdir().unwrap();
    // A querier (the single process, whose ingester stays empty) and a compactor with nothing to do yet; the
    // querier's own compactor waits a day before touching level-1 blocks and has run its first pass by now.
    let mut reader_args = reader_args();
    reader_args.extend(s3.heddle_args());
    reader_args.push("--compactor.first-level-compaction-wait-period=24h".to_owned());
    let reader = HeddleProcess::start(HeddleOptions {
        args: reader_args,
        ..HeddleOptions::default()
    })
    .expect("reader starts");
    let runtime_config = scratch.path().join("runtime.yaml");
    std::fs::write(&runtime_config, "overrides: {}\n").unwrap();
    // Its first pass finds nothing; it passes again only when restarted, until the last restart below.
    let mut compactor = start_compactor(
        &s3,
        "1h",
        &[
            format!("--runtime-config.file={}", runtime_config.display()),
            "--runtime-config.reload-period=500ms".to_owned(),
        ],
    );

    let Replicas {
        old,
        new,
        new_want,
        want,
    } = upload_replicas(&promtool, &s3, scratch.path()).await;
    let (lo, hi) = (old, new + RANGE_MS);
    let url = reader.prometheus_url();
    assert_exactly("read of the replicas", &read_job(&url, "om", lo, hi).await, &want);

    // Killed after uploading the first merged block, before marking its sources.
    compactor.options_mut().env = vec![("HEDDLE_FAILPOINT".into(), "compactor-after-upload".into())];
    let _ = compactor.restart();
    assert!(
        compactor.wait_exit(WAIT)
            && compactor
                .log_tail(5)
                .contains("failpoint compactor-after-upload reached"),
        "the compactor did not stop after its upload\n{}",
        compactor.log_tail(30)
    );
    let blocks = bucket_blocks(&s3);
    assert_eq!(blocks.len(), 7, "one merged block more: {blocks:?}");
    assert!(
        blocks.iter().all(|(_, complete, marked)| *complete && !marked),
        "{blocks:?}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_exactly("read after the first crash", &read_job(&url, "om", lo, hi).await, &want);

    // Killed after marking the sources of the second range's merge; the first range's sources are marked
    // as superseded by the merged block the first run left.
    compactor.options_mut().env = vec![("HEDDLE_FAILPOINT".into(), "compactor-after-mark".into())];
    let _ = compactor.restart();
    assert!(
        compactor.wait_exit(WAIT) && compactor.log_tail(5).contains("failpoint compactor-after-mark reached"),
        "the compactor did not stop after marking\n{}",
        compactor.log_tail(30)
    );
    let blocks = bucket_blocks(&s3);
    assert_eq!(
        live_blocks(&s3).len(),
        2,
        "two merged blocks, every source marked: {blocks:?}"
    );
    assert_eq!(blocks.len(), 8, "nothing deleted yet: {blocks:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_exactly(
        "read after the second crash",
        &read_job(&url, "om", lo, hi).await,
        &want,
    );

    // No more failpoints, a pass every second: the marked blocks go, two blocks are left, each sample once.
    compactor.options_mut().env.clear();
    for a in &mut compactor.options_mut().args {
        if a.starts_with("--compactor.compaction-interval=") {
            *a = "--compactor.compaction-interval=1s".to_owned();
        }
    }
    compactor.restart().unwrap();
    assert!(
        wait_until(WAIT, || bucket_blocks(&s3).len() == 2),
        "marked blocks were not deleted: {:?}\n{}",
        bucket_blocks(&s3),
        compactor.log_tail(30)
    );
    let blocks = live_blocks(&s3);
    let got = judge(&promtool, &s3, &blocks, scratch.path(), "compacted");
    assert_exactly("promtool dump after the crashes", &got, &want);
    for ulid in &blocks {
        let m = meta(&s3, ulid);
        assert_eq!(m["compaction"]["level"], 2, "{m}");
        assert_eq!(m["thanos"]["labels"]["__org_id__"], TENANT, "the tenant is named: {m}");
    }
    assert_exactly("read after compaction", &read_job(&url, "om", lo, hi).await, &want);

    // A day of retention for the tenant, picked up without a restart: the older range goes, nothing else.
    std::fs::write(
        &runtime_config,
        format!("overrides:\n  {TENANT}:\n    compactor_blocks_retention_period: 24h\n"),
    )
    .unwrap();
    assert!(
        wait_until(WAIT, || bucket_blocks(&s3).len() == 1),
        "retention did not delete the older block: {:?}\n{}",
        bucket_blocks(&s3),
        compactor.log_tail(30)
    );
    let left = live_blocks(&s3);
    assert_eq!(meta(&s3, &left[0])["minTime"], new, "the recent range is kept");
    let got = judge(&promtool, &s3, &left, scratch.path(), "retention");
    assert_exactly("promtool dump after retention", &got, &new_want);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_exactly("read after retention", &read_job(&url, "om", lo, hi).await, &new_want);
}

/// The compactor killed (abort, as `kill -9`) at each step between those `promtool_blocks_through_crashes_and_retention`
/// covers: after the first source of a group is downloaded, mid-merge (chunks on local disk, no index), with the
/// merged block's files uploaded but not its `meta.json`, and in the middle of deleting a source (its
/// `meta.json` gone, the rest not). After each kill a querier reads exactly the replicas' samples (no block
/// half visible, no sample lost or doubled); restarted without failpoints, the compactor leaves one block per
/// range, with the partial upload removed, and promtool reads exactly the same samples.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compactor_killed_at_every_step_loses_and_doubles_nothing() {
    let Some(promtool) = promtool() else { return };
    let s3 = S3Server::start().expect("s3s-fs starts");
    let scratch = tempfile::tempdir().unwrap();
    let Replicas { old, new, want, .. } = upload_replicas(&promtool, &s3, scratch.path()).await;
    let mut args = reader_args();
    args.extend(s3.heddle_args());
    args.push("--compactor.first-level-compaction-wait-period=24h".to_owned());
    let reader = HeddleProcess::start(HeddleOptions {
        args,
        ..HeddleOptions::default()
    })
    .expect("reader starts");
    let (lo, hi) = (old, new + RANGE_MS);
    let url = reader.prometheus_url();
    assert_exactly("read of the replicas", &read_job(&url, "om", lo, hi).await, &want);

    let mut compactor = start_compactor(
        &s3,
        "1h",
        &[
            VERTICAL_ONLY.to_owned(),
            "--compactor.partial-block-deletion-delay=1s".to_owned(),
        ],
    );
    for point in [
        "compactor-mid-download",
        "compactor-mid-merge",
        "upload-before-meta",
        "delete-after-meta",
    ] {
        compactor.options_mut().env = vec![("HEDDLE_FAILPOINT".into(), point.into())];
        let _ = compactor.restart();
        assert!(
            compactor.wait_exit(WAIT) && compactor.log_tail(5).contains(&format!("failpoint {point} reached")),
            "the compactor did not stop at {point}\n{}",
            compactor.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_exactly(
            &format!("read after a kill at {point}"),
            &read_job(&url, "om", lo, hi).await,
            &want,
        );
    }
    compactor.options_mut().env.clear();
    for a in &mut compactor.options_mut().args {
        if a.starts_with("--compactor.compaction-interval=") {
            *a = "--compactor.compaction-interval=1s".to_owned();
        }
    }
    compactor.restart().unwrap();
    assert!(
        wait_until(WAIT, || bucket_blocks(&s3).len() == 2 && live_blocks(&s3).len() == 2),
        "not one block per range, or a partial or half-deleted block left: {:?}\n{}",
        bucket_blocks(&s3),
        compactor.log_tail(30)
    );
    let got = judge(&promtool, &s3, &live_blocks(&s3), scratch.path(), "after every kill");
    assert_exactly("promtool dump after every kill", &got, &want);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_exactly("read after every kill", &read_job(&url, "om", lo, hi).await, &want);
}

/// Blocks written by Prometheus itself are compacted by Heddle. Prometheus 2.42 (5-minute blocks, so it cuts
/// some within the test) receives half an hour of samples over remote write and compacts its head into blocks;
/// each block goes to the bucket three times under new ULIDs, as three replicas would ship it; the compactor
/// merges each trio into one block, and promtool reads exactly what it read from Prometheus' blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_written_by_prometheus_are_compacted() {
    let Some(promtool) = promtool() else { return };
    let Some(prometheus) = prometheus_tool("PROMETHEUS_BIN", "prometheus", "compactor") else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let data = scratch.path().join("prometheus");
    let config = scratch.path().join("prometheus.yml");
    std::fs::write(&config, "global:\n  scrape_interval: 1m\n").unwrap();
    let port = heddle_testkit::free_port().unwrap();
    let mut cmd = Command::new(&prometheus);
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", data.display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .args([
            "--web.enable-remote-write-receiver",
            "--storage.tsdb.min-block-duration=5m",
            "--storage.tsdb.max-block-duration=5m",
        ]);
    let mut server = heddle_testkit::ManagedProcess::spawn("prometheus", cmd, scratch.path()).unwrap();
    server
        .wait_http_ok(([127, 0, 0, 1], port).into(), "/-/ready", Duration::from_secs(60))
        .expect("prometheus ready");
    let http = http_client(Duration::from_secs(30)).unwrap();
    let step = 15_000;
    let start = (now_ms() - 40 * 60_000).div_euclid(300_000) * 300_000;
    // One request per timestamp, in time order: Prometheus' head takes nothing older than half a block
    // range before its newest sample.
    for k in 0..120i64 {
        let t = start + k * step;
        let timeseries = (0..10)
            .map(|s| {
                let instance = format!("p-{s}");
                heddle_testkit::timeseries(
                    &[("__name__", "prom_metric"), ("instance", &instance), ("job", "prom")],
                    &[(t, (k * 3 + s) as f64)],
                )
            })
            .collect();
        let req = heddle_proto::prometheus::WriteRequest {
            timeseries,
            metadata: vec![],
        };
        let url = format!("http://127.0.0.1:{port}/api/v1/write");
        let out = push(&http, &url, None, &req).await.expect("push to prometheus");
        assert_eq!(out.status / 100, 2, "{}", out.body);
    }
    let blocks_of = |dir: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.join("meta.json").is_file())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(
        wait_until(Duration::from_secs(120), || blocks_of(&data).len() >= 3),
        "prometheus wrote no blocks\n{}",
        server.log_tail(30)
    );
    let status = server.sigterm_and_wait(heddle_testkit::DEFAULT_STOP_TIMEOUT).unwrap();
    assert!(status.success(), "{}", server.log_tail(30));
    let written = blocks_of(&data);
    // What Prometheus' own blocks hold, as promtool reads them (its head left out: an empty WAL beside them).
    let only_blocks = scratch.path().join("prometheus-blocks");
    std::fs::create_dir_all(only_blocks.join("wal")).unwrap();
    for block in &written {
        copy_dir(block, &only_blocks.join(block.file_name().unwrap())).unwrap();
    }
    let mut cmd = Command::new(&promtool);
    cmd.args(["tsdb", "dump"]).arg(&only_blocks);
    let out = run_bounded(cmd, PROMTOOL_TIMEOUT).expect("promtool tsdb dump runs");
    assert!(out.status.success(), "{}", out.stderr);
    let want = parse_dump(&out.stdout).unwrap();
    assert!(!want.is_empty());

    let s3 = S3Server::start().expect("s3s-fs starts");
    let bucket = bucket(&s3);
    let tenant = TenantId::new(TENANT).unwrap();
    for block in &written {
        for r in 0..3 {
            let ulid = heddle_tsdb::block::new_ulid().to_string();
            let copy = scratch.path().join(format!("replica-{r}")).join(&ulid);
            copy_dir(block, &copy).unwrap();
            let mut meta: serde_json::Value =
                serde_json::from_slice(&std::fs::read(copy.join("meta.json")).unwrap()).unwrap();
            meta["ulid"] = serde_json::Value::String(ulid.clone());
            std::fs::write(copy.join("meta.json"), serde_json::to_vec(&meta).unwrap()).unwrap();
            bucket.upload_block(&tenant, &copy).await.unwrap();
        }
    }
    let compactor = start_compactor(&s3, "1s", &[VERTICAL_ONLY.to_owned()]);
    assert!(
        wait_until(WAIT, || bucket_blocks(&s3).len() == written.len()
            && live_blocks(&s3).len() == written.len()),
        "not one block per Prometheus block: {:?}\n{}",
        bucket_blocks(&s3),
        compactor.log_tail(30)
    );
    let got = judge(&promtool, &s3, &live_blocks(&s3), scratch.path(), "prometheus blocks");
    assert_exactly("promtool dump of the compacted Prometheus blocks", &got, &want);
}

/// A compactor stopped gracefully in the middle of a merge releases the tenant's lock, so a restarted one,
/// whose holder name may differ (a new pod), compacts the tenant at once instead of waiting out the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compactor_stopped_mid_merge_releases_its_lock() {
    let Some(promtool) = promtool() else { return };
    let s3 = S3Server::start().expect("s3s-fs starts");
    let scratch = tempfile::tempdir().unwrap();
    let Replicas { want, .. } = upload_replicas(&promtool, &s3, scratch.path()).await;
    // The lock is the highest numbered object of `<tenant>/compactor-lock/`; released, its lease ended at 0.
    let lock_dir = s3.bucket_dir().join(TENANT).join("compactor-lock");
    let lock = || -> Option<serde_json::Value> {
        let mut names: Vec<_> = std::fs::read_dir(&lock_dir).ok()?.flatten().map(|e| e.path()).collect();
        names.sort();
        serde_json::from_slice(&std::fs::read(names.last()?).ok()?).ok()
    };
    let mut opts = compactor_options(&s3, "1s", &[VERTICAL_ONLY.to_owned()]);
    opts.env = vec![("HEDDLE_FAILPOINT".into(), "compactor-mid-merge=sleep:60000".into())];
    let mut compactor = HeddleProcess::start(opts).expect("compactor starts");
    assert!(
        wait_until(WAIT, || compactor
            .log_tail(20)
            .contains("failpoint compactor-mid-merge reached: sleeping")),
        "the compactor did not reach its merge\n{}",
        compactor.log_tail(30)
    );
    let held = lock().expect("the tenant is locked during the merge");
    assert!(held["expires_at_ms"].as_i64() > Some(0), "{held}");
    let (status, took) = compactor.sigterm_and_wait_within(Duration::from_secs(30)).unwrap();
    assert!(status.success(), "{status}\n{}", compactor.log_tail(30));
    assert!(
        took < Duration::from_secs(30),
        "the stop waited for the merge: {took:?}"
    );
    let left = lock().expect("a released lock stays as its newest generation");
    assert_eq!(
        (&left["holder"], left["expires_at_ms"].as_i64()),
        (&held["holder"], Some(0)),
        "the lock was left held\n{}",
        compactor.log_tail(30)
    );
    assert!(
        compactor.log_tail(30).contains("released the tenant's lock"),
        "{}",
        compactor.log_tail(30)
    );

    // Another compactor (another holder name) finishes the work at once.
    let other = start_compactor(&s3, "1s", &[VERTICAL_ONLY.to_owned()]);
    assert!(
        wait_until(WAIT, || bucket_blocks(&s3).len() == 2),
        "the next compactor did not compact: {:?}\n{}",
        bucket_blocks(&s3),
        other.log_tail(30)
    );
    let got = judge(
        &promtool,
        &s3,
        &live_blocks(&s3),
        scratch.path(),
        "after a stop mid-merge",
    );
    assert_exactly("promtool dump after a stop mid-merge", &got, &want);
}

/// Two compactor processes on one bucket, started together and passing every second: one block per range is
/// left and promtool reads exactly the samples of the replicas. The tenant's lock saves work; it is not what
/// keeps the answer right: when both start at the same instant, both sometimes merge the same group (s3s-fs
/// answers `If-None-Match: *` by checking that the file does not exist and then writing it, so two creates at
/// once can both succeed; S3's conditional writes are atomic), and the later block is then marked as superseded (and a pass whose sources the other deleted fails and is
/// retried). So each sample is merged once or twice in all, never more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_compactors_share_one_bucket() {
    let Some(promtool) = promtool() else { return };
    let s3 = S3Server::start().expect("s3s-fs starts");
    let scratch = tempfile::tempdir().unwrap();
    let Replicas { want, .. } = upload_replicas(&promtool, &s3, scratch.path()).await;
    let (a, b) = std::thread::scope(|scope| {
        let start = || start_compactor(&s3, "1s", &[VERTICAL_ONLY.to_owned()]);
        let a = scope.spawn(start);
        let b = scope.spawn(start);
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(
        wait_until(WAIT, || bucket_blocks(&s3).len() == 2),
        "not one block per range: {:?}\n{}\n{}",
        bucket_blocks(&s3),
        a.log_tail(20),
        b.log_tail(20)
    );
    let samples: usize = want.values().map(Vec::len).sum();
    // Two more passes each, so neither is mid-merge when their counters are read.
    let passes = |p: &HeddleProcess| scrape(p, "heddle_compactor_runs_completed_total");
    let (pa, pb) = (passes(&a), passes(&b));
    assert!(
        wait_until(WAIT, || passes(&a) >= pa + 2.0 && passes(&b) >= pb + 2.0),
        "the compactors stopped passing"
    );
    let written =
        scrape(&a, "heddle_compactor_samples_written_total") + scrape(&b, "heddle_compactor_samples_written_total");
    assert!(
        (samples..=2 * samples).contains(&(written as usize)),
        "{written} samples merged for {samples}: each group once by one compactor, or once by each\n{}\n{}",
        a.log_tail(40),
        b.log_tail(40)
    );
    let got = judge(&promtool, &s3, &live_blocks(&s3), scratch.path(), "two compactors");
    assert_exactly("promtool dump after two compactors", &got, &want);
}

/// `-querier.query-store-after`: the bucket answers only the part of a range older than it, the ingesters the
/// rest. The bucket holds an old hour (value 1) and, like a block an ingester shipped, the recent window again
/// at other timestamps (value 2); the ingester holds the recent window (value 3). With the bucket cut at an
/// hour before now, a read of six hours returns exactly the old hour from the bucket and the recent window
/// from the ingester: no sample of the bucket's recent copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bucket_answers_only_past_query_store_after() {
    let Some(promtool) = promtool() else { return };
    let s3 = S3Server::start().expect("s3s-fs starts");
    let scratch = tempfile::tempdir().unwrap();
    let now = now_ms();
    let minute = 60_000;
    let old = (now - 5 * 3600 * 1000).div_euclid(minute) * minute;
    let recent = (now - 40 * minute).div_euclid(minute) * minute;
    let labels = [("__name__", "split_metric"), ("job", "split")];
    let om = scratch.path().join("split.om");
    let mut text = String::from("# TYPE split_metric gauge\n");
    let line = |t: i64, v: f64| format!("split_metric{{job=\"split\"}} {v} {}.{:03}\n", t / 1000, t % 1000);
    for k in 0..60 {
        text.push_str(&line(old + k * minute, 1.0));
    }
    for k in 0..20 {
        text.push_str(&line(recent + k * minute + 30_000, 2.0));
    }
    text.push_str("# EOF\n");
    std::fs::write(&om, text).unwrap();
    upload_openmetrics(&promtool, &bucket(&s3), &om, &scratch.path().join("blocks")).await;

    let mut args = reader_args();
    args.extend(s3.heddle_args());
    args.extend(
        [
            "--querier.query-store-after=1h",
            "--compactor.first-level-compaction-wait-period=24h",
        ]
        .map(String::from),
    );
    let heddle = HeddleProcess::start(HeddleOptions {
        args,
        ..HeddleOptions::default()
    })
    .expect("heddle starts");
    let http = http_client(Duration::from_secs(30)).unwrap();
    let pushed: Vec<(i64, f64)> = (0..20).map(|k| (recent + k * minute, 3.0)).collect();
    let req = heddle_proto::prometheus::WriteRequest {
        timeseries: vec![heddle_testkit::timeseries(&labels, &pushed)],
        metadata: vec![],
    };
    let out = push(&http, &heddle.push_url(), None, &req).await.expect("push");
    assert_eq!(out.status, 200, "{}", out.body);

    let got = read_job(&heddle.prometheus_url(), "split", now - 6 * 3600 * 1000, now).await;
    let want_samples: Vec<(i64, u64)> = (0..60)
        .map(|k| (old + k * minute, 1f64.to_bits()))
        .chain(pushed.iter().map(|&(t, v)| (t, v.to_bits())))
        .collect();
    let mut want = Dump::new();
    want.insert(heddle_model::Labels::from_unsorted(labels).unwrap(), want_samples);
    assert_exactly("a read across the store-after boundary", &got, &want);
}

/// One OpenMetrics file of `series` gauges, one sample a minute from `start` for `minutes` minutes, and the
/// samples it holds.
fn openmetrics_week(dir: &Path, start: i64, minutes: i64, series: usize) -> (PathBuf, Dump) {
    use std::io::Write as _;
    let path = dir.join("week.om");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let mut want = Dump::new();
    writeln!(out, "# TYPE week_metric gauge").unwrap();
    for s in 0..series {
        let instance = format!("i-{s}");
        let labels = heddle_model::Labels::from_unsorted([
            ("__name__", "week_metric"),
            ("instance", &instance),
            ("job", "week"),
        ])
        .unwrap();
        let points = want.entry(labels).or_default();
        for k in 0..minutes {
            let t = start + k * 60_000;
            let v = ((k * 13 + s as i64 * 7) % 1000) as f64;
            writeln!(
                out,
                "week_metric{{instance=\"{instance}\",job=\"week\"}} {v} {}.{:03}",
                t / 1000,
                t % 1000
            )
            .unwrap();
            points.push((t, v.to_bits()));
        }
    }
    writeln!(out, "# EOF").unwrap();
    out.flush().unwrap();
    (path, want)
}

/// A day of three replicas, 2 h blocks made by promtool (plus two hours, so the day's windows are finished),
/// becomes one 24 h block and one 2 h block under the default ranges (2h, 12h, 24h): each level of
/// compaction in turn, and promtool reads exactly one replica's samples.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicated_day_becomes_one_24h_block() {
    let Some(promtool) = promtool() else { return };
    const DAY_MS: i64 = 24 * 3600 * 1000;
    let s3 = S3Server::start().expect("s3s-fs starts");
    let scratch = tempfile::tempdir().unwrap();
    let start = (now_ms() - 3 * DAY_MS).div_euclid(DAY_MS) * DAY_MS;
    let (file, want) = openmetrics_week(scratch.path(), start, 24 * 60 + 120, 5);
    let bucket = bucket(&s3);
    for r in 0..3 {
        upload_openmetrics(&promtool, &bucket, &file, &scratch.path().join(format!("blocks-{r}"))).await;
    }
    assert_eq!(live_blocks(&s3).len(), 3 * 13, "13 two-hour blocks per replica");
    let compactor = start_compactor(&s3, "1s", &[]);
    let spans = || -> Vec<i64> {
        let mut spans: Vec<i64> = live_blocks(&s3)
            .iter()
            .filter_map(|u| {
                let path = s3.bucket_dir().join(TENANT).join(u).join("meta.json");
                let m: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
                Some(m["maxTime"].as_i64()? - m["minTime"].as_i64()?)
            })
            .collect();
        spans.sort();
        spans
    };
    assert!(
        wait_until(WAIT, || bucket_blocks(&s3).len() == 2
            && spans().last().is_some_and(|&s| s > DAY_MS / 2)),
        "not one day block and one 2 h block: {:?}\n{}",
        bucket_blocks(&s3),
        compactor.log_tail(30)
    );
    let blocks = live_blocks(&s3);
    let levels: Vec<i64> = blocks
        .iter()
        .map(|u| meta(&s3, u)["compaction"]["level"].as_i64().unwrap())
        .collect();
    assert!(
        levels.iter().any(|&l| l >= 4),
        "the day went through 2h, 12h and 24h: levels {levels:?}"
    );
    let got = judge(&promtool, &s3, &blocks, scratch.path(), "a day");
    assert_exactly("promtool dump of the compacted day", &got, &want);
}

/// Seconds of one range query over the whole week through `url`'s Prometheus API, and its answer.
async fn time_week_query(http: &reqwest::Client, url: &str, start: i64, end: i64) -> (f64, serde_json::Value) {
    let q = format!(
        "{url}/api/v1/query_range?query=sum%20by%20(instance)%20(avg_over_time(week_metric%5B1h%5D))&start={}&end={}&step=3600",
        start / 1000,
        end / 1000
    );
    let t = std::time::Instant::now();
    let resp = http.get(&q).send().await.unwrap_or_else(|e| panic!("GET {q}: {e}"));
    let status = resp.status();
    let body = resp.text().await.unwrap();
    let elapsed = t.elapsed().as_secs_f64();
    assert!(status.is_success(), "{status}: {body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    (elapsed, v["data"].clone())
}

/// Query time for a 7-day range before compaction (three replicas of 85 two-hour blocks, each sample read
/// three times and de-duplicated) and after (the compactor's default ranges leave seven 24 h blocks and the
/// newest 2 h one). A measurement, run by hand (`loadtest/README.md`); it prints its figures and checks that both
/// answers are the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: cargo test -p heddle-integration --test compactor -- --ignored --nocapture week"]
async fn week_query_before_and_after_compaction() {
    let Some(promtool) = promtool() else { return };
    const DAY_MS: i64 = 24 * 3600 * 1000;
    let series = 100;
    let s3 = S3Server::start().expect("s3s-fs starts");
    let scratch = tempfile::tempdir().unwrap();
    let start = (now_ms() - 9 * DAY_MS).div_euclid(DAY_MS) * DAY_MS;
    let end = start + 7 * DAY_MS;
    // Two hours more than the week: the compactor compacts a window once a newer block exists, as a week in
    // the middle of a tenant's history would have.
    let (file, _) = openmetrics_week(scratch.path(), start, 7 * 24 * 60 + 120, series);
    let bucket = bucket(&s3);
    // Three runs of promtool on the same file: three replicas with identical samples and their own ULIDs.
    for r in 0..3 {
        upload_openmetrics(&promtool, &bucket, &file, &scratch.path().join(format!("blocks-{r}"))).await;
    }
    let before_blocks = live_blocks(&s3).len();
    let mut args = reader_args();
    args.extend(s3.heddle_args());
    args.push("--compactor.first-level-compaction-wait-period=24h".to_owned());
    let mut reader = HeddleProcess::start(HeddleOptions {
        args,
        ..HeddleOptions::default()
    })
    .expect("reader starts");
    let http = http_client(Duration::from_secs(600)).unwrap();
    let url = reader.prometheus_url();
    let runs = 5;
    let measure = |url: String| {
        let http = http.clone();
        async move {
            let (cold, answer) = time_week_query(&http, &url, start, end).await;
            let mut warm = Vec::new();
            for _ in 0..runs {
                let (t, again) = time_week_query(&http, &url, start, end).await;
                assert_eq!(again, answer);
                warm.push(t);
            }
            warm.sort_by(f64::total_cmp);
            (cold, warm[runs / 2], answer)
        }
    };
    let (cold_before, warm_before, answer_before) = measure(url.clone()).await;

    let compactor = start_compactor(&s3, "1s", &[]);
    assert!(
        wait_until(Duration::from_secs(1200), || {
            let blocks = bucket_blocks(&s3);
            let days = blocks
                .iter()
                .filter(|(u, ..)| {
                    // The compactor may delete a block between the listing and this read.
                    let path = s3.bucket_dir().join(TENANT).join(u).join("meta.json");
                    let m: serde_json::Value = std::fs::read(path)
                        .ok()
                        .and_then(|b| serde_json::from_slice(&b).ok())
                        .unwrap_or_default();
                    m["maxTime"].as_i64().unwrap_or(0) - m["minTime"].as_i64().unwrap_or(0) > DAY_MS / 2
                })
                .count();
            blocks.len() == 8 && days == 7 && blocks.iter().all(|(_, complete, marked)| *complete && !marked)
        }),
        "not compacted into seven days: {:?}\n{}",
        bucket_blocks(&s3),
        compactor.log_tail(20)
    );
    drop(compactor);
    // A fresh reader: every block opened again, as after a querier restart.
    reader.restart().expect("reader restarts");
    let (cold_after, warm_after, answer_after) = measure(reader.prometheus_url()).await;
    assert_eq!(answer_after, answer_before, "the same answer from one copy");
    println!(
        "week query ({series} series, one sample a minute, 7 days, step 1h): before compaction {before_blocks} \
         blocks, first query {cold_before:.3} s, median of {runs} more {warm_before:.3} s; after, 7 + 1 blocks, \
         first {cold_after:.3} s, median {warm_after:.3} s; ratio (before/after) first {:.2}x, median {:.2}x",
        cold_before / cold_after,
        warm_before / warm_after,
    );
}
