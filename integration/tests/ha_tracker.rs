//! Prometheus HA pairs deduplicated by a cluster of distributors that share their elections over gossip.
//!
//! Replica `a` of an HA pair writes through distributor 0, replica `b` through distributor 1, as two
//! Prometheus servers behind a load balancer may. Distributor 1 must drop `b` because distributor 0 elected
//! `a`, keep dropping it while `a` sends, elect `b` only after `a` has been silent for the failover timeout,
//! and then distributor 0 must drop `a`. What the querier returns is exactly the accepted samples, in one
//! series without the replica label.

use heddle_model::{Labels, Sample};
use heddle_proto::prometheus::WriteRequest;
use heddle_testkit::{
    Cluster, ClusterOptions, Node, ReadClient, ReadMode, eq, http_client, http_get, now_ms, push, query, timeseries,
    wait_until,
};
use std::time::{Duration, Instant};

const FAILOVER: Duration = Duration::from_secs(3);
/// How often a distributor republishes the elected replica's last-sample time.
const UPDATE: Duration = Duration::from_secs(1);

fn request(replica: &str, t: i64, v: f64) -> WriteRequest {
    let labels = [
        ("__name__", "ha_up"),
        ("__replica__", replica),
        ("cluster", "prom-pair"),
        ("job", "ha"),
    ];
    WriteRequest {
        timeseries: vec![timeseries(&labels, &[(t, v)])],
        ..WriteRequest::default()
    }
}

/// The replica distributor `node` shows as elected on its HA tracker page, if any.
fn elected_on(node: &Node) -> Option<String> {
    let (status, html) = http_get(node.http_addr(), "/distributor/ha_tracker", Duration::from_secs(5)).ok()?;
    assert_eq!(status, 200, "{html}");
    let start = html.find("class=\"replica\">")? + "class=\"replica\">".len();
    Some(html[start..].split('<').next()?.to_owned())
}

#[test]
fn distributors_share_the_elected_replica_and_fail_over_together() {
    let cluster = Cluster::start(ClusterOptions {
        args: vec![
            "--distributor.ha-tracker.enable".into(),
            "--distributor.ha-tracker.enable-for-all-users".into(),
            format!("--distributor.ha-tracker.update-timeout={}s", UPDATE.as_secs()),
            "--distributor.ha-tracker.update-timeout-jitter-max=0s".into(),
            format!("--distributor.ha-tracker.failover-timeout={}s", FAILOVER.as_secs()),
        ],
        ..ClusterOptions::default()
    })
    .unwrap_or_else(|e| panic!("starting the cluster: {e}"));
    let (d0, d1) = (cluster.distributor(0), cluster.distributor(1));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let http = http_client(Duration::from_secs(10)).expect("client");
    let mut accepted: Vec<Sample> = Vec::new();
    let mut send = |node: &Node, replica: &str, v: f64| {
        let t = now_ms();
        let out = rt
            .block_on(push(&http, &node.push_url(), None, &request(replica, t, v)))
            .expect("push");
        if out.status == 200 {
            accepted.push(Sample { t, v });
        }
        (out.status, out.body, t)
    };

    // a is elected through distributor 0; distributor 1 learns it over gossip.
    let (status, body, _) = send(d0, "a", 1.0);
    assert_eq!(status, 200, "{body}");
    assert!(
        wait_until(Duration::from_secs(15), || elected_on(d1).as_deref() == Some("a")),
        "distributor 1 never saw a elected: {:?}",
        elected_on(d1)
    );

    // While a sends (for longer than the failover timeout), b is dropped on the other distributor.
    let until = Instant::now() + FAILOVER * 2;
    let mut n = 1.0;
    let mut a_last = 0;
    while Instant::now() < until {
        n += 1.0;
        let (status, body, t) = send(d0, "a", n);
        assert_eq!(status, 200, "a is elected: {body}");
        a_last = t;
        let (status, body, _) = send(d1, "b", 1000.0 + n);
        assert_eq!(status, 202, "b must be dropped while a sends: {body}");
        assert!(body.contains("err-heddle-ha-replica-not-elected"), "{body}");
        assert!(body.contains(r#"replica "a" is elected"#), "{body}");
        std::thread::sleep(Duration::from_millis(300));
    }

    // a goes silent: b is elected once a's last sample is older than the failover timeout.
    let deadline = Instant::now() + Duration::from_secs(20);
    let b_first = loop {
        n += 1.0;
        let (status, body, t) = send(d1, "b", 1000.0 + n);
        if status == 200 {
            break t;
        }
        assert_eq!(status, 202, "{body}");
        assert!(Instant::now() < deadline, "b never elected after a went silent");
        std::thread::sleep(Duration::from_millis(200));
    };
    // Distributor 1 knows a's last sample as of distributor 0's last update (at most UPDATE old), as in
    // Mimir: a failover comes between FAILOVER - UPDATE and FAILOVER (plus gossip) after a's last sample.
    let silence = Duration::from_millis((b_first - a_last) as u64);
    assert!(
        silence + UPDATE > FAILOVER,
        "failed over after only {silence:?} of silence"
    );

    // Distributor 0 adopts the election: a, back, is now the dropped one.
    assert!(
        wait_until(Duration::from_secs(15), || elected_on(d0).as_deref() == Some("b")),
        "distributor 0 never saw b elected: {:?}",
        elected_on(d0)
    );
    let (status, body, _) = send(d0, "a", n + 0.5);
    assert_eq!(status, 202, "a must now be dropped: {body}");

    // Exactly the accepted samples, one series, no replica label.
    let read = ReadClient::new(
        http_client(Duration::from_secs(30)).expect("client"),
        &cluster.querier().prometheus_url(),
        None,
    );
    let got = rt
        .block_on(read.read(
            ReadMode::Samples,
            vec![query(0, now_ms() + 60_000, vec![eq("__name__", "ha_up")])],
        ))
        .expect("remote read");
    let series = &got[0];
    assert_eq!(series.len(), 1, "{series:?}");
    assert_eq!(
        series[0].labels,
        Labels::from_sorted([("__name__", "ha_up"), ("cluster", "prom-pair"), ("job", "ha")]).expect("labels"),
    );
    assert_eq!(series[0].samples, accepted);
    assert!(accepted.iter().any(|s| s.v >= 1000.0), "b's samples are there");
}
