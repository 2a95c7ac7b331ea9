//! The push path of one tenant: raw `WriteRequest` bytes -> request arena -> the tenant's head.
//!
//! The head judges everything per series: samples outside its accepted range (out of bounds; too far in the
//! future or, for an empty head, older than one block range, by the bounds the ingester sets from its clock), and, through the
//! tenant's series admission hook, whether a new series may be created. The refused series are reported per
//! series and the rest of the push is still ingested. The instance limits checked before the body is decoded
//! are the ingester's (`crate::ingester`); the instance series limit, which needs to know which series are new,
//! comes back from the head as a refusal of the whole batch.

use crate::error::IngesterError;
use crate::limits::EntryLimits;
use crate::metadata::Added;
use crate::metrics::{Metrics, TenantReasonLabels};
use crate::tenant::Tenant;
use bytes::Bytes;
use heddle_model::{ExemplarRef, HistogramSample, LabelRef, MetadataRef, SeriesBatch, series_text};
use heddle_proto::ingester::{MetadataError, PushResponse, SeriesError};
use heddle_proto::{ArenaPool, DecodeError, TimeSeriesRef, decode_measured, measure_write_request};
use heddle_server::DiscardedSamples;
use heddle_server::Reservation;
use heddle_tsdb::{
    AppendBounds, AppendErrorKind, AppendExemplars, AppendOutcome, AppendSeries, ExemplarOutcome, SeriesAppendError,
    TsdbError,
};
use std::mem::size_of;
use std::sync::Arc;

/// What a push needs from the ingester besides the tenant.
#[derive(Debug, Clone)]
pub(crate) struct PushContext {
    pub(crate) arenas: ArenaPool,
    pub(crate) metrics: Metrics,
    pub(crate) discarded: DiscardedSamples,
    /// The time bounds of this push: now + the tenant's creation grace period, and now - one block range for
    /// an empty head.
    pub(crate) bounds: AppendBounds,
    /// The tenant's metadata and exemplar limits on this ingester.
    pub(crate) entry_limits: EntryLimits,
    /// The ingester's wall clock at the push (ms), for metadata retention.
    pub(crate) now_ms: i64,
}

/// What a push carries: an encoded `WriteRequest` (from the network), or the series a distributor in the
/// same process decoded and validated already.
#[derive(Debug, Clone)]
pub(crate) enum PushBody {
    Encoded(Bytes),
    Batch(Arc<SeriesBatch>),
}

impl PushBody {
    /// Bytes the body holds, for the in-flight bytes budget.
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Encoded(body) => body.len(),
            Self::Batch(batch) => batch.bytes(),
        }
    }
}

/// Appends a push body to the tenant's head; returns the response and the samples appended.
///
/// An encoded body is decoded into a pooled arena on a blocking thread (the WAL write happens there too); a
/// batch is read as it is. The head copies the strings of new series and nothing else, so the arena and the
/// body are released when this returns. A batch the head refuses whole (the instance series limit) is
/// `refused`'s error. `reservation` holds the body in the in-flight bytes budget; the decoded view is added to
/// it before it is allocated, and all of it is released when the push ends.
pub(crate) async fn push(
    tenant: Arc<Tenant>,
    ctx: PushContext,
    body: PushBody,
    mut reservation: Reservation,
    refused: impl FnOnce(&'static str, String) -> IngesterError + Send + Clone + 'static,
) -> Result<(PushResponse, u64), IngesterError> {
    tenant.note_push();
    let c = ctx.clone();
    let t = tenant.clone();
    let Appended {
        outcome,
        errors,
        metadata,
        exemplars,
    } = tokio::task::spawn_blocking(move || append(&t, &c, &body, &mut reservation, refused))
        .await
        .map_err(|e| IngesterError::Task(e.to_string()))??;
    record(&tenant, &ctx, &outcome);
    record_metadata(&tenant, &ctx, &metadata);
    record_exemplars(&ctx, &exemplars);
    ctx.metrics.arena_retained_bytes.set(ctx.arenas.retained_bytes() as i64);
    ctx.metrics.arenas_dropped.set(ctx.arenas.arenas_dropped() as i64);
    let response = PushResponse {
        samples_ingested: outcome.samples_appended + outcome.histograms_appended + outcome.samples_deduplicated,
        errors,
        metadata_errors: metadata
            .refused
            .into_iter()
            .map(|r| MetadataError {
                reason: r.reason.to_owned(),
                message: r.message,
            })
            .collect(),
    };
    Ok((response, outcome.samples_appended + outcome.histograms_appended))
}

fn record(tenant: &Tenant, ctx: &PushContext, outcome: &AppendOutcome) {
    // Every push keeps its tenant's per-tenant series, whether or not this one moved any of them.
    ctx.discarded.tenant_metrics().touch(tenant.id().as_str());
    let m = &ctx.metrics;
    m.ingested_samples.inc_by(outcome.samples_appended);
    m.ingested_native_histograms.inc_by(outcome.histograms_appended);
    m.created_zero_samples.inc_by(outcome.created_zero_samples);
    m.deduplicated_samples.inc_by(outcome.samples_deduplicated);
    m.series_created.inc_by(outcome.series_created);
    m.wal_bytes_written.inc_by(outcome.wal_bytes);
    m.open_chunks_dropped.inc_by(outcome.open_chunks_dropped);
    for e in &outcome.errors {
        ctx.discarded
            .add(tenant.id().as_str(), e.reason.id(), u64::from(e.samples_rejected));
    }
}

fn record_metadata(tenant: &Tenant, ctx: &PushContext, added: &Added) {
    let m = &ctx.metrics;
    m.memory_metadata.inc_by(added.created as i64);
    for r in &added.refused {
        let labels = TenantReasonLabels {
            tenant: tenant.id().to_string(),
            reason: r.reason.to_owned(),
        };
        m.discarded_metadata.with(&labels, |c| {
            c.inc_by(r.count);
        });
    }
}

fn record_exemplars(ctx: &PushContext, e: &ExemplarOutcome) {
    let m = &ctx.metrics;
    m.exemplars_appended.inc_by(e.appended);
    m.wal_bytes_written.inc_by(e.wal_bytes);
    for (reason, n) in [
        ("out-of-order", e.out_of_order),
        ("unknown-series", e.unknown_series),
        ("disabled", e.disabled),
    ] {
        if n > 0 {
            m.exemplars_refused
                .get_or_create(&crate::metrics::ReasonLabels { reason })
                .inc_by(n);
        }
    }
}

/// Appends a push's exemplars to the tenant's head, after its samples (a series is found only once its
/// samples created it), in the ring of the tenant's current size.
fn append_exemplars<'a>(
    tenant: &Tenant,
    ctx: &PushContext,
    batch: impl Iterator<Item = AppendExemplars<'a>>,
) -> Result<ExemplarOutcome, IngesterError> {
    let batch: Vec<AppendExemplars<'_>> = batch.filter(|b| !b.exemplars.is_empty()).collect();
    if batch.is_empty() {
        return Ok(ExemplarOutcome::default());
    }
    let head = tenant.head();
    head.set_max_exemplars(ctx.entry_limits.max_exemplars);
    head.append_exemplars(&batch).map_err(|source| IngesterError::Tsdb {
        tenant: tenant.id().clone(),
        source,
    })
}

/// Stores a push's metric metadata in the tenant's store.
fn add_metadata(tenant: &Tenant, ctx: &PushContext, metadata: &[MetadataRef<'_>]) -> Added {
    if metadata.is_empty() {
        return Added::default();
    }
    tenant
        .metadata()
        .add(tenant.id(), metadata, ctx.entry_limits, ctx.now_ms)
}

/// What the blocking half returns.
struct Appended {
    /// The head's outcome for the samples.
    outcome: AppendOutcome,
    /// The per-series errors, rendered.
    errors: Vec<SeriesError>,
    /// What became of the metadata.
    metadata: Added,
    /// What became of the exemplars.
    exemplars: ExemplarOutcome,
}

/// The blocking half: decode (an encoded body), store the metadata, append the samples then the exemplars,
/// render the per-series errors.
fn append(
    tenant: &Tenant,
    ctx: &PushContext,
    body: &PushBody,
    reservation: &mut Reservation,
    refused: impl FnOnce(&'static str, String) -> IngesterError,
) -> Result<Appended, IngesterError> {
    match body {
        PushBody::Encoded(body) => {
            let measured = measure_write_request(body)?;
            reservation
                .grow(measured.shape().decoded_bytes())
                .map_err(crate::limits::bytes_refused)?;
            let arena = ctx.arenas.get();
            let req = decode_measured(&arena, measured)?;
            reservation
                .grow(histogram_bytes(req.timeseries))
                .map_err(crate::limits::bytes_refused)?;
            let histograms = decode_histograms(req.timeseries)?;
            let metadata = add_metadata(tenant, ctx, req.metadata);
            let series = req
                .timeseries
                .iter()
                .zip(&histograms)
                .map(|(ts, histograms)| AppendSeries {
                    labels: ts.labels,
                    samples: ts.samples,
                    created: (ts.created != 0).then_some(ts.created),
                    histograms,
                });
            let (outcome, errors) = append_series(tenant, ctx, series, req.timeseries.len(), refused)?;
            let exemplars = append_exemplars(
                tenant,
                ctx,
                req.timeseries.iter().map(|ts| AppendExemplars {
                    labels: ts.labels,
                    exemplars: ts.exemplars,
                }),
            )?;
            Ok(Appended {
                outcome,
                errors,
                metadata,
                exemplars,
            })
        }
        PushBody::Batch(batch) => {
            reservation
                .grow(batch.len() * size_of::<AppendSeries<'_>>() + batch.labels_len() * size_of::<LabelRef<'_>>())
                .map_err(crate::limits::bytes_refused)?;
            let entries: Vec<MetadataRef<'_>> = batch.metadata().iter().map(|m| m.as_ref()).collect();
            let metadata = add_metadata(tenant, ctx, &entries);
            let labels = batch.label_refs();
            // The head takes a slice per series; the batch keeps them apart from their series, so they are
            // gathered (cloned) here, only for the series that have some.
            let histograms: Vec<Vec<HistogramSample>> = (0..batch.len())
                .map(|i| batch.histograms(i).cloned().collect())
                .collect();
            let series = batch
                .series()
                .zip(&histograms)
                .enumerate()
                .map(|(i, ((range, samples), histograms))| AppendSeries {
                    labels: &labels[range],
                    samples,
                    created: batch.created(i),
                    histograms,
                });
            let (outcome, errors) = append_series(tenant, ctx, series, batch.len(), refused)?;
            let exemplar_labels = batch.exemplar_label_refs();
            let mut per_series: Vec<Vec<ExemplarRef<'_>>> = vec![Vec::new(); batch.len()];
            for (series, range, sample) in batch.exemplars() {
                per_series[series].push(ExemplarRef {
                    labels: &exemplar_labels[range],
                    value: sample.v,
                    t: sample.t,
                });
            }
            let exemplars = append_exemplars(
                tenant,
                ctx,
                batch
                    .series()
                    .zip(&per_series)
                    .map(|((range, _), exemplars)| AppendExemplars {
                        labels: &labels[range],
                        exemplars,
                    }),
            )?;
            Ok(Appended {
                outcome,
                errors,
                metadata,
                exemplars,
            })
        }
    }
}

/// The most heap bytes [`decode_histograms`] takes for `series`.
fn histogram_bytes(series: &[TimeSeriesRef<'_>]) -> usize {
    series
        .iter()
        .flat_map(|ts| ts.histograms)
        .map(|h| size_of::<HistogramSample>() + h.decoded_heap_bytes())
        .sum()
}

/// Each series' native histogram samples, decoded out of the arena into owned samples for the head.
fn decode_histograms(series: &[TimeSeriesRef<'_>]) -> Result<Vec<Vec<HistogramSample>>, DecodeError> {
    series
        .iter()
        .map(|ts| ts.histograms.iter().map(|h| h.decode()).collect())
        .collect()
}

/// Appends the request's series (`len` of them) and renders the per-series errors, numbered by request index.
fn append_series<'a>(
    tenant: &Tenant,
    ctx: &PushContext,
    series: impl Iterator<Item = AppendSeries<'a>>,
    len: usize,
    refused: impl FnOnce(&'static str, String) -> IngesterError,
) -> Result<(AppendOutcome, Vec<SeriesError>), IngesterError> {
    let mut batch = Vec::with_capacity(len);
    // Request index of each batch entry.
    let mut origin = Vec::with_capacity(len);
    for (index, s) in series.enumerate() {
        // A series without samples creates nothing and is not refused.
        if s.samples.is_empty() && s.histograms.is_empty() {
            continue;
        }
        batch.push(s);
        origin.push(index);
    }
    let outcome = match tenant.head().append_within(&batch, ctx.bounds) {
        Ok(outcome) => outcome,
        Err(TsdbError::BatchRefused { id, message }) => return Err(refused(id, message)),
        Err(source) => {
            return Err(IngesterError::Tsdb {
                tenant: tenant.id().clone(),
                source,
            });
        }
    };
    // Messages name the series, so render them while the request's labels are still here. A refusal's message
    // is the admission hook's, which names them already.
    let errors = outcome
        .errors
        .iter()
        .map(|e| SeriesError {
            series_index: origin[e.index] as u32,
            reason: e.reason.id().to_owned(),
            message: match e.reason {
                AppendErrorKind::Refused(_) => e.to_string(),
                AppendErrorKind::TooFarInFuture | AppendErrorKind::TooOldForEmptyHead => {
                    time_bound_message(e, tenant, &series_text(batch[e.index].labels))
                }
                _ => format!(
                    "{e} (tenant={}, series={})",
                    tenant.id(),
                    series_text(batch[e.index].labels)
                ),
            },
            samples_rejected: e.samples_rejected,
        })
        .collect();
    Ok((outcome, errors))
}

/// The message of a sample refused by the bounds the ingester sets from its clock: the sample, the bound, and
/// the flag that sets it.
fn time_bound_message(e: &SeriesAppendError, tenant: &Tenant, series: &str) -> String {
    let (id, n, ts, bound) = (e.reason.id(), e.samples_rejected, e.first_rejected_t, e.last_accepted_t);
    let tenant = tenant.id();
    match e.reason {
        AppendErrorKind::TooFarInFuture => format!(
            "{id}: {n} sample(s) too far in the future (first rejected ts={ts}, tenant={tenant}, series={series}): \
             the newest accepted timestamp is {bound} ms (the ingester's clock + creation grace period); fix the \
             sender's clock or raise `limits.creation_grace_period` (--validation.create-grace-period)"
        ),
        _ => format!(
            "{id}: {n} sample(s) too old for the tenant's empty head (first rejected ts={ts}, tenant={tenant}, \
             series={series}): the oldest accepted timestamp is {bound} ms (the ingester's clock minus \
             --blocks-storage.tsdb.empty-head-sample-age-limit, by default one block range, \
             --blocks-storage.tsdb.block-ranges-period): a head holds no sample of a block range that is already \
             closed; raise the age limit to backfill a fresh tenant"
        ),
    }
}

#[cfg(test)]
mod tests;
