//! The fetch limits of one request: series, chunks, chunk bytes and samples, counted while the sources
//! stream, not after the answer is gathered.
//!
//! One [`QueryLimiter`] serves a whole request, so the queries of a remote-read request share one budget: a
//! request of fifty copies of a selector over every series stops at the limit instead of fetching fifty
//! times. What is counted where:
//!
//! - **series**: each series the merge yields (once per query, however many replicas held it), and, for a
//!   bucket block, its matching series before any of its chunks are read (a block that alone would pass the
//!   limit is never read);
//! - **chunks and chunk bytes**: each chunk as a source hands it over (an ingester stream message, or a block
//!   before its chunks are read), replicas included, since that is what was fetched; for a bucket block the
//!   bytes are those its coalesced chunk reads will fetch, gaps between neighbouring chunks included;
//! - **samples**: each sample of a series after the replica merge, as before, but per request.
//!
//! Limits are per tenant (`heddle_limits::Limits`), except the sample limit, which is the querier's.

use crate::error::{FetchLimit, QuerierError};
use crate::metrics::Metrics;
use heddle_limits::Limits;
use heddle_model::TenantId;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The fetch budget of one request. Shared by reference between the request's queries and the bucket
/// reads running on blocking threads.
#[derive(Debug)]
pub(crate) struct QueryLimiter {
    tenant: TenantId,
    max: [usize; 4],
    fetched: [AtomicUsize; 4],
    metrics: Metrics,
}

impl QueryLimiter {
    /// The budget of one request of `tenant` under `limits` and the querier's `max_samples`.
    pub(crate) fn new(tenant: &TenantId, limits: &Limits, max_samples: usize, metrics: Metrics) -> Self {
        let mut max = [0; 4];
        max[FetchLimit::Series as usize] = limits.max_fetched_series_per_query;
        max[FetchLimit::Chunks as usize] = limits.max_fetched_chunks_per_query;
        max[FetchLimit::ChunkBytes as usize] = limits.max_fetched_chunk_bytes_per_query;
        max[FetchLimit::Samples as usize] = max_samples;
        Self {
            tenant: tenant.clone(),
            max,
            fetched: Default::default(),
            metrics,
        }
    }

    /// Counts `n` more of `what`, failing (and counting the refusal) once the total passes its limit. The
    /// count stays past the limit, so every later step of the request fails too.
    pub(crate) fn add(&self, what: FetchLimit, n: usize) -> Result<(), QuerierError> {
        if n == 0 {
            return Ok(());
        }
        let total = self.fetched[what as usize]
            .fetch_add(n, Ordering::Relaxed)
            .saturating_add(n);
        self.within_limit(what, total)
    }

    /// Fails, without counting, when `n` more of `what` would pass the limit: a check before a bulk read
    /// whose items are counted again as they are merged.
    pub(crate) fn check_room(&self, what: FetchLimit, n: usize) -> Result<(), QuerierError> {
        let total = self.fetched[what as usize].load(Ordering::Relaxed).saturating_add(n);
        self.within_limit(what, total)
    }

    /// `Ok` when `total` of `what` is within its limit (0 = unlimited); else the refusal, counted.
    fn within_limit(&self, what: FetchLimit, total: usize) -> Result<(), QuerierError> {
        let limit = self.max[what as usize];
        if limit > 0 && total > limit {
            self.metrics.refused_query(what.id());
            return Err(QuerierError::LimitExceeded {
                what,
                tenant: self.tenant.to_string(),
                fetched: total,
                limit,
            });
        }
        Ok(())
    }

    /// How many of `what` the request fetched so far.
    #[cfg(test)]
    pub(crate) fn fetched(&self, what: FetchLimit) -> usize {
        self.fetched[what as usize].load(Ordering::Relaxed)
    }

    /// The request's tenant.
    pub(crate) fn tenant(&self) -> &TenantId {
        &self.tenant
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::registry::Registry;

    #[test]
    fn each_limit_fails_past_its_value_and_names_its_flag() {
        let mut registry = Registry::default();
        let limits = Limits {
            max_fetched_series_per_query: 10,
            max_fetched_chunks_per_query: 20,
            max_fetched_chunk_bytes_per_query: 30,
            ..Limits::default()
        };
        let t = TenantId::new("team-a").unwrap();
        let l = QueryLimiter::new(&t, &limits, 40, Metrics::new(&mut registry));
        let cases = [
            (
                FetchLimit::Series,
                10,
                "err-heddle-max-series-per-query",
                "--querier.max-fetched-series-per-query",
            ),
            (
                FetchLimit::Chunks,
                20,
                "err-heddle-max-chunks-per-query",
                "--querier.max-fetched-chunks-per-query",
            ),
            (
                FetchLimit::ChunkBytes,
                30,
                "err-heddle-max-chunks-bytes-per-query",
                "--querier.max-fetched-chunk-bytes-per-query",
            ),
            (
                FetchLimit::Samples,
                40,
                "err-heddle-max-samples-per-query",
                "--querier.max-samples-per-query",
            ),
        ];
        for (what, limit, id, flag) in cases {
            l.add(what, limit)
                .unwrap_or_else(|e| panic!("{id}: at the limit is fine: {e}"));
            l.check_room(what, 1).unwrap_err();
            let err = l.add(what, 1).unwrap_err();
            let msg = err.to_string();
            assert_eq!(err.status().as_u16(), 422, "{id}");
            assert!(msg.starts_with(id), "{msg}");
            assert!(
                msg.contains(&format!("the limit is {limit}")) && msg.contains(flag),
                "{msg}"
            );
            assert!(msg.contains("tenant=team-a"), "{msg}");
            assert_eq!(l.fetched(what), limit + 1);
        }
        let text = heddle_server_free_exposition(&registry);
        assert!(
            text.contains(r#"heddle_querier_refused_queries_total{reason="err-heddle-max-series-per-query"} 2"#),
            "{text}"
        );
    }

    #[test]
    fn zero_is_no_limit() {
        let mut registry = Registry::default();
        let limits = Limits {
            max_fetched_series_per_query: 0,
            max_fetched_chunks_per_query: 0,
            max_fetched_chunk_bytes_per_query: 0,
            ..Limits::default()
        };
        let l = QueryLimiter::new(&TenantId::anonymous(), &limits, 0, Metrics::new(&mut registry));
        for what in [
            FetchLimit::Series,
            FetchLimit::Chunks,
            FetchLimit::ChunkBytes,
            FetchLimit::Samples,
        ] {
            l.add(what, usize::MAX / 2).unwrap();
        }
    }

    fn heddle_server_free_exposition(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
        out
    }
}
