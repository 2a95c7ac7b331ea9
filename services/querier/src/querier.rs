//! The querier: fan-out to the ingesters of a tenant, replica merge, limits and timeouts. The HTTP layer
//! (`remote_read`, `api`) only parses requests and formats answers around these calls.

use crate::config::QuerierConfig;
use crate::convert::{labels_from_proto, matcher_to_proto};
use crate::error::{FetchLimit, QuerierError};
use crate::fetch::{self, IngesterSet};
use crate::limits::QueryLimiter;
use crate::metrics::Metrics;
use crate::select::{Bounds, Merge, SelectedSeries, timeout_error};
use crate::store::{BlockCoverage, BucketStore, StoreAnswer};
use futures::future::try_join_all;
use heddle_limits::{Limits, Overrides};
use heddle_model::{Clock, HistogramSample, Labels, Matcher, Sample, SystemClock, TenantId};
use heddle_proto::IngesterClient;
use heddle_proto::ingester::{
    LabelNamesRequest, LabelNamesResponse, LabelValuesRequest, LabelValuesResponse, QueryRequest, Selector,
    SeriesRequest,
};
use heddle_proto::prometheus::LabelMatcher;
use heddle_ring::Replicas;
use heddle_server::InflightBytes;
use prometheus_client::registry::Registry;
use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

mod exemplars;
mod metadata;

pub use exemplars::ExemplarSample;
pub use metadata::{FamilyMetadata, MetadataRequest};

/// The ingesters a querier reads from: a fixed list (single process, tests) or the ring.
pub type IngesterReplicas = dyn Replicas<Arc<dyn IngesterClient>>;

/// One series with its samples, as [`Querier::select`] returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesSamples {
    pub labels: Labels,
    /// Float samples, sorted by time, one sample per timestamp.
    pub samples: Vec<Sample>,
    /// Native histogram samples (integer or float), sorted by time; no timestamp is in both lists.
    pub histograms: Vec<HistogramSample>,
}

/// Reads a tenant's series from the ingesters that hold them. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Querier {
    cfg: QuerierConfig,
    replicas: Arc<IngesterReplicas>,
    /// Blocks in the bucket, read beside the ingesters; `None` reads ingesters only.
    store: Option<Arc<BucketStore>>,
    /// Per-tenant limits (the fetch limits of a query, its length and lookback).
    pub(crate) overrides: Arc<Overrides>,
    /// One permit per PromQL query evaluated at once (`querier.max_concurrent`).
    pub(crate) query_slots: Arc<Semaphore>,
    /// What `status/buildinfo` reports.
    pub(crate) build: BuildInfo,
    pub(crate) metrics: Metrics,
    /// Bytes held by the requests being answered (`querier.max_inflight_requests_bytes`).
    pub(crate) inflight: Arc<InflightBytes>,
}

/// The build facts `/prometheus/api/v1/status/buildinfo` reports; the binary knows them
/// ([`Querier::with_build_info`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildInfo {
    /// Heddle's version.
    pub version: &'static str,
    /// The git commit built, or "unknown".
    pub revision: &'static str,
    /// The compiler that built it (`rustc --version`), or "unknown".
    pub rustc: &'static str,
}

impl Default for BuildInfo {
    /// This crate's version; the commit when `HEDDLE_GIT_COMMIT` was set at build time.
    fn default() -> Self {
        Self {
            version: env!("CARGO_PKG_VERSION"),
            revision: option_env!("HEDDLE_GIT_COMMIT").unwrap_or("unknown"),
            rustc: "unknown",
        }
    }
}

impl Querier {
    /// A querier reading from the ingesters `replicas` names, with its metrics registered on `registry`.
    pub fn new(cfg: QuerierConfig, replicas: Arc<IngesterReplicas>, registry: &mut Registry) -> Self {
        let metrics = Metrics::new(registry);
        Self {
            replicas,
            store: None,
            overrides: Arc::new(Overrides::new(Limits::default())),
            query_slots: Arc::new(Semaphore::new(cfg.max_concurrent)),
            build: BuildInfo::default(),
            inflight: InflightBytes::new(
                cfg.max_inflight_requests_bytes,
                metrics.inflight_bytes.clone(),
                metrics.inflight_refused.clone(),
            ),
            metrics,
            cfg,
        }
    }

    /// Reports `build` on `status/buildinfo`.
    pub fn with_build_info(mut self, build: BuildInfo) -> Self {
        self.build = build;
        self
    }

    /// Reads per-tenant limits (the fetch limits) from `overrides`, shared with the runtime config reloader,
    /// instead of giving every tenant the defaults.
    pub fn with_overrides(mut self, overrides: Arc<Overrides>) -> Self {
        self.overrides = overrides;
        self
    }

    /// A fresh fetch budget for one request of `tenant`: every query of the request draws on it.
    pub(crate) fn limiter(&self, tenant: &TenantId) -> Arc<QueryLimiter> {
        let limits = self.overrides.get(tenant.as_str());
        Arc::new(QueryLimiter::new(
            tenant,
            &limits,
            self.cfg.max_samples_per_query,
            self.metrics.clone(),
        ))
    }

    /// Also reads the blocks of `store` (the bucket), so data older than what the ingesters keep is found.
    pub fn with_store(mut self, store: Arc<BucketStore>) -> Self {
        self.store = Some(store);
        self
    }

    pub fn config(&self) -> &QuerierConfig {
        &self.cfg
    }

    /// The ingesters to ask now; too few healthy ones fail the query rather than answer partially.
    fn read_set(&self) -> Result<IngesterSet, QuerierError> {
        self.replicas.for_read().map_err(|e| QuerierError::Ring(e.to_string()))
    }

    /// Which sources a query of `[start, end]` reads ([`split_by_time`] at the wall clock's now).
    fn sources(&self, start: i64, end: i64) -> Sources {
        split_by_time(
            start,
            end,
            SystemClock.now_ms(),
            self.cfg.query_ingesters_within,
            self.cfg.query_store_after,
        )
    }

    /// The ingesters a query of `sources` asks: the read set, or none.
    fn read_set_for(&self, sources: Sources) -> Result<IngesterSet, QuerierError> {
        if sources.ingesters {
            self.read_set()
        } else {
            Ok(IngesterSet {
                replicas: Vec::new(),
                unreachable: Vec::new(),
                max_errors: 0,
                zones: None,
            })
        }
    }

    /// The bucket and the end of the part of a query it answers, when it is asked.
    fn store_range(&self, sources: Sources) -> Option<(&BucketStore, i64)> {
        self.store.as_deref().zip(sources.store_end)
    }

    /// The store consistency check (Mimir's, for Heddle's hand-over): every block the answering ingesters
    /// left to the bucket (`left`: shipped past their grace, no longer answered by them) must be held by the
    /// bucket blocks read, as shipped or inside a block compacted from it. When one is not, the querier's list
    /// is behind the ingesters' grace (another `sync_interval` or index staleness than theirs, a refresh
    /// that failed): the list is refreshed at once and `read_more` reads what the blocks read so far do not
    /// hold. Still missing after that, the query fails rather than answer without those samples.
    async fn check_store<T, F, Fut>(
        &self,
        tenant: &TenantId,
        left: &BTreeSet<String>,
        store_asked: bool,
        mut answer: StoreAnswer<T>,
        read_more: F,
    ) -> Result<StoreAnswer<T>, QuerierError>
    where
        F: FnOnce(BlockCoverage) -> Fut,
        Fut: Future<Output = Result<StoreAnswer<T>, QuerierError>>,
    {
        let missing = answer.coverage.missing(left);
        if missing.is_empty() {
            return Ok(answer);
        }
        if let (true, Some(store)) = (store_asked, &self.store) {
            tracing::info!(tenant = %tenant, blocks = ?missing, "ingesters left blocks to the bucket that the block list lacks; listing again");
            store.refresh_now(tenant).await?;
            let more = read_more(answer.coverage.clone()).await?;
            answer.parts.extend(more.parts);
            answer.coverage.extend(more.coverage);
        }
        let missing = answer.coverage.missing(left);
        if missing.is_empty() {
            return Ok(answer);
        }
        Err(store_consistency_error(tenant, &missing))
    }

    async fn with_timeout<T>(
        &self,
        tenant: &TenantId,
        fut: impl Future<Output = Result<T, QuerierError>>,
    ) -> Result<T, QuerierError> {
        tokio::time::timeout(self.cfg.query_timeout, fut)
            .await
            .unwrap_or_else(|_| Err(timeout_error(tenant, self.cfg.query_timeout)))
    }

    /// Opens every source of a query (the ingesters of the read set and the bucket's blocks, concurrently)
    /// for the series matching `matchers` in `[start, end]`, drawing on the request's `limiter`.
    async fn open(
        &self,
        limiter: &Arc<QueryLimiter>,
        start: i64,
        end: i64,
        matchers: &[Matcher],
    ) -> Result<SelectedSeries, QuerierError> {
        let tenant = limiter.tenant();
        let req = query_request(start, end, matchers)?;
        let deadline = tokio::time::Instant::now() + self.cfg.query_timeout;
        let sources = self.sources(start, end);
        let set = self.read_set_for(sources)?;
        let store = self.store_range(sources);
        // Blocks and ingesters may both hold a range (an ingester answers a shipped block until the querier's
        // list can have found it): the merge treats each block as one more replica and de-duplicates.
        let read_store = |read: BlockCoverage| async move {
            match store {
                Some((store, store_end)) => store.query(tenant, (start, store_end), matchers, limiter, &read).await,
                None => Ok(StoreAnswer::default()),
            }
        };
        let opening = async {
            let (ingesters, blocks) = futures::future::try_join(
                Merge::open_ingesters(&set, tenant, &req),
                read_store(BlockCoverage::default()),
            )
            .await?;
            let left = ingesters.left_to_bucket();
            let blocks = self
                .check_store(tenant, &left, store.is_some(), blocks, read_store)
                .await?;
            Ok(Merge::new(
                ingesters,
                blocks.parts,
                blocks.coverage,
                Arc::clone(limiter),
            ))
        };
        let merge = match tokio::time::timeout_at(deadline, opening).await {
            Ok(merge) => merge?,
            Err(_) => return Err(timeout_error(tenant, self.cfg.query_timeout)),
        };
        Ok(SelectedSeries::new(
            merge,
            Bounds {
                tenant: tenant.clone(),
                start,
                end,
                deadline,
                timeout: self.cfg.query_timeout,
            },
        ))
    }

    /// The series matching `matchers` in `[start, end]` (milliseconds, inclusive), replicas merged, sorted by
    /// labels, each with its chunks (sorted, disjoint, holding only samples inside the range). Series are
    /// produced one at a time as the caller pulls them; those without samples in the range are left out.
    /// The query has its own fetch budget.
    pub async fn select_chunks(
        &self,
        tenant: &TenantId,
        start: i64,
        end: i64,
        matchers: &[Matcher],
    ) -> Result<SelectedSeries, QuerierError> {
        self.open(&self.limiter(tenant), start, end, matchers).await
    }

    /// [`Querier::select_chunks`] drawing on `limiter`, the budget of a request of several queries.
    pub(crate) async fn select_chunks_limited(
        &self,
        limiter: &Arc<QueryLimiter>,
        start: i64,
        end: i64,
        matchers: &[Matcher],
    ) -> Result<SelectedSeries, QuerierError> {
        self.open(limiter, start, end, matchers).await
    }

    /// The samples of every series matching `matchers` in `[start, end]` (milliseconds, inclusive), replicas
    /// merged and de-duplicated, sorted by labels. Series without samples in the range are left out. The
    /// query has its own fetch budget.
    pub async fn select(
        &self,
        tenant: &TenantId,
        start: i64,
        end: i64,
        matchers: &[Matcher],
    ) -> Result<Vec<SeriesSamples>, QuerierError> {
        self.select_limited(&self.limiter(tenant), start, end, matchers).await
    }

    /// [`Querier::select`] drawing on `limiter`, the budget of a request of several queries.
    pub(crate) async fn select_limited(
        &self,
        limiter: &Arc<QueryLimiter>,
        start: i64,
        end: i64,
        matchers: &[Matcher],
    ) -> Result<Vec<SeriesSamples>, QuerierError> {
        let mut selected = self.open(limiter, start, end, matchers).await?;
        let mut out = Vec::new();
        while let Some(raw) = selected.next_raw().await? {
            let merged = selected.merged_samples(raw.chunks).await?;
            if merged.is_empty() {
                continue;
            }
            let (samples, histograms) = crate::chunks::split(merged);
            out.push(SeriesSamples {
                labels: raw.labels,
                samples,
                histograms,
            });
        }
        Ok(out)
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
        let limiter = self.limiter(tenant);
        let sources = self.sources(start, end);
        let store = self.store_range(sources);
        self.with_timeout(tenant, async {
            let set = self.read_set_for(sources)?;
            let mut out = BTreeSet::new();
            let answers = fetch::series(&set, tenant, &req).await?;
            let left = left_to_bucket(answers.iter().map(|a| &a.blocks_left_to_bucket));
            // Each answer is counted as it is taken, before it is merged into the result.
            for answer in answers {
                limiter.add(FetchLimit::Series, answer.series.len())?;
                for labels in answer.series {
                    out.insert(labels_from_proto(&labels.labels)?);
                }
            }
            for matchers in selectors {
                let read = |read: BlockCoverage| async move {
                    match store {
                        Some((store, store_end)) => store.series(tenant, (start, store_end), matchers, &read).await,
                        None => Ok(StoreAnswer::default()),
                    }
                };
                let first = read(BlockCoverage::default()).await?;
                let stored = self.check_store(tenant, &left, store.is_some(), first, read).await?;
                for part in stored.parts {
                    limiter.add(FetchLimit::Series, part.len())?;
                    out.extend(part);
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
        let sources = self.sources(start, end);
        let set = self.read_set_for(sources)?;
        let requests = per_selector(selectors).map(|matchers| LabelNamesRequest {
            start_timestamp_ms: start,
            end_timestamp_ms: end,
            matchers,
        });
        let store = self.store_range(sources);
        self.with_timeout(tenant, async {
            let answers: Vec<LabelNamesResponse> = try_join_all(requests.map(|req| {
                let set = &set;
                async move { fetch::label_names(set, tenant, &req).await }
            }))
            .await?
            .into_iter()
            .flatten()
            .collect();
            let left = left_to_bucket(answers.iter().map(|a| &a.blocks_left_to_bucket));
            let mut stored = Vec::new();
            for matchers in selectors_or_all(selectors) {
                let read = |read: BlockCoverage| async move {
                    match store {
                        Some((store, store_end)) => {
                            store.label_names(tenant, (start, store_end), matchers, &read).await
                        }
                        None => Ok(StoreAnswer::default()),
                    }
                };
                let first = read(BlockCoverage::default()).await?;
                let answer = self.check_store(tenant, &left, store.is_some(), first, read).await?;
                stored.extend(answer.parts.into_iter().flatten());
            }
            Ok(sorted_union(answers.into_iter().flat_map(|a| a.names).chain(stored)))
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
        let sources = self.sources(start, end);
        let set = self.read_set_for(sources)?;
        let requests = per_selector(selectors).map(|matchers| LabelValuesRequest {
            name: name.to_owned(),
            start_timestamp_ms: start,
            end_timestamp_ms: end,
            matchers,
        });
        let store = self.store_range(sources);
        self.with_timeout(tenant, async {
            let answers: Vec<LabelValuesResponse> = try_join_all(requests.map(|req| {
                let set = &set;
                async move { fetch::label_values(set, tenant, &req).await }
            }))
            .await?
            .into_iter()
            .flatten()
            .collect();
            let left = left_to_bucket(answers.iter().map(|a| &a.blocks_left_to_bucket));
            let mut stored = Vec::new();
            for matchers in selectors_or_all(selectors) {
                let read = |read: BlockCoverage| async move {
                    match store {
                        Some((store, store_end)) => {
                            store
                                .label_values(tenant, name, (start, store_end), matchers, &read)
                                .await
                        }
                        None => Ok(StoreAnswer::default()),
                    }
                };
                let first = read(BlockCoverage::default()).await?;
                let answer = self.check_store(tenant, &left, store.is_some(), first, read).await?;
                stored.extend(answer.parts.into_iter().flatten());
            }
            Ok(sorted_union(answers.into_iter().flat_map(|a| a.values).chain(stored)))
        })
        .await
    }
}

/// Which sources a query reads (Mimir's query split by time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sources {
    /// Whether the ingesters are asked.
    pub(crate) ingesters: bool,
    /// The end of the range asked of the bucket, `None` when the bucket is not asked.
    pub(crate) store_end: Option<i64>,
}

/// The sources of a query of `[start, end]` at `now_ms`: ingesters unless the query ends more than
/// `ingesters_within` before now; the bucket for the part of the range more than `store_after` before now.
/// Zero durations mean "always".
pub(crate) fn split_by_time(
    start: i64,
    end: i64,
    now_ms: i64,
    ingesters_within: Duration,
    store_after: Duration,
) -> Sources {
    let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let ingesters = ingesters_within.is_zero() || end >= now_ms.saturating_sub(ms(ingesters_within));
    let store_end = if store_after.is_zero() {
        end
    } else {
        end.min(now_ms.saturating_sub(ms(store_after)))
    };
    Sources {
        ingesters,
        store_end: (store_end >= start).then_some(store_end),
    }
}

/// The blocks a set of ingester answers left to the bucket, together.
pub(crate) fn left_to_bucket<'a>(lists: impl IntoIterator<Item = &'a Vec<String>>) -> BTreeSet<String> {
    lists.into_iter().flatten().cloned().collect()
}

/// The consistency check's failure, naming the first few blocks missing.
pub(crate) fn store_consistency_error(tenant: &TenantId, missing: &[String]) -> QuerierError {
    const NAMED: usize = 5;
    let mut blocks = missing.iter().take(NAMED).cloned().collect::<Vec<_>>().join(",");
    if missing.len() > NAMED {
        blocks.push_str(&format!(" and {} more", missing.len() - NAMED));
    }
    QuerierError::StoreConsistency {
        tenant: tenant.to_string(),
        blocks,
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

#[cfg(test)]
mod split_tests {
    use super::*;

    #[test]
    fn split_by_time_cases() {
        const H: i64 = 3600 * 1000;
        let now = 100 * H;
        let (within, after) = (Duration::from_secs(13 * 3600), Duration::from_secs(12 * 3600));
        let cases = [
            (
                "both off: every source, whole range",
                0,
                now,
                Duration::ZERO,
                Duration::ZERO,
                true,
                Some(now),
            ),
            ("recent query: ingesters only", now - H, now, within, after, true, None),
            (
                "old query: bucket only",
                now - 50 * H,
                now - 20 * H,
                within,
                after,
                false,
                Some(now - 20 * H),
            ),
            (
                "spanning query: both, bucket clipped",
                now - 50 * H,
                now,
                within,
                after,
                true,
                Some(now - 12 * H),
            ),
            (
                "ending exactly at the ingesters' edge",
                now - 20 * H,
                now - 13 * H,
                within,
                after,
                true,
                Some(now - 13 * H),
            ),
            ("store after only", now - 2 * H, now, Duration::ZERO, after, true, None),
        ];
        for (name, start, end, w, a, ingesters, store_end) in cases {
            assert_eq!(
                split_by_time(start, end, now, w, a),
                Sources { ingesters, store_end },
                "case {name}"
            );
        }
    }
}
