//! Restarts through the ingester: chunk snapshot on graceful shutdown (on by default, or off), replay metrics.

use super::*;
use bytes::Bytes;
use heddle_proto::IngesterClient;
use heddle_proto::prometheus::{Label, Sample, TimeSeries, WriteRequest};
use prost::Message as _;
use std::path::Path;

const T0: i64 = 1_700_000_000_000;

fn open(dir: &Path, snapshot: bool) -> (Arc<Ingester>, Registry) {
    let mut registry = Registry::default();
    let discarded = DiscardedSamples::register(&mut registry);
    let tsdb = TsdbConfig {
        dir: dir.to_path_buf(),
        memory_snapshot_on_shutdown: snapshot,
        ..TsdbConfig::default()
    };
    let ingester = Ingester::new(&IngesterConfig::default(), tsdb, None, &mut registry, discarded);
    (ingester, registry)
}

async fn push_rounds(i: &Ingester, rounds: i64) {
    for round in 0..rounds {
        // The ingester's clock follows the samples, as a sender's does.
        i.set_clock(Arc::new(heddle_model::ManualClock::new(T0 + round * 15_000)));
        let timeseries = (0..3)
            .map(|id| TimeSeries {
                labels: vec![
                    Label {
                        name: "__name__".into(),
                        value: "m".into(),
                    },
                    Label {
                        name: "id".into(),
                        value: id.to_string(),
                    },
                ],
                samples: vec![Sample {
                    value: (round * 10 + id) as f64,
                    timestamp: T0 + round * 15_000,
                }],
                ..TimeSeries::default()
            })
            .collect();
        let body = WriteRequest {
            timeseries,
            metadata: Vec::new(),
        }
        .encode_to_vec();
        let tenant = TenantId::new("t").unwrap();
        let r = i.push(&tenant, Bytes::from(body)).await.unwrap();
        assert!(r.errors.is_empty());
    }
}

fn samples(i: &Ingester) -> usize {
    let head = i.head(&TenantId::new("t").unwrap()).unwrap();
    head.select(i64::MIN, i64::MAX, &[])
        .iter()
        .flat_map(|s| &s.chunks)
        .map(|c| heddle_tsdb::chunkenc::decode_xor(&c.data).unwrap().len())
        .sum()
}

fn has_snapshot(dir: &Path) -> bool {
    std::fs::read_dir(dir.join("t"))
        .unwrap()
        .any(|e| e.unwrap().file_name().to_string_lossy().starts_with("chunk_snapshot."))
}

#[tokio::test]
async fn graceful_shutdown_snapshots_and_the_next_start_loads_it() {
    let dir = tempfile::tempdir().unwrap();
    let (ing, _) = open(dir.path(), true);
    ing.open_existing().await.unwrap();
    push_rounds(&ing, 300).await;
    ing.close().await;
    drop(ing);
    assert!(has_snapshot(dir.path()));

    let (ing, registry) = open(dir.path(), true);
    assert!(!ing.is_running(), "not ready before replay");
    ing.open_existing().await.unwrap();
    assert!(ing.is_running());
    assert_eq!(samples(&ing), 900);
    let text = heddle_server::encode_metrics(&registry);
    for want in [
        "heddle_ingester_replay_snapshots_loaded_total 1",
        "heddle_ingester_replay_snapshot_series_total 3",
        "heddle_ingester_replay_tenants_pending 0",
        "heddle_ingester_replay_samples_total 0",
        "heddle_ingester_replay_snapshots_discarded_total 0",
        "heddle_ingester_memory_series 3",
    ] {
        assert!(text.contains(want), "{want:?} not in\n{text}");
    }
    assert!(text.contains("heddle_ingester_replay_mmapped_chunks_total 6"), "{text}");
}

#[tokio::test]
async fn without_snapshots_the_wal_and_chunks_head_rebuild_the_head() {
    let dir = tempfile::tempdir().unwrap();
    let (ing, _) = open(dir.path(), false);
    ing.open_existing().await.unwrap();
    push_rounds(&ing, 300).await;
    ing.close().await;
    drop(ing);
    assert!(!has_snapshot(dir.path()));

    let (ing, registry) = open(dir.path(), false);
    ing.open_existing().await.unwrap();
    assert_eq!(samples(&ing), 900);
    let text = heddle_server::encode_metrics(&registry);
    for want in [
        "heddle_ingester_replay_snapshots_loaded_total 0",
        // T0 is 6.4e6 ms before a 2 h boundary: at 30 samples Prometheus' prediction splits that into 3 chunks
        // of ~142 samples. Two per series (285 samples) are in chunks_head, the last 15 come from the WAL.
        "heddle_ingester_replay_samples_in_mmapped_chunks_total 855",
        "heddle_ingester_replay_samples_total 45",
    ] {
        assert!(text.contains(want), "{want:?} not in\n{text}");
    }
}

/// Until the replay ends, reads fail with `Unavailable` (a caller retries or fails the query) instead of
/// answering from a head that holds only part of the tenant's data; then they answer in full.
#[tokio::test]
async fn reads_wait_for_the_replay() {
    let dir = tempfile::tempdir().unwrap();
    let (i, _r) = open(dir.path(), false);
    i.open_existing().await.unwrap();
    push_rounds(&i, 3).await;
    i.close().await;

    let (i, _r) = open(dir.path(), false);
    let t = TenantId::new("t").unwrap();
    let values = || heddle_proto::ingester::LabelValuesRequest {
        name: "id".into(),
        start_timestamp_ms: T0,
        end_timestamp_ms: T0 + 3_600_000,
        ..Default::default()
    };
    let err = i.label_values(&t, values()).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err}");
    assert!(err.message().contains("replaying the WAL"), "{err}");
    let err = i.series(&t, Default::default()).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err}");
    let err = i.query_stream(&t, Default::default()).await.err().expect("refused");
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err}");
    let err = i.label_names(&t, Default::default()).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err}");

    i.open_existing().await.unwrap();
    assert_eq!(i.label_values(&t, values()).await.unwrap().values, ["0", "1", "2"]);
}
