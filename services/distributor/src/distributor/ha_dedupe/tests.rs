//! HA dedupe tests: the stage on its own, then HA pairs through the whole push path.

use super::*;
use crate::distributor::Distributor;
use crate::outcome::PushOutcome;
use crate::testutil::*;
use crate::{DistributorConfig, HaTrackerConfig};
use bumpalo::Bump;
use heddle_model::ManualClock;
use heddle_proto::prometheus::TimeSeries;
use http::StatusCode;
use prometheus_client::registry::Registry;
use std::sync::Arc;

/// A tracker with Mimir's default timeouts (30 s failover).
fn tracker(registry: &mut Registry) -> HaTracker {
    let cfg = HaTrackerConfig {
        enable_ha_tracker: true,
        ..HaTrackerConfig::default()
    };
    HaTracker::new(&cfg, registry)
}

fn opted_in() -> Limits {
    Limits {
        accept_ha_samples: true,
        ..Limits::default()
    }
}

/// The stage's verdict, owned so it outlives the arena.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Judged {
    Ingest { drop_label: Option<String> },
    Deduplicated(String),
}

/// Runs the stage on `sent` with `limits`, decoding it as the pipeline does.
fn judge(
    tracker: Option<&HaTracker>,
    limits: &Limits,
    sent: Vec<TimeSeries>,
    now_ms: i64,
    discarded: &DiscardedSamples,
) -> Result<Judged, PushError> {
    let arena = Bump::new();
    let series = crate::distributor::decode::decode(
        &arena,
        &body(sent),
        crate::distributor::Framing::Snappy,
        crate::distributor::RemoteWriteVersion::V1,
        1 << 20,
        &mut crate::testutil::unlimited_reservation(),
    )
    .unwrap()
    .series;
    dedupe(tracker, &tenant(), limits, series, now_ms, discarded).map(|v| match v {
        HaVerdict::Ingest { drop_label } => Judged::Ingest {
            drop_label: drop_label.map(str::to_owned),
        },
        HaVerdict::Deduplicated(m) => Judged::Deduplicated(m),
    })
}

#[test]
fn stage_elects_deduplicates_and_limits_clusters() {
    let mut registry = Registry::default();
    let discarded = DiscardedSamples::register(&mut registry);
    let t = tracker(&mut registry);
    let limits = Limits {
        ha_max_clusters: 1,
        ..opted_in()
    };
    let accept = Judged::Ingest {
        drop_label: Some("__replica__".into()),
    };
    let from = |replica: &str, cluster: &str| {
        vec![series(
            &[("__name__", "up"), ("__replica__", replica), ("cluster", cluster)],
            &[(NOW_MS, 1.0), (NOW_MS + 1, 2.0)],
        )]
    };
    assert_eq!(
        judge(Some(&t), &limits, from("a", "prom"), NOW_MS, &discarded),
        Ok(accept.clone())
    );
    match judge(Some(&t), &limits, from("b", "prom"), NOW_MS, &discarded) {
        Ok(Judged::Deduplicated(m)) => {
            assert!(m.starts_with("err-heddle-ha-replica-not-elected"), "{m}");
            assert!(m.contains(r#"replica "a" is elected"#), "{m}");
        }
        other => panic!("replica b: {other:?}"),
    }
    let err = judge(Some(&t), &limits, from("a", "other"), NOW_MS, &discarded).unwrap_err();
    assert_eq!(err.id(), "err-heddle-too-many-ha-clusters", "{err}");
    let text = exposition(&registry);
    assert!(
        text.contains(r#"heddle_discarded_samples_total{tenant="team-a",reason="err-heddle-too-many-ha-clusters"} 2"#),
        "{text}"
    );
}

#[test]
fn stage_passes_requests_it_does_not_judge() {
    let mut registry = Registry::default();
    let discarded = DiscardedSamples::register(&mut registry);
    let t = tracker(&mut registry);
    let ingest = Ok(Judged::Ingest { drop_label: None });
    let ha = || {
        vec![series(
            &[("__name__", "up"), ("__replica__", "a"), ("cluster", "prom")],
            &[(NOW_MS, 1.0)],
        )]
    };
    let empty_replica = vec![series(
        &[("__name__", "up"), ("__replica__", ""), ("cluster", "prom")],
        &[(NOW_MS, 1.0)],
    )];
    let cases: Vec<(&str, Option<&HaTracker>, Limits, Vec<TimeSeries>)> = vec![
        ("tracker off", None, opted_in(), ha()),
        ("tenant not opted in", Some(&t), Limits::default(), ha()),
        ("no series", Some(&t), opted_in(), vec![]),
        ("no replica label", Some(&t), opted_in(), vec![up("up")]),
        ("empty replica value", Some(&t), opted_in(), empty_replica),
    ];
    for (name, tracker, limits, sent) in cases {
        assert_eq!(judge(tracker, &limits, sent, NOW_MS, &discarded), ingest, "case {name}");
    }
}

fn ha_distributor(fake: Arc<FakeIngester>) -> (Distributor, Registry, Arc<ManualClock>) {
    let mut registry = Registry::default();
    let mut cfg = DistributorConfig::default();
    cfg.ha_tracker.enable_ha_tracker = true;
    let limits = Limits {
        accept_ha_samples: true,
        ..Limits::default()
    };
    let clock = manual_clock();
    let d = Distributor::new(cfg, limits, Arc::new(single(fake)), &mut registry).with_clock(clock.clone());
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
    d.push(&tenant(), &body(series)).await
}

#[tokio::test(start_paused = true)]
async fn ha_pair_keeps_one_replica_and_fails_over() {
    let fake = fake(crate::testutil::Behavior::Accept);
    let (d, registry, clock) = ha_distributor(fake.clone());

    let a = push(&d, vec![ha_series("up", "a"), ha_series("x", "a")]).await.unwrap();
    assert_eq!(a.status(), StatusCode::OK);
    let b = push(&d, vec![ha_series("up", "b")]).await.unwrap();
    assert_eq!(b.status(), StatusCode::ACCEPTED, "{}", b.body());
    assert!(b.body().contains("err-heddle-ha-replica-not-elected"), "{}", b.body());
    assert!(b.body().contains(r#"replica "a" is elected"#), "{}", b.body());

    let stored = fake.pushed_series();
    assert_eq!(stored.len(), 2, "only replica a's series were forwarded");
    for s in &stored {
        assert!(
            s.labels.iter().all(|l| l.name != "__replica__"),
            "the replica label is removed: {s:?}"
        );
        assert!(s.labels.iter().any(|l| l.name == "cluster"), "the cluster label stays");
    }

    // Elections are shared between distributors, so they follow the wall clock.
    clock.advance(31_000);
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
    let fake = fake(crate::testutil::Behavior::Accept);
    let (d, _r, _clock) = ha_distributor(fake.clone());
    push(&d, vec![ha_series("up", "a")]).await.unwrap();
    // Only the first series decides: a request whose first series has no replica label is ingested whole.
    let plain = push(&d, vec![up("plain"), ha_series("up", "b")]).await.unwrap();
    assert_eq!(plain.status(), StatusCode::OK);
    assert_eq!(fake.pushed_series().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn ha_is_off_for_tenants_that_did_not_opt_in() {
    let fake = fake(crate::testutil::Behavior::Accept);
    let mut registry = Registry::default();
    let mut cfg = DistributorConfig::default();
    cfg.ha_tracker.enable_ha_tracker = true;
    let d = Distributor::new(cfg, Limits::default(), Arc::new(single(fake.clone())), &mut registry);
    push(&d, vec![ha_series("up", "a")]).await.unwrap();
    assert_eq!(
        push(&d, vec![ha_series("up", "b")]).await.unwrap().status(),
        StatusCode::OK
    );
    assert!(
        fake.pushed_series()
            .iter()
            .all(|s| s.labels.iter().any(|l| l.name == "__replica__")),
        "labels untouched"
    );
}

#[test]
fn overlong_ha_label_values_are_refused_before_they_are_tracked() {
    let mut registry = Registry::default();
    let discarded = DiscardedSamples::register(&mut registry);
    let t = tracker(&mut registry);
    let limits = Limits {
        max_label_value_length: 16,
        ..opted_in()
    };
    let long = "c".repeat(17);
    let from = |replica: &str, cluster: &str| {
        vec![series(
            &[("__name__", "up"), ("__replica__", replica), ("cluster", cluster)],
            &[(NOW_MS, 1.0), (NOW_MS + 1, 2.0)],
        )]
    };
    for (name, sent, role, label) in [
        ("long cluster", from("a", &long), "cluster", "cluster"),
        ("long replica", from(&long, "prom"), "replica", "__replica__"),
    ] {
        let err = judge(Some(&t), &limits, sent, NOW_MS, &discarded).unwrap_err();
        assert_eq!(err.id(), "err-heddle-invalid-ha-label", "{name}: {err}");
        assert_eq!(err.status(), StatusCode::BAD_REQUEST, "{name}");
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("the HA {role} label {label:?} has a value of 17 bytes"))
                && msg.contains("at most 16 bytes")
                && msg.contains("--validation.max-length-label-value"),
            "{name}: {msg}"
        );
    }
    assert!(t.elections().is_empty(), "nothing was elected, so nothing is gossiped");
    let text = exposition(&registry);
    assert!(
        text.contains(r#"heddle_discarded_samples_total{tenant="team-a",reason="err-heddle-invalid-ha-label"} 4"#),
        "{text}"
    );
    // At the limit, the values are fine.
    let at_limit = "c".repeat(16);
    assert_eq!(
        judge(Some(&t), &limits, from(&at_limit, &at_limit), NOW_MS, &discarded),
        Ok(Judged::Ingest {
            drop_label: Some("__replica__".into())
        })
    );
    assert_eq!(t.elected("team-a", &at_limit).as_deref(), Some(at_limit.as_str()));
}

#[tokio::test(start_paused = true)]
async fn a_push_with_an_overlong_ha_cluster_is_a_400_and_forwards_nothing() {
    let fake = fake(crate::testutil::Behavior::Accept);
    let (d, _registry, _clock) = ha_distributor(fake.clone());
    let long = "p".repeat(Limits::default().max_label_value_length + 1);
    let sent = vec![series(
        &[("__name__", "up"), ("__replica__", "a"), ("cluster", &long)],
        &[(NOW_MS, 1.0)],
    )];
    let err = push(&d, sent).await.unwrap_err();
    assert_eq!(err.status(), StatusCode::BAD_REQUEST, "{err}");
    assert!(
        err.to_string()
            .starts_with("err-heddle-invalid-ha-label: the HA cluster label"),
        "{err}"
    );
    assert!(fake.pushed_series().is_empty());
    assert!(d.ha_tracker().unwrap().elections().is_empty());
}
