//! Running a PromQL query for the HTTP API: the query's limits, a slot among the querier's concurrent queries,
//! one fetch per selection, and evaluation by `heddle_promql` off the async runtime.
//!
//! What a query may cost is bounded at each step, all inside one deadline (the smaller of `querier.timeout`
//! and the request's `timeout`): the tenant's `max_query_length` and `max_query_lookback` before anything is
//! read; the wait for a slot (`querier.max_concurrent`); the fetch limits of [`crate::limits`], one budget
//! for all selections of the query; and the engine's own sample limit (`querier.max_samples`) and deadline
//! while it evaluates.

use crate::error::QuerierError;
use crate::querier::{Querier, SeriesSamples};
use crate::select::timeout_error;
use futures::future::Either;
use futures::{StreamExt, TryStreamExt};
use heddle_model::TenantId;
use heddle_promql::{HistogramPoint, PromqlError, QueryOptions, QueryTime, Series, Stats, Value};
use std::sync::Arc;
use std::time::Duration;

/// A query's answer with what it cost.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) value: Value,
    pub(crate) stats: Stats,
    pub(crate) timings: Timings,
}

/// Where a query's time went, for Prometheus' `stats.timings`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Timings {
    /// Waiting for a query slot.
    pub(crate) queue: Duration,
    /// Fetching the selections.
    pub(crate) prepare: Duration,
    /// Evaluating over what was fetched.
    pub(crate) eval: Duration,
}

impl Querier {
    /// Runs `text` at `time` for `tenant`. `started` is when the request arrived (the timeout counts from
    /// there); `timeout` is the request's own, if it gave one; `now_ms` is the wall clock that
    /// `max_query_lookback` counts back from.
    pub(crate) async fn run_query(
        &self,
        tenant: &TenantId,
        text: &str,
        time: QueryTime,
        timeout: Option<Duration>,
        started: tokio::time::Instant,
        now_ms: i64,
    ) -> Result<Answer, QuerierError> {
        let cfg = self.config();
        let limits = self.overrides.get(tenant.as_str());
        let timeout = timeout.map_or(cfg.query_timeout, |t| t.min(cfg.query_timeout));
        let deadline = started + timeout;
        let timed_out = || timeout_error(tenant, timeout);

        if let QueryTime::Range { start, end, .. } = time {
            let max = limits.max_query_length;
            let length = Duration::from_millis(end.saturating_sub(start).max(0).unsigned_abs());
            if !max.is_zero() && length > max {
                self.metrics.refused_query(heddle_model::error_id::MAX_QUERY_LENGTH);
                return Err(QuerierError::MaxQueryLength {
                    tenant: tenant.to_string(),
                    length: heddle_config::format_duration(length),
                    limit: heddle_config::format_duration(max),
                });
            }
        }
        // Data older than the lookback limit is invisible: selections start no earlier than `min_t`.
        let min_t = match limits.max_query_lookback {
            d if d.is_zero() => i64::MIN,
            d => now_ms.saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        };
        let time = match time {
            // As Mimir, a range entirely before the limit has an empty answer.
            QueryTime::Range { end, .. } if end < min_t => {
                return Ok(Answer {
                    value: Value::Matrix(Vec::new()),
                    stats: Stats::default(),
                    timings: Timings::default(),
                });
            }
            // Mimir moves `start` to the limit; Heddle moves it to the first step at or after the limit, so
            // the steps answered are the ones asked for.
            QueryTime::Range { start, end, step } if start < min_t => {
                let start = start + (min_t - start + step - 1) / step * step;
                if start > end {
                    // No step of the range is after the limit.
                    return Ok(Answer {
                        value: Value::Matrix(Vec::new()),
                        stats: Stats::default(),
                        timings: Timings::default(),
                    });
                }
                QueryTime::Range { start, end, step }
            }
            other => other,
        };

        let opts = QueryOptions {
            lookback_delta_ms: i64::try_from(cfg.lookback_delta.as_millis()).unwrap_or(i64::MAX),
            max_samples: cfg.max_samples,
            deadline: Some(deadline.into_std()),
            ..QueryOptions::default()
        };
        let query = crate::promql_api::parse_query(self, text, time, &opts)
            .await
            .map_err(|e| match e {
                QuerierError::Promql(PromqlError::BadData(msg)) => {
                    QuerierError::Promql(PromqlError::BadData(format!("invalid parameter \"query\": {msg}")))
                }
                other => other,
            })?;

        let queued = tokio::time::Instant::now();
        // Owned, and moved into the evaluation: a client that leaves does not free its slot while its query
        // still evaluates.
        let slot = match tokio::time::timeout_at(deadline, Arc::clone(&self.query_slots).acquire_owned()).await {
            Ok(slot) => slot.map_err(|_| QuerierError::Internal("the query slots are closed".into()))?,
            Err(_) => return Err(timed_out()),
        };
        let fetching = tokio::time::Instant::now();
        let limiter = self.limiter(tenant);
        // Collected first: the futures are created now and polled by the stream a few at a time.
        let fetches: Vec<_> = query
            .selections()
            .iter()
            .map(|sel| {
                let start = sel.start.max(min_t);
                if start > sel.end {
                    Either::Left(futures::future::ready(Ok(Vec::new())))
                } else {
                    Either::Right(self.select_limited(&limiter, start, sel.end, &sel.matchers))
                }
            })
            .collect();
        // A few at a time: a query of thousands of selectors must not open thousands of streams at once.
        let fetching_all = futures::stream::iter(fetches)
            .buffered(MAX_CONCURRENT_SELECTIONS)
            .try_collect::<Vec<_>>();
        let fetched = match tokio::time::timeout_at(deadline, fetching_all).await {
            Ok(fetched) => fetched?,
            Err(_) => return Err(timed_out()),
        };
        let evaluating = tokio::time::Instant::now();
        // Evaluation, and converting the histograms for it (a copy of every bucket), is CPU work as long as
        // the query is big: off the runtime, bounded by the engine's deadline.
        let result = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let fetched: Vec<Vec<Series>> = fetched
                .into_iter()
                .map(|selection| selection.into_iter().map(series).collect())
                .collect();
            query.evaluate(fetched, &opts)
        })
        .await
        .map_err(|e| QuerierError::Internal(format!("query evaluation failed: {e}")))?;
        let (value, stats) = result.map_err(|e| match e {
            PromqlError::TooManySamples { limit } => {
                self.metrics.refused_query(heddle_model::error_id::MAX_QUERY_SAMPLES);
                QuerierError::TooManySamples {
                    tenant: tenant.to_string(),
                    limit,
                }
            }
            PromqlError::Timeout(_) => timed_out(),
            other => QuerierError::Promql(other),
        })?;
        self.metrics.samples_processed(stats.total_queryable_samples);
        let done = tokio::time::Instant::now();
        Ok(Answer {
            value,
            stats,
            timings: Timings {
                queue: fetching - queued,
                prepare: evaluating - fetching,
                eval: done - evaluating,
            },
        })
    }
}

/// Selections of one query fetched at once; the rest wait for one of them to finish.
const MAX_CONCURRENT_SELECTIONS: usize = 16;

/// A selected series as the engine takes it: floats, and histograms with float counts (integer ones converted,
/// as Prometheus' engine reads them).
fn series(s: SeriesSamples) -> Series {
    Series {
        labels: s.labels,
        samples: s.samples,
        histograms: s
            .histograms
            .into_iter()
            .map(|h| HistogramPoint::new(h.t, h.value.to_float()))
            .collect(),
    }
}
