//! The loop against a filesystem bucket: what a pass leaves in the bucket after replicas, crashes cut short,
//! retention changes and a second compactor.

use super::*;
use bytes::Bytes;
use heddle_bucket::{Backend, BucketConfig, FilesystemConfig};
use heddle_limits::Limits;
use heddle_model::{Labels, ManualClock, Sample};
use heddle_tsdb::ChunkData;
use heddle_tsdb::chunkenc::{XorChunk, decode_xor};
use std::path::PathBuf;
use std::time::Duration;

const H: i64 = 3600 * 1000;

struct Env {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    bucket: Bucket,
    tenant: TenantId,
    clock: Arc<ManualClock>,
    overrides: Arc<Overrides>,
}

fn env() -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    let cfg = BucketConfig {
        backend: Backend::Filesystem,
        filesystem: FilesystemConfig {
            dir: root.join("bucket"),
        },
        ..BucketConfig::default()
    };
    let bucket = Bucket::new(&cfg, &mut Registry::default()).unwrap();
    Env {
        _tmp: tmp,
        root,
        bucket,
        tenant: TenantId::new("team-a").unwrap(),
        clock: Arc::new(ManualClock::new(100 * H)),
        overrides: Arc::new(Overrides::new(Limits::default())),
    }
}

impl Env {
    fn compactor(&self, holder: &str) -> Compactor {
        let cfg = CompactorConfig {
            deletion_delay: Duration::ZERO,
            first_level_compaction_wait_period: Duration::ZERO,
            data_dir: self.root.join(format!("work-{holder}")),
            ..CompactorConfig::default()
        };
        Compactor::new(
            cfg,
            self.bucket.clone(),
            Arc::clone(&self.overrides),
            self.clock.clone(),
            holder.to_owned(),
            &mut Registry::default(),
        )
    }

    /// Uploads a level-1 block holding series `s0..s{series}` with one sample a minute over `[min, max)`
    /// (minus the minutes `skip` refuses), and returns its meta.
    async fn upload(&self, min: i64, max: i64, series: usize, skip: impl Fn(i64) -> bool) -> BlockMeta {
        let dir = self.root.join("local");
        std::fs::create_dir_all(&dir).unwrap();
        let meta = BlockMeta::new(new_ulid(), min, max, Some(self.tenant.as_str()));
        let mut w = BlockWriter::new(&dir, meta).unwrap();
        for s in 0..series {
            let labels = Labels::from_sorted([("__name__", "m"), ("s", &format!("{s:03}"))]).unwrap();
            let samples: Vec<Sample> = (min..max)
                .step_by(60_000)
                .filter(|t| !skip(*t))
                .map(|t| Sample::new(t, (t / 1000 + s as i64) as f64))
                .collect();
            let chunks: Vec<ChunkData> = samples.chunks(120).map(encode).collect();
            w.add_series(&labels, &chunks).unwrap();
        }
        let meta = w.finish().unwrap();
        self.bucket
            .upload_block(&self.tenant, &dir.join(&meta.ulid))
            .await
            .unwrap();
        meta
    }

    async fn listing(&self) -> TenantListing {
        self.bucket.list_tenant(&self.tenant).await.unwrap()
    }

    /// Every sample of the tenant's unmarked blocks, per series, read back through the block reader.
    async fn samples(&self) -> Vec<(Labels, Vec<i64>)> {
        let listing = self.listing().await;
        let marked: HashSet<String> = listing.deletion_marks.iter().map(|m| m.id.clone()).collect();
        let mut out: std::collections::BTreeMap<Labels, Vec<i64>> = Default::default();
        for b in listing.blocks.iter().filter(|b| !marked.contains(&b.ulid)) {
            let files = self.bucket.block_files(&self.tenant, &b.ulid);
            let meta = b.clone();
            let series = tokio::task::spawn_blocking(move || {
                BlockReader::open(files, meta)
                    .unwrap()
                    .select(i64::MIN, i64::MAX, &[])
                    .unwrap()
            })
            .await
            .unwrap();
            for s in series {
                let ts = s.chunks.iter().flat_map(|c| decode_xor(&c.data).unwrap()).map(|x| x.t);
                out.entry(s.labels).or_default().extend(ts);
            }
        }
        out.into_iter().collect()
    }
}

fn encode(samples: &[Sample]) -> ChunkData {
    let mut c = XorChunk::new();
    for s in samples {
        c.append(s.t, s.v).unwrap();
    }
    ChunkData {
        encoding: heddle_tsdb::chunkenc::Encoding::Xor,
        min_time: samples[0].t,
        max_time: samples[samples.len() - 1].t,
        data: Bytes::from(c.into_bytes()),
    }
}

/// What `series` series with a sample a minute over `[min, max)` hold.
fn expected(series: usize, min: i64, max: i64) -> Vec<(Labels, Vec<i64>)> {
    (0..series)
        .map(|s| {
            let labels = Labels::from_sorted([("__name__", "m"), ("s", &format!("{s:03}"))]).unwrap();
            (labels, (min..max).step_by(60_000).collect())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn replicas_become_one_block_then_longer_ranges() {
    let e = env();
    // Three replicas for each of six 2h ranges (one replica misses every other minute of the first range),
    // and one more range so the 12h window is over.
    for r in 0..7 {
        let (min, max) = (r * 2 * H, (r + 1) * 2 * H);
        e.upload(min, max, 5, |_| false).await;
        e.upload(min, max, 5, |t| r == 0 && (t / 60_000) % 2 == 1).await;
        e.upload(min, max, 5, |_| false).await;
    }
    let report = e.compactor("c1").run_once().await;
    assert_eq!(report.failed, 0, "{report:?}");
    assert_eq!(report.compactions, 7 + 1, "seven vertical merges, one 12h compaction");
    let listing = e.listing().await;
    assert!(
        listing.deletion_marks.is_empty(),
        "deletion delay 0: marked blocks are gone"
    );
    let ranges: Vec<(i64, i64, u32)> = listing
        .blocks
        .iter()
        .map(|b| (b.min_time / H, b.max_time / H, b.compaction.level))
        .collect();
    assert_eq!(ranges, vec![(0, 12, 3), (12, 14, 2)]);
    assert_eq!(
        listing.blocks[0].compaction.sources.len(),
        18,
        "the 18 replica blocks of the 12h"
    );
    assert_eq!(listing.blocks[0].compaction.parents.len(), 6);
    assert_eq!(e.samples().await, expected(5, 0, 14 * H), "every sample once");
    let index = e
        .bucket
        .read_bucket_index(&e.tenant)
        .await
        .unwrap()
        .expect("index written");
    assert_eq!(index.blocks.len(), 2);
    assert_eq!(index.updated_at, 100 * 3600);
    let again = e.compactor("c1").run_once().await;
    assert_eq!((again.compactions, again.marked, again.deleted), (0, 0, 0), "{again:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_between_upload_and_marks_is_finished_by_the_next_pass() {
    let e = env();
    let sources = [
        e.upload(0, 2 * H, 3, |_| false).await,
        e.upload(0, 2 * H, 3, |_| false).await,
    ];
    // What a compactor killed after uploading the merged block leaves: the merged block and unmarked sources.
    let dir = e.root.join("merged");
    std::fs::create_dir_all(&dir).unwrap();
    let files: Vec<_> = sources
        .iter()
        .map(|m| e.bucket.block_files(&e.tenant, &m.ulid))
        .collect();
    let merged = tokio::task::block_in_place(|| {
        let readers: Vec<BlockReader> = files
            .into_iter()
            .zip(&sources)
            .map(|(f, m)| BlockReader::open(f, m.clone()).unwrap())
            .collect();
        let mut w = BlockWriter::new(&dir, BlockMeta::compacted(new_ulid(), &sources)).unwrap();
        merge_blocks(&readers, &mut w).unwrap();
        w.finish().unwrap()
    });
    e.bucket.upload_block(&e.tenant, &dir.join(&merged.ulid)).await.unwrap();
    let report = e.compactor("c1").run_once().await;
    assert_eq!(report.compactions, 0, "nothing merged twice: {report:?}");
    assert_eq!(report.marked, 2, "{report:?}");
    assert_eq!(
        e.samples().await,
        expected(3, 0, 2 * H),
        "the unmarked blocks hold every sample once"
    );
    let report = e.compactor("c1").run_once().await;
    assert_eq!((report.compactions, report.deleted), (0, 2), "{report:?}");
    let listing = e.listing().await;
    assert_eq!(
        listing.blocks.iter().map(|b| &b.ulid).collect::<Vec<_>>(),
        [&merged.ulid]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn retention_follows_the_tenants_override() {
    let e = env();
    for r in 0..3 {
        e.upload(r * 2 * H, (r + 1) * 2 * H, 2, |_| false).await;
    }
    // Now 100h; the blocks end at 2h, 4h and 6h.
    e.clock.set(7 * H);
    let c = e.compactor("c1");
    let report = c.run_once().await;
    assert_eq!(
        (report.marked, report.deleted),
        (0, 0),
        "no retention by default: {report:?}"
    );
    e.overrides
        .apply_yaml("overrides:\n  team-a:\n    compactor_blocks_retention_period: 3h\n")
        .unwrap();
    let report = c.run_once().await;
    assert_eq!(
        (report.marked, report.deleted),
        (2, 0),
        "[0,2h) and [2h,4h) are past 7h-3h: {report:?}"
    );
    let report = c.run_once().await;
    assert_eq!(
        (report.marked, report.deleted),
        (0, 2),
        "deleted by the next pass: {report:?}"
    );
    let left: Vec<(i64, i64)> = e
        .listing()
        .await
        .blocks
        .iter()
        .map(|b| (b.min_time / H, b.max_time / H))
        .collect();
    assert_eq!(left, vec![(4, 6)]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_locked_tenant_is_left_to_its_compactor() {
    let e = env();
    e.upload(0, 2 * H, 1, |_| false).await;
    e.upload(0, 2 * H, 1, |_| false).await;
    let lock = TenantLock::acquire(&e.bucket, &e.tenant, "other", LOCK_LEASE_MS, e.clock.now_ms())
        .await
        .unwrap()
        .expect("free");
    let c = e.compactor("c1");
    let report = c.run_once().await;
    assert_eq!((report.skipped, report.compactions), (1, 0), "{report:?}");
    e.clock.advance(LOCK_LEASE_MS);
    let report = c.run_once().await;
    assert_eq!(
        (report.skipped, report.compactions),
        (0, 1),
        "an expired lease is taken over: {report:?}"
    );
    lock.release().await.unwrap();
    assert!(
        !lock.renew(e.clock.now_ms()).await.unwrap(),
        "the old holder cannot renew the lock it lost"
    );
    let other = TenantLock::acquire(&e.bucket, &e.tenant, "c2", LOCK_LEASE_MS, e.clock.now_ms())
        .await
        .unwrap();
    assert!(
        other.is_some(),
        "c1 released the lock at the end of its pass: the tenant is free at once"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn partial_blocks_go_after_their_delay() {
    let e = env();
    let kept = e.upload(0, 2 * H, 1, |_| false).await;
    let cut = e.upload(2 * H, 4 * H, 1, |_| false).await;
    // An upload cut short before its meta.json.
    std::fs::remove_file(
        e.root
            .join("bucket")
            .join(e.tenant.as_str())
            .join(&cut.ulid)
            .join("meta.json"),
    )
    .unwrap();
    let real_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    e.clock.set(real_now);
    let mut c = e.compactor("c1");
    c.cfg.partial_block_deletion_delay = Duration::from_secs(3600);
    let report = c.run_once().await;
    assert_eq!(report.deleted, 0, "an hour has not passed: {report:?}");
    assert_eq!(e.listing().await.partial.len(), 1);
    // A second past the hour: `real_now` is truncated to the millisecond, the files' modification times are
    // not, so a file written in the same millisecond is up to 1 ms younger than `real_now` says.
    e.clock.set(real_now + H + 1000);
    let report = c.run_once().await;
    assert_eq!(report.deleted, 1, "{report:?}");
    let listing = e.listing().await;
    assert!(listing.partial.is_empty(), "{:?}", listing.partial);
    assert_eq!(listing.blocks.iter().map(|b| &b.ulid).collect::<Vec<_>>(), [&kept.ulid]);
}

/// The per-tenant gauges show the tenants this compactor passed over in its last run, and nobody else: a
/// tenant another compactor holds, or one gone from the bucket, leaves `/metrics`.
#[tokio::test(flavor = "multi_thread")]
async fn tenant_gauges_follow_the_tenants_of_the_last_run() {
    let mut e = env();
    e.upload(0, 2 * H, 1, |_| false).await;
    let a = e.tenant.clone();
    e.tenant = TenantId::new("team-b").unwrap();
    e.upload(0, 2 * H, 1, |_| false).await;
    let b = e.tenant.clone();
    let mut registry = Registry::default();
    let c = Compactor::new(
        CompactorConfig {
            data_dir: e.root.join("work-gauges"),
            ..CompactorConfig::default()
        },
        e.bucket.clone(),
        Arc::clone(&e.overrides),
        e.clock.clone(),
        "c1".to_owned(),
        &mut registry,
    );
    let shown = |registry: &Registry| -> Vec<String> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        let mut tenants: Vec<String> = text
            .lines()
            .filter(|l| {
                l.starts_with("heddle_compactor_bucket_bytes{")
                    || l.starts_with("heddle_compactor_tenant_uncompacted_blocks{")
            })
            .filter_map(|l| l.split("tenant=\"").nth(1)?.split('"').next().map(str::to_owned))
            .collect();
        tenants.sort();
        tenants
    };
    c.run_once().await;
    assert_eq!(shown(&registry), ["team-a", "team-a", "team-b", "team-b"]);

    let lock = TenantLock::acquire(&e.bucket, &b, "other", LOCK_LEASE_MS, e.clock.now_ms())
        .await
        .unwrap()
        .expect("free");
    let report = c.run_once().await;
    assert_eq!(report.skipped, 1, "{report:?}");
    assert_eq!(
        shown(&registry),
        ["team-a", "team-a"],
        "team-b is another compactor's now"
    );
    lock.release().await.unwrap();

    std::fs::remove_dir_all(e.root.join("bucket").join(a.as_str())).unwrap();
    c.run_once().await;
    assert_eq!(shown(&registry), ["team-b", "team-b"], "team-a left the bucket");
}
