//! Distributor tests for runtime overrides and HA deduplication.

use super::*;
use heddle_limits::Overrides;
use crate::ring::SingleIngesterRing;
use crate::testutil::*;
use axum::http::StatusCode;
use heddle_proto::prometheus::TimeSeries;

fn ha_distributor(fake: Arc<FakeIngester>) -> (Distributor, Registry, Arc<ManualClock>) {
    let mut registry = Registry::default();
    let mut cfg = DistributorConfig::default();
    cfg.ha_tracker.enable_ha_tracker = true;
    let limits = Limits {
        accept_ha_samples: true,
        ..Limits::default()
    };
    let clock = ManualClock::new();
    let d = Distributor::new(cfg, limits, Arc::new(SingleIngesterRing::new("i", fake)), &mut registry)
        .with_clock(clock.clone());
    (d, registry, clock)
}

fn ha_series(name: &str, replica: &str) -> TimeSeries {
    series(
        &[
            ("__name__", name),
            ("__replica__", replica),
            ("cluster", "prom"),
            ("job", "a"),
        ],
        &[(NOW_MS, 1.0)],
    )
}

async fn push(d: &Distributor, series: Vec<TimeSeries>) -> Result<PushOutcome, PushError> {
    d.push(&tenant(), &body(series), &HeaderMap::new()).await
}

#[tokio::test(start_paused = true)]
async fn ha_pair_keeps_one_replica_and_fails_over() {
    let fake = FakeIngester::new(crate::testutil::Behavior::Accept);
    let (d, registry, clock) = ha_distributor(fake.clone());

    let a = push(&d, vec![ha_series("up", "a"), ha_series("x", "a")]).await.unwrap();
    assert_eq!(a.status(), StatusCode::OK);
    let b = push(&d, vec![ha_series("up", "b")]).await.unwrap();
    assert_eq!(b.status(), StatusCode::ACCEPTED, "{}", b.body());
    assert!(b.body().contains("err-heddle-ha-replica-not-elected"), "{}", b.body());
    assert!(b.body().contains(r#"replica "a" is elected"#), "{}", b.body());

    let stored = fake.series();
    assert_eq!(stored.len(), 2, "only replica a's series were forwarded");
    for s in &stored {
        assert!(
            s.labels.iter().all(|l| l.name != "__replica__"),
            "the replica label is removed: {s:?}"
        );
        assert!(s.labels.iter().any(|l| l.name == "cluster"), "the cluster label stays");
    }

    // Elections are shared between distributors, so they follow the wall clock.
    clock.0.fetch_add(31_000, std::sync::atomic::Ordering::Relaxed);
    let b = push(&d, vec![ha_series("up", "b")]).await.unwrap();
    assert_eq!(b.status(), StatusCode::OK, "b is elected after 30 s without a");
    let a = push(&d, vec![ha_series("up", "a")]).await.unwrap();
    assert_eq!(a.status(), StatusCode::ACCEPTED);
    let text = exposition(&registry);
    assert!(
        text.contains(r#"heddle_distributor_deduped_samples_total{tenant="team-a",cluster="prom"} 2"#),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn ha_requests_without_both_labels_are_not_deduplicated() {
    let fake = FakeIngester::new(crate::testutil::Behavior::Accept);
    let (d, _r, _clock) = ha_distributor(fake.clone());
    push(&d, vec![ha_series("up", "a")]).await.unwrap();
    // Only the first series decides: a request whose first series has no replica label is ingested whole.
    let plain = push(&d, vec![up("plain"), ha_series("up", "b")]).await.unwrap();
    assert_eq!(plain.status(), StatusCode::OK);
    assert_eq!(fake.series().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn ha_is_off_for_tenants_that_did_not_opt_in() {
    let fake = FakeIngester::new(crate::testutil::Behavior::Accept);
    let mut registry = Registry::default();
    let mut cfg = DistributorConfig::default();
    cfg.ha_tracker.enable_ha_tracker = true;
    let d = Distributor::new(
        cfg,
        Limits::default(),
        Arc::new(SingleIngesterRing::new("i", fake.clone())),
        &mut registry,
    );
    push(&d, vec![ha_series("up", "a")]).await.unwrap();
    assert_eq!(
        push(&d, vec![ha_series("up", "b")]).await.unwrap().status(),
        StatusCode::OK
    );
    assert!(
        fake.series()
            .iter()
            .all(|s| s.labels.iter().any(|l| l.name == "__replica__")),
        "labels untouched"
    );
}

#[tokio::test(start_paused = true)]
async fn overrides_apply_per_tenant_without_restart() {
    let fake = FakeIngester::new(crate::testutil::Behavior::Accept);
    let overrides = Arc::new(Overrides::new(Limits::default()));
    let mut registry = Registry::default();
    let d = Distributor::new(
        DistributorConfig::default(),
        Limits::default(),
        Arc::new(SingleIngesterRing::new("i", fake)),
        &mut registry,
    )
    .with_clock(ManualClock::new())
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
