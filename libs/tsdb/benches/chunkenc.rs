//! XOR chunk decoding speed (no criterion, prints figures): `cargo bench -p heddle-tsdb --bench chunkenc`.
//!
//! Builds 10,000 chunks (`HEDDLE_BENCH_CHUNKS`) of 120 samples (`HEDDLE_BENCH_SAMPLES`; the open chunks a
//! snapshot holds are often shorter) at a 15 s interval, with the values of the head benches' workload (two
//! decimal gauges and counters growing by varying steps); one chunk in four has timestamps jittered by up to
//! ±50 ms, as scrapes that do not land on the exact interval. Then reports, in ns per sample, each over passes
//! of all chunks for about 1.5 s, and in the fastest pass (the least disturbed on a shared machine):
//! - iterate: every sample of every chunk through [`XorIter`] (what [`XorChunk::iter`] returns), as queries
//!   and compaction read them;
//! - from_bytes: [`XorChunk::from_bytes`] from a borrowed slice (copy, decode, restore the appender state),
//!   as restoring a head from a chunk snapshot does for every open chunk.
//!
//! Asserts nothing about speed.

use std::hint::black_box;
use std::time::{Duration, Instant};

use heddle_tsdb::chunkenc::{XorChunk, XorIter};

#[path = "support/workload.rs"]
mod workload;
use workload::{T0, env, value};

/// The allocator the `heddle` binary ships with: `from_bytes` allocates the chunk's buffer.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const INTERVAL_MS: i64 = 15_000;
/// How long each measurement repeats its passes over all chunks.
const MEASURE: Duration = Duration::from_millis(1_500);

/// Timestamp of sample `round` of chunk `i`: on the interval, or jittered for one chunk in four.
fn timestamp(i: usize, round: i64) -> i64 {
    let t = T0 + round * INTERVAL_MS;
    if i % 4 != 1 {
        return t;
    }
    let x = (i as u64).wrapping_mul(0xd6e8_feb8_6659_fd93) ^ (round as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    t + (x >> 33) as i64 % 101 - 50
}

fn build(chunks: usize, samples: i64) -> Vec<Vec<u8>> {
    (0..chunks)
        .map(|i| {
            let mut c = XorChunk::new();
            for round in 0..samples {
                c.append(timestamp(i, round), value(i, round)).expect("append");
            }
            c.into_bytes()
        })
        .collect()
}

/// Runs `pass` over all chunks until [`MEASURE`] has elapsed (after one warm-up pass); returns ns per sample over
/// all passes, and in the fastest pass.
fn measure(chunks: &[Vec<u8>], mut pass: impl FnMut(&[u8]) -> u64) -> (f64, f64) {
    let samples_per_pass: u64 = chunks.iter().map(|c| pass(c)).sum();
    let (started, mut passes, mut best) = (Instant::now(), 0u64, Duration::MAX);
    while started.elapsed() < MEASURE {
        let pass_started = Instant::now();
        let mut n = 0;
        for c in chunks {
            n += pass(black_box(c));
        }
        best = best.min(pass_started.elapsed());
        assert_eq!(n, samples_per_pass, "every pass decodes every sample");
        passes += 1;
    }
    let per_sample = |d: Duration, passes: u64| d.as_nanos() as f64 / (passes * samples_per_pass) as f64;
    (per_sample(started.elapsed(), passes), per_sample(best, 1))
}

fn main() {
    let n = env("HEDDLE_BENCH_CHUNKS", 10_000);
    let per_chunk = env("HEDDLE_BENCH_SAMPLES", 120) as i64;
    let chunks = build(n, per_chunk);
    let bytes: usize = chunks.iter().map(Vec::len).sum();
    let samples = n as f64 * per_chunk as f64;
    println!(
        "chunks={n} samples/chunk={per_chunk} bytes/sample={:.2}",
        bytes as f64 / samples
    );

    let iterate = measure(&chunks, |c| {
        let (mut n, mut seen) = (0, 0u64);
        for s in XorIter::new(c) {
            n += 1;
            seen ^= s.t as u64 ^ s.v.to_bits();
        }
        black_box(seen);
        n
    });
    println!("iterate: {:.2} ns/sample (best pass {:.2})", iterate.0, iterate.1);

    let from_bytes = measure(&chunks, |c| {
        let c = XorChunk::from_bytes(c).expect("valid chunk");
        u64::from(black_box(c).num_samples())
    });
    println!(
        "from_bytes: {:.2} ns/sample (best pass {:.2})",
        from_bytes.0, from_bytes.1
    );
}
