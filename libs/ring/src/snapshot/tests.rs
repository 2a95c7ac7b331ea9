use super::*;
use crate::desc::RingDesc;
use crate::instance::InstanceState;
use crate::tokens::generate_tokens;
use proptest::prelude::*;
use rand::SeedableRng;
use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

const NOW: i64 = 1_000_000;

pub(crate) fn instance(id: &str, zone: &str, state: InstanceState, tokens: Vec<u32>) -> InstanceDesc {
    InstanceDesc {
        id: id.into(),
        addr: format!("{id}:9095"),
        zone: zone.into(),
        state,
        tokens,
        heartbeat_ms: NOW,
        registered_at_ms: 1,
    }
}

fn view(instances: Vec<InstanceDesc>) -> MembershipView {
    let mut desc = RingDesc::default();
    for i in instances {
        desc.upsert(i);
    }
    MembershipView {
        desc,
        unreachable: BTreeSet::new(),
    }
}

fn cfg(rf: usize, zones: bool) -> ReplicationConfig {
    ReplicationConfig {
        replication_factor: rf,
        zone_awareness_enabled: zones,
        heartbeat_timeout: Duration::from_secs(60),
    }
}

fn ids(set: &InstanceSet<'_>) -> Vec<String> {
    set.instances.iter().map(|i| i.id.clone()).collect()
}

/// Five instances a..e owning tokens 100, 200, 300, 400, 500: a key of 150 starts the walk at c (token 200 is b's,
/// but keys equal or above a token belong to the next one).
fn five(states: [InstanceState; 5]) -> Vec<InstanceDesc> {
    ["a", "b", "c", "d", "e"]
        .iter()
        .zip(states)
        .enumerate()
        .map(|(k, (id, st))| instance(id, "", st, vec![(k as u32 + 1) * 100]))
        .collect()
}

#[test]
fn table_cases() {
    use InstanceState::*;
    struct Case {
        name: &'static str,
        instances: Vec<InstanceDesc>,
        unreachable: &'static [&'static str],
        op: Operation,
        token: u32,
        want: Result<(&'static [&'static str], usize), ()>,
    }
    let mut stale = five([Active; 5]);
    stale[2].heartbeat_ms = NOW - 61_000;
    let cases = vec![
        Case {
            name: "plain walk",
            instances: five([Active; 5]),
            unreachable: &[],
            op: Operation::Write,
            token: 150,
            want: Ok((&["b", "c", "d"], 2)),
        },
        Case {
            name: "wraps around",
            instances: five([Active; 5]),
            unreachable: &[],
            op: Operation::Write,
            token: 450,
            want: Ok((&["e", "a", "b"], 2)),
        },
        Case {
            name: "key equal to a token goes to the next",
            instances: five([Active; 5]),
            unreachable: &[],
            op: Operation::Write,
            token: 200,
            want: Ok((&["c", "d", "e"], 2)),
        },
        Case {
            name: "joining extends the write set and raises the quorum",
            instances: five([Active, Active, Joining, Active, Active]),
            unreachable: &[],
            op: Operation::Write,
            token: 150,
            want: Ok((&["b", "d", "e"], 3)),
        },
        Case {
            name: "leaving is still read",
            instances: five([Active, Active, Leaving, Active, Active]),
            unreachable: &[],
            op: Operation::Read,
            token: 150,
            want: Ok((&["b", "c", "d"], 2)),
        },
        Case {
            name: "unreachable is skipped without raising the quorum",
            instances: five([Active; 5]),
            unreachable: &["c"],
            op: Operation::Write,
            token: 150,
            want: Ok((&["b", "d", "e"], 2)),
        },
        Case {
            name: "stale heartbeat is skipped",
            instances: stale,
            unreachable: &[],
            op: Operation::Write,
            token: 150,
            want: Ok((&["b", "d", "e"], 2)),
        },
        Case {
            name: "two of five left still make a quorum",
            instances: five([Active; 5]),
            unreachable: &["a", "b", "c"],
            op: Operation::Write,
            token: 150,
            want: Ok((&["d", "e"], 2)),
        },
        Case {
            name: "one of five left is below quorum",
            instances: five([Active; 5]),
            unreachable: &["a", "b", "c", "d"],
            op: Operation::Write,
            token: 150,
            want: Err(()),
        },
        Case {
            name: "all joining cannot take writes",
            instances: five([Joining; 5]),
            unreachable: &[],
            op: Operation::Write,
            token: 1,
            want: Err(()),
        },
    ];
    for case in cases {
        let mut v = view(case.instances);
        v.unreachable = case.unreachable.iter().map(|s| s.to_string()).collect();
        let snap = RingSnapshot::new(&v, cfg(3, false));
        match (snap.replica_set(case.token, case.op, NOW), case.want) {
            (Ok(set), Ok((want_ids, want_q))) => {
                assert_eq!(ids(&set), want_ids, "{}", case.name);
                assert_eq!(set.min_success, want_q, "{}", case.name);
            }
            (Err(e), Err(())) => assert!(
                e.to_string().contains("err-heddle-ring-too-many-unhealthy"),
                "{}: {e}",
                case.name
            ),
            (got, want) => panic!("{}: got {got:?}, want {want:?}", case.name),
        }
    }
}

#[test]
fn empty_ring_is_an_error() {
    let snap = RingSnapshot::new(&MembershipView::default(), cfg(3, false));
    assert!(matches!(
        snap.replica_set(1, Operation::Write, NOW),
        Err(RingError::Empty)
    ));
    assert!(matches!(
        snap.read_instances(Operation::Read, NOW),
        Err(RingError::Empty)
    ));
}

#[test]
fn fewer_instances_than_rf_take_all_and_need_a_majority_of_rf() {
    let snap = RingSnapshot::new(&view(five([InstanceState::Active; 5])[..2].to_vec()), cfg(3, false));
    let set = snap.replica_set(0, Operation::Write, NOW).unwrap();
    assert_eq!(ids(&set), ["a", "b"]);
    assert_eq!(set.min_success, 2);
    let single = RingSnapshot::new(&view(five([InstanceState::Active; 5])[..1].to_vec()), cfg(1, false));
    assert_eq!(single.replica_set(12345, Operation::Write, NOW).unwrap().min_success, 1);
}

#[test]
fn zone_awareness_takes_one_per_zone_and_survives_losing_a_zone() {
    use InstanceState::Active;
    // Tokens interleave so a zone-blind walk from 0 would take a1, a2, b1.
    let instances = vec![
        instance("a1", "za", Active, vec![10]),
        instance("a2", "za", Active, vec![20]),
        instance("b1", "zb", Active, vec![30]),
        instance("b2", "zb", Active, vec![40]),
        instance("c1", "zc", Active, vec![50]),
    ];
    let snap = RingSnapshot::new(&view(instances.clone()), cfg(3, true));
    let set = snap.replica_set(0, Operation::Write, NOW).unwrap();
    assert_eq!(ids(&set), ["a1", "b1", "c1"]);
    let mut v = view(instances);
    v.unreachable = ["a1".to_string(), "a2".to_string()].into();
    let snap = RingSnapshot::new(&v, cfg(3, true));
    let set = snap.replica_set(0, Operation::Write, NOW).unwrap();
    assert_eq!(ids(&set), ["b1", "c1"], "zone za down: the other two zones");
    assert_eq!(set.min_success, 2);
}

/// Three zones of two ingesters each, a-1 a-2 b-1 b-2 c-1 c-2, with `down` unreachable.
fn three_zones(down: &[&str]) -> RingSnapshot {
    let instances = ["a", "b", "c"]
        .iter()
        .enumerate()
        .flat_map(|(z, zone)| {
            (1..=2).map(move |n| {
                instance(
                    &format!("{zone}-{n}"),
                    zone,
                    InstanceState::Active,
                    vec![(z * 2 + n) as u32 * 100],
                )
            })
        })
        .collect();
    let mut v = view(instances);
    v.unreachable = down.iter().map(|s| s.to_string()).collect();
    RingSnapshot::new(&v, cfg(3, true))
}

fn read_ids(set: &ReadInstances<'_>) -> Vec<String> {
    set.instances.iter().map(|i| i.id.clone()).collect()
}

#[test]
fn zone_aware_reads_survive_a_whole_zone_and_skip_its_healthy_instances() {
    let all = three_zones(&[]);
    let set = all.read_instances(Operation::Read, NOW).unwrap();
    assert_eq!(read_ids(&set), ["a-1", "a-2", "b-1", "b-2", "c-1", "c-2"]);
    assert_eq!(
        (set.max_errors, set.max_unavailable_zones),
        (0, Some(1)),
        "RF 3 over 3 zones: one zone may fail"
    );

    // Zone a entirely down: the instance-count rule (6 - 3/2 = 5 of 6 needed) would refuse this read.
    let zone_down = three_zones(&["a-1", "a-2"]);
    let set = zone_down.read_instances(Operation::Read, NOW).unwrap();
    assert_eq!(read_ids(&set), ["b-1", "b-2", "c-1", "c-2"]);
    assert_eq!(set.max_unavailable_zones, Some(0), "b and c must both answer whole");

    // One instance of zone a down: the whole zone is left out, its healthy a-2 included.
    let one_down = three_zones(&["a-1"]);
    let set = one_down.read_instances(Operation::Read, NOW).unwrap();
    assert_eq!(read_ids(&set), ["b-1", "b-2", "c-1", "c-2"]);
}

#[test]
fn zone_aware_reads_fail_with_two_zones_down_naming_them() {
    let err = three_zones(&["a-1", "a-2", "b-2"])
        .read_instances(Operation::Read, NOW)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "err-heddle-ring-too-many-unhealthy-zones: a zone-aware read needs every instance of 2 of the 3 zones, \
         but 2 zones have unhealthy or unreachable instances (at most 1 may): zone \"a\": a-1,a-2; zone \"b\": b-2"
    );
    // RF 5 over 5 zones tolerates two.
    let instances = ["a", "b", "c", "d", "e"]
        .iter()
        .enumerate()
        .map(|(z, zone)| instance(zone, zone, InstanceState::Active, vec![z as u32 * 100 + 1]))
        .collect();
    let mut v = view(instances);
    v.unreachable = ["a".to_string(), "b".to_string()].into();
    let five_zones = RingSnapshot::new(&v, cfg(5, true));
    let set = five_zones.read_instances(Operation::Read, NOW).unwrap();
    assert_eq!((set.instances.len(), set.max_unavailable_zones), (3, Some(0)));
}

#[test]
fn read_set_tolerates_rf_over_two_failures() {
    let mut v = view(five([InstanceState::Active; 5]));
    let snap = RingSnapshot::new(&v, cfg(3, false));
    let set = snap.read_instances(Operation::Read, NOW).unwrap();
    assert_eq!((set.instances.len(), set.max_errors), (5, 1));
    v.unreachable.insert("a".into());
    let snap = RingSnapshot::new(&v, cfg(3, false));
    let set = snap.read_instances(Operation::Read, NOW).unwrap();
    assert_eq!((set.instances.len(), set.max_errors), (4, 0));
    v.unreachable.insert("b".into());
    let snap = RingSnapshot::new(&v, cfg(3, false));
    assert!(
        snap.read_instances(Operation::Read, NOW).is_err(),
        "two of five down with RF 3 may lose series"
    );
}

#[test]
fn duplicated_token_goes_to_the_earlier_registration() {
    let mut early = instance("z-early", "", InstanceState::Active, vec![100]);
    early.registered_at_ms = 1;
    let mut late = instance("a-late", "", InstanceState::Active, vec![100, 200]);
    late.registered_at_ms = 2;
    let snap = RingSnapshot::new(&view(vec![early, late]), cfg(1, false));
    assert_eq!(snap.tokens().len(), 2);
    assert_eq!(ids(&snap.replica_set(50, Operation::Write, NOW).unwrap()), ["z-early"]);
}

fn random_ring(n: usize, tokens: usize, zones: usize, seed: u64) -> Vec<InstanceDesc> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut taken = BTreeSet::new();
    (0..n)
        .map(|k| {
            let t = generate_tokens(tokens, &taken, &mut rng).unwrap();
            taken.extend(t.iter().copied());
            let zone = if zones == 0 {
                String::new()
            } else {
                format!("zone-{}", k % zones)
            };
            instance(&format!("ing-{k:03}"), &zone, InstanceState::Active, t)
        })
        .collect()
}

/// The primary owner of every key range, as (range start, owner id) over the token table.
fn primary_owners(snap: &RingSnapshot) -> Vec<(u32, String)> {
    (0..snap.tokens().len())
        .map(|pos| {
            let (token, owner) = snap.tokens().at(pos);
            (token, snap.instance(owner).id.clone())
        })
        .collect()
}

/// Owner of `key` in a primary-owner list sorted by token.
fn owner_of(owners: &[(u32, String)], key: u32) -> &str {
    let i = owners.partition_point(|(t, _)| *t <= key);
    &owners[if i == owners.len() { 0 } else { i }].1
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn replica_sets_are_rf_distinct_instances(n in 3usize..30, rf in 1usize..4, zone_aware in any::<bool>(), seed in any::<u64>(), keys in proptest::collection::vec(any::<u32>(), 50)) {
        let zones = if zone_aware { rf } else { 0 };
        let snap = RingSnapshot::new(&view(random_ring(n, 16, zones, seed)), cfg(rf, zone_aware));
        for key in keys {
            let set = snap.replica_set(key, Operation::Write, NOW).unwrap();
            let distinct: HashSet<&str> = set.instances.iter().map(|i| i.id.as_str()).collect();
            prop_assert_eq!(set.instances.len(), rf, "key {}", key);
            prop_assert_eq!(distinct.len(), rf, "key {}", key);
            prop_assert_eq!(set.min_success, rf / 2 + 1);
            if zone_aware {
                let zones: HashSet<&str> = set.instances.iter().map(|i| i.zone.as_str()).collect();
                prop_assert_eq!(zones.len(), rf, "key {}: zones repeat", key);
            }
        }
    }

    #[test]
    fn dead_instances_never_serve_and_sets_stay_full(n in 5usize..20, dead in 0usize..3, seed in any::<u64>(), keys in proptest::collection::vec(any::<u32>(), 50)) {
        let instances = random_ring(n, 16, 0, seed);
        let mut v = view(instances.clone());
        v.unreachable = instances.iter().take(dead).map(|i| i.id.clone()).collect();
        let snap = RingSnapshot::new(&v, cfg(3, false));
        for key in keys {
            let set = snap.replica_set(key, Operation::Write, NOW).unwrap();
            prop_assert_eq!(set.instances.len(), 3);
            prop_assert!(set.instances.iter().all(|i| !v.unreachable.contains(&i.id)));
        }
    }

    #[test]
    fn adding_an_instance_moves_about_one_nth_of_the_space(n in 4usize..40, seed in any::<u64>()) {
        let mut instances = random_ring(n + 1, 128, 0, seed);
        let newcomer = instances.pop().unwrap();
        let before = RingSnapshot::new(&view(instances.clone()), cfg(1, false));
        instances.push(newcomer.clone());
        let after = RingSnapshot::new(&view(instances), cfg(1, false));
        let (old, new) = (primary_owners(&before), primary_owners(&after));
        // Walk every boundary of both tables: between two consecutive boundaries ownership is constant.
        let mut bounds: Vec<u32> = old.iter().chain(new.iter()).map(|(t, _)| *t).collect();
        bounds.sort_unstable();
        bounds.dedup();
        let mut moved: u64 = 0;
        for (k, &lo) in bounds.iter().enumerate() {
            let hi = bounds.get(k + 1).copied().map(u64::from).unwrap_or(1u64 << 32) + if k + 1 == bounds.len() { u64::from(bounds[0]) } else { 0 };
            let (o, w) = (owner_of(&old, lo), owner_of(&new, lo));
            if o != w {
                prop_assert_eq!(w, newcomer.id.as_str(), "a range moved between two old instances");
                moved += hi - u64::from(lo);
            }
        }
        let fraction = moved as f64 / (1u64 << 32) as f64;
        let ideal = 1.0 / (n + 1) as f64;
        // 128 random tokens: the newcomer's share has a relative spread of about 1/sqrt(128) ~ 9%.
        prop_assert!(fraction > ideal * 0.6 && fraction < ideal * 1.5, "moved {fraction:.4}, ideal {ideal:.4} (n={n})");
    }
}
