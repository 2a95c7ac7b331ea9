//! The querier: Heddle's read path over the ingesters and the bucket.
//!
//! Owns Prometheus remote read (`POST /prometheus/api/v1/read`, `SAMPLES` and `STREAMED_XOR_CHUNKS`), the
//! JSON metadata API (`/prometheus/api/v1/series`, `labels`, `label/{name}/values`), the PromQL query API
//! (`query`, `query_range`, `format_query`, `status/buildinfo`, `metadata`, `query_exemplars`), the PromQL
//! series-selector parser for `match[]`, reading blocks straight from the bucket ([`BucketStore`]), and the
//! merging of replica answers: the same series from several ingesters and blocks becomes one, duplicate
//! samples are dropped, overlapping chunks are decoded, merged and re-encoded.
//!
//! PromQL is evaluated by `heddle_promql`, which does no I/O: the querier fetches each selection a query
//! needs once, under the query's limits and deadline, and hands the series to the engine (the `engine` module).
//!
//! Series are model types inside ([`heddle_tsdb::SeriesChunks`]): converted from the wire once as they arrive
//! from an ingester, to the wire once where a response is encoded. Sources are merged series by series (each
//! yields series sorted by labels), so a streamed remote read answers as it merges ([`SelectedSeries`]).
//!
//! It reaches ingesters only through `heddle_proto::IngesterClient`, chosen per query by the ring's replica
//! seam (`heddle_ring::Replicas`: a fixed list or the ring). It does not resolve tenants: the server layer
//! puts a `heddle_model::TenantId` extension on each request. It does not store metric metadata or
//! exemplars yet, so `metadata` and `query_exemplars` answer empty.

mod api;
mod budget;
mod chunks;
mod config;
mod convert;
mod engine;
mod error;
mod fetch;
mod frames;
mod http;
mod limits;
mod matchers;
mod merge;
mod metrics;
mod params;
mod promql_api;
mod promql_json;
mod querier;
mod remote_read;
mod select;
mod selector;
mod store;

pub use budget::promql_parse_bytes;
pub use config::{QUERIER_FLAGS, QuerierConfig};
pub use error::{FetchLimit, QuerierError};
pub use http::{
    BUILD_INFO_PATH, FORMAT_QUERY_PATH, LABEL_VALUES_PATH, LABELS_PATH, METADATA_PATH, QUERY_EXEMPLARS_PATH,
    QUERY_PATH, QUERY_RANGE_PATH, READ_PATH, SERIES_PATH, router,
};
pub use params::{MAX_TIME_MS, MIN_TIME_MS, parse_time};
pub use querier::{
    BuildInfo, ExemplarSample, FamilyMetadata, IngesterReplicas, MetadataRequest, Querier, SeriesSamples,
};
pub use remote_read::STREAMED_CONTENT_TYPE;
pub use select::SelectedSeries;
pub use selector::parse_selector;
pub use store::BucketStore;

#[cfg(test)]
mod fetch_limits_tests;
#[cfg(test)]
mod histogram_tests;
#[cfg(test)]
mod promql_tests;
/// Tests hold the bounds reserved before decoding against what decoding allocates.
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: heddle_testkit::alloc::PerThread<0> = heddle_testkit::alloc::PerThread;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod utf8_names_tests;
