//! The distributor: receives a remote-write body, validates and limits it, shards it and forwards it.
//!
//! [`Distributor::push`] runs DESIGN.md §2 steps 1-5. Decoding, validation and sharding happen synchronously
//! inside one pooled arena ([`prepare`]); the per-ingester bodies it produces are owned bytes, so the arena is
//! back in the pool before the first network call ([`forward`]).

mod forward;
mod prepare;

use crate::clock::{Clock, SystemClock};
use crate::config::DistributorConfig;
use crate::error::PushError;
use crate::ha_tracker::HaTracker;
use crate::metrics::Metrics;
use crate::outcome::PushOutcome;
use crate::rate_limit::{IngestionRateLimiter, LogLimiter};
use crate::ring::IngesterRing;
use axum::http::{HeaderMap, header};
use heddle_limits::{Limits, Overrides};
use heddle_model::TenantId;
use heddle_proto::ArenaPool;
use heddle_server::DiscardedSamples;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Duration;

/// Warning lines about discarded series let through per second; the rest are counted in the next line.
const WARN_LINES_PER_SECOND: u32 = 10;

/// The remote-write receiver. Share it behind an `Arc`; every method takes `&self`.
#[derive(Debug)]
pub struct Distributor {
    cfg: DistributorConfig,
    overrides: Arc<Overrides>,
    ha_tracker: Option<Arc<HaTracker>>,
    ring: Arc<dyn IngesterRing>,
    arenas: ArenaPool,
    rate_limiter: IngestionRateLimiter,
    warn_limiter: LogLimiter,
    metrics: Metrics,
    clock: Arc<dyn Clock>,
}

impl Distributor {
    /// A distributor that registers its metrics, including `heddle_discarded_samples_total`, on `registry`.
    /// In a process that also runs an ingester, use [`Distributor::with_discarded_samples`] so that family is
    /// registered once. `cfg` and `limits` should have passed `validate()`.
    pub fn new(cfg: DistributorConfig, limits: Limits, ring: Arc<dyn IngesterRing>, registry: &mut Registry) -> Self {
        let discarded = DiscardedSamples::register(registry);
        Self::with_discarded_samples(cfg, limits, ring, registry, discarded)
    }

    /// Like [`Distributor::new`], counting discards in an already-registered family shared with other roles.
    pub fn with_discarded_samples(
        cfg: DistributorConfig,
        limits: Limits,
        ring: Arc<dyn IngesterRing>,
        registry: &mut Registry,
        discarded: DiscardedSamples,
    ) -> Self {
        let ha_tracker = cfg
            .ha_tracker
            .enable_ha_tracker
            .then(|| Arc::new(HaTracker::new(&cfg.ha_tracker, registry)));
        Self {
            rate_limiter: IngestionRateLimiter::new(),
            ha_tracker,
            warn_limiter: LogLimiter::new(WARN_LINES_PER_SECOND, Duration::from_secs(1)),
            metrics: Metrics::register(registry, discarded),
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

    /// Replaces the clock (tests).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The HA tracker, when `distributor.ha_tracker.enable_ha_tracker` is set: share its elections with
    /// [`HaTracker::run_sync`], show them with [`crate::ha_tracker_router`].
    pub fn ha_tracker(&self) -> Option<&Arc<HaTracker>> {
        self.ha_tracker.as_ref()
    }

    /// The clock in use.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The configuration in use.
    pub fn config(&self) -> &DistributorConfig {
        &self.cfg
    }

    /// Handles one remote-write request. `body` is the snappy-compressed `WriteRequest`; `headers` are the
    /// request's (Content-Encoding, Content-Type and Content-Length are checked).
    ///
    /// `Err` refuses the whole request and nothing was forwarded. `Ok` means it was decoded and its valid
    /// series forwarded; [`PushOutcome::status`] says how that went (200, 400 for refused series, 5xx when
    /// some series did not reach quorum).
    #[tracing::instrument(skip_all, fields(tenant = %tenant))]
    pub async fn push(&self, tenant: &TenantId, body: &[u8], headers: &HeaderMap) -> Result<PushOutcome, PushError> {
        let start = self.clock.instant();
        self.metrics.received_bytes(body.len());
        let result = self.push_inner(tenant, body, headers).await;
        let status = match &result {
            Ok(outcome) => outcome.status(),
            Err(e) => e.status(),
        };
        self.metrics
            .request(status, self.clock.instant().saturating_duration_since(start));
        if let Err(e) = &result {
            tracing::debug!(error = %e, status = status.as_u16(), "push refused");
        }
        result
    }

    async fn push_inner(&self, tenant: &TenantId, body: &[u8], headers: &HeaderMap) -> Result<PushOutcome, PushError> {
        check_headers(headers, &self.cfg)?;
        if body.len() > self.cfg.max_recv_msg_size {
            return Err(PushError::BodyTooLarge {
                size: body.len() as u64,
                limit: self.cfg.max_recv_msg_size,
            });
        }
        let prepared = self.prepare(tenant, body);
        // The arena is back in the pool (or freed) once `prepare` returns, whatever it returned.
        self.metrics
            .arena_retained_bytes
            .set(i64::try_from(self.arenas.retained_bytes()).unwrap_or(i64::MAX));
        Ok(self.forward(tenant, prepared?).await)
    }

    /// Monotonic now, from the distributor's clock.
    pub(crate) fn instant(&self) -> tokio::time::Instant {
        self.clock.instant()
    }

    /// Records a request refused before [`Distributor::push`] was reached (by the HTTP layer).
    pub(crate) fn record_early_refusal(&self, e: &PushError, start: tokio::time::Instant) {
        tracing::debug!(error = %e, status = e.status().as_u16(), "push refused");
        self.metrics
            .request(e.status(), self.clock.instant().saturating_duration_since(start));
    }
}

/// Checks the headers that can refuse a request before its body is read: Content-Length against
/// `max_recv_msg_size` (413), Content-Encoding (snappy or absent, else 415), Content-Type
/// (`application/x-protobuf` or absent, else 415).
pub(crate) fn check_headers(headers: &HeaderMap, cfg: &DistributorConfig) -> Result<(), PushError> {
    if let Some(len) = headers.get(header::CONTENT_LENGTH)
        && let Some(len) = len.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok())
        && len > cfg.max_recv_msg_size as u64
    {
        return Err(PushError::BodyTooLarge {
            size: len,
            limit: cfg.max_recv_msg_size,
        });
    }
    if let Some(enc) = headers.get(header::CONTENT_ENCODING) {
        let text = enc.to_str().unwrap_or("<not ascii>").trim();
        if !text.eq_ignore_ascii_case("snappy") {
            return Err(PushError::UnsupportedContentEncoding {
                encoding: text.to_owned(),
            });
        }
    }
    if let Some(ct) = headers.get(header::CONTENT_TYPE) {
        let text = ct.to_str().unwrap_or("<not ascii>");
        if !is_remote_write_v1(text) {
            return Err(PushError::UnsupportedContentType {
                content_type: text.to_owned(),
            });
        }
    }
    Ok(())
}

/// `application/x-protobuf`, parameters ignored except `proto=`: remote write 2.0 sends
/// `proto=io.prometheus.write.v2.Request`, which must get 415 (the 2.0 spec says so, and the sender then
/// falls back to 1.0) rather than be misread as a 1.0 body.
fn is_remote_write_v1(content_type: &str) -> bool {
    let mut parts = content_type.split(';');
    let media = parts.next().unwrap_or("").trim();
    if !media.eq_ignore_ascii_case("application/x-protobuf") {
        return false;
    }
    parts.all(|param| match param.split_once('=') {
        Some((k, v)) if k.trim().eq_ignore_ascii_case("proto") => {
            v.trim().trim_matches('"') == "prometheus.WriteRequest"
        }
        _ => true,
    })
}

#[cfg(test)]
mod corpus_tests;
#[cfg(test)]
mod limits_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
