//! Blocks through the ingester: a due range is compacted on a tick, queries read head and local blocks as one,
//! a flush ships every block to a (filesystem) bucket, and a restart reopens the blocks without loading their
//! samples into the head again.

use crate::Ingester;
use crate::config::{IngesterConfig, TsdbConfig};
use bytes::Bytes;
use futures::StreamExt;
use heddle_bucket::{Backend, Bucket, BucketConfig, FilesystemConfig};
use heddle_model::TenantId;
use heddle_proto::IngesterClient;
use heddle_proto::ingester::{LabelNamesRequest, LabelValuesRequest, QueryRequest, SeriesRequest};
use heddle_proto::prometheus::{Label, LabelMatcher, Sample, TimeSeries, WriteRequest};
use heddle_server::DiscardedSamples;
use prometheus_client::registry::Registry;
use prost::Message as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

const H2: i64 = 7_200_000;
const STEP: i64 = 60_000;

fn ingester(dir: &Path, bucket_dir: &Path) -> Arc<Ingester> {
    ingester_with(
        bucket_dir,
        TsdbConfig {
            dir: dir.to_path_buf(),
            ..TsdbConfig::default()
        },
    )
}

/// An ingester shipping to a filesystem bucket in `bucket_dir`.
fn ingester_with(bucket_dir: &Path, tsdb: TsdbConfig) -> Arc<Ingester> {
    let mut registry = Registry::default();
    let discarded = DiscardedSamples::register(&mut registry);
    let bucket = Bucket::new(
        &BucketConfig {
            backend: Backend::Filesystem,
            filesystem: FilesystemConfig {
                dir: bucket_dir.to_path_buf(),
            },
            ..BucketConfig::default()
        },
        &mut registry,
    )
    .unwrap();
    Ingester::new(&IngesterConfig::default(), tsdb, Some(bucket), &mut registry, discarded)
}

fn tenant() -> TenantId {
    TenantId::new("team-a").unwrap()
}

/// Two series, one sample a minute over `[from, to)`, value = minute number.
async fn push(ing: &Ingester, from: i64, to: i64) {
    let mut t = from;
    while t < to {
        let end = (t + 60 * STEP).min(to);
        // The ingester's clock follows the samples, as a sender's does.
        ing.set_clock(Arc::new(heddle_model::ManualClock::new(end)));
        let timeseries = ["x", "y"]
            .iter()
            .map(|id| TimeSeries {
                labels: vec![
                    Label {
                        name: "__name__".into(),
                        value: "m".into(),
                    },
                    Label {
                        name: "id".into(),
                        value: (*id).into(),
                    },
                ],
                samples: (t..end)
                    .step_by(STEP as usize)
                    .map(|ts| Sample {
                        value: (ts / STEP) as f64,
                        timestamp: ts,
                    })
                    .collect(),
                ..TimeSeries::default()
            })
            .collect();
        let body = WriteRequest {
            timeseries,
            metadata: Vec::new(),
        }
        .encode_to_vec();
        let r = ing.push(&tenant(), Bytes::from(body)).await.unwrap();
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        t = end;
    }
}

/// Timestamps of every sample the ingester answers for `m`, per series.
/// The sample timestamps of each series of `parts` (block selections), merged series by series.
fn timestamps(parts: Vec<Vec<heddle_tsdb::SeriesChunks>>) -> Vec<Vec<i64>> {
    crate::read::merge_series(parts)
        .iter()
        .map(|s| {
            s.chunks
                .iter()
                .flat_map(|c| heddle_tsdb::chunkenc::decode_xor(&c.data).unwrap())
                .map(|x| x.t)
                .collect()
        })
        .collect()
}

async fn query_all(ing: &Ingester) -> Vec<Vec<i64>> {
    let req = QueryRequest {
        start_timestamp_ms: i64::MIN,
        end_timestamp_ms: i64::MAX,
        matchers: vec![LabelMatcher {
            r#type: 0,
            name: "__name__".into(),
            value: "m".into(),
        }],
    };
    let mut stream = ing.query_stream(&tenant(), req).await.unwrap();
    let mut out = Vec::new();
    while let Some(msg) = stream.next().await {
        for s in msg.unwrap().series {
            let mut ts = Vec::new();
            for c in &s.chunks {
                ts.extend(heddle_tsdb::chunkenc::decode_xor(&c.data).unwrap().iter().map(|x| x.t));
            }
            out.push(ts);
        }
    }
    out
}

/// Timestamps of every sample of `m` the tenant's local blocks hold (shipped or not), per series.
fn local_blocks_all(ing: &Ingester) -> Vec<Vec<i64>> {
    let t = ing.tenant(&tenant()).unwrap();
    let m = heddle_model::Matcher::new(heddle_model::MatchType::Equal, "__name__", "m").unwrap();
    let parts = t
        .blocks()
        .overlapping(i64::MIN, i64::MAX, &Default::default())
        .iter()
        .map(|b| b.select(i64::MIN, i64::MAX, std::slice::from_ref(&m)).unwrap())
        .collect();
    timestamps(parts)
}

#[tokio::test]
async fn compaction_queries_flush_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let bucket_dir = tempfile::tempdir().unwrap();
    let ing = ingester(dir.path(), bucket_dir.path());
    ing.open_existing().await.unwrap();
    push(&ing, 0, 2 * H2).await;
    let all: Vec<i64> = (0..2 * H2).step_by(STEP as usize).collect();

    // A compaction tick: [0, 2h) is due, the head spans almost 4 h (more than 1.5 block ranges).
    let written = ing.compact_tenant(&tenant(), false).await.unwrap();
    assert_eq!(written.len(), 1, "the oldest range is due");
    assert_eq!((written[0].min_time, written[0].max_time), (0, H2));
    assert_eq!(ing.metrics().blocks.pending_upload.get(), 1, "written, not shipped");
    let stats = ing.tenant_stats(&tenant()).await.unwrap();
    assert_eq!(stats.blocks_pending_upload, 1, "the admin API says so too: {stats:?}");
    assert_eq!(
        query_all(&ing).await,
        vec![all.clone(), all.clone()],
        "head + block answer as one"
    );

    // A flush cuts the rest and ships both blocks.
    let report = ing.flush(&[]).await.unwrap();
    assert_eq!((report.blocks_written, report.blocks_shipped), (1, 2), "{report:?}");
    let shipped = std::fs::read_dir(bucket_dir.path().join("team-a")).unwrap().count();
    assert_eq!(shipped, 2, "two blocks in the bucket");
    assert_eq!(ing.metrics().blocks.pending_upload.get(), 0, "both shipped");
    assert_eq!(ing.tenant_stats(&tenant()).await.unwrap().blocks_pending_upload, 0);
    assert_eq!(
        local_blocks_all(&ing),
        vec![all.clone(), all.clone()],
        "two blocks hold everything"
    );
    assert_eq!(
        query_all(&ing).await,
        Vec::<Vec<i64>>::new(),
        "both are in the bucket: the querier reads them there, the ingester no longer answers them"
    );
    ing.close().await;

    // A restart reopens both blocks; the head starts empty (nothing comes back from the WAL).
    let ing = ingester(dir.path(), bucket_dir.path());
    ing.open_existing().await.unwrap();
    assert_eq!(local_blocks_all(&ing), vec![all.clone(), all]);
    assert!(
        query_all(&ing).await.is_empty(),
        "shipper.json still says both are shipped"
    );
    let head = ing.head(&tenant()).unwrap();
    assert_eq!(head.stats().series, 0, "{:?}", head.stats());
    assert_eq!(head.min_valid_time(), 2 * H2 - STEP + 1, "older samples stay refused");
    let again = ing.flush(&[]).await.unwrap();
    assert_eq!(
        (again.blocks_written, again.blocks_shipped),
        (0, 0),
        "shipped blocks are never re-uploaded"
    );
}

/// A head that receives nothing for the idle timeout is compacted whole and shipped by the background loop.
#[tokio::test]
async fn idle_head_is_compacted_and_shipped() {
    let dir = tempfile::tempdir().unwrap();
    let bucket_dir = tempfile::tempdir().unwrap();
    let tsdb = TsdbConfig {
        dir: dir.path().to_path_buf(),
        head_compaction_interval: std::time::Duration::from_millis(20),
        head_compaction_idle_timeout: std::time::Duration::from_millis(100),
        ship_interval: std::time::Duration::from_millis(20),
        // The samples are from 1970: keep the shipped block local so the test can read it.
        retention_period: std::time::Duration::from_secs(100 * 365 * 86_400),
        ..TsdbConfig::default()
    };
    let ing = ingester_with(bucket_dir.path(), tsdb);
    ing.open_existing().await.unwrap();
    push(&ing, 0, 30 * STEP).await; // half an hour: nothing is due by range
    let stop = CancellationToken::new();
    let task = tokio::spawn(ing.clone().run_blocks_loop(stop.clone()));
    let shipped = || std::fs::read_dir(bucket_dir.path().join("team-a")).map_or(0, |d| d.count());
    let deadline = Instant::now() + std::time::Duration::from_secs(20);
    while shipped() == 0 && Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    stop.cancel();
    task.await.unwrap();
    assert_eq!(shipped(), 1, "the idle head was compacted into one block and shipped");
    assert_eq!(ing.head(&tenant()).unwrap().stats().series, 0, "the head is empty");
    let all: Vec<i64> = (0..30 * STEP).step_by(STEP as usize).collect();
    assert_eq!(
        local_blocks_all(&ing),
        vec![all.clone(), all],
        "the block holds every sample"
    );
    assert!(
        query_all(&ing).await.is_empty(),
        "shipped: the querier reads it from the bucket"
    );
}

/// The ingester answers reads from its head and the local blocks not in the bucket yet; a shipped block is the
/// querier's to read from the bucket (answering it here too would read it twice).
#[tokio::test]
async fn shipped_blocks_are_left_to_the_querier() {
    let dir = tempfile::tempdir().unwrap();
    let bucket_dir = tempfile::tempdir().unwrap();
    let ing = ingester(dir.path(), bucket_dir.path());
    ing.open_existing().await.unwrap();
    push(&ing, 0, 2 * H2).await;
    let first: Vec<i64> = (0..H2).step_by(STEP as usize).collect();
    let second: Vec<i64> = (H2..2 * H2).step_by(STEP as usize).collect();

    assert_eq!(ing.compact_tenant(&tenant(), false).await.unwrap().len(), 1);
    let both: Vec<i64> = first.iter().chain(&second).copied().collect();
    assert_eq!(
        query_all(&ing).await,
        vec![both.clone(), both.clone()],
        "unshipped block + head"
    );

    // Within the grace (the querier may not list the block yet) it is still answered here.
    ing.set_shipped_blocks_grace(std::time::Duration::from_secs(3600));
    let shipped = ing.ship_tenant(&tenant()).await.unwrap().unwrap();
    assert_eq!(shipped.uploaded.len(), 1);
    assert_eq!(
        query_all(&ing).await,
        vec![both.clone(), both.clone()],
        "shipped, within the grace"
    );
    ing.set_shipped_blocks_grace(std::time::Duration::ZERO);
    assert_eq!(
        query_all(&ing).await,
        vec![second.clone(), second.clone()],
        "the head only"
    );

    // The rest goes into a second block, not shipped: it answers, the shipped one does not.
    assert_eq!(ing.compact_tenant(&tenant(), true).await.unwrap().len(), 1);
    assert_eq!(ing.head(&tenant()).unwrap().stats().series, 0);
    assert_eq!(
        query_all(&ing).await,
        vec![second.clone(), second],
        "the unshipped block"
    );

    let selector = |from: i64, to: i64| SeriesRequest {
        start_timestamp_ms: from,
        end_timestamp_ms: to,
        selectors: vec![heddle_proto::ingester::Selector {
            matchers: vec![LabelMatcher {
                r#type: 0,
                name: "__name__".into(),
                value: "m".into(),
            }],
        }],
    };
    let in_shipped = ing.series(&tenant(), selector(0, H2 - STEP)).await.unwrap();
    assert!(in_shipped.series.is_empty(), "{:?}", in_shipped.series);
    assert_eq!(
        ing.series(&tenant(), selector(0, 2 * H2)).await.unwrap().series.len(),
        2
    );
    let values = |from: i64, to: i64| LabelValuesRequest {
        name: "id".into(),
        start_timestamp_ms: from,
        end_timestamp_ms: to,
        matchers: Vec::new(),
    };
    assert!(
        ing.label_values(&tenant(), values(0, H2 - STEP))
            .await
            .unwrap()
            .values
            .is_empty()
    );
    assert_eq!(
        ing.label_values(&tenant(), values(0, 2 * H2)).await.unwrap().values,
        ["x", "y"]
    );
    let names = LabelNamesRequest {
        start_timestamp_ms: 0,
        end_timestamp_ms: H2 - STEP,
        matchers: Vec::new(),
    };
    assert!(ing.label_names(&tenant(), names).await.unwrap().names.is_empty());
}

/// A block the shipper lists before its ship has ended (other blocks still uploading, so no upload time is noted
/// yet) has only just reached the bucket: the ingester keeps answering it for the whole grace, however long ago
/// the tenant was opened.
#[tokio::test]
async fn a_block_listed_mid_ship_counts_as_just_shipped() {
    let dir = tempfile::tempdir().unwrap();
    let bucket_dir = tempfile::tempdir().unwrap();
    let ing = ingester(dir.path(), bucket_dir.path());
    ing.open_existing().await.unwrap();
    push(&ing, 0, 2 * H2).await;
    let both: Vec<i64> = (0..2 * H2).step_by(STEP as usize).collect();
    assert_eq!(ing.compact_tenant(&tenant(), false).await.unwrap().len(), 1);
    let shipped = ing.ship_tenant(&tenant()).await.unwrap().unwrap();
    assert_eq!(shipped.uploaded.len(), 1);
    // As if the ship were still running: the block is in shipper.json, its upload time not noted yet.
    ing.tenant(&tenant()).unwrap().forget_shipped(&shipped.uploaded);
    let grace = std::time::Duration::from_millis(50);
    // The tenant was opened longer ago than the grace.
    tokio::time::sleep(2 * grace).await;
    ing.set_shipped_blocks_grace(grace);
    assert_eq!(
        query_all(&ing).await,
        vec![both.clone(), both],
        "the block is answered here until the querier can list it"
    );
}

/// Timestamps of every sample of `m` in the tenant's blocks in the (filesystem) bucket, per series.
fn bucket_blocks_all(bucket_dir: &Path) -> Vec<Vec<i64>> {
    let m = heddle_model::Matcher::new(heddle_model::MatchType::Equal, "__name__", "m").unwrap();
    let parts = std::fs::read_dir(bucket_dir.join(tenant().as_str()))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("meta.json").exists())
        .map(|p| {
            heddle_tsdb::block::BlockReader::open_dir(&p)
                .unwrap()
                .select(i64::MIN, i64::MAX, std::slice::from_ref(&m))
                .unwrap()
        })
        .collect();
    timestamps(parts)
}

/// A tenant with no push for `close_idle_tsdb_timeout` is closed only once its head is empty and its blocks
/// are shipped; then it leaves the map, its directory (and files) go, its samples stay in the bucket, and the
/// next push opens it again.
#[tokio::test]
async fn idle_tenant_is_closed_once_compacted_and_shipped_and_reopened_by_a_push() {
    let dir = tempfile::tempdir().unwrap();
    let bucket_dir = tempfile::tempdir().unwrap();
    let timeout = std::time::Duration::from_millis(200);
    let ing = ingester_with(
        bucket_dir.path(),
        TsdbConfig {
            dir: dir.path().to_path_buf(),
            close_idle_tsdb_timeout: timeout,
            ..TsdbConfig::default()
        },
    );
    ing.open_existing().await.unwrap();
    push(&ing, 0, 30 * STEP).await;
    let tenant_dir = dir.path().join(tenant().as_str());
    assert_eq!(ing.close_idle_tenants().await, 0, "pushed to just now");
    tokio::time::sleep(timeout * 2).await;
    assert_eq!(ing.close_idle_tenants().await, 0, "the head still holds samples");
    assert!(
        ing.tenant(&tenant())
            .unwrap()
            .closable(timeout, Instant::now())
            .is_err()
    );

    ing.flush(&[]).await.unwrap();
    assert_eq!(ing.close_idle_tenants().await, 1);
    assert!(ing.tenants().is_empty(), "{:?}", ing.tenants());
    assert!(!tenant_dir.exists(), "the tenant's directory is deleted");
    assert_eq!(ing.metrics().idle_tenants_closed.get(), 1);
    assert_eq!(ing.metrics().tenants.get(), 0);
    assert_eq!(
        query_all(&ing).await,
        Vec::<Vec<i64>>::new(),
        "reads of a closed tenant go to the bucket"
    );
    let earlier: Vec<i64> = (0..30).map(|i| i * STEP).collect();
    assert_eq!(bucket_blocks_all(bucket_dir.path()), vec![earlier.clone(), earlier]);

    push(&ing, 30 * STEP, 40 * STEP).await;
    assert_eq!(ing.tenants(), vec![tenant()], "the next push opened it again");
    assert_eq!(ing.metrics().tenants.get(), 1);
    let later: Vec<i64> = (30..40).map(|i| i * STEP).collect();
    assert_eq!(query_all(&ing).await, vec![later.clone(), later]);
    ing.close().await;
}

/// Without shipping a closed tenant's blocks would be unreadable: a tenant with local blocks stays open.
#[tokio::test]
async fn without_shipping_a_tenant_with_blocks_is_not_closed() {
    let dir = tempfile::tempdir().unwrap();
    let mut registry = Registry::default();
    let discarded = DiscardedSamples::register(&mut registry);
    let timeout = std::time::Duration::from_millis(100);
    let tsdb = TsdbConfig {
        dir: dir.path().to_path_buf(),
        close_idle_tsdb_timeout: timeout,
        ..TsdbConfig::default()
    };
    let ing = Ingester::new(&IngesterConfig::default(), tsdb, None, &mut registry, discarded);
    ing.open_existing().await.unwrap();
    push(&ing, 0, 30 * STEP).await;
    ing.flush(&[]).await.unwrap();
    tokio::time::sleep(timeout * 2).await;
    assert_eq!(
        ing.tenant(&tenant()).unwrap().closable(timeout, Instant::now()),
        Err("blocks not shipped")
    );
    assert_eq!(ing.close_idle_tenants().await, 0);
    assert_eq!(query_all(&ing).await.len(), 2, "its blocks are still served");
    ing.close().await;
}

/// Reads name the shipped blocks they leave to the bucket (the querier checks that it read each of them there),
/// and only those overlapping the read; a block still answered here is not named, and the local retention keeps
/// it however old its samples, since the querier may not list it yet.
#[tokio::test]
async fn reads_name_the_blocks_left_to_the_bucket_and_retention_waits_for_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let bucket_dir = tempfile::tempdir().unwrap();
    let ing = ingester(dir.path(), bucket_dir.path());
    ing.open_existing().await.unwrap();
    push(&ing, 0, 2 * H2).await;
    assert_eq!(ing.compact_tenant(&tenant(), false).await.unwrap().len(), 1);
    let shipped = ing.ship_tenant(&tenant()).await.unwrap().unwrap().uploaded;
    assert_eq!(shipped.len(), 1);
    let query = |from: i64, to: i64| QueryRequest {
        start_timestamp_ms: from,
        end_timestamp_ms: to,
        matchers: vec![LabelMatcher {
            r#type: 0,
            name: "__name__".into(),
            value: "m".into(),
        }],
    };
    let left = |ing: Arc<Ingester>, from: i64, to: i64| async move {
        let mut stream = ing.query_stream(&tenant(), query(from, to)).await.unwrap();
        let first = stream.next().await.map(|m| m.unwrap()).unwrap_or_default();
        let mut later = Vec::new();
        while let Some(m) = stream.next().await {
            later.extend(m.unwrap().blocks_left_to_bucket);
        }
        assert!(later.is_empty(), "named after the first message: {later:?}");
        first.blocks_left_to_bucket
    };

    ing.set_shipped_blocks_grace(std::time::Duration::from_secs(3600));
    assert!(
        left(ing.clone(), 0, 2 * H2).await.is_empty(),
        "within the grace it is answered here"
    );
    let t = ing.tenant(&tenant()).unwrap();
    let metrics = crate::metrics::BlockMetrics::default();
    // Its samples are hours older than a 1 ms retention, but reads still answer it.
    crate::blocks::delete_expired(
        &t,
        std::time::Duration::from_millis(1),
        std::time::Duration::from_secs(3600),
        &metrics,
    )
    .await;
    assert_eq!(t.blocks().len(), 1, "kept while still answered here");

    ing.set_shipped_blocks_grace(std::time::Duration::ZERO);
    assert_eq!(left(ing.clone(), 0, 2 * H2).await, shipped, "left to the bucket: named");
    // Named in the first message even without series there: the block holds the range, the head not.
    assert_eq!(left(ing.clone(), 0, H2 - STEP).await, shipped, "named without series");
    assert!(
        left(ing.clone(), H2, 2 * H2).await.is_empty(),
        "a range the block does not hold"
    );
    let series = SeriesRequest {
        start_timestamp_ms: 0,
        end_timestamp_ms: 2 * H2,
        selectors: vec![heddle_proto::ingester::Selector {
            matchers: query(0, 0).matchers,
        }],
    };
    assert_eq!(
        ing.series(&tenant(), series).await.unwrap().blocks_left_to_bucket,
        shipped
    );
    let names = LabelNamesRequest {
        start_timestamp_ms: 0,
        end_timestamp_ms: 2 * H2,
        matchers: Vec::new(),
    };
    assert_eq!(
        ing.label_names(&tenant(), names).await.unwrap().blocks_left_to_bucket,
        shipped
    );
    let values = LabelValuesRequest {
        name: "id".into(),
        start_timestamp_ms: 0,
        end_timestamp_ms: 2 * H2,
        matchers: Vec::new(),
    };
    assert_eq!(
        ing.label_values(&tenant(), values).await.unwrap().blocks_left_to_bucket,
        shipped
    );

    crate::blocks::delete_expired(
        &t,
        std::time::Duration::from_millis(1),
        std::time::Duration::ZERO,
        &metrics,
    )
    .await;
    assert_eq!(
        t.blocks().len(),
        0,
        "past the retention and left to the bucket: deleted"
    );
}
