use super::*;
use crate::testing::{fake_block, fast_options, memory_bucket};

fn tenant() -> TenantId {
    TenantId::new("team-a").unwrap()
}

async fn object(bucket: &Bucket, key: &str) -> Option<Bytes> {
    match bucket.get_bytes(&ObjectPath::from(key)).await {
        Ok(b) => Some(b),
        Err(e) if e.is_not_found() => None,
        Err(e) => panic!("get {key}: {e}"),
    }
}

#[tokio::test]
async fn uploads_every_file_under_tenant_and_ulid_with_meta_last() {
    let dir = tempfile::tempdir().unwrap();
    let (ulid, block) = fake_block(dir.path(), "team-a", 1_000, 7_201_000, 4096);
    let (bucket, store, _reg) = memory_bucket(fast_options());

    let meta = bucket.upload_block(&tenant(), &block).await.unwrap();
    assert_eq!(meta.ulid, ulid);

    let writes = store.writes();
    let want: Vec<String> = ["chunks/000001", "chunks/000002", "index", "tombstones", "meta.json"]
        .iter()
        .map(|f| format!("team-a/{ulid}/{f}"))
        .collect();
    assert_eq!(writes, want, "every file once, meta.json last");
    for f in ["chunks/000001", "chunks/000002", "index", "tombstones", "meta.json"] {
        let local = std::fs::read(block.join(f)).unwrap();
        let remote = object(&bucket, &format!("team-a/{ulid}/{f}")).await.expect(f);
        assert_eq!(remote.as_ref(), local.as_slice(), "{f} bytes");
    }
    assert!(store.multipart_keys().is_empty(), "small files use one put");
}

#[tokio::test]
async fn a_failure_before_meta_leaves_the_block_invisible_and_a_retry_completes_it() {
    let dir = tempfile::tempdir().unwrap();
    let (ulid, block) = fake_block(dir.path(), "team-a", 0, 10, 100);
    let (bucket, store, _reg) = memory_bucket(fast_options());

    store.fail_writes("/tombstones", 1, false);
    let err = bucket.upload_block(&tenant(), &block).await.unwrap_err();
    let msg = err.to_string();
    assert!(!err.is_retryable(), "permission denied is final: {msg}");
    assert!(
        msg.contains(&format!("team-a/{ulid}/tombstones")) && msg.contains("memory"),
        "{msg}"
    );
    assert!(object(&bucket, &format!("team-a/{ulid}/meta.json")).await.is_none());
    assert!(
        bucket.list_blocks(&tenant()).await.unwrap().is_empty(),
        "half a block is not listed"
    );

    // Transient failures are retried inside one upload, up to the attempt bound.
    store.fail_writes("/index", 2, true);
    bucket.upload_block(&tenant(), &block).await.unwrap();
    let listed = bucket.list_blocks(&tenant()).await.unwrap();
    assert_eq!(listed.iter().map(|m| &m.ulid).collect::<Vec<_>>(), vec![&ulid]);

    store.fail_writes("/index", 3, true);
    let err = bucket.upload_block(&tenant(), &block).await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(err.to_string().contains("after 3 attempt(s)"), "{err}");
}

#[tokio::test]
async fn large_files_go_up_in_parts() {
    let dir = tempfile::tempdir().unwrap();
    let (ulid, block) = fake_block(dir.path(), "team-a", 0, 10, 10_000);
    let opts = BucketOptions {
        multipart_threshold: 4096,
        part_size: 3000,
        ..fast_options()
    };
    let (bucket, store, _reg) = memory_bucket(opts);
    bucket.upload_block(&tenant(), &block).await.unwrap();
    assert_eq!(store.multipart_keys(), vec![format!("team-a/{ulid}/chunks/000001")]);
    let remote = object(&bucket, &format!("team-a/{ulid}/chunks/000001")).await.unwrap();
    assert_eq!(
        remote.as_ref(),
        std::fs::read(block.join("chunks/000001")).unwrap().as_slice()
    );
}

#[tokio::test]
async fn lists_complete_blocks_by_min_time_and_tenants() {
    let dir = tempfile::tempdir().unwrap();
    let (bucket, store, _reg) = memory_bucket(fast_options());
    let (late, b1) = fake_block(dir.path(), "team-a", 7_200_000, 14_400_000, 10);
    let (early, b2) = fake_block(dir.path(), "team-a", 0, 7_200_000, 10);
    bucket.upload_block(&tenant(), &b1).await.unwrap();
    bucket.upload_block(&tenant(), &b2).await.unwrap();
    let other = TenantId::new("team-b").unwrap();
    let (_, b3) = fake_block(dir.path(), "team-b", 0, 10, 10);
    bucket.upload_block(&other, &b3).await.unwrap();
    // A partial upload and a corrupt meta.json are skipped.
    store
        .put(
            &ObjectPath::from("team-a/01ARZ3NDEKTSV4RRFFQ69G5FAV/index"),
            PutPayload::from_static(b"x"),
        )
        .await
        .unwrap();
    store
        .put(
            &ObjectPath::from("team-a/01BX5ZZKBKACTAV9WEVGEMMVRZ/meta.json"),
            PutPayload::from_static(b"{"),
        )
        .await
        .unwrap();

    let listed: Vec<String> = bucket
        .list_blocks(&tenant())
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.ulid)
        .collect();
    assert_eq!(listed, vec![early, late]);
    let tenants: Vec<String> = bucket.tenants().await.unwrap().iter().map(|t| t.to_string()).collect();
    assert_eq!(tenants, vec!["team-a", "team-b"]);
    assert!(
        bucket
            .list_blocks(&TenantId::new("nobody").unwrap())
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn tenant_ids_keep_their_characters_in_object_keys() {
    let dir = tempfile::tempdir().unwrap();
    let (bucket, store, _reg) = memory_bucket(fast_options());
    let odd = TenantId::new("team*(1)!'x'").unwrap();
    let (ulid, block) = fake_block(dir.path(), odd.as_str(), 0, 10, 10);
    bucket.upload_block(&odd, &block).await.unwrap();
    assert!(
        store.writes().contains(&format!("team*(1)!'x'/{ulid}/meta.json")),
        "Mimir's key, not percent-encoded: {:?}",
        store.writes()
    );
    assert_eq!(bucket.tenants().await.unwrap(), vec![odd.clone()]);
    assert_eq!(bucket.list_blocks(&odd).await.unwrap().len(), 1);
}

#[tokio::test]
async fn refuses_blocks_that_are_not_what_they_claim() {
    let dir = tempfile::tempdir().unwrap();
    let (bucket, _store, _reg) = memory_bucket(fast_options());
    let (_, block) = fake_block(dir.path(), "team-b", 0, 10, 10);
    let err = bucket.upload_block(&tenant(), &block).await.unwrap_err().to_string();
    assert!(err.contains("team-b"), "wrong tenant: {err}");

    let renamed = dir.path().join("not-a-ulid");
    let (_, block) = fake_block(dir.path(), "team-a", 0, 10, 10);
    std::fs::rename(&block, &renamed).unwrap();
    let err = bucket.upload_block(&tenant(), &renamed).await.unwrap_err().to_string();
    assert!(err.contains("not the block's ULID"), "{err}");

    let (_, block) = fake_block(dir.path(), "team-a", 0, 10, 10);
    std::fs::remove_file(block.join("index")).unwrap();
    let err = bucket.upload_block(&tenant(), &block).await.unwrap_err().to_string();
    assert!(err.contains("no index"), "{err}");
}

#[tokio::test]
async fn download_round_trips_and_refuses_incomplete_blocks() {
    let src = tempfile::tempdir().unwrap();
    let dst = tempfile::tempdir().unwrap();
    let (ulid, block) = fake_block(src.path(), "team-a", 0, 10, 50_000);
    let (bucket, store, _reg) = memory_bucket(fast_options());
    bucket.upload_block(&tenant(), &block).await.unwrap();

    let got = bucket.download_block(&tenant(), &ulid, dst.path()).await.unwrap();
    assert_eq!(got, dst.path().join(&ulid));
    for f in ["meta.json", "index", "chunks/000001", "chunks/000002", "tombstones"] {
        assert_eq!(
            std::fs::read(got.join(f)).unwrap(),
            std::fs::read(block.join(f)).unwrap(),
            "{f}"
        );
    }
    assert!(!dst.path().join(format!("{ulid}.tmp-download")).exists());
    let again = bucket.download_block(&tenant(), &ulid, dst.path()).await.unwrap_err();
    assert!(again.to_string().contains("already exists"), "{again}");

    store
        .put(
            &ObjectPath::from("team-a/01ARZ3NDEKTSV4RRFFQ69G5FAV/index"),
            PutPayload::from_static(b"x"),
        )
        .await
        .unwrap();
    let err = bucket
        .download_block(&tenant(), "01ARZ3NDEKTSV4RRFFQ69G5FAV", dst.path())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no meta.json"), "{err}");
    assert!(!dst.path().join("01ARZ3NDEKTSV4RRFFQ69G5FAV").exists());
    let err = bucket
        .download_block(&tenant(), "../../etc", dst.path())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not a ULID"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_files_reads_ranges_from_a_blocking_thread() {
    let dir = tempfile::tempdir().unwrap();
    let (ulid, block) = fake_block(dir.path(), "team-a", 0, 10, 10_000);
    let (bucket, _store, registry) = memory_bucket(fast_options());
    bucket.upload_block(&tenant(), &block).await.unwrap();
    let local = std::fs::read(block.join("chunks/000001")).unwrap();

    let files = bucket.block_files(&tenant(), &ulid);
    let (size, middle, empty, past_end, missing) = tokio::task::spawn_blocking(move || {
        (
            files.size("chunks/000001").unwrap(),
            files.read("chunks/000001", 1000..1500).unwrap(),
            files.read("chunks/000001", 10_000..10_000).unwrap(),
            files.read("chunks/000001", 9_990..10_001).unwrap_err().to_string(),
            files.size("chunks/000009").unwrap_err(),
        )
    })
    .await
    .unwrap();
    assert_eq!(size, 10_000);
    assert_eq!(middle.as_ref(), &local[1000..1500]);
    assert!(empty.is_empty());
    assert!(
        past_end.contains("chunks/000001") && past_end.contains("past the end"),
        "{past_end}"
    );
    assert!(
        matches!(&missing, heddle_tsdb::TsdbError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{missing}"
    );

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    for want in [
        "heddle_bucket_operations_total{operation=\"upload\"} 5",
        "heddle_bucket_operations_total{operation=\"get_range\"} 1",
        "heddle_bucket_operation_duration_seconds_count{operation=\"attributes\"} 2",
        "heddle_bucket_uploaded_bytes_total ",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    assert!(
        !text.contains("heddle_bucket_operation_failures_total{operation=\"attributes\"}"),
        "not found is no failure:\n{text}"
    );
}
