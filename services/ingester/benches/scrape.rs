//! What one `/metrics` scrape of an ingester costs as its heads grow: CPU time of the scraping thread, bytes
//! allocated and the exposition size, at 10k and 1M active series in one tenant and at 100 tenants x 10k
//! series. Every gauge is kept current by the event that changes it, so the cost must stay flat in series (the
//! 1M/10k ratios near 1.0); families with a tenant label grow with tenants, not with series.
//!
//! The registry is wired as `heddle --target=ingester` wires it (discarded samples, the blocks bucket with the
//! shipper's metrics, the ingester with its limits) and the series go through the real push path (WAL
//! included). The scrape is the `/metrics` handler's own call, `heddle_server::encode_metrics`.
//!
//! `cargo bench -p heddle-ingester --bench scrape` (add `-- 10k` or `-- 1m` to run one scenario). CPU time is the
//! thread's own (`/proc/thread-self/schedstat`, nanoseconds), so other load on the machine inflates it little;
//! allocations are counted by a wrapper around the system allocator while nothing else runs.

use bytes::Bytes;
use heddle_ingester::{Ingester, IngesterConfig, TsdbConfig};
use heddle_limits::{Limits, Overrides};
use heddle_model::TenantId;
use heddle_proto::IngesterClient;
use heddle_proto::prometheus::{Label, Sample, TimeSeries, WriteRequest};
use heddle_server::DiscardedSamples;
use prometheus_client::registry::Registry;
use prost::Message as _;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Counts bytes and calls of every allocation (reallocations count their new size).
struct Counting;

static ALLOCATED: AtomicU64 = AtomicU64::new(0);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to `System`, which upholds the `GlobalAlloc` contract; the wrapper
// only bumps two atomics.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size() as u64, Ordering::Relaxed);
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same layout as our caller's, which the contract makes valid.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size() as u64, Ordering::Relaxed);
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.fetch_add(new_size as u64, Ordering::Relaxed);
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `System` through this wrapper with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` through this wrapper with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Scrapes measured per scenario (after a few unmeasured ones): at least this many, for at least this long.
const MIN_SCRAPES: u32 = 1_000;
const MEASURE_FOR: std::time::Duration = std::time::Duration::from_secs(1);
/// Interleaved measuring rounds; each scenario reports its fastest.
const ROUNDS: u32 = 3;
const WARMUP: u32 = 5;
/// Series per push request.
const BATCH: usize = 10_000;

struct Scenario {
    name: &'static str,
    tenants: usize,
    series_per_tenant: usize,
}

const SCENARIOS: [Scenario; 3] = [
    Scenario {
        name: "10k",
        tenants: 1,
        series_per_tenant: 10_000,
    },
    Scenario {
        name: "1m",
        tenants: 1,
        series_per_tenant: 1_000_000,
    },
    Scenario {
        name: "100x10k",
        tenants: 100,
        series_per_tenant: 10_000,
    },
];

/// One scenario's per-scrape figures.
struct Measured {
    series: u64,
    cpu_us: f64,
    wall_us: f64,
    alloc_bytes: f64,
    allocations: f64,
    exposition_bytes: usize,
    families: usize,
    family_names: Vec<String>,
    ingest_secs: f64,
}

/// CPU time this thread has run, in nanoseconds (first field of `/proc/thread-self/schedstat`).
fn thread_cpu_ns() -> u64 {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").expect("read /proc/thread-self/schedstat");
    text.split_whitespace()
        .next()
        .and_then(|f| f.parse().ok())
        .expect("schedstat starts with the run time in ns")
}

fn series(metric: usize, id: usize, ts: i64) -> TimeSeries {
    TimeSeries {
        labels: vec![
            Label {
                name: "__name__".into(),
                value: format!("bench_metric_{metric}"),
            },
            Label {
                name: "instance".into(),
                value: format!("host-{}:9100", id % 1000),
            },
            Label {
                name: "series".into(),
                value: id.to_string(),
            },
        ],
        samples: vec![Sample {
            value: 1.0,
            timestamp: ts,
        }],
        ..TimeSeries::default()
    }
}

/// One scenario's ingester, its registry and the series it holds.
struct Built {
    name: &'static str,
    _dir: tempfile::TempDir,
    registry: Registry,
    ingester: Arc<Ingester>,
    series: u64,
    ingest_secs: f64,
}

fn build(s: &Scenario, runtime: &tokio::runtime::Runtime) -> Built {
    let dir = tempfile::tempdir().expect("temp dir");
    // The registry of `heddle --target=ingester`, minus the runtime-config overrides' three gauges (they live in
    // the distributor crate and do not depend on series).
    let mut registry = Registry::default();
    let discarded = DiscardedSamples::register(&mut registry);
    let bucket_cfg = heddle_bucket::BucketConfig {
        filesystem: heddle_bucket::FilesystemConfig {
            dir: dir.path().join("bucket"),
        },
        ..Default::default()
    };
    let bucket = heddle_bucket::Bucket::new(&bucket_cfg, &mut registry).expect("filesystem bucket");
    let tsdb = TsdbConfig {
        dir: dir.path().join("tsdb"),
        ..TsdbConfig::default()
    };
    let ingester = Ingester::new(&IngesterConfig::default(), tsdb, Some(bucket), &mut registry, discarded);
    ingester.set_overrides(Arc::new(Overrides::new(Limits {
        max_global_series_per_user: 0,
        max_global_series_per_metric: 0,
        ..Limits::default()
    })));
    let started = Instant::now();
    runtime.block_on(async {
        ingester.open_existing().await.expect("open");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis() as i64;
        for t in 0..s.tenants {
            let tenant = TenantId::new(&format!("tenant-{t}")).expect("tenant id");
            for start in (0..s.series_per_tenant).step_by(BATCH) {
                let end = (start + BATCH).min(s.series_per_tenant);
                let body = WriteRequest {
                    timeseries: (start..end).map(|i| series(i % 100, i, now)).collect(),
                    metadata: Vec::new(),
                }
                .encode_to_vec();
                let resp = ingester.push(&tenant, Bytes::from(body)).await.expect("push");
                assert!(resp.errors.is_empty(), "{:?}", resp.errors);
            }
        }
    });
    let ingest_secs = started.elapsed().as_secs_f64();
    let exposition = heddle_server::encode_metrics(&registry);
    let series = exposition
        .lines()
        .find_map(|l| l.strip_prefix("heddle_ingester_memory_series "))
        .and_then(|v| v.parse::<f64>().ok())
        .expect("memory series gauge") as u64;
    assert_eq!(
        series,
        (s.tenants * s.series_per_tenant) as u64,
        "{}: every series is in a head",
        s.name
    );
    eprintln!("{}: ingested {series} series in {ingest_secs:.1}s", s.name);
    Built {
        name: s.name,
        _dir: dir,
        registry,
        ingester,
        series,
        ingest_secs,
    }
}

/// Scrapes `b` for [`MEASURE_FOR`] (and at least [`MIN_SCRAPES`] times) after [`WARMUP`] scrapes.
fn measure(b: &Built) -> Measured {
    let mut exposition = String::new();
    for _ in 0..WARMUP {
        exposition = heddle_server::encode_metrics(&b.registry);
    }
    let (bytes0, allocs0) = (ALLOCATED.load(Ordering::Relaxed), ALLOCATIONS.load(Ordering::Relaxed));
    let cpu0 = thread_cpu_ns();
    let wall = Instant::now();
    let (mut size, mut scrapes) = (0, 0u32);
    // schedstat advances at scheduler ticks: scrape for long enough that a tick is a small error.
    while scrapes < MIN_SCRAPES || wall.elapsed() < MEASURE_FOR {
        size = std::hint::black_box(heddle_server::encode_metrics(&b.registry)).len();
        scrapes += 1;
    }
    let wall_ns = wall.elapsed().as_nanos() as f64;
    let cpu_ns = thread_cpu_ns() - cpu0;
    let (bytes1, allocs1) = (ALLOCATED.load(Ordering::Relaxed), ALLOCATIONS.load(Ordering::Relaxed));
    let n = f64::from(scrapes);
    Measured {
        series: b.series,
        cpu_us: cpu_ns as f64 / n / 1e3,
        wall_us: wall_ns / n / 1e3,
        alloc_bytes: (bytes1 - bytes0) as f64 / n,
        allocations: (allocs1 - allocs0) as f64 / n,
        exposition_bytes: size,
        families: exposition.lines().filter(|l| l.starts_with("# TYPE ")).count(),
        family_names: exposition
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .map(str::to_owned)
            .collect(),
        ingest_secs: b.ingest_secs,
    }
}

fn main() {
    // `cargo bench` passes `--bench`; anything else selects scenarios by name.
    let wanted: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // Every scenario is built first and then measured in interleaved rounds, keeping each one's fastest round:
    // the scenarios see the same machine, and a burst of load from elsewhere does not land on one of them.
    let built: Vec<Built> = SCENARIOS
        .iter()
        .filter(|s| wanted.is_empty() || wanted.iter().any(|w| w == s.name))
        .map(|s| build(s, &runtime))
        .collect();
    let mut best: Vec<Option<Measured>> = built.iter().map(|_| None).collect();
    for _ in 0..ROUNDS {
        for (b, slot) in built.iter().zip(best.iter_mut()) {
            let m = measure(b);
            if slot.as_ref().is_none_or(|old| m.cpu_us < old.cpu_us) {
                *slot = Some(m);
            }
        }
    }
    let rows: Vec<(&str, Measured)> = built
        .iter()
        .zip(best)
        .map(|(b, m)| (b.name, m.expect("measured")))
        .collect();
    for b in &built {
        runtime.block_on(b.ingester.close());
    }
    println!(
        "{:<9} {:>9} {:>12} {:>12} {:>14} {:>12} {:>12} {:>9} {:>9}",
        "scenario", "series", "cpu_us", "wall_us", "alloc_bytes", "allocations", "expo_bytes", "families", "ingest_s"
    );
    for (name, m) in &rows {
        println!(
            "{:<9} {:>9} {:>12.1} {:>12.1} {:>14.0} {:>12.1} {:>12} {:>9} {:>9.1}",
            name,
            m.series,
            m.cpu_us,
            m.wall_us,
            m.alloc_bytes,
            m.allocations,
            m.exposition_bytes,
            m.families,
            m.ingest_secs
        );
    }
    let find = |n: &str| rows.iter().find(|(name, _)| *name == n).map(|(_, m)| m);
    if std::env::var_os("HEDDLE_SCRAPE_FAMILIES").is_some() {
        for (name, m) in &rows {
            println!("{name}: {}", m.family_names.join(" "));
        }
    }
    if let (Some(small), Some(big)) = (find("10k"), find("1m")) {
        println!(
            "1m/10k: cpu {:.2}  alloc_bytes {:.2}  allocations {:.2}  exposition {:.2}",
            big.cpu_us / small.cpu_us,
            big.alloc_bytes / small.alloc_bytes,
            big.allocations / small.allocations,
            big.exposition_bytes as f64 / small.exposition_bytes as f64
        );
    }
    if let (Some(small), Some(wide)) = (find("10k"), find("100x10k")) {
        println!(
            "100x10k/10k: cpu {:.2}  alloc_bytes {:.2}  allocations {:.2}  exposition {:.2}",
            wide.cpu_us / small.cpu_us,
            wide.alloc_bytes / small.alloc_bytes,
            wide.allocations / small.allocations,
            wide.exposition_bytes as f64 / small.exposition_bytes as f64
        );
    }
}
