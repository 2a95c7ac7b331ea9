use super::*;
use crate::testing::{fake_block, fast_options, memory_bucket};

const HOUR: i64 = 3_600_000;

fn tenant() -> TenantId {
    TenantId::new("team-a").unwrap()
}

fn shipper_json(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join(SHIPPER_FILENAME)).unwrap()).unwrap()
}

#[tokio::test]
async fn ships_oldest_first_once_and_remembers_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let (bucket, store, registry) = memory_bucket(fast_options());
    let (late, _) = fake_block(dir.path(), "team-a", 2 * HOUR, 4 * HOUR, 10);
    let (early, _) = fake_block(dir.path(), "team-a", 0, 2 * HOUR, 10);
    // Not blocks: a block being written, a directory without meta.json, a stray file, the WAL.
    let (tmp, tmp_dir) = fake_block(dir.path(), "team-a", 0, 1, 10);
    std::fs::rename(&tmp_dir, dir.path().join(format!("{tmp}.tmp-for-creation"))).unwrap();
    std::fs::create_dir_all(dir.path().join("01ARZ3NDEKTSV4RRFFQ69G5FAV")).unwrap();
    std::fs::create_dir_all(dir.path().join("wal")).unwrap();
    std::fs::write(dir.path().join("01BX5ZZKBKACTAV9WEVGEMMVRZ"), b"file").unwrap();

    let shipper = Shipper::new(tenant(), dir.path().to_owned(), bucket.clone());
    assert!(shipper.shipped().is_empty());
    let report = shipper.ship().await.unwrap();
    assert_eq!(report.uploaded, vec![early.clone(), late.clone()], "oldest first");
    assert!(report.failed.is_empty());
    let sorted: BTreeSet<&String> = BTreeSet::from([&early, &late]);
    assert_eq!(
        shipper_json(dir.path()),
        serde_json::json!({"version": 1, "uploaded": sorted})
    );
    assert!(!dir.path().join("shipper.json.tmp").exists());

    let writes = store.writes().len();
    assert!(shipper.ship().await.unwrap().uploaded.is_empty(), "nothing new");
    let restarted = Shipper::new(tenant(), dir.path().to_owned(), bucket.clone());
    assert_eq!(restarted.shipped(), BTreeSet::from([early.clone(), late.clone()]));
    assert_eq!(
        restarted.ship().await.unwrap(),
        ShipReport::default(),
        "a restart re-uploads nothing"
    );
    assert_eq!(store.writes().len(), writes, "no object written after the first ship");

    let (newest, _) = fake_block(dir.path(), "team-a", 4 * HOUR, 6 * HOUR, 10);
    assert_eq!(restarted.ship().await.unwrap().uploaded, vec![newest]);

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(text.contains("heddle_shipper_uploads_total 3"), "{text}");
    assert!(text.contains("heddle_shipper_upload_failures_total 0"), "{text}");
}

#[tokio::test]
async fn a_failed_upload_keeps_the_block_for_the_next_ship() {
    let dir = tempfile::tempdir().unwrap();
    let (bucket, store, registry) = memory_bucket(fast_options());
    let (first, first_dir) = fake_block(dir.path(), "team-a", 0, HOUR, 10);
    let (second, _) = fake_block(dir.path(), "team-a", HOUR, 2 * HOUR, 10);
    let shipper = Shipper::new(tenant(), dir.path().to_owned(), bucket.clone());

    // The bucket is down for longer than the retries: the first block fails, the second waits.
    store.fail_writes("", 100, true);
    let report = shipper.ship().await.unwrap();
    assert!(report.uploaded.is_empty());
    assert_eq!(report.failed.iter().map(|f| &f.0).collect::<Vec<_>>(), vec![&first]);
    assert!(report.failed[0].1.contains(&first), "{:?}", report.failed);
    assert!(shipper.shipped().is_empty());
    assert!(!dir.path().join(SHIPPER_FILENAME).exists());
    assert!(first_dir.join("meta.json").exists(), "the block stays");
    assert!(bucket.list_blocks(&tenant()).await.unwrap().is_empty());
    assert_eq!(last_upload(&registry), 0.0, "no upload succeeded yet");

    store.heal();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let report = shipper.ship().await.unwrap();
    assert_eq!(report.uploaded, vec![first.clone(), second.clone()]);
    assert_eq!(bucket.list_blocks(&tenant()).await.unwrap().len(), 2);
    let last = last_upload(&registry);
    assert!(
        last >= before.floor() && last < before + 600.0,
        "the last successful upload is now: {last} (ship started at {before})"
    );

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(text.contains("heddle_shipper_upload_failures_total 1"), "{text}");
    assert!(
        text.contains("heddle_bucket_operation_failures_total{operation=\"upload\"} 3"),
        "{text}"
    );
}

#[tokio::test]
async fn a_block_that_cannot_be_uploaded_does_not_hold_back_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let (bucket, _store, _reg) = memory_bucket(fast_options());
    let (bad, bad_dir) = fake_block(dir.path(), "team-a", 0, HOUR, 10);
    std::fs::write(bad_dir.join("meta.json"), b"{not json").unwrap();
    let (good, _) = fake_block(dir.path(), "team-a", HOUR, 2 * HOUR, 10);
    let shipper = Shipper::new(tenant(), dir.path().to_owned(), bucket);
    let report = shipper.ship().await.unwrap();
    assert_eq!(report.uploaded, vec![good]);
    assert_eq!(report.failed.len(), 1);
    assert_eq!(report.failed[0].0, bad);
    assert!(report.failed[0].1.contains("invalid meta.json"), "{:?}", report.failed);
}

#[tokio::test]
async fn delete_expired_removes_only_shipped_blocks_past_retention() {
    let dir = tempfile::tempdir().unwrap();
    let (bucket, store, _reg) = memory_bucket(fast_options());
    let (old_shipped, _) = fake_block(dir.path(), "team-a", 0, 2 * HOUR, 10);
    let (new_shipped, _) = fake_block(dir.path(), "team-a", 10 * HOUR, 12 * HOUR, 10);
    let shipper = Shipper::new(tenant(), dir.path().to_owned(), bucket);
    assert_eq!(shipper.ship().await.unwrap().uploaded.len(), 2);
    // Made after the ship, and the bucket refuses it: old but never shipped.
    let (old_unshipped, _) = fake_block(dir.path(), "team-a", HOUR, 3 * HOUR, 10);
    store.fail_writes("", 100, false);
    assert_eq!(shipper.ship().await.unwrap().failed.len(), 1);
    // A leftover of a crash in the middle of an earlier delete.
    std::fs::create_dir_all(dir.path().join(format!("{old_shipped}.tmp-delete/chunks"))).unwrap();

    let now = 13 * HOUR;
    let retention = Duration::from_secs(6 * 3600); // cutoff 7h: maxTime 2h and 3h are older, 12h is not
    let deleted = shipper.delete_expired(retention, now).await.unwrap();
    assert_eq!(deleted, vec![old_shipped.clone()]);
    assert!(!dir.path().join(&old_shipped).exists());
    assert!(
        dir.path().join(&new_shipped).join("meta.json").exists(),
        "inside retention"
    );
    assert!(
        dir.path().join(&old_unshipped).join("meta.json").exists(),
        "never shipped"
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-delete"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert!(
        shipper.delete_expired(retention, now).await.unwrap().is_empty(),
        "nothing left to delete"
    );
}

#[tokio::test]
async fn an_unreadable_shipper_file_means_nothing_shipped() {
    let dir = tempfile::tempdir().unwrap();
    let (bucket, _store, _reg) = memory_bucket(fast_options());
    let (ulid, _) = fake_block(dir.path(), "team-a", 0, HOUR, 10);
    for (name, content) in [
        ("corrupt", "{\"version\":"),
        ("future version", "{\"version\":2,\"uploaded\":[]}"),
    ] {
        std::fs::write(dir.path().join(SHIPPER_FILENAME), content).unwrap();
        let shipper = Shipper::new(tenant(), dir.path().to_owned(), bucket.clone());
        assert!(shipper.shipped().is_empty(), "{name}");
        assert_eq!(shipper.ship().await.unwrap().uploaded, vec![ulid.clone()], "{name}");
        assert_eq!(
            shipper_json(dir.path())["uploaded"],
            serde_json::json!([&ulid]),
            "{name}: rewritten"
        );
    }
    // Thanos' own file (tab-indented, extra whitespace) reads fine.
    std::fs::write(
        dir.path().join(SHIPPER_FILENAME),
        format!("{{\n\t\"version\": 1,\n\t\"uploaded\": [\n\t\t\"{ulid}\"\n\t]\n}}"),
    )
    .unwrap();
    let shipper = Shipper::new(tenant(), dir.path().to_owned(), bucket);
    assert_eq!(shipper.shipped(), BTreeSet::from([ulid]));
}

/// `heddle_shipper_last_successful_upload_timestamp_seconds` as exposed.
fn last_upload(registry: &prometheus_client::registry::Registry) -> f64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("heddle_shipper_last_successful_upload_timestamp_seconds "))
        .unwrap_or_else(|| panic!("no last-upload gauge in:\n{text}"))
        .parse()
        .unwrap()
}
