//! The catalogue of Heddle's error ids: every `err-heddle-*` id a user can meet, what it means, the HTTP status
//! the sender sees, and what to change.
//!
//! An id starts the message of every user-facing refusal and is the `reason` label of
//! `heddle_discarded_samples_total`, so scripts, alerts and runbooks key on it: an id is a public contract and
//! is never renamed. Code that needs an id as a value (a metric label, a match) takes the constant from here;
//! messages spell it at the start of their text. The integration test `error_catalogue` checks that every id
//! in the sources is in this list and every id here is used, and `docs/errors.md` is rendered from it.

/// One error id and its meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorId {
    /// The id itself, `err-heddle-...`.
    pub id: &'static str,
    /// The HTTP status the remote-write sender (or query client) sees.
    pub status: u16,
    /// Where the refusal applies: the whole request, or one series of it.
    pub scope: Scope,
    /// What happened and what to change, in one sentence.
    pub meaning: &'static str,
}

/// How much of a request an error refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Nothing of the request was ingested.
    Request,
    /// The named series (its samples) was refused; the request's other series were ingested.
    Series,
    /// One metadata entry or exemplar was dropped; everything else of the request was ingested.
    Entry,
}

macro_rules! catalogue {
    ($( $(#[$doc:meta])* $name:ident = $id:literal, $status:literal, $scope:ident, $meaning:literal; )*) => {
        $( $(#[$doc])* pub const $name: &str = $id; )*
        /// Every error id, in the order of `docs/errors.md`.
        pub const CATALOGUE: &[ErrorId] = &[
            $( ErrorId { id: $id, status: $status, scope: Scope::$scope, meaning: $meaning }, )*
        ];
    };
}

catalogue! {
    /// The body is larger than `distributor.max_recv_msg_size`, or an OTLP request would take more than the
    /// whole in-flight budget once decoded or translated.
    REQUEST_TOO_LARGE = "err-heddle-request-too-large", 413, Request,
        "the request body is over `distributor.max_recv_msg_size`: send smaller batches or raise the limit; or an OTLP request that, decoded or translated into series (labels copied onto every series), would take more than the whole in-flight budget (`distributor.instance_limits.max_inflight_push_requests_bytes`)";
    /// The snappy header declares more than `distributor.max_decompressed_size`.
    DECOMPRESSED_TOO_LARGE = "err-heddle-decompressed-too-large", 400, Request,
        "the snappy body declares more decompressed bytes than `distributor.max_decompressed_size` (for remote write 2.0: or its series, with labels resolved from its symbol table, would)";
    /// Content-Encoding is not the endpoint's (snappy for remote write; gzip or none for OTLP).
    UNSUPPORTED_CONTENT_ENCODING = "err-heddle-unsupported-content-encoding", 415, Request,
        "remote write bodies must be snappy block-compressed (`Content-Encoding: snappy`); OTLP bodies gzip or not compressed";
    /// Content-Type is not a remote write 1.0 or 2.0 protobuf (or, on the OTLP endpoint, not OTLP protobuf).
    UNSUPPORTED_CONTENT_TYPE = "err-heddle-unsupported-content-type", 415, Request,
        "the content type is not a message Heddle accepts (`application/x-protobuf`, with `proto=prometheus.WriteRequest` or `proto=io.prometheus.write.v2.Request` for remote write; OTLP protobuf or JSON on `/otlp/v1/metrics`)";
    /// The body is not snappy block format.
    CORRUPT_SNAPPY = "err-heddle-corrupt-snappy", 400, Request,
        "the body is not valid snappy block format (framed snappy is not remote write)";
    /// The decompressed body is not a valid `prometheus.WriteRequest`.
    INVALID_PROTOBUF = "err-heddle-invalid-protobuf", 400, Request,
        "the decompressed body is not a valid `prometheus.WriteRequest` (or, for remote write 2.0, `io.prometheus.write.v2.Request`)";
    /// The OTLP body is not valid gzip.
    CORRUPT_GZIP = "err-heddle-corrupt-gzip", 400, Request,
        "the OTLP body says `Content-Encoding: gzip` but is not valid gzip";
    /// The (decompressed) OTLP body is not a valid `ExportMetricsServiceRequest`.
    INVALID_OTLP = "err-heddle-invalid-otlp", 400, Request,
        "the OTLP body is not a valid `opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest` in protobuf or OTLP JSON (the message names the field, or the line and column)";
    /// The decoded request would be many times larger than its bytes: it is mostly empty labels or series.
    DEGENERATE_WRITE_REQUEST = "err-heddle-degenerate-write-request", 400, Request,
        "the request decodes to more than 8 bytes per byte of input (16 for remote write 2.0): it is mostly empty labels or empty series";
    /// The distributor already holds `distributor.instance_limits.max_inflight_push_requests_bytes`.
    DISTRIBUTOR_MAX_INFLIGHT_PUSH_REQUESTS_BYTES = "err-heddle-distributor-max-inflight-push-requests-bytes", 503,
        Request,
        "the distributor's in-flight push requests hold `distributor.instance_limits.max_inflight_push_requests_bytes`; the sender retries";
    /// Reading the body failed (connection reset, ...).
    BODY_READ = "err-heddle-body-read", 400, Request,
        "reading the request body failed before it was complete";
    /// The body did not arrive within `server.http_server_read_timeout`.
    BODY_READ_TIMEOUT = "err-heddle-body-read-timeout", 503, Request,
        "the body did not arrive within `server.http_server_read_timeout`; the sender retries";
    /// The request carries no tenant (the tenant layer is missing: a bug).
    NO_TENANT = "err-heddle-no-tenant", 500, Request,
        "the request reached the distributor without a tenant: a wiring bug, please report it";
    /// The tenant's ingestion rate limit is exhausted.
    INGESTION_RATE_LIMITED = "err-heddle-ingestion-rate-limited", 429, Request,
        "the tenant is over `limits.ingestion_rate` / `limits.ingestion_burst_size`; slow down or raise them";
    /// The tenant has more HA clusters than `limits.ha_max_clusters`.
    TOO_MANY_HA_CLUSTERS = "err-heddle-too-many-ha-clusters", 400, Request,
        "the tenant sends from more HA clusters than `limits.ha_max_clusters`";
    /// The HA cluster or replica label value of a request is longer than a label value may be.
    INVALID_HA_LABEL = "err-heddle-invalid-ha-label", 400, Request,
        "the HA cluster or replica label value is longer than `limits.max_label_value_length`; it is neither tracked nor shared";
    /// Samples from a non-elected HA replica are dropped (accepted, 202).
    HA_REPLICA_NOT_ELECTED = "err-heddle-ha-replica-not-elected", 202, Request,
        "samples from an HA replica that is not the elected one are acknowledged and dropped";
    /// The series has no `__name__`.
    MISSING_METRIC_NAME = "err-heddle-missing-metric-name", 400, Series,
        "the series has no (or an empty) `__name__` label";
    /// `__name__` is not a valid Prometheus metric name.
    INVALID_METRIC_NAME = "err-heddle-invalid-metric-name", 400, Series,
        "the metric name does not match `[a-zA-Z_:][a-zA-Z0-9_:]*` (the `legacy` name validation scheme)";
    /// A label name is not a valid Prometheus label name.
    INVALID_LABEL = "err-heddle-invalid-label", 400, Series,
        "a label name is empty or does not match `[a-zA-Z_][a-zA-Z0-9_]*` (the `legacy` name validation \
         scheme), or a name or value is not UTF-8";
    /// More labels than `limits.max_label_names_per_series`.
    MAX_LABEL_NAMES_PER_SERIES = "err-heddle-max-label-names-per-series", 400, Series,
        "the series has more labels than `limits.max_label_names_per_series`";
    /// A label name is longer than `limits.max_label_name_length`.
    LABEL_NAME_TOO_LONG = "err-heddle-label-name-too-long", 400, Series,
        "a label name is longer than `limits.max_label_name_length`";
    /// A label value is longer than `limits.max_label_value_length`.
    LABEL_VALUE_TOO_LONG = "err-heddle-label-value-too-long", 400, Series,
        "a label value is longer than `limits.max_label_value_length`";
    /// Two labels share a name.
    DUPLICATE_LABEL_NAMES = "err-heddle-duplicate-label-names", 400, Series,
        "two labels of the series have the same name";
    /// Labels are not sorted by name.
    LABELS_NOT_SORTED = "err-heddle-labels-not-sorted", 400, Series,
        "the series' labels are not sorted by name, as remote write requires";
    /// A sample is further in the future than `limits.creation_grace_period`.
    TOO_FAR_IN_FUTURE = "err-heddle-too-far-in-future", 400, Series,
        "a sample's timestamp is further ahead of the server's clock than `limits.creation_grace_period`";
    /// A sample is older than the distributor's clock minus `limits.past_grace_period`.
    SAMPLE_TOO_FAR_IN_PAST = "err-heddle-sample-too-far-in-past", 400, Series,
        "a sample's timestamp is further behind the server's clock than `limits.past_grace_period` (when set)";
    /// A native histogram's schema is neither exponential (-4 to 8, or up to 52, reduced to 8) nor custom
    /// buckets (-53).
    INVALID_NATIVE_HISTOGRAM_SCHEMA = "err-heddle-invalid-native-histogram-schema", 400, Series,
        "a native histogram sample has a schema other than -4 to 52 (exponential; above 8 reduced to 8) or -53 (custom buckets)";
    /// A native histogram's count is not what its buckets hold.
    NATIVE_HISTOGRAM_COUNT_MISMATCH = "err-heddle-native-histogram-count-mismatch", 400, Series,
        "a native histogram sample's count is not the sum of its buckets and zero bucket (not at least that sum when its sum is NaN)";
    /// A native histogram bucket whose absolute count is negative.
    NATIVE_HISTOGRAM_NEGATIVE_BUCKET_COUNT = "err-heddle-native-histogram-negative-bucket-count", 400, Series,
        "a native histogram sample has a bucket with a negative count (its deltas add up below zero)";
    /// A native histogram span after the first with a negative offset.
    NATIVE_HISTOGRAM_SPAN_NEGATIVE_OFFSET = "err-heddle-native-histogram-span-negative-offset", 400, Series,
        "a native histogram sample has a span, after the first, with a negative offset (buckets out of order)";
    /// A native histogram whose spans describe another number of buckets than it has.
    NATIVE_HISTOGRAM_SPANS_BUCKETS_MISMATCH = "err-heddle-native-histogram-spans-buckets-mismatch", 400, Series,
        "a native histogram sample's spans describe another number of buckets than it carries";
    /// A native histogram with more buckets than `limits.max_native_histogram_buckets`.
    MAX_NATIVE_HISTOGRAM_BUCKETS = "err-heddle-max-native-histogram-buckets", 400, Series,
        "a native histogram sample has more buckets than `limits.max_native_histogram_buckets` and its resolution could not (or, with `limits.reduce_native_histogram_over_max_buckets` off, may not) be lowered to fit";
    /// A native histogram over the hard ceiling (`heddle_model::histogram::MAX_BUCKETS_CEILING`).
    NATIVE_HISTOGRAM_TOO_LARGE = "err-heddle-native-histogram-too-large", 400, Series,
        "a native histogram sample has more than 16384 buckets, or more than 16384 spans and custom bounds: the hard ceiling, which no limit raises, refused before the histogram is decoded and never reduced (at an ingester's gRPC port the whole push is refused); lower the sender's resolution";
    /// A native histogram breaks Prometheus' invariants.
    NATIVE_HISTOGRAM_INVALID = "err-heddle-native-histogram-invalid", 400, Series,
        "a native histogram breaks Prometheus' invariants: at the distributor, those without an id of their own (bucket counts overflowing 64 bits, custom bounds not increasing or not covering the buckets, a zero bucket or negative buckets with custom buckets); at the ingester, any of them: fix the sender";
    /// A sample is older than the series' newest sample.
    SAMPLE_OUT_OF_ORDER = "err-heddle-sample-out-of-order", 400, Series,
        "a sample is older than the newest sample of its series (no out-of-order window is offered)";
    /// A sample repeats the newest timestamp with another value.
    SAMPLE_DUPLICATE_TIMESTAMP = "err-heddle-sample-duplicate-timestamp", 400, Series,
        "a sample has the same timestamp as the newest of its series but another value";
    /// A sample is older than the head accepts (already compacted, or beyond the appendable window).
    SAMPLE_OUT_OF_BOUNDS = "err-heddle-sample-out-of-bounds", 400, Series,
        "a sample is older than the tenant head accepts: behind a compacted block, the 1 h appendable window, or, \
         for an empty head, one block range before now";
    /// The head refused a label set (empty, unsorted or duplicated names) that validation let through.
    SERIES_INVALID_LABELS = "err-heddle-series-invalid-labels", 400, Series,
        "the ingester refused the series' label set (empty, unsorted or duplicate names)";
    /// Creating the series would exceed the tenant's series limit.
    MAX_SERIES_PER_USER = "err-heddle-max-series-per-user", 400, Series,
        "creating the series would exceed `limits.max_global_series_per_user` (divided over the ingesters)";
    /// Creating the series would exceed the metric's series limit.
    MAX_SERIES_PER_METRIC = "err-heddle-max-series-per-metric", 400, Series,
        "creating the series would exceed `limits.max_global_series_per_metric` (divided over the ingesters)";
    /// A metadata entry names no metric family.
    METADATA_MISSING_METRIC_NAME = "err-heddle-metadata-missing-metric-name", 400, Entry,
        "a metric metadata entry has no metric family name; it is dropped";
    /// A metadata entry's metric family name is longer than the limit.
    METADATA_METRIC_NAME_TOO_LONG = "err-heddle-metadata-metric-name-too-long", 400, Entry,
        "a metric metadata entry's family name is longer than `limits.max_metadata_length`; it is dropped";
    /// A metadata entry's help text is longer than the limit.
    METADATA_HELP_TOO_LONG = "err-heddle-metadata-help-too-long", 400, Entry,
        "a metric metadata entry's HELP text is longer than `limits.max_metadata_length`; it is dropped: shorten the help or raise the limit";
    /// A metadata entry's unit is longer than the limit.
    METADATA_UNIT_TOO_LONG = "err-heddle-metadata-unit-too-long", 400, Entry,
        "a metric metadata entry's UNIT is longer than `limits.max_metadata_length`; it is dropped";
    /// Keeping the metadata would exceed the tenant's metadata limit.
    MAX_METADATA_PER_USER = "err-heddle-max-metadata-per-user", 400, Entry,
        "keeping a new metric family's metadata would exceed `limits.max_global_metadata_per_user` (divided over the ingesters); it is dropped";
    /// Keeping the metadata would exceed the family's metadata limit.
    MAX_METADATA_PER_METRIC = "err-heddle-max-metadata-per-metric", 400, Entry,
        "keeping another metadata entry of one metric family would exceed `limits.max_global_metadata_per_metric`; it is dropped";
    /// An exemplar has no labels.
    EXEMPLAR_LABELS_MISSING = "err-heddle-exemplar-labels-missing", 400, Entry,
        "an exemplar has no labels (a trace id, for example); it is dropped";
    /// An exemplar's labels are longer than Prometheus allows.
    EXEMPLAR_LABELS_TOO_LONG = "err-heddle-exemplar-labels-too-long", 400, Entry,
        "an exemplar's label names and values hold more than 128 UTF-8 characters together (Prometheus' limit); it is dropped";
    /// An exemplar has no timestamp.
    EXEMPLAR_TIMESTAMP_INVALID = "err-heddle-exemplar-timestamp-invalid", 400, Entry,
        "an exemplar has no timestamp (0); it is dropped";
    /// An ingester refused the push to protect itself (instance limits).
    INGESTER_INSTANCE_LIMIT = "err-heddle-ingester-instance-limit", 503, Request,
        "an ingester reached one of its `ingester.instance_limits`; the sender retries with backoff";
    /// Too few replicas of a series answered because ingesters were unreachable.
    INGESTERS_UNAVAILABLE = "err-heddle-ingesters-unavailable", 503, Series,
        "too few of the series' ingesters were reachable to reach a write quorum; the sender retries";
    /// Too few replicas of a series acknowledged it because ingesters failed.
    INGESTER_FAILED = "err-heddle-ingester-failed", 500, Series,
        "too few of the series' ingesters acknowledged it (they failed); the sender retries";
    /// A query (all queries of one remote-read request together) fetched more series than allowed.
    MAX_SERIES_PER_QUERY = "err-heddle-max-series-per-query", 422, Request,
        "the query fetched more series than `limits.max_fetched_series_per_query`; narrow the selectors or raise it";
    /// A query fetched more chunks than allowed.
    MAX_CHUNKS_PER_QUERY = "err-heddle-max-chunks-per-query", 422, Request,
        "the query fetched more chunks than `limits.max_fetched_chunks_per_query`; narrow the selectors or time range";
    /// A query fetched more chunk bytes than allowed.
    MAX_CHUNKS_BYTES_PER_QUERY = "err-heddle-max-chunks-bytes-per-query", 422, Request,
        "the query fetched more chunk bytes than `limits.max_fetched_chunk_bytes_per_query`; narrow it or raise the limit";
    /// A query selected more samples than allowed.
    MAX_SAMPLES_PER_QUERY = "err-heddle-max-samples-per-query", 422, Request,
        "the query selected more samples than `querier.max_samples_per_query`; narrow it or raise the limit";
    /// Evaluating a PromQL query would hold more samples at once than allowed.
    MAX_QUERY_SAMPLES = "err-heddle-max-query-samples", 422, Request,
        "evaluating the PromQL query would hold more samples in memory at once than `querier.max_samples`; narrow it or raise the limit";
    /// A range query spans more time than allowed.
    MAX_QUERY_LENGTH = "err-heddle-max-query-length", 400, Request,
        "the range query spans more time than `limits.max_query_length`; shorten the range or raise the limit";
    /// A query ran past its timeout.
    QUERY_TIMEOUT = "err-heddle-query-timeout", 503, Request,
        "the query (PromQL, remote read, series and labels) ran longer than its timeout (the request's `timeout`, capped by `querier.query_timeout`); narrow it or raise `--querier.timeout`";
    /// A PromQL query reads a time that a 64-bit millisecond timestamp cannot hold.
    QUERY_TIMESTAMP_OUT_OF_RANGE = "err-heddle-query-timestamp-out-of-range", 400, Request,
        "an `offset`, `@` time, range, lookback or subquery of the PromQL query moves a time it reads past the range of a 64-bit millisecond timestamp; use smaller ones";
    /// A regular-expression matcher is longer than allowed.
    REGEX_TOO_LONG = "err-heddle-regex-too-long", 400, Request,
        "a regular-expression matcher is longer than `querier.max_regex_length`";
    /// Ingesters no longer answer blocks that the querier's bucket blocks do not hold.
    STORE_CONSISTENCY_CHECK_FAILED = "err-heddle-store-consistency-check-failed", 503, Request,
        "ingesters no longer answer blocks (shipped past their grace) that the bucket blocks the querier reads do not hold, even after listing the bucket again; no partial answer is given: run ingesters and queriers with the same `blocks_storage.bucket_store.sync_interval` and `bucket_index.max_stale_period`";
    /// A query request's body is over `querier.max_body_size`, or it would hold more than the querier's whole
    /// in-flight budget once decoded.
    QUERY_REQUEST_TOO_LARGE = "err-heddle-query-request-too-large", 413, Request,
        "the query request's body is over `querier.max_body_size`, or decoding it (remote read, a form, its selectors or PromQL query) would hold more than the whole `querier.max_inflight_requests_bytes`: send a smaller request or raise the limit";
    /// The querier's in-flight requests already hold `querier.max_inflight_requests_bytes`.
    QUERIER_MAX_INFLIGHT_REQUESTS_BYTES = "err-heddle-querier-max-inflight-requests-bytes", 503, Request,
        "the querier's in-flight requests hold `querier.max_inflight_requests_bytes`; the client retries later";
    /// The ring has no instance with tokens.
    RING_EMPTY = "err-heddle-ring-empty", 503, Request,
        "the ingester ring has no instance with tokens yet";
    /// Too many of a set's instances are unhealthy to form a quorum.
    RING_TOO_MANY_UNHEALTHY = "err-heddle-ring-too-many-unhealthy", 503, Request,
        "too many ingesters are unhealthy or unreachable to form a replica set";
    /// An ingester gRPC call without the cluster token (or with another one).
    CLUSTER_UNAUTHENTICATED = "err-heddle-cluster-unauthenticated", 401, Request,
        "an ingester gRPC call lacked the cluster token of `server.cluster_token_file` (gRPC `Unauthenticated`): give every process the same file";
    /// An admin call without the admin token (or with another one).
    ADMIN_UNAUTHENTICATED = "err-heddle-admin-unauthenticated", 401, Request,
        "an admin call (gRPC Admin, `/ingester/*`, `/distributor/ha_tracker`) lacked the token of `server.admin_token_file`";
    /// An admin HTTP route called on the public HTTP port while admin calls have their own listener.
    ADMIN_LISTENER_ONLY = "err-heddle-admin-listener-only", 403, Request,
        "admin routes are served only on the admin listener (`server.admin_grpc_listen_address`/`_port`), not on the public HTTP port";
    /// A browser sent a state-changing admin request from another origin.
    ADMIN_CROSS_ORIGIN = "err-heddle-admin-cross-origin", 403, Request,
        "a browser sent a state-changing admin request (`POST /ingester/*`, the ring page's Forget) from another origin (`Sec-Fetch-Site`, `Origin`): use the page this process serves, or a client that is not a browser";
    /// A zone-aware read has unhealthy instances in more zones than may fail.
    RING_TOO_MANY_UNHEALTHY_ZONES = "err-heddle-ring-too-many-unhealthy-zones", 503, Request,
        "a zone-aware read has unhealthy or unreachable ingesters in more zones than RF/2 (it needs every ingester of the other zones)";
}

/// The catalogue entry of `id`, if it is one.
pub fn lookup(id: &str) -> Option<&'static ErrorId> {
    CATALOGUE.iter().find(|e| e.id == id)
}

/// The catalogue as the Markdown page `docs/errors.md`.
pub fn render_markdown() -> String {
    let mut out = String::from(
        "# Error ids\n\n\
         Generated from `libs/model/src/error_id.rs` (the test `error_catalogue` keeps this page and the code in \
         step). Every refusal's message starts with its id, which is also the `reason` label of \
         `heddle_discarded_samples_total`. \"Series\" errors refuse one series of a request; the request's other \
         series are ingested and the response is the worst status of its series. \"Entry\" errors drop one metadata \
         entry or exemplar, counted in `heddle_distributor_discarded_metadata_total`, \
         `heddle_ingester_discarded_metadata_total` or `heddle_distributor_discarded_exemplars_total`.\n\n\
         | id | status | scope | meaning |\n|---|---|---|---|\n",
    );
    for e in CATALOGUE {
        let scope = match e.scope {
            Scope::Request => "request",
            Scope::Series => "series",
            Scope::Entry => "entry",
        };
        out.push_str(&format!("| `{}` | {} | {scope} | {} |\n", e.id, e.status, e.meaning));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_well_formed_and_found() {
        let mut seen = std::collections::HashSet::new();
        for e in CATALOGUE {
            assert!(seen.insert(e.id), "{} listed twice", e.id);
            let rest =
                e.id.strip_prefix("err-heddle-")
                    .unwrap_or_else(|| panic!("{} lacks the prefix", e.id));
            assert!(
                !rest.is_empty()
                    && rest
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{} is not lowercase-kebab",
                e.id
            );
            assert!((200..600).contains(&e.status), "{} has status {}", e.id, e.status);
            assert_eq!(lookup(e.id), Some(e));
        }
        assert_eq!(lookup("err-heddle-nope"), None);
    }

    #[test]
    fn the_page_lists_every_id() {
        let page = render_markdown();
        for e in CATALOGUE {
            assert!(page.contains(&format!("| `{}` | {} |", e.id, e.status)), "{}", e.id);
        }
    }
}
