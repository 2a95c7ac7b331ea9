//! Reads through the real ring seam ([`RingReplicas`]) when replicas fail: a whole zone lost, an ingester
//! still replaying its WAL. The answer is either complete (200 with every series) or an error, never a
//! 200 missing data.

use super::*;
use heddle_ring::{
    ClientPool, InstanceDesc, InstanceState, MembershipView, ReplicationConfig, Ring, RingDesc, RingReplicas, now_ms,
};
use std::collections::HashMap;

/// What an ingester still replaying its WAL answers every read with (the ingester's `check_readable`).
fn replaying() -> FakeIngester {
    FakeIngester::new().with_fault(Fault::Fail(tonic::Status::unavailable(
        "ingester is not ready: replaying the WAL; its data is incomplete until the replay ends",
    )))
}

/// Series `s1`..`s4`, ten samples each.
fn series_labels(n: usize) -> [(&'static str, &'static str); 2] {
    let names = ["s1", "s2", "s3", "s4"];
    [("__name__", "up"), ("series", names[n - 1])]
}

/// An ingester holding the series numbered `held`.
fn holding(held: &[usize]) -> FakeIngester {
    held.iter().fold(FakeIngester::new(), |f, &n| {
        f.with_samples(&series_labels(n), &samples(0..10), 120)
    })
}

/// A querier over a ring of `ingesters` (id, zone, client), `unreachable` as gossip reports them.
fn querier_over(ingesters: Vec<(&str, &str, FakeIngester)>, unreachable: &[&str], zone_aware: bool) -> axum::Router {
    let ring = Arc::new(Ring::new(ReplicationConfig {
        replication_factor: 3,
        zone_awareness_enabled: zone_aware,
        heartbeat_timeout: Duration::from_secs(60),
    }));
    let mut desc = RingDesc::default();
    let mut clients: HashMap<String, Arc<dyn IngesterClient>> = HashMap::new();
    for (k, (id, zone, fake)) in ingesters.into_iter().enumerate() {
        let addr = format!("{id}:9095");
        desc.upsert(InstanceDesc {
            id: id.into(),
            addr: addr.clone(),
            zone: zone.into(),
            state: InstanceState::Active,
            tokens: vec![k as u32 * 1000],
            heartbeat_ms: now_ms(),
            registered_at_ms: 0,
        });
        clients.insert(addr, Arc::new(fake));
    }
    ring.update(&MembershipView {
        desc,
        unreachable: unreachable.iter().map(|s| s.to_string()).collect(),
    });
    let pool = Arc::new(ClientPool::new(Arc::new(move |addr: &str| {
        clients
            .get(addr)
            .cloned()
            .ok_or_else(|| format!("no client for {addr}"))
    })));
    let mut registry = Registry::default();
    let q = Arc::new(Querier::new(
        QuerierConfig::default(),
        Arc::new(RingReplicas::new(ring, pool)),
        &mut registry,
    ));
    router(q).layer(Extension(TenantId::new("team-a").unwrap()))
}

/// Three zones of two ingesters, RF 3: every series has one replica per zone.
/// Zone `a` (or whichever `fail` names) answers with `failing()`.
fn three_zones(fail: &[&str], failing: fn() -> FakeIngester) -> Vec<(&'static str, &'static str, FakeIngester)> {
    let layout: [(&str, &str, &[usize]); 6] = [
        ("a-1", "a", &[1, 2]),
        ("a-2", "a", &[3, 4]),
        ("b-1", "b", &[1, 3]),
        ("b-2", "b", &[2, 4]),
        ("c-1", "c", &[1, 4]),
        ("c-2", "c", &[2, 3]),
    ];
    layout
        .into_iter()
        .map(|(id, zone, held)| {
            let fake = if fail.contains(&id) { failing() } else { holding(held) };
            (id, zone, fake)
        })
        .collect()
}

/// The series names and sample counts of a remote-read answer for `up`; panics unless it is a 200.
async fn read_all(app: &axum::Router) -> Vec<(String, usize)> {
    let req = read_request(vec![query(0, 100, vec![matcher(Type::Eq, "__name__", "up")])], &[]);
    let resp = decode_samples_response(&send(app, req).await);
    resp.results[0]
        .timeseries
        .iter()
        .map(|ts| {
            let name = ts.labels.iter().find(|l| l.name == "series").map(|l| l.value.clone());
            (name.unwrap_or_default(), ts.samples.len())
        })
        .collect()
}

fn everything() -> Vec<(String, usize)> {
    ["s1", "s2", "s3", "s4"].iter().map(|s| (s.to_string(), 10)).collect()
}

#[tokio::test]
async fn a_zone_aware_read_survives_a_whole_zone_failing_and_returns_every_series() {
    // Zone a in the ring but failing every call: the read skips the zone and answers from b and c.
    let app = querier_over(three_zones(&["a-1", "a-2"], down), &[], true);
    assert_eq!(read_all(&app).await, everything());
    let a = send(&app, get("/prometheus/api/v1/label/series/values")).await;
    assert_eq!(a.status, StatusCode::OK, "{}", String::from_utf8_lossy(&a.body));
    assert_eq!(json(&a)["data"], serde_json::json!(["s1", "s2", "s3", "s4"]));

    // Zone a gone from gossip: the ring leaves it out and the others still answer in full.
    let app = querier_over(three_zones(&[], down), &["a-1", "a-2"], true);
    assert_eq!(read_all(&app).await, everything());

    // One instance of zone a failing fails the zone, not the read.
    let app = querier_over(three_zones(&["a-1"], down), &[], true);
    assert_eq!(read_all(&app).await, everything());
}

#[tokio::test]
async fn a_zone_aware_read_with_two_zones_failing_is_refused_not_partial() {
    // The instance-count rule would have accepted one failure in each of two zones (2 of 6 with RF 3 is
    // too many for it too); the zone rule names the zones.
    let app = querier_over(three_zones(&["a-1", "b-2"], down), &[], true);
    let req = read_request(vec![query(0, 100, vec![matcher(Type::Eq, "__name__", "up")])], &[]);
    let a = send(&app, req).await;
    let text = String::from_utf8_lossy(&a.body);
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    assert!(
        text.contains("ingesters failed in zones a,b of the 3 zones asked (at most 1 may)"),
        "{text}"
    );

    // Zone a gone from gossip and one of zone b's failing: no zone may fail any more.
    let app = querier_over(three_zones(&["b-1"], down), &["a-1", "a-2"], true);
    let a = send(&app, get("/prometheus/api/v1/labels")).await;
    let text = String::from_utf8_lossy(&a.body);
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    assert!(
        text.contains("ingesters failed in zones b of the 2 zones asked (at most 0 may)"),
        "{text}"
    );

    // Two zones gone from gossip: the ring refuses the read with its stable id.
    let app = querier_over(three_zones(&[], down), &["a-1", "b-1"], true);
    let a = send(&app, get("/prometheus/api/v1/labels")).await;
    unavailable_with(&a, "err-heddle-ring-too-many-unhealthy-zones");
}

#[tokio::test]
async fn an_ingester_replaying_its_wal_is_a_failed_replica_never_a_missing_answer() {
    // Three ingesters, RF 3 without zones: each holds every series. One replaying: the others answer.
    let all = || holding(&[1, 2, 3, 4]);
    let app = querier_over(
        vec![("i-1", "", replaying()), ("i-2", "", all()), ("i-3", "", all())],
        &[],
        false,
    );
    assert_eq!(read_all(&app).await, everything());

    // Two replaying: what the third holds may miss acknowledged samples, so the query fails (503).
    let app = querier_over(
        vec![("i-1", "", replaying()), ("i-2", "", replaying()), ("i-3", "", all())],
        &[],
        false,
    );
    for req in [
        read_request(vec![query(0, 100, vec![matcher(Type::Eq, "__name__", "up")])], &[]),
        get("/prometheus/api/v1/series?match[]=up"),
        get("/prometheus/api/v1/label/series/values"),
    ] {
        let a = send(&app, req).await;
        let text = String::from_utf8_lossy(&a.body);
        assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
        assert!(
            text.contains("2 of 3 ingesters failed (at most 1 may)") && text.contains("replaying the WAL"),
            "{text}"
        );
    }

    // Zone-aware: replaying ingesters in one zone fail that zone only.
    let app = querier_over(three_zones(&["c-1", "c-2"], replaying), &[], true);
    assert_eq!(read_all(&app).await, everything());
}
