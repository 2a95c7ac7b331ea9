//! Re-framing already-encoded series as a `WriteRequest`, and encoding one with created timestamps.

use super::wire::put_varint;
use crate::prometheus::WriteRequest;
use prost::Message as _;
use prost::encoding::{self, WireType};

/// Re-frames already-encoded `TimeSeries` messages as a `WriteRequest` (field 1, length-delimited each),
/// appending to `out` without re-encoding them. Each item is a message payload such as
/// [`super::TimeSeriesRef::raw`].
pub fn encode_write_request_raw<'b>(series: impl IntoIterator<Item = &'b [u8]>, out: &mut Vec<u8>) {
    for raw in series {
        // Field 1, wire type 2.
        out.push(0x0a);
        put_varint(raw.len() as u64, out);
        out.extend_from_slice(raw);
    }
}

/// `request` encoded as prost encodes it, except that series `i` also carries `created(i)` (when not 0) as
/// its `created_timestamp`, field 6 ([`super::TimeSeriesRef::created`]), which the generated type lacks: the
/// 1.0 schema is Prometheus' own, and only Heddle's internal hop (and Mimir's) uses the field.
pub fn encode_write_request_created(request: &WriteRequest, created: impl Fn(usize) -> i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(request.encoded_len() + 12 * request.timeseries.len());
    for (i, ts) in request.timeseries.iter().enumerate() {
        let t = created(i);
        let field = if t == 0 {
            0
        } else {
            1 + encoding::encoded_len_varint(t as u64)
        };
        encoding::encode_key(1, WireType::LengthDelimited, &mut out);
        encoding::encode_varint((ts.encoded_len() + field) as u64, &mut out);
        ts.encode_raw(&mut out);
        if t != 0 {
            encoding::encode_key(super::decode::CREATED_TIMESTAMP_FIELD, WireType::Varint, &mut out);
            // int64 is a two's-complement varint.
            encoding::encode_varint(t as u64, &mut out);
        }
    }
    for m in &request.metadata {
        encoding::message::encode(3, m, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prometheus::{Label, MetricMetadata, Sample, TimeSeries};
    use bumpalo::Bump;

    #[test]
    fn created_timestamps_ride_on_their_series_and_the_rest_is_prosts_encoding() {
        let series = |name: &str| TimeSeries {
            labels: vec![Label {
                name: "__name__".into(),
                value: name.into(),
            }],
            samples: vec![Sample {
                value: 1.0,
                timestamp: 5,
            }],
            ..TimeSeries::default()
        };
        let request = WriteRequest {
            timeseries: vec![series("a"), series("b"), series("c")],
            metadata: vec![MetricMetadata {
                metric_family_name: "a".into(),
                ..MetricMetadata::default()
            }],
        };
        assert_eq!(encode_write_request_created(&request, |_| 0), request.encode_to_vec());
        let body = encode_write_request_created(&request, |i| [1_000, 0, -3][i]);
        let arena = Bump::new();
        let got = super::super::decode_write_request(&arena, &body).unwrap();
        let created: Vec<i64> = got.timeseries.iter().map(|t| t.created).collect();
        assert_eq!(created, [1_000, 0, -3]);
        assert_eq!(got.metadata.len(), 1);
        assert_eq!(
            WriteRequest::decode(body.as_slice()).unwrap(),
            request,
            "prost skips the field"
        );
    }
}
