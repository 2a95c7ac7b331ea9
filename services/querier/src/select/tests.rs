use super::*;
use bytes::Bytes;
use heddle_proto::IngesterClient;
use heddle_proto::prometheus::{Chunk, chunk::Encoding};
use heddle_proto::testing::{FakeIngester, Fault};
use heddle_ring::ReadSet;
use heddle_tsdb::ChunkData;
use std::sync::Arc;

fn labels(job: &str) -> Labels {
    Labels::from_sorted([("__name__", "up"), ("job", job)]).unwrap()
}

/// A chunk whose bytes say where it came from; the merge never decodes them.
fn chunk(min: i64, tag: u8) -> Chunk {
    Chunk {
        min_time_ms: min,
        max_time_ms: min + 1,
        r#type: Encoding::Xor as i32,
        data: vec![0, 1, tag],
    }
}

/// A fake holding `up{job=<job>}` for each of `jobs`, one chunk each tagged `tag`.
fn fake(jobs: &[&str], tag: u8) -> FakeIngester {
    jobs.iter().fold(FakeIngester::new(), |f, job| {
        f.with_series(labels(job), vec![chunk(0, tag)])
    })
}

fn set(fakes: Vec<FakeIngester>, max_errors: usize) -> IngesterSet {
    ReadSet {
        replicas: fakes
            .into_iter()
            .enumerate()
            .map(|(i, f)| (format!("ing-{i}"), Arc::new(f) as Arc<dyn IngesterClient>))
            .collect(),
        unreachable: Vec::new(),
        max_errors,
        zones: None,
    }
}

fn tenant() -> TenantId {
    TenantId::new("t").unwrap()
}

fn all() -> QueryRequest {
    QueryRequest {
        start_timestamp_ms: 0,
        end_timestamp_ms: 100,
        matchers: Vec::new(),
    }
}

async fn merge(set: &IngesterSet, blocks: Vec<Vec<SeriesChunks>>) -> Result<Vec<SeriesChunks>, QuerierError> {
    let ingesters = Merge::open_ingesters(set, &tenant(), &all()).await?;
    let limiter = crate::limits::QueryLimiter::new(
        &tenant(),
        &heddle_limits::Limits::default(),
        0,
        crate::metrics::Metrics::new(&mut prometheus_client::registry::Registry::default()),
    );
    let mut m = Merge::new(
        ingesters,
        blocks,
        BlockCoverage::default(),
        std::sync::Arc::new(limiter),
    );
    let mut out = Vec::new();
    while let Some(s) = m.next().await? {
        out.push(s);
    }
    Ok(out)
}

fn jobs(series: &[SeriesChunks]) -> Vec<String> {
    series.iter().map(|s| s.labels.get("job").unwrap().to_owned()).collect()
}

/// The tags of a series' chunks, in the order the merge handed them over.
fn tags(s: &SeriesChunks) -> Vec<u8> {
    s.chunks.iter().map(|c| c.data[2]).collect()
}

#[tokio::test]
async fn sources_merge_by_labels_in_source_order() {
    let block = vec![SeriesChunks {
        labels: labels("a"),
        chunks: vec![ChunkData {
            encoding: heddle_tsdb::chunkenc::Encoding::Xor,
            min_time: 50,
            max_time: 51,
            data: Bytes::from_static(&[0, 1, 9]),
        }],
    }];
    let set = set(vec![fake(&["b", "a"], 1), fake(&["a"], 2)], 0);
    let merged = merge(&set, vec![block]).await.unwrap();
    assert_eq!(jobs(&merged), ["a", "b"], "one series per label set, sorted");
    assert_eq!(tags(&merged[0]), [1, 2, 9], "ingesters in read-set order, then blocks");
    assert_eq!(tags(&merged[1]), [1]);
}

#[tokio::test]
async fn a_source_out_of_label_order_is_invalid_data() {
    let s = |job: &str| SeriesChunks {
        labels: labels(job),
        chunks: Vec::new(),
    };
    let empty = set(Vec::new(), 0);
    for (name, block) in [("unsorted", vec![s("b"), s("a")]), ("duplicate", vec![s("a"), s("a")])] {
        let err = merge(&empty, vec![block]).await.unwrap_err();
        assert!(
            matches!(&err, QuerierError::InvalidIngesterData(m) if m.contains("sorted by labels")),
            "case {name}: {err}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_reserve_replaces_an_ingester_that_fails_midstream() {
    let jobs_held = ["a", "b", "c", "d"];
    let breaks = |tag| {
        fake(&jobs_held, tag).with_fault(Fault::BreakStream {
            after: 2,
            error: tonic::Status::internal("stream broke"),
        })
    };
    // ing-1 answers last, so it is the reserve; ing-0 breaks after a and b.
    let slow = fake(&jobs_held, 1).with_fault(Fault::Delay(Duration::from_secs(1)));
    let merged = merge(&set(vec![breaks(0), slow, fake(&jobs_held, 2)], 1), Vec::new())
        .await
        .unwrap();
    assert_eq!(jobs(&merged), jobs_held, "each series once, none lost");
    assert_eq!(tags(&merged[1]), [0, 2], "b from the ingesters merged first");
    assert_eq!(tags(&merged[2]), [1, 2], "c from the reserve that caught up");

    // A second failure is one more than the set may absorb.
    let slow = fake(&jobs_held, 1).with_fault(Fault::Delay(Duration::from_secs(1)));
    let err = merge(&set(vec![breaks(0), slow, breaks(2)], 1), Vec::new())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("2 of 3 ingesters failed (at most 1 may): ")
            && err.to_string().contains("stream broke"),
        "{err}"
    );
}

#[tokio::test]
async fn ingesters_that_cannot_be_asked_count_as_failures() {
    let mut s = set(vec![fake(&["a"], 0)], 1);
    s.unreachable.push(("ing-9".into(), "no client for ing-9".into()));
    let merged = merge(&s, Vec::new()).await.unwrap();
    assert_eq!(jobs(&merged), ["a"], "one unreachable ingester is within max_errors");
    s.max_errors = 0;
    let err = merge(&s, Vec::new()).await.unwrap_err();
    assert!(err.to_string().contains("1 of 2 ingesters failed"), "{err}");
    assert!(err.to_string().contains("no client for ing-9"), "{err}");
}
