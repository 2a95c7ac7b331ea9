//! The bucket and the shipper against a real S3 server (s3s-fs, which checks SigV4 and stores objects as files):
//! multipart upload, listing, download, ranged reads, wrong credentials, and an outage in the middle of shipping.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use heddle_bucket::{Backend, Bucket, BucketConfig, BucketOptions, RetryOptions, S3Config, Shipper};
use heddle_model::TenantId;
use heddle_testkit::s3::S3Server;
use heddle_tsdb::block::{BlockMeta, new_ulid};
use object_store::ObjectStoreExt;
use prometheus_client::registry::Registry;

const MIB: usize = 1024 * 1024;

fn config(s3: &S3Server, secret: &str) -> BucketConfig {
    BucketConfig {
        backend: Backend::S3,
        s3: S3Config {
            endpoint: s3.addr().to_string(),
            bucket_name: s3.bucket().to_owned(),
            access_key_id: s3.access_key().to_owned(),
            secret_access_key: secret.to_owned(),
            insecure: true,
            ..S3Config::default()
        },
        ..BucketConfig::default()
    }
}

/// Short retries so an outage fails within a second or two.
fn options() -> BucketOptions {
    BucketOptions {
        retry: RetryOptions {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(200),
            max_elapsed: Duration::from_secs(5),
        },
        client_retries: 0,
        connect_timeout: Duration::from_secs(2),
        ..BucketOptions::default()
    }
}

fn bucket(s3: &S3Server) -> Bucket {
    Bucket::with_options(&config(s3, s3.secret_key()), &mut Registry::default(), options()).expect("bucket")
}

/// A block directory of `tenant` with a real meta.json, an index, a `chunk_len`-byte `chunks/000001` of
/// position-dependent bytes (a swapped or lost multipart part changes them) and a small `chunks/000002`.
fn fake_block(parent: &Path, tenant: &str, min_time: i64, chunk_len: usize) -> (String, PathBuf) {
    let meta = BlockMeta::new(new_ulid(), min_time, min_time + 7_200_000, Some(tenant));
    let dir = parent.join(&meta.ulid);
    std::fs::create_dir_all(dir.join("chunks")).unwrap();
    let mut x = 0x9E37_79B9_7F4A_7C15_u64;
    let chunk: Vec<u8> = (0..chunk_len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(dir.join("chunks/000001"), chunk).unwrap();
    std::fs::write(dir.join("chunks/000002"), b"second segment").unwrap();
    std::fs::write(dir.join("index"), format!("index of {}", meta.ulid)).unwrap();
    std::fs::write(dir.join("meta.json"), meta.to_json()).unwrap();
    (meta.ulid, dir)
}

/// Every file under `dir`, by `/`-separated relative path, with its bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    if dir.exists() {
        walk(dir, dir, &mut out);
    }
    out
}

fn prefixed(prefix: &str, files: BTreeMap<String, Vec<u8>>) -> BTreeMap<String, Vec<u8>> {
    files.into_iter().map(|(k, v)| (format!("{prefix}/{k}"), v)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multipart_block_round_trips_through_s3() {
    let s3 = S3Server::start().expect("s3s-fs");
    let tenant = TenantId::new("team-a").unwrap();
    let local = tempfile::tempdir().unwrap();
    let (ulid, block) = fake_block(local.path(), "team-a", 0, 20 * MIB);
    let bucket = bucket(&s3);

    let meta = bucket.upload_block(&tenant, &block).await.expect("upload");
    assert_eq!(meta.ulid, ulid);
    // What s3s-fs stored is exactly the block, byte for byte.
    assert_eq!(
        files(&s3.bucket_dir()),
        prefixed(&format!("team-a/{ulid}"), files(&block))
    );

    // The 20 MiB file went up in 8 MiB parts: S3 marks multipart ETags with the part count.
    let raw = object_store::aws::AmazonS3Builder::new()
        .with_endpoint(s3.endpoint())
        .with_allow_http(true)
        .with_bucket_name(s3.bucket())
        .with_region("us-east-1")
        .with_access_key_id(s3.access_key())
        .with_secret_access_key(s3.secret_key())
        .build()
        .unwrap();
    let head = raw
        .head(&object_store::path::Path::from(format!("team-a/{ulid}/chunks/000001")))
        .await
        .unwrap();
    assert!(
        head.e_tag
            .as_deref()
            .is_some_and(|e| e.trim_matches('"').ends_with("-3")),
        "{:?}",
        head.e_tag
    );

    let listed = bucket.list_blocks(&tenant).await.expect("list");
    assert_eq!(listed, vec![meta]);
    let tenants: Vec<String> = bucket
        .tenants()
        .await
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(tenants, vec!["team-a"]);

    let dest = tempfile::tempdir().unwrap();
    let got = bucket
        .download_block(&tenant, &ulid, dest.path())
        .await
        .expect("download");
    assert_eq!(files(&got), files(&block));

    let block_files = bucket.block_files(&tenant, &ulid);
    let boundary = 8 * MIB as u64;
    let (size, across_parts) = tokio::task::spawn_blocking(move || {
        (
            block_files.size("chunks/000001").unwrap(),
            block_files
                .read("chunks/000001", boundary - 100..boundary + 100)
                .unwrap(),
        )
    })
    .await
    .unwrap();
    let chunk = std::fs::read(block.join("chunks/000001")).unwrap();
    assert_eq!(size, chunk.len() as u64);
    assert_eq!(
        across_parts.as_ref(),
        &chunk[boundary as usize - 100..boundary as usize + 100]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_fail_at_once_with_a_clear_error() {
    let s3 = S3Server::start().expect("s3s-fs");
    let tenant = TenantId::new("team-a").unwrap();
    let local = tempfile::tempdir().unwrap();
    let (ulid, block) = fake_block(local.path(), "team-a", 0, 1000);
    let bad = Bucket::with_options(&config(&s3, "not-the-secret"), &mut Registry::default(), options()).unwrap();

    let err = bad.upload_block(&tenant, &block).await.expect_err("refused");
    let msg = err.to_string();
    assert!(!err.is_retryable(), "{msg}");
    assert!(
        msg.contains("s3 bucket") && msg.contains(&format!("team-a/{ulid}/")),
        "{msg}"
    );
    assert!(
        msg.contains("blocks_storage.s3.access_key_id"),
        "names what to check: {msg}"
    );
    assert!(msg.contains("after 1 attempt(s)"), "not retried: {msg}");
    assert!(files(&s3.bucket_dir()).is_empty(), "nothing stored");
    let err = bad.list_blocks(&tenant).await.expect_err("listing refused too");
    assert!(!err.is_retryable(), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_delays_shipping_and_the_block_lands_exactly_once() {
    let mut s3 = S3Server::start().expect("s3s-fs");
    let tenant = TenantId::new("team-a").unwrap();
    let tenant_dir = tempfile::tempdir().unwrap();
    let (ulid, block) = fake_block(tenant_dir.path(), "team-a", 0, 100_000);
    let local_files = files(&block);
    let bucket = bucket(&s3);
    let shipper = Shipper::new(tenant.clone(), tenant_dir.path().to_owned(), bucket.clone());

    s3.stop().expect("stop s3s-fs");
    let report = shipper.ship().await.expect("ship reports, does not fail");
    assert!(report.uploaded.is_empty(), "{report:?}");
    assert_eq!(report.failed.len(), 1, "{report:?}");
    assert_eq!(report.failed[0].0, ulid);
    assert!(shipper.shipped().is_empty());
    assert_eq!(files(&block), local_files, "the block is kept as it was");

    s3.restart().expect("restart s3s-fs");
    let report = shipper.ship().await.expect("ship");
    assert_eq!(report.uploaded, vec![ulid.clone()], "{report:?}");
    assert!(report.failed.is_empty(), "{report:?}");
    let report = shipper.ship().await.expect("ship again");
    assert!(report.uploaded.is_empty() && report.failed.is_empty(), "{report:?}");

    // Exactly one copy: the bucket holds this block's files and nothing else.
    assert_eq!(
        files(&s3.bucket_dir()),
        prefixed(&format!("team-a/{ulid}"), local_files)
    );
    assert_eq!(bucket.list_blocks(&tenant).await.unwrap().len(), 1);
    let restarted = Shipper::new(tenant, tenant_dir.path().to_owned(), bucket);
    assert!(
        restarted.ship().await.unwrap().uploaded.is_empty(),
        "shipper.json remembers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_ids_with_star_and_quotes_sign_and_list() {
    let s3 = S3Server::start().expect("s3s-fs");
    let tenant = TenantId::new("team*(1)!'x'").unwrap();
    let local = tempfile::tempdir().unwrap();
    let (ulid, block) = fake_block(local.path(), tenant.as_str(), 0, 1000);
    let bucket = bucket(&s3);
    bucket.upload_block(&tenant, &block).await.expect("upload");
    assert_eq!(
        files(&s3.bucket_dir()),
        prefixed(&format!("team*(1)!'x'/{ulid}"), files(&block))
    );
    assert_eq!(bucket.tenants().await.unwrap(), vec![tenant.clone()]);
    assert_eq!(bucket.list_blocks(&tenant).await.unwrap().len(), 1);
    let dest = tempfile::tempdir().unwrap();
    let got = bucket
        .download_block(&tenant, &ulid, dest.path())
        .await
        .expect("download");
    assert_eq!(files(&got), files(&block));
}

/// A create-only put (the compactor's tenant lock) succeeds once: the second finds the object there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_only_put_succeeds_once() {
    let s3 = S3Server::start().expect("s3s-fs starts");
    let b = bucket(&s3);
    let tenant = TenantId::new("t").unwrap();
    let first = b.create_tenant_object(&tenant, "x.lock", "a".into()).await.unwrap();
    let second = b.create_tenant_object(&tenant, "x.lock", "b".into()).await.unwrap();
    assert_eq!((first, second), (true, false));
    let body = b.get_tenant_object(&tenant, "x.lock").await.unwrap().unwrap();
    assert_eq!(&body[..], b"a", "the first writer's body stays");
}
