//! Running a PromQL query for the HTTP API: the query's limits, a slot among the querier's concurrent queries,
//! one fetch per selection, and evaluation by `heddle_promql` off the async runtime.
//!
//! What a query may cost is bounded at each step, all inside one deadline (the smaller of `querier.timeout`
//! and the request's `timeout`): the tenant's `max_query_length` and `max_query_lookback` before anything is
//! read; the wait for a slot (`querier.max_concurrent`); the fetch limits of [`crate::limits`], one budget
//! for all selections of the query; and the engine's own sample limit (`querier.max_samples`) and deadline
//! while it evaluates, which it checks inside its loops. The answer comes at the deadline; the evaluation, on a
//! blocking thread with the query's slot, stops at its next check (microseconds later) and frees the slot. A
//! request dropped before its answer (the client went away) cancels its evaluation the same way.

use crate::error::QuerierError;
use crate::querier::{Querier, SeriesSamples};
use crate::select::timeout_error;
use futures::future::Either;
use futures::{StreamExt, TryStreamExt};
use heddle_model::TenantId;
use heddle_promql::{HistogramPoint, PromqlError, QueryOptions, QueryTime, Series, Stats, Value};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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
                match first_step_at_or_after(start, step, min_t) {
                    Some(start) if start <= end => QueryTime::Range { start, end, step },
                    // No step of the range is after the limit.
                    _ => {
                        return Ok(Answer {
                            value: Value::Matrix(Vec::new()),
                            stats: Stats::default(),
                            timings: Timings::default(),
                        });
                    }
                }
            }
            other => other,
        };

        // Set when this future ends or is dropped (its client went away): an evaluation still running stops at
        // its next check and frees its slot.
        let cancel = Arc::new(AtomicBool::new(false));
        let _cancel_on_drop = CancelOnDrop(Arc::clone(&cancel));
        let opts = QueryOptions {
            lookback_delta_ms: i64::try_from(cfg.lookback_delta.as_millis()).unwrap_or(i64::MAX),
            max_samples: cfg.max_samples,
            deadline: Some(deadline.into_std()),
            cancel: Some(cancel),
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
        // the query is big: off the runtime, bounded by the engine's deadline. Answered at the deadline however
        // far the evaluation got; the slot is held until it stops.
        let evaluation = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let fetched: Vec<Vec<Series>> = fetched
                .into_iter()
                .map(|selection| selection.into_iter().map(series).collect())
                .collect();
            query.evaluate(fetched, &opts)
        });
        let result = match tokio::time::timeout_at(deadline, evaluation).await {
            Ok(joined) => joined.map_err(|e| QuerierError::Internal(format!("query evaluation failed: {e}")))?,
            Err(_) => return Err(timed_out()),
        };
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

/// Sets its flag when dropped: a query's evaluation is canceled once its request is over, answered or not.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The first of the steps `start`, `start + step`, ... at or after `t` (> `start`), if it is a time: the
/// distance is taken in 128 bits, as `t - start` can pass i64 between the extreme times a request may give.
fn first_step_at_or_after(start: i64, step: i64, t: i64) -> Option<i64> {
    let step = i128::from(step.max(1));
    let steps = (i128::from(t) - i128::from(start) + step - 1) / step;
    i64::try_from(i128::from(start) + steps * step).ok()
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::QuerierConfig;
    use heddle_ring::FixedReplicas;
    use prometheus_client::registry::Registry;

    /// A querier without ingesters: the queries below select nothing, all their work is evaluation.
    fn querier(max_concurrent: usize) -> Arc<Querier> {
        let cfg = QuerierConfig {
            max_concurrent,
            ..Default::default()
        };
        let no_ingesters: Vec<(String, Arc<dyn heddle_proto::IngesterClient>)> = Vec::new();
        Arc::new(Querier::new(
            cfg,
            Arc::new(FixedReplicas::new(no_ingesters)),
            &mut Registry::default(),
        ))
    }

    /// Minutes of evaluation (hours in a debug build) in little memory: 11,000 windows of 36,000 values in
    /// no order, each sorted.
    const HEAVY: &str = "quantile_over_time(0.5, sin(vector(time()))[30m:50ms])";
    const HEAVY_TIME: QueryTime = QueryTime::Range {
        start: 1_700_000_000_000,
        end: 1_700_000_000_000 + 10_999 * 1000,
        step: 1000,
    };

    fn tenant() -> TenantId {
        TenantId::new("team-a").unwrap()
    }

    /// A cheap query with `timeout`: it needs the one slot, so it is answered only if the slot is free within
    /// that time.
    async fn cheap(q: &Querier, timeout: Duration) -> Result<Answer, QuerierError> {
        let now = tokio::time::Instant::now();
        q.run_query(&tenant(), "1", QueryTime::Instant(0), Some(timeout), now, 0)
            .await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_query_past_its_deadline_answers_timeout_and_frees_its_slot() {
        let q = querier(1);
        let started = tokio::time::Instant::now();
        let err = q
            .run_query(
                &tenant(),
                HEAVY,
                HEAVY_TIME,
                Some(Duration::from_millis(300)),
                started,
                0,
            )
            .await
            .unwrap_err();
        assert!(matches!(err, QuerierError::Timeout { .. }), "{err}");
        assert_eq!((err.status().as_u16(), err.error_type()), (503, "timeout"));
        assert!(
            err.to_string()
                .starts_with("err-heddle-query-timeout: query timed out after 300ms"),
            "{err}"
        );
        // Without checks inside its loops the evaluation would keep the only slot for minutes.
        let answer = cheap(&q, Duration::from_secs(20)).await;
        assert!(answer.is_ok(), "the slot is free again: {answer:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_dropped_while_it_evaluates_cancels_the_evaluation() {
        let q = querier(1);
        let heavy = {
            let q = Arc::clone(&q);
            tokio::spawn(async move {
                let now = tokio::time::Instant::now();
                q.run_query(&tenant(), HEAVY, HEAVY_TIME, None, now, 0).await
            })
        };
        // Bounded: the query takes the slot as soon as it is parsed.
        for _ in 0..2000 {
            if q.query_slots.available_permits() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(q.query_slots.available_permits(), 0, "the heavy query holds the slot");
        // As the HTTP server drops a request whose client went away.
        heavy.abort();
        assert!(heavy.await.unwrap_err().is_cancelled());
        // Its evaluation (two minutes of timeout left) stops at its next check and frees the slot.
        let answer = cheap(&q, Duration::from_secs(20)).await;
        assert!(answer.is_ok(), "the slot is free again: {answer:?}");
    }

    #[test]
    fn the_first_step_after_the_lookback_limit_is_found_at_the_edges_of_time() {
        let cases = [
            ("inside", 1000, 15, 1010, Some(1015)),
            ("on a step", 1000, 15, 1030, Some(1030)),
            ("the extreme distance", i64::MIN, 1, i64::MAX, Some(i64::MAX)),
            ("past i64", i64::MIN, i64::MAX, i64::MAX, None),
            ("a huge step", -10, i64::MAX, 0, Some(i64::MAX - 10)),
        ];
        for (name, start, step, t, want) in cases {
            assert_eq!(first_step_at_or_after(start, step, t), want, "{name}");
        }
    }
}
