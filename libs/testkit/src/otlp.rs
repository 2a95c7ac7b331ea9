//! OTLP/HTTP metrics as a sender writes them: the series of a remote-write request re-expressed as an
//! `ExportMetricsServiceRequest`, gzip-compressed as the OpenTelemetry Collector sends it by default.

use crate::TestkitError;
use crate::client::{PushOutcome, error_chain};
use flate2::Compression;
use flate2::write::GzEncoder;
use heddle_model::TENANT_HEADER;
use heddle_proto::prometheus::WriteRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::{ExportMetricsServiceRequest, ExportMetricsServiceResponse};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, metric::Data, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message as _;
use std::collections::BTreeMap;
use std::io::Write as _;

fn attribute(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        }),
        ..KeyValue::default()
    }
}

/// The OTLP request that Prometheus' translation turns back into `req`'s series: one resource per
/// (`job`, `instance`) with `service.name` and `service.instance.id` (so no `target_info` is written), one
/// gauge per metric name, a point per sample with the other labels as attributes. Label names must already
/// be valid Prometheus names and metric names must not end in a unit or `_total` suffix the translation
/// would add (gauges without a unit get none), which holds for [`crate::SeriesGen`]'s series.
pub fn otlp_request(req: &WriteRequest) -> ExportMetricsServiceRequest {
    // (job, instance) -> metric name -> points, in first-seen order of names within a resource.
    let mut resources: BTreeMap<(String, String), BTreeMap<String, Vec<NumberDataPoint>>> = BTreeMap::new();
    for ts in &req.timeseries {
        let (mut name, mut job, mut instance) = (String::new(), String::new(), String::new());
        let mut attributes = Vec::new();
        for l in &ts.labels {
            match l.name.as_str() {
                "__name__" => name.clone_from(&l.value),
                "job" => job.clone_from(&l.value),
                "instance" => instance.clone_from(&l.value),
                _ => attributes.push(attribute(&l.name, &l.value)),
            }
        }
        let points = resources.entry((job, instance)).or_default().entry(name).or_default();
        points.extend(ts.samples.iter().map(|s| NumberDataPoint {
            attributes: attributes.clone(),
            time_unix_nano: u64::try_from(s.timestamp).unwrap_or(0).saturating_mul(1_000_000),
            value: Some(number_data_point::Value::AsDouble(s.value)),
            ..NumberDataPoint::default()
        }));
    }
    let resource_metrics = resources
        .into_iter()
        .map(|((job, instance), metrics)| ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    attribute("service.name", &job),
                    attribute("service.instance.id", &instance),
                ],
                ..Resource::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics: metrics
                    .into_iter()
                    .map(|(name, data_points)| Metric {
                        name,
                        data: Some(Data::Gauge(Gauge { data_points })),
                        ..Metric::default()
                    })
                    .collect(),
                ..ScopeMetrics::default()
            }],
            ..ResourceMetrics::default()
        })
        .collect();
    ExportMetricsServiceRequest { resource_metrics }
}

/// [`otlp_request`] of `req`, protobuf-encoded and gzip-compressed.
pub fn encode_otlp_request(req: &WriteRequest) -> Result<Vec<u8>, TestkitError> {
    let raw = otlp_request(req).encode_to_vec();
    let mut gz = GzEncoder::new(Vec::with_capacity(raw.len() / 4), Compression::default());
    gz.write_all(&raw)
        .and_then(|()| gz.finish())
        .map_err(|e| TestkitError::Encode {
            what: "gzip",
            detail: e.to_string(),
        })
}

/// Gzip of what `write` writes, compressed as it is written: a body of many megabytes that compresses well
/// (a hostile one) is never held whole.
pub fn gzip_stream(
    write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> Result<Vec<u8>, TestkitError> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    write(&mut gz)
        .and_then(|()| gz.finish())
        .map_err(|e| TestkitError::Encode {
            what: "gzip",
            detail: e.to_string(),
        })
}

/// Posts a gzip-compressed protobuf export request (as [`encode_otlp_request`] makes) to `url`
/// (`.../otlp/v1/metrics`), with `X-Scope-OrgID` when `tenant` is set. A 200 whose `partial_success` refused
/// points keeps status 200 and carries `rejected N data points: <message>` as its body; a full success has an
/// empty body. Transport failures are errors.
pub async fn push_otlp(
    client: &reqwest::Client,
    url: &str,
    tenant: Option<&str>,
    body: Vec<u8>,
) -> Result<PushOutcome, TestkitError> {
    let mut req = client
        .post(url)
        .header("Content-Encoding", "gzip")
        .header("Content-Type", "application/x-protobuf")
        .header("User-Agent", "heddle-testkit")
        .body(body);
    if let Some(t) = tenant {
        req = req.header(TENANT_HEADER, t);
    }
    let resp = req.send().await.map_err(|e| TestkitError::Http {
        url: url.to_owned(),
        detail: error_chain(&e),
    })?;
    let status = resp.status().as_u16();
    let retry_after = crate::client::retry_after(resp.headers());
    let bytes = resp.bytes().await.unwrap_or_default();
    let body = if status == 200 {
        let answer = ExportMetricsServiceResponse::decode(bytes.as_ref())
            .map_err(|e| TestkitError::decode("ExportMetricsServiceResponse", e))?;
        answer.partial_success.map_or_else(String::new, |p| {
            format!("rejected {} data points: {}", p.rejected_data_points, p.error_message)
        })
    } else {
        String::from_utf8_lossy(&bytes).into_owned()
    };
    Ok(PushOutcome {
        status,
        body,
        retry_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SeriesGen;

    /// Every sample of the request is one point, under the resource of its job and instance, with its other
    /// labels as attributes.
    #[test]
    fn carries_every_sample_under_its_resource() {
        let g = SeriesGen::new(7, 50, 4, 1_700_000_000_000);
        let req = g.write_request(0..50, 0..3);
        let otlp = otlp_request(&req);
        let points: usize = otlp
            .resource_metrics
            .iter()
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
            .map(|m| match &m.data {
                Some(Data::Gauge(g)) => g.data_points.len(),
                _ => panic!("not a gauge: {m:?}"),
            })
            .sum();
        assert_eq!(points, 150);
        for r in &otlp.resource_metrics {
            let keys: Vec<&str> = r
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .map(|a| a.key.as_str())
                .collect();
            assert_eq!(keys, ["service.name", "service.instance.id"]);
        }
        assert!(!encode_otlp_request(&req).unwrap().is_empty());
    }
}
