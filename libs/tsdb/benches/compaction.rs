//! Head compaction on the shared 8-label workload (no criterion, prints figures):
//!
//! ```text
//! cargo bench -p heddle-tsdb --bench compaction                      # 1M series, one sample a minute
//! HEDDLE_BENCH_SERIES=100000 HEDDLE_BENCH_INTERVAL_MS=15000 cargo bench -p heddle-tsdb --bench compaction
//! ```
//!
//! Fills a head with a bit more than one 2 h block range, then cuts that range into a block (raise the minimum
//! valid time, write the block, truncate the head and checkpoint the WAL) on one thread while another keeps
//! appending newer samples in remote-write-sized batches, as pushes do. Reports:
//! - block bytes per sample (index + chunks over the samples in the block);
//! - compaction wall time, split into block write and truncation;
//! - peak RSS during compaction (`VmHWM` after resetting it) above the RSS before it, and the anonymous RSS
//!   after it (the peak counts mapped `chunks_head/` pages, which are file-backed);
//! - append latency per 5,000-series batch (p50/p99/max) while compaction runs vs. just before it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use heddle_tsdb::{Head, HeadOptions};

#[path = "support/workload.rs"]
mod workload;
use workload::{BATCH, T0, append_batch, append_rounds_at, dir_bytes, env, rss_bytes, series_values, status_bytes};

const RANGE_MS: i64 = 2 * 3600 * 1000;

/// Resets `VmHWM` to the current RSS (Linux `clear_refs` 5).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn report(what: &str, mut lat: Vec<Duration>) {
    lat.sort_unstable();
    println!(
        "append latency {what}: {} batches, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        lat.len(),
        percentile(&lat, 0.5).as_secs_f64() * 1e3,
        percentile(&lat, 0.99).as_secs_f64() * 1e3,
        lat.last().copied().unwrap_or_default().as_secs_f64() * 1e3
    );
}

fn main() {
    let series = env("HEDDLE_BENCH_SERIES", 1_000_000);
    let interval = env("HEDDLE_BENCH_INTERVAL_MS", 60_000) as i64;
    let dir = tempfile::tempdir().expect("temp dir");
    let values: Vec<[String; 8]> = (0..series).map(series_values).collect();
    let (head, _) = Head::open(dir.path(), HeadOptions::default()).expect("open head");
    let head = Arc::new(head);

    // One block range plus a few rounds after it.
    let in_range = RANGE_MS / interval;
    let filled = in_range + 5;
    let started = Instant::now();
    let samples = append_rounds_at(&head, &values, 0..filled, interval);
    println!(
        "series={series} interval={interval}ms rounds={filled} samples={samples} appended in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // Baseline: the latency of appending one round, batch by batch, with nothing else running.
    let batch_latencies = |round: i64| -> Vec<Duration> {
        values
            .chunks(BATCH)
            .enumerate()
            .map(|(k, chunk)| {
                let t = Instant::now();
                append_batch(&head, chunk, k * BATCH, round, interval);
                t.elapsed()
            })
            .collect()
    };
    let mut next_round = filled;
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.extend(batch_latencies(next_round));
        next_round += 1;
    }

    let rss_before = rss_bytes();
    reset_peak_rss();
    let done = Arc::new(AtomicBool::new(false));
    let compactor = {
        let (head, done, parent) = (Arc::clone(&head), Arc::clone(&done), dir.path().to_path_buf());
        std::thread::spawn(move || {
            let started = Instant::now();
            head.raise_min_valid_time(T0 + RANGE_MS);
            let meta = head
                .write_block(&parent, T0, T0 + RANGE_MS, None)
                .expect("write block")
                .expect("a block");
            let written = started.elapsed();
            let truncated = head.truncate(T0 + RANGE_MS).expect("truncate");
            let total = started.elapsed();
            done.store(true, Ordering::Release);
            (meta, written, total - written, truncated)
        })
    };
    let mut busy = Vec::new();
    // Bounded: stop appending after 1,000 rounds even if compaction never finishes.
    while !done.load(Ordering::Acquire) && next_round < filled + 1_000 {
        busy.extend(batch_latencies(next_round));
        next_round += 1;
    }
    let (meta, write_time, truncate_time, truncated) = compactor.join().expect("compaction thread");
    let peak = status_bytes("VmHWM:");
    let anon = status_bytes("RssAnon:");
    let block_bytes = dir_bytes(&dir.path().join(&meta.ulid));
    println!(
        "block: {} series, {} chunks, {} samples, {block_bytes} bytes => {:.2} bytes/sample",
        meta.stats.num_series,
        meta.stats.num_chunks,
        meta.stats.num_samples,
        block_bytes as f64 / meta.stats.num_samples.max(1) as f64
    );
    println!(
        "compaction: block written in {:.2} s, head truncated + WAL checkpointed in {:.2} s ({} series removed, {} chunks dropped)",
        write_time.as_secs_f64(),
        truncate_time.as_secs_f64(),
        truncated.series_removed,
        truncated.chunks_removed
    );
    println!(
        "rss: before compaction {} MiB, peak during it {} MiB (+{} MiB, {:.0} bytes/series)",
        rss_before >> 20,
        peak >> 20,
        peak.saturating_sub(rss_before) >> 20,
        peak.saturating_sub(rss_before) as f64 / series as f64
    );
    // The peak includes pages of the memory-mapped chunks_head files the block was read from (file-backed,
    // reclaimable); the anonymous part is the process' own memory.
    println!("rss after compaction: anonymous {} MiB", anon >> 20);
    report("without compaction", idle);
    report("during compaction", busy);
}
