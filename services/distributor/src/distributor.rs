//! The distributor's core: one remote-write request through the write path's stages, in order.
//!
//! [`Distributor::push`] runs DESIGN.md §2 steps 2-5 as named stages, each in its own module:
//! [`decode`] (snappy + arena decode), [`ha_dedupe`] (Prometheus HA pairs), [`validate`] (labels,
//! timestamps and exemplars), [`metadata`] (metric metadata), [`limit`] (ingestion rate), [`shard`] (token, replica set, one body per ingester) and
//! [`forward`] (fan-out and quorum). The first five run synchronously inside one pooled arena; what
//! [`shard`] returns owns its bytes, so the arena is back in the pool before the first network call.
//!
//! The core takes a tenant and a body. HTTP (headers, body size, reading the body) is [`crate::router`]'s.

#[doc(hidden)]
pub mod bench;
mod decode;
mod forward;
mod ha_dedupe;
mod limit;
mod metadata;
mod shard;
mod validate;

use crate::config::DistributorConfig;
use crate::error::PushError;
use crate::ha_tracker::HaTracker;
use crate::log_limiter::LogLimiter;
use crate::metrics::Metrics;
use crate::outcome::{PushOutcome, Rejection};
use bumpalo::Bump;
pub(crate) use decode::Framing;
use ha_dedupe::HaVerdict;
use heddle_limits::{Limits, Overrides};
use heddle_model::{Clock, SystemClock, TenantId};
use heddle_proto::{ArenaPool, IngesterClient};
use heddle_ring::Replicas;
use heddle_server::{DiscardedSamples, InflightBytes, Reservation};
use limit::IngestionRateLimiter;
use prometheus_client::registry::Registry;
use shard::Sharded;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use validate::Discards;

pub use decode::RemoteWriteVersion;

/// Where the distributor sends a series: `heddle-ring`'s replica seam over ingester clients (a fixed list of one
/// ingester in the single process, the ring in a cluster).
pub type IngesterReplicas = dyn Replicas<Arc<dyn IngesterClient>>;

/// Warning lines about discarded series let through per second; the rest are counted in the next line.
const WARN_LINES_PER_SECOND: u32 = 10;

/// The remote-write receiver. Share it behind an `Arc`; every method takes `&self`.
#[derive(Debug)]
pub struct Distributor {
    cfg: DistributorConfig,
    overrides: Arc<Overrides>,
    ha_tracker: Option<Arc<HaTracker>>,
    ring: Arc<IngesterReplicas>,
    arenas: ArenaPool,
    inflight: Arc<InflightBytes>,
    rate_limiter: IngestionRateLimiter,
    warn_limiter: LogLimiter,
    metrics: Metrics,
    clock: Arc<dyn Clock>,
}

/// What the arena stages leave for [`forward`]: owned, nothing borrowed from the request.
#[derive(Debug, Default)]
struct Prepared {
    series_received: usize,
    /// The request came from a non-elected HA replica and was dropped: the 202 message.
    deduplicated: Option<String>,
    /// Series (or some of their samples) refused by validation.
    rejections: Vec<Rejection>,
    sharded: Sharded,
}

impl Distributor {
    /// A distributor that registers its metrics, including `heddle_discarded_samples_total`, on `registry`.
    /// In a process that also runs an ingester, use [`Distributor::with_discarded_samples`] so that family is
    /// registered once. `cfg` and `limits` should have passed `validate()`.
    pub fn new(cfg: DistributorConfig, limits: Limits, ring: Arc<IngesterReplicas>, registry: &mut Registry) -> Self {
        let discarded = DiscardedSamples::register(registry);
        Self::with_discarded_samples(cfg, limits, ring, registry, discarded)
    }

    /// Like [`Distributor::new`], counting discards in an already-registered family shared with other roles.
    pub fn with_discarded_samples(
        cfg: DistributorConfig,
        limits: Limits,
        ring: Arc<IngesterReplicas>,
        registry: &mut Registry,
        discarded: DiscardedSamples,
    ) -> Self {
        let ha_tracker = cfg.ha_tracker.enable_ha_tracker.then(|| {
            Arc::new(HaTracker::new(&cfg.ha_tracker, registry).with_tenant_metrics(discarded.tenant_metrics()))
        });
        let metrics = Metrics::register(registry, discarded);
        Self {
            rate_limiter: IngestionRateLimiter::new(),
            ha_tracker,
            warn_limiter: LogLimiter::new(WARN_LINES_PER_SECOND, Duration::from_secs(1)),
            inflight: InflightBytes::new(
                cfg.instance_limits.max_inflight_push_requests_bytes,
                metrics.inflight_push_bytes.clone(),
                metrics.inflight_push_bytes_refused.clone(),
            ),
            metrics,
            arenas: ArenaPool::default(),
            clock: Arc::new(SystemClock),
            cfg,
            overrides: Arc::new(Overrides::new(limits)),
            ring,
        }
    }

    /// Reads per-tenant limits from `overrides` (shared with the runtime config reloader) instead of giving
    /// every tenant the `limits` passed to the constructor.
    pub fn with_overrides(mut self, overrides: Arc<Overrides>) -> Self {
        self.overrides = overrides;
        self
    }

    /// Replaces the wall clock (tests). Monotonic time (latency, rate-limit refill) is tokio's.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The HA tracker, when `distributor.ha_tracker.enable_ha_tracker` is set: share its elections with
    /// [`HaTracker::run_sync`], show them with [`crate::ha_tracker_router`].
    pub fn ha_tracker(&self) -> Option<&Arc<HaTracker>> {
        self.ha_tracker.as_ref()
    }

    /// The wall clock in use.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The configuration in use.
    pub fn config(&self) -> &DistributorConfig {
        &self.cfg
    }

    /// The budget of bytes in-flight push requests hold (`distributor.instance_limits`): the HTTP layer
    /// reserves a body in it as the body arrives.
    pub fn inflight(&self) -> &Arc<InflightBytes> {
        &self.inflight
    }

    /// Handles one remote-write request of `tenant`: `body` is a snappy-compressed remote write 1.0
    /// `WriteRequest` whose size and headers the caller (the HTTP layer) already checked. The body is reserved
    /// in the in-flight budget first; see [`Distributor::push_reserved`].
    pub async fn push(&self, tenant: &TenantId, body: &[u8]) -> Result<PushOutcome, PushError> {
        self.push_version(tenant, RemoteWriteVersion::V1, body).await
    }

    /// [`Distributor::push`] for a body of either remote write version.
    pub async fn push_version(
        &self,
        tenant: &TenantId,
        version: RemoteWriteVersion,
        body: &[u8],
    ) -> Result<PushOutcome, PushError> {
        let mut reservation = self.inflight.reserve();
        if let Err(refused) = reservation.grow(body.len()) {
            let e = PushError::from(refused);
            self.record_early_refusal(&e, Instant::now());
            return Err(e);
        }
        self.push_reserved(tenant, version, body, reservation).await
    }

    /// [`Distributor::push_version`] for a body already held by `reservation`. The decompressed copy and the decoded
    /// view are added to it before they are allocated, and everything is given back when the request ends.
    ///
    /// `Err` refuses the whole request and nothing was forwarded. `Ok` means it was decoded and its valid
    /// series forwarded; [`PushOutcome::status`] says how that went (200, 400 for refused series, 5xx when
    /// some series did not reach quorum).
    #[tracing::instrument(skip_all, fields(tenant = %tenant))]
    pub async fn push_reserved(
        &self,
        tenant: &TenantId,
        version: RemoteWriteVersion,
        body: &[u8],
        reservation: Reservation,
    ) -> Result<PushOutcome, PushError> {
        self.push_framed(tenant, version, body, Framing::Snappy, reservation)
            .await
    }

    /// [`Distributor::push_reserved`] for a body in either [`Framing`]: the OTLP endpoint hands its
    /// translation over as plain protobuf, so it goes through the same stages without a snappy round trip.
    pub(crate) async fn push_framed(
        &self,
        tenant: &TenantId,
        version: RemoteWriteVersion,
        body: &[u8],
        framing: Framing,
        mut reservation: Reservation,
    ) -> Result<PushOutcome, PushError> {
        let start = Instant::now();
        self.metrics.received_bytes(body.len());
        let result = self.run(tenant, version, body, framing, &mut reservation).await;
        drop(reservation);
        let status = match &result {
            Ok(outcome) => outcome.status(),
            Err(e) => e.status(),
        };
        self.metrics.request(status, start.elapsed());
        if let Err(e) = &result {
            tracing::debug!(error = %e, status = status.as_u16(), "push refused");
        }
        result
    }

    /// The pipeline: the arena stages, then forward.
    async fn run(
        &self,
        tenant: &TenantId,
        version: RemoteWriteVersion,
        body: &[u8],
        framing: Framing,
        reservation: &mut Reservation,
    ) -> Result<PushOutcome, PushError> {
        let prepared = self.prepare(tenant, version, body, framing, reservation);
        // The arena is back in the pool (or freed) once `prepare` returns, whatever it returned.
        self.metrics
            .arena_retained_bytes
            .set(i64::try_from(self.arenas.retained_bytes()).unwrap_or(i64::MAX));
        let Prepared {
            series_received,
            deduplicated,
            mut rejections,
            sharded,
        } = prepared?;
        if deduplicated.is_some() {
            return Ok(PushOutcome {
                series_received,
                deduplicated,
                ..PushOutcome::default()
            });
        }
        let acked = forward::forward(
            tenant,
            sharded,
            self.cfg.remote_timeout,
            &self.metrics,
            &self.warn_limiter,
        )
        .await;
        rejections.extend(acked.rejections);
        Ok(PushOutcome {
            series_received,
            deduplicated: None,
            samples_ingested: acked.samples_ingested,
            histograms_ingested: acked.histograms_ingested,
            exemplars_ingested: acked.exemplars_ingested,
            rejections,
            failure: acked.failure,
        })
    }

    /// Decode, HA dedupe, validate, limit and shard, inside one pooled arena.
    fn prepare(
        &self,
        tenant: &TenantId,
        version: RemoteWriteVersion,
        body: &[u8],
        framing: Framing,
        reservation: &mut Reservation,
    ) -> Result<Prepared, PushError> {
        let arena = self.arenas.get();
        let arena: &Bump = &arena;
        let decode::Decoded { series, metadata } = decode::decode(
            arena,
            body,
            framing,
            version,
            self.cfg.max_decompressed_size,
            reservation,
        )?;
        let limits = self.overrides.get(tenant.as_str());
        let now_ms = self.clock.now_ms();
        let discarded = &self.metrics.discarded;
        let drop_label =
            match ha_dedupe::dedupe(self.ha_tracker.as_deref(), tenant, &limits, series, now_ms, discarded)? {
                HaVerdict::Ingest { drop_label } => drop_label,
                HaVerdict::Deduplicated(message) => {
                    return Ok(Prepared {
                        series_received: series.len(),
                        deduplicated: Some(message),
                        ..Prepared::default()
                    });
                }
            };
        let discards = Discards {
            tenant,
            metrics: &self.metrics,
            warn: &self.warn_limiter,
        };
        let mut rejections = Vec::new();
        let received = series.len();
        // A plain body is the OTLP translation, which carries start times only for a tenant that wants them.
        let keep_created = framing == Framing::Plain || limits.created_timestamp_zero_ingestion_enabled;
        let mut valid = validate::validate(arena, &limits, series, drop_label, keep_created, now_ms, discards);
        rejections.append(&mut valid.rejections);
        let metadata = metadata::validate(&limits, metadata, discards, &mut rejections);
        limit::admit(
            &self.rate_limiter,
            tenant,
            &limits,
            valid.samples,
            Instant::now(),
            discarded,
        )?;
        self.metrics.received_samples(tenant.as_str(), valid.samples);
        self.metrics.received_exemplars(tenant.as_str(), valid.exemplars);
        self.metrics.received_metadata(tenant.as_str(), metadata.len() as u64);
        let sharded = shard::shard(arena, tenant, &*self.ring, &valid.accepted, &metadata, valid.window);
        Ok(Prepared {
            series_received: received,
            deduplicated: None,
            rejections,
            sharded,
        })
    }

    /// The limits in force for `tenant` (the runtime config's overrides over the defaults).
    pub(crate) fn limits(&self, tenant: &TenantId) -> Arc<Limits> {
        self.overrides.get(tenant.as_str())
    }

    /// Records a request refused before [`Distributor::push`] was reached (by the HTTP layer), `start` being
    /// when the HTTP layer began handling it.
    pub(crate) fn record_early_refusal(&self, e: &PushError, start: Instant) {
        tracing::debug!(error = %e, status = e.status().as_u16(), "push refused");
        self.metrics.request(e.status(), start.elapsed());
    }

    /// Records a request answered without reaching [`Distributor::push`] though not refused: an OTLP request
    /// none of whose points translated to a sample.
    pub(crate) fn record_answered_early(&self, status: http::StatusCode, start: Instant) {
        self.metrics.request(status, start.elapsed());
    }
}

#[cfg(test)]
mod corpus_tests;
#[cfg(test)]
mod created_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
pub(crate) mod tests;
