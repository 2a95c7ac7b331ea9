//! The bucket's and the shipper's metrics, registered on the registry the process passes in.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OperationLabels {
    operation: &'static str,
}

/// Bucket calls (one per attempt), their failures and latencies by operation; bytes uploaded; shipper
/// outcomes. Cheap to clone (the families share their storage).
#[derive(Debug, Clone)]
pub(crate) struct BucketMetrics {
    operations: Family<OperationLabels, Counter>,
    failures: Family<OperationLabels, Counter>,
    duration: Family<OperationLabels, Histogram>,
    uploaded_bytes: Counter,
    pub(crate) shipper_uploads: Counter,
    pub(crate) shipper_upload_failures: Counter,
    /// Unix seconds of the last confirmed block upload; 0 until the first one. Set by the upload itself, so a
    /// scrape reads one atomic.
    pub(crate) shipper_last_upload: Gauge<f64, AtomicU64>,
}

impl BucketMetrics {
    pub(crate) fn new(registry: &mut Registry) -> Self {
        let me = Self::unregistered();
        registry.register(
            "heddle_bucket_operations",
            "Object store calls by operation, each retry counted",
            me.operations.clone(),
        );
        registry.register(
            "heddle_bucket_operation_failures",
            "Object store calls that failed, by operation, each retry counted",
            me.failures.clone(),
        );
        registry.register(
            "heddle_bucket_operation_duration_seconds",
            "Time of one object store call by operation (a whole multipart upload is one call)",
            me.duration.clone(),
        );
        registry.register(
            "heddle_bucket_uploaded_bytes",
            "Bytes of objects uploaded successfully",
            me.uploaded_bytes.clone(),
        );
        registry.register(
            "heddle_shipper_uploads",
            "Blocks the shipper uploaded (meta.json written and shipper.json updated)",
            me.shipper_uploads.clone(),
        );
        registry.register(
            "heddle_shipper_upload_failures",
            "Block uploads that failed; the block stays local and is tried again on the next ship",
            me.shipper_upload_failures.clone(),
        );
        registry.register(
            "heddle_shipper_last_successful_upload_timestamp_seconds",
            "Unix time of the last block the shipper uploaded successfully; 0 until the first upload",
            me.shipper_last_upload.clone(),
        );
        me
    }

    fn unregistered() -> Self {
        Self {
            operations: Family::default(),
            failures: Family::default(),
            duration: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.005, 4.0, 9))),
            uploaded_bytes: Counter::default(),
            shipper_uploads: Counter::default(),
            shipper_upload_failures: Counter::default(),
            shipper_last_upload: Gauge::default(),
        }
    }

    /// Records one call of `operation` that took `seconds`.
    pub(crate) fn observe(&self, operation: &'static str, ok: bool, seconds: f64) {
        let labels = OperationLabels { operation };
        self.operations.get_or_create(&labels).inc();
        if !ok {
            self.failures.get_or_create(&labels).inc();
        }
        self.duration.get_or_create(&labels).observe(seconds);
    }

    /// Records a confirmed block upload now.
    pub(crate) fn shipped_block(&self) {
        self.shipper_uploads.inc();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.shipper_last_upload.set(now);
    }

    pub(crate) fn uploaded(&self, bytes: u64) {
        self.uploaded_bytes.inc_by(bytes);
    }
}
