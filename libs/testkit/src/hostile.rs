//! Small request bodies that cost a server far more than their size if it trusts them: the probes of the
//! hostile integration suite and of `heddle-loadtest probe`. Each is written byte by byte where a prost
//! message would have to hold the decoded form in the test process too.

use crate::TestkitError;
use crate::codec::snappy_compress;
use flate2::Compression;
use flate2::write::GzEncoder;
use std::io::Write as _;

/// Appends `v` as a protobuf varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a length-delimited field: tag, length, bytes.
pub fn put_len(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    put_varint(out, u64::from(field) << 3 | 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn put_uint(out: &mut Vec<u8>, field: u32, v: u64) {
    put_varint(out, u64::from(field) << 3);
    put_varint(out, v);
}

/// `bytes` gzip-compressed.
pub fn gzip(bytes: &[u8]) -> Result<Vec<u8>, TestkitError> {
    let mut gz = GzEncoder::new(Vec::with_capacity(bytes.len() / 64 + 64), Compression::default());
    gz.write_all(bytes)
        .and_then(|()| gz.finish())
        .map_err(|e| TestkitError::Encode {
            what: "gzip",
            detail: e.to_string(),
        })
}

/// An OTLP `ExportMetricsServiceRequest` (uncompressed protobuf) that opens with an empty group of unknown field
/// 99 (`9B 06 9C 06`) and then holds one gauge of `points` empty data points (two bytes each on the wire, a
/// struct of about a hundred bytes once decoded).
pub fn otlp_group_then_empty_points(points: usize) -> Vec<u8> {
    let mut gauge = Vec::with_capacity(points * 2);
    for _ in 0..points {
        gauge.extend_from_slice(&[0x0a, 0x00]);
    }
    let mut metric = Vec::with_capacity(gauge.len() + 32);
    put_len(&mut metric, 1, b"probe_gauge");
    put_len(&mut metric, 5, &gauge);
    drop(gauge);
    let mut scope = Vec::with_capacity(metric.len() + 8);
    put_len(&mut scope, 2, &metric);
    drop(metric);
    let mut resource = Vec::with_capacity(scope.len() + 8);
    put_len(&mut resource, 2, &scope);
    drop(scope);
    let mut request = Vec::with_capacity(resource.len() + 12);
    request.extend_from_slice(&[0x9b, 0x06, 0x9c, 0x06]);
    put_len(&mut request, 1, &resource);
    request
}

/// An OTLP request (uncompressed protobuf) with one classic histogram point of `buckets` explicit bounds whose
/// one attribute has a value of `value_len` bytes: the translation writes a `_bucket` series per bound, each
/// with a copy of the attribute, so the output is about `buckets * value_len` bytes while the gzipped body is
/// a few KB.
pub fn otlp_label_amplification(buckets: usize, value_len: usize) -> Vec<u8> {
    let mut any_value = Vec::new();
    put_len(&mut any_value, 1, "a".repeat(value_len).as_bytes());
    let mut attribute = Vec::new();
    put_len(&mut attribute, 1, b"big");
    put_len(&mut attribute, 2, &any_value);
    let mut point = Vec::new();
    put_len(&mut point, 9, &attribute);
    point.push(3 << 3 | 1); // time_unix_nano (fixed64)
    point.extend_from_slice(&1_700_000_000_000_000_000u64.to_le_bytes());
    point.push(4 << 3 | 1); // count (fixed64)
    point.extend_from_slice(&(buckets as u64 + 1).to_le_bytes());
    let mut counts = Vec::new();
    let mut bounds = Vec::new();
    for i in 0..=buckets {
        counts.extend_from_slice(&1u64.to_le_bytes());
        if i < buckets {
            bounds.extend_from_slice(&(i as f64).to_le_bytes());
        }
    }
    put_len(&mut point, 6, &counts);
    put_len(&mut point, 7, &bounds);
    let mut histogram = Vec::new();
    put_len(&mut histogram, 1, &point);
    put_uint(&mut histogram, 2, 2); // aggregation_temporality: cumulative
    let mut metric = Vec::new();
    put_len(&mut metric, 1, b"probe_histogram");
    put_len(&mut metric, 9, &histogram);
    let mut scope = Vec::new();
    put_len(&mut scope, 2, &metric);
    let mut resource = Vec::new();
    put_len(&mut resource, 2, &scope);
    let mut request = Vec::new();
    put_len(&mut request, 1, &resource);
    request
}

/// A remote-read `ReadRequest` of `queries` empty queries, snappy-compressed: two bytes per query on the wire.
pub fn remote_read_empty_queries(queries: usize) -> Result<Vec<u8>, TestkitError> {
    let mut raw = Vec::with_capacity(queries * 2);
    for _ in 0..queries {
        raw.extend_from_slice(&[0x0a, 0x00]);
    }
    snappy_compress(&raw)
}

/// The protobuf of one integer native histogram (remote write 1.0 and 2.0 share its field numbers) at `t` with
/// `buckets` positive buckets of schema 8 in one span, all deltas zero (one byte each).
fn zero_bucket_histogram(buckets: usize, t: i64) -> Vec<u8> {
    let mut span = Vec::new();
    span.push(1 << 3); // offset (sint32) 0
    span.push(0);
    put_uint(&mut span, 2, buckets as u64); // length
    let mut h = Vec::with_capacity(buckets + 64);
    put_uint(&mut h, 1, 0); // count_int
    put_uint(&mut h, 4, 16); // schema 8, zigzag
    put_len(&mut h, 11, &span);
    put_varint(&mut h, 12 << 3 | 2); // positive_deltas, packed sint64
    put_varint(&mut h, buckets as u64);
    h.resize(h.len() + buckets, 0);
    put_uint(&mut h, 15, t as u64);
    h
}

/// A snappy remote-write body of one series `probe_histogram` holding one native histogram of `buckets`
/// buckets: remote write 1.0 when `v2` is false, 2.0 otherwise.
pub fn histogram_buckets_request(buckets: usize, t: i64, v2: bool) -> Result<Vec<u8>, TestkitError> {
    let histogram = zero_bucket_histogram(buckets, t);
    let mut series = Vec::with_capacity(histogram.len() + 64);
    let mut request = Vec::with_capacity(histogram.len() + 96);
    if v2 {
        put_len(&mut series, 1, &[1, 2]); // labels_refs: symbols 1 and 2
        put_len(&mut series, 3, &histogram);
        for symbol in ["", "__name__", "probe_histogram"] {
            put_len(&mut request, 4, symbol.as_bytes());
        }
        put_len(&mut request, 5, &series);
    } else {
        let mut label = Vec::new();
        put_len(&mut label, 1, b"__name__");
        put_len(&mut label, 2, b"probe_histogram");
        put_len(&mut series, 1, &label);
        put_len(&mut series, 4, &histogram);
        put_len(&mut request, 1, &series);
    }
    snappy_compress(&request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use heddle_proto::prometheus::{ReadRequest, WriteRequest};
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    use prost::Message;

    #[test]
    fn the_otlp_group_body_decodes_to_the_points_it_claims() {
        let body = otlp_group_then_empty_points(1000);
        assert_eq!(&body[..4], &[0x9b, 0x06, 0x9c, 0x06]);
        let req = ExportMetricsServiceRequest::decode(body.as_slice()).expect("prost skips the group");
        let metric = &req.resource_metrics[0].scope_metrics[0].metrics[0];
        match &metric.data {
            Some(Data::Gauge(g)) => assert_eq!(g.data_points.len(), 1000),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_amplifying_otlp_body_holds_one_histogram_point_with_a_long_attribute() {
        let body = otlp_label_amplification(10, 1000);
        let req = ExportMetricsServiceRequest::decode(body.as_slice()).expect("decodes");
        let metric = &req.resource_metrics[0].scope_metrics[0].metrics[0];
        match &metric.data {
            Some(Data::Histogram(h)) => {
                let p = &h.data_points[0];
                assert_eq!((p.explicit_bounds.len(), p.bucket_counts.len()), (10, 11));
                assert_eq!(p.attributes[0].key, "big");
                assert_eq!(p.count, 11);
            }
            other => panic!("{other:?}"),
        }
        assert!(gzip(&otlp_label_amplification(1000, 1 << 20)).unwrap().len() < 64 << 10);
    }

    #[test]
    fn the_remote_read_body_holds_empty_queries() {
        let body = remote_read_empty_queries(100).unwrap();
        let raw = crate::codec::snappy_decompress(&body).unwrap();
        assert_eq!(ReadRequest::decode(raw.as_slice()).unwrap().queries.len(), 100);
    }

    #[test]
    fn the_histogram_bodies_hold_one_histogram_of_the_bucket_count() {
        let one = crate::codec::snappy_decompress(&histogram_buckets_request(300, 5, false).unwrap()).unwrap();
        let req = WriteRequest::decode(one.as_slice()).unwrap();
        let h = &req.timeseries[0].histograms[0];
        assert_eq!((h.schema, h.timestamp, h.positive_deltas.len()), (8, 5, 300));
        assert_eq!(h.positive_spans[0].length, 300);
        let two = histogram_buckets_request(300, 5, true).unwrap();
        let v1 = crate::codec::decode_write_request_v2(&two).unwrap();
        assert_eq!(v1.timeseries[0].histograms[0].positive_deltas.len(), 300);
        assert_eq!(v1.timeseries[0].labels[0].value, "probe_histogram");
    }
}
