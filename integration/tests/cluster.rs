//! Fault tolerance of a real cluster (3 ingesters, 2 distributors, 1 querier, RF 3, gossip ring): under a steady
//! load through both distributors, an ingester killed with SIGKILL, restarted, frozen with SIGSTOP, a rolling
//! restart of all three, the loss of a whole zone and an operator forgetting a dead ingester never lose a
//! sample the distributors acknowledged. Every check reads the data back through the querier and compares it bit
//! for bit with what the generator sent.
//!
//! The tests run one at a time (each starts six processes; on a small machine two clusters at once would
//! measure CPU starvation, not heddle).

use heddle_model::{Labels, Sample};
use heddle_testkit::cluster::{describe, state_of};
use heddle_testkit::{
    Cluster, ClusterOptions, ReadClient, ReadMode, SeriesGen, eq, http_client, push, query, wait_until,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One cluster at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Series per round and per request.
const SERIES: usize = 300;
const BATCH: usize = 100;
/// Upper bound of rounds in one load run (keeps every timestamp in the past: see [`Load::new`]).
const MAX_ROUNDS: u32 = 1500;
/// Pause between rounds: a steady load rather than a flood.
const ROUND_PAUSE: Duration = Duration::from_millis(20);
/// Attempts per request before it counts as failed (Prometheus retries 5xx forever; the test must end).
const MAX_ATTEMPTS: u32 = 40;
/// Bound on any wait for the load to make progress.
const PROGRESS_TIMEOUT: Duration = Duration::from_secs(40);
/// Tenant of unauthenticated requests.
const TENANT: &str = "anonymous";

/// What the sender saw.
#[derive(Debug, Default)]
struct LoadReport {
    rounds: u32,
    requests: u64,
    status_5xx: u64,
    transport_errors: u64,
    /// Requests that never got a 2xx (4xx, or 5xx after every retry): `(batch, round, last answer)`.
    failed: Vec<(usize, u32, String)>,
    /// Latency of every attempt.
    latencies: Vec<Duration>,
}

impl LoadReport {
    fn p99(&self) -> Duration {
        let mut l = self.latencies.clone();
        l.sort();
        l.get((l.len() * 99).div_ceil(100).saturating_sub(1))
            .copied()
            .unwrap_or_default()
    }

    fn max(&self) -> Duration {
        self.latencies.iter().copied().max().unwrap_or_default()
    }

    fn summary(&self) -> String {
        format!(
            "rounds={} requests={} 5xx={} transport_errors={} failed={} p99={:?} max={:?}",
            self.rounds,
            self.requests,
            self.status_5xx,
            self.transport_errors,
            self.failed.len(),
            self.p99(),
            self.max()
        )
    }
}

/// A steady remote-write load through every distributor, on a tokio runtime of its own, so the test thread
/// stays free to kill and restart processes. Round `r` pushes sample `r` of every series, in `SERIES/BATCH`
/// concurrent requests that alternate between the distributors; a request is retried on 5xx and transport
/// errors (with backoff, like Prometheus) before the next round starts, so each series' samples stay in order.
struct Load {
    runtime: tokio::runtime::Runtime,
    task: tokio::task::JoinHandle<LoadReport>,
    stop: Arc<AtomicBool>,
    rounds_done: Arc<AtomicU32>,
    data: SeriesGen,
}

impl Load {
    fn start(cluster: &Cluster, job: &str) -> Self {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_millis() as i64;
        let interval_ms = 1000;
        // Round MAX_ROUNDS-1 is still a minute in the past.
        let start_ms = (now_ms - (i64::from(MAX_ROUNDS) + 60) * interval_ms) / interval_ms * interval_ms;
        let mut data = SeriesGen::new(7, SERIES, 10, start_ms);
        data.job = job.to_owned();
        data.interval_ms = interval_ms;
        let urls: Vec<String> = cluster.distributors().iter().map(|d| d.push_url()).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let rounds_done = Arc::new(AtomicU32::new(0));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("load runtime");
        let task = runtime.spawn(run_load(
            data.clone(),
            urls,
            Arc::clone(&stop),
            Arc::clone(&rounds_done),
        ));
        Self {
            runtime,
            task,
            stop,
            rounds_done,
            data,
        }
    }

    fn rounds_done(&self) -> u32 {
        self.rounds_done.load(Ordering::SeqCst)
    }

    /// Waits until `more` further rounds have been acknowledged (or retried to exhaustion).
    fn wait_rounds(&self, more: u32) {
        let target = self.rounds_done() + more;
        assert!(
            wait_until(PROGRESS_TIMEOUT, || self.rounds_done() >= target
                || self.task.is_finished()),
            "the load did not get from round {} to {target} within {PROGRESS_TIMEOUT:?}",
            self.rounds_done()
        );
        assert!(
            !self.task.is_finished(),
            "the load ended early (round {})",
            self.rounds_done()
        );
    }

    fn finish(self) -> (SeriesGen, LoadReport) {
        self.stop.store(true, Ordering::SeqCst);
        let report = self.runtime.block_on(self.task).expect("load task");
        (self.data, report)
    }
}

async fn run_load(
    data: SeriesGen,
    urls: Vec<String>,
    stop: Arc<AtomicBool>,
    rounds_done: Arc<AtomicU32>,
) -> LoadReport {
    let client = http_client(Duration::from_secs(30)).expect("http client");
    let mut report = LoadReport::default();
    for round in 0..MAX_ROUNDS {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let batches = SERIES.div_ceil(BATCH);
        let sends = (0..batches).map(|b| {
            let url = urls[(b + round as usize) % urls.len()].clone();
            let req = data.write_request(b * BATCH..(b + 1) * BATCH, round..round + 1);
            let client = client.clone();
            async move { (b, send_with_retries(&client, &url, &req).await) }
        });
        for (b, outcome) in futures_join(sends).await {
            report.requests += outcome.attempts.len() as u64;
            for a in &outcome.attempts {
                report.latencies.push(a.latency);
                match a.status {
                    Some(s) if s >= 500 => report.status_5xx += 1,
                    None => report.transport_errors += 1,
                    _ => {}
                }
            }
            if let Some(err) = outcome.failure {
                report.failed.push((b, round, err));
            }
        }
        report.rounds = round + 1;
        rounds_done.store(round + 1, Ordering::SeqCst);
        tokio::time::sleep(ROUND_PAUSE).await;
    }
    report
}

/// Runs the futures concurrently and returns their outputs in order.
async fn futures_join<F: std::future::Future + Send + 'static>(futs: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.expect("push task"));
    }
    out
}

struct Attempt {
    status: Option<u16>,
    latency: Duration,
}

struct SendOutcome {
    attempts: Vec<Attempt>,
    /// Set when no attempt got a 2xx.
    failure: Option<String>,
}

async fn send_with_retries(
    client: &reqwest::Client,
    url: &str,
    req: &heddle_proto::prometheus::WriteRequest,
) -> SendOutcome {
    let mut attempts = Vec::new();
    let mut backoff = Duration::from_millis(50);
    let mut last = String::new();
    for _ in 0..MAX_ATTEMPTS {
        let t0 = Instant::now();
        let res = push(client, url, None, req).await;
        let latency = t0.elapsed();
        match res {
            Ok(o) if o.is_success() => {
                attempts.push(Attempt {
                    status: Some(o.status),
                    latency,
                });
                return SendOutcome {
                    attempts,
                    failure: None,
                };
            }
            Ok(o) => {
                attempts.push(Attempt {
                    status: Some(o.status),
                    latency,
                });
                last = format!("{url}: {} {}", o.status, o.body);
                if o.status < 500 {
                    break;
                }
            }
            Err(e) => {
                attempts.push(Attempt { status: None, latency });
                last = e.to_string();
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
    SendOutcome {
        attempts,
        failure: Some(last),
    }
}

/// Reads every series of the load's job through the querier and compares it with what was sent: every round
/// of every series, bit for bit, nothing more. Returns the number of samples checked.
fn assert_all_read_back(cluster: &Cluster, data: &SeriesGen, report: &LoadReport, when: &str) -> u64 {
    assert!(
        report.failed.is_empty(),
        "{when}: {} requests were never acknowledged, e.g. {:?}",
        report.failed.len(),
        report.failed.first()
    );
    assert_rounds_read_back(cluster, data, report.rounds, when)
}

/// Like [`assert_all_read_back`] for rounds `0..rounds`, all acknowledged.
fn assert_rounds_read_back(cluster: &Cluster, data: &SeriesGen, rounds: u32, when: &str) -> u64 {
    let (lo, hi) = data.time_range(rounds);
    let read = ReadClient::new(
        http_client(Duration::from_secs(60)).expect("http client"),
        &cluster.querier().prometheus_url(),
        None,
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("read runtime");
    let mut checked = 0u64;
    for mode in [ReadMode::Samples, ReadMode::StreamedChunks] {
        let got = rt
            .block_on(read.read(mode, vec![query(lo, hi, vec![eq("job", &data.job)])]))
            .unwrap_or_else(|e| panic!("{when}: remote read ({mode:?}) through the querier failed: {e}"));
        let got: BTreeMap<Labels, Vec<Sample>> = got
            .into_iter()
            .next()
            .expect("one result per query")
            .into_iter()
            .map(|s| (s.labels, s.samples))
            .collect();
        let wanted: BTreeSet<Labels> = (0..data.series).map(|i| data.model_labels(i)).collect();
        let have: BTreeSet<Labels> = got.keys().cloned().collect();
        assert_eq!(
            have.len(),
            wanted.len(),
            "{when} ({mode:?}): {} series read back, {} sent; missing e.g. {:?}",
            have.len(),
            wanted.len(),
            wanted.difference(&have).next()
        );
        checked = 0;
        for i in 0..data.series {
            let labels = data.model_labels(i);
            let samples = &got[&labels];
            let expected: Vec<(i64, u64)> = (0..rounds)
                .map(|r| {
                    let s = data.sample(i, r);
                    (s.t, s.v.to_bits())
                })
                .collect();
            let actual: Vec<(i64, u64)> = samples.iter().map(|s| (s.t, s.v.to_bits())).collect();
            if actual != expected {
                let missing = expected.iter().filter(|e| !actual.contains(e)).count();
                let extra = actual.iter().filter(|a| !expected.contains(a)).count();
                panic!(
                    "{when} ({mode:?}): series {i} {labels:?}: {missing} of {} acknowledged samples missing or \
                     different, {extra} unexpected",
                    expected.len()
                );
            }
            checked += expected.len() as u64;
        }
    }
    checked
}

fn start_cluster(opts: ClusterOptions) -> Cluster {
    let t0 = Instant::now();
    let cluster = Cluster::start(opts).unwrap_or_else(|e| panic!("starting the cluster: {e}"));
    eprintln!("cluster up in {:?} at {}", t0.elapsed(), cluster.root_dir().display());
    cluster
}

/// Ownership share of `id` as distributor 0 sees it: equal shares mean equal tokens.
fn ownership(cluster: &Cluster, id: &str) -> (u32, f64) {
    let members = cluster.ring_status(cluster.distributor(0)).expect("ring status");
    let m = members
        .iter()
        .find(|m| m.id == id)
        .unwrap_or_else(|| panic!("{id} not in the ring: {}", describe(&members)));
    (m.tokens, m.ownership_percent)
}

#[test]
fn kill9_then_restart_under_load_loses_no_acknowledged_sample() {
    let _serial = serial();
    let mut cluster = start_cluster(ClusterOptions::default());
    let victim = 1;
    let id = cluster.ingester(victim).name().to_owned();
    let tokens_before = std::fs::read(cluster.ingester(victim).tokens_path()).expect("tokens file written at start");
    let owned_before = ownership(&cluster, &id);
    assert_eq!(owned_before.0, 128, "default token count");

    let load = Load::start(&cluster, "kill9");
    load.wait_rounds(10);
    cluster.kill9(victim).expect("kill -9");
    let killed_at = load.rounds_done();
    // Keep writing with the ingester gone until every reader has marked it unhealthy, and some more.
    cluster
        .wait_ring(&format!("{id} not ACTIVE"), |m| state_of(m, &id) != Some("ACTIVE"))
        .expect("the dead ingester is noticed");
    load.wait_rounds(10);
    let (data, report) = load.finish();
    eprintln!("kill -9 {id} at round {killed_at}: {}", report.summary());
    let checked = assert_all_read_back(&cluster, &data, &report, "with one ingester killed");
    eprintln!("kill -9: {checked} acknowledged samples read back with {id} down, 0 lost");

    // Phase 2: it comes back with the same tokens, replays its WAL and turns ACTIVE, under a second load.
    let load = Load::start(&cluster, "restart");
    load.wait_rounds(5);
    cluster.restart(victim).expect("restart after kill -9");
    assert_eq!(
        std::fs::read(cluster.ingester(victim).tokens_path()).expect("tokens file"),
        tokens_before,
        "the tokens file changed across the restart"
    );
    assert_eq!(
        ownership(&cluster, &id),
        owned_before,
        "{id} came back with other tokens"
    );
    let stats = cluster.tenant_stats(victim, TENANT).expect("tenant stats");
    assert!(stats.series >= SERIES as u64, "series after replay: {stats:?}");
    assert_eq!(
        stats.head_min_time_ms,
        Some(data.start_ms),
        "the replayed head must reach back to the first load's round 0: {stats:?}"
    );
    load.wait_rounds(10);
    let (data2, report2) = load.finish();
    eprintln!("restart: {}", report2.summary());
    let checked2 = assert_all_read_back(&cluster, &data2, &report2, "after the restart");
    let checked1 = assert_all_read_back(&cluster, &data, &report, "the first load, after the restart");
    eprintln!(
        "restart: {} acknowledged samples read back, 0 lost",
        checked1 + checked2
    );
}

#[test]
fn rolling_restart_loses_no_acknowledged_sample() {
    // Ingesters keep their ring entry (LEAVING) while stopped, as the Helm chart runs them.
    rolling_restart(false);
}

#[test]
fn rolling_restart_with_unregister_on_shutdown_loses_no_acknowledged_sample() {
    // Ingesters leave the ring on SIGTERM and rejoin with the tokens from their tokens file.
    rolling_restart(true);
}

/// Restarts every ingester in turn (SIGTERM, wait, start, wait until ACTIVE everywhere) under load.
fn rolling_restart(unregister_on_shutdown: bool) {
    let _serial = serial();
    let mut cluster = start_cluster(ClusterOptions {
        unregister_on_shutdown,
        ..ClusterOptions::default()
    });
    let name = format!("rolling restart (unregister_on_shutdown={unregister_on_shutdown})");
    let load = Load::start(&cluster, "rolling");
    load.wait_rounds(5);
    for i in 0..cluster.ingesters().len() {
        let tokens = std::fs::read(cluster.ingester(i).tokens_path()).expect("tokens file");
        let status = cluster.sigterm(i).expect("SIGTERM");
        assert!(
            status.success(),
            "{} exited with {status} on SIGTERM\n{}",
            cluster.ingester(i).name(),
            cluster.ingester(i).log_tail(20)
        );
        let id = cluster.ingester(i).name().to_owned();
        if unregister_on_shutdown {
            cluster
                .wait_ring(&format!("{id} gone"), |m| state_of(m, &id).is_none())
                .expect("the stopped ingester left the ring");
        } else {
            cluster
                .wait_ring(&format!("{id} in the ring but not ACTIVE"), |m| {
                    state_of(m, &id).is_some_and(|s| s != "ACTIVE")
                })
                .expect("the stopped ingester keeps its entry, no longer ACTIVE");
        }
        load.wait_rounds(3);
        cluster.restart(i).expect("restart");
        assert_eq!(
            std::fs::read(cluster.ingester(i).tokens_path()).expect("tokens file"),
            tokens,
            "{id} changed its tokens across the restart"
        );
        load.wait_rounds(5);
    }
    let (data, report) = load.finish();
    eprintln!("{name}: {}", report.summary());
    if report.status_5xx > 0 {
        for d in cluster.distributors() {
            eprintln!("{name}: {} log tail:\n{}", d.name(), d.log_tail(6));
        }
    }
    let checked = assert_all_read_back(&cluster, &data, &report, &name);
    eprintln!("{name}: {checked} acknowledged samples read back, 0 lost");
}

#[test]
fn frozen_ingester_stalls_neither_writes_nor_reads() {
    let _serial = serial();
    let opts = ClusterOptions::default();
    let deadline = opts.remote_timeout;
    let bound = deadline + Duration::from_secs(3);
    let mut cluster = start_cluster(opts);
    let frozen_id = cluster.ingester(2).name().to_owned();
    let load = Load::start(&cluster, "sigstop");
    load.wait_rounds(5);
    cluster.sigstop(2).expect("SIGSTOP");
    let frozen = Instant::now();
    load.wait_rounds(2);

    // A read that reaches the frozen ingester before anyone noticed it must not wait for it.
    let t0 = Instant::now();
    let rounds = load.rounds_done();
    assert_rounds_read_back(&cluster, &load.data, rounds, "while an ingester is frozen");
    let read_took = t0.elapsed();
    assert!(
        read_took <= bound,
        "a read took {read_took:?} with one ingester frozen; the bound is {bound:?}"
    );

    // Stay frozen well past the push deadline and until every reader has noticed.
    for _ in 0..1000 {
        if frozen.elapsed() >= deadline * 3 {
            break;
        }
        load.wait_rounds(1);
    }
    cluster
        .wait_ring(&format!("{frozen_id} not ACTIVE"), |m| {
            state_of(m, &frozen_id) != Some("ACTIVE")
        })
        .expect("the frozen ingester is noticed");
    load.wait_rounds(5);
    let frozen_for = frozen.elapsed();
    cluster.sigcont(2).expect("SIGCONT");
    cluster
        .wait_ring(&format!("{frozen_id} ACTIVE again"), |m| {
            state_of(m, &frozen_id) == Some("ACTIVE")
        })
        .expect("the thawed ingester is ACTIVE again");
    load.wait_rounds(5);
    let (data, report) = load.finish();
    eprintln!(
        "sigstop for {frozen_for:?}, read while frozen took {read_took:?}: {}",
        report.summary()
    );
    assert!(
        report.max() <= bound,
        "a push took {:?} with one ingester frozen; the bound is the push deadline plus slack, {bound:?}",
        report.max()
    );
    let checked = assert_all_read_back(&cluster, &data, &report, "after SIGSTOP/SIGCONT");
    eprintln!("sigstop: {checked} acknowledged samples read back, 0 lost");
}

#[test]
fn losing_a_whole_zone_keeps_writes_and_reads_working() {
    let _serial = serial();
    let mut cluster = start_cluster(ClusterOptions {
        zone_awareness: true,
        ..ClusterOptions::default()
    });
    let members = cluster.ring_status(cluster.distributor(0)).expect("ring status");
    let zones: BTreeSet<&str> = members.iter().map(|m| m.zone.as_str()).collect();
    assert_eq!(zones.len(), 3, "one ingester per zone: {members:?}");

    let load = Load::start(&cluster, "zones");
    load.wait_rounds(5);
    cluster.kill9(0).expect("kill -9 zone-0");
    let id = cluster.ingester(0).name().to_owned();
    cluster
        .wait_ring(&format!("{id} not ACTIVE"), |m| state_of(m, &id) != Some("ACTIVE"))
        .expect("the lost zone is noticed");
    load.wait_rounds(10);
    let (data, report) = load.finish();
    eprintln!("zone loss: {}", report.summary());
    let checked = assert_all_read_back(&cluster, &data, &report, "with zone-0 down");
    eprintln!("zone loss: {checked} acknowledged samples read back, 0 lost");
}

/// Six ingesters in three zones (two per zone): losing both ingesters of one zone keeps writes and reads
/// complete, as Mimir's zone-aware read rule promises. Counting failed instances instead (all but RF/2 = 1 of
/// the six must answer) refused every read once the zone was down.
#[test]
fn losing_a_zone_of_two_ingesters_keeps_reads_complete() {
    let _serial = serial();
    let mut cluster = start_cluster(ClusterOptions {
        ingesters: 6,
        distributors: 1,
        zone_awareness: true,
        zones: 3,
        ..ClusterOptions::default()
    });
    let members = cluster.ring_status(cluster.distributor(0)).expect("ring status");
    let lost: Vec<String> = members
        .iter()
        .filter(|m| m.zone == "zone-0")
        .map(|m| m.id.clone())
        .collect();
    assert_eq!(lost.len(), 2, "two ingesters per zone: {}", describe(&members));

    let load = Load::start(&cluster, "zone-of-two");
    load.wait_rounds(5);
    for i in 0..6 {
        if lost.iter().any(|id| id == cluster.ingester(i).name()) {
            cluster.kill9(i).expect("kill -9 an ingester of zone-0");
        }
    }
    cluster
        .wait_ring("zone-0 not ACTIVE", |m| {
            lost.iter().all(|id| state_of(m, id) != Some("ACTIVE"))
        })
        .expect("the lost zone is noticed");
    load.wait_rounds(10);
    let (data, report) = load.finish();
    eprintln!("zone of two lost: {}", report.summary());
    let checked = assert_all_read_back(&cluster, &data, &report, "with both ingesters of zone-0 down");
    eprintln!("zone of two lost: {checked} acknowledged samples read back, 0 lost");
}

#[test]
fn a_forgotten_dead_ingester_leaves_every_ring_and_writes_continue() {
    let _serial = serial();
    let mut cluster = start_cluster(ClusterOptions::default());
    let id = cluster.ingester(2).name().to_owned();
    let load = Load::start(&cluster, "forget");
    load.wait_rounds(5);
    cluster.kill9(2).expect("kill -9");
    cluster
        .wait_ring(&format!("{id} not ACTIVE"), |m| state_of(m, &id) != Some("ACTIVE"))
        .expect("the dead ingester is noticed");
    cluster
        .forget(cluster.distributor(0), &id)
        .expect("forget the dead ingester");
    cluster
        .wait_ring(&format!("{id} forgotten"), |m| {
            m.len() == 2 && state_of(m, &id).is_none()
        })
        .expect("every reader drops the forgotten ingester");
    load.wait_rounds(10);
    let (data, report) = load.finish();
    eprintln!("forget: {}", report.summary());
    let checked = assert_all_read_back(&cluster, &data, &report, "after forgetting a dead ingester");
    eprintln!("forget: {checked} acknowledged samples read back, 0 lost");
}
