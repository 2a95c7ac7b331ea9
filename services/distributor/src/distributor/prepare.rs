//! Steps 1-4 of the write path, synchronously and inside one pooled arena: decompress, decode, validate,
//! rate-limit, shard, and frame one body per ingester.
//!
//! Everything borrowed from the arena dies here: the output ([`Prepared`]) owns its bytes. Series that need
//! no change are copied into the per-ingester bodies as the raw protobuf slices they arrived as; only series
//! that lose something (empty-valued labels, future samples, exemplars, native histograms) are re-encoded.

use super::Distributor;
use crate::error::{InvalidSeries, PushError};
use crate::ha_tracker::HaDecision;
use crate::metrics::{REASON_EXEMPLARS, REASON_NATIVE_HISTOGRAMS};
use crate::outcome::Rejection;
use crate::ring::InstanceId;
use crate::validation::{check_timestamps, series_text, validate_labels};
use bumpalo::Bump;
use bytes::Bytes;
use heddle_model::{LabelRef, TenantId, series_token};
use heddle_proto::prometheus;
use heddle_proto::{
    IngesterClient, SnappyError, TimeSeriesRef, decode_write_request, encode_write_request_raw, snappy_decompress_into,
};
use prost::Message as _;
use std::collections::HashMap;
use std::sync::Arc;

/// A request ready to forward.
#[derive(Debug, Default)]
pub(crate) struct Prepared {
    pub(crate) series_received: usize,
    /// The request came from a non-elected HA replica and was dropped: the 202 message.
    pub(crate) deduplicated: Option<String>,
    /// Series (or some of their samples) refused by validation.
    pub(crate) rejections: Vec<Rejection>,
    /// Every series being forwarded, indexed by the numbers in [`Batch::series`].
    pub(crate) series: Vec<Forwarded>,
    /// One request per ingester.
    pub(crate) batches: Vec<Batch>,
    /// The first ring error met while forming replica sets (why some series have too few replicas).
    pub(crate) ring_error: Option<String>,
}

/// What the quorum logic needs to know about one forwarded series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Forwarded {
    pub(crate) samples: u64,
    pub(crate) replicas: usize,
    pub(crate) min_success: usize,
}

/// The request for one ingester.
#[derive(Debug)]
pub(crate) struct Batch {
    pub(crate) instance: InstanceId,
    pub(crate) client: Arc<dyn IngesterClient>,
    /// Encoded `WriteRequest`.
    pub(crate) body: Bytes,
    /// Indexes into [`Prepared::series`], in the order the series appear in `body` (so an ingester's
    /// `series_index` maps back through this).
    pub(crate) series: Vec<usize>,
}

/// A series that passed validation, before sharding.
struct Accepted<'a> {
    index: usize,
    /// Its labels, without the HA replica label.
    labels: &'a [LabelRef<'a>],
    samples: u64,
    rewrite: bool,
}

/// An ingester's series while grouping.
struct Group<'a> {
    instance: InstanceId,
    client: Arc<dyn IngesterClient>,
    slices: Vec<&'a [u8]>,
    series: Vec<usize>,
}

impl Distributor {
    pub(super) fn prepare(&self, tenant: &TenantId, body: &[u8]) -> Result<Prepared, PushError> {
        let arena = self.arenas.get();
        let arena: &Bump = &arena;
        let raw = snappy_decompress_into(arena, body, self.cfg.max_decompressed_size).map_err(|e| match e {
            SnappyError::TooLarge { declared, limit } => PushError::DecompressedTooLarge { declared, limit },
            SnappyError::Corrupt(detail) => PushError::CorruptSnappy { detail },
        })?;
        let request =
            decode_write_request(arena, raw).map_err(|e| PushError::InvalidProtobuf { detail: e.to_string() })?;
        let timeseries = &request.timeseries[..];
        let limits = self.overrides.get(tenant.as_str());

        let mut prepared = Prepared {
            series_received: timeseries.len(),
            ..Prepared::default()
        };
        // HA pairs: judged on the first series, before validation and rate limiting (as Mimir).
        let mut drop_label: Option<&str> = None;
        if let (Some(tracker), true, Some(first)) = (&self.ha_tracker, limits.accept_ha_samples, timeseries.first()) {
            let find = |name: &str| first.labels.iter().find(|l| l.name == name).map(|l| l.value);
            if let (Some(cluster), Some(replica)) = (find(&limits.ha_cluster_label), find(&limits.ha_replica_label))
                && !cluster.is_empty()
                && !replica.is_empty()
            {
                let samples: u64 = timeseries.iter().map(|ts| ts.samples.len() as u64).sum();
                let now_ms = self.clock.now_ms();
                match tracker.check(
                    tenant.as_str(),
                    cluster,
                    replica,
                    samples,
                    limits.ha_max_clusters,
                    now_ms,
                ) {
                    HaDecision::Accept => drop_label = Some(limits.ha_replica_label.as_str()),
                    HaDecision::Deduplicate { elected } => {
                        prepared.deduplicated = Some(format!(
                            "err-heddle-ha-replica-not-elected: samples from replica {replica:?} of HA cluster \
                             {cluster:?} dropped (tenant={tenant}): replica {elected:?} is elected; another replica \
                             is elected after `distributor.ha_tracker.ha_tracker_failover_timeout` without its samples"
                        ));
                        return Ok(prepared);
                    }
                    HaDecision::TooManyClusters { limit } => {
                        self.metrics
                            .discarded
                            .add(tenant.as_str(), "err-heddle-too-many-ha-clusters", samples);
                        return Err(PushError::TooManyHaClusters {
                            tenant: tenant.to_string(),
                            cluster: cluster.to_owned(),
                            limit,
                        });
                    }
                }
            }
        }

        let grace_ms = i64::try_from(limits.creation_grace_period.as_millis()).unwrap_or(i64::MAX);
        let max_ms = self.clock.now_ms().saturating_add(grace_ms);
        let mut accepted = Vec::with_capacity(timeseries.len());
        let mut accepted_samples = 0u64;
        let (mut histograms, mut exemplars) = (0u64, 0u64);
        for (index, ts) in timeseries.iter().enumerate() {
            histograms += u64::from(ts.histograms);
            exemplars += u64::from(ts.exemplars);
            let (labels, dropped) = without_label(arena, &ts.labels, drop_label);
            let check = match validate_labels(labels, &limits) {
                Ok(check) => check,
                Err(e) => {
                    self.reject(tenant, labels, e, ts.samples.len(), &mut prepared.rejections);
                    continue;
                }
            };
            let mut future = 0;
            if let Some(e) = check_timestamps(&ts.samples, max_ms) {
                if let InvalidSeries::TooFarInFuture { count, .. } = e {
                    future = count;
                }
                self.reject(tenant, labels, e, future, &mut prepared.rejections);
            }
            let samples = ts.samples.len() - future;
            if samples == 0 {
                continue;
            }
            let rewrite = check.has_empty_values || dropped || future > 0 || ts.exemplars > 0 || ts.histograms > 0;
            accepted.push(Accepted {
                index,
                labels,
                samples: samples as u64,
                rewrite,
            });
            accepted_samples += samples as u64;
        }
        if histograms > 0 || exemplars > 0 {
            self.metrics
                .discarded
                .add(tenant.as_str(), REASON_NATIVE_HISTOGRAMS, histograms);
            self.metrics
                .discarded_exemplars(tenant.as_str(), REASON_EXEMPLARS, exemplars);
            tracing::debug!(
                histograms,
                exemplars,
                "dropped native histograms and exemplars (not supported yet)"
            );
        }

        let (rate, burst) = (limits.ingestion_rate, limits.ingestion_burst_size);
        if !self
            .rate_limiter
            .allow(tenant, accepted_samples, self.clock.instant(), rate, burst)
        {
            self.metrics
                .discarded
                .add(tenant.as_str(), "err-heddle-ingestion-rate-limited", accepted_samples);
            return Err(PushError::RateLimited {
                tenant: tenant.to_string(),
                samples: accepted_samples,
                rate,
                burst,
            });
        }
        self.metrics.received_samples(tenant.as_str(), accepted_samples);

        let mut groups: Vec<Group<'_>> = Vec::new();
        let mut group_of: HashMap<InstanceId, usize> = HashMap::new();
        prepared.series.reserve(accepted.len());
        for a in accepted {
            let ts = &timeseries[a.index];
            let bytes = if a.rewrite {
                rewrite_series(arena, a.labels, ts, max_ms)
            } else {
                ts.raw
            };
            let kept = a.labels.iter().filter(|l| !l.value.is_empty());
            let token = series_token(tenant.as_str(), kept.map(|l| (l.name, l.value)));
            let set = self.ring.replica_set(token);
            if prepared.ring_error.is_none() {
                prepared.ring_error = set.unavailable;
            }
            let series_idx = prepared.series.len();
            prepared.series.push(Forwarded {
                samples: a.samples,
                replicas: set.ingesters.len(),
                min_success: set.min_success.max(1),
            });
            for (instance, client) in set.ingesters {
                let g = match group_of.get(&instance) {
                    Some(&g) => g,
                    None => {
                        group_of.insert(instance.clone(), groups.len());
                        groups.push(Group {
                            instance,
                            client,
                            slices: Vec::new(),
                            series: Vec::new(),
                        });
                        groups.len() - 1
                    }
                };
                let group = &mut groups[g];
                // A ring listing one instance twice must not let it count twice toward quorum.
                if group.series.last() == Some(&series_idx) {
                    continue;
                }
                group.slices.push(bytes);
                group.series.push(series_idx);
            }
        }
        prepared.batches = groups
            .into_iter()
            .map(|g| {
                let size: usize = g.slices.iter().map(|s| s.len() + 6).sum();
                let mut body = Vec::with_capacity(size);
                encode_write_request_raw(g.slices.iter().copied(), &mut body);
                Batch {
                    instance: g.instance,
                    client: g.client,
                    body: Bytes::from(body),
                    series: g.series,
                }
            })
            .collect();
        Ok(prepared)
    }

    /// Records a validation failure: message, discard metric, rate-limited warning.
    fn reject(
        &self,
        tenant: &TenantId,
        labels: &[LabelRef<'_>],
        e: InvalidSeries,
        samples: usize,
        out: &mut Vec<Rejection>,
    ) {
        let id = e.id();
        let series = series_text(labels);
        self.metrics.discarded.add(tenant.as_str(), id, samples as u64);
        if let Some(suppressed) = self.warn_limiter.check(self.clock.instant()) {
            tracing::warn!(reason = id, %series, samples, suppressed, error = %e, "discarded invalid series");
        }
        out.push(Rejection {
            reason: id.to_owned(),
            message: format!("{id}: {e} (tenant={tenant}, series={series}): {}", e.remedy()),
        });
    }
}

/// `labels` without the label named `name` (a copy in the arena), and whether it was there.
fn without_label<'a>(arena: &'a Bump, labels: &'a [LabelRef<'a>], name: Option<&str>) -> (&'a [LabelRef<'a>], bool) {
    match name {
        Some(name) if labels.iter().any(|l| l.name == name) => (
            {
                let mut kept = bumpalo::collections::Vec::with_capacity_in(labels.len(), arena);
                kept.extend(labels.iter().filter(|l| l.name != name).copied());
                kept.into_bump_slice()
            },
            true,
        ),
        _ => (labels, false),
    }
}

/// Re-encodes a series with `labels` (its own, maybe without the HA replica label) minus empty-valued ones,
/// without future samples, exemplars and histograms, into the arena so it can be framed like a raw slice.
fn rewrite_series<'a>(arena: &'a Bump, labels: &[LabelRef<'_>], ts: &TimeSeriesRef<'_>, max_ms: i64) -> &'a [u8] {
    let series = prometheus::TimeSeries {
        labels: labels
            .iter()
            .filter(|l| !l.value.is_empty())
            .map(|l| prometheus::Label {
                name: l.name.to_owned(),
                value: l.value.to_owned(),
            })
            .collect(),
        samples: ts
            .samples
            .iter()
            .filter(|s| s.t <= max_ms)
            .map(|s| prometheus::Sample {
                value: s.v,
                timestamp: s.t,
            })
            .collect(),
        exemplars: Vec::new(),
        histograms: Vec::new(),
    };
    arena.alloc_slice_copy(&series.encode_to_vec())
}
