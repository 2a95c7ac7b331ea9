//! The seam between roles: what a distributor or querier needs from an ingester.
//!
//! One trait, two transports: the ingester implements it in-process (single-process mode calls it directly),
//! and [`crate::GrpcIngesterClient`] implements it over `heddle.ingester.v1.Ingester`. Code above this seam
//! cannot tell the two apart.

use crate::ingester::{
    ExemplarQueryRequest, ExemplarQueryResponse, LabelNamesRequest, LabelNamesResponse, LabelValuesRequest,
    LabelValuesResponse, MetricsMetadataRequest, MetricsMetadataResponse, PushResponse, QueryRequest,
    QueryStreamResponse, SeriesRequest, SeriesResponse,
};
use bytes::Bytes;
use futures::stream::BoxStream;
use heddle_model::{SeriesBatch, TenantId};

/// A stream of query results; ends after the last series.
pub type QueryStream = BoxStream<'static, Result<QueryStreamResponse, tonic::Status>>;

/// What distributors and queriers call on an ingester. Errors are gRPC statuses so that both transports
/// report failures the same way (`InvalidArgument` = the caller's fault, not retried; `Unavailable` /
/// `ResourceExhausted` = retry later).
#[async_trait::async_trait]
pub trait IngesterClient: Send + Sync + std::fmt::Debug + 'static {
    /// Appends a remote-write request. `write_request` is an encoded, uncompressed `prometheus.WriteRequest`.
    /// Per-series refusals (out-of-order, ...) come back in [`PushResponse::errors`], not as an `Err`.
    async fn push(&self, tenant: &TenantId, write_request: Bytes) -> Result<PushResponse, tonic::Status>;

    /// Whether [`IngesterClient::push_batch`] is cheaper than [`IngesterClient::push`] for this client: true
    /// for an ingester in the same process, which then appends the caller's decoded, validated series without
    /// parsing a body again. A caller that has both forms picks by this; either gives the same result.
    fn takes_batches(&self) -> bool {
        false
    }

    /// Appends `batch` as [`IngesterClient::push`] appends the equivalent `WriteRequest` (series in order, so
    /// `series_index` in the response counts the batch's series). The default encodes the batch and pushes it.
    async fn push_batch(&self, tenant: &TenantId, batch: SeriesBatch) -> Result<PushResponse, tonic::Status> {
        self.push(tenant, Bytes::from(encode_batch(&batch))).await
    }

    /// Streams the chunks of every matching series that overlap the request's time range, each series once and
    /// in label order (`heddle_model::Labels`' order): the querier merges ingesters' streams series by series
    /// and refuses a stream out of order as invalid data.
    async fn query_stream(&self, tenant: &TenantId, req: QueryRequest) -> Result<QueryStream, tonic::Status>;

    async fn label_names(&self, tenant: &TenantId, req: LabelNamesRequest)
    -> Result<LabelNamesResponse, tonic::Status>;

    async fn label_values(
        &self,
        tenant: &TenantId,
        req: LabelValuesRequest,
    ) -> Result<LabelValuesResponse, tonic::Status>;

    async fn series(&self, tenant: &TenantId, req: SeriesRequest) -> Result<SeriesResponse, tonic::Status>;

    /// The tenant's metric metadata, families in name order, within the request's limits.
    async fn metrics_metadata(
        &self,
        tenant: &TenantId,
        req: MetricsMetadataRequest,
    ) -> Result<MetricsMetadataResponse, tonic::Status>;

    /// The exemplars in the request's range of the series its selectors match, series in label order.
    async fn query_exemplars(
        &self,
        tenant: &TenantId,
        req: ExemplarQueryRequest,
    ) -> Result<ExemplarQueryResponse, tonic::Status>;
}

/// `batch` as an encoded `prometheus.WriteRequest`: series, labels and exemplars in the batch's order, then its
/// metadata.
pub fn encode_batch(batch: &SeriesBatch) -> Vec<u8> {
    let refs = batch.label_refs();
    let labels = |labels: &[heddle_model::LabelRef<'_>]| {
        labels
            .iter()
            .map(|l| crate::prometheus::Label {
                name: l.name.to_owned(),
                value: l.value.to_owned(),
            })
            .collect()
    };
    let mut timeseries: Vec<crate::prometheus::TimeSeries> = batch
        .series()
        .enumerate()
        .map(|(i, (range, samples))| crate::prometheus::TimeSeries {
            labels: labels(&refs[range]),
            samples: samples
                .iter()
                .map(|s| crate::prometheus::Sample {
                    value: s.v,
                    timestamp: s.t,
                })
                .collect(),
            exemplars: Vec::new(),
            histograms: batch.histograms(i).map(crate::histogram_to_proto).collect(),
        })
        .collect();
    let exemplar_refs = batch.exemplar_label_refs();
    for (series, range, sample) in batch.exemplars() {
        timeseries[series].exemplars.push(crate::prometheus::Exemplar {
            labels: labels(&exemplar_refs[range]),
            value: sample.v,
            timestamp: sample.t,
        });
    }
    let request = crate::prometheus::WriteRequest {
        timeseries,
        metadata: batch
            .metadata()
            .iter()
            .map(|m| crate::prometheus::MetricMetadata {
                r#type: m.kind.wire(),
                metric_family_name: m.family.clone(),
                help: m.help.clone(),
                unit: m.unit.clone(),
            })
            .collect(),
    };
    crate::encode_write_request_created(&request, |i| batch.created(i).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use heddle_model::{LabelRef, Sample};

    #[test]
    fn an_encoded_batch_decodes_to_the_same_series() {
        let mut batch = SeriesBatch::default();
        let up = [
            LabelRef {
                name: "__name__",
                value: "up",
            },
            LabelRef {
                name: "job",
                value: "a",
            },
        ];
        batch
            .push(
                up,
                [
                    Sample::new(5, 1.5),
                    Sample::new(6, f64::from_bits(0x7ff0_0000_0000_0002)),
                ],
            )
            .unwrap();
        let trace = [LabelRef {
            name: "trace_id",
            value: "t",
        }];
        let exemplar = heddle_model::ExemplarRef {
            labels: &trace,
            value: 2.0,
            t: 7,
        };
        batch
            .push_with_exemplars([LabelRef { name: "x", value: "ü" }], [], [exemplar])
            .unwrap();
        let metadata = heddle_model::MetadataRef {
            family: "up",
            kind: heddle_model::MetricType::Gauge,
            help: "is it up",
            unit: "",
        };
        batch.push_metadata(metadata);
        let body = encode_batch(&batch);
        let arena = bumpalo::Bump::new();
        let decoded = crate::decode_write_request(&arena, &body).expect("decodes");
        let refs = batch.label_refs();
        assert_eq!(decoded.timeseries.len(), 2);
        for (ts, (labels, samples)) in decoded.timeseries.iter().zip(batch.series()) {
            assert_eq!(ts.labels, &refs[labels]);
            let bits = |s: &[Sample]| s.iter().map(|s| (s.t, s.v.to_bits())).collect::<Vec<_>>();
            assert_eq!(bits(ts.samples), bits(samples));
        }
        assert!(decoded.timeseries[0].exemplars.is_empty());
        assert_eq!(decoded.timeseries[1].exemplars, &[exemplar]);
        assert_eq!(decoded.metadata, &[metadata]);
    }
}
