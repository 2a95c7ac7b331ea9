//! Pipeline tests: per-tenant overrides reach the stages without a restart; helpers shared by the stages'
//! tests (a distributor over fake ingesters, a ring that splits series by token parity).

use super::*;
use crate::testutil::*;
use heddle_proto::IngesterClient;
use heddle_proto::prometheus::TimeSeries;
use http::StatusCode;
use std::sync::Arc;

pub(crate) fn distributor_with(ring: Arc<IngesterReplicas>, limits: Limits) -> (Distributor, Registry) {
    let mut registry = Registry::default();
    let d = Distributor::new(DistributorConfig::default(), limits, ring, &mut registry).with_clock(manual_clock());
    (d, registry)
}

pub(crate) fn distributor(ring: Arc<IngesterReplicas>) -> (Distributor, Registry) {
    distributor_with(ring, Limits::default())
}

pub(crate) async fn push(d: &Distributor, series: Vec<TimeSeries>) -> Result<PushOutcome, PushError> {
    d.push(&tenant(), &body(series)).await
}

/// What a stage test hands to validation's [`validate::Discards`]: the distributor's metrics on a registry of
/// their own, a warning limiter and the test tenant.
pub(crate) struct StageSinks {
    pub(crate) registry: Registry,
    metrics: crate::metrics::Metrics,
    warn: crate::log_limiter::LogLimiter,
    pub(crate) tenant: heddle_model::TenantId,
}

impl StageSinks {
    pub(crate) fn new() -> Self {
        let mut registry = Registry::default();
        let discarded = heddle_server::DiscardedSamples::register(&mut registry);
        let metrics = crate::metrics::Metrics::register(&mut registry, discarded);
        Self {
            registry,
            metrics,
            warn: crate::log_limiter::LogLimiter::new(10, std::time::Duration::from_secs(1)),
            tenant: tenant(),
        }
    }

    pub(crate) fn discards(&self) -> validate::Discards<'_> {
        validate::Discards {
            tenant: &self.tenant,
            metrics: &self.metrics,
            warn: &self.warn,
        }
    }
}

/// Sends series with an even token to `even`, odd to `odd` (RF=1 each).
#[derive(Debug)]
pub(crate) struct ParityRing {
    pub(crate) even: Arc<FakeIngester>,
    pub(crate) odd: Arc<FakeIngester>,
}

impl Replicas<Arc<dyn IngesterClient>> for ParityRing {
    fn for_read(&self) -> Result<ReadSet<Arc<dyn IngesterClient>>, RingError> {
        no_read_set()
    }

    fn for_write(&self, token: u32) -> WriteSet<Arc<dyn IngesterClient>> {
        let (id, c) = if token.is_multiple_of(2) {
            ("even", &self.even)
        } else {
            ("odd", &self.odd)
        };
        WriteSet {
            replicas: vec![(id.to_owned(), Arc::clone(c) as Arc<dyn IngesterClient>)],
            min_success: 1,
            unavailable: None,
        }
    }
}

/// `utf8` stores dotted names from remote write 1.0 and 2.0; `legacy` refuses them with a 400 naming the
/// label and saying how to opt in; the scheme follows a runtime override.
#[tokio::test(start_paused = true)]
async fn the_name_validation_scheme_is_per_tenant_for_both_remote_write_versions() {
    let fake = fake(Behavior::Accept);
    let overrides = Arc::new(Overrides::new(Limits::default()));
    let mut registry = Registry::default();
    let d = Distributor::new(
        DistributorConfig::default(),
        Limits::default(),
        Arc::new(single(fake.clone())),
        &mut registry,
    )
    .with_clock(manual_clock())
    .with_overrides(overrides.clone());
    let dotted = series(
        &[("__name__", "http.server.duration"), ("service.name", "checkout")],
        &[(NOW_MS, 1.0)],
    );
    let legacy_name_dotted_label = series(&[("__name__", "up"), ("service.name", "checkout")], &[(NOW_MS, 1.0)]);
    for version in [RemoteWriteVersion::V1, RemoteWriteVersion::V2] {
        let encode = |s: &[TimeSeries]| match version {
            RemoteWriteVersion::V1 => body(s.to_vec()),
            RemoteWriteVersion::V2 => v2_body(s, &[]),
        };
        overrides.apply_yaml("overrides: {}\n").unwrap();
        let o = d
            .push_version(
                &tenant(),
                version,
                &encode(&[legacy_name_dotted_label.clone(), up("fine")]),
            )
            .await
            .unwrap();
        assert_eq!(o.status(), StatusCode::BAD_REQUEST, "{version:?}");
        assert_eq!(o.samples_ingested, 1, "{version:?}: the valid series is still ingested");
        assert!(
            o.body().contains(r#"invalid label name "service.name""#)
                && o.body().contains("limits.name_validation_scheme: utf8"),
            "{version:?}: {}",
            o.body()
        );
        let o = d
            .push_version(&tenant(), version, &encode(std::slice::from_ref(&dotted)))
            .await
            .unwrap();
        assert!(
            o.body().contains(r#"invalid metric name "http.server.duration""#),
            "{version:?}: {}",
            o.body()
        );

        overrides
            .apply_yaml("overrides:\n  team-a:\n    name_validation_scheme: utf8\n")
            .unwrap();
        let o = d
            .push_version(
                &tenant(),
                version,
                &encode(&[dotted.clone(), legacy_name_dotted_label.clone()]),
            )
            .await
            .unwrap();
        assert_eq!(o.status(), StatusCode::OK, "{version:?}: {}", o.body());
        let stored: Vec<Vec<(String, String)>> = fake
            .pushed_series()
            .iter()
            .map(|ts| ts.labels.iter().map(|l| (l.name.clone(), l.value.clone())).collect())
            .collect();
        for sent in [&dotted, &legacy_name_dotted_label] {
            let want: Vec<(String, String)> = sent.labels.iter().map(|l| (l.name.clone(), l.value.clone())).collect();
            assert!(stored.contains(&want), "{version:?}: {want:?} not in {stored:?}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn overrides_apply_per_tenant_without_restart() {
    let fake = fake(Behavior::Accept);
    let overrides = Arc::new(Overrides::new(Limits::default()));
    let mut registry = Registry::default();
    let d = Distributor::new(
        DistributorConfig::default(),
        Limits::default(),
        Arc::new(single(fake)),
        &mut registry,
    )
    .with_clock(manual_clock())
    .with_overrides(overrides.clone());
    let three_labels = series(&[("__name__", "up"), ("a", "1"), ("b", "2")], &[(NOW_MS, 1.0)]);
    assert_eq!(
        push(&d, vec![three_labels.clone()]).await.unwrap().status(),
        StatusCode::OK
    );
    overrides
        .apply_yaml("overrides:\n  team-a:\n    max_label_names_per_series: 2\n    ingestion_burst_size: 5\n")
        .unwrap();
    let o = push(&d, vec![three_labels, up("fine")]).await.unwrap();
    assert_eq!(o.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        o.samples_ingested, 1,
        "the valid series of the request is still ingested"
    );
    assert!(o.body().contains("the limit is 2"), "{}", o.body());
    let many: Vec<TimeSeries> = (0..6).map(|i| up(&format!("m{i}"))).collect();
    let err = push(&d, many).await.unwrap_err();
    assert_eq!(err.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(err.to_string().contains("burst of 5"), "{err}");
}
