//! The lock on a filesystem bucket and on a real S3 server (s3s-fs): a holder whose lease ran out and was taken
//! over can neither extend nor delete its successor's lock, whatever it tries and in whichever order.

use super::*;
use heddle_bucket::{Backend, BucketConfig, FilesystemConfig, S3Config};
use heddle_testkit::s3::S3Server;
use prometheus_client::registry::Registry;

const LEASE: i64 = 15 * 60 * 1000;
const T0: i64 = 1_700_000_000_000;

fn fs_bucket(dir: &std::path::Path) -> Bucket {
    let cfg = BucketConfig {
        backend: Backend::Filesystem,
        filesystem: FilesystemConfig {
            dir: dir.join("bucket"),
        },
        ..BucketConfig::default()
    };
    Bucket::new(&cfg, &mut Registry::default()).unwrap()
}

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
    Bucket::new(&cfg, &mut Registry::default()).unwrap()
}

/// The lock as stored: the highest generation and its body.
async fn top(bucket: &Bucket, tenant: &TenantId) -> (u64, LockBody) {
    let generations = list_generations(bucket, tenant).await.unwrap();
    let g = *generations.last().expect("the lock has a generation");
    let body = bucket
        .get_tenant_object(tenant, &object_name(g))
        .await
        .unwrap()
        .expect("the top generation is readable");
    (g, serde_json::from_slice(&body).unwrap())
}

async fn generations(bucket: &Bucket, tenant: &TenantId) -> Vec<u64> {
    list_generations(bucket, tenant).await.unwrap()
}

/// `a` holds the lock, its lease runs out, `b` takes it over; then `a` tries everything a holder can do, both
/// while `b` still sits on the generation that replaced `a`'s and after `b` has moved past it (so `a`'s next
/// number is free again). `b`'s lock must come out of each attempt as it was.
async fn a_lapsed_holder_cannot_touch_its_successors_lock(bucket: &Bucket) {
    let tenant = TenantId::new("team-a").unwrap();
    let a = TenantLock::acquire(bucket, &tenant, "a", LEASE, T0)
        .await
        .unwrap()
        .expect("a free tenant is taken");
    assert!(a.renew(T0 + 1000).await.unwrap(), "the holder renews its own lock");
    assert_eq!(
        generations(bucket, &tenant).await,
        vec![2],
        "a renewal leaves one generation"
    );
    assert!(
        TenantLock::acquire(bucket, &tenant, "b", LEASE, T0 + LEASE)
            .await
            .unwrap()
            .is_none(),
        "b waits while a's renewed lease runs"
    );

    // a's lease runs out; b takes over.
    let later = T0 + 1000 + LEASE + 1;
    let b = TenantLock::acquire(bucket, &tenant, "b", LEASE, later)
        .await
        .unwrap()
        .expect("an expired lease is taken over");
    let held_by_b = top(bucket, &tenant).await;
    assert_eq!(held_by_b.1.holder, "b");
    assert_eq!(
        generations(bucket, &tenant).await,
        vec![3],
        "b removed a's expired generation"
    );

    // a wakes up: its renewal finds b's generation in the way.
    assert!(!a.renew(later + 10).await.unwrap(), "a lost the lock");
    assert_eq!(top(bucket, &tenant).await, held_by_b, "a's renewal changed b's lock");
    a.release().await.unwrap();
    assert_eq!(top(bucket, &tenant).await, held_by_b, "a's release changed b's lock");
    assert_eq!(generations(bucket, &tenant).await, vec![3]);

    // b moves on twice: a's next number (3) and the one after are free again, below b's.
    assert!(b.renew(later + 20).await.unwrap());
    assert!(b.renew(later + 30).await.unwrap());
    let held_by_b = top(bucket, &tenant).await;
    assert_eq!((held_by_b.0, held_by_b.1.holder.as_str()), (5, "b"));
    assert!(
        !a.renew(later + 40).await.unwrap(),
        "a re-created a number below b's: still lost"
    );
    assert_eq!(top(bucket, &tenant).await, held_by_b, "a's renewal changed b's lock");
    assert_eq!(
        generations(bucket, &tenant).await,
        vec![5],
        "a cleaned up after itself only"
    );
    a.release().await.unwrap();
    assert_eq!(top(bucket, &tenant).await, held_by_b, "a's release changed b's lock");
    assert!(
        TenantLock::acquire(bucket, &tenant, "c", LEASE, later + 50)
            .await
            .unwrap()
            .is_none(),
        "after all of a's attempts, b still holds the tenant for others"
    );

    // b still holds it, renews, and releases it: the tenant is free at once, and a stays out of it.
    assert!(b.renew(later + 60).await.unwrap(), "b's lock is intact");
    b.release().await.unwrap();
    let released = top(bucket, &tenant).await;
    assert_eq!((released.1.holder.as_str(), released.1.expires_at_ms), ("b", 0));
    assert!(!a.renew(later + 70).await.unwrap(), "a's old lock does not come back");
    assert_eq!(top(bucket, &tenant).await, released);
    let c = TenantLock::acquire(bucket, &tenant, "c", LEASE, later + 80)
        .await
        .unwrap()
        .expect("a released lock is free at once");
    assert!(c.generation() > released.0);
    assert!(
        !b.renew(later + 90).await.unwrap(),
        "b released it: its renewal takes nothing back"
    );
    assert_eq!(top(bucket, &tenant).await.1.holder, "c");
}

/// Two compactors racing for a free tenant: exactly one gets it. On the filesystem only: the lock relies on an
/// atomic create-only PUT (AWS S3, MinIO, R2, a filesystem's hard link), and s3s-fs checks `If-None-Match` and
/// then writes, so two creates in the same instant can both succeed there.
async fn one_of_two_takes_a_free_tenant(bucket: &Bucket) {
    let tenant = TenantId::new("team-b").unwrap();
    let (x, y) = tokio::join!(
        TenantLock::acquire(bucket, &tenant, "x", LEASE, T0),
        TenantLock::acquire(bucket, &tenant, "y", LEASE, T0),
    );
    let (x, y) = (x.unwrap(), y.unwrap());
    assert!(x.is_some() != y.is_some(), "x: {x:?}, y: {y:?}");
    let winner = if x.is_some() { "x" } else { "y" };
    assert_eq!(top(bucket, &tenant).await.1.holder, winner);
}

/// A compactor restarted under the same name takes its own unexpired lock back at once.
async fn a_restarted_holder_takes_its_lock_back(bucket: &Bucket) {
    let tenant = TenantId::new("team-c").unwrap();
    let first = TenantLock::acquire(bucket, &tenant, "x", LEASE, T0)
        .await
        .unwrap()
        .unwrap();
    let again = TenantLock::acquire(bucket, &tenant, "x", LEASE, T0 + 1).await.unwrap();
    assert_eq!(again.map(|l| l.generation()), Some(first.generation() + 1));
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_filesystem_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let bucket = fs_bucket(dir.path());
    a_lapsed_holder_cannot_touch_its_successors_lock(&bucket).await;
    one_of_two_takes_a_free_tenant(&bucket).await;
    a_restarted_holder_takes_its_lock_back(&bucket).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_s3() {
    let s3 = S3Server::start().expect("s3s-fs starts");
    let bucket = s3_bucket(&s3);
    a_lapsed_holder_cannot_touch_its_successors_lock(&bucket).await;
    a_restarted_holder_takes_its_lock_back(&bucket).await;
}

#[test]
fn generation_names_sort_as_numbers() {
    let mut names = [object_name(10), object_name(9), object_name(u64::MAX), object_name(1)];
    names.sort();
    assert_eq!(
        names,
        [object_name(1), object_name(9), object_name(10), object_name(u64::MAX)]
    );
    assert_eq!(object_name(7), "compactor-lock/00000000000000000007");
}
