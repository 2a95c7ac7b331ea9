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
        },
        transport,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_converge_over_real_udp() {
    let (p1, p2) = (free_udp_port(), free_udp_port());
    let start = |id: &str, port: u16| {
        GossipMembership::start(
            GossipConfig {
                node_id: id.into(),
                cluster_label: "udp-test".into(),
                listen_addr: addr(port),
                advertise_addr: addr(port),
                seeds: vec![format!("localhost:{p1}")],
                gossip_interval: GOSSIP,
                dead_node_grace_period: Duration::from_secs(60),
            },
            &chitchat::transport::UdpTransport,
        )
    };
    let m1 = start("ing-1", p1).await.unwrap();
    let reader = start("distributor-1", p2).await.unwrap();
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
