use super::*;
use heddle_ring::{MemorySharedState, SharedState};

const T0: i64 = 1_700_000_000_000;

fn config() -> HaTrackerConfig {
    HaTrackerConfig {
        enable_ha_tracker: true,
        ha_tracker_update_timeout: Duration::from_secs(15),
        ha_tracker_update_timeout_jitter_max: Duration::ZERO,
        ..HaTrackerConfig::default()
    }
}

fn tracker() -> (HaTracker, Registry) {
    let mut r = Registry::default();
    (HaTracker::new(&config(), &mut r), r)
}

const S: i64 = 1000;

#[test]
fn first_replica_is_elected_and_the_other_deduplicated() {
    let (t, r) = tracker();
    assert_eq!(t.check("u", "c1", "a", 10, 0, T0), HaDecision::Accept);
    assert_eq!(
        t.check("u", "c1", "b", 7, 0, T0 + S),
        HaDecision::Deduplicate { elected: "a".into() }
    );
    assert_eq!(t.check("u", "c1", "a", 10, 0, T0 + 2 * S), HaDecision::Accept);
    assert_eq!(
        t.check("u", "c2", "b", 1, 0, T0),
        HaDecision::Accept,
        "clusters are independent"
    );
    assert_eq!(
        t.check("v", "c1", "b", 1, 0, T0),
        HaDecision::Accept,
        "tenants are independent"
    );
    let text = heddle_server::encode_metrics(&r);
    assert!(
        text.contains(r#"heddle_distributor_deduped_samples_total{tenant="u",cluster="c1"} 7"#),
        "{text}"
    );
}

#[test]
fn fails_over_only_after_the_timeout() {
    let (t, _r) = tracker();
    t.check("u", "c", "a", 1, 0, T0);
    // The elected replica's last sample is what counts: 30 s exactly is not past the timeout.
    assert!(matches!(
        t.check("u", "c", "b", 1, 0, T0 + 30 * S),
        HaDecision::Deduplicate { .. }
    ));
    assert_eq!(t.check("u", "c", "b", 1, 0, T0 + 30 * S + 1), HaDecision::Accept);
    assert_eq!(t.elected("u", "c").as_deref(), Some("b"));
    assert!(
        matches!(t.check("u", "c", "a", 1, 0, T0 + 31 * S), HaDecision::Deduplicate { elected } if elected == "b"),
        "the old replica is now the follower"
    );
}

#[test]
fn deduplicated_requests_do_not_keep_the_election_alive() {
    let (t, _r) = tracker();
    t.check("u", "c", "a", 1, 0, T0);
    for s in 1..=40 {
        t.check("u", "c", "b", 1, 0, T0 + s * S);
    }
    assert_eq!(
        t.elected("u", "c").as_deref(),
        Some("b"),
        "b took over once a was silent for 30 s"
    );
}

#[test]
fn clusters_per_tenant_are_capped() {
    let (t, _r) = tracker();
    assert_eq!(t.check("u", "c1", "a", 1, 2, T0), HaDecision::Accept);
    assert_eq!(t.check("u", "c2", "a", 1, 2, T0), HaDecision::Accept);
    assert_eq!(
        t.check("u", "c3", "a", 1, 2, T0),
        HaDecision::TooManyClusters { limit: 2 }
    );
    assert_eq!(
        t.check("u", "c1", "a", 1, 2, T0),
        HaDecision::Accept,
        "known clusters still pass"
    );
}

#[test]
fn config_defaults_flags_and_validation() {
    let c = HaTrackerConfig::default();
    assert_eq!(c.ha_tracker_failover_timeout, Duration::from_secs(30));
    assert_eq!(c.ha_tracker_update_timeout, Duration::from_secs(15));
    assert_eq!(c.kvstore.store, "memberlist");
    let v = serde_norway::to_value(&c).unwrap();
    let mut keys = Vec::new();
    for (k, v) in v.as_mapping().unwrap() {
        let k = format!("distributor.ha_tracker.{}", k.as_str().unwrap());
        match v.as_mapping() {
            Some(m) => keys.extend(m.keys().map(|n| format!("{k}.{}", n.as_str().unwrap()))),
            None => keys.push(k),
        }
    }
    for k in keys {
        assert!(HA_TRACKER_FLAGS.iter().any(|f| f.key == k), "no flag for {k}");
    }

    let mut c = config();
    c.ha_tracker_update_timeout = Duration::from_secs(15);
    c.ha_tracker_update_timeout_jitter_max = Duration::from_secs(5);
    c.ha_tracker_failover_timeout = Duration::from_secs(20);
    let err = c.validate().unwrap_err().to_string();
    assert!(
        err.contains("ha_tracker_failover_timeout") && err.contains("21s"),
        "{err}"
    );
    c.ha_tracker_failover_timeout = Duration::from_secs(21);
    c.validate().unwrap();
    c.kvstore.store = "consul".into();
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("\"consul\" is not supported"), "{err}");
}

/// Two distributors sharing one store, as two gossip members would.
struct Pair {
    store: Arc<MemorySharedState>,
    d1: HaTracker,
    d2: HaTracker,
    _r: Registry,
}

use std::sync::Arc;

impl Pair {
    fn new() -> Self {
        let mut r = Registry::default();
        Self {
            store: MemorySharedState::new(),
            d1: HaTracker::new(&config(), &mut r),
            d2: HaTracker::new(&config(), &mut Registry::default()),
            _r: r,
        }
    }

    /// A sync round on each distributor, then another so both have read each other's writes.
    async fn sync(&self, now_ms: i64) {
        let (m1, m2) = (self.store.member("d1"), self.store.member("d2"));
        for _ in 0..2 {
            self.d1.sync_once(&m1, now_ms).await;
            self.d2.sync_once(&m2, now_ms).await;
        }
    }
}

#[tokio::test]
async fn an_election_on_one_distributor_deduplicates_on_the_other() {
    let p = Pair::new();
    assert_eq!(p.d1.check("u", "c", "a", 1, 0, T0), HaDecision::Accept);
    p.sync(T0).await;
    assert_eq!(p.d2.elected("u", "c").as_deref(), Some("a"));
    assert_eq!(
        p.d2.check("u", "c", "b", 1, 0, T0 + S),
        HaDecision::Deduplicate { elected: "a".into() },
        "replica b sends to the other distributor and is still dropped"
    );
}

#[tokio::test]
async fn a_replica_alive_on_one_distributor_is_not_failed_over_by_the_other() {
    let p = Pair::new();
    p.d1.check("u", "c", "a", 1, 0, T0);
    p.sync(T0).await;
    // a keeps sending to d1 every 5 s for 2 minutes; b keeps sending to d2; syncs every second.
    for s in 1..=120 {
        let now = T0 + s * S;
        if s % 5 == 0 {
            assert_eq!(p.d1.check("u", "c", "a", 1, 0, now), HaDecision::Accept);
        }
        assert!(
            matches!(p.d2.check("u", "c", "b", 1, 0, now), HaDecision::Deduplicate { .. }),
            "d2 failed over at +{s}s although a was sending"
        );
        p.sync(now).await;
    }
    // a stops: 30 s after its last sample (at +120 s, seen by d2 within the update timeout) d2 elects b.
    let mut failed_over_at = None;
    for s in 121..=200 {
        let now = T0 + s * S;
        if p.d2.check("u", "c", "b", 1, 0, now) == HaDecision::Accept {
            failed_over_at = Some(s);
            break;
        }
        p.sync(now).await;
    }
    let at = failed_over_at.expect("b elected after a went silent");
    assert!((136..=151).contains(&at), "failover at +{at}s");
    p.sync(T0 + at * S).await;
    assert_eq!(p.d1.elected("u", "c").as_deref(), Some("b"), "d1 adopts d2's election");
    assert!(matches!(
        p.d1.check("u", "c", "a", 1, 0, T0 + (at + 1) * S),
        HaDecision::Deduplicate { .. }
    ));
}

#[tokio::test]
async fn concurrent_elections_converge_on_the_later_one() {
    let p = Pair::new();
    assert_eq!(p.d1.check("u", "c", "a", 1, 0, T0), HaDecision::Accept);
    assert_eq!(p.d2.check("u", "c", "b", 1, 0, T0 + 10), HaDecision::Accept);
    p.sync(T0 + 20).await;
    assert_eq!(p.d1.elected("u", "c").as_deref(), Some("b"));
    assert_eq!(p.d2.elected("u", "c").as_deref(), Some("b"));
    // Same instant: the replica name decides, identically on both.
    p.d1.check("u", "x", "r1", 1, 0, T0);
    p.d2.check("u", "x", "r2", 1, 0, T0);
    p.sync(T0 + 20).await;
    assert_eq!(p.d1.elected("u", "x").as_deref(), Some("r2"));
    assert_eq!(p.d2.elected("u", "x").as_deref(), Some("r2"));
}

#[tokio::test]
async fn silent_clusters_are_forgotten_everywhere() {
    let p = Pair::new();
    p.d1.check("u", "c", "a", 1, 0, T0);
    p.sync(T0).await;
    assert_eq!(p.d2.elections().len(), 1);
    p.sync(T0 + FORGET_AFTER_MS + S).await;
    assert!(p.d1.elections().is_empty() && p.d2.elections().is_empty());
    assert!(
        p.store.member("d1").scan("ha/").await.is_empty(),
        "the gossip key is deleted"
    );
    assert_eq!(
        p.d1.check("u", "c", "b", 1, 1, T0 + FORGET_AFTER_MS + 2 * S),
        HaDecision::Accept,
        "a forgotten cluster no longer counts against ha_max_clusters"
    );
}

/// A forged or badly skewed election in gossip: `elected_at_ms`, `received_at_ms`, replica.
async fn gossip_election(store: &Arc<MemorySharedState>, elected_at_ms: i64, received_at_ms: i64, replica: &str) {
    store
        .member("rogue")
        .set("ha/1/uc", &format!("{elected_at_ms} {received_at_ms} {replica}"))
        .await;
}

#[tokio::test]
async fn elections_dated_beyond_the_clock_skew_are_ignored() {
    let day = 24 * 3600 * S;
    for (name, elected_at, received_at) in [
        (
            "elected tomorrow: would win every election until then",
            T0 + day,
            T0 + day,
        ),
        ("alive until tomorrow: would never fail over", T0, T0 + day),
    ] {
        let p = Pair::new();
        assert_eq!(p.d1.check("u", "c", "a", 1, 0, T0), HaDecision::Accept, "{name}");
        gossip_election(&p.store, elected_at, received_at, "evil").await;
        p.sync(T0 + S).await;
        assert_eq!(p.d1.elected("u", "c").as_deref(), Some("a"), "{name}");
        assert_eq!(p.d2.elected("u", "c").as_deref(), Some("a"), "{name}");
        // Once a goes silent, b is elected on time: the future entry kept nothing alive.
        p.sync(T0 + 30 * S).await;
        assert_eq!(
            p.d2.check("u", "c", "b", 1, 0, T0 + 31 * S),
            HaDecision::Accept,
            "{name}"
        );
        assert!(
            p.d1.future_elections.get() > 0 && p.d2.future_elections.get() > 0,
            "{name}: counted"
        );
    }
    // Within the skew (a clock a few seconds ahead) an election is adopted as usual.
    let p = Pair::new();
    gossip_election(&p.store, T0 + 5 * S, T0 + 5 * S, "ahead").await;
    p.sync(T0).await;
    assert_eq!(p.d1.elected("u", "c").as_deref(), Some("ahead"));
}
