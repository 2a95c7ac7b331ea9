use super::*;
use crate::lifecycler::{Lifecycler, LifecyclerConfig, system_clock};
use chitchat::transport::ChannelTransport;
use std::time::Instant;

const GOSSIP: Duration = Duration::from_millis(50);

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

async fn member(transport: &ChannelTransport, id: &str, port: u16, grace: Duration) -> Arc<GossipMembership> {
    GossipMembership::start(
        GossipConfig {
            node_id: id.into(),
            cluster_label: "test".into(),
            listen_addr: addr(port),
            advertise_addr: addr(port),
            seeds: vec![addr(20_001).to_string()],
            gossip_interval: GOSSIP,
            dead_node_grace_period: grace,
            cluster_key: None,
            max_clock_skew: Duration::from_secs(30),
        },
        transport,
        GossipMetrics::default(),
    )
    .await
    .unwrap()
}

async fn ingester(m: &Arc<GossipMembership>, unregister: bool) -> Lifecycler {
    let cfg = LifecyclerConfig {
        instance_id: m.node_id().into(),
        instance_addr: format!("{}:9095", m.node_id()),
        zone: String::new(),
        num_tokens: 32,
        tokens_file_path: None,
        heartbeat_period: Duration::from_millis(100),
        unregister_on_shutdown: unregister,
    };
    let m: Arc<dyn Membership> = m.clone();
    let lc = Lifecycler::start(cfg, m, system_clock()).await.unwrap();
    lc.set_active().await.unwrap();
    lc
}

/// Waits (at most 15 s, polling every 20 ms) until `m`'s view satisfies `cond`.
async fn wait_for(m: &GossipMembership, what: &str, cond: impl Fn(&MembershipView) -> bool) -> Arc<MembershipView> {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut rx = m.watch();
    loop {
        let view = Arc::clone(&rx.borrow_and_update());
        if cond(&view) {
            return view;
        }
        assert!(
            Instant::now() < deadline,
            "{}: timed out waiting for {what}; last view {view:?}",
            m.node_id()
        );
        let _ = tokio::time::timeout(Duration::from_millis(20), rx.changed()).await;
    }
}

fn ids(view: &MembershipView) -> Vec<&str> {
    view.desc.instances.keys().map(String::as_str).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_ingesters_converge_and_a_stopped_one_is_detected_then_dropped() {
    let transport = ChannelTransport::with_mtu(65_000);
    let grace = Duration::from_secs(3);
    let m1 = member(&transport, "ing-1", 20_001, grace).await;
    let m2 = member(&transport, "ing-2", 20_002, grace).await;
    let m3 = member(&transport, "ing-3", 20_003, grace).await;
    let reader = member(&transport, "distributor-1", 20_010, grace).await;
    let l1 = ingester(&m1, true).await;
    let _l2 = ingester(&m2, true).await;
    let l3 = ingester(&m3, false).await;
    let tokens3 = l3.desc().await.tokens;

    for m in [&m1, &m2, &m3, &reader] {
        let view = wait_for(m, "3 reachable ACTIVE instances", |v| {
            v.desc.instances.len() == 3
                && v.unreachable.is_empty()
                && v.desc.instances.values().all(|i| i.state == InstanceState::Active)
        })
        .await;
        assert_eq!(
            ids(&view),
            ["ing-1", "ing-2", "ing-3"],
            "non-owning members are not instances"
        );
        assert_eq!(view.desc.instances["ing-3"].tokens, tokens3);
    }
    assert_eq!(reader.live_members().await.len(), 4);

    // Crash ing-3: no unregister, gossip stops.
    drop(l3);
    m3.shutdown().await;
    let view = wait_for(&reader, "ing-3 unreachable", |v| v.unreachable.contains("ing-3")).await;
    assert_eq!(
        view.desc.instances["ing-3"].tokens, tokens3,
        "an unreachable member keeps its tokens"
    );
    wait_for(&reader, "ing-3 dropped after the grace period", |v| {
        !v.desc.instances.contains_key("ing-3")
    })
    .await;

    // A clean shutdown with unregister disappears without waiting for the failure detector.
    l1.stop().await.unwrap();
    wait_for(&reader, "ing-1 unregistered", |v| {
        !v.desc.instances.contains_key("ing-1")
    })
    .await;
    m1.shutdown().await;
    m2.shutdown().await;
    reader.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_hides_a_dead_member_everywhere_but_a_live_one_comes_back() {
    let transport = ChannelTransport::with_mtu(65_000);
    let grace = Duration::from_secs(600);
    let m1 = member(&transport, "ing-1", 20_001, grace).await;
    let m2 = member(&transport, "ing-2", 20_002, grace).await;
    let reader = member(&transport, "querier-1", 20_010, grace).await;
    let _l1 = ingester(&m1, true).await;
    let l2 = ingester(&m2, true).await;
    wait_for(&m1, "2 instances", |v| {
        v.desc.instances.len() == 2 && v.unreachable.is_empty()
    })
    .await;

    // A live member that is forgotten re-appears with its next heartbeat.
    reader.forget("ing-1").await.unwrap();
    wait_for(&reader, "ing-1 back", |v| {
        v.desc.instances.contains_key("ing-1") && v.desc.instances.len() == 2
    })
    .await;

    drop(l2);
    m2.shutdown().await;
    wait_for(&reader, "ing-2 unreachable", |v| v.unreachable.contains("ing-2")).await;
    reader.forget("ing-2").await.unwrap();
    wait_for(&reader, "ing-2 forgotten locally", |v| {
        !v.desc.instances.contains_key("ing-2")
    })
    .await;
    wait_for(&m1, "ing-2 forgotten on another member", |v| {
        !v.desc.instances.contains_key("ing-2")
    })
    .await;
    m1.shutdown().await;
    reader.shutdown().await;
}

#[tokio::test]
async fn a_member_cannot_publish_another_instance() {
    let transport = ChannelTransport::with_mtu(65_000);
    let m = member(&transport, "distributor-1", 20_001, Duration::from_secs(60)).await;
    let desc = InstanceDesc {
        id: "ing-9".into(),
        addr: "x:1".into(),
        zone: String::new(),
        state: InstanceState::Active,
        tokens: vec![1],
        heartbeat_ms: 0,
        registered_at_ms: 0,
    };
    let err = m.publish(&desc).await.unwrap_err().to_string();
    assert!(err.contains("cannot publish the entry of instance ing-9"), "{err}");
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_state_spreads_values_and_deletions_between_members() {
    use crate::shared::SharedState;
    let transport = ChannelTransport::with_mtu(65_000);
    let grace = Duration::from_secs(60);
    let d1 = member(&transport, "distributor-1", 20_001, grace).await;
    let d2 = member(&transport, "distributor-2", 20_002, grace).await;
    d1.set("ha/t/c", "a 1 2").await;
    d2.set("ha/t/d", "b 3 4").await;
    d2.set("unrelated", "x").await;
    let deadline = Instant::now() + Duration::from_secs(15);
    let sorted = |mut v: Vec<crate::shared::SharedEntry>| {
        v.sort_by(|l, r| l.key.cmp(&r.key));
        v.into_iter().map(|e| (e.member, e.key, e.value)).collect::<Vec<_>>()
    };
    let want = vec![
        ("distributor-1".to_owned(), "t/c".to_owned(), "a 1 2".to_owned()),
        ("distributor-2".to_owned(), "t/d".to_owned(), "b 3 4".to_owned()),
    ];
    loop {
        let (s1, s2) = (sorted(d1.scan("ha/").await), sorted(d2.scan("ha/").await));
        if s1 == want && s2 == want {
            break;
        }
        assert!(Instant::now() < deadline, "not converged: {s1:?} / {s2:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    d2.delete("ha/t/d").await;
    loop {
        let s1 = sorted(d1.scan("ha/").await);
        if s1 == want[..1] {
            break;
        }
        assert!(Instant::now() < deadline, "deletion not seen: {s1:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    d1.shutdown().await;
    d2.shutdown().await;
}

fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn key(secret: &str) -> Option<ClusterKey> {
    Some(ClusterKey::new(secret.as_bytes()).unwrap())
}

/// A member over real UDP on 127.0.0.1 (the production transport), seeded with `seed`.
async fn udp_member(
    id: &str,
    port: u16,
    seed: String,
    cluster_key: Option<ClusterKey>,
) -> (Arc<GossipMembership>, GossipMetrics) {
    let metrics = GossipMetrics::default();
    let m = GossipMembership::start_udp(
        GossipConfig {
            node_id: id.into(),
            cluster_label: "udp-test".into(),
            listen_addr: addr(port),
            advertise_addr: addr(port),
            seeds: vec![seed],
            gossip_interval: GOSSIP,
            dead_node_grace_period: Duration::from_secs(600),
            cluster_key,
            max_clock_skew: Duration::from_secs(30),
        },
        metrics.clone(),
    )
    .await
    .unwrap();
    (m, metrics)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_converge_over_real_udp() {
    let (p1, p2) = (free_udp_port(), free_udp_port());
    let (m1, _) = udp_member("ing-1", p1, format!("localhost:{p1}"), None).await;
    let (reader, _) = udp_member("distributor-1", p2, format!("localhost:{p1}"), None).await;
    let _l1 = ingester(&m1, true).await;
    let view = wait_for(&reader, "ing-1 over UDP, seed given as a DNS name", |v| {
        v.desc
            .instances
            .get("ing-1")
            .is_some_and(|i| i.state == InstanceState::Active)
    })
    .await;
    assert_eq!(view.desc.instances["ing-1"].addr, "ing-1:9095");
    m1.shutdown().await;
    reader.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_with_the_cluster_key_form_a_ring_and_strangers_change_nothing() {
    let cluster = "a-cluster-secret-of-32-characters";
    let (p1, p2, p3, p4, p5) = (
        free_udp_port(),
        free_udp_port(),
        free_udp_port(),
        free_udp_port(),
        free_udp_port(),
    );
    let seed = format!("127.0.0.1:{p1}");
    let (m1, m1_metrics) = udp_member("ing-1", p1, seed.clone(), key(cluster)).await;
    let (m2, _) = udp_member("ing-2", p2, seed.clone(), key(cluster)).await;
    let (reader, _) = udp_member("distributor-1", p3, seed.clone(), key(cluster)).await;
    let _l1 = ingester(&m1, true).await;
    let l2 = ingester(&m2, false).await;
    wait_for(&reader, "two ACTIVE ingesters over signed UDP", |v| {
        v.desc.instances.len() == 2 && v.desc.instances.values().all(|i| i.state == InstanceState::Active)
    })
    .await;
    // ing-2 crashes: it stays in the ring, unreachable, until someone forgets it.
    drop(l2);
    m2.shutdown().await;
    wait_for(&reader, "ing-2 unreachable", |v| v.unreachable.contains("ing-2")).await;

    // Two strangers, one without a key and one with another, each claiming tokens and forgetting ing-2.
    let (open, _) = udp_member("stranger-open", p4, seed.clone(), None).await;
    let (other, _) = udp_member("stranger-other-key", p5, seed, key("another-secret-of-32-characters!")).await;
    let _lo = ingester(&open, true).await;
    let _lk = ingester(&other, true).await;
    open.forget("ing-2").await.unwrap();
    other.forget("ing-2").await.unwrap();

    // Their datagrams reach ing-1 and are dropped there, each for its reason.
    let deadline = Instant::now() + Duration::from_secs(15);
    while m1_metrics.dropped_datagrams("missing-tag") == 0 || m1_metrics.dropped_datagrams("bad-tag") == 0 {
        assert!(Instant::now() < deadline, "the strangers' datagrams never arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Many gossip rounds later nothing they said is known to the cluster.
    for _ in 0..50 {
        for m in [&m1, &reader] {
            let view = Arc::clone(&m.watch().borrow());
            assert_eq!(
                ids(&view),
                ["ing-1", "ing-2"],
                "{}: strangers' tokens or forget seen",
                m.node_id()
            );
            let live = m.live_members().await;
            assert!(
                !live.iter().any(|id| id.starts_with("stranger")),
                "{}: {live:?}",
                m.node_id()
            );
        }
        tokio::time::sleep(GOSSIP).await;
    }
    assert!(
        open.live_members().await.len() == 1 && other.live_members().await.len() == 1,
        "the strangers learnt nobody either"
    );
    // The key's owners can still forget.
    reader.forget("ing-2").await.unwrap();
    wait_for(&m1, "ing-2 forgotten by a member with the key", |v| {
        !v.desc.instances.contains_key("ing-2")
    })
    .await;
    for m in [&m1, &reader, &open, &other] {
        m.shutdown().await;
    }
}

/// A member publishing its own entry as written (no lifecycler refreshing it).
fn entry(id: &str, heartbeat_ms: i64, registered_at_ms: i64) -> InstanceDesc {
    InstanceDesc {
        id: id.into(),
        addr: format!("{id}:9095"),
        zone: String::new(),
        state: InstanceState::Active,
        tokens: vec![1, 2, 3],
        heartbeat_ms,
        registered_at_ms,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gossiped_times_beyond_the_clock_skew_are_not_trusted() {
    let transport = ChannelTransport::with_mtu(65_000);
    let grace = Duration::from_secs(600);
    let m1 = member(&transport, "ing-1", 20_001, grace).await;
    let m2 = member(&transport, "ing-2", 20_002, grace).await;
    let metrics = GossipMetrics::default();
    let reader = GossipMembership::start(
        GossipConfig {
            node_id: "querier-1".into(),
            cluster_label: "test".into(),
            listen_addr: addr(20_010),
            advertise_addr: addr(20_010),
            seeds: vec![addr(20_001).to_string()],
            gossip_interval: GOSSIP,
            dead_node_grace_period: grace,
            cluster_key: None,
            max_clock_skew: Duration::from_secs(30),
        },
        &transport,
        metrics.clone(),
    )
    .await
    .unwrap();
    let now = crate::ring::now_ms();
    let day = 24 * 3600 * 1000;
    // ing-1's clock (or a forger) says it heartbeated tomorrow: it must not look alive until then.
    m1.publish(&entry("ing-1", now + day, now + day)).await.unwrap();
    m2.publish(&entry("ing-2", now - 1_000, now - 1_000)).await.unwrap();
    let view = wait_for(&reader, "both entries", |v| v.desc.instances.len() == 2).await;
    let ing1 = &view.desc.instances["ing-1"];
    assert_eq!(ing1.heartbeat_ms, 0, "a heartbeat in the future counts as none");
    assert!(
        ing1.registered_at_ms <= crate::ring::now_ms(),
        "registered_at clamped to now"
    );
    assert!(!ing1.heartbeat_fresh(crate::ring::now_ms(), 60_000), "not healthy");
    assert_eq!(
        view.desc.instances["ing-2"].heartbeat_ms,
        now - 1_000,
        "a past heartbeat is kept"
    );
    assert!(metrics.future_values("heartbeat") > 0 && metrics.future_values("registered_at") > 0);

    // A forget marker dated tomorrow would hide ing-2 until then, whatever it does: it is ignored.
    m1.with_chitchat(|c| {
        c.self_node_state()
            .set(format!("{}ing-2", codec::FORGET_PREFIX), now + day)
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(15);
    while metrics.future_values("forget") == 0 {
        assert!(Instant::now() < deadline, "the future forget marker never arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let view = Arc::clone(&reader.watch().borrow());
    assert!(
        view.desc.instances.contains_key("ing-2"),
        "a future forget hides nothing: {view:?}"
    );
    // One dated now does hide it (ing-2's heartbeat is older).
    m1.with_chitchat(|c| {
        c.self_node_state()
            .set(format!("{}ing-2", codec::FORGET_PREFIX), crate::ring::now_ms())
    })
    .await;
    wait_for(&reader, "ing-2 forgotten by a present-day marker", |v| {
        !v.desc.instances.contains_key("ing-2")
    })
    .await;
    for m in [&m1, &m2, &reader] {
        m.shutdown().await;
    }
}
