//! Chunk encoding speed and size (no criterion, prints figures): `cargo bench -p heddle-tsdb --bench chunkenc`.
//!
//! XOR chunks:
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
//! Native histogram chunks, for histograms of 10, 40 and 160 populated buckets: 100 series
//! (`HEDDLE_BENCH_HISTOGRAM_SERIES`) of counter histograms scraped every 15 s for 2 h, at schema 3 in two
//! spans, each scrape adding observations to a few buckets, cut into chunks by Prometheus' size-based rules
//! ([`HistogramChunkCutter`]). Reports bytes per sample of the integer and float chunks, and ns per sample to
//! encode (append with the appender rules and the cut decision) and to iterate them.
//!
//! Asserts nothing about speed.

use std::hint::black_box;
use std::time::{Duration, Instant};

use heddle_model::{FloatHistogram, Histogram, Span};
use heddle_tsdb::chunkenc::{
    FloatHistogramChunk, HistogramAppend, HistogramChunk, HistogramChunkCutter, XorChunk, XorIter,
    decode_float_histograms, decode_histograms,
};

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

    let series = env("HEDDLE_BENCH_HISTOGRAM_SERIES", 100);
    for buckets in [10, 40, 160] {
        histograms(series, buckets);
    }
}

/// Chunk range of the head: a chunk never crosses a multiple of it.
const RANGE_MS: i64 = 2 * 60 * 60 * 1000;
/// Scrapes per series: 2 h at [`INTERVAL_MS`].
const HISTOGRAM_ROUNDS: i64 = 480;

/// The scrapes of histogram series `i` with `buckets` populated buckets: a counter at schema 3 whose buckets
/// sit in two spans (a latency distribution with a gap), each scrape adding observations to a few of them.
fn histogram_series(i: usize, buckets: usize) -> Vec<(i64, Histogram)> {
    let low = buckets / 4;
    let spans = vec![Span::new(-10, low as u32), Span::new(3, (buckets - low) as u32)];
    let mut counts = vec![0i64; buckets];
    let (mut sum, mut zero) = (0.0f64, 0u64);
    (0..HISTOGRAM_ROUNDS)
        .map(|round| {
            let x = (i as u64).wrapping_mul(0xd6e8_feb8_6659_fd93) ^ (round as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            // Most observations land near the middle of the distribution; a few buckets move per scrape.
            for k in 0..4 {
                let b = (buckets / 2 + ((x >> (8 * k)) % 7) as usize)
                    .saturating_sub(3)
                    .min(buckets - 1);
                counts[b] += 1 + ((x >> (4 * k)) % 5) as i64;
            }
            zero += (x >> 40) % 2;
            sum += ((x >> 20) % 10_000) as f64 / 1000.0;
            let mut prev = 0;
            let deltas = counts
                .iter()
                .map(|c| {
                    let d = c - prev;
                    prev = *c;
                    d
                })
                .collect();
            let h = Histogram {
                schema: 3,
                zero_threshold: 2f64.powi(-128),
                zero_count: zero,
                count: counts.iter().sum::<i64>() as u64 + zero,
                sum,
                positive_spans: spans.clone(),
                positive_buckets: deltas,
                ..Histogram::default()
            };
            (timestamp(i, round), h)
        })
        .collect()
}

/// Appends `samples` as the head would: cutting by Prometheus' rules, following the appender's new chunks.
/// Returns the chunks' bytes.
fn encode<C: HistogramChunkLike>(samples: &[(i64, C::Sample)]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut open = C::default();
    let mut cutter = HistogramChunkCutter::new(samples.first().map_or(0, |s| s.0), RANGE_MS);
    let (mut min_time, mut max_time) = (0, 0);
    for (t, h) in samples {
        if !open.is_empty() && cutter.cut_before(*t, min_time, max_time, open.num_samples(), open.bytes().len()) {
            let prev = std::mem::take(&mut open);
            open.append_after(*t, h, &prev);
            out.push(prev.into_bytes());
            min_time = *t;
        } else {
            if open.is_empty() {
                min_time = *t;
            }
            if let Some(next) = open.append_to(*t, h) {
                out.push(std::mem::replace(&mut open, next).into_bytes());
                min_time = *t;
                cutter = HistogramChunkCutter::new(*t, RANGE_MS);
            }
        }
        max_time = *t;
    }
    out.push(open.into_bytes());
    out
}

/// What [`encode`] needs of the integer and float histogram chunks.
trait HistogramChunkLike: Default + Sized {
    type Sample;
    fn is_empty(&self) -> bool;
    fn num_samples(&self) -> u16;
    fn bytes(&self) -> &[u8];
    fn into_bytes(self) -> Vec<u8>;
    /// Appends; returns the new chunk the sample started, if it started one.
    fn append_to(&mut self, t: i64, h: &Self::Sample) -> Option<Self>;
    /// Appends the first sample of a chunk cut after `prev`.
    fn append_after(&mut self, t: i64, h: &Self::Sample, prev: &Self);
}

impl HistogramChunkLike for HistogramChunk {
    type Sample = Histogram;
    fn is_empty(&self) -> bool {
        HistogramChunk::is_empty(self)
    }
    fn num_samples(&self) -> u16 {
        HistogramChunk::num_samples(self)
    }
    fn bytes(&self) -> &[u8] {
        HistogramChunk::bytes(self)
    }
    fn into_bytes(self) -> Vec<u8> {
        HistogramChunk::into_bytes(self)
    }
    fn append_to(&mut self, t: i64, h: &Histogram) -> Option<Self> {
        match self.append(t, h, None).expect("append") {
            HistogramAppend::NewChunk(c) => Some(c),
            HistogramAppend::Appended | HistogramAppend::Recoded => None,
        }
    }
    fn append_after(&mut self, t: i64, h: &Histogram, prev: &Self) {
        self.append(t, h, Some(prev)).expect("append");
    }
}

impl HistogramChunkLike for FloatHistogramChunk {
    type Sample = FloatHistogram;
    fn is_empty(&self) -> bool {
        FloatHistogramChunk::is_empty(self)
    }
    fn num_samples(&self) -> u16 {
        FloatHistogramChunk::num_samples(self)
    }
    fn bytes(&self) -> &[u8] {
        FloatHistogramChunk::bytes(self)
    }
    fn into_bytes(self) -> Vec<u8> {
        FloatHistogramChunk::into_bytes(self)
    }
    fn append_to(&mut self, t: i64, h: &FloatHistogram) -> Option<Self> {
        match self.append(t, h, None).expect("append") {
            HistogramAppend::NewChunk(c) => Some(c),
            HistogramAppend::Appended | HistogramAppend::Recoded => None,
        }
    }
    fn append_after(&mut self, t: i64, h: &FloatHistogram, prev: &Self) {
        self.append(t, h, Some(prev)).expect("append");
    }
}

/// Encodes every series repeatedly for [`MEASURE`] (at least once): ns per sample, and the chunks.
fn time_encode<C: HistogramChunkLike>(series: &[Vec<(i64, C::Sample)>]) -> (f64, Vec<Vec<u8>>) {
    let samples: usize = series.iter().map(Vec::len).sum();
    let (started, mut passes) = (Instant::now(), 0u64);
    let mut chunks = Vec::new();
    while passes == 0 || started.elapsed() < MEASURE {
        chunks = series.iter().flat_map(|s| encode::<C>(black_box(s))).collect();
        passes += 1;
    }
    (
        started.elapsed().as_nanos() as f64 / (passes as f64 * samples as f64),
        chunks,
    )
}

fn histograms(series: usize, buckets: usize) {
    let int: Vec<Vec<(i64, Histogram)>> = (0..series).map(|i| histogram_series(i, buckets)).collect();
    let float: Vec<Vec<(i64, FloatHistogram)>> = int
        .iter()
        .map(|s| s.iter().map(|(t, h)| (*t, h.to_float())).collect())
        .collect();
    let samples = (series as i64 * HISTOGRAM_ROUNDS) as f64;
    let (int_encode, int_chunks) = time_encode::<HistogramChunk>(&int);
    let (float_encode, float_chunks) = time_encode::<FloatHistogramChunk>(&float);
    let size = |chunks: &[Vec<u8>]| chunks.iter().map(Vec::len).sum::<usize>() as f64 / samples;
    let int_iter = measure(&int_chunks, |c| decode_histograms(c).expect("valid chunk").len() as u64);
    let float_iter = measure(&float_chunks, |c| {
        decode_float_histograms(c).expect("valid chunk").len() as u64
    });
    println!(
        "histogram buckets={buckets}: integer {:.1} bytes/sample in {} chunks, encode {:.0} ns/sample, \
         iterate {:.0} ns/sample; float {:.1} bytes/sample in {} chunks, encode {:.0} ns/sample, iterate {:.0} \
         ns/sample",
        size(&int_chunks),
        int_chunks.len(),
        int_encode,
        int_iter.0,
        size(&float_chunks),
        float_chunks.len(),
        float_encode,
        float_iter.0,
    );
}
