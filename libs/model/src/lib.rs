//! Heddle's data model: tenant ids, label sets, samples, native histograms, metric metadata and exemplars, label
//! matchers, the series hash that shards series onto the ring, and the injectable wall [`Clock`].
//!
//! This crate owns the vocabulary every other crate speaks, including the catalogue of error ids
//! ([`error_id`]). It does no I/O (beyond reading the system clock), has no async code and knows nothing of
//! protobuf: services map wire types to these at the edge.

mod batch;
pub mod civil;
mod clock;
pub mod error_id;
mod hash;
pub mod histogram;
mod labels;
mod matcher;
mod metadata;
mod sample;
mod tenant;

pub use batch::{BatchFull, SeriesBatch};
pub use clock::{Clock, ManualClock, SystemClock};
pub use hash::{FNV32A_OFFSET, fnv32a_add, series_token, series_token_seeded, tenant_token_seed};
pub use histogram::{
    CounterResetHint, FloatHistogram, Histogram, HistogramError, HistogramSample, HistogramSize, HistogramValue, Span,
};
pub use labels::{
    Label, LabelRef, Labels, LabelsError, METRIC_NAME, is_valid_label_name, is_valid_metric_name, quoted, series_text,
};
pub use matcher::{MatchType, Matcher, MatcherError};
pub use metadata::{
    EXEMPLAR_MAX_LABEL_SET_LENGTH, ExemplarRef, MetadataRef, MetricMetadata, MetricType, exemplar_label_set_length,
};
pub use sample::{STALE_NAN_BITS, Sample, is_stale_nan};
pub use tenant::{DEFAULT_TENANT, TENANT_HEADER, TenantId, TenantIdError};
