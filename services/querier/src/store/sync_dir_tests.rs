//! Index headers in the sync dir, against a real S3 server (s3s-fs): a restarted store opens its blocks without
//! reading an index header from the bucket and answers the same; an unusable file is rebuilt; the directory of
//! a block gone from the bucket is removed on the next sync.

use super::tests::{TENANT, jobs, tenant, upload};
use super::*;
use heddle_bucket::{Backend, BucketConfig, S3Config};
use heddle_testkit::s3::S3Server;

fn s3_bucket(s3: &S3Server) -> Bucket {
    let cfg = BucketConfig {
        backend: Backend::S3,
        s3: S3Config {
            endpoint: s3.addr().to_string(),
            bucket_name: s3.bucket().to_owned(),
            access_key_id: s3.access_key().to_owned(),
            secret_access_key: s3.secret_key().to_owned(),
            insecure: true,
            ..S3Config::default()
        },
        ..BucketConfig::default()
    };
    Bucket::new(&cfg, &mut Registry::default()).expect("bucket")
}

/// The value of the sample `series` (name and labels as exposed) in `registry`'s exposition.
fn sample(registry: &Registry, series: &str) -> f64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

const FROM_BUCKET: &str = r#"heddle_querier_index_header_loaded_bytes_total{source="bucket"}"#;
const FROM_DISK: &str = r#"heddle_querier_index_header_loaded_bytes_total{source="disk"}"#;
const CORRUPT: &str = "heddle_querier_index_header_corrupt_files_total";

/// Sizes of the index-header files under the tenant's sync directory, by block.
fn header_files(sync: &Path) -> std::collections::BTreeMap<String, u64> {
    let Ok(dirs) = std::fs::read_dir(sync.join(TENANT)) else {
        return Default::default();
    };
    dirs.map(|d| {
        let d = d.unwrap();
        let len = std::fs::metadata(d.path().join(INDEX_HEADER_FILENAME)).map_or(0, |m| m.len());
        (d.file_name().into_string().unwrap(), len)
    })
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_store_reads_no_index_header_from_the_bucket() {
    let s3 = S3Server::start().expect("s3s-fs starts");
    let (sync, scratch) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let b = s3_bucket(&s3);
    let mut ulids = Vec::new();
    for (i, job) in ["first", "second", "third"].into_iter().enumerate() {
        let start = i as i64 * 1000;
        ulids.push(upload(&b, scratch.path(), start, start + 1000, job).await);
    }
    let all = ["first", "second", "third"];

    let mut registry = Registry::default();
    let store = BucketStore::new(b.clone(), Duration::ZERO, &mut registry).with_sync_dir(sync.path());
    assert_eq!(jobs(&store, 0, 5000).await.unwrap(), all);
    let files = header_files(sync.path());
    assert_eq!(files.keys().cloned().collect::<Vec<_>>(), {
        let mut u = ulids.clone();
        u.sort();
        u
    });
    assert!(files.values().all(|&len| len > 0), "{files:?}");
    assert!(sample(&registry, FROM_BUCKET) > 0.0);
    assert_eq!(sample(&registry, FROM_DISK), 0.0);
    drop(store);

    // The restart: a new store on the same sync dir.
    let mut registry = Registry::default();
    let store = BucketStore::new(b.clone(), Duration::ZERO, &mut registry).with_sync_dir(sync.path());
    assert_eq!(jobs(&store, 0, 5000).await.unwrap(), all, "the same answer");
    assert_eq!(
        sample(&registry, FROM_BUCKET),
        0.0,
        "no index header read from the bucket"
    );
    assert_eq!(sample(&registry, FROM_DISK), files.values().sum::<u64>() as f64);
    assert_eq!(sample(&registry, CORRUPT), 0.0);

    // A deleted block's directory goes on the next sync, as does anything else unlisted; the rest stay.
    b.delete_block(&tenant(), &ulids[0]).await.unwrap();
    std::fs::create_dir_all(sync.path().join(TENANT).join("01STRAYBLOCK")).unwrap();
    assert_eq!(jobs(&store, 0, 5000).await.unwrap(), ["second", "third"]);
    let left = header_files(sync.path());
    assert_eq!(
        left.keys().collect::<Vec<_>>(),
        files.keys().filter(|u| **u != ulids[0]).collect::<Vec<_>>()
    );
    drop(store);

    // A torn file is rebuilt from the bucket, counted, and the answer does not change.
    let torn = sync.path().join(TENANT).join(&ulids[1]).join(INDEX_HEADER_FILENAME);
    let len = std::fs::metadata(&torn).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&torn)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let mut registry = Registry::default();
    let store = BucketStore::new(b.clone(), Duration::ZERO, &mut registry).with_sync_dir(sync.path());
    assert_eq!(jobs(&store, 0, 5000).await.unwrap(), ["second", "third"]);
    assert_eq!(sample(&registry, CORRUPT), 1.0);
    assert!(sample(&registry, FROM_BUCKET) > 0.0);
    assert_eq!(std::fs::metadata(&torn).unwrap().len(), len, "rewritten whole");
}
