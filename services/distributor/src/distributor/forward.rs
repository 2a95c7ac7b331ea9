//! Stage 6, forward: push each ingester's batch in parallel and decide each series by quorum (DESIGN.md §2
//! step 5).
//!
//! Each push runs in its own task with the remote timeout. The distributor answers as soon as every series has
//! a quorum of acknowledgements; pushes still running then finish in the background (as in Mimir), so a slow
//! replica still receives the write without delaying the sender. Otherwise it waits for every push (each
//! bounded by the timeout) and classifies the series that fell short:
//! - so many replicas refused the series (out-of-order, ...) that quorum is out of reach whatever the others
//!   do: a [`Rejection`] carrying the ingester's reason and message (400, not retried);
//! - otherwise (errors, timeouts, too few ingesters, perhaps mixed with refusals): a [`ForwardFailure`]
//!   (5xx, so the sender retries; a retry can reach quorum once the failing replicas are back).

use super::shard::Sharded;
use crate::log_limiter::LogLimiter;
use crate::metrics::{IngesterPushOutcome, Metrics};
use crate::outcome::{ForwardFailure, Rejection};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use heddle_config::format_duration;
use heddle_model::TenantId;
use heddle_model::error_id;
use heddle_proto::ingester::PushResponse;
use std::time::Duration;
use tracing::Instrument;

/// Most ingester errors quoted in a failure message.
const MAX_FAILURE_DETAILS: usize = 5;

/// One batch's result, as the quorum logic sees it.
enum BatchResult {
    Answered(PushResponse),
    Failed { unavailable: bool, detail: String },
}

/// What the ingesters made of the forwarded series.
#[derive(Debug, Default)]
pub(crate) struct Acked {
    /// Samples of series that a quorum of replicas acknowledged.
    pub(crate) samples_ingested: u64,
    /// Native histogram samples of series that a quorum of replicas acknowledged.
    pub(crate) histograms_ingested: u64,
    /// Exemplars of series that a quorum of replicas acknowledged.
    pub(crate) exemplars_ingested: u64,
    /// Series so many replicas refused that quorum is out of reach, with the first refusal's reason.
    pub(crate) rejections: Vec<Rejection>,
    /// Series that fell short of quorum for other reasons (the sender should retry).
    pub(crate) failure: Option<ForwardFailure>,
}

/// Pushes `sharded`'s batches for `tenant`, each within `timeout`, and decides each series by quorum.
pub(crate) async fn forward(
    tenant: &TenantId,
    sharded: Sharded,
    timeout: Duration,
    metrics: &Metrics,
    warn: &LogLimiter,
) -> Acked {
    let Sharded {
        series,
        batches,
        ring_error,
    } = sharded;
    let mut rejections = Vec::new();

    let mut acks = vec![0usize; series.len()];
    let mut refusals = vec![0usize; series.len()];
    // The first refusal of each series, sized on the first refusal (most requests have none).
    let mut refusal_msg: Vec<Option<Rejection>> = Vec::new();
    let mut succeeded = 0usize;
    let mut failures: Vec<String> = Vec::new();
    let mut all_unavailable = true;

    let mut batches = batches;
    // The series lists stay here for the quorum count; the push tasks need only the instance, client and body.
    let metas: Vec<(String, Vec<usize>)> = batches
        .iter_mut()
        .map(|b| (b.instance.clone(), std::mem::take(&mut b.series)))
        .collect();
    let mut pending: FuturesUnordered<_> = batches
        .into_iter()
        .enumerate()
        .map(|(i, b)| {
            let tenant = tenant.clone();
            let metrics = metrics.clone();
            // Measured inside the task, so pushes that finish after the answer (quorum reached) count too.
            let task = tokio::spawn(
                async move {
                    let started = std::time::Instant::now();
                    let result = tokio::time::timeout(timeout, b.body.push(b.client.as_ref(), &tenant)).await;
                    let outcome = match &result {
                        Ok(Ok(_)) => IngesterPushOutcome::Ok,
                        Ok(Err(_)) => IngesterPushOutcome::Error,
                        Err(_) => IngesterPushOutcome::Timeout,
                    };
                    metrics.ingester_push(&b.instance, outcome, started.elapsed());
                    result
                }
                .instrument(tracing::Span::current()),
            );
            async move { (i, task.await) }
        })
        .collect();

    while let Some((i, joined)) = pending.next().await {
        let (instance, batch_series) = &metas[i];
        let result = match joined {
            Ok(Ok(Ok(resp))) => BatchResult::Answered(resp),
            Ok(Ok(Err(status))) => BatchResult::Failed {
                unavailable: is_unavailable(status.code()),
                detail: format!("{instance}: {:?}: {}", status.code(), status.message()),
            },
            Ok(Err(_elapsed)) => BatchResult::Failed {
                unavailable: true,
                detail: format!("{instance}: no response within {}", format_duration(timeout)),
            },
            Err(join) => BatchResult::Failed {
                unavailable: false,
                detail: format!("{instance}: push task failed: {join}"),
            },
        };
        match result {
            BatchResult::Answered(resp) => {
                // Every replica of an entry applies the same limits: one rejection per distinct refusal.
                for e in resp.metadata_errors {
                    if !rejections.iter().any(|r: &Rejection| r.message == e.message) {
                        rejections.push(Rejection {
                            reason: e.reason,
                            message: e.message,
                        });
                    }
                }
                let mut refused = vec![false; batch_series.len()];
                for e in resp.errors {
                    let Some(&s) = batch_series.get(e.series_index as usize) else {
                        tracing::warn!(%instance, series_index = e.series_index, "ingester reported an error for a series it was not sent");
                        continue;
                    };
                    if !std::mem::replace(&mut refused[e.series_index as usize], true) {
                        refusals[s] += 1;
                        if refusal_msg.is_empty() {
                            refusal_msg.resize_with(series.len(), || None);
                        }
                        refusal_msg[s].get_or_insert(Rejection {
                            reason: e.reason,
                            message: e.message,
                        });
                    }
                }
                for (pos, &s) in batch_series.iter().enumerate() {
                    if !refused[pos] {
                        acks[s] += 1;
                        if acks[s] == series[s].min_success {
                            succeeded += 1;
                        }
                    }
                }
            }
            BatchResult::Failed { unavailable, detail } => {
                tracing::debug!(%detail, "push to ingester failed");
                all_unavailable &= unavailable;
                failures.push(detail);
            }
        }
        if succeeded == series.len() {
            break;
        }
    }
    drop(pending);

    let mut samples_ingested = 0u64;
    let mut exemplars_ingested = 0u64;
    let mut histograms_ingested = 0u64;
    let mut failed_series = 0usize;
    let mut failed_samples = 0u64;
    let mut short_of_replicas = None;
    let mut failed_quorum = None;
    for (s, f) in series.iter().enumerate() {
        if acks[s] >= f.min_success {
            samples_ingested += f.samples;
            exemplars_ingested += f.exemplars;
            histograms_ingested += f.histograms;
        } else if f.replicas >= f.min_success && refusals[s] + f.min_success > f.replicas {
            // So many replicas refused that no retry can reach quorum: the sender's problem.
            if let Some(r) = refusal_msg.get_mut(s).and_then(Option::take) {
                rejections.push(r);
            }
        } else {
            // Some replicas failed or were missing; a retry may reach quorum.
            failed_series += 1;
            failed_samples += f.samples + f.histograms;
            failed_quorum.get_or_insert((f.min_success, f.replicas));
            if f.replicas < f.min_success {
                short_of_replicas.get_or_insert((f.min_success, f.replicas));
            }
        }
    }

    let failure = failed_quorum.map(|(min_success, replicas)| {
        let mut details: Vec<String> = failures.iter().take(MAX_FAILURE_DETAILS).cloned().collect();
        if failures.len() > MAX_FAILURE_DETAILS {
            details.push(format!("and {} more", failures.len() - MAX_FAILURE_DETAILS));
        }
        if let Some((need, have)) = short_of_replicas {
            // The ring's own words (which instances are unhealthy) say more than the counts.
            let detail = match &ring_error {
                Some(e) => format!("no replica set: {e}"),
                None => format!("the ring has {have} healthy ingesters for a series that needs {need}"),
            };
            details.insert(0, detail);
        }
        let unavailable = all_unavailable;
        let id = if unavailable {
            error_id::INGESTERS_UNAVAILABLE
        } else {
            error_id::INGESTER_FAILED
        };
        let message = format!(
            "{id}: {failed_series} series ({failed_samples} samples) were not acknowledged by enough ingesters \
             (tenant={tenant}, needed {min_success} of {replicas} replicas): {}; the request can be retried",
            details.join("; ")
        );
        if let Some(suppressed) = warn.check(tokio::time::Instant::now()) {
            tracing::warn!(failed_series, failed_samples, suppressed, error = %message, "write failed to reach quorum");
        }
        ForwardFailure {
            series: failed_series,
            samples: failed_samples,
            unavailable,
            message,
        }
    });

    Acked {
        samples_ingested,
        histograms_ingested,
        exemplars_ingested,
        rejections,
        failure,
    }
}

/// gRPC codes that mean "try again later" rather than "something is broken".
fn is_unavailable(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::Unavailable
            | tonic::Code::DeadlineExceeded
            | tonic::Code::ResourceExhausted
            | tonic::Code::Cancelled
            | tonic::Code::Aborted
    )
}

#[cfg(test)]
mod tests;
