use super::*;
use crate::desc::{MembershipView, RingDesc};
use crate::instance::{InstanceDesc, InstanceState};
use crate::replication::ReplicationConfig;
use std::sync::atomic::AtomicUsize;

/// Clients in these tests are just the address they were made for.
type Client = String;

fn ring_of(states: &[(&str, InstanceState, &[u32])], unreachable: &[&str]) -> Arc<Ring> {
    let ring = Arc::new(Ring::new(ReplicationConfig::default()));
    let mut desc = RingDesc::default();
    for (id, state, tokens) in states {
        desc.upsert(InstanceDesc {
            id: id.to_string(),
            addr: format!("{id}:9095"),
            zone: String::new(),
            state: *state,
            tokens: tokens.to_vec(),
            heartbeat_ms: now_ms(),
            registered_at_ms: 0,
        });
    }
    ring.update(&MembershipView {
        desc,
        unreachable: unreachable.iter().map(|s| s.to_string()).collect(),
    });
    ring
}

/// `n` ACTIVE instances `ing-0..`, each with one token.
fn ring(n: usize, unreachable: &[&str]) -> Arc<Ring> {
    let ids: Vec<String> = (0..n).map(|k| format!("ing-{k}")).collect();
    let tokens: Vec<[u32; 1]> = (0..n).map(|k| [k as u32 * 1000]).collect();
    let states: Vec<(&str, InstanceState, &[u32])> = ids
        .iter()
        .zip(&tokens)
        .map(|(id, t)| (id.as_str(), InstanceState::Active, &t[..]))
        .collect();
    ring_of(&states, unreachable)
}

fn pool() -> Arc<ClientPool<Client>> {
    Arc::new(ClientPool::new(Arc::new(|addr: &str| Ok(addr.to_owned()))))
}

fn ids(replicas: &[Replica<Client>]) -> Vec<&str> {
    replicas.iter().map(|(id, _)| id.as_str()).collect()
}

#[test]
fn ring_write_sets_use_pooled_clients_and_fail_closed() {
    let pool = pool();
    let active = InstanceState::Active;
    let ring = ring_of(
        &[
            ("a", active, &[10]),
            ("b", active, &[20]),
            ("c", active, &[30]),
            ("d", InstanceState::Joining, &[40]),
        ],
        &[],
    );
    let r = RingReplicas::new(ring, Arc::clone(&pool));
    let set = r.for_write(25);
    assert_eq!(ids(&set.replicas), ["c", "a", "b"], "JOINING d is passed over");
    assert_eq!(set.replicas[0].1, "c:9095", "the client is the pool's for the address");
    assert_eq!(
        set.min_success, 3,
        "the set was extended past d, so its majority grew (dskit)"
    );
    r.for_write(5);
    assert_eq!(pool.len(), 3, "one client per address");

    let empty = RingReplicas::new(Arc::new(Ring::new(ReplicationConfig::default())), pool);
    let set = empty.for_write(1);
    assert!(
        set.replicas.is_empty() && set.min_success == 1,
        "an empty ring fails every series"
    );
    assert!(
        set.unavailable.as_deref().is_some_and(|e| !e.is_empty()),
        "and says why: {:?}",
        set.unavailable
    );
}

#[test]
fn an_address_without_a_client_is_a_failed_replica() {
    let made = Arc::new(AtomicUsize::new(0));
    let m = Arc::clone(&made);
    let pool: Arc<ClientPool<Client>> = Arc::new(ClientPool::new(Arc::new(move |addr: &str| {
        m.fetch_add(1, Ordering::SeqCst);
        if addr.starts_with("ing-1") {
            Err("bad address".into())
        } else {
            Ok(addr.to_owned())
        }
    })));
    let r = RingReplicas::new(ring(3, &[]), pool);
    let set = r.for_write(0);
    assert_eq!(
        ids(&set.replicas),
        ["ing-2", "ing-0"],
        "ing-1 (first in the walk) is left out of the write"
    );
    assert_eq!(set.min_success, 2, "but still counts toward the quorum size");

    let set = r.for_read().unwrap();
    assert_eq!(ids(&set.replicas), ["ing-0", "ing-2"]);
    assert_eq!(set.unreachable.len(), 1);
    assert!(set.unreachable[0].1.contains("bad address"), "{:?}", set.unreachable);
    assert_eq!(
        (set.len(), set.max_errors),
        (3, 1),
        "it counts as one of the failures a read tolerates"
    );
}

#[test]
fn quorum_is_majority() {
    for (rf, q) in [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3)] {
        assert_eq!(WriteSet::<Client>::quorum(rf), q, "rf {rf}");
    }
}

#[test]
fn ring_reads_ask_every_healthy_ingester_and_tolerate_rf_over_two() {
    let set = RingReplicas::new(ring(3, &[]), pool()).for_read().unwrap();
    assert_eq!((set.replicas.len(), set.max_errors), (3, 1));
    let set = RingReplicas::new(ring(3, &["ing-0"]), pool()).for_read().unwrap();
    assert_eq!((set.replicas.len(), set.max_errors), (2, 0));
    assert_eq!(ids(&set.replicas), ["ing-1", "ing-2"]);
}

#[test]
fn too_few_ingesters_fail_the_read_with_the_ring_error() {
    let err = RingReplicas::new(ring(3, &["ing-0", "ing-1"]), pool())
        .for_read()
        .unwrap_err();
    assert!(
        matches!(
            err,
            RingError::TooManyUnhealthy {
                required: 2,
                found: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("err-heddle-ring-too-many-unhealthy"), "{err}");
    let empty = RingReplicas::<Client>::new(Arc::new(Ring::new(ReplicationConfig::default())), pool());
    let err = empty.for_read().unwrap_err();
    assert!(err.to_string().contains("err-heddle-ring-empty"), "{err}");
}

#[test]
fn fixed_replicas_own_every_token() {
    let single = FixedReplicas::single("local", "c".to_owned());
    let set = single.for_write(7);
    assert_eq!(
        (ids(&set.replicas), set.min_success, set.unavailable),
        (vec!["local"], 1, None)
    );
    let read = single.for_read().unwrap();
    assert_eq!((ids(&read.replicas), read.max_errors), (vec!["local"], 0));

    let three: Vec<Replica<Client>> = (0..3).map(|i| (format!("i{i}"), format!("c{i}"))).collect();
    let fixed = FixedReplicas::new(three);
    assert_eq!(fixed.for_write(1).min_success, 2, "a majority by default");
    assert_eq!(
        fixed.for_read().unwrap().max_errors,
        0,
        "every replica must answer a read by default"
    );
    let tuned = fixed.clone().with_min_success(1).with_max_errors(2);
    assert_eq!(tuned.for_write(u32::MAX).min_success, 1);
    let read = tuned.for_read().unwrap();
    assert_eq!((ids(&read.replicas), read.max_errors), (vec!["i0", "i1", "i2"], 2));
    assert!(read.unreachable.is_empty());
}
