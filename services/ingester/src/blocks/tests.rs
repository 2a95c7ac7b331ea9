//! Blocks through the ingester: a due range is compacted on a tick, queries read head and local blocks as one,
//! a flush ships every block to a (filesystem) bucket, and a restart reopens the blocks without loading their
//! samples into the head again.

use super::*;
use crate::config::{IngesterConfig, TsdbConfig};
use bytes::Bytes;
use futures::StreamExt;
use heddle_bucket::{Backend, Bucket, BucketConfig, FilesystemConfig};
use heddle_proto::IngesterClient;
use heddle_proto::ingester::QueryRequest;
use heddle_proto::prometheus::{Label, LabelMatcher, Sample, TimeSeries, WriteRequest};
use heddle_server::DiscardedSamples;
use prometheus_client::registry::Registry;
use prost::Message as _;

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
    assert_eq!(ing.metrics.blocks.pending_upload.get(), 1, "written, not shipped");
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
    assert_eq!(ing.metrics.blocks.pending_upload.get(), 0, "both shipped");
    assert_eq!(ing.tenant_stats(&tenant()).await.unwrap().blocks_pending_upload, 0);
    assert_eq!(
        query_all(&ing).await,
        vec![all.clone(), all.clone()],
        "two blocks answer"
    );
    ing.close().await;

    // A restart reopens both blocks; the head starts empty (nothing comes back from the WAL).
    let ing = ingester(dir.path(), bucket_dir.path());
    ing.open_existing().await.unwrap();
    assert_eq!(query_all(&ing).await, vec![all.clone(), all]);
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
        // The samples are from 1970: keep the shipped block local so the ingester still answers from it.
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
    assert_eq!(query_all(&ing).await, vec![all.clone(), all], "the block answers");
}
