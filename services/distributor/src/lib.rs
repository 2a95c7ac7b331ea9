//! The distributor: Heddle's remote-write receiver.
//!
//! Owns the write path up to the ingesters (DESIGN.md §2 steps 1-5). [`router`] is the HTTP edge: the
//! `POST /api/v1/push` endpoint, its header and body-size checks, reading the body; `POST /otlp/v1/metrics`
//! (the `otlp` module) translates OTLP metrics into the same push. [`Distributor::push`] is
//! the core: a tenant and a body through named stages (decode into a pooled per-request arena, HA dedupe,
//! validate, limit the ingestion rate, shard by token onto replica sets, forward one request per ingester and
//! decide each series by quorum). It does not store samples (the ingester does), resolve tenants (the server
//! layer does), own per-tenant limits (`heddle_limits` does) or maintain ring membership (it asks an
//! [`IngesterReplicas`], `heddle-ring`'s replica seam).

mod config;
mod distributor;
mod error;
mod ha_tracker;
mod http;
mod log_limiter;
mod metrics;
mod otlp;
mod outcome;

#[cfg(test)]
mod testutil;

pub use config::{DISTRIBUTOR_FLAGS, DistributorConfig};
#[doc(hidden)]
pub use distributor::bench;
pub use distributor::{Distributor, IngesterReplicas, RemoteWriteVersion};
pub use error::{InvalidEntry, InvalidSeries, PushError};
pub use ha_tracker::{
    Election, HA_TRACKER_FLAGS, HaDecision, HaKvStoreConfig, HaTracker, HaTrackerConfig, ha_tracker_router,
};
pub use http::router;
pub use outcome::{ForwardFailure, MAX_RESPONSE_BODY, PushOutcome, Rejection};
