//! Stage 5, shard: each accepted series gets its token and replica set, and each ingester one body of the
//! series it owns (DESIGN.md §2 step 4).
//!
//! The token is [`series_token`] of the tenant and the labels the ingesters will store (without empty-valued
//! ones and the HA replica label). Series that need no change are copied into the per-ingester bodies as the
//! raw protobuf slices they arrived as; only series that lose something (see [`Accepted::rewrite`]) are
//! re-encoded, into the arena. The output owns its bytes: nothing borrowed from the request arena survives
//! this stage.

use super::validate::{Accepted, TimeWindow};
use crate::distributor::IngesterReplicas;
use bumpalo::Bump;
use bytes::Bytes;
use heddle_model::{LabelRef, TenantId, series_token};
use heddle_proto::prometheus;
use heddle_proto::{IngesterClient, TimeSeriesRef, encode_write_request_raw};
use heddle_ring::InstanceId;
use prost::Message as _;
use std::collections::HashMap;
use std::sync::Arc;

/// The accepted series of a request, grouped into one request per ingester.
#[derive(Debug, Default)]
pub(crate) struct Sharded {
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
    /// Indexes into [`Sharded::series`], in the order the series appear in `body` (so an ingester's
    /// `series_index` maps back through this).
    pub(crate) series: Vec<usize>,
}

/// An ingester's series while grouping.
struct Group<'a> {
    instance: InstanceId,
    client: Arc<dyn IngesterClient>,
    slices: Vec<&'a [u8]>,
    series: Vec<usize>,
}

/// Shards `accepted` (validated series of `tenant`, whose samples outside `window` are dropped) onto `ring`.
pub(crate) fn shard<'a>(
    arena: &'a Bump,
    tenant: &TenantId,
    ring: &IngesterReplicas,
    accepted: &[Accepted<'a>],
    window: TimeWindow,
) -> Sharded {
    let mut out = Sharded::default();
    let mut groups: Vec<Group<'_>> = Vec::new();
    let mut group_of: HashMap<InstanceId, usize> = HashMap::new();
    out.series.reserve(accepted.len());
    for a in accepted {
        let bytes = if a.rewrite {
            rewrite_series(arena, a.labels, a.series, window)
        } else {
            a.series.raw
        };
        let kept = a.labels.iter().filter(|l| !l.value.is_empty());
        let token = series_token(tenant.as_str(), kept.map(|l| (l.name, l.value)));
        let set = ring.for_write(token);
        if out.ring_error.is_none() {
            out.ring_error = set.unavailable;
        }
        let series_idx = out.series.len();
        out.series.push(Forwarded {
            samples: a.samples,
            replicas: set.replicas.len(),
            min_success: set.min_success.max(1),
        });
        for (instance, client) in set.replicas {
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
    out.batches = groups
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
    out
}

/// Re-encodes a series with `labels` (its own, maybe without the HA replica label) minus empty-valued ones,
/// without samples outside `window`, exemplars and histograms, into the arena so it can be framed like a raw
/// slice.
fn rewrite_series<'a>(
    arena: &'a Bump,
    labels: &[LabelRef<'_>],
    ts: &TimeSeriesRef<'_>,
    window: TimeWindow,
) -> &'a [u8] {
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
            .filter(|s| window.contains(s.t))
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

#[cfg(test)]
mod tests;
