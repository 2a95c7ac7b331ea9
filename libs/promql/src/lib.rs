//! Heddle's PromQL engine: Prometheus' query language evaluated over series a caller selects.
//!
//! Parsing is the `promql-parser` crate's (it tracks Prometheus' grammar); evaluation is this crate's, with
//! Prometheus 2.42's semantics: the 5-minute lookback and staleness markers, ranges closed at both ends,
//! `offset` and `@`, subqueries aligned to their step, vector matching, and Prometheus' float formatting.
//! One piece of Prometheus 3 is taken as well: quoted names (`{"http.server.duration", "service.name"="a"}`)
//! and any non-empty label name in `label_replace`, `label_join` and `count_values`, which tenants storing
//! UTF-8 names need.
//!
//! Native histograms follow Prometheus 3 (the `histogram` module lists where that differs from 2.42): a
//! [`Series`] carries histogram samples beside float ones, and a result's [`InstantSample`] or [`RangeSeries`]
//! a histogram or a float per point; [`write_histogram_json`] writes one as Prometheus' HTTP API does.
//!
//! The engine does no I/O. [`Query::new`] parses a query and lists the [`Selection`]s it needs (each
//! selector once, over the whole time span its steps read); the caller fetches them and hands them to
//! [`Query::evaluate`], which checks the sample limit as it goes, and the deadline and the caller's cancellation
//! inside every loop that grows with the query (the `deadline` module). Time arithmetic (`offset`, `@`, ranges,
//! subquery steps) is checked: a time past i64 milliseconds is a `bad_data` error, never a wrapped value.

mod aggregate;
mod binary;
mod deadline;
mod error;
mod eval;
mod functions;
mod histogram;
mod json;
mod query;
mod times;
mod value;

pub use deadline::{DeadlineClock, MonotonicClock};
pub use error::PromqlError;
pub use functions::go_format_float;
pub use json::{api_float, write_histogram_json};
pub use query::{MatcherBuilder, Query, QueryOptions, QueryTime, Selection, Series, Stats, format_query, parse};
pub use value::{HistogramPoint, InstantSample, RangeSeries, Value};

#[cfg(test)]
mod tests;
