//! The distributor: Heddle's remote-write receiver.
//!
//! Owns the write path up to the ingesters (DESIGN.md §2 steps 1-5): the `POST /api/v1/push` endpoint,
//! request size and format checks, decoding into a pooled per-request arena, per-series validation and
//! per-tenant limits (read from `heddle_limits`), sharding series by token onto replica sets, forwarding one request per ingester and
//! deciding each series by quorum. It does not store samples (the ingester does), resolve tenants (the
//! server layer does) or maintain ring membership (it asks an [`IngesterRing`]).

mod clock;
mod config;
mod distributor;
mod error;
mod ha_tracker;
mod http;
mod metrics;
mod outcome;
mod rate_limit;
mod ring;
mod validation;

#[cfg(test)]
mod testutil;

pub use clock::{Clock, SystemClock};
pub use config::{DISTRIBUTOR_FLAGS, DistributorConfig};
pub use distributor::Distributor;
pub use error::{ConfigError, InvalidSeries, PushError};
pub use ha_tracker::{
    Election, HA_TRACKER_FLAGS, HaDecision, HaKvStoreConfig, HaTracker, HaTrackerConfig, ha_tracker_router,
};
pub use http::router;
pub use outcome::{ForwardFailure, MAX_RESPONSE_BODY, PushOutcome, Rejection};
pub use rate_limit::IngestionRateLimiter;
pub use ring::{IngesterRing, InstanceId, ReplicaSet, RingIngesters, SingleIngesterRing};
