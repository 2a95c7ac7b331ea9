//! The distributor's per-series work: `cargo bench -p heddle-distributor --bench prepare`.
//!
//! One realistic remote-write request (2,000 node-exporter-like series of 7 labels, one sample each) through
//! the arena stages (decode, validate, shard) many times, sharded onto (a) one fixed replica, the
//! single-process shape, and (b) a ring of 3 ACTIVE ingesters x 128 tokens with replication factor 3.
//! The ring case is also run with every series re-encoded (it carries an empty-valued label, which is removed
//! the way an HA replica label is), and the same series sent as remote write 2.0 are timed in process and on the
//! ring. Prints ns per series for each stage; asserts nothing about speed.

use bumpalo::Bump;
use heddle_distributor::IngesterReplicas;
use heddle_distributor::bench::Stages;
use heddle_model::TenantId;
use heddle_proto::IngesterClient;
use heddle_proto::prometheus::{Label, Sample, TimeSeries, WriteRequest};
use heddle_proto::testing::FakeIngester;
use heddle_ring::{
    ClientPool, FixedReplicas, InstanceDesc, InstanceState, MembershipView, ReplicationConfig, Ring, RingDesc,
    RingReplicas, now_ms,
};
use prost::Message as _;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SERIES: usize = 2_000;
const ROUNDS: usize = 500;
const NOW_MS: i64 = 1_704_067_200_000;

const METRICS: [&str; 10] = [
    "node_cpu_seconds_total",
    "node_memory_MemAvailable_bytes",
    "node_filesystem_avail_bytes",
    "node_network_receive_bytes_total",
    "node_network_transmit_bytes_total",
    "node_disk_read_bytes_total",
    "node_disk_written_bytes_total",
    "node_load1",
    "node_context_switches_total",
    "node_vmstat_pgfault",
];
const MODES: [&str; 8] = ["idle", "iowait", "irq", "nice", "softirq", "steal", "system", "user"];

/// 2,000 series of 7 sorted labels: metric, cluster, cpu, instance, job, mode, namespace; with `empty_pod`
/// also `pod=""`, which every series loses on the way, so each is re-encoded (as with an HA replica label).
fn request(empty_pod: bool) -> Vec<u8> {
    let timeseries = (0..SERIES)
        .map(|i| {
            let labels = [
                ("__name__", METRICS[i % METRICS.len()].to_owned()),
                ("cluster", "prod-eu-west-1".to_owned()),
                ("cpu", (i / 8 % 16).to_string()),
                ("instance", format!("10.12.{}.{}:9100", i / 128 % 256, i % 128)),
                ("job", "node-exporter".to_owned()),
                ("mode", MODES[i % MODES.len()].to_owned()),
                ("namespace", "monitoring".to_owned()),
                ("pod", String::new()),
            ];
            let labels = &labels[..if empty_pod { 8 } else { 7 }];
            TimeSeries {
                labels: labels
                    .iter()
                    .cloned()
                    .map(|(name, value)| Label {
                        name: name.to_owned(),
                        value,
                    })
                    .collect(),
                samples: vec![Sample {
                    value: i as f64,
                    timestamp: NOW_MS,
                }],
                ..TimeSeries::default()
            }
        })
        .collect();
    let raw = WriteRequest {
        timeseries,
        metadata: Vec::new(),
    }
    .encode_to_vec();
    snap::raw::Encoder::new()
        .compress_vec(&raw)
        .expect("snappy compresses any input")
}

fn client() -> Arc<dyn IngesterClient> {
    Arc::new(FakeIngester::new())
}

/// 3 ACTIVE ingesters with 128 spread tokens each, RF 3, clients from a pool.
fn ring() -> RingReplicas<Arc<dyn IngesterClient>> {
    let ring = Arc::new(Ring::new(ReplicationConfig {
        replication_factor: 3,
        zone_awareness_enabled: false,
        heartbeat_timeout: Duration::from_secs(60),
    }));
    let mut desc = RingDesc::default();
    let mut x: u32 = 0x9e37_79b9;
    for k in 0..3 {
        let tokens = (0..128)
            .map(|_| {
                // xorshift32: spread, deterministic tokens.
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x
            })
            .collect();
        desc.upsert(InstanceDesc {
            id: format!("ingester-{k}"),
            addr: format!("10.0.0.{k}:9095"),
            zone: String::new(),
            state: InstanceState::Active,
            tokens,
            heartbeat_ms: now_ms(),
            registered_at_ms: 0,
        });
    }
    ring.update(&MembershipView {
        desc,
        unreachable: Default::default(),
    });
    let pool = Arc::new(ClientPool::new(Arc::new(|_: &str| Ok(client()))));
    RingReplicas::new(ring, pool)
}

fn per_series(d: Duration) -> f64 {
    d.as_nanos() as f64 / (SERIES * ROUNDS) as f64
}

/// The remote write version of a body.
#[derive(Clone, Copy)]
enum Version {
    V1,
    V2,
}

fn bench(name: &str, stages: &Stages, ring: &IngesterReplicas, body: &[u8], version: Version) {
    let mut arena = Bump::new();
    let (mut decode, mut validate, mut shard) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let mut copies = 0;
    for _ in 0..ROUNDS {
        arena.reset();
        let t0 = Instant::now();
        let series = match version {
            Version::V1 => stages.decode(&arena, body),
            Version::V2 => stages.decode_v2(&arena, body),
        }
        .expect("decodes");
        let t1 = Instant::now();
        let valid = stages.validate(&arena, series);
        let t2 = Instant::now();
        let summary = stages.shard(&arena, ring, &valid);
        let t3 = Instant::now();
        assert_eq!(valid.accepted(), SERIES, "every series is valid");
        copies = summary.copies;
        black_box(summary);
        decode += t1 - t0;
        validate += t2 - t1;
        shard += t3 - t2;
    }
    println!(
        "{name:<28} decode {:>6.1}  validate {:>6.1}  shard {:>6.1}  total {:>6.1} ns/series ({copies} copies)",
        per_series(decode),
        per_series(validate),
        per_series(shard),
        per_series(decode + validate + shard),
    );
}

fn main() {
    let body = request(false);
    let rewritten = request(true);
    // The same series as remote write 2.0: labels as references into one symbol table.
    let body_v2 = {
        let raw = snap::raw::Decoder::new().decompress_vec(&body).expect("snappy");
        let req = WriteRequest::decode(raw.as_slice()).expect("1.0 request");
        heddle_testkit::codec::encode_write_request_v2(&req).expect("2.0 request")
    };
    let stages = Stages::new(TenantId::new("team-a").expect("tenant"), NOW_MS);
    let fixed = FixedReplicas::single("ingester-0", client());
    // The single process: its ingester takes the decoded series as a batch instead of an encoded body.
    let in_process = FixedReplicas::single(
        "ingester-0",
        Arc::new(FakeIngester::new().taking_batches()) as Arc<dyn IngesterClient>,
    );
    let ring = ring();
    // Warm up (arena growth, client pool), then alternate the two shapes.
    bench("warm-up", &stages, &fixed, &body, Version::V1);
    for _ in 0..2 {
        bench("fixed, 1 replica", &stages, &fixed, &body, Version::V1);
        bench("in process, batch", &stages, &in_process, &body, Version::V1);
        bench("in process, batch, 2.0", &stages, &in_process, &body_v2, Version::V2);
        bench("ring, 3 ingesters, RF 3", &stages, &ring, &body, Version::V1);
        bench("ring, RF 3, 2.0", &stages, &ring, &body_v2, Version::V2);
        bench("ring, RF 3, all rewritten", &stages, &ring, &rewritten, Version::V1);
    }
}
