//! The querier: fan-out to the ingesters of a tenant, replica merge, limits and timeouts. The HTTP layer
//! (`remote_read`, `api`) only parses requests and formats answers around these calls.

use crate::config::QuerierConfig;
use crate::convert::matcher_to_proto;
use crate::error::QuerierError;
use crate::merge::{self, merge_chunks, merge_samples};
use crate::metrics::Metrics;
use crate::source::IngesterSource;
use crate::store::BucketStore;
use crate::{chunks, fetch};
use futures::future::try_join_all;
use heddle_model::{Labels, Matcher, Sample, TenantId};
use heddle_proto::ingester::{LabelNamesRequest, LabelValuesRequest, QueryRequest, Selector, SeriesRequest};
use heddle_proto::prometheus::{Chunk, LabelMatcher};
use prometheus_client::registry::Registry;
use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;

/// One series with its samples, as [`Querier::select`] returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesSamples {
    pub labels: Labels,
    /// Sorted by time, one sample per timestamp.
    pub samples: Vec<Sample>,
}

/// One series with its XOR chunks: sorted by time, disjoint, holding only samples inside the query range.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesChunks {
    pub labels: Labels,
    pub chunks: Vec<Chunk>,
}

/// Reads a tenant's series from the ingesters that hold them. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Querier {
    cfg: QuerierConfig,
    source: Arc<dyn IngesterSource>,
    /// Blocks in the bucket, read beside the ingesters; `None` reads ingesters only.
    store: Option<Arc<BucketStore>>,
    pub(crate) metrics: Metrics,
}

impl Querier {
    /// A querier reading from the ingesters `source` names, with its metrics registered on `registry`.
    pub fn new(cfg: QuerierConfig, source: Arc<dyn IngesterSource>, registry: &mut Registry) -> Self {
        Self {
            cfg,
            source,
            store: None,
            metrics: Metrics::new(registry),
        }
    }

    /// Also reads the blocks of `store` (the bucket), so data older than what the ingesters keep is found.
    pub fn with_store(mut self, store: Arc<BucketStore>) -> Self {
        self.store = Some(store);
        self
    }

    pub fn config(&self) -> &QuerierConfig {
        &self.cfg
    }

    async fn with_timeout<T>(
        &self,
        tenant: &TenantId,
        fut: impl Future<Output = Result<T, QuerierError>>,
    ) -> Result<T, QuerierError> {
        tokio::time::timeout(self.cfg.query_timeout, fut)
            .await
            .unwrap_or_else(|_| {
                Err(QuerierError::Timeout {
                    tenant: tenant.to_string(),
                    timeout_ms: self.cfg.query_timeout.as_millis(),
                })
            })
    }

    fn check_sample_limit(&self, tenant: &TenantId, selected: usize) -> Result<(), QuerierError> {
        let limit = self.cfg.max_samples_per_query;
        if limit > 0 && selected > limit {
            return Err(QuerierError::TooManySamples {
                tenant: tenant.to_string(),
                selected,
                limit,
            });
        }
        Ok(())
    }

    /// Every series matching `matchers` in `[start, end]` from the tenant's replication set, grouped by label
    /// set and turned into `T` by `merge`, which also says how many samples it kept. Series `merge` leaves
    /// empty (`None`) are dropped; the sample limit is checked as the count grows.
    async fn select_merged<T>(
        &self,
        tenant: &TenantId,
        start: i64,
        end: i64,
        matchers: &[Matcher],
        merge: impl Fn(Vec<Chunk>) -> Result<Option<(T, usize)>, QuerierError>,
    ) -> Result<Vec<(Labels, T)>, QuerierError> {
        let req = query_request(start, end, matchers)?;
        self.with_timeout(tenant, async {
            let set = self.source.replication_set(tenant);
            let mut parts = fetch::query_stream(&set, tenant, &req).await?;
            if let Some(store) = &self.store {
                // Blocks and ingesters may both hold a range (a block stays local until it expires): the merge
                // treats the bucket as one more replica and de-duplicates.
                parts.push(store.query(tenant, start, end, matchers).await?);
            }
            let grouped = merge::group_by_labels(parts)?;
            let mut out = Vec::with_capacity(grouped.len());
            let mut selected = 0;
            for (labels, raw) in grouped {
                let Some((merged, samples)) = merge(raw)? else {
                    continue;
                };
                selected += samples;
                self.check_sample_limit(tenant, selected)?;
                out.push((labels, merged));
            }
            Ok(out)
        })
        .await
    }

    /// The chunks of every series matching `matchers` in `[start, end]` (milliseconds, inclusive), replicas
    /// merged, sorted by labels. Series without samples in the range are left out.
    pub async fn select_chunks(
        &self,
        tenant: &TenantId,
        start: i64,
        end: i64,
        matchers: &[Matcher],
    ) -> Result<Vec<SeriesChunks>, QuerierError> {
        let merged = self
            .select_merged(tenant, start, end, matchers, |raw| {
                let chunks = merge_chunks(raw, start, end)?;
                if chunks.is_empty() {
                    return Ok(None);
                }
                let mut samples = 0;
                for c in &chunks {
                    samples += chunks::num_samples(c)?;
                }
                Ok(Some((chunks, samples)))
            })
            .await?;
        Ok(merged
            .into_iter()
            .map(|(labels, chunks)| SeriesChunks { labels, chunks })
            .collect())
    }

    /// The samples of every series matching `matchers` in `[start, end]` (milliseconds, inclusive), replicas
    /// merged and de-duplicated, sorted by labels. Series without samples in the range are left out.
    pub async fn select(
        &self,
        tenant: &TenantId,
        start: i64,
        end: i64,
        matchers: &[Matcher],
    ) -> Result<Vec<SeriesSamples>, QuerierError> {
        let merged = self
            .select_merged(tenant, start, end, matchers, |raw| {
                let samples = merge_samples(&raw, start, end)?;
                let n = samples.len();
                Ok((n > 0).then_some((samples, n)))
            })
            .await?;
        Ok(merged
            .into_iter()
            .map(|(labels, samples)| SeriesSamples { labels, samples })
            .collect())
    }

    /// The label sets of the series matching any of `selectors` in `[start, end]`, sorted and unique.
    pub async fn series(
        &self,
        tenant: &TenantId,
        start: i64,
        end: i64,
        selectors: &[Vec<Matcher>],
    ) -> Result<Vec<Labels>, QuerierError> {
        if selectors.is_empty() {
            return Err(QuerierError::BadData("no match[] parameter provided".into()));
        }
        let req = SeriesRequest {
            start_timestamp_ms: start,
            end_timestamp_ms: end,
            selectors: selectors
                .iter()
                .map(|ms| Selector {
                    matchers: ms.iter().map(matcher_to_proto).collect(),
                })
                .collect(),
        };
        self.with_timeout(tenant, async {
            let set = self.source.replication_set(tenant);
            let mut out = BTreeSet::new();
            for labels in fetch::series(&set, tenant, &req).await?.into_iter().flatten() {
                out.insert(merge::labels_from_proto(&labels.labels)?);
            }
            if let Some(store) = &self.store {
                for matchers in selectors {
                    out.extend(store.series(tenant, start, end, matchers).await?);
                }
            }
            Ok(out.into_iter().collect())
        })
        .await
    }

    /// The label names of the series matching any of `selectors` (every series when empty) in `[start, end]`,
    /// sorted and unique.
    pub async fn label_names(
        &self,
        tenant: &TenantId,
        start: i64,
        end: i64,
        selectors: &[Vec<Matcher>],
    ) -> Result<Vec<String>, QuerierError> {
        let set = self.source.replication_set(tenant);
        let requests = per_selector(selectors).map(|matchers| LabelNamesRequest {
            start_timestamp_ms: start,
            end_timestamp_ms: end,
            matchers,
        });
        self.with_timeout(tenant, async {
            let answers = try_join_all(requests.map(|req| {
                let set = &set;
                async move { fetch::label_names(set, tenant, &req).await }
            }))
            .await?;
            let mut stored = Vec::new();
            if let Some(store) = &self.store {
                for matchers in selectors_or_all(selectors) {
                    stored.extend(store.label_names(tenant, start, end, matchers).await?);
                }
            }
            Ok(sorted_union(answers.into_iter().flatten().flatten().chain(stored)))
        })
        .await
    }

    /// The values of label `name` on the series matching any of `selectors` (every series when empty) in
    /// `[start, end]`, sorted and unique.
    pub async fn label_values(
        &self,
        tenant: &TenantId,
        name: &str,
        start: i64,
        end: i64,
        selectors: &[Vec<Matcher>],
    ) -> Result<Vec<String>, QuerierError> {
        let set = self.source.replication_set(tenant);
        let requests = per_selector(selectors).map(|matchers| LabelValuesRequest {
            name: name.to_owned(),
            start_timestamp_ms: start,
            end_timestamp_ms: end,
            matchers,
        });
        self.with_timeout(tenant, async {
            let answers = try_join_all(requests.map(|req| {
                let set = &set;
                async move { fetch::label_values(set, tenant, &req).await }
            }))
            .await?;
            let mut stored = Vec::new();
            if let Some(store) = &self.store {
                for matchers in selectors_or_all(selectors) {
                    stored.extend(store.label_values(tenant, name, start, end, matchers).await?);
                }
            }
            Ok(sorted_union(answers.into_iter().flatten().flatten().chain(stored)))
        })
        .await
    }
}

fn query_request(start: i64, end: i64, matchers: &[Matcher]) -> Result<QueryRequest, QuerierError> {
    if matchers.is_empty() {
        return Err(QuerierError::BadData(
            "a query needs at least one label matcher; an empty list would select every series".into(),
        ));
    }
    Ok(QueryRequest {
        start_timestamp_ms: start,
        end_timestamp_ms: end,
        matchers: matchers.iter().map(matcher_to_proto).collect(),
    })
}

/// One matcher list per selector, or a single empty list (all series) when there are none.
fn per_selector(selectors: &[Vec<Matcher>]) -> impl Iterator<Item = Vec<LabelMatcher>> + '_ {
    let all = selectors.is_empty().then(Vec::new);
    selectors
        .iter()
        .map(|ms| ms.iter().map(matcher_to_proto).collect())
        .chain(all)
}

/// The selectors, or one empty matcher list (every series) when there are none.
fn selectors_or_all(selectors: &[Vec<Matcher>]) -> impl Iterator<Item = &[Matcher]> {
    let all: Option<&[Matcher]> = selectors.is_empty().then_some(&[]);
    selectors.iter().map(Vec::as_slice).chain(all)
}

fn sorted_union(values: impl Iterator<Item = String>) -> Vec<String> {
    values
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter(|v| !v.is_empty())
        .collect()
}
