//! Blocks end to end, with a real S3-compatible server (s3s-fs) and promtool as the judge: heddle compacts its
//! head into Prometheus blocks (when the head spans 1.5 block ranges, and on `/ingester/flush`), ships them to
//! the bucket, and the querier reads them back from the bucket once the ingester no longer has them.
//!
//! Every test pushes a deterministic workload whose timestamps span several 2 h block ranges (hours in the past,
//! one sample a minute), then judges what reached the bucket: each block directory is read by
//! `promtool tsdb analyze` and all of them together by `promtool tsdb dump`, which must list every acknowledged
//! sample exactly once and nothing else.
//!
//! - `compacts_ships_and_serves_from_the_bucket`: automatic compaction, flush, promtool, then remote read from a
//!   fresh ingester that only has the bucket.
//! - `bucket_outage_loses_nothing`: the S3 server is down while blocks are cut; they stay local (not deleted by
//!   the retention), and ship exactly once when it returns.
//! - `crash_during_compaction_and_upload`: heddle aborts (a failpoint, like `kill -9` at that instant) after
//!   writing a block but before truncating its head, and during an upload before `meta.json`; after restarts the
//!   bucket holds every sample exactly once.

use heddle_testkit::promtool::{Dump, check, parse_dump};
use heddle_testkit::s3::S3Server;
use heddle_testkit::{
    HeddleOptions, HeddleProcess, ReadClient, ReadMode, SeriesGen, copy_dir, eq, http_client, now_ms, prometheus_tool,
    push, query, run_bounded, wait_until,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const SERIES: usize = 60;
const METRICS: usize = 6;
const INTERVAL_MS: i64 = 60_000;
/// Five hours at one sample a minute: more than 1.5 block ranges, so the oldest range is compacted on its own.
const ROUNDS: u32 = 300;
const RANGE_MS: i64 = 2 * 3600 * 1000;
const TENANT: &str = "anonymous";
const JOB: &str = "shipping";
const WAIT: Duration = Duration::from_secs(60);
const PROMTOOL_TIMEOUT: Duration = Duration::from_secs(120);

/// A workload starting at a block-range boundary six hours ago, so its blocks are predictable.
fn workload(seed: u64) -> SeriesGen {
    let start = (now_ms() - 6 * 3600 * 1000).div_euclid(RANGE_MS) * RANGE_MS;
    let mut g = SeriesGen::new(seed, SERIES, METRICS, start);
    g.interval_ms = INTERVAL_MS;
    g.job = JOB.to_owned();
    g
}

/// What the generator sent for rounds `0..rounds`, in promtool's dump shape.
fn expected(g: &SeriesGen, rounds: u32) -> Dump {
    (0..g.series)
        .map(|i| {
            let points = (0..rounds)
                .map(|r| (g.timestamp(i, r), g.value(i, r).to_bits()))
                .collect();
            (g.model_labels(i), points)
        })
        .collect()
}

/// Flags every test's heddle gets: the S3 bucket, fast compaction, shipping and bucket sync ticks, and a backfill
/// window for the workload's history.
fn heddle_args(s3: &S3Server, extra: &[&str]) -> Vec<String> {
    let mut args = s3.heddle_args();
    args.extend(
        [
            "--blocks-storage.tsdb.head-compaction-interval=500ms",
            "--blocks-storage.tsdb.ship-interval=500ms",
            "--blocks-storage.bucket-store.sync-interval=500ms",
            // The workload starts six hours back, into a fresh tenant's empty head.
            "--blocks-storage.tsdb.empty-head-sample-age-limit=24h",
        ]
        .map(String::from),
    );
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn start_heddle(args: Vec<String>) -> HeddleProcess {
    HeddleProcess::start(HeddleOptions {
        args,
        ..HeddleOptions::default()
    })
    .expect("heddle starts")
}

/// Pushes rounds `rounds` of every series, ten rounds a request; every request must be acknowledged.
async fn push_all(heddle: &HeddleProcess, g: &SeriesGen, rounds: std::ops::Range<u32>) {
    let http = http_client(Duration::from_secs(30)).unwrap();
    let mut r = rounds.start;
    while r < rounds.end {
        let to = (r + 10).min(rounds.end);
        let out = push(&http, &heddle.push_url(), None, &g.write_request(0..g.series, r..to))
            .await
            .expect("push sent");
        assert!(
            out.is_success(),
            "push of rounds {r}..{to} refused: {out:?}\n{}",
            heddle.log_tail(30)
        );
        r = to;
    }
}

/// ULIDs of the complete blocks (with `meta.json`) of `TENANT` in the bucket directory s3s-fs serves.
fn bucket_blocks(s3: &S3Server) -> Vec<String> {
    list_blocks(&s3.bucket_dir().join(TENANT))
}

/// ULID-named directories under `dir` that have a `meta.json`, sorted.
fn list_blocks(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter(|e| e.path().join("meta.json").is_file())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.len() == 26)
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Copies the bucket's blocks of `TENANT` into `scratch/<what>` (plus the empty `wal/` promtool wants), runs
/// `promtool tsdb analyze` on each block and `promtool tsdb dump` on all of them, and returns the dump.
fn judge_bucket(promtool: &Path, s3: &S3Server, scratch: &Path, what: &str) -> Dump {
    let dir = scratch.join(what);
    std::fs::create_dir_all(dir.join("wal")).unwrap();
    let blocks = bucket_blocks(s3);
    assert!(!blocks.is_empty(), "{what}: no complete block in the bucket");
    for ulid in &blocks {
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
        let meta: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join(ulid).join("meta.json")).unwrap()).unwrap();
        assert_eq!(
            meta["thanos"]["labels"]["__org_id__"], TENANT,
            "{what}: block {ulid} names its tenant"
        );
        assert_eq!(
            meta["compaction"]["level"], 1,
            "{what}: block {ulid} is a level-1 block"
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

fn assert_exactly(what: &str, got: &Dump, want: &Dump) {
    let problems = check(got, want, &Dump::new());
    assert!(
        problems.is_empty(),
        "{what}: {} problems, first: {:?}",
        problems.len(),
        &problems[..problems.len().min(5)]
    );
}

/// Every sample of the workload read back through remote read, compared with what was sent.
async fn assert_readable(heddle: &HeddleProcess, g: &SeriesGen, want: &Dump, what: &str) {
    let http = http_client(Duration::from_secs(60)).unwrap();
    let client = ReadClient::new(http, &heddle.prometheus_url(), None);
    let (start, end) = g.time_range(ROUNDS);
    let answer = client
        .read(ReadMode::Samples, vec![query(start, end, vec![eq("job", JOB)])])
        .await
        .unwrap_or_else(|e| panic!("{what}: remote read: {e}\n{}", heddle.log_tail(30)));
    let got: Dump = answer
        .into_iter()
        .flatten()
        .map(|s| (s.labels, s.samples.iter().map(|p| (p.t, p.v.to_bits())).collect()))
        .collect();
    assert_exactly(what, &got, want);
}

/// `POST /ingester/flush?wait=true`: the status and body, or `None` if the process died answering it.
async fn flush(heddle: &HeddleProcess) -> Option<(u16, String)> {
    let resp = http_client(Duration::from_secs(120))
        .unwrap()
        .post(format!("{}/ingester/flush?wait=true", heddle.url()))
        .send()
        .await
        .ok()?;
    Some((resp.status().as_u16(), resp.text().await.unwrap_or_default()))
}

fn promtool() -> Option<PathBuf> {
    prometheus_tool("PROMTOOL_BIN", "promtool", "shipping")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compacts_ships_and_serves_from_the_bucket() {
    let Some(promtool) = promtool() else { return };
    let s3 = S3Server::start().expect("s3s-fs starts");
    let g = workload(1);
    let mut heddle = start_heddle(heddle_args(&s3, &[]));
    push_all(&heddle, &g, 0..ROUNDS).await;

    // The head spans 5 h > 1.5 x 2 h: the oldest range becomes a block without being asked, and ships.
    assert!(
        wait_until(WAIT, || bucket_blocks(&s3).len() == 1),
        "the due block range was not compacted and shipped: bucket has {:?}\n{}",
        bucket_blocks(&s3),
        heddle.log_tail(30)
    );
    // A flush cuts the rest (two more ranges) and ships it now.
    let resp = flush(&heddle).await;
    assert!(matches!(&resp, Some((204, _))), "flush failed: {resp:?}");
    assert_eq!(
        bucket_blocks(&s3).len(),
        3,
        "one block per 2 h range: {:?}",
        bucket_blocks(&s3)
    );

    let scratch = tempfile::tempdir().unwrap();
    let want = expected(&g, ROUNDS);
    let got = judge_bucket(&promtool, &s3, scratch.path(), "after flush");
    assert_exactly("bucket blocks after flush", &got, &want);
    assert_readable(&heddle, &g, &want, "read from head, local blocks and bucket").await;

    // A replacement ingester with an empty disk: everything comes from the bucket.
    heddle.sigterm_and_wait().unwrap();
    std::fs::remove_dir_all(heddle.data_dir()).unwrap();
    heddle.restart().unwrap();
    assert_readable(&heddle, &g, &want, "read from the bucket only").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucket_outage_loses_nothing() {
    let Some(promtool) = promtool() else { return };
    let mut s3 = S3Server::start().expect("s3s-fs starts");
    let g = workload(2);
    // Blocks are hours old, so a 1 m retention makes them deletable once they are shipped and the querier can
    // list them (the shipped-blocks grace: the 500 ms sync interval, no bucket index to wait for), not before.
    let heddle = start_heddle(heddle_args(
        &s3,
        &[
            "--blocks-storage.tsdb.retention-period=1m",
            "--blocks-storage.bucket-store.bucket-index.max-stale-period=0s",
        ],
    ));
    s3.stop().unwrap();
    push_all(&heddle, &g, 0..ROUNDS).await;
    let resp = flush(&heddle).await;
    assert!(
        matches!(&resp, Some((500..=599, _))),
        "a flush that cannot upload must fail with 5xx, got {resp:?}"
    );
    let tenant_dir = heddle.data_dir().join(TENANT);
    let local = list_blocks(&tenant_dir);
    assert_eq!(local.len(), 3, "blocks were cut and kept locally: {local:?}");
    // Several ship ticks fail meanwhile; nothing local may go.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        list_blocks(&tenant_dir),
        local,
        "local blocks deleted before they were in the bucket"
    );

    s3.restart().unwrap();
    assert!(
        wait_until(WAIT, || bucket_blocks(&s3) == local),
        "blocks did not ship after the bucket came back: bucket {:?}, local {local:?}\n{}",
        bucket_blocks(&s3),
        heddle.log_tail(30)
    );
    assert!(
        wait_until(WAIT, || list_blocks(&tenant_dir).is_empty()),
        "shipped blocks past the retention were not deleted locally: {:?}",
        list_blocks(&tenant_dir)
    );
    let scratch = tempfile::tempdir().unwrap();
    let got = judge_bucket(&promtool, &s3, scratch.path(), "after outage");
    assert_exactly("bucket blocks after the outage", &got, &expected(&g, ROUNDS));
    assert_readable(&heddle, &g, &expected(&g, ROUNDS), "read after the outage").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_during_compaction_and_upload() {
    let Some(promtool) = promtool() else { return };
    let s3 = S3Server::start().expect("s3s-fs starts");
    let g = workload(3);
    let mut opts = HeddleOptions {
        args: heddle_args(&s3, &[]),
        ..HeddleOptions::default()
    };
    // The first half of the data, then a crash right after the first block is written (head not truncated).
    opts.env.push(("HEDDLE_FAILPOINT".into(), "compact-after-block".into()));
    let mut heddle = HeddleProcess::start(opts).expect("heddle starts");
    push_all(&heddle, &g, 0..ROUNDS / 2).await;
    let _ = flush(&heddle).await;
    assert!(heddle.wait_exit(WAIT), "the failpoint did not stop heddle");

    // Restart with a crash in the middle of the next upload, before its meta.json.
    heddle.options_mut().env = vec![("HEDDLE_FAILPOINT".into(), "upload-before-meta".into())];
    // The first ship tick runs right after /ready, so the restart may see the process exit before or after it
    // answered ready: either way it must end at the failpoint.
    let _ = heddle.restart();
    assert!(
        heddle.wait_exit(WAIT) && heddle.log_tail(5).contains("failpoint upload-before-meta reached"),
        "the upload failpoint did not stop heddle\n{}",
        heddle.log_tail(30)
    );
    assert!(
        bucket_blocks(&s3).is_empty(),
        "a block without meta.json must not be visible"
    );

    // No more failpoints: the rest of the data, a flush, and every sample exactly once in the bucket.
    heddle.options_mut().env.clear();
    heddle.restart().unwrap();
    push_all(&heddle, &g, ROUNDS / 2..ROUNDS).await;
    let resp = flush(&heddle).await;
    assert!(matches!(&resp, Some((204, _))), "flush failed: {resp:?}");
    let scratch = tempfile::tempdir().unwrap();
    let want = expected(&g, ROUNDS);
    let got = judge_bucket(&promtool, &s3, scratch.path(), "after crashes");
    assert_exactly("bucket blocks after the crashes", &got, &want);
    assert_readable(&heddle, &g, &want, "read after the crashes").await;
}
