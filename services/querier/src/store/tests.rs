use super::*;
use bytes::Bytes;
use heddle_bucket::{Backend, BucketConfig, DeletionMark, FilesystemConfig};
use heddle_tsdb::block::{BlockMeta, BlockWriter, new_ulid};
use heddle_tsdb::chunkenc::XorChunk;
use heddle_tsdb::head::ChunkData;
use prometheus_client::registry::Registry;
use std::path::Path;

pub(super) const TENANT: &str = "team-a";

pub(super) fn tenant() -> TenantId {
    TenantId::new(TENANT).unwrap()
}

fn bucket(dir: &Path) -> Bucket {
    let cfg = BucketConfig {
        backend: Backend::Filesystem,
        filesystem: FilesystemConfig { dir: dir.to_path_buf() },
        ..BucketConfig::default()
    };
    Bucket::new(&cfg, &mut Registry::default()).unwrap()
}

/// Writes a block of `[min_time, max_time)` holding `up{job=<job>}` with one sample at `min_time`, uploads it
/// and returns its ULID.
pub(super) async fn upload(bucket: &Bucket, scratch: &Path, min_time: i64, max_time: i64, job: &str) -> String {
    let meta = BlockMeta::new(new_ulid(), min_time, max_time, Some(TENANT));
    let mut w = BlockWriter::new(scratch, meta).unwrap();
    let mut chunk = XorChunk::new();
    chunk.append(min_time, 1.0).unwrap();
    let labels = Labels::from_sorted([("__name__", "up"), ("job", job)]).unwrap();
    w.add_series(
        &labels,
        &[ChunkData {
            encoding: heddle_tsdb::chunkenc::Encoding::Xor,
            min_time,
            max_time: min_time,
            data: Bytes::from(chunk.into_bytes()),
        }],
    )
    .unwrap();
    let meta = w.finish().unwrap();
    bucket.upload_block(&tenant(), &scratch.join(&meta.ulid)).await.unwrap();
    meta.ulid
}

pub(super) async fn jobs(store: &BucketStore, mint: i64, maxt: i64) -> Result<Vec<String>, QuerierError> {
    let m = [Matcher::new(heddle_model::MatchType::Equal, "__name__", "up").unwrap()];
    let mut out: Vec<String> = store
        .series(&tenant(), (mint, maxt), &m, &BlockCoverage::default())
        .await?
        .parts
        .iter()
        .flatten()
        .map(|l| l.get("job").unwrap_or_default().to_owned())
        .collect();
    out.sort();
    Ok(out)
}

#[tokio::test]
async fn a_block_that_cannot_be_opened_fails_only_the_queries_it_overlaps() {
    let (dir, scratch) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let b = bucket(dir.path());
    upload(&b, scratch.path(), 0, 1000, "first").await;
    let bad = upload(&b, scratch.path(), 1000, 2000, "second").await;
    let index = dir.path().join(TENANT).join(&bad).join("index");
    let good_index = std::fs::read(&index).unwrap();
    std::fs::write(&index, b"not an index").unwrap();

    let store = BucketStore::new(b, Duration::ZERO, &mut Registry::default());
    assert_eq!(
        jobs(&store, 0, 999).await.unwrap(),
        ["first"],
        "the good block still answers"
    );
    let err = jobs(&store, 500, 1500).await.unwrap_err().to_string();
    assert!(err.contains(&format!("cannot open bucket block {bad}")), "{err}");

    // Repaired in the bucket: the next refresh opens it.
    std::fs::write(&index, good_index).unwrap();
    assert_eq!(jobs(&store, 0, 2000).await.unwrap(), ["first", "second"]);
}

#[tokio::test]
async fn refreshes_see_new_blocks_and_forget_deleted_ones() {
    let (dir, scratch) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let b = bucket(dir.path());
    let first = upload(&b, scratch.path(), 0, 1000, "first").await;
    let store = BucketStore::new(b.clone(), Duration::ZERO, &mut Registry::default());
    assert_eq!(jobs(&store, 0, 5000).await.unwrap(), ["first"]);
    upload(&b, scratch.path(), 1000, 2000, "second").await;
    assert_eq!(jobs(&store, 0, 5000).await.unwrap(), ["first", "second"]);
    std::fs::remove_dir_all(dir.path().join(TENANT).join(&first)).unwrap();
    assert_eq!(jobs(&store, 0, 5000).await.unwrap(), ["second"]);

    // Within the sync interval the list is not read again.
    let cached = BucketStore::new(b.clone(), Duration::from_secs(3600), &mut Registry::default());
    assert_eq!(jobs(&cached, 0, 5000).await.unwrap(), ["second"]);
    upload(&b, scratch.path(), 2000, 3000, "third").await;
    assert_eq!(jobs(&cached, 0, 5000).await.unwrap(), ["second"]);
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[tokio::test]
async fn marked_blocks_are_read_until_their_mark_is_older_than_the_delay() {
    let (dir, scratch) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let b = bucket(dir.path());
    let first = upload(&b, scratch.path(), 0, 1000, "first").await;
    upload(&b, scratch.path(), 0, 1000, "second").await;
    b.mark_for_deletion(&tenant(), DeletionMark::new(&first, now_secs() - 600))
        .await
        .unwrap();
    let hour = Duration::from_secs(3600);
    let patient = BucketStore::new(b.clone(), Duration::ZERO, &mut Registry::default()).with_deletion_marks(hour, hour);
    assert_eq!(
        jobs(&patient, 0, 5000).await.unwrap(),
        ["first", "second"],
        "marked 10 minutes ago"
    );
    let prompt = BucketStore::new(b.clone(), Duration::ZERO, &mut Registry::default())
        .with_deletion_marks(Duration::from_secs(300), hour);
    assert_eq!(
        jobs(&prompt, 0, 5000).await.unwrap(),
        ["second"],
        "past a 5 minute delay"
    );
}

#[tokio::test]
async fn a_fresh_bucket_index_replaces_the_listing() {
    let (dir, scratch) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let b = bucket(dir.path());
    upload(&b, scratch.path(), 0, 1000, "first").await;
    let listing = b.list_tenant(&tenant()).await.unwrap();
    let second = upload(&b, scratch.path(), 1000, 2000, "second").await;
    let hour = Duration::from_secs(3600);
    let store = BucketStore::new(b.clone(), Duration::ZERO, &mut Registry::default()).with_deletion_marks(hour, hour);
    // An index made before the second upload: the querier reads it, so the second block is not seen yet.
    let index = heddle_bucket::BucketIndex::new(&listing.blocks, &[], now_secs() - 60);
    b.write_bucket_index(&tenant(), &index).await.unwrap();
    assert_eq!(jobs(&store, 0, 5000).await.unwrap(), ["first"], "from the index");
    // Its marks count as the bucket's would.
    let marked = heddle_bucket::BucketIndex::new(
        &b.list_tenant(&tenant()).await.unwrap().blocks,
        &[DeletionMark::new(&second, 0)],
        now_secs(),
    );
    b.write_bucket_index(&tenant(), &marked).await.unwrap();
    assert_eq!(
        jobs(&store, 0, 5000).await.unwrap(),
        ["first"],
        "the index's mark is old"
    );
    // Too old an index is not trusted: the bucket is listed.
    let stale = heddle_bucket::BucketIndex::new(&listing.blocks, &[], now_secs() - 7200);
    b.write_bucket_index(&tenant(), &stale).await.unwrap();
    assert_eq!(jobs(&store, 0, 5000).await.unwrap(), ["first", "second"], "listed");
}

fn limiter(limits: heddle_limits::Limits) -> Arc<QueryLimiter> {
    let metrics = crate::metrics::Metrics::new(&mut Registry::default());
    Arc::new(QueryLimiter::new(&tenant(), &limits, 0, metrics))
}

#[tokio::test]
async fn blocks_are_weighed_against_the_fetch_limits_before_their_chunks_are_read() {
    let (dir, scratch) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let b = bucket(dir.path());
    for (i, job) in ["first", "second", "third"].into_iter().enumerate() {
        let start = i as i64 * 1000;
        upload(&b, scratch.path(), start, start + 1000, job).await;
    }
    let store = BucketStore::new(b, Duration::ZERO, &mut Registry::default());
    let m = [Matcher::new(heddle_model::MatchType::Equal, "__name__", "up").unwrap()];

    // One chunk per block, two allowed: the request fails at the third block's index.
    let two_chunks = limiter(heddle_limits::Limits {
        max_fetched_chunks_per_query: 2,
        ..heddle_limits::Limits::default()
    });
    let err = store
        .query(&tenant(), (0, 5000), &m, &two_chunks, &BlockCoverage::default())
        .await
        .unwrap_err();
    assert!(err.to_string().starts_with("err-heddle-max-chunks-per-query"), "{err}");
    assert!(
        two_chunks.fetched(FetchLimit::ChunkBytes) > 0,
        "the blocks within the limit were read"
    );

    // The request already holds its one series: a block of one more is refused before any chunk is read.
    let one_series = limiter(heddle_limits::Limits {
        max_fetched_series_per_query: 1,
        ..heddle_limits::Limits::default()
    });
    one_series.add(FetchLimit::Series, 1).unwrap();
    let err = store
        .query(&tenant(), (0, 999), &m, &one_series, &BlockCoverage::default())
        .await
        .unwrap_err();
    assert!(err.to_string().starts_with("err-heddle-max-series-per-query"), "{err}");
    assert_eq!(
        one_series.fetched(FetchLimit::ChunkBytes),
        0,
        "nothing read from the chunks"
    );
    assert_eq!(
        one_series.fetched(FetchLimit::Series),
        1,
        "the check counts nothing itself"
    );

    // Within the limits every block answers.
    let open = limiter(heddle_limits::Limits::default());
    assert_eq!(
        store
            .query(&tenant(), (0, 5000), &m, &open, &BlockCoverage::default())
            .await
            .unwrap()
            .parts
            .len(),
        3
    );
    assert_eq!(open.fetched(FetchLimit::Chunks), 3);
}

/// `get_range` calls the bucket made so far, from its registry's exposition.
fn ranged_gets(registry: &Registry) -> u64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(r#"heddle_bucket_operations_total{operation="get_range"} "#))
        .map_or(0, |v| v.parse().unwrap())
}

#[tokio::test]
async fn a_blocks_chunks_are_read_in_few_gets_whose_bytes_count_before_they_are_fetched() {
    let (dir, scratch) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut registry = Registry::default();
    let cfg = BucketConfig {
        backend: Backend::Filesystem,
        filesystem: FilesystemConfig {
            dir: dir.path().to_path_buf(),
        },
        ..BucketConfig::default()
    };
    let b = Bucket::new(&cfg, &mut registry).unwrap();
    let meta = BlockMeta::new(new_ulid(), 0, 1000, Some(TENANT));
    let mut w = BlockWriter::new(scratch.path(), meta).unwrap();
    let mut data_bytes = 0;
    let mut instances: Vec<String> = (0..300).map(|i| format!("host-{i:03}")).collect();
    instances.sort();
    for (i, instance) in instances.iter().enumerate() {
        let mut chunk = XorChunk::new();
        for t in 0..10 {
            chunk.append(t * 15, (i * t as usize) as f64).unwrap();
        }
        let data = Bytes::from(chunk.into_bytes());
        data_bytes += data.len();
        let labels = Labels::from_sorted([("__name__", "up"), ("instance", instance.as_str())]).unwrap();
        w.add_series(
            &labels,
            &[ChunkData {
                encoding: heddle_tsdb::chunkenc::Encoding::Xor,
                min_time: 0,
                max_time: 135,
                data,
            }],
        )
        .unwrap();
    }
    let meta = w.finish().unwrap();
    b.upload_block(&tenant(), &scratch.path().join(&meta.ulid))
        .await
        .unwrap();
    let store = BucketStore::new(b, Duration::from_secs(3600), &mut Registry::default());
    let m = [Matcher::new(heddle_model::MatchType::Equal, "__name__", "up").unwrap()];

    // The index reads of a selection (postings, series entries), with the block opened first.
    store
        .series(&tenant(), (0, 1000), &m, &BlockCoverage::default())
        .await
        .unwrap();
    let before = ranged_gets(&registry);
    store
        .series(&tenant(), (0, 1000), &m, &BlockCoverage::default())
        .await
        .unwrap();
    let index_gets = ranged_gets(&registry) - before;

    // A byte limit below what the chunk reads would fetch: refused with no chunk read.
    let small = limiter(heddle_limits::Limits {
        max_fetched_chunk_bytes_per_query: data_bytes,
        ..heddle_limits::Limits::default()
    });
    let before = ranged_gets(&registry);
    let err = store
        .query(&tenant(), (0, 1000), &m, &small, &BlockCoverage::default())
        .await
        .unwrap_err();
    assert!(
        err.to_string().starts_with("err-heddle-max-chunks-bytes-per-query"),
        "{err}"
    );
    assert_eq!(ranged_gets(&registry) - before, index_gets, "only the index was read");

    // Within the limit: 300 chunks in a couple of GETs (the segment header, one run), counted with their gaps.
    let open = limiter(heddle_limits::Limits::default());
    let before = ranged_gets(&registry);
    let got = store
        .query(&tenant(), (0, 1000), &m, &open, &BlockCoverage::default())
        .await
        .unwrap();
    let chunk_gets = ranged_gets(&registry) - before - index_gets;
    assert_eq!(got.parts[0].len(), 300);
    assert!(chunk_gets <= 2, "{chunk_gets} GETs for 300 chunks");
    let counted = open.fetched(FetchLimit::ChunkBytes);
    assert!(
        counted >= data_bytes && counted <= data_bytes + 300 * 8 + 1100,
        "{counted} bytes counted for {data_bytes} bytes of chunk data"
    );
}
