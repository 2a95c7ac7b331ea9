//! Created timestamps through the distributor: kept or dropped per tenant and protocol, forwarded to the
//! network ingester (as `TimeSeries` field 6) and to the one in this process (in the batch) alike.

use super::RemoteWriteVersion;
use crate::distributor::tests::distributor_with;
use crate::testutil::*;
use bumpalo::Bump;
use heddle_limits::Limits;
use heddle_proto::IngesterClient;
use heddle_proto::testing::FakeIngester;
use heddle_ring::FixedReplicas;
use heddle_testkit::codec::write_request_v2;
use http::StatusCode;
use prost::Message as _;
use std::sync::Arc;

/// The created timestamp of every series the ingester received, by metric name.
fn received(fake: &FakeIngester) -> Vec<(String, i64)> {
    let arena = Bump::new();
    let mut out = Vec::new();
    for (_, body) in fake.pushes() {
        let req = heddle_proto::decode_write_request(&arena, &body).unwrap();
        for ts in req.timeseries {
            let name = ts.labels.iter().find(|l| l.name == "__name__").unwrap().value;
            out.push((name.to_owned(), ts.created));
        }
    }
    out.sort();
    out
}

/// A 2.0 body of three counters: one created a minute before its sample, one with a created timestamp
/// far outside the accepted window (past the creation grace period), one without.
fn body() -> Vec<u8> {
    let sent = [
        series(&[("__name__", "a_total")], &[(NOW_MS, 3.0)]),
        series(&[("__name__", "b_total")], &[(NOW_MS, 4.0)]),
        series(&[("__name__", "c_total")], &[(NOW_MS, 5.0)]),
    ];
    let mut request = write_request_v2(&heddle_proto::prometheus::WriteRequest {
        timeseries: sent.to_vec(),
        ..Default::default()
    });
    request.timeseries[0].samples[0].start_timestamp = NOW_MS - 60_000;
    request.timeseries[1].created_timestamp = NOW_MS + 3_600_000;
    snappy(&request.encode_to_vec())
}

#[tokio::test]
async fn a_tenant_with_zero_ingestion_gets_its_created_timestamps_forwarded() {
    for batches in [false, true] {
        for enabled in [false, true] {
            let fake = Arc::new(if batches {
                FakeIngester::new().taking_batches()
            } else {
                FakeIngester::new()
            });
            let ring = Arc::new(FixedReplicas::single("i", fake.clone() as Arc<dyn IngesterClient>));
            let limits = Limits {
                created_timestamp_zero_ingestion_enabled: enabled,
                ..Limits::default()
            };
            let (d, _r) = distributor_with(ring, limits);
            let outcome = d
                .push_version(&tenant(), RemoteWriteVersion::V2, &body())
                .await
                .unwrap();
            assert_eq!(outcome.status(), StatusCode::OK, "{}", outcome.body());
            let want_a = if enabled { NOW_MS - 60_000 } else { 0 };
            assert_eq!(
                received(&fake),
                [("a_total".into(), want_a), ("b_total".into(), 0), ("c_total".into(), 0)],
                "batches {batches}, enabled {enabled}: one outside the window is dropped, as the head would refuse it"
            );
        }
    }
}

#[tokio::test]
async fn a_remote_write_1_series_field_6_is_stripped_unless_the_tenant_keeps_it() {
    for enabled in [false, true] {
        let fake = Arc::new(FakeIngester::new());
        let ring = Arc::new(FixedReplicas::single("i", fake.clone() as Arc<dyn IngesterClient>));
        let limits = Limits {
            created_timestamp_zero_ingestion_enabled: enabled,
            ..Limits::default()
        };
        let (d, _r) = distributor_with(ring, limits);
        let request = heddle_proto::prometheus::WriteRequest {
            timeseries: vec![series(&[("__name__", "a_total")], &[(NOW_MS, 3.0)])],
            ..Default::default()
        };
        let encoded = heddle_proto::encode_write_request_created(&request, |_| NOW_MS - 1);
        let outcome = d.push(&tenant(), &snappy(&encoded)).await.unwrap();
        assert_eq!(outcome.status(), StatusCode::OK);
        let want = if enabled { NOW_MS - 1 } else { 0 };
        assert_eq!(received(&fake), [("a_total".into(), want)]);
    }
}
