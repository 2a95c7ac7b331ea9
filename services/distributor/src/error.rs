//! The distributor's errors: whole-request refusals, per-series validation failures and config mistakes.
//!
//! Every user-facing message starts with a stable id (`err-heddle-...`), the same string used as the `reason`
//! label of `heddle_discarded_samples_total`, and ends by saying what to change.

use heddle_limits::NameValidationScheme;
use heddle_model::error_id;
use http::StatusCode;

/// A refusal of the whole request: nothing of it was forwarded to an ingester.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PushError {
    #[error(
        "err-heddle-request-too-large: request body of {size} bytes or more is over the limit of {limit} bytes; \
         send smaller batches \
         (remote_write queue_config.max_samples_per_send) or raise `distributor.max_recv_msg_size` \
         (--distributor.max-recv-msg-size)"
    )]
    BodyTooLarge { size: u64, limit: usize },
    #[error(
        "err-heddle-unsupported-content-encoding: content encoding {encoding:?} is not supported: remote write \
         bodies must be snappy block-compressed (Content-Encoding: snappy)"
    )]
    UnsupportedContentEncoding { encoding: String },
    #[error(
        "err-heddle-unsupported-content-type: content type {content_type:?} is not supported: send remote write \
         1.0 (Content-Type: application/x-protobuf, a prometheus.WriteRequest) or 2.0 \
         (application/x-protobuf;proto=io.prometheus.write.v2.Request)"
    )]
    UnsupportedContentType { content_type: String },
    #[error(
        "err-heddle-decompressed-too-large: snappy body declares {declared} decompressed bytes; the limit is \
         {limit}; send smaller batches or raise `distributor.max_decompressed_size` \
         (--distributor.max-decompressed-size)"
    )]
    DecompressedTooLarge { declared: usize, limit: usize },
    #[error(
        "err-heddle-unsupported-content-encoding: content encoding {encoding:?} is not supported: OTLP bodies must \
         be gzip-compressed (Content-Encoding: gzip) or not compressed"
    )]
    OtlpUnsupportedContentEncoding { encoding: String },
    #[error(
        "err-heddle-unsupported-content-type: content type {content_type:?} is not supported on /otlp/v1/metrics: \
         send OTLP protobuf (Content-Type: application/x-protobuf) or OTLP JSON (Content-Type: application/json)"
    )]
    OtlpUnsupportedContentType { content_type: String },
    #[error("err-heddle-corrupt-gzip: request body is not valid gzip: {detail}")]
    CorruptGzip { detail: String },
    #[error(
        "err-heddle-decompressed-too-large: the gzip body decompresses to more than {limit} bytes; send smaller \
         batches or raise `distributor.max_decompressed_size` (--distributor.max-decompressed-size)"
    )]
    GzipTooLarge { limit: usize },
    #[error(
        "err-heddle-decompressed-too-large: the OTLP request's series, with every resource and point label written \
         out, take more than {limit} bytes; send smaller batches or raise `distributor.max_decompressed_size` \
         (--distributor.max-decompressed-size)"
    )]
    OtlpTooLarge { limit: usize },
    #[error(
        "err-heddle-request-too-large: the OTLP request may take up to {bound} bytes once decoded, more than the \
         distributor's in-flight limit of {limit} bytes for all requests \
         (`distributor.instance_limits.max_inflight_push_requests_bytes`); send smaller batches"
    )]
    OtlpDecodedTooLarge { bound: usize, limit: usize },
    #[error(
        "err-heddle-request-too-large: the OTLP request's translation into Prometheus series (each resource and \
         point label copied onto every series of the point) may take up to {bound} bytes, which with the request \
         is more than the distributor's in-flight limit of {limit} bytes for all requests \
         (`distributor.instance_limits.max_inflight_push_requests_bytes`); send smaller batches, or fewer \
         attributes or histogram buckets per point"
    )]
    OtlpTranslationTooLarge { bound: usize, limit: usize },
    #[error("err-heddle-invalid-otlp: request body is not a valid OTLP ExportMetricsServiceRequest: {detail}")]
    InvalidOtlp { detail: String },
    #[error(
        "err-heddle-decompressed-too-large: the remote write 2.0 request's series take up to {expanded} bytes with \
         their labels resolved from its symbol table; the limit is {limit}; send smaller batches or raise \
         `distributor.max_decompressed_size` (--distributor.max-decompressed-size)"
    )]
    ExpandedTooLarge { expanded: usize, limit: usize },
    #[error("err-heddle-corrupt-snappy: request body is not valid snappy block format: {detail}")]
    CorruptSnappy { detail: String },
    #[error("err-heddle-invalid-protobuf: request body is not a valid {message}: {detail}")]
    InvalidProtobuf { message: &'static str, detail: String },
    #[error("err-heddle-degenerate-write-request: request body is not a plausible {message}: {detail}")]
    DegenerateRequest { message: &'static str, detail: String },
    #[error(
        "err-heddle-distributor-max-inflight-push-requests-bytes: the distributor's in-flight push requests hold \
         {in_flight} bytes and this one needs {requested} more ({held} already held); the limit is {limit} bytes. \
         The sender retries later; raise `distributor.instance_limits.max_inflight_push_requests_bytes` \
         (--distributor.instance-limits.max-inflight-push-requests-bytes) if the process has the memory"
    )]
    InflightBytes {
        requested: usize,
        held: usize,
        in_flight: usize,
        limit: usize,
    },
    #[error("err-heddle-body-read: reading the request body failed: {detail}")]
    BodyRead { detail: String },
    #[error(
        "err-heddle-body-read-timeout: the request body did not arrive within {timeout_ms} ms ({received} bytes \
         received); send smaller batches, or raise `server.http_server_read_timeout` \
         (--server.http-server-read-timeout)"
    )]
    BodyReadTimeout { timeout_ms: u128, received: usize },
    #[error(
        "err-heddle-ingestion-rate-limited: ingestion rate limit exceeded (tenant={tenant}, samples={samples}): \
         the limit is {rate} samples/s with a burst of {burst}{too_big}; raise `limits.ingestion_rate` \
         (--distributor.ingestion-rate-limit) or `limits.ingestion_burst_size` (--distributor.ingestion-burst-size)",
        too_big = if *samples > *burst as u64 { ", and this request alone is larger than the burst" } else { "" }
    )]
    RateLimited {
        tenant: String,
        samples: u64,
        rate: f64,
        burst: usize,
    },
    #[error(
        "err-heddle-too-many-ha-clusters: too many HA clusters (tenant={tenant}, cluster={cluster:?}): the limit \
         is {limit} clusters per tenant; raise `limits.ha_max_clusters` (--distributor.ha-tracker.max-clusters)"
    )]
    TooManyHaClusters {
        tenant: String,
        cluster: String,
        limit: usize,
    },
    #[error(
        "err-heddle-invalid-ha-label: the HA {role} label {label:?} has a value of {len} bytes starting {start:?} \
         (tenant={tenant}): label values may have at most {limit} bytes; the request is refused before it is \
         tracked. Shorten the value or raise `limits.max_label_value_length` (--validation.max-length-label-value)"
    )]
    InvalidHaLabel {
        tenant: String,
        /// `cluster` or `replica`.
        role: &'static str,
        label: String,
        len: usize,
        /// The value's first characters.
        start: String,
        limit: usize,
    },
    #[error("err-heddle-no-tenant: the request carries no tenant; the server's tenant layer is missing (a bug)")]
    NoTenant,
}

impl From<heddle_server::InflightRefused> for PushError {
    fn from(r: heddle_server::InflightRefused) -> Self {
        PushError::InflightBytes {
            requested: r.requested,
            held: r.held,
            in_flight: r.in_flight,
            limit: r.limit,
        }
    }
}

impl PushError {
    /// The stable id that starts the message.
    pub fn id(&self) -> &'static str {
        match self {
            PushError::BodyTooLarge { .. }
            | PushError::OtlpDecodedTooLarge { .. }
            | PushError::OtlpTranslationTooLarge { .. } => error_id::REQUEST_TOO_LARGE,
            PushError::UnsupportedContentEncoding { .. } => error_id::UNSUPPORTED_CONTENT_ENCODING,
            PushError::UnsupportedContentType { .. } => error_id::UNSUPPORTED_CONTENT_TYPE,
            PushError::DecompressedTooLarge { .. } | PushError::ExpandedTooLarge { .. } => {
                error_id::DECOMPRESSED_TOO_LARGE
            }
            PushError::CorruptSnappy { .. } => error_id::CORRUPT_SNAPPY,
            PushError::OtlpUnsupportedContentEncoding { .. } => error_id::UNSUPPORTED_CONTENT_ENCODING,
            PushError::OtlpUnsupportedContentType { .. } => error_id::UNSUPPORTED_CONTENT_TYPE,
            PushError::CorruptGzip { .. } => error_id::CORRUPT_GZIP,
            PushError::GzipTooLarge { .. } | PushError::OtlpTooLarge { .. } => error_id::DECOMPRESSED_TOO_LARGE,
            PushError::InvalidOtlp { .. } => error_id::INVALID_OTLP,
            PushError::InvalidProtobuf { .. } => error_id::INVALID_PROTOBUF,
            PushError::DegenerateRequest { .. } => error_id::DEGENERATE_WRITE_REQUEST,
            PushError::InflightBytes { .. } => error_id::DISTRIBUTOR_MAX_INFLIGHT_PUSH_REQUESTS_BYTES,
            PushError::BodyRead { .. } => error_id::BODY_READ,
            PushError::BodyReadTimeout { .. } => error_id::BODY_READ_TIMEOUT,
            PushError::RateLimited { .. } => error_id::INGESTION_RATE_LIMITED,
            PushError::TooManyHaClusters { .. } => error_id::TOO_MANY_HA_CLUSTERS,
            PushError::InvalidHaLabel { .. } => error_id::INVALID_HA_LABEL,
            PushError::NoTenant => error_id::NO_TENANT,
        }
    }

    /// HTTP status for the remote-write response.
    pub fn status(&self) -> StatusCode {
        match self {
            PushError::BodyTooLarge { .. }
            | PushError::OtlpDecodedTooLarge { .. }
            | PushError::OtlpTranslationTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            // 5xx, not 408: Prometheus drops a batch refused with a 4xx, and a slow body is the network's doing.
            PushError::BodyReadTimeout { .. } => StatusCode::SERVICE_UNAVAILABLE,
            // As Mimir: the distributor protects itself, the sender backs off and retries.
            PushError::InflightBytes { .. } => StatusCode::SERVICE_UNAVAILABLE,
            PushError::UnsupportedContentEncoding { .. }
            | PushError::UnsupportedContentType { .. }
            | PushError::OtlpUnsupportedContentEncoding { .. }
            | PushError::OtlpUnsupportedContentType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            PushError::DecompressedTooLarge { .. }
            | PushError::ExpandedTooLarge { .. }
            | PushError::CorruptSnappy { .. }
            | PushError::CorruptGzip { .. }
            | PushError::GzipTooLarge { .. }
            | PushError::OtlpTooLarge { .. }
            | PushError::InvalidOtlp { .. }
            | PushError::InvalidProtobuf { .. }
            | PushError::DegenerateRequest { .. }
            | PushError::BodyRead { .. }
            | PushError::TooManyHaClusters { .. }
            | PushError::InvalidHaLabel { .. } => StatusCode::BAD_REQUEST,
            PushError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            PushError::NoTenant => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// gRPC code for callers that speak gRPC (same meaning as [`PushError::status`]).
    pub fn grpc_code(&self) -> tonic::Code {
        match self {
            PushError::BodyTooLarge { .. }
            | PushError::OtlpDecodedTooLarge { .. }
            | PushError::OtlpTranslationTooLarge { .. }
            | PushError::RateLimited { .. } => tonic::Code::ResourceExhausted,
            PushError::NoTenant => tonic::Code::Internal,
            PushError::BodyReadTimeout { .. } | PushError::InflightBytes { .. } => tonic::Code::Unavailable,
            _ => tonic::Code::InvalidArgument,
        }
    }

    /// Whether sending the same request again can succeed. A 429 may succeed later; Prometheus only retries
    /// it with `retry_on_http_429`.
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            PushError::RateLimited { .. }
                | PushError::NoTenant
                | PushError::BodyReadTimeout { .. }
                | PushError::InflightBytes { .. }
        )
    }
}

/// Why one series was refused by validation. The message (see [`crate::Rejection`]) adds tenant and series.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSeries {
    #[error("series has no metric name")]
    MissingMetricName,
    #[error("invalid metric name {name:?}")]
    InvalidMetricName { name: String, scheme: NameValidationScheme },
    #[error("series has {count} labels")]
    TooManyLabels { count: usize, limit: usize },
    #[error("invalid label name {name:?}")]
    InvalidLabelName { name: String, scheme: NameValidationScheme },
    #[error("label name {name:?} is {len} bytes long")]
    LabelNameTooLong { name: String, len: usize, limit: usize },
    #[error("value of label {name:?} is {len} bytes long")]
    LabelValueTooLong { name: String, len: usize, limit: usize },
    #[error("duplicate label name {name:?}")]
    DuplicateLabelNames { name: String },
    #[error("labels are not sorted by name: {prev:?} comes before {next:?}")]
    LabelsNotSorted { prev: String, next: String },
    /// A native histogram sample that breaks Prometheus' rules; `id` is the rule's error id.
    #[error("invalid native histogram sample at {timestamp_ms} ms: {detail}")]
    InvalidHistogram {
        id: &'static str,
        detail: String,
        timestamp_ms: i64,
    },
    #[error("native histogram sample at {timestamp_ms} ms has {buckets} buckets, more than {limit}")]
    TooManyHistogramBuckets {
        buckets: usize,
        limit: usize,
        /// Whether its resolution was lowered as far as it goes before giving up.
        reduced: bool,
        timestamp_ms: i64,
    },
    /// A native histogram over the hard ceiling, refused before it was decoded.
    #[error("native histogram sample at {timestamp_ms} ms has {size}, more than {ceiling}")]
    HistogramTooLarge {
        size: heddle_model::HistogramSize,
        ceiling: usize,
        timestamp_ms: i64,
    },
    #[error("{count} samples have timestamps too far in the future (first: {timestamp_ms} ms)")]
    TooFarInFuture {
        count: usize,
        timestamp_ms: i64,
        max_ms: i64,
    },
    #[error("{count} samples have timestamps too far in the past (first: {timestamp_ms} ms)")]
    TooFarInPast {
        count: usize,
        timestamp_ms: i64,
        min_ms: i64,
    },
}

/// What to do about a name the tenant's validation scheme refuses: under `legacy`, the tenant may opt into
/// UTF-8 names.
fn rename_remedy(rule: &str, scheme: NameValidationScheme) -> String {
    match scheme {
        NameValidationScheme::Legacy => format!(
            "{rule}; fix the name in relabelling, or set `limits.name_validation_scheme: utf8` \
             (--validation.name-validation-scheme=utf8) to store UTF-8 names"
        ),
        NameValidationScheme::Utf8 => format!("{rule}; fix the name in relabelling"),
    }
}

impl InvalidSeries {
    /// Stable id, also the `reason` label of `heddle_discarded_samples_total`.
    pub fn id(&self) -> &'static str {
        match self {
            InvalidSeries::MissingMetricName => error_id::MISSING_METRIC_NAME,
            InvalidSeries::InvalidMetricName { .. } => error_id::INVALID_METRIC_NAME,
            InvalidSeries::TooManyLabels { .. } => error_id::MAX_LABEL_NAMES_PER_SERIES,
            InvalidSeries::InvalidLabelName { .. } => error_id::INVALID_LABEL,
            InvalidSeries::LabelNameTooLong { .. } => error_id::LABEL_NAME_TOO_LONG,
            InvalidSeries::LabelValueTooLong { .. } => error_id::LABEL_VALUE_TOO_LONG,
            InvalidSeries::DuplicateLabelNames { .. } => error_id::DUPLICATE_LABEL_NAMES,
            InvalidSeries::LabelsNotSorted { .. } => error_id::LABELS_NOT_SORTED,
            InvalidSeries::InvalidHistogram { id, .. } => id,
            InvalidSeries::TooManyHistogramBuckets { .. } => error_id::MAX_NATIVE_HISTOGRAM_BUCKETS,
            InvalidSeries::HistogramTooLarge { .. } => error_id::NATIVE_HISTOGRAM_TOO_LARGE,
            InvalidSeries::TooFarInFuture { .. } => error_id::TOO_FAR_IN_FUTURE,
            InvalidSeries::TooFarInPast { .. } => error_id::SAMPLE_TOO_FAR_IN_PAST,
        }
    }

    /// What the sender (or operator) should change, including the limit and its config key when one applies.
    pub fn remedy(&self) -> String {
        match self {
            InvalidSeries::MissingMetricName => "every series needs a non-empty `__name__` label".into(),
            InvalidSeries::InvalidMetricName { scheme, .. } => rename_remedy(scheme.metric_name_rule(), *scheme),
            InvalidSeries::TooManyLabels { limit, .. } => format!(
                "the limit is {limit}; drop labels in relabelling or raise `limits.max_label_names_per_series` \
                 (--validation.max-label-names-per-series)"
            ),
            InvalidSeries::InvalidLabelName { scheme, .. } => rename_remedy(scheme.label_name_rule(), *scheme),
            InvalidSeries::LabelNameTooLong { limit, .. } => format!(
                "the limit is {limit}; shorten it in relabelling or raise `limits.max_label_name_length` \
                 (--validation.max-length-label-name)"
            ),
            InvalidSeries::LabelValueTooLong { limit, .. } => format!(
                "the limit is {limit}; shorten it in relabelling or raise `limits.max_label_value_length` \
                 (--validation.max-length-label-value)"
            ),
            InvalidSeries::DuplicateLabelNames { .. } => "each label name may appear once per series".into(),
            InvalidSeries::LabelsNotSorted { .. } => {
                "remote write requires labels sorted by name; this is a bug in the sender".into()
            }
            InvalidSeries::InvalidHistogram { .. } => {
                "the histogram sample is dropped; this is a bug in the sender's histogram encoding".into()
            }
            InvalidSeries::TooManyHistogramBuckets { reduced, limit, .. } => format!(
                "the sample is dropped{}; {}",
                if *reduced {
                    " (it has that many even at the lowest resolution, or custom buckets, which cannot be merged)"
                } else {
                    " (`limits.reduce_native_histogram_over_max_buckets` is off)"
                },
                if *limit >= heddle_model::histogram::MAX_BUCKETS_CEILING {
                    "the limit is the hard ceiling, which no configuration raises: lower the sender's resolution \
                     (native_histogram_bucket_limit in the scrape config)"
                } else {
                    "raise `limits.max_native_histogram_buckets` (--validation.max-native-histogram-buckets), or \
                     lower the sender's resolution (native_histogram_bucket_limit in the scrape config)"
                }
            ),
            InvalidSeries::HistogramTooLarge { .. } => "the sample is dropped undecoded and is not reduced: this \
                 is the hard ceiling of every native histogram, which no limit raises; lower the sender's \
                 resolution (a smaller schema, or native_histogram_bucket_limit in the scrape config)"
                .into(),
            InvalidSeries::TooFarInFuture { max_ms, .. } => format!(
                "the newest accepted timestamp is {max_ms} ms (now + grace period); fix the sender's clock or \
                 raise `limits.creation_grace_period` (--validation.create-grace-period)"
            ),
            InvalidSeries::TooFarInPast { min_ms, .. } => format!(
                "the oldest accepted timestamp is {min_ms} ms (now - past grace period); fix the sender's clock, \
                 or raise `limits.past_grace_period` (--validation.past-grace-period; 0 disables the check)"
            ),
        }
    }
}

/// Why one metadata entry or exemplar was dropped by validation. The message (see [`crate::Rejection`]) adds
/// the tenant and the family or series.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidEntry {
    #[error("metadata entry has no metric family name")]
    MetadataMissingName,
    #[error("metadata metric family name is {len} bytes long")]
    MetadataNameTooLong { len: usize, limit: usize },
    #[error("metadata HELP is {len} bytes long")]
    MetadataHelpTooLong { len: usize, limit: usize },
    #[error("metadata UNIT is {len} bytes long")]
    MetadataUnitTooLong { len: usize, limit: usize },
    #[error("exemplar has no labels (ts={timestamp_ms})")]
    ExemplarLabelsMissing { timestamp_ms: i64 },
    #[error("exemplar labels hold {len} UTF-8 characters (ts={timestamp_ms})")]
    ExemplarLabelsTooLong { len: usize, timestamp_ms: i64 },
    #[error("exemplar has no timestamp")]
    ExemplarTimestampInvalid,
}

impl InvalidEntry {
    /// Stable id, also the `reason` label of the discarded metadata and exemplars counters.
    pub fn id(&self) -> &'static str {
        match self {
            InvalidEntry::MetadataMissingName => error_id::METADATA_MISSING_METRIC_NAME,
            InvalidEntry::MetadataNameTooLong { .. } => error_id::METADATA_METRIC_NAME_TOO_LONG,
            InvalidEntry::MetadataHelpTooLong { .. } => error_id::METADATA_HELP_TOO_LONG,
            InvalidEntry::MetadataUnitTooLong { .. } => error_id::METADATA_UNIT_TOO_LONG,
            InvalidEntry::ExemplarLabelsMissing { .. } => error_id::EXEMPLAR_LABELS_MISSING,
            InvalidEntry::ExemplarLabelsTooLong { .. } => error_id::EXEMPLAR_LABELS_TOO_LONG,
            InvalidEntry::ExemplarTimestampInvalid => error_id::EXEMPLAR_TIMESTAMP_INVALID,
        }
    }

    /// What the sender (or operator) should change.
    pub fn remedy(&self) -> String {
        let length = |limit: &usize| {
            format!(
                "the limit is {limit} bytes; the entry is dropped: shorten it or raise `limits.max_metadata_length` \
                 (--validation.max-metadata-length)"
            )
        };
        match self {
            InvalidEntry::MetadataMissingName => "every metadata entry needs a metric family name".into(),
            InvalidEntry::MetadataNameTooLong { limit, .. }
            | InvalidEntry::MetadataHelpTooLong { limit, .. }
            | InvalidEntry::MetadataUnitTooLong { limit, .. } => length(limit),
            InvalidEntry::ExemplarLabelsMissing { .. } => {
                "the exemplar is dropped; an exemplar needs at least one label, such as trace_id".into()
            }
            InvalidEntry::ExemplarLabelsTooLong { .. } => format!(
                "the exemplar is dropped; Prometheus allows at most {} characters of exemplar label names and \
                 values together",
                heddle_model::EXEMPLAR_MAX_LABEL_SET_LENGTH
            ),
            InvalidEntry::ExemplarTimestampInvalid => "the exemplar is dropped; give it a timestamp".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_start_with_their_id() {
        let errors = [
            PushError::BodyTooLarge { size: 10, limit: 5 },
            PushError::UnsupportedContentEncoding {
                encoding: "gzip".into(),
            },
            PushError::UnsupportedContentType {
                content_type: "text/plain".into(),
            },
            PushError::DecompressedTooLarge { declared: 10, limit: 5 },
            PushError::ExpandedTooLarge { expanded: 10, limit: 5 },
            PushError::CorruptSnappy { detail: "x".into() },
            PushError::InvalidProtobuf {
                message: "prometheus.WriteRequest",
                detail: "x".into(),
            },
            PushError::BodyRead { detail: "x".into() },
            PushError::DegenerateRequest {
                message: "prometheus.WriteRequest",
                detail: "x".into(),
            },
            PushError::InflightBytes {
                requested: 1,
                held: 0,
                in_flight: 1,
                limit: 1,
            },
            PushError::RateLimited {
                tenant: "t".into(),
                samples: 1,
                rate: 1.0,
                burst: 1,
            },
            PushError::TooManyHaClusters {
                tenant: "t".into(),
                cluster: "c".into(),
                limit: 1,
            },
            PushError::InvalidHaLabel {
                tenant: "t".into(),
                role: "cluster",
                label: "cluster".into(),
                len: 3000,
                start: "x".into(),
                limit: 2048,
            },
            PushError::NoTenant,
        ];
        for e in errors {
            assert!(e.to_string().starts_with(e.id()), "{e:?}: {e}");
        }
    }

    #[test]
    fn rate_limit_message_says_when_request_exceeds_burst() {
        let small = PushError::RateLimited {
            tenant: "t".into(),
            samples: 5,
            rate: 10.0,
            burst: 10,
        };
        let big = PushError::RateLimited {
            tenant: "t".into(),
            samples: 11,
            rate: 10.0,
            burst: 10,
        };
        assert!(!small.to_string().contains("larger than the burst"));
        assert!(big.to_string().contains("larger than the burst"), "{big}");
    }
}
