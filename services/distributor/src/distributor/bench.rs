//! The arena stages one at a time, for `benches/prepare.rs`: decode, validate and shard are crate-private
//! because [`Distributor::push`](super::Distributor::push) is the interface; this lets a benchmark time each of
//! them on its own. Not part of the crate's interface.

use super::{decode, shard, validate};
use crate::distributor::IngesterReplicas;
use crate::error::PushError;
use crate::log_limiter::LogLimiter;
use crate::metrics::Metrics;
use bumpalo::Bump;
use heddle_limits::Limits;
use heddle_model::TenantId;
use heddle_proto::TimeSeriesRef;
use heddle_server::{DiscardedSamples, InflightBytes};
use prometheus_client::registry::Registry;
use std::time::Duration;

/// One tenant's stages with default limits at a fixed wall-clock time.
#[derive(Debug)]
pub struct Stages {
    tenant: TenantId,
    limits: Limits,
    now_ms: i64,
    metrics: Metrics,
    warn: LogLimiter,
}

/// What validation kept of a request.
#[derive(Debug)]
pub struct Validated<'a>(validate::Validated<'a>);

impl Validated<'_> {
    /// Series accepted.
    pub fn accepted(&self) -> usize {
        self.0.accepted.len()
    }
}

/// What sharding made of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardSummary {
    /// Requests to ingesters.
    pub batches: usize,
    /// Series copies over all of them.
    pub copies: usize,
    /// Body bytes over all of them.
    pub bytes: usize,
}

impl Stages {
    /// Stages of `tenant` with default limits, validating timestamps against `now_ms`.
    pub fn new(tenant: TenantId, now_ms: i64) -> Self {
        let mut registry = Registry::default();
        let discarded = DiscardedSamples::register(&mut registry);
        Self {
            tenant,
            limits: Limits::default(),
            now_ms,
            metrics: Metrics::register(&mut registry, discarded),
            warn: LogLimiter::new(10, Duration::from_secs(1)),
        }
    }

    /// Stage 1: the snappy remote write 1.0 `body` decoded into `arena`, without an in-flight limit.
    pub fn decode<'a>(&self, arena: &'a Bump, body: &[u8]) -> Result<&'a [TimeSeriesRef<'a>], PushError> {
        self.decode_as(arena, body, super::RemoteWriteVersion::V1)
    }

    /// Stage 1 for a remote write 2.0 `body`.
    pub fn decode_v2<'a>(&self, arena: &'a Bump, body: &[u8]) -> Result<&'a [TimeSeriesRef<'a>], PushError> {
        self.decode_as(arena, body, super::RemoteWriteVersion::V2)
    }

    fn decode_as<'a>(
        &self,
        arena: &'a Bump,
        body: &[u8],
        version: super::RemoteWriteVersion,
    ) -> Result<&'a [TimeSeriesRef<'a>], PushError> {
        let budget = InflightBytes::new(0, Default::default(), Default::default());
        decode::decode(
            arena,
            body,
            decode::Framing::Snappy,
            version,
            usize::MAX,
            &mut budget.reserve(),
        )
        .map(|d| d.series)
    }

    /// Stage 3: validation of `series` (no HA replica label to drop).
    pub fn validate<'a>(&self, arena: &'a Bump, series: &'a [TimeSeriesRef<'a>]) -> Validated<'a> {
        let discards = validate::Discards {
            tenant: &self.tenant,
            metrics: &self.metrics,
            warn: &self.warn,
        };
        Validated(validate::validate(
            arena,
            &self.limits,
            series,
            None,
            self.limits.created_timestamp_zero_ingestion_enabled,
            self.now_ms,
            discards,
        ))
    }

    /// Stage 5: the accepted series sharded onto `ring`, one body per ingester.
    pub fn shard<'a>(&self, arena: &'a Bump, ring: &IngesterReplicas, valid: &Validated<'a>) -> ShardSummary {
        let sharded = shard::shard(arena, &self.tenant, ring, &valid.0.accepted, &[], valid.0.window);
        ShardSummary {
            batches: sharded.batches.len(),
            copies: sharded.batches.iter().map(|b| b.series.len()).sum(),
            bytes: sharded.batches.iter().map(|b| b.body.len()).sum(),
        }
    }
}
