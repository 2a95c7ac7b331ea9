//! Ingester metrics.

use heddle_server::{TenantFamily, TenantLabelSet, TenantMetrics};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TenantReasonLabels {
    pub(crate) tenant: String,
    pub(crate) reason: String,
}

impl TenantLabelSet for TenantReasonLabels {
    fn tenant(&self) -> &str {
        &self.tenant
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReasonLabels {
    pub(crate) reason: &'static str,
}

#[derive(Debug, Clone)]
pub(crate) struct Metrics {
    /// Exemplars stored in tenant heads.
    pub(crate) exemplars_appended: Counter,
    /// Exemplars the heads refused, by reason.
    pub(crate) exemplars_refused: Family<ReasonLabels, Counter>,
    pub(crate) ingested_samples: Counter,
    /// Native histogram samples appended to tenant heads.
    pub(crate) ingested_native_histograms: Counter,
    /// Zero samples stored at series' created timestamps.
    pub(crate) created_zero_samples: Counter,
    /// Metadata entries refused by the tenant metadata limits.
    pub(crate) discarded_metadata: TenantFamily<TenantReasonLabels, Counter>,
    /// Metadata entries held, all tenants together.
    pub(crate) memory_metadata: Gauge,
    pub(crate) deduplicated_samples: Counter,
    pub(crate) series_created: Counter,
    pub(crate) memory_series: Gauge,
    pub(crate) tenants: Gauge,
    /// Tenants closed after `close_idle_tsdb_timeout` without a push.
    pub(crate) idle_tenants_closed: Counter,
    pub(crate) wal_bytes_written: Counter<u64, AtomicU64>,
    pub(crate) replayed_records: Counter,
    pub(crate) wal_corruptions_repaired: Counter,
    /// Open chunks restored from a chunk snapshot that did not decode at their first append (or WAL replay).
    pub(crate) open_chunks_dropped: Counter,
    pub(crate) arena_retained_bytes: Gauge,
    pub(crate) arenas_dropped: Gauge,
    pub(crate) replay: ReplayMetrics,
    pub(crate) blocks: BlockMetrics,
}

/// Head compaction and local blocks (`heddle_ingester_compaction*`, `heddle_ingester_blocks_*`).
#[derive(Debug, Clone)]
pub(crate) struct BlockMetrics {
    /// Compactions that wrote at least one block.
    pub(crate) compactions: Counter,
    /// Compactions that failed (retried on the next tick).
    pub(crate) compaction_failures: Counter,
    /// Wall time of compactions that wrote blocks.
    pub(crate) compaction_duration_seconds: Histogram,
    /// Blocks written from heads.
    pub(crate) blocks_written: Counter,
    /// Local blocks deleted after shipping, past the retention.
    pub(crate) blocks_deleted: Counter,
    /// Local blocks not in the bucket yet; 0 when shipping is off. Each tenant's `LocalBlocks` keeps its own
    /// term, so one tenant's recount replaces only its share.
    pub(crate) pending_upload: Gauge,
}

impl Default for BlockMetrics {
    fn default() -> Self {
        Self {
            compactions: Counter::default(),
            compaction_failures: Counter::default(),
            compaction_duration_seconds: Histogram::new([0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 180.0, 600.0]),
            blocks_written: Counter::default(),
            blocks_deleted: Counter::default(),
            pending_upload: Gauge::default(),
        }
    }
}

/// Start-up replay progress and outcome (`heddle_ingester_replay_*`).
#[derive(Debug, Clone, Default)]
pub(crate) struct ReplayMetrics {
    /// Tenant heads still being opened.
    pub(crate) tenants_pending: Gauge,
    /// Tenant heads opened (replayed).
    pub(crate) tenants_done: Counter,
    /// Samples replayed from the WAL into open chunks.
    pub(crate) samples: Counter,
    /// WAL samples skipped because a chunks_head chunk already held them.
    pub(crate) samples_in_mmapped_chunks: Counter,
    /// Chunks found in chunks_head.
    pub(crate) mmapped_chunks: Counter,
    /// Series loaded from chunk snapshots.
    pub(crate) snapshot_series: Counter,
    /// Heads started from a chunk snapshot.
    pub(crate) snapshots_loaded: Counter,
    /// Half-written or unreadable snapshots deleted.
    pub(crate) snapshots_discarded: Counter,
    /// chunks_head files cut at a corrupt chunk.
    pub(crate) chunks_head_corruptions_repaired: Counter,
    /// Wall time of the last start-up replay of all tenants, in seconds.
    pub(crate) duration_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
}

impl Metrics {
    /// Registers the ingester's metrics; `tenants` removes idle tenants' series from the per-tenant families.
    pub(crate) fn register(r: &mut Registry, tenants: &TenantMetrics) -> Self {
        let m = Self {
            ingested_samples: Counter::default(),
            ingested_native_histograms: Counter::default(),
            created_zero_samples: Counter::default(),
            discarded_metadata: TenantFamily::new(tenants, Family::default()),
            exemplars_appended: Counter::default(),
            exemplars_refused: Family::default(),
            memory_metadata: Gauge::default(),
            deduplicated_samples: Counter::default(),
            series_created: Counter::default(),
            memory_series: Gauge::default(),
            tenants: Gauge::default(),
            idle_tenants_closed: Counter::default(),
            wal_bytes_written: Counter::default(),
            replayed_records: Counter::default(),
            wal_corruptions_repaired: Counter::default(),
            open_chunks_dropped: Counter::default(),
            arena_retained_bytes: Gauge::default(),
            arenas_dropped: Gauge::default(),
            replay: ReplayMetrics::default(),
            blocks: BlockMetrics::default(),
        };
        r.register(
            "heddle_ingester_ingested_samples",
            "Samples appended to tenant heads",
            m.ingested_samples.clone(),
        );
        r.register(
            "heddle_ingester_ingested_native_histograms",
            "Native histogram samples appended to tenant heads",
            m.ingested_native_histograms.clone(),
        );
        r.register(
            "heddle_ingester_created_timestamp_zero_samples",
            "Zero samples stored at series' created timestamps (remote write 2.0 created timestamps, OTLP start times), \
             when the tenant has created-timestamp zero ingestion on",
            m.created_zero_samples.clone(),
        );
        r.register(
            "heddle_ingester_discarded_metadata",
            "Metric metadata entries refused by the tenant metadata limits, by tenant and reason (error id)",
            m.discarded_metadata.family().clone(),
        );
        r.register(
            "heddle_ingester_exemplars_appended",
            "Exemplars written to the WAL and stored in tenant heads' exemplar rings",
            m.exemplars_appended.clone(),
        );
        r.register(
            "heddle_ingester_exemplars_refused",
            "Exemplars tenant heads refused: out-of-order (not newer than their series' newest), unknown-series \
             (no samples created the series), disabled (limits.max_global_exemplars_per_user is 0)",
            m.exemplars_refused.clone(),
        );
        r.register(
            "heddle_ingester_memory_metadata",
            "Metric metadata entries held in memory, all tenants together",
            m.memory_metadata.clone(),
        );
        r.register(
            "heddle_ingester_deduplicated_samples",
            "Exact repeats of stored samples (a retried push), accepted without storing them again",
            m.deduplicated_samples.clone(),
        );
        r.register(
            "heddle_ingester_series_created",
            "Series created in tenant heads",
            m.series_created.clone(),
        );
        r.register(
            "heddle_ingester_memory_series",
            "Series held in tenant heads",
            m.memory_series.clone(),
        );
        r.register(
            "heddle_ingester_tenants",
            "Tenants with an open head",
            m.tenants.clone(),
        );
        r.register(
            "heddle_ingester_idle_tenants_closed",
            "Tenants closed after blocks_storage.tsdb.close_idle_tsdb_timeout without a push: head closed, files \
             released, local directory deleted (the next push opens the tenant again)",
            m.idle_tenants_closed.clone(),
        );
        r.register(
            "heddle_ingester_open_chunks_dropped",
            "Open chunks restored from a chunk snapshot whose bytes did not decode to the newest sample their record \
             gave, found at their first append: their samples were dropped (an error log names the series)",
            m.open_chunks_dropped.clone(),
        );
        r.register(
            "heddle_ingester_wal_written_bytes",
            "Bytes written to WAL segment files",
            m.wal_bytes_written.clone(),
        );
        r.register(
            "heddle_ingester_wal_replayed_records",
            "WAL records replayed at start-up",
            m.replayed_records.clone(),
        );
        r.register(
            "heddle_ingester_wal_corruptions_repaired",
            "Corrupt WAL tails found at start-up and truncated to the last good record",
            m.wal_corruptions_repaired.clone(),
        );
        r.register(
            "heddle_ingester_arena_retained_bytes",
            "Capacity held by idle pooled request arenas",
            m.arena_retained_bytes.clone(),
        );
        r.register(
            "heddle_ingester_arenas_dropped",
            "Request arenas freed instead of pooled because they grew too large or the pool was full",
            m.arenas_dropped.clone(),
        );
        let b = &m.blocks;
        r.register(
            "heddle_ingester_compactions",
            "Head compactions that wrote blocks",
            b.compactions.clone(),
        );
        r.register(
            "heddle_ingester_compaction_failures",
            "Head compactions that failed (retried on the next tick)",
            b.compaction_failures.clone(),
        );
        r.register(
            "heddle_ingester_compaction_duration_seconds",
            "Wall time of head compactions that wrote blocks",
            b.compaction_duration_seconds.clone(),
        );
        r.register(
            "heddle_ingester_blocks_written",
            "Blocks written from tenant heads",
            b.blocks_written.clone(),
        );
        r.register(
            "heddle_ingester_blocks_deleted",
            "Local blocks deleted after shipping, past the retention period",
            b.blocks_deleted.clone(),
        );
        r.register(
            "heddle_ingester_blocks_pending_upload",
            "Local blocks not shipped to the bucket yet (recounted when a block is written or a ship ends); 0 when \
             shipping is off",
            b.pending_upload.clone(),
        );
        let rp = &m.replay;
        let counters: [(&str, &str, &Counter); 8] = [
            (
                "heddle_ingester_replay_tenants",
                "Tenant heads opened at start-up or on first push",
                &rp.tenants_done,
            ),
            (
                "heddle_ingester_replay_samples",
                "Samples replayed from the WAL into open chunks",
                &rp.samples,
            ),
            (
                "heddle_ingester_replay_samples_in_mmapped_chunks",
                "WAL samples skipped at replay because a chunks_head chunk already held them",
                &rp.samples_in_mmapped_chunks,
            ),
            (
                "heddle_ingester_replay_mmapped_chunks",
                "Chunks found in chunks_head at start-up",
                &rp.mmapped_chunks,
            ),
            (
                "heddle_ingester_replay_snapshot_series",
                "Series loaded from chunk snapshots",
                &rp.snapshot_series,
            ),
            (
                "heddle_ingester_replay_snapshots_loaded",
                "Tenant heads started from a chunk snapshot",
                &rp.snapshots_loaded,
            ),
            (
                "heddle_ingester_replay_snapshots_discarded",
                "Half-written or unreadable chunk snapshots deleted at start-up (the WAL was replayed instead)",
                &rp.snapshots_discarded,
            ),
            (
                "heddle_ingester_replay_chunks_head_corruptions_repaired",
                "chunks_head files cut at a torn or corrupt chunk at start-up (the WAL replayed its samples)",
                &rp.chunks_head_corruptions_repaired,
            ),
        ];
        for (name, help, c) in counters {
            r.register(name, help, c.clone());
        }
        r.register(
            "heddle_ingester_replay_tenants_pending",
            "Tenant heads still replaying at start-up (the ingester is ready when this is 0)",
            rp.tenants_pending.clone(),
        );
        r.register(
            "heddle_ingester_replay_duration_seconds",
            "Wall time of the last start-up replay of all tenant heads",
            rp.duration_seconds.clone(),
        );
        m
    }
}

#[cfg(test)]
mod tests {
    use crate::{Ingester, IngesterConfig, TsdbConfig};
    use bytes::Bytes;
    use heddle_limits::{Limits, Overrides};
    use heddle_model::TenantId;
    use heddle_proto::IngesterClient;
    use heddle_proto::prometheus::{Label, Sample, TimeSeries, WriteRequest};
    use heddle_server::DiscardedSamples;
    use prometheus_client::registry::Registry;
    use prost::Message as _;
    use std::sync::Arc;

    async fn push(ingester: &Ingester, tenant: &str, ids: std::ops::Range<usize>, ts: i64) {
        let body = WriteRequest {
            timeseries: ids
                .map(|i| TimeSeries {
                    labels: vec![
                        Label {
                            name: "__name__".into(),
                            value: format!("m{}", i % 7),
                        },
                        Label {
                            name: "id".into(),
                            value: i.to_string(),
                        },
                    ],
                    samples: vec![Sample {
                        value: 1.0,
                        timestamp: ts,
                    }],
                    ..TimeSeries::default()
                })
                .collect(),
            metadata: Vec::new(),
        }
        .encode_to_vec();
        let tenant = TenantId::new(tenant).unwrap();
        ingester.set_clock(Arc::new(heddle_model::ManualClock::new(ts)));
        let resp = ingester.push(&tenant, Bytes::from(body)).await.unwrap();
        assert!(resp.errors.is_empty(), "{:?}", resp.errors);
    }

    /// The exposition's lines without their values: what a scrape's size and cost follow.
    fn shape(registry: &Registry) -> Vec<String> {
        heddle_server::encode_metrics(registry)
            .lines()
            .map(|l| match l.starts_with('#') {
                true => l.to_owned(),
                false => l.rsplit_once(' ').map_or(l, |(series, _)| series).to_owned(),
            })
            .collect()
    }

    /// A scrape is O(families): more series or more tenants add no line to the ingester's exposition (the
    /// `scrape` bench measures the cost; this guards against a per-series or per-tenant family creeping in).
    #[tokio::test]
    async fn exposition_does_not_grow_with_series_or_tenants() {
        let dir = tempfile::tempdir().unwrap();
        let mut registry = Registry::default();
        let discarded = DiscardedSamples::register(&mut registry);
        let tsdb = TsdbConfig {
            dir: dir.path().to_path_buf(),
            ..TsdbConfig::default()
        };
        let ingester = Ingester::new(&IngesterConfig::default(), tsdb, None, &mut registry, discarded);
        ingester.set_overrides(Arc::new(Overrides::new(Limits {
            max_global_series_per_user: 0,
            max_global_series_per_metric: 0,
            ..Limits::default()
        })));
        ingester.open_existing().await.unwrap();
        let t0 = 1_700_000_000_000;
        push(&ingester, "t1", 0..10, t0).await;
        let small = shape(&registry);
        push(&ingester, "t1", 10..2_000, t0).await;
        for t in 2..=20 {
            push(&ingester, &format!("t{t}"), 0..50, t0).await;
        }
        let text = heddle_server::encode_metrics(&registry);
        assert!(text.contains("heddle_ingester_memory_series 2950\n"), "{text}");
        assert!(text.contains("heddle_ingester_tenants 20\n"), "{text}");
        assert_eq!(
            shape(&registry),
            small,
            "the exposition's series changed with series or tenants"
        );
        ingester.close().await;
    }
}
