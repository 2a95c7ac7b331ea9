//! Heddle's data model: tenant ids, label sets, samples, label matchers and the series hash that shards
//! series onto the ring.
//!
//! This crate owns the vocabulary every other crate speaks. It does no I/O, has no async code and knows
//! nothing of protobuf: services map wire types to these at the edge.

mod hash;
mod labels;
mod matcher;
mod sample;
mod tenant;

pub use hash::{fnv32a_add, series_token, FNV32A_OFFSET};
pub use labels::{is_valid_label_name, is_valid_metric_name, Label, LabelRef, Labels, LabelsError, METRIC_NAME};
pub use matcher::{MatchType, Matcher, MatcherError};
pub use sample::{is_stale_nan, Sample, STALE_NAN_BITS};
pub use tenant::{TenantId, TenantIdError, DEFAULT_TENANT, TENANT_HEADER};
