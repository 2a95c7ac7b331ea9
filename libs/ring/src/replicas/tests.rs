use super::*;
use crate::desc::{MembershipView, RingDesc};
use crate::instance::{InstanceDesc, InstanceState};
use crate::replication::ReplicationConfig;
use std::sync::atomic::AtomicUsize;

/// Clients in these tests are just the address they were made for.
type Client = String;

fn ring_of(states: &[(&str, InstanceState, &[u32])], unreachable: &[&str]) -> Arc<Ring> {
    let zoned: Vec<(&str, &str, InstanceState, &[u32])> = states.iter().map(|&(id, s, t)| (id, "", s, t)).collect();
    ring_with(ReplicationConfig::default(), &zoned, unreachable)
}

/// A ring under `cfg` of `(id, zone, state, tokens)` instances.
fn ring_with(
    cfg: ReplicationConfig,
    states: &[(&str, &str, InstanceState, &[u32])],
    unreachable: &[&str],
) -> Arc<Ring> {
    let ring = Arc::new(Ring::new(cfg));
    let mut desc = RingDesc::default();
    for (id, zone, state, tokens) in states {
        desc.upsert(InstanceDesc {
            id: id.to_string(),
            addr: format!("{id}:9095"),
            zone: zone.to_string(),
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

/// A pool that counts the clients it makes and can make none for `ing-1`'s address.
fn counting_pool_without_ing_1() -> (Arc<ClientPool<Client>>, Arc<AtomicUsize>) {
    let made = Arc::new(AtomicUsize::new(0));
    let m = Arc::clone(&made);
    let pool = Arc::new(ClientPool::new(Arc::new(move |addr: &str| {
        m.fetch_add(1, Ordering::SeqCst);
        if addr.starts_with("ing-1") {
            Err("bad address".into())
        } else {
            Ok(addr.to_owned())
        }
    })));
    (pool, made)
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
    let (pool, _) = counting_pool_without_ing_1();
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

/// Series `i`'s set in `sets` as (instance ids, clients, min_success).
fn expand(sets: &WriteSets<Client>, i: usize) -> (Vec<&str>, Vec<&str>, usize) {
    let set = sets.set(i);
    let table = sets.instances();
    let ids = set.replicas.iter().map(|&n| table[n as usize].0.as_str()).collect();
    let clients = set.replicas.iter().map(|&n| table[n as usize].1.as_str()).collect();
    (ids, clients, set.min_success)
}

/// Asks `r` for the sets of `tokens` at once.
fn write_sets_of<R: Replicas<Client>>(r: &R, tokens: &[u32]) -> WriteSets<Client> {
    let mut sets = WriteSets::default();
    r.write_sets(tokens.len(), &mut |i| tokens[i], &mut sets);
    sets
}

/// Every set of a request equals what `for_write` says of its token, and the table lists each instance once.
fn assert_same_as_for_write<R: Replicas<Client>>(r: &R, tokens: &[u32]) -> WriteSets<Client> {
    let sets = write_sets_of(r, tokens);
    assert_eq!(sets.len(), tokens.len());
    for (i, &token) in tokens.iter().enumerate() {
        let one = r.for_write(token);
        let (ids_got, clients, min_success) = expand(&sets, i);
        assert_eq!(ids_got, ids(&one.replicas), "token {token}");
        let want_clients: Vec<&str> = one.replicas.iter().map(|(_, c)| c.as_str()).collect();
        assert_eq!(clients, want_clients, "token {token}");
        assert_eq!(min_success, one.min_success, "token {token}");
    }
    let mut table = ids(sets.instances());
    table.sort_unstable();
    let before = table.len();
    table.dedup();
    assert_eq!(table.len(), before, "each instance once in the table: {table:?}");
    sets
}

#[test]
fn ring_write_sets_answer_each_token_as_for_write_does() {
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
    let r = RingReplicas::new(ring, pool());
    let tokens = [25, 5, 35, 15, 25, u32::MAX];
    let sets = assert_same_as_for_write(&r, &tokens);
    assert_eq!(
        expand(&sets, 0),
        (vec!["c", "a", "b"], vec!["c:9095", "a:9095", "b:9095"], 3)
    );
    assert_eq!(ids(sets.instances()), ["c", "a", "b"], "numbered in order of first use");
    assert_eq!(sets.unavailable(), None);

    let mut reused = sets;
    let empty = RingReplicas::new(Arc::new(Ring::new(ReplicationConfig::default())), pool());
    empty.write_sets(2, &mut |_| 1, &mut reused);
    assert_eq!(reused.len(), 2, "the buffers are cleared first");
    assert!(reused.instances().is_empty());
    assert_eq!(
        expand(&reused, 1),
        (vec![], vec![], 1),
        "an empty ring fails every series"
    );
    assert_eq!(reused.unavailable(), empty.for_write(1).unavailable.as_deref());
    assert!(
        reused
            .unavailable()
            .is_some_and(|e| e.contains("err-heddle-ring-empty")),
        "{:?}",
        reused.unavailable()
    );
}

#[test]
fn ring_write_sets_extend_past_unhealthy_instances() {
    let r = RingReplicas::new(ring(4, &["ing-1"]), pool());
    let tokens: Vec<u32> = (0..40).map(|k| k * 100).collect();
    let sets = assert_same_as_for_write(&r, &tokens);
    // From token 0 the walk meets ing-1 first: it is skipped and the set extended to the next healthy one.
    assert_eq!(expand(&sets, 0).0, ["ing-2", "ing-3", "ing-0"]);
    assert_eq!(expand(&sets, 0).2, 2, "a skipped instance does not grow the quorum");
    assert!(
        (0..sets.len()).all(|i| !expand(&sets, i).0.contains(&"ing-1")),
        "the unreachable instance gets nothing"
    );
    assert_eq!(sets.instances().len(), 3);
}

#[test]
fn ring_write_sets_report_the_ring_error_of_the_tokens_it_fails() {
    // RF 1: from token 5 the walk takes ACTIVE a and stops; from 15 it passes two JOINING instances, which
    // grow the quorum to 2 with only a to write to.
    let cfg = ReplicationConfig {
        replication_factor: 1,
        ..ReplicationConfig::default()
    };
    let joining = InstanceState::Joining;
    let ring = ring_with(
        cfg,
        &[
            ("a", "", InstanceState::Active, &[10]),
            ("b", "", joining, &[20]),
            ("c", "", joining, &[30]),
        ],
        &[],
    );
    let r = RingReplicas::new(ring, pool());
    let sets = assert_same_as_for_write(&r, &[5, 15, 5, 15]);
    assert_eq!(expand(&sets, 0), (vec!["a"], vec!["a:9095"], 1));
    assert_eq!(expand(&sets, 1), (vec![], vec![], 1), "a failed set: no replica");
    assert_eq!(
        expand(&sets, 2),
        (vec!["a"], vec!["a:9095"], 1),
        "later tokens are unaffected"
    );
    let one = r.for_write(15).unavailable.expect("for_write fails the token too");
    assert_eq!(sets.unavailable(), Some(one.as_str()), "the ring's own words");
    assert!(one.contains("err-heddle-ring-too-many-unhealthy"), "{one}");
}

#[test]
fn ring_write_sets_are_zone_aware() {
    let cfg = ReplicationConfig {
        replication_factor: 3,
        zone_awareness_enabled: true,
        ..ReplicationConfig::default()
    };
    let active = InstanceState::Active;
    // Zones a, a, b, b, c, c around the ring: a zone-blind walk would take two of one zone.
    let ring = ring_with(
        cfg,
        &[
            ("a1", "zone-a", active, &[10, 70]),
            ("a2", "zone-a", active, &[20, 80]),
            ("b1", "zone-b", active, &[30, 90]),
            ("b2", "zone-b", active, &[40, 100]),
            ("c1", "zone-c", active, &[50, 110]),
            ("c2", "zone-c", active, &[60, 120]),
        ],
        &[],
    );
    let r = RingReplicas::new(ring, pool());
    let tokens: Vec<u32> = (0..130).collect();
    let sets = assert_same_as_for_write(&r, &tokens);
    for (i, token) in tokens.iter().enumerate() {
        let (set_ids, _, min_success) = expand(&sets, i);
        let mut zones: Vec<char> = set_ids.iter().map(|id| id.as_bytes()[0] as char).collect();
        zones.sort_unstable();
        assert_eq!(zones, ['a', 'b', 'c'], "token {token}: {set_ids:?}");
        assert_eq!(min_success, 2);
    }
    assert_eq!(expand(&sets, 15).0, ["a2", "b1", "c1"]);
    assert_eq!(sets.instances().len(), 6);
}

#[test]
fn ring_write_sets_look_each_client_up_once_per_request() {
    let (pool, made) = counting_pool_without_ing_1();
    let r = RingReplicas::new(ring(3, &[]), pool);
    let tokens: Vec<u32> = (0..100).map(|k| k * 29).collect();
    let sets = write_sets_of(&r, &tokens);
    assert_eq!(
        made.load(Ordering::SeqCst),
        3,
        "one factory call per instance for 100 series, the failing address included"
    );
    assert_eq!(ids(sets.instances()), ["ing-2", "ing-0"], "ing-1 has no client");
    for (i, token) in tokens.iter().enumerate() {
        assert_eq!(expand(&sets, i).0.len(), 2, "token {token}: ing-1 left out");
        assert_eq!(expand(&sets, i).2, 2, "but still counted toward the quorum size");
    }
}

/// Lists `a` twice for every token and says why it found no other instance.
#[derive(Debug)]
struct TwiceRing;

impl Replicas<Client> for TwiceRing {
    fn for_write(&self, token: u32) -> WriteSet<Client> {
        WriteSet {
            replicas: vec![
                ("a".to_owned(), "first".to_owned()),
                ("a".to_owned(), format!("again-{token}")),
            ],
            min_success: 2,
            unavailable: Some(format!("only one instance for {token}")),
        }
    }

    fn for_read(&self) -> Result<ReadSet<Client>, RingError> {
        Err(RingError::Empty)
    }
}

#[test]
fn an_instance_listed_twice_keeps_both_places_under_one_number() {
    let sets = write_sets_of(&TwiceRing, &[7, 8]);
    assert_eq!(
        sets.instances(),
        [("a".to_owned(), "first".to_owned())],
        "one table entry, the first client"
    );
    for i in 0..2 {
        let set = sets.set(i);
        assert_eq!(
            set.replicas,
            [0, 0],
            "both places kept, so the set's size is what the ring said"
        );
        assert_eq!(set.min_success, 2);
    }
    assert_eq!(sets.unavailable(), Some("only one instance for 7"), "the first reason");
}

#[test]
fn fixed_write_sets_share_one_list_and_need_no_tokens() {
    let three: Vec<Replica<Client>> = (0..3).map(|i| (format!("i{i}"), format!("c{i}"))).collect();
    let fixed = FixedReplicas::new(three).with_min_success(1);
    let mut sets = WriteSets::default();
    fixed.write_sets(4, &mut |_| panic!("a fixed list has no use for tokens"), &mut sets);
    assert_eq!(ids(sets.instances()), ["i0", "i1", "i2"]);
    for i in 0..4 {
        assert_eq!(expand(&sets, i), (vec!["i0", "i1", "i2"], vec!["c0", "c1", "c2"], 1));
    }
    assert_eq!(sets.unavailable(), None);
    fixed.write_sets(0, &mut |_| 0, &mut sets);
    assert!(sets.is_empty() && sets.instances().is_empty(), "no series, no instance");
}
