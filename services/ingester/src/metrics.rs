//! Ingester metrics.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Debug, Clone)]
pub(crate) struct Metrics {
    pub(crate) ingested_samples: Counter,
    pub(crate) deduplicated_samples: Counter,
    pub(crate) series_created: Counter,
    pub(crate) memory_series: Gauge,
    pub(crate) tenants: Gauge,
    pub(crate) wal_bytes_written: Counter<u64, AtomicU64>,
    pub(crate) replayed_records: Counter,
    pub(crate) wal_corruptions_repaired: Counter,
    pub(crate) arena_retained_bytes: Gauge,
    pub(crate) arenas_dropped: Gauge,
}

impl Metrics {
    pub(crate) fn register(r: &mut Registry) -> Self {
        let m = Self {
            ingested_samples: Counter::default(),
            deduplicated_samples: Counter::default(),
            series_created: Counter::default(),
            memory_series: Gauge::default(),
            tenants: Gauge::default(),
            wal_bytes_written: Counter::default(),
            replayed_records: Counter::default(),
            wal_corruptions_repaired: Counter::default(),
            arena_retained_bytes: Gauge::default(),
            arenas_dropped: Gauge::default(),
        };
        r.register(
            "heddle_ingester_ingested_samples",
            "Samples appended to tenant heads",
            m.ingested_samples.clone(),
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
        m
    }
}
