//! The push path: raw `WriteRequest` bytes -> request arena -> limits -> tenant head.
//!
//! Order of checks, cheapest first: instance limits (in-flight, rate, tenants) before the body is decoded,
//! then per series: samples outside the head's accepted range (out of bounds), then whether the series
//! exists and, if not, whether the tenant's series limits let the push create it. Series that pass go to the
//! head in one batch; the refused ones are reported per series and the rest of the push is still ingested.

use crate::error::IngesterError;
use crate::ingester::Ingester;
use crate::limits::{IngesterLimits, SeriesAdmission};
use crate::metrics::Metrics;
use bumpalo::Bump;
use bytes::Bytes;
use heddle_model::{LabelRef, Labels, Sample, TenantId};
use heddle_proto::ingester::{PushResponse, SeriesError};
use heddle_proto::{ArenaPool, decode_write_request};
use heddle_server::DiscardedSamples;
use heddle_tsdb::{AppendErrorKind, AppendOutcome, AppendSeries, Head};

/// How far behind the tenant's newest sample a sample may be: half the 2 h block range, Prometheus' head
/// appendable window (`head.MaxTime - chunkRange/2`).
pub(crate) const OUT_OF_BOUNDS_WINDOW_MS: i64 = 60 * 60 * 1000;

pub(crate) const REASON_OUT_OF_BOUNDS: &str = "err-heddle-sample-out-of-bounds";
pub(crate) const REASON_MAX_SERIES_PER_USER: &str = "err-heddle-max-series-per-user";
pub(crate) const REASON_MAX_SERIES_PER_METRIC: &str = "err-heddle-max-series-per-metric";

/// What the limit checks made of a request before the head saw it.
struct Filtered<'a> {
    batch: Vec<AppendSeries<'a>>,
    /// Request index of each batch entry.
    origin: Vec<usize>,
    errors: Vec<SeriesError>,
    /// Discarded samples by reason, for the metric.
    discarded: Vec<(&'static str, u64)>,
}

impl Ingester {
    /// Appends an encoded `WriteRequest` to the tenant's head.
    ///
    /// The body is decoded into a pooled arena on a blocking thread (the WAL write happens there too); the
    /// head copies the strings of new series and nothing else, so the arena and the body are released when
    /// this returns.
    #[tracing::instrument(skip_all, fields(tenant = %tenant))]
    pub(crate) async fn push_bytes(&self, tenant: &TenantId, body: Bytes) -> Result<PushResponse, IngesterError> {
        self.check_accepting()?;
        let _inflight = self.limits.instance.start_push()?;
        self.limits.instance.check_rate(tokio::time::Instant::now())?;
        if self.head(tenant).is_none() {
            let tenants = self.heads.read().unwrap_or_else(|e| e.into_inner()).len();
            self.limits.instance.check_new_tenant(tenants)?;
        }
        let head = self.head_or_open(tenant).await?;
        let ctx = PushContext {
            arenas: self.arenas.clone(),
            limits: self.limits.clone(),
            metrics: self.metrics.clone(),
            discarded: self.discarded.clone(),
        };
        let t = tenant.clone();
        let (outcome, errors) = tokio::task::spawn_blocking(move || ctx.push(&t, &head, &body))
            .await
            .map_err(|e| IngesterError::Task(e.to_string()))??;

        self.record(tenant, &outcome);
        self.limits
            .instance
            .record_samples(outcome.samples_appended, tokio::time::Instant::now());
        self.metrics
            .arena_retained_bytes
            .set(self.arenas.retained_bytes() as i64);
        self.metrics.arenas_dropped.set(self.arenas.arenas_dropped() as i64);
        Ok(PushResponse {
            samples_ingested: outcome.samples_appended + outcome.samples_deduplicated,
            errors,
        })
    }

    fn record(&self, tenant: &TenantId, outcome: &AppendOutcome) {
        self.metrics.ingested_samples.inc_by(outcome.samples_appended);
        self.metrics.deduplicated_samples.inc_by(outcome.samples_deduplicated);
        self.metrics.series_created.inc_by(outcome.series_created);
        self.metrics.wal_bytes_written.inc_by(outcome.wal_bytes);
        self.metrics.open_chunks_dropped.inc_by(outcome.open_chunks_dropped);
        self.metrics.memory_series.inc_by(outcome.series_created as i64);
        for e in &outcome.errors {
            self.discarded
                .add(tenant.as_str(), e.reason.id(), u64::from(e.samples_rejected));
        }
    }
}

/// What the blocking half of a push needs from the ingester.
struct PushContext {
    arenas: ArenaPool,
    limits: IngesterLimits,
    metrics: Metrics,
    discarded: DiscardedSamples,
}

impl PushContext {
    fn push(
        &self,
        tenant: &TenantId,
        head: &Head,
        body: &[u8],
    ) -> Result<(AppendOutcome, Vec<SeriesError>), IngesterError> {
        let arena = self.arenas.get();
        let req = decode_write_request(&arena, body)?;
        let series = self.limits.tenant_series(tenant);
        // Held across admission and append so concurrent pushes of one tenant cannot both take the last slot.
        let mut series = series.lock().unwrap_or_else(|p| p.into_inner());
        series.seed(head);
        let limits = self.limits.local_series_limits(tenant);
        let stats = head.stats();
        let min_valid = stats.max_time.map(|t| t.saturating_sub(OUT_OF_BOUNDS_WINDOW_MS));

        let mut f = Filtered {
            batch: Vec::with_capacity(req.timeseries.len()),
            origin: Vec::with_capacity(req.timeseries.len()),
            errors: Vec::new(),
            discarded: Vec::new(),
        };
        let mut created = 0u64;
        let mut new_series: Vec<usize> = Vec::new();
        for (index, ts) in req.timeseries.iter().enumerate() {
            let mut samples: &[Sample] = &ts.samples;
            if let Some(min_valid) = min_valid {
                let (kept, error) = drop_out_of_bounds(&arena, samples, min_valid);
                if let Some((count, first)) = error {
                    f.discarded.push((REASON_OUT_OF_BOUNDS, count));
                    f.errors.push(SeriesError {
                        series_index: index as u32,
                        reason: REASON_OUT_OF_BOUNDS.into(),
                        message: format!(
                            "{REASON_OUT_OF_BOUNDS}: {count} sample(s) older than the head's accepted range (first \
                             rejected ts={first}; the oldest accepted is {min_valid}, 1h before the tenant's newest \
                             sample) (tenant={tenant}, series={}): samples this old cannot be appended to the head; \
                             out-of-order ingestion (`--ingester.out-of-order-time-window`) is not supported yet",
                            series_text(&ts.labels)
                        ),
                        samples_rejected: u32::try_from(count).unwrap_or(u32::MAX),
                    });
                }
                samples = kept;
            }
            if samples.is_empty() {
                continue;
            }
            let admission = series.admit(
                &ts.labels,
                stats.series,
                &mut created,
                limits.max_global_series_per_user,
                limits.max_global_series_per_metric,
            );
            let refusal = match admission {
                SeriesAdmission::Existing => None,
                SeriesAdmission::New => {
                    new_series.push(f.batch.len());
                    None
                }
                SeriesAdmission::OverUserLimit { limit } => Some((
                    REASON_MAX_SERIES_PER_USER,
                    format!(
                        "{REASON_MAX_SERIES_PER_USER}: per-tenant series limit of {limit} reached (tenant={tenant}, \
                         series={}): the series was not created; reduce the tenant's cardinality or raise \
                         `limits.max_global_series_per_user` (--ingester.max-global-series-per-user)",
                        series_text(&ts.labels)
                    ),
                )),
                SeriesAdmission::OverMetricLimit { limit } => Some((
                    REASON_MAX_SERIES_PER_METRIC,
                    format!(
                        "{REASON_MAX_SERIES_PER_METRIC}: per-metric series limit of {limit} reached (tenant={tenant}, \
                         series={}): the series was not created; reduce the metric's cardinality or raise \
                         `limits.max_global_series_per_metric` (--ingester.max-global-series-per-metric)",
                        series_text(&ts.labels)
                    ),
                )),
            };
            if let Some((reason, message)) = refusal {
                f.discarded.push((reason, samples.len() as u64));
                f.errors.push(SeriesError {
                    series_index: index as u32,
                    reason: reason.into(),
                    message,
                    samples_rejected: u32::try_from(samples.len()).unwrap_or(u32::MAX),
                });
                continue;
            }
            f.batch.push(AppendSeries {
                labels: &ts.labels,
                samples,
            });
            f.origin.push(index);
        }

        let instance_check = self
            .limits
            .instance
            .check_series(self.metrics.memory_series.get().max(0) as u64, created);
        if let Err(e) = instance_check {
            for &b in &new_series {
                series.forget(f.batch[b].labels);
            }
            return Err(e);
        }

        let outcome = head.append(&f.batch).map_err(|source| IngesterError::Tsdb {
            tenant: tenant.clone(),
            source,
        })?;
        for e in &outcome.errors {
            if e.reason == AppendErrorKind::InvalidLabels {
                series.forget(f.batch[e.index].labels);
            }
        }
        for (reason, n) in f.discarded {
            self.discarded.add(tenant.as_str(), reason, n);
        }
        // Messages name the series, so render them while the request's labels are still here.
        let mut errors = f.errors;
        errors.extend(outcome.errors.iter().map(|e| {
            let labels = series_text(f.batch[e.index].labels);
            SeriesError {
                series_index: f.origin[e.index] as u32,
                reason: e.reason.id().to_owned(),
                message: format!("{e} (tenant={tenant}, series={labels})"),
                samples_rejected: e.samples_rejected,
            }
        }));
        errors.sort_by_key(|e| e.series_index);
        Ok((outcome, errors))
    }
}

/// The samples at or after `min_valid` (a copy in the arena when some are dropped), and the count and first
/// timestamp of the dropped ones.
fn drop_out_of_bounds<'a>(
    arena: &'a Bump,
    samples: &'a [Sample],
    min_valid: i64,
) -> (&'a [Sample], Option<(u64, i64)>) {
    let Some(first) = samples.iter().find(|s| s.t < min_valid) else {
        return (samples, None);
    };
    let first = first.t;
    let mut kept = bumpalo::collections::Vec::with_capacity_in(samples.len(), arena);
    kept.extend(samples.iter().filter(|s| s.t >= min_valid).copied());
    let dropped = (samples.len() - kept.len()) as u64;
    (kept.into_bump_slice(), Some((dropped, first)))
}

/// The series in Prometheus' text form for messages.
fn series_text(labels: &[LabelRef<'_>]) -> String {
    Labels::from_unsorted(labels.iter().map(|l| (l.name, l.value)))
        .map(|l| l.to_string())
        .unwrap_or_else(|_| "{invalid label set}".into())
}

#[cfg(test)]
mod tests;
