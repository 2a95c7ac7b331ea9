//! The querier: Heddle's read path over the ingesters.
//!
//! Owns Prometheus remote read (`POST /prometheus/api/v1/read`, `SAMPLES` and `STREAMED_XOR_CHUNKS`), the
//! JSON metadata API (`/prometheus/api/v1/series`, `labels`, `label/{name}/values`), the PromQL series-selector
//! parser for `match[]`, and the merging of replica answers: the same series from several ingesters becomes one,
//! duplicate samples are dropped, overlapping chunks are decoded, merged and re-encoded.
//!
//! It reaches ingesters only through `heddle_proto::IngesterClient`, chosen per request by an
//! [`IngesterSource`] (a fixed list now, the ring later). It does not evaluate PromQL (a Prometheus server with
//! `remote_read` does), does not read blocks from object storage yet, and does not resolve tenants: the server
//! layer puts a `heddle_model::TenantId` extension on each request.

mod api;
mod chunks;
mod config;
mod convert;
mod error;
mod fetch;
mod frames;
mod http;
mod merge;
mod metrics;
mod params;
mod querier;
mod remote_read;
mod selector;
mod source;
mod store;

pub use config::{QUERIER_FLAGS, QuerierConfig};
pub use error::QuerierError;
pub use http::{LABEL_VALUES_PATH, LABELS_PATH, READ_PATH, SERIES_PATH, router};
pub use params::{MAX_TIME_MS, MIN_TIME_MS, parse_time};
pub use querier::{Querier, SeriesChunks, SeriesSamples};
pub use remote_read::STREAMED_CONTENT_TYPE;
pub use selector::parse_selector;
pub use source::{IngesterSource, ReplicationSet, RingIngesterSource, StaticIngesters};
pub use store::BucketStore;

#[cfg(test)]
mod tests;
