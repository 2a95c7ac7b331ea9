//! Gossip authentication between real processes: a cluster whose members share `--memberlist.cluster-key-file`
//! forms its ring and takes writes, while two strangers joining its gossip port (one without a key, one with
//! another key), each running an ingester that claims tokens, never appear in it. Their datagrams reach the
//! cluster and are counted as dropped, by reason.

use heddle_proto::prometheus::WriteRequest;
use heddle_testkit::cluster::describe;
use heddle_testkit::{
    Cluster, ClusterOptions, HeddleOptions, HeddleProcess, http_client, http_get, now_ms, push, timeseries, wait_until,
};
use std::net::UdpSocket;
use std::path::Path;
use std::time::Duration;

fn free_udp_port() -> u16 {
    let socket = UdpSocket::bind(("127.0.0.1", 0)).expect("bind udp 127.0.0.1:0");
    socket.local_addr().expect("udp address").port()
}

/// A `--target=all` process that joins `seed`'s gossip as ingester `id`, with `key_file` if any.
fn stranger(id: &str, seed: std::net::SocketAddr, key_file: Option<&Path>) -> HeddleProcess {
    let mut args = vec![
        format!("--memberlist.join={seed}"),
        "--memberlist.bind-addr=127.0.0.1".to_owned(),
        format!("--memberlist.bind-port={}", free_udp_port()),
        format!("--ingester.ring.instance-id={id}"),
        "--ingester.ring.instance-addr=127.0.0.1".to_owned(),
        "--ingester.ring.replication-factor=1".to_owned(),
    ];
    if let Some(f) = key_file {
        args.push(format!("--memberlist.cluster-key-file={}", f.display()));
    }
    HeddleProcess::start(HeddleOptions {
        args,
        ..HeddleOptions::default()
    })
    .unwrap_or_else(|e| panic!("starting {id}: {e}"))
}

/// `heddle_memberlist_dropped_datagrams_total{reason}` on the process at `addr`.
fn dropped(addr: std::net::SocketAddr, reason: &str) -> u64 {
    let (_, text) = http_get(addr, "/metrics", Duration::from_secs(5)).expect("scrape");
    let prefix = format!("heddle_memberlist_dropped_datagrams_total{{reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn members_with_the_cluster_key_form_the_ring_and_strangers_never_join_it() {
    let keys = tempfile::tempdir().expect("temp dir");
    let (key, other) = (keys.path().join("cluster.key"), keys.path().join("other.key"));
    std::fs::write(&key, "the-cluster-secret-shared-by-members\n").expect("write key");
    std::fs::write(&other, "a-different-secret-of-some-length\n").expect("write key");

    // Starting waits for three ACTIVE ingesters: members holding the same key form the ring.
    let cluster = Cluster::start(ClusterOptions {
        ingesters: 3,
        distributors: 1,
        args: vec![format!("--memberlist.cluster-key-file={}", key.display())],
        ..ClusterOptions::default()
    })
    .unwrap_or_else(|e| panic!("starting the cluster: {e}"));
    let seed = cluster.ingester(0).gossip_addr();
    let mut strangers = [
        stranger("stranger-open", seed, None),
        stranger("stranger-other-key", seed, Some(&other)),
    ];

    let target = cluster.ingester(0).http_addr();
    assert!(
        wait_until(Duration::from_secs(30), || {
            dropped(target, "missing-tag") > 0 && dropped(target, "bad-tag") > 0
        }),
        "the strangers' datagrams never reached ingester-0 (missing-tag {}, bad-tag {})",
        dropped(target, "missing-tag"),
        dropped(target, "bad-tag")
    );
    // Many gossip rounds (200ms each) later, no process of the cluster knows them.
    for _ in 0..15 {
        for node in [cluster.distributor(0), cluster.querier(), cluster.ingester(2)] {
            let members = cluster.ring_status(node).expect("ring status");
            let ids: Vec<&str> = members.iter().map(|m| m.id.as_str()).collect();
            assert_eq!(
                ids,
                ["ingester-0", "ingester-1", "ingester-2"],
                "{}: {}",
                node.name(),
                describe(&members)
            );
            assert!(members.iter().all(|m| m.state == "ACTIVE"), "{}", describe(&members));
        }
        std::thread::sleep(Duration::from_millis(200));
    }

    // The cluster takes writes at quorum as usual.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = http_client(Duration::from_secs(10)).expect("client");
    let req = WriteRequest {
        timeseries: vec![timeseries(&[("__name__", "gossip_auth_test")], &[(now_ms(), 1.0)])],
        ..WriteRequest::default()
    };
    let outcome = runtime
        .block_on(push(&client, &cluster.distributor(0).push_url(), None, &req))
        .expect("push");
    assert!(outcome.is_success(), "{}: {}", outcome.status, outcome.body);

    for s in &mut strangers {
        let status = s.sigterm_and_wait().expect("stop the stranger");
        assert!(status.success(), "{status:?}\n{}", s.log_tail(20));
    }
}
