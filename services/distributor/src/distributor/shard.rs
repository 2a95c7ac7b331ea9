//! Stage 5, shard: each accepted series gets its token and replica set, and each ingester one body of the
//! series it owns (DESIGN.md §2 step 4).
//!
//! The token is [`series_token`] of the tenant and the labels the ingesters will store (without empty-valued
//! ones and the HA replica label). A metric metadata entry goes to the replicas of the token of the tenant and
//! its family name (Mimir's `ShardByMetricName`), in the same per-ingester request as the series. Series that need no change are copied into the per-ingester bodies as the
//! raw protobuf slices they arrived as; only series that lose something (see [`Accepted::rewrite`]) are
//! re-encoded, into the arena. The output owns its bytes: nothing borrowed from the request arena survives
//! this stage.

use super::validate::{Accepted, TimeWindow};
use crate::distributor::IngesterReplicas;
use bumpalo::Bump;
use bytes::Bytes;
use heddle_model::{LabelRef, MetadataRef, SeriesBatch, TenantId, fnv32a_add, series_token_seeded, tenant_token_seed};
use heddle_proto::{CREATED_TIMESTAMP_FIELD, IngesterClient, encode_write_request_raw, histogram_to_proto};
use heddle_ring::{InstanceId, WriteSets};
use prost::Message as _;
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
    pub(crate) histograms: u64,
    pub(crate) exemplars: u64,
    pub(crate) replicas: usize,
    pub(crate) min_success: usize,
}

/// The request for one ingester.
#[derive(Debug)]
pub(crate) struct Batch {
    pub(crate) instance: InstanceId,
    pub(crate) client: Arc<dyn IngesterClient>,
    /// The series, encoded or (for an ingester in this process) as a batch.
    pub(crate) body: BatchBody,
    /// Indexes into [`Sharded::series`], in the order the series appear in `body` (so an ingester's
    /// `series_index` maps back through this).
    pub(crate) series: Vec<usize>,
}

/// What an ingester receives: an encoded `WriteRequest` (series forwarded as the raw bytes they arrived as, or
/// re-encoded), or, for an ingester in this process ([`IngesterClient::takes_batches`]), the decoded and
/// validated series themselves, so it parses nothing again.
#[derive(Debug)]
pub(crate) enum BatchBody {
    Encoded(Bytes),
    /// Boxed: a batch's buffers are ten times an encoded body's handle.
    Series(Box<SeriesBatch>),
}

impl BatchBody {
    /// Bytes the body holds.
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Encoded(body) => body.len(),
            Self::Series(batch) => batch.bytes(),
        }
    }

    /// Pushes the body to `client`.
    pub(crate) async fn push(
        self,
        client: &dyn IngesterClient,
        tenant: &TenantId,
    ) -> Result<heddle_proto::ingester::PushResponse, tonic::Status> {
        match self {
            Self::Encoded(body) => client.push(tenant, body).await,
            Self::Series(batch) => client.push_batch(tenant, *batch).await,
        }
    }
}

/// Replicas per series the set buffers are sized for (the usual replication factor); more grow them.
const TYPICAL_REPLICAS: usize = 3;

/// The ring token of a metadata entry of `family` for the tenant whose [`tenant_token_seed`] is `seed`:
/// FNV-1a-32 of the tenant and the family name, as Mimir shards metadata.
pub(crate) fn metadata_token(seed: u32, family: &str) -> u32 {
    fnv32a_add(seed, family.as_bytes())
}

/// Shards `accepted` (validated series of `tenant`, whose samples outside `window` are dropped) and
/// `metadata` (validated entries) onto `ring`.
///
/// The ring answers for the whole request at once ([`heddle_ring::Replicas::write_sets`], the series first,
/// then the metadata entries): instances come back as numbers into one table per request, so grouping is a
/// vector indexed by instance number.
pub(crate) fn shard<'a>(
    arena: &'a Bump,
    tenant: &TenantId,
    ring: &IngesterReplicas,
    accepted: &[Accepted<'a>],
    metadata: &[MetadataRef<'_>],
    window: TimeWindow,
) -> Sharded {
    let seed = tenant_token_seed(tenant.as_str());
    let mut token = |i: usize| match accepted.get(i) {
        Some(a) => {
            let kept = a.labels.iter().filter(|l| !l.value.is_empty());
            series_token_seeded(seed, kept.map(|l| (l.name, l.value)))
        }
        None => metadata_token(seed, metadata[i - accepted.len()].family),
    };
    let items = accepted.len() + metadata.len();
    let mut sets = WriteSets::with_capacity(items, TYPICAL_REPLICAS);
    ring.write_sets(items, &mut token, &mut sets);
    let instances = sets.take_instances();

    let mut out = Sharded {
        series: Vec::with_capacity(accepted.len()),
        batches: Vec::with_capacity(instances.len()),
        ring_error: sets.take_unavailable(),
    };
    // Each series' bytes, and per instance number the series it gets, in request order.
    // Encoded bytes are only needed for ingesters reached over the network.
    let encode = instances.iter().any(|(_, client)| !client.takes_batches());
    let mut bytes: Vec<&[u8]> = Vec::with_capacity(if encode { accepted.len() } else { 0 });
    let mut groups: Vec<Vec<usize>> = vec![Vec::new(); instances.len()];
    let mut metadata_groups: Vec<Vec<usize>> = vec![Vec::new(); instances.len()];
    for (m, group) in (0..metadata.len()).flat_map(|m| {
        let set = sets.set(accepted.len() + m);
        set.replicas.iter().map(move |&n| (m, n as usize))
    }) {
        let group = &mut metadata_groups[group];
        if group.last() != Some(&m) {
            group.push(m);
        }
    }
    for (series_idx, a) in accepted.iter().enumerate() {
        if encode {
            bytes.push(if a.rewrite {
                rewrite_series(arena, a, window)
            } else {
                a.series.raw
            });
        }
        let set = sets.set(series_idx);
        out.series.push(Forwarded {
            samples: a.samples,
            histograms: a.histograms.len() as u64,
            exemplars: a.exemplars.len() as u64,
            replicas: set.replicas.len(),
            min_success: set.min_success.max(1),
        });
        for &n in set.replicas {
            let group = &mut groups[n as usize];
            // A ring listing one instance twice must not let it count twice toward quorum.
            if group.last() != Some(&series_idx) {
                group.push(series_idx);
            }
        }
    }
    for (((instance, client), series), entries) in instances.into_iter().zip(groups).zip(metadata_groups) {
        if series.is_empty() && entries.is_empty() {
            continue;
        }
        let body = if client.takes_batches() {
            let mut batch = series_batch(accepted, &series, window);
            for &m in &entries {
                batch.push_metadata(metadata[m]);
            }
            BatchBody::Series(Box::new(batch))
        } else {
            let size: usize = series.iter().map(|&s| bytes[s].len() + 6).sum::<usize>()
                + entries.iter().map(|&m| metadata[m].text_len() + 24).sum::<usize>();
            let mut body = Vec::with_capacity(size);
            encode_write_request_raw(series.iter().map(|&s| bytes[s]), &mut body);
            for &m in &entries {
                encode_metadata(&metadata[m], &mut body);
            }
            BatchBody::Encoded(Bytes::from(body))
        };
        out.batches.push(Batch {
            instance,
            client,
            body,
            series,
        });
    }
    out
}

/// The `series` of `accepted` as an ingester would decode them from their encoded bytes (raw or re-encoded):
/// labels without empty-valued ones (and without the HA replica label, which `labels` already lacks), samples
/// inside `window`, the valid exemplars and histogram samples (as validation left them).
fn series_batch(accepted: &[Accepted<'_>], series: &[usize], window: TimeWindow) -> SeriesBatch {
    let (mut labels, mut samples, mut text) = (0, 0, 0);
    for &s in series {
        let a = &accepted[s];
        labels += a.labels.len();
        samples += a.series.samples.len();
        text += a.labels.iter().map(|l| l.name.len() + l.value.len()).sum::<usize>();
    }
    let mut batch = SeriesBatch::with_capacity(series.len(), labels, samples, text);
    for &s in series {
        let a = &accepted[s];
        let kept = a.labels.iter().filter(|l| !l.value.is_empty()).copied();
        let samples = a.series.samples.iter().filter(|s| window.contains(s.t)).copied();
        // A request is far below the batch's 4 GiB of text (the body size limit refuses it long before).
        if batch
            .push_with_exemplars(kept, samples, a.exemplars.iter().copied())
            .is_err()
        {
            tracing::error!(series = s, "a series batch overflowed; the series is not forwarded");
        } else {
            if let Some(t) = a.created {
                batch.set_created(t);
            }
            batch.push_histograms(a.histograms.iter().map(|h| h.sample.clone()));
        }
    }
    batch
}

/// Re-encodes an accepted series with its `labels` (its own, maybe without the HA replica label) minus
/// empty-valued ones, without samples outside `window`, with its valid `exemplars` and `histograms` and the
/// `created` timestamp it keeps, into the arena so it can be framed like a raw slice.
///
/// Written straight into the arena as `prometheus.TimeSeries` (labels field 1, samples field 2, exemplars
/// field 3, histograms field 4), byte for byte what prost encodes for the same message (proto3: empty
/// strings, a zero value and a zero timestamp are left out; a histogram kept as it came is copied, 1.0 and 2.0
/// encode it alike), then the created timestamp as field 6, which the generated type lacks
/// ([`heddle_proto::CREATED_TIMESTAMP_FIELD`]); without building owned labels per series: with an HA pair every
/// series loses its replica label.
fn rewrite_series<'a>(arena: &'a Bump, accepted: &Accepted<'_>, window: TimeWindow) -> &'a [u8] {
    let Accepted {
        labels,
        series: ts,
        exemplars,
        histograms,
        created,
        ..
    } = accepted;
    let mut out = bumpalo::collections::Vec::with_capacity_in(ts.raw.len(), arena);
    for l in labels.iter().filter(|l| !l.value.is_empty()) {
        put_label(&mut out, 1, l);
    }
    for s in ts.samples.iter().filter(|s| window.contains(s.t)) {
        let has_value = s.v != 0.0;
        let len = if has_value { 9 } else { 0 } + if s.t != 0 { 1 + varint_len(s.t as u64) } else { 0 };
        out.push(key(2, LEN));
        put_varint(&mut out, len as u64);
        if has_value {
            out.push(key(1, FIXED64));
            out.extend_from_slice(&s.v.to_le_bytes());
        }
        if s.t != 0 {
            out.push(key(2, VARINT));
            // int64: negative timestamps are the 10-byte two's-complement varint, as protobuf says.
            put_varint(&mut out, s.t as u64);
        }
    }
    for e in *exemplars {
        // Exemplar{labels 1, value 2 (double), timestamp 3 (int64)}, zero scalars left out as prost does.
        let labels_len: usize = e
            .labels
            .iter()
            .map(|l| 1 + varint_len(label_len(l) as u64) + label_len(l))
            .sum();
        let len =
            labels_len + if e.value != 0.0 { 9 } else { 0 } + if e.t != 0 { 1 + varint_len(e.t as u64) } else { 0 };
        out.push(key(3, LEN));
        put_varint(&mut out, len as u64);
        for l in e.labels {
            put_label(&mut out, 1, l);
        }
        if e.value != 0.0 {
            out.push(key(2, FIXED64));
            out.extend_from_slice(&e.value.to_le_bytes());
        }
        if e.t != 0 {
            out.push(key(3, VARINT));
            put_varint(&mut out, e.t as u64);
        }
    }
    for h in histograms {
        let encoded;
        let bytes = match h.raw {
            Some(raw) => raw,
            None => {
                encoded = histogram_to_proto(&h.sample).encode_to_vec();
                &encoded
            }
        };
        out.push(key(4, LEN));
        put_varint(&mut out, bytes.len() as u64);
        out.extend_from_slice(bytes);
    }
    if let Some(t) = created {
        out.push(key(CREATED_TIMESTAMP_FIELD as u8, VARINT));
        put_varint(&mut out, *t as u64);
    }
    out.into_bump_slice()
}

/// Encoded size of a `prometheus.Label` message's fields.
fn label_len(l: &LabelRef<'_>) -> usize {
    string_field_len(l.name) + string_field_len(l.value)
}

/// A `prometheus.Label` as field `field` of the enclosing message.
fn put_label(out: &mut bumpalo::collections::Vec<'_, u8>, field: u8, l: &LabelRef<'_>) {
    out.push(key(field, LEN));
    put_varint(out, label_len(l) as u64);
    put_string_field(out, 1, l.name);
    put_string_field(out, 2, l.value);
}

/// Appends `m` to an encoded `WriteRequest` as its field 3 (`prometheus.MetricMetadata`: type 1, family 2,
/// help 4, unit 5), byte for byte what prost writes.
fn encode_metadata(m: &MetadataRef<'_>, out: &mut Vec<u8>) {
    let kind = m.kind.wire() as u64;
    let len = if kind != 0 { 1 + varint_len(kind) } else { 0 }
        + string_field_len(m.family)
        + string_field_len(m.help)
        + string_field_len(m.unit);
    let mut put = |b: &[u8]| out.extend_from_slice(b);
    let mut buf = [0u8; 10];
    put(&[key(3, LEN)]);
    put(varint_bytes(len as u64, &mut buf));
    if kind != 0 {
        put(&[key(1, VARINT)]);
        put(varint_bytes(kind, &mut buf));
    }
    for (field, s) in [(2, m.family), (4, m.help), (5, m.unit)] {
        if !s.is_empty() {
            put(&[key(field, LEN)]);
            put(varint_bytes(s.len() as u64, &mut buf));
            put(s.as_bytes());
        }
    }
}

/// `v` as a varint in `buf`.
fn varint_bytes(mut v: u64, buf: &mut [u8; 10]) -> &[u8] {
    let mut n = 0;
    while v >= 0x80 {
        buf[n] = (v as u8) | 0x80;
        v >>= 7;
        n += 1;
    }
    buf[n] = v as u8;
    &buf[..=n]
}

/// Protobuf wire types.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;

/// The one-byte key of field `field` (< 16) with wire type `wire`.
fn key(field: u8, wire: u8) -> u8 {
    (field << 3) | wire
}

fn varint_len(v: u64) -> usize {
    // 1 byte per 7 significant bits, at least one.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn put_varint(out: &mut bumpalo::collections::Vec<'_, u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Encoded size of a proto3 string field (absent when empty).
fn string_field_len(s: &str) -> usize {
    if s.is_empty() {
        0
    } else {
        1 + varint_len(s.len() as u64) + s.len()
    }
}

fn put_string_field(out: &mut bumpalo::collections::Vec<'_, u8>, field: u8, s: &str) {
    if !s.is_empty() {
        out.push(key(field, LEN));
        put_varint(out, s.len() as u64);
        out.extend_from_slice(s.as_bytes());
    }
}

#[cfg(test)]
mod tests;
