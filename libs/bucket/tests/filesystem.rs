//! The default backend: a local directory as the bucket, through the same code the S3 backend uses.

use std::path::{Path, PathBuf};
use std::time::Duration;

use heddle_bucket::{Bucket, BucketConfig, BucketOptions, FilesystemConfig, Shipper};
use heddle_model::TenantId;
use heddle_tsdb::block::{BlockMeta, new_ulid};
use prometheus_client::registry::Registry;

fn fake_block(parent: &Path, min_time: i64, chunk_len: usize) -> (String, PathBuf) {
    let meta = BlockMeta::new(new_ulid(), min_time, min_time + 7_200_000, Some("anonymous"));
    let dir = parent.join(&meta.ulid);
    std::fs::create_dir_all(dir.join("chunks")).unwrap();
    std::fs::write(
        dir.join("chunks/000001"),
        (0..chunk_len).map(|i| (i % 253) as u8).collect::<Vec<_>>(),
    )
    .unwrap();
    std::fs::write(dir.join("index"), b"index").unwrap();
    std::fs::write(dir.join("meta.json"), meta.to_json()).unwrap();
    (meta.ulid, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ships_lists_reads_and_downloads_with_a_directory_bucket() {
    let root = tempfile::tempdir().unwrap();
    let bucket_dir = root.path().join("not-yet-created/blocks");
    let cfg = BucketConfig {
        filesystem: FilesystemConfig {
            dir: bucket_dir.clone(),
        },
        ..BucketConfig::default()
    };
    let opts = BucketOptions {
        multipart_threshold: 64 * 1024,
        part_size: 40 * 1024,
        ..BucketOptions::default()
    };
    let mut registry = Registry::default();
    let bucket = Bucket::with_options(&cfg, &mut registry, opts).expect("bucket");
    assert_eq!(bucket.backend(), "filesystem");
    let tenant = TenantId::anonymous();
    let tenant_dir = root.path().join("tsdb/anonymous");
    let (small, _) = fake_block(&tenant_dir, 0, 1000);
    let (large, large_dir) = fake_block(&tenant_dir, 7_200_000, 100_000);

    let shipper = Shipper::new(tenant.clone(), tenant_dir.clone(), bucket.clone());
    assert_eq!(
        shipper.ship().await.unwrap().uploaded,
        vec![small.clone(), large.clone()]
    );
    // The layout on disk is the bucket layout.
    let chunk = std::fs::read(large_dir.join("chunks/000001")).unwrap();
    assert_eq!(
        std::fs::read(bucket_dir.join(format!("anonymous/{large}/chunks/000001"))).unwrap(),
        chunk
    );
    assert!(bucket_dir.join(format!("anonymous/{small}/meta.json")).is_file());

    let listed: Vec<String> = bucket
        .list_blocks(&tenant)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.ulid)
        .collect();
    assert_eq!(listed, vec![small.clone(), large.clone()]);
    assert_eq!(bucket.tenants().await.unwrap(), vec![tenant.clone()]);

    let files = bucket.block_files(&tenant, &large);
    let part = tokio::task::spawn_blocking(move || files.read("chunks/000001", 40_000..41_000).unwrap())
        .await
        .unwrap();
    assert_eq!(part.as_ref(), &chunk[40_000..41_000]);

    let dest = root.path().join("downloads");
    std::fs::create_dir_all(&dest).unwrap();
    let got = bucket.download_block(&tenant, &large, &dest).await.unwrap();
    assert_eq!(std::fs::read(got.join("chunks/000001")).unwrap(), chunk);

    // Both are shipped; only the one past retention goes: now 8h, retention 5h, so maxTime 2h goes, 4h stays.
    let now = 4 * 7_200_000;
    let deleted = shipper
        .delete_expired(Duration::from_secs(5 * 3600), now)
        .await
        .unwrap();
    assert_eq!(deleted, vec![small.clone()]);
    assert!(!tenant_dir.join(&small).exists() && tenant_dir.join(&large).exists());
    assert_eq!(
        bucket.list_blocks(&tenant).await.unwrap().len(),
        2,
        "the bucket keeps both"
    );
}
