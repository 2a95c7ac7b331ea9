//! The ring's error type.

use std::path::PathBuf;

/// Everything the ring can fail with. Lookup errors carry stable ids: the distributor and querier show them
/// to users when a series or a query cannot reach enough ingesters.
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    /// No instance owns any token (no ingester has joined yet).
    #[error("err-heddle-ring-empty: the ingester ring has no instances with tokens")]
    Empty,
    /// Fewer healthy replicas than the quorum needs.
    #[error(
        "err-heddle-ring-too-many-unhealthy: at least {required} live replicas required, could only find {found} \
         (unhealthy or unreachable: {unhealthy})"
    )]
    TooManyUnhealthy {
        required: usize,
        found: usize,
        unhealthy: String,
    },
    /// A zone-aware read cannot be complete: instances are unhealthy in more zones than may fail.
    #[error(
        "err-heddle-ring-too-many-unhealthy-zones: a zone-aware read needs every instance of {required} of the \
         {zones} zones, but {failed} zones have unhealthy or unreachable instances (at most {max_unavailable} may): \
         {unhealthy}"
    )]
    TooManyUnhealthyZones {
        required: usize,
        zones: usize,
        failed: usize,
        max_unavailable: usize,
        unhealthy: String,
    },
    /// The tokens file could not be read or written.
    #[error("tokens file {path}: {source}")]
    TokensFileIo { path: PathBuf, source: std::io::Error },
    /// The tokens file exists but is not `{"tokens":[...]}`.
    #[error("tokens file {path}: not a tokens file: {reason}")]
    TokensFileFormat { path: PathBuf, reason: String },
    /// Random generation could not find enough unused tokens.
    #[error("cannot pick {wanted} tokens: only {available} of the 2^32 are free")]
    TokenSpaceExhausted { wanted: usize, available: u64 },
    /// A gossiped instance entry could not be decoded.
    #[error("instance {id}: gossip key {key}: {reason}")]
    Decode { id: String, key: String, reason: String },
    /// The gossip layer failed (bind, join, shutdown).
    #[error("memberlist: {0}")]
    Memberlist(String),
    /// A configuration value is invalid; the message names the YAML key.
    #[error("{0}")]
    Config(String),
}
