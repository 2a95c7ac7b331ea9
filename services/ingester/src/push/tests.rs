//! Push-path tests: series limits, out-of-bounds samples, instance limits, partial acceptance.

use crate::{Ingester, IngesterConfig, InstanceLimitsConfig, TsdbConfig};
use bytes::Bytes;
use heddle_limits::{Limits, Overrides};
use heddle_model::{ManualClock, TenantId};
use heddle_proto::IngesterClient;
use heddle_proto::ingester::PushResponse;
use heddle_proto::prometheus::{Label, Sample, TimeSeries, WriteRequest};
use heddle_server::DiscardedSamples;
use prometheus_client::registry::Registry;
use prost::Message as _;
use std::path::Path;
use std::sync::Arc;

const T0: i64 = 1_700_000_000_000;
const HOUR: i64 = 3_600_000;
/// The ingester's clock in these tests: an empty head accepts samples from `T0` (one block range before) on,
/// and none after `NOW + 10m` (the default creation grace period).
const NOW: i64 = T0 + 2 * HOUR;

struct Setup {
    ingester: Arc<Ingester>,
    registry: Registry,
    discarded: DiscardedSamples,
}

async fn open(dir: &Path, instance_limits: InstanceLimitsConfig, limits: Limits) -> Setup {
    let mut registry = Registry::default();
    let discarded = DiscardedSamples::register(&mut registry);
    let cfg = IngesterConfig {
        instance_limits,
        ..IngesterConfig::default()
    };
    let tsdb = TsdbConfig {
        dir: dir.to_path_buf(),
        ..TsdbConfig::default()
    };
    let ingester = Ingester::new(&cfg, tsdb, None, &mut registry, discarded.clone());
    ingester.set_overrides(Arc::new(Overrides::new(limits)));
    ingester.set_clock(Arc::new(ManualClock::new(NOW)));
    ingester.open_existing().await.unwrap();
    Setup {
        ingester,
        registry,
        discarded,
    }
}

fn ts(name: &str, id: &str, samples: &[i64]) -> TimeSeries {
    TimeSeries {
        labels: vec![
            Label {
                name: "__name__".into(),
                value: name.into(),
            },
            Label {
                name: "id".into(),
                value: id.into(),
            },
        ],
        samples: samples
            .iter()
            .map(|&timestamp| Sample { value: 1.0, timestamp })
            .collect(),
        ..TimeSeries::default()
    }
}

fn tenant(id: &str) -> TenantId {
    TenantId::new(id).unwrap()
}

async fn push(i: &Ingester, t: &str, series: Vec<TimeSeries>) -> Result<PushResponse, tonic::Status> {
    let body = WriteRequest {
        timeseries: series,
        metadata: Vec::new(),
    }
    .encode_to_vec();
    i.push(&tenant(t), Bytes::from(body)).await
}

fn limits(user: usize, metric: usize) -> Limits {
    Limits {
        max_global_series_per_user: user,
        max_global_series_per_metric: metric,
        ..Limits::default()
    }
}

#[tokio::test]
async fn series_limit_per_tenant_refuses_only_new_series() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), InstanceLimitsConfig::default(), limits(2, 0)).await;
    let r = push(
        &s.ingester,
        "a",
        vec![ts("m", "1", &[T0]), ts("m", "2", &[T0]), ts("m", "3", &[T0, T0 + 1])],
    )
    .await
    .unwrap();
    assert_eq!(r.samples_ingested, 2, "the first two series are created");
    assert_eq!(r.errors.len(), 1);
    let e = &r.errors[0];
    assert_eq!(e.series_index, 2);
    assert_eq!(e.reason, "err-heddle-max-series-per-user");
    assert_eq!(e.samples_rejected, 2);
    for want in [
        "tenant=a",
        r#"id="3""#,
        "limit of 2",
        "limits.max_global_series_per_user",
        "--ingester.max-global-series-per-user",
    ] {
        assert!(e.message.contains(want), "{want:?} not in {}", e.message);
    }
    let r = push(
        &s.ingester,
        "a",
        vec![ts("m", "1", &[T0 + 10]), ts("m", "4", &[T0 + 10])],
    )
    .await
    .unwrap();
    assert_eq!(r.samples_ingested, 1, "existing series still take samples at the limit");
    assert_eq!(r.errors[0].series_index, 1);
    let other = push(&s.ingester, "b", vec![ts("m", "1", &[T0]), ts("m", "2", &[T0])])
        .await
        .unwrap();
    assert!(other.errors.is_empty(), "tenants have their own limit");
    assert_eq!(s.discarded.get("a", "err-heddle-max-series-per-user"), 3);
    let text = heddle_server::encode_metrics(&s.registry);
    assert!(
        text.contains(r#"heddle_discarded_samples_total{tenant="a",reason="err-heddle-max-series-per-user"} 3"#),
        "{text}"
    );
}

#[tokio::test]
async fn series_limit_per_metric() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), InstanceLimitsConfig::default(), limits(0, 1)).await;
    let r = push(
        &s.ingester,
        "a",
        vec![ts("m", "1", &[T0]), ts("m", "2", &[T0]), ts("n", "1", &[T0])],
    )
    .await
    .unwrap();
    assert_eq!(r.samples_ingested, 2);
    assert_eq!(r.errors.len(), 1);
    assert_eq!(r.errors[0].reason, "err-heddle-max-series-per-metric");
    assert!(
        r.errors[0].message.contains("limits.max_global_series_per_metric"),
        "{}",
        r.errors[0].message
    );
}

#[tokio::test]
async fn limits_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path(), InstanceLimitsConfig::default(), limits(2, 0)).await;
        push(&s.ingester, "a", vec![ts("m", "1", &[T0]), ts("m", "2", &[T0])])
            .await
            .unwrap();
        s.ingester.close().await;
    }
    let s = open(dir.path(), InstanceLimitsConfig::default(), limits(2, 0)).await;
    let r = push(&s.ingester, "a", vec![ts("m", "3", &[T0 + 1]), ts("m", "2", &[T0 + 1])])
        .await
        .unwrap();
    assert_eq!(r.samples_ingested, 1, "replayed series count toward the limit");
    assert_eq!(r.errors[0].reason, "err-heddle-max-series-per-user");
}

#[tokio::test]
async fn limits_come_from_the_source_per_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), InstanceLimitsConfig::default(), limits(0, 0)).await;
    let overrides = Overrides::new(limits(0, 0));
    overrides
        .apply_yaml("overrides:\n  small:\n    max_global_series_per_user: 1\n")
        .unwrap();
    s.ingester.set_overrides(Arc::new(overrides));
    let two = || vec![ts("m", "1", &[T0]), ts("m", "2", &[T0])];
    assert_eq!(push(&s.ingester, "small", two()).await.unwrap().errors.len(), 1);
    assert_eq!(push(&s.ingester, "big", two()).await.unwrap().errors.len(), 0);
}

#[tokio::test]
async fn samples_older_than_the_head_range_are_out_of_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), InstanceLimitsConfig::default(), limits(0, 0)).await;
    push(&s.ingester, "a", vec![ts("m", "1", &[T0])]).await.unwrap();
    let r = push(
        &s.ingester,
        "a",
        vec![
            ts("m", "2", &[T0 - 2 * HOUR, T0 - HOUR / 2]),
            ts("m", "3", &[T0 - HOUR - 1]),
            ts("m", "4", &[T0 - HOUR]),
        ],
    )
    .await
    .unwrap();
    assert_eq!(r.samples_ingested, 2, "samples within 1h of the newest are accepted");
    assert_eq!(r.errors.len(), 2, "{:?}", r.errors);
    assert_eq!(r.errors[0].series_index, 0);
    assert_eq!(r.errors[0].reason, "err-heddle-sample-out-of-bounds");
    assert_eq!(r.errors[0].samples_rejected, 1);
    let m = &r.errors[0].message;
    for want in [
        "tenant=a",
        r#"id="2""#,
        &format!("ts={}", T0 - 2 * HOUR),
        &format!("{}", T0 - HOUR),
    ] {
        assert!(m.contains(want), "{want:?} not in {m}");
    }
    assert_eq!(r.errors[1].series_index, 1);
    assert_eq!(s.discarded.get("a", "err-heddle-sample-out-of-bounds"), 2);
    let back = push(&s.ingester, "b", vec![ts("m", "1", &[T0])]).await.unwrap();
    assert!(
        back.errors.is_empty(),
        "an empty head accepts one block range back: {:?}",
        back.errors
    );
}

/// Bounds from the ingester's clock, for an empty head too: nothing past now + the creation grace period
/// (`i64::MAX` included) and, while the head is empty, nothing before now - one block range (`i64::MIN`
/// included); each refusal names the sample, the bound and the flag, is counted, and the request's other
/// samples land.
#[tokio::test]
async fn samples_far_from_the_clock_are_refused_for_an_empty_head_too() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), InstanceLimitsConfig::default(), limits(0, 0)).await;
    let grace = 10 * 60_000;
    let r = push(
        &s.ingester,
        "fresh",
        vec![
            ts("m", "min", &[i64::MIN]),
            ts("m", "max", &[NOW, i64::MAX]),
            ts("m", "old", &[T0 - 1, T0]),
            ts("m", "ok", &[NOW + grace]),
        ],
    )
    .await
    .unwrap();
    assert_eq!(r.samples_ingested, 3, "{:?}", r.errors);
    let got: Vec<(u32, &str, u32)> = r
        .errors
        .iter()
        .map(|e| (e.series_index, e.reason.as_str(), e.samples_rejected))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, "err-heddle-sample-out-of-bounds", 1),
            (1, "err-heddle-too-far-in-future", 1),
            (2, "err-heddle-sample-out-of-bounds", 1),
        ]
    );
    let min = &r.errors[0].message;
    for want in [
        &format!("ts={}", i64::MIN),
        &format!("oldest accepted timestamp is {T0} ms"),
        "--blocks-storage.tsdb.block-ranges-period",
        "tenant=fresh",
        r#"id="min""#,
    ] {
        assert!(min.contains(want), "{want:?} not in {min}");
    }
    let max = &r.errors[1].message;
    for want in [
        &format!("ts={}", i64::MAX),
        &format!("newest accepted timestamp is {} ms", NOW + grace),
        "--validation.create-grace-period",
    ] {
        assert!(max.contains(want), "{want:?} not in {max}");
    }
    assert_eq!(s.discarded.get("fresh", "err-heddle-sample-out-of-bounds"), 2);
    assert_eq!(s.discarded.get("fresh", "err-heddle-too-far-in-future"), 1);
    let head = s.ingester.head(&tenant("fresh")).unwrap();
    assert_eq!(head.stats().min_time, Some(T0));
    assert_eq!(head.stats().max_time, Some(NOW + grace));
    // Nothing far away reached the head, so a forced flush has one range to write, not 10^12.
    let flushed = s.ingester.flush(&[]).await.unwrap();
    assert_eq!(flushed.blocks_written, 2, "{flushed:?}");
}

#[tokio::test]
async fn ingester_errors_keep_request_indexes_after_filtering() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), InstanceLimitsConfig::default(), limits(0, 0)).await;
    push(&s.ingester, "a", vec![ts("m", "1", &[T0])]).await.unwrap();
    let r = push(
        &s.ingester,
        "a",
        vec![
            ts("m", "2", &[T0 - 3 * HOUR]),
            ts("m", "1", &[T0 - 1]),
            ts("m", "5", &[T0]),
        ],
    )
    .await
    .unwrap();
    let got: Vec<(u32, &str)> = r.errors.iter().map(|e| (e.series_index, e.reason.as_str())).collect();
    assert_eq!(
        got,
        vec![
            (0, "err-heddle-sample-out-of-bounds"),
            (1, "err-heddle-sample-out-of-order")
        ]
    );
    assert!(r.errors[1].message.contains(r#"id="1""#), "{}", r.errors[1].message);
}

#[tokio::test]
async fn instance_limits_answer_unavailable_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(
        dir.path(),
        InstanceLimitsConfig {
            max_inflight_push_requests: 1,
            max_tenants: 1,
            max_series: 3,
            ..InstanceLimitsConfig::default()
        },
        limits(0, 0),
    )
    .await;
    let held = s.ingester.limits().instance.start_push().unwrap();
    let err = push(&s.ingester, "a", vec![ts("m", "1", &[T0])]).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable);
    assert!(
        err.message().contains("max_inflight_push_requests"),
        "{}",
        err.message()
    );
    drop(held);

    push(&s.ingester, "a", vec![ts("m", "1", &[T0]), ts("m", "2", &[T0])])
        .await
        .unwrap();
    let err = push(&s.ingester, "b", vec![ts("m", "1", &[T0])]).await.unwrap_err();
    assert_eq!(
        err.code(),
        tonic::Code::Unavailable,
        "a second tenant is over max_tenants"
    );
    assert!(err.message().contains("max_tenants"), "{}", err.message());

    let err = push(&s.ingester, "a", vec![ts("m", "3", &[T0 + 1]), ts("m", "4", &[T0 + 1])])
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable);
    assert!(err.message().contains("max_series"), "{}", err.message());
    let r = push(&s.ingester, "a", vec![ts("m", "3", &[T0 + 1]), ts("m", "1", &[T0 + 1])])
        .await
        .unwrap();
    assert!(
        r.errors.is_empty(),
        "the refused push created nothing: one slot is still free"
    );
    assert_eq!(r.samples_ingested, 2);
}

#[tokio::test(start_paused = true)]
async fn instance_ingestion_rate() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(
        dir.path(),
        InstanceLimitsConfig {
            max_ingestion_rate: 3.0,
            ..InstanceLimitsConfig::default()
        },
        limits(0, 0),
    )
    .await;
    push(&s.ingester, "a", vec![ts("m", "1", &[T0, T0 + 1, T0 + 2])])
        .await
        .unwrap();
    let err = push(&s.ingester, "a", vec![ts("m", "1", &[T0 + 3])]).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable);
    assert!(err.message().contains("max_ingestion_rate"), "{}", err.message());
    tokio::time::advance(std::time::Duration::from_secs(1)).await;
    push(&s.ingester, "a", vec![ts("m", "1", &[T0 + 3])]).await.unwrap();
}

#[tokio::test]
async fn series_dropped_by_head_truncation_free_their_slots() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), InstanceLimitsConfig::default(), limits(2, 1)).await;
    push(&s.ingester, "a", vec![ts("m", "1", &[T0]), ts("n", "1", &[T0])])
        .await
        .unwrap();
    let head = s.ingester.head(&tenant("a")).unwrap();
    head.truncate(T0 + HOUR).unwrap();
    assert_eq!(head.stats().series, 0, "truncation dropped both series");
    let admission = s.ingester.tenant(&tenant("a")).unwrap();
    assert_eq!(
        admission.admission().metric_series("m"),
        0,
        "the head told the admission"
    );
    assert_eq!(s.ingester.metrics().memory_series.get(), 0);
    let r = push(
        &s.ingester,
        "a",
        vec![ts("m", "2", &[T0 + 2 * HOUR]), ts("n", "2", &[T0 + 2 * HOUR])],
    )
    .await
    .unwrap();
    assert!(
        r.errors.is_empty(),
        "the per-user and per-metric counts were rebuilt: {:?}",
        r.errors
    );
}

/// `blocks_storage.tsdb.empty_head_sample_age_limit` widens what an empty head accepts, for a backfill; the
/// head's own window then applies as usual.
#[tokio::test]
async fn the_empty_head_age_limit_lets_a_fresh_tenant_be_backfilled() {
    let dir = tempfile::tempdir().unwrap();
    let mut registry = Registry::default();
    let discarded = DiscardedSamples::register(&mut registry);
    let tsdb = TsdbConfig {
        dir: dir.path().to_path_buf(),
        empty_head_sample_age_limit: std::time::Duration::from_secs(24 * 3600),
        ..TsdbConfig::default()
    };
    let ingester = Ingester::new(&IngesterConfig::default(), tsdb, None, &mut registry, discarded);
    ingester.set_clock(Arc::new(ManualClock::new(NOW)));
    ingester.open_existing().await.unwrap();
    let r = push(&ingester, "a", vec![ts("m", "1", &[NOW - 20 * HOUR, NOW - 19 * HOUR])])
        .await
        .unwrap();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let r = push(&ingester, "b", vec![ts("m", "1", &[NOW - 25 * HOUR])])
        .await
        .unwrap();
    assert_eq!(r.errors[0].reason, "err-heddle-sample-out-of-bounds");
    assert!(
        r.errors[0].message.contains(&format!("{} ms", NOW - 24 * HOUR)),
        "{}",
        r.errors[0].message
    );
}

/// Everything an ingester holds for tenant `t`: labels and chunk bytes of every series, in label order.
async fn stored(i: &Ingester, t: &str) -> Vec<String> {
    use futures::StreamExt as _;
    let req = heddle_proto::ingester::QueryRequest {
        start_timestamp_ms: i64::MIN,
        end_timestamp_ms: i64::MAX,
        matchers: vec![heddle_proto::prometheus::LabelMatcher {
            r#type: 2, // regex match
            name: "__name__".into(),
            value: ".+".into(),
        }],
    };
    let mut stream = i.query_stream(&tenant(t), req).await.unwrap();
    let mut out = Vec::new();
    while let Some(msg) = stream.next().await {
        for s in msg.unwrap().series {
            out.push(format!("{:?} {:?}", s.labels, s.chunks));
        }
    }
    out
}

/// A distributor in the same process hands its validated series over as a [`heddle_model::SeriesBatch`]
/// instead of an encoded body: every outcome (appended, out of order, out of bounds, in the future, invalid
/// labels, over a series limit, no samples) and every stored byte must be what the encoded request gives.
#[tokio::test]
async fn a_batch_is_appended_exactly_as_its_encoded_request() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let encoded = open(d1.path(), InstanceLimitsConfig::default(), limits(3, 0)).await;
    let batched = open(d2.path(), InstanceLimitsConfig::default(), limits(3, 0)).await;
    let mut unsorted = ts("up", "9", &[T0 + 1_000]);
    unsorted.labels.reverse();
    let rounds = vec![
        vec![
            ts("up", "1", &[T0 + 1_000, T0 + 2_000]),
            ts("up", "2", &[]),
            ts("up", "3", &[NOW + HOUR]),
            ts("up", "4", &[T0 + 500]),
            unsorted,
        ],
        vec![
            ts("up", "1", &[T0 + 1_500, T0 + 3_000, T0 + 3_000]),
            ts("up", "4", &[T0 + 3_000]),
            ts("up", "5", &[T0 + 3_000]),
            ts("up", "6", &[T0 + 3_000]),
            ts("up", "7", &[T0 - HOUR]),
        ],
    ];
    for series in rounds {
        let want = push(&encoded.ingester, "t", series.clone()).await.unwrap();
        let mut batch = heddle_model::SeriesBatch::default();
        for s in &series {
            batch
                .push(
                    s.labels.iter().map(|l| heddle_model::LabelRef {
                        name: &l.name,
                        value: &l.value,
                    }),
                    s.samples
                        .iter()
                        .map(|x| heddle_model::Sample::new(x.timestamp, x.value)),
                )
                .unwrap();
        }
        let got = batched.ingester.push_batch(&tenant("t"), batch).await.unwrap();
        assert_eq!(got, want);
        assert!(!want.errors.is_empty(), "the round exercises refusals: {want:?}");
    }
    let want = stored(&encoded.ingester, "t").await;
    assert_eq!(want.len(), 3, "{want:?}");
    assert_eq!(stored(&batched.ingester, "t").await, want);
    let text = |s: &Setup| heddle_server::encode_metrics(&s.registry);
    let discarded = |s: &Setup| {
        text(s)
            .lines()
            .filter(|l| l.starts_with("heddle_discarded_samples_total"))
            .map(str::to_owned)
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(discarded(&batched), discarded(&encoded));
    assert_eq!(discarded(&encoded).len(), 5, "{:?}", discarded(&encoded));
}

fn metadata(family: &str, help: &str) -> heddle_proto::prometheus::MetricMetadata {
    heddle_proto::prometheus::MetricMetadata {
        r#type: 1,
        metric_family_name: family.into(),
        help: help.into(),
        unit: String::new(),
    }
}

async fn push_metadata(
    i: &Ingester,
    t: &str,
    metadata: Vec<heddle_proto::prometheus::MetricMetadata>,
) -> Result<PushResponse, tonic::Status> {
    let body = WriteRequest {
        timeseries: Vec::new(),
        metadata,
    }
    .encode_to_vec();
    i.push(&tenant(t), Bytes::from(body)).await
}

async fn read_metadata(i: &Ingester, t: &str, metric: &str) -> Vec<(String, String)> {
    let req = heddle_proto::ingester::MetricsMetadataRequest {
        limit: -1,
        limit_per_metric: -1,
        metric: metric.into(),
    };
    i.metrics_metadata(&tenant(t), req)
        .await
        .unwrap()
        .metadata
        .into_iter()
        .map(|m| (m.metric_family_name, m.help))
        .collect()
}

/// Metadata is kept per tenant, refused past the tenant's limit with a message and a metric, expired after
/// the retain period, and never touches the series.
#[tokio::test]
async fn metadata_is_kept_per_tenant_bounded_and_expired() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        max_global_metadata_per_user: 2,
        ..Limits::default()
    };
    let s = open(dir.path(), InstanceLimitsConfig::default(), limits).await;
    let i = &s.ingester;
    let resp = push_metadata(
        i,
        "a",
        vec![metadata("x", "the x"), metadata("y", "the y"), metadata("z", "")],
    )
    .await
    .unwrap();
    assert_eq!(resp.metadata_errors.len(), 1, "{resp:?}");
    assert_eq!(resp.metadata_errors[0].reason, "err-heddle-max-metadata-per-user");
    assert!(
        resp.metadata_errors[0]
            .message
            .contains("limit of 2 metric families reached (tenant=a, metric=\"z\")"),
        "{}",
        resp.metadata_errors[0].message
    );
    assert!(resp.errors.is_empty() && resp.samples_ingested == 0);
    assert_eq!(
        read_metadata(i, "a", "").await,
        vec![("x".into(), "the x".into()), ("y".into(), "the y".into())]
    );
    assert_eq!(read_metadata(i, "a", "y").await, vec![("y".into(), "the y".into())]);
    assert!(read_metadata(i, "b", "").await.is_empty(), "tenants are apart");

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &s.registry).unwrap();
    assert!(
        text.contains(
            "heddle_ingester_discarded_metadata_total{tenant=\"a\",reason=\"err-heddle-max-metadata-per-user\"} 1"
        ),
        "{text}"
    );

    // x is pushed again later; y is not, and expires after the retain period (10m by default).
    let later = Arc::new(ManualClock::new(NOW + 5 * 60_000));
    i.set_clock(later.clone());
    push_metadata(i, "a", vec![metadata("x", "the x")]).await.unwrap();
    later.set(NOW + 11 * 60_000);
    i.purge_metadata();
    assert_eq!(read_metadata(i, "a", "").await, vec![("x".into(), "the x".into())]);
}

fn exemplar(trace: &str, t: i64) -> heddle_proto::prometheus::Exemplar {
    heddle_proto::prometheus::Exemplar {
        labels: vec![Label {
            name: "trace_id".into(),
            value: trace.into(),
        }],
        value: 1.0,
        timestamp: t,
    }
}

async fn read_exemplars(i: &Ingester, t: &str) -> Vec<(String, Vec<(String, i64)>)> {
    let req = heddle_proto::ingester::ExemplarQueryRequest {
        start_timestamp_ms: i64::MIN,
        end_timestamp_ms: i64::MAX,
        selectors: vec![heddle_proto::ingester::Selector::default()],
    };
    i.query_exemplars(&tenant(t), req)
        .await
        .unwrap()
        .timeseries
        .into_iter()
        .map(|ts| {
            let id = ts.labels.iter().find(|l| l.name == "id").unwrap().value.clone();
            let e = ts
                .exemplars
                .into_iter()
                .map(|e| (e.labels[0].value.clone(), e.timestamp))
                .collect();
            (id, e)
        })
        .collect()
}

/// Exemplars of an encoded push and of a batch land in the tenant's ring, after the samples that create their
/// series; an exemplar of a series that never got a sample is refused and counted.
#[tokio::test]
async fn exemplars_are_stored_from_bodies_and_batches() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        max_global_exemplars_per_user: 10,
        ..Limits::default()
    };
    let s = open(dir.path(), InstanceLimitsConfig::default(), limits).await;
    let i = &s.ingester;
    let mut a = ts("m", "a", &[T0 + HOUR]);
    a.exemplars = vec![exemplar("t1", T0 + HOUR)];
    let mut lonely = ts("m", "nobody", &[]);
    lonely.exemplars = vec![exemplar("t0", T0 + HOUR)];
    push(i, "x", vec![a, lonely]).await.unwrap();

    let mut batch = heddle_model::SeriesBatch::default();
    let labels = [
        heddle_model::LabelRef {
            name: "__name__",
            value: "m",
        },
        heddle_model::LabelRef { name: "id", value: "b" },
    ];
    let trace = [heddle_model::LabelRef {
        name: "trace_id",
        value: "t2",
    }];
    batch
        .push_with_exemplars(
            labels,
            [heddle_model::Sample::new(T0 + HOUR, 1.0)],
            [heddle_model::ExemplarRef {
                labels: &trace,
                value: 2.0,
                t: T0 + HOUR + 1,
            }],
        )
        .unwrap();
    i.push_batch(&tenant("x"), batch).await.unwrap();
    assert_eq!(
        read_exemplars(i, "x").await,
        vec![
            ("a".into(), vec![("t1".into(), T0 + HOUR)]),
            ("b".into(), vec![("t2".into(), T0 + HOUR + 1)]),
        ]
    );
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &s.registry).unwrap();
    for line in [
        "heddle_ingester_exemplars_appended_total 2",
        "heddle_ingester_exemplars_refused_total{reason=\"unknown-series\"} 1",
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
}

/// A counter histogram of `buckets` empty positive buckets at schema 8, at `t`.
fn wide_histogram(buckets: usize, t: i64) -> heddle_proto::prometheus::Histogram {
    use heddle_proto::prometheus::{BucketSpan, Histogram, histogram};
    Histogram {
        count: Some(histogram::Count::CountInt(0)),
        schema: 8,
        positive_spans: vec![BucketSpan {
            offset: 0,
            length: buckets as u32,
        }],
        positive_deltas: vec![0; buckets],
        timestamp: t,
        ..Histogram::default()
    }
}

/// The ingester's gRPC port can be reached without a distributor: a histogram over the ceiling is refused
/// there too, before it is decoded, and the whole push with it (a distributor never sends one).
#[tokio::test]
async fn a_histogram_over_the_ceiling_is_refused_at_the_grpc_port() {
    use heddle_model::histogram::MAX_BUCKETS_CEILING;
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), InstanceLimitsConfig::default(), Limits::default()).await;
    let series = |name: &str, buckets: usize| TimeSeries {
        histograms: vec![wide_histogram(buckets, T0)],
        ..ts(name, "1", &[])
    };
    let err = push(
        &s.ingester,
        "a",
        vec![series("fits", 10), series("wide", MAX_BUCKETS_CEILING + 1)],
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let msg = err.message();
    assert!(
        msg.contains("err-heddle-native-histogram-too-large")
            && msg.contains("16385 buckets")
            && msg.contains("more than 16384"),
        "{msg}"
    );
    assert!(
        stored(&s.ingester, "a").await.is_empty(),
        "nothing of the push was stored"
    );
    // At the ceiling it is stored: the ingester does not apply the tenant's bucket limit (the distributor
    // does), only the ceiling.
    let r = push(&s.ingester, "a", vec![series("wide", MAX_BUCKETS_CEILING)])
        .await
        .unwrap();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.samples_ingested, 1);
}
