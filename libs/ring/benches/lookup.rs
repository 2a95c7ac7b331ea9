//! Ring lookup micro benchmark: `cargo bench -p heddle-ring --bench lookup`.
//!
//! 100 ACTIVE ingesters x 128 tokens, RF 3: time the replica set of one million random series tokens with the
//! sorted token table (zone-blind and with 3 zones), and the same question asked of the `hashring` crate
//! (`get_with_replicas`), which is what the design card first named. Prints ns per series; asserts nothing
//! about speed.

use heddle_ring::{
    InstanceDesc, InstanceState, MembershipView, Operation, ReplicaBuf, ReplicationConfig, RingDesc, RingSnapshot,
    generate_tokens, now_ms,
};
use rand::{Rng, SeedableRng};
use std::collections::BTreeSet;
use std::hint::black_box;
use std::time::{Duration, Instant};

const INSTANCES: usize = 100;
const TOKENS: usize = 128;
const LOOKUPS: usize = 1_000_000;

fn ring(zones: usize) -> MembershipView {
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut taken = BTreeSet::new();
    let mut desc = RingDesc::default();
    for k in 0..INSTANCES {
        let tokens = generate_tokens(TOKENS, &taken, &mut rng).expect("tokens");
        taken.extend(tokens.iter().copied());
        desc.upsert(InstanceDesc {
            id: format!("ingester-{k:03}"),
            addr: format!("10.0.0.{k}:9095"),
            zone: if zones == 0 {
                String::new()
            } else {
                format!("zone-{}", k % zones)
            },
            state: InstanceState::Active,
            tokens,
            heartbeat_ms: now_ms(),
            registered_at_ms: 0,
        });
    }
    MembershipView {
        desc,
        unreachable: BTreeSet::new(),
    }
}

fn report(name: &str, elapsed: Duration) {
    println!(
        "{name:<48} {:>8.1} ns/series",
        elapsed.as_nanos() as f64 / LOOKUPS as f64
    );
}

fn bench_table(name: &str, zones: usize, keys: &[u32]) {
    let cfg = ReplicationConfig {
        replication_factor: 3,
        zone_awareness_enabled: zones > 0,
        heartbeat_timeout: Duration::from_secs(60),
    };
    let snap = RingSnapshot::new(&ring(zones), cfg);
    let now = now_ms();
    let mut buf = ReplicaBuf::default();
    let mut sink = 0u64;
    let started = Instant::now();
    for &key in keys {
        let q = snap
            .replicas_into(key, Operation::Write, now, &mut buf)
            .expect("lookup");
        sink += q as u64 + u64::from(buf.healthy[0]);
    }
    report(name, started.elapsed());
    black_box(sink);
}

#[derive(Debug, Clone, Hash, PartialEq)]
struct VNode {
    instance: u16,
    replica: u16,
}

fn bench_hashring(keys: &[u32]) {
    let mut hr = hashring::HashRing::new();
    for instance in 0..INSTANCES as u16 {
        for replica in 0..TOKENS as u16 {
            hr.add(VNode { instance, replica });
        }
    }
    let mut sink = 0u64;
    let mut short = 0usize;
    let started = Instant::now();
    for &key in keys.iter().take(LOOKUPS / 100) {
        // get_with_replicas(k, 2) returns 3 virtual nodes; with 128 per instance they are not always 3
        // distinct instances, which is already disqualifying.
        let nodes = hr.get_with_replicas(&key, 2).expect("non-empty");
        let distinct: BTreeSet<u16> = nodes.iter().map(|n| n.instance).collect();
        short += usize::from(distinct.len() < 3);
        sink += u64::from(nodes[0].instance);
    }
    let per = started.elapsed() * 100;
    report("hashring 0.3 get_with_replicas(2) (1% sample)", per);
    println!(
        "  hashring answers with fewer than 3 distinct instances: {short} of {}",
        LOOKUPS / 100
    );
    black_box(sink);
}

fn main() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let keys: Vec<u32> = (0..LOOKUPS).map(|_| rng.random()).collect();
    println!("{INSTANCES} instances x {TOKENS} tokens, RF 3, {LOOKUPS} random series tokens");
    bench_table("token table, no zones", 0, &keys);
    bench_table("token table, 3 zones", 3, &keys);
    bench_table("token table, no zones (again, warm)", 0, &keys);
    bench_hashring(&keys);
}
