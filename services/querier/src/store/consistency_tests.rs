//! The querier never answers without a block the bucket should have given it: a block an ingester left to the
//! bucket that the querier's list lacks is found by listing again, or fails the query; a listed block deleted
//! meanwhile is replaced by what a new list holds; blocks opened from the bucket index know their sources.

use super::tests::{TENANT, tenant};
use super::*;
use crate::Querier;
use crate::config::QuerierConfig;
use bytes::Bytes;
use heddle_bucket::{Backend, BucketConfig, FilesystemConfig};
use heddle_model::{MatchType, Sample};
use heddle_proto::IngesterClient;
use heddle_proto::testing::FakeIngester;
use heddle_ring::FixedReplicas;
use heddle_tsdb::block::{BlockWriter, new_ulid};
use heddle_tsdb::chunkenc::XorChunk;
use heddle_tsdb::head::ChunkData;
use prometheus_client::registry::Registry;

const HOUR: Duration = Duration::from_secs(3600);

fn bucket(dir: &Path) -> Bucket {
    let cfg = BucketConfig {
        backend: Backend::Filesystem,
        filesystem: FilesystemConfig { dir: dir.to_path_buf() },
        ..BucketConfig::default()
    };
    Bucket::new(&cfg, &mut Registry::default()).unwrap()
}

/// Uploads a block of `[0, 1000)` holding `up{job=<job>}` with one sample at `t`, made from `sources` (besides
/// itself); returns its ULID.
async fn upload_from(bucket: &Bucket, scratch: &Path, job: &str, t: i64, sources: &[&str]) -> String {
    let mut meta = BlockMeta::new(new_ulid(), 0, 1000, Some(TENANT));
    meta.compaction.sources.extend(sources.iter().map(|s| (*s).to_owned()));
    let mut w = BlockWriter::new(scratch, meta).unwrap();
    let mut chunk = XorChunk::new();
    chunk.append(t, 1.0).unwrap();
    let labels = Labels::from_sorted([("__name__", "up"), ("job", job)]).unwrap();
    w.add_series(
        &labels,
        &[ChunkData {
            encoding: heddle_tsdb::chunkenc::Encoding::Xor,
            min_time: t,
            max_time: t,
            data: Bytes::from(chunk.into_bytes()),
        }],
    )
    .unwrap();
    let meta = w.finish().unwrap();
    bucket.upload_block(&tenant(), &scratch.join(&meta.ulid)).await.unwrap();
    meta.ulid
}

fn up() -> Vec<Matcher> {
    vec![Matcher::new(MatchType::Equal, "__name__", "up").unwrap()]
}

/// The `(job, timestamps)` of every series a select returns.
async fn select(q: &Querier) -> Result<Vec<(String, Vec<i64>)>, QuerierError> {
    Ok(q.select(&tenant(), 0, 999, &up())
        .await?
        .into_iter()
        .map(|s| {
            let job = s.labels.get("job").unwrap_or_default().to_owned();
            (job, s.samples.iter().map(|p: &Sample| p.t).collect())
        })
        .collect())
}

fn forced(registry: &Registry, reason: &str) -> f64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    let series = format!("heddle_querier_bucket_store_forced_refreshes_total{{reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

/// A querier over `store` and one fake ingester that names `left` as blocks it left to the bucket.
fn querier_over(store: &Arc<BucketStore>, left: &[&str]) -> Querier {
    let ingester: Arc<dyn IngesterClient> = Arc::new(FakeIngester::new().with_blocks_left_to_bucket(left));
    let replicas = Arc::new(FixedReplicas::new(vec![("ingester-0".to_owned(), ingester)]));
    Querier::new(QuerierConfig::default(), replicas, &mut Registry::default()).with_store(Arc::clone(store))
}

/// A store of `b` listed again only every hour, its metrics on `registry`.
fn store(b: &Bucket, registry: &mut Registry) -> Arc<BucketStore> {
    Arc::new(BucketStore::new(b.clone(), HOUR, registry).with_deletion_marks(HOUR, HOUR))
}

fn querier(b: &Bucket, left: &[&str], registry: &mut Registry) -> Querier {
    querier_over(&store(b, registry), left)
}

#[tokio::test]
async fn a_block_an_ingester_left_to_the_bucket_is_found_by_listing_again() {
    let (dir, scratch) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let b = bucket(dir.path());
    upload_from(&b, scratch.path(), "old", 1, &[]).await;
    // The store lists the bucket before the ingester's block arrives, and would not again for an hour.
    let mut registry = Registry::default();
    let store = store(&b, &mut registry);
    assert_eq!(
        select(&querier_over(&store, &[])).await.unwrap(),
        [("old".to_owned(), vec![1])]
    );
    let shipped = upload_from(&b, scratch.path(), "shipped", 2, &[]).await;

    // The ingester no longer answers the new block: the list is behind it.
    let q = querier_over(&store, &[&shipped]);
    assert_eq!(
        select(&q).await.unwrap(),
        [("old".to_owned(), vec![1]), ("shipped".to_owned(), vec![2])],
        "listed again at once, the block is read"
    );
    assert_eq!(forced(&registry, "block_left_by_ingester"), 1.0);
    let series = q.series(&tenant(), 0, 999, &[up()]).await.unwrap();
    assert_eq!(series.len(), 2, "{series:?}");
    assert_eq!(
        forced(&registry, "block_left_by_ingester"),
        1.0,
        "the new list holds it: no listing"
    );
}

#[tokio::test]
async fn a_block_in_no_bucket_block_fails_the_query_rather_than_answer_without_it() {
    let (dir, scratch) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let b = bucket(dir.path());
    upload_from(&b, scratch.path(), "old", 1, &[]).await;
    let missing = new_ulid().to_string();
    let q = querier(&b, &[&missing], &mut Registry::default());
    let id = "err-heddle-store-consistency-check-failed";
    let err = select(&q).await.unwrap_err();
    assert!(err.to_string().starts_with(id), "{err}");
    assert!(err.to_string().contains(&missing), "{err}");
    assert!(
        err.to_string().contains("--blocks-storage.bucket-store.sync-interval"),
        "{err}"
    );
    assert_eq!(err.status().as_u16(), 503);
    let err = q.series(&tenant(), 0, 999, &[up()]).await.unwrap_err();
    assert!(err.to_string().starts_with(id), "series: {err}");
    let err = q.label_names(&tenant(), 0, 999, &[]).await.unwrap_err();
    assert!(err.to_string().starts_with(id), "label names: {err}");
    let err = q.label_values(&tenant(), "job", 0, 999, &[]).await.unwrap_err();
    assert!(err.to_string().starts_with(id), "label values: {err}");
}

#[tokio::test]
async fn a_block_compacted_into_another_is_read_there() {
    let (dir, scratch) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let b = bucket(dir.path());
    // The ingester's block went into a merged block (its ULID among the merged block's sources) and is gone.
    let replica = new_ulid().to_string();
    upload_from(&b, scratch.path(), "merged", 3, &[&replica]).await;
    let listing = b.list_tenant(&tenant()).await.unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    // Read through the bucket index, whose entries carry no sources: the block's meta.json has them.
    b.write_bucket_index(&tenant(), &heddle_bucket::BucketIndex::new(&listing.blocks, &[], now))
        .await
        .unwrap();
    let mut registry = Registry::default();
    let q = querier(&b, &[&replica], &mut registry);
    assert_eq!(select(&q).await.unwrap(), [("merged".to_owned(), vec![3])]);
    assert_eq!(
        forced(&registry, "block_left_by_ingester"),
        0.0,
        "held by the merged block: nothing to list"
    );
}

#[tokio::test]
async fn a_listed_block_deleted_meanwhile_is_replaced_by_what_a_new_list_holds() {
    let (dir, scratch) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let b = bucket(dir.path());
    let source = upload_from(&b, scratch.path(), "source", 4, &[]).await;
    let mut registry = Registry::default();
    let q = querier(&b, &[], &mut registry);
    assert_eq!(select(&q).await.unwrap(), [("source".to_owned(), vec![4])]);
    // The compactor merges it, marks it and deletes it, all within the querier's hour between listings.
    upload_from(&b, scratch.path(), "merged", 4, &[&source]).await;
    b.delete_block(&tenant(), &source).await.unwrap();
    assert_eq!(
        select(&q).await.unwrap(),
        [("merged".to_owned(), vec![4])],
        "listed again, the merged block answers"
    );
    assert_eq!(forced(&registry, "block_gone"), 1.0);
}
