//! The querier's metrics, registered on the registry the process passes in.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The HTTP endpoints the querier serves, as the `endpoint` label spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Endpoint {
    RemoteRead,
    Series,
    Labels,
    LabelValues,
    Query,
    QueryRange,
    FormatQuery,
    BuildInfo,
    Metadata,
    QueryExemplars,
}

impl Endpoint {
    fn as_str(self) -> &'static str {
        match self {
            Endpoint::RemoteRead => "remote_read",
            Endpoint::Series => "series",
            Endpoint::Labels => "labels",
            Endpoint::LabelValues => "label_values",
            Endpoint::Query => "query",
            Endpoint::QueryRange => "query_range",
            Endpoint::FormatQuery => "format_query",
            Endpoint::BuildInfo => "buildinfo",
            Endpoint::Metadata => "metadata",
            Endpoint::QueryExemplars => "query_exemplars",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    endpoint: &'static str,
    status: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OutcomeLabels {
    endpoint: &'static str,
    outcome: &'static str,
}

/// How a PromQL query ended, as the `outcome` label spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Success,
    /// Refused as malformed or over a length limit (400).
    BadData,
    /// Failed on the data or over a sample or fetch limit (422).
    Execution,
    Timeout,
    /// The client went away before the answer was ready.
    Canceled,
    /// The querier or its sources failed (5xx other than a timeout).
    Internal,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::BadData => "bad_data",
            Outcome::Execution => "execution",
            Outcome::Timeout => "timeout",
            Outcome::Canceled => "canceled",
            Outcome::Internal => "internal",
        }
    }

    /// The outcome of a query that failed with `error_type` (Prometheus' `errorType`).
    pub(crate) fn of_error_type(error_type: &str) -> Self {
        match error_type {
            "bad_data" => Outcome::BadData,
            "execution" => Outcome::Execution,
            "timeout" => Outcome::Timeout,
            "canceled" => Outcome::Canceled,
            _ => Outcome::Internal,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct EndpointLabels {
    endpoint: &'static str,
}

/// Request counts and latencies per endpoint, and the volume of data returned.
#[derive(Debug, Clone)]
pub(crate) struct Metrics {
    requests: Family<RequestLabels, Counter>,
    duration: Family<EndpointLabels, Histogram>,
    series: Family<EndpointLabels, Counter>,
    samples: Counter,
    refused: Family<ReasonLabels, Counter>,
    queries: Family<OutcomeLabels, Counter>,
    samples_processed: Counter,
    /// The in-flight budget's total and refusals ([`heddle_server::InflightBytes`] exports them).
    pub(crate) inflight_bytes: Gauge,
    pub(crate) inflight_refused: Counter,
}

impl Metrics {
    pub(crate) fn new(registry: &mut Registry) -> Self {
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "heddle_querier_requests",
            "Querier HTTP requests by endpoint and status code",
            requests.clone(),
        );
        let duration = Family::<EndpointLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 4.0, 9))
        });
        registry.register(
            "heddle_querier_request_duration_seconds",
            "Time to answer a querier HTTP request, until the response headers (streamed bodies continue after)",
            duration.clone(),
        );
        let series = Family::<EndpointLabels, Counter>::default();
        registry.register(
            "heddle_querier_series_returned",
            "Series returned to clients, after replicas are merged",
            series.clone(),
        );
        let samples = Counter::default();
        registry.register(
            "heddle_querier_samples_returned",
            "Samples returned by remote read, after replicas are merged and the range is trimmed",
            samples.clone(),
        );
        let refused = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "heddle_querier_refused_queries",
            "Queries refused by a limit, by reason (the error id): fetched series, chunks, chunk bytes, samples, \
             regex length, PromQL samples in memory, range query length",
            refused.clone(),
        );
        let queries = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "heddle_querier_queries",
            "PromQL queries (query, query_range) by endpoint and outcome: success, bad_data, execution, timeout, \
             canceled (the client left first), internal",
            queries.clone(),
        );
        let samples_processed = Counter::default();
        registry.register(
            "heddle_querier_query_samples_processed",
            "Samples fetched and handed to the PromQL engine, after replicas are merged",
            samples_processed.clone(),
        );
        let inflight_bytes = Gauge::default();
        registry.register(
            "heddle_querier_inflight_requests_bytes",
            "Bytes held by querier requests in flight: bodies, remote read's decompressed and decoded requests, \
             forms, parsed selectors and queries, reserved before allocation against \
             querier.max_inflight_requests_bytes",
            inflight_bytes.clone(),
        );
        let inflight_refused = Counter::default();
        registry.register(
            "heddle_querier_inflight_requests_bytes_refused",
            "Querier requests refused (503, or 413 when one could never fit) because \
             querier.max_inflight_requests_bytes would be passed",
            inflight_refused.clone(),
        );
        Self {
            requests,
            duration,
            series,
            samples,
            refused,
            queries,
            samples_processed,
            inflight_bytes,
            inflight_refused,
        }
    }

    pub(crate) fn observe_request(&self, endpoint: Endpoint, status: u16, seconds: f64) {
        let endpoint = endpoint.as_str();
        self.requests
            .get_or_create(&RequestLabels {
                endpoint,
                status: status.to_string(),
            })
            .inc();
        self.duration
            .get_or_create(&EndpointLabels { endpoint })
            .observe(seconds);
    }

    /// A PromQL query of `endpoint` ended with `outcome`.
    pub(crate) fn query_outcome(&self, endpoint: Endpoint, outcome: Outcome) {
        self.queries
            .get_or_create(&OutcomeLabels {
                endpoint: endpoint.as_str(),
                outcome: outcome.as_str(),
            })
            .inc();
    }

    /// `n` samples handed to the PromQL engine.
    pub(crate) fn samples_processed(&self, n: u64) {
        self.samples_processed.inc_by(n);
    }

    /// A query refused by a limit; `reason` is its error id.
    pub(crate) fn refused_query(&self, reason: &'static str) {
        self.refused.get_or_create(&ReasonLabels { reason }).inc();
    }

    pub(crate) fn returned(&self, endpoint: Endpoint, series: usize, samples: usize) {
        self.series
            .get_or_create(&EndpointLabels {
                endpoint: endpoint.as_str(),
            })
            .inc_by(series as u64);
        self.samples.inc_by(samples as u64);
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SourceLabels {
    source: &'static str,
}

/// How bucket blocks' index headers were loaded as the querier opened the blocks.
#[derive(Debug, Clone)]
pub(crate) struct IndexHeaderMetrics {
    bytes: Family<SourceLabels, Counter>,
    corrupt: Counter,
}

impl IndexHeaderMetrics {
    pub(crate) fn new(registry: &mut Registry) -> Self {
        let bytes = Family::<SourceLabels, Counter>::default();
        registry.register(
            "heddle_querier_index_header_loaded_bytes",
            "Bytes of bucket blocks' index headers (TOC, symbols, postings offset table) loaded as blocks are \
             opened, by source: bucket (ranged reads of the block's index) or disk (the block's index-header file \
             in blocks_storage.bucket_store.sync_dir)",
            bytes.clone(),
        );
        // Both sources exposed from the start, so a zero reads as zero rather than as missing.
        for source in ["bucket", "disk"] {
            bytes.get_or_create(&SourceLabels { source }).inc_by(0);
        }
        let corrupt = Counter::default();
        registry.register(
            "heddle_querier_index_header_corrupt_files",
            "Index-header files in the sync dir found truncated, corrupt, of another version or of another block, \
             and rebuilt from the bucket",
            corrupt.clone(),
        );
        Self { bytes, corrupt }
    }

    /// A block opened with its index header from `origin`.
    pub(crate) fn loaded(&self, origin: &heddle_tsdb::block::HeaderOrigin) {
        use heddle_tsdb::block::HeaderOrigin;
        let (source, bytes) = match origin {
            HeaderOrigin::Disk { bytes } => ("disk", *bytes),
            HeaderOrigin::Files { bytes, replaced } => {
                if replaced.is_some() {
                    self.corrupt.inc();
                }
                ("bucket", *bytes)
            }
        };
        self.bytes.get_or_create(&SourceLabels { source }).inc_by(bytes);
    }
}

/// Why a tenant's block list was refreshed before its `sync_interval` ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RefreshReason {
    /// An ingester named a block it leaves to the bucket that the list did not hold.
    BlockLeftByIngester,
    /// A listed block was gone from the bucket when read (deleted by the compactor).
    BlockGone,
}

impl RefreshReason {
    fn as_str(self) -> &'static str {
        match self {
            RefreshReason::BlockLeftByIngester => "block_left_by_ingester",
            RefreshReason::BlockGone => "block_gone",
        }
    }
}

/// `heddle_querier_bucket_store_forced_refreshes_total{reason}`: block lists listed again at once because a
/// query found them behind the bucket. Steadily rising with `block_left_by_ingester`, the querier's
/// `sync_interval` or `bucket_index.max_stale_period` is longer than the ingesters' (which derive their
/// shipped-blocks grace from them); with `block_gone`, `compactor.deletion_delay` is too short.
#[derive(Debug, Clone)]
pub(crate) struct ForcedRefreshes(Family<ReasonLabels, Counter>);

impl ForcedRefreshes {
    pub(crate) fn new(registry: &mut Registry) -> Self {
        let family = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "heddle_querier_bucket_store_forced_refreshes",
            "Tenant block lists refreshed before blocks_storage.bucket_store.sync_interval because a query found them \
             behind the bucket, by reason: block_left_by_ingester (an ingester no longer answers a block the list \
             did not hold) or block_gone (a listed block was deleted)",
            family.clone(),
        );
        for reason in [RefreshReason::BlockLeftByIngester, RefreshReason::BlockGone] {
            family
                .get_or_create(&ReasonLabels {
                    reason: reason.as_str(),
                })
                .inc_by(0);
        }
        Self(family)
    }

    pub(crate) fn inc(&self, reason: RefreshReason) {
        self.0
            .get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            })
            .inc();
    }
}
