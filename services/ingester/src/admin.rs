//! What the operator API needs from the ingester: the tenant list, per-tenant statistics, and flushing.
//!
//! Kept apart from the push and read paths: these calls are rare, may touch the disk (WAL size), and never
//! run on a hot path.

use crate::tenant::Tenant;
use heddle_model::TenantId;
use std::path::Path;

/// A tenant head's statistics as the admin API reports them.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantStats {
    /// The tenant.
    pub tenant: TenantId,
    /// Series in memory.
    pub series: u64,
    /// Samples stored since the head was opened, replayed ones included.
    pub samples_appended: u64,
    /// Oldest sample timestamp in the head (ms), if any.
    pub min_time_ms: Option<i64>,
    /// Newest sample timestamp in the head (ms), if any.
    pub max_time_ms: Option<i64>,
    /// Bytes of the files under the tenant's `wal/` directory (checkpoints included).
    pub wal_bytes: u64,
    /// Number of WAL segment files.
    pub wal_segments: u32,
    /// Samples appended per second over about the last minute (0 until the blocks loop took a snapshot).
    pub samples_per_second: f64,
    /// Local blocks written from this head and not yet uploaded to the bucket (0 when shipping is off).
    pub blocks_pending_upload: u64,
}

/// What [`crate::Ingester::flush`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlushReport {
    /// The tenants whose head was flushed, sorted.
    pub tenants: Vec<TenantId>,
    /// Blocks written from their heads.
    pub blocks_written: u64,
    /// Blocks uploaded to the bucket (0 when shipping is off).
    pub blocks_shipped: u64,
}

/// Statistics of one tenant. Reads the size of its WAL directory from disk (one `read_dir`), off the async
/// runtime. `shipping` says whether blocks are shipped at all (else none is pending upload).
pub(crate) async fn tenant_stats(tenant: &Tenant, shipping: bool) -> TenantStats {
    let head = tenant.head();
    let stats = head.stats();
    let wal_dir = head.dir().join("wal");
    let (wal_bytes, wal_segments) = tokio::task::spawn_blocking(move || wal_usage(&wal_dir))
        .await
        .unwrap_or((0, 0));
    TenantStats {
        tenant: tenant.id().clone(),
        series: stats.series,
        samples_appended: stats.samples_appended,
        min_time_ms: stats.min_time,
        max_time_ms: stats.max_time,
        wal_bytes,
        wal_segments,
        samples_per_second: tenant.rate().rate(std::time::Instant::now(), stats.samples_appended),
        blocks_pending_upload: if shipping {
            crate::blocks::pending_upload(tenant)
        } else {
            0
        },
    }
}

/// Total bytes and segment count under a WAL directory; checkpoint directories count toward the bytes.
fn wal_usage(dir: &Path) -> (u64, u32) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    let mut bytes = 0u64;
    let mut segments = 0u32;
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_file() {
            bytes += meta.len();
            if entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
            {
                segments += 1;
            }
        } else if meta.is_dir() {
            bytes += wal_usage(&entry.path()).0;
        }
    }
    (bytes, segments)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Ingester;
    use crate::config::{IngesterConfig, TsdbConfig};
    use heddle_proto::prometheus::{Label, Sample, TimeSeries, WriteRequest};
    use heddle_server::DiscardedSamples;
    use prometheus_client::registry::Registry;
    use prost::Message;

    fn request(name: &str, samples: &[(i64, f64)]) -> bytes::Bytes {
        let req = WriteRequest {
            timeseries: vec![TimeSeries {
                labels: vec![Label {
                    name: "__name__".into(),
                    value: name.into(),
                }],
                samples: samples
                    .iter()
                    .map(|&(timestamp, value)| Sample { value, timestamp })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        };
        req.encode_to_vec().into()
    }

    async fn ingester(dir: &Path) -> std::sync::Arc<Ingester> {
        let mut registry = Registry::default();
        let tsdb = TsdbConfig {
            dir: dir.to_path_buf(),
            ..TsdbConfig::default()
        };
        let discarded = DiscardedSamples::register(&mut registry);
        let ing = Ingester::new(&IngesterConfig::default(), tsdb, None, &mut registry, discarded);
        // The samples below are a few seconds after the epoch: so is the clock.
        ing.set_clock(std::sync::Arc::new(heddle_model::ManualClock::new(10_000)));
        ing.open_existing().await.unwrap();
        ing
    }

    #[tokio::test]
    async fn stats_tenants_and_flush() {
        let dir = tempfile::tempdir().unwrap();
        let ing = ingester(dir.path()).await;
        let a = TenantId::new("team-a").unwrap();
        let b = TenantId::new("team-b").unwrap();
        assert!(ing.tenant_stats(&a).await.is_none(), "no head before the first push");
        ing.push_bytes(&b, request("up", &[(1000, 1.0)])).await.unwrap();
        ing.push_bytes(&a, request("up", &[(1000, 1.0), (2000, 2.0)]))
            .await
            .unwrap();
        assert_eq!(ing.tenants(), vec![a.clone(), b.clone()]);

        let s = ing.tenant_stats(&a).await.unwrap();
        assert_eq!((s.series, s.samples_appended), (1, 2));
        assert_eq!((s.min_time_ms, s.max_time_ms), (Some(1000), Some(2000)));
        assert!(s.wal_bytes > 0, "the WAL holds the pushed records: {s:?}");
        assert_eq!(s.wal_segments, 1);
        let b_wal = ing.tenant_stats(&b).await.unwrap().wal_bytes;
        assert_eq!(
            ing.metrics().wal_bytes_written.get(),
            s.wal_bytes + b_wal,
            "heddle_ingester_wal_written_bytes_total counts every byte both WALs hold"
        );
        assert_eq!(s.samples_per_second, 0.0, "no rate snapshot yet");
        assert_eq!(s.blocks_pending_upload, 0, "no bucket: nothing to upload");
        // The blocks loop's snapshot 10 s ago saw none of the two samples.
        let ten_s_ago = std::time::Instant::now() - std::time::Duration::from_secs(10);
        ing.tenant(&a).unwrap().rate().observe(ten_s_ago, 0);
        let rate = ing.tenant_stats(&a).await.unwrap().samples_per_second;
        assert!((0.19..=0.2).contains(&rate), "2 samples in ~10 s: {rate}");

        let all = ing.flush(&[]).await.unwrap();
        assert_eq!(all.tenants, vec![a.clone(), b.clone()]);
        let unknown = TenantId::new("nobody").unwrap();
        let some = ing.flush(&[b.clone(), unknown, b.clone()]).await.unwrap();
        assert_eq!(
            some.tenants,
            vec![b],
            "unknown tenants are skipped, duplicates collapsed"
        );
    }

    /// A scrape walks metric families, never series: the exposition of an ingester holding 2,000 series has
    /// exactly as many lines as one holding 10 (gauges like memory series are kept by the events that change
    /// them, not recomputed from the heads at scrape time).
    #[tokio::test]
    async fn scrape_size_does_not_grow_with_series() {
        let mut lines = Vec::new();
        for series in [10usize, 2_000] {
            let dir = tempfile::tempdir().unwrap();
            let mut registry = Registry::default();
            let tsdb = TsdbConfig {
                dir: dir.path().to_path_buf(),
                ..TsdbConfig::default()
            };
            let discarded = DiscardedSamples::register(&mut registry);
            let ing = Ingester::new(&IngesterConfig::default(), tsdb, None, &mut registry, discarded);
            ing.set_clock(std::sync::Arc::new(heddle_model::ManualClock::new(10_000)));
            ing.open_existing().await.unwrap();
            let tenant = TenantId::new("t").unwrap();
            for i in 0..series {
                ing.push_bytes(&tenant, request(&format!("m{i}"), &[(1000, 1.0)]))
                    .await
                    .unwrap();
            }
            let text = heddle_server::encode_metrics(&registry);
            assert!(text.contains("heddle_ingester_memory_series"), "{text}");
            lines.push(text.lines().count());
        }
        assert_eq!(lines[0], lines[1], "exposition lines for 10 vs 2000 series");
    }

    #[tokio::test]
    async fn flush_after_close_reports_the_tenant() {
        let dir = tempfile::tempdir().unwrap();
        let ing = ingester(dir.path()).await;
        let a = TenantId::new("a").unwrap();
        ing.push_bytes(&a, request("up", &[(1, 1.0)])).await.unwrap();
        ing.close().await;
        let err = ing.flush(&[]).await.unwrap_err();
        assert!(err.to_string().contains("tenant a"), "{err}");
    }
}
