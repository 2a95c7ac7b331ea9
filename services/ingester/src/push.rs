//! The push path: raw `WriteRequest` bytes -> request arena -> tenant head.

use crate::error::IngesterError;
use crate::ingester::Ingester;
use bytes::Bytes;
use heddle_model::{Labels, TenantId};
use heddle_proto::decode_write_request;
use heddle_proto::ingester::{PushResponse, SeriesError};
use heddle_tsdb::{AppendOutcome, AppendSeries};

impl Ingester {
    /// Appends an encoded `WriteRequest` to the tenant's head.
    ///
    /// The body is decoded into a pooled arena on a blocking thread (the WAL write happens there too); the
    /// head copies the strings of new series and nothing else, so the arena and the body are released when
    /// this returns.
    #[tracing::instrument(skip_all, fields(tenant = %tenant))]
    pub(crate) async fn push_bytes(&self, tenant: &TenantId, body: Bytes) -> Result<PushResponse, IngesterError> {
        self.check_accepting()?;
        let head = self.head_or_open(tenant).await?;
        let arenas = self.arenas.clone();
        let t = tenant.clone();
        let (outcome, errors) = tokio::task::spawn_blocking(move || -> Result<_, IngesterError> {
            let arena = arenas.get();
            let req = decode_write_request(&arena, &body)?;
            let batch: Vec<AppendSeries<'_>> = req
                .timeseries
                .iter()
                .map(|ts| AppendSeries {
                    labels: &ts.labels,
                    samples: &ts.samples,
                })
                .collect();
            let outcome = head.append(&batch).map_err(|source| IngesterError::Tsdb {
                tenant: t.clone(),
                source,
            })?;
            // Messages name the series, so render them while the request's labels are still here.
            let errors: Vec<SeriesError> = outcome
                .errors
                .iter()
                .map(|e| {
                    let labels = Labels::from_unsorted(batch[e.index].labels.iter().map(|l| (l.name, l.value)))
                        .map(|l| l.to_string())
                        .unwrap_or_else(|_| "{invalid label set}".into());
                    SeriesError {
                        series_index: e.index as u32,
                        reason: e.reason.id().to_owned(),
                        message: format!("{e} (tenant={t}, series={labels})"),
                        samples_rejected: e.samples_rejected,
                    }
                })
                .collect();
            Ok((outcome, errors))
        })
        .await
        .map_err(|e| IngesterError::Task(e.to_string()))??;

        self.record(tenant, &outcome);
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
        self.metrics.memory_series.inc_by(outcome.series_created as i64);
        for e in &outcome.errors {
            self.discarded
                .add(tenant.as_str(), e.reason.id(), u64::from(e.samples_rejected));
        }
    }
}
