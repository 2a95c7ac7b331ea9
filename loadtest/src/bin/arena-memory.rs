//! Memory benchmark for the request arenas: does a burst of huge remote-write requests leave the process
//! bigger once it is over?
//!
//! Reproduces the scenario of the bug the arena design answers (pooled objects pinning whole request bodies):
//! a real `heddle` process receives small requests, then very large ones (20,000 series with long label
//! values) alternating with small ones, then small ones again. Every 500 ms it samples the process' RSS
//! (`/proc/<pid>/status`) and the retained-arena gauges (`heddle_ingester_arena_retained_bytes`,
//! `heddle_distributor_arena_retained_bytes`), writes them to a CSV and an SVG plot (and a PNG when
//! ImageMagick's `convert` is installed), and prints the baseline, peak and final RSS.
//!
//! The large series are created once during warm-up, before the baseline is measured, so the head's own
//! (legitimate) memory for them is in the baseline: what is compared is request memory only.
//!
//! ```text
//! cargo build --release -p heddle -p heddle-loadtest
//! target/release/arena-memory --out docs/perf/arena-memory [--baseline-secs 40 --mixed-secs 90 --recovery-secs 60]
//! ```

use anyhow::{Context, bail};
use heddle_proto::prometheus::{Label, Sample, TimeSeries, WriteRequest};
use heddle_testkit::{HeddleOptions, HeddleProcess, http_client, http_get, push};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const LARGE_SERIES: usize = 20_000;
const LABEL_VALUE_LEN: usize = 400;
const SMALL_SERIES: usize = 100;
const SMALL_SENDERS: usize = 4;
const SAMPLE_EVERY: Duration = Duration::from_millis(500);

#[derive(Debug, Clone)]
struct Args {
    heddle: PathBuf,
    out: PathBuf,
    warmup: Duration,
    baseline: Duration,
    mixed: Duration,
    recovery: Duration,
}

fn parse_args() -> anyhow::Result<Args> {
    let exe = std::env::current_exe()?;
    let mut a = Args {
        heddle: exe.with_file_name("heddle"),
        out: PathBuf::from("arena-memory"),
        warmup: Duration::from_secs(10),
        baseline: Duration::from_secs(40),
        mixed: Duration::from_secs(90),
        recovery: Duration::from_secs(60),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        let secs = || value.parse::<u64>().map(Duration::from_secs);
        match flag.as_str() {
            "--heddle" => a.heddle = value.into(),
            "--out" => a.out = value.into(),
            "--warmup-secs" => a.warmup = secs()?,
            "--baseline-secs" => a.baseline = secs()?,
            "--mixed-secs" => a.mixed = secs()?,
            "--recovery-secs" => a.recovery = secs()?,
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(a)
}

/// One sample of the process' memory.
#[derive(Debug, Clone, Copy)]
struct Point {
    t: f64,
    phase: Phase,
    rss: u64,
    ingester_retained: u64,
    distributor_retained: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Warmup,
    Baseline,
    Mixed,
    Recovery,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Warmup => "warmup",
            Phase::Baseline => "baseline",
            Phase::Mixed => "mixed",
            Phase::Recovery => "recovery",
        }
    }
}

fn label(name: &str, value: impl Into<String>) -> Label {
    Label {
        name: name.into(),
        value: value.into(),
    }
}

/// A deterministic hex string of `len` characters: long label values that snappy cannot squash.
fn long_value(seed: u64, len: usize) -> String {
    let mut s = String::with_capacity(len);
    let mut x = seed;
    while s.len() < len {
        x = heddle_testkit::splitmix64(x);
        let _ = write!(s, "{x:016x}");
    }
    s.truncate(len);
    s
}

fn large_request(values: &[String], t: i64) -> WriteRequest {
    WriteRequest {
        timeseries: values
            .iter()
            .enumerate()
            .map(|(i, v)| TimeSeries {
                labels: vec![
                    label("__name__", "arena_bench_large"),
                    label("payload", v.clone()),
                    label("series", i.to_string()),
                ],
                samples: vec![Sample {
                    value: 1.0,
                    timestamp: t,
                }],
                ..TimeSeries::default()
            })
            .collect(),
        metadata: Vec::new(),
    }
}

fn small_request(sender: usize, t: i64) -> WriteRequest {
    WriteRequest {
        timeseries: (0..SMALL_SERIES)
            .map(|i| TimeSeries {
                labels: vec![
                    label("__name__", "arena_bench_small"),
                    label("instance", format!("sender-{sender}")),
                    label("series", i.to_string()),
                ],
                samples: vec![Sample {
                    value: i as f64,
                    timestamp: t,
                }],
                ..TimeSeries::default()
            })
            .collect(),
        metadata: Vec::new(),
    }
}

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn gauge(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

fn median(mut v: Vec<u64>) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let heddle = HeddleProcess::start(HeddleOptions {
        binary: Some(args.heddle.clone()),
        args: vec![
            "--distributor.ingestion-rate-limit=100000000".into(),
            "--distributor.ingestion-burst-size=100000000".into(),
            "--log.level=warn".into(),
        ],
        ..HeddleOptions::default()
    })
    .with_context(|| format!("starting {}", args.heddle.display()))?;
    let pid = heddle.pid().context("heddle has no pid")?;
    let url = heddle.push_url();
    let metrics_addr = heddle.http_addr();
    let client = http_client(Duration::from_secs(60))?;

    // Timestamps only move forward, one millisecond per request, so no sample is out of order.
    let clock = Arc::new(AtomicI64::new(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis() as i64,
    ));
    let next_t = {
        let clock = clock.clone();
        move || clock.fetch_add(1, Ordering::Relaxed)
    };
    let values: Arc<Vec<String>> = Arc::new(
        (0..LARGE_SERIES as u64)
            .map(|i| long_value(i, LABEL_VALUE_LEN))
            .collect(),
    );
    let large_sent = Arc::new(AtomicU64::new(0));
    let small_sent = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));

    let started = Instant::now();
    let phases = [
        (Phase::Warmup, args.warmup),
        (Phase::Baseline, args.baseline),
        (Phase::Mixed, args.mixed),
        (Phase::Recovery, args.recovery),
    ];
    let mut points: Vec<Point> = Vec::new();
    let mut large_bytes = 0usize;
    for (phase, duration) in phases {
        println!("phase {} for {:?}", phase.name(), duration);
        let phase_end = Instant::now() + duration;
        let mut tasks = Vec::new();
        for sender in 0..SMALL_SENDERS {
            let (client, url, small_sent, failures, next_t) = (
                client.clone(),
                url.clone(),
                small_sent.clone(),
                failures.clone(),
                next_t.clone(),
            );
            tasks.push(tokio::spawn(async move {
                while Instant::now() < phase_end {
                    match push(&client, &url, None, &small_request(sender, next_t())).await {
                        Ok(o) if o.is_success() => small_sent.fetch_add(1, Ordering::Relaxed),
                        _ => failures.fetch_add(1, Ordering::Relaxed),
                    };
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }));
        }
        if matches!(phase, Phase::Warmup | Phase::Mixed) {
            let body = heddle_testkit::codec::encode_write_request(&large_request(&values, next_t()))?;
            large_bytes = body.len();
            let (client, url, large_sent, failures, values, next_t) = (
                client.clone(),
                url.clone(),
                large_sent.clone(),
                failures.clone(),
                values.clone(),
                next_t.clone(),
            );
            let once = phase == Phase::Warmup;
            tasks.push(tokio::spawn(async move {
                while Instant::now() < phase_end {
                    let req = large_request(&values, next_t());
                    match push(&client, &url, None, &req).await {
                        Ok(o) if o.is_success() => large_sent.fetch_add(1, Ordering::Relaxed),
                        Ok(o) => {
                            eprintln!(
                                "large push answered {}: {}",
                                o.status,
                                o.body.lines().next().unwrap_or("")
                            );
                            failures.fetch_add(1, Ordering::Relaxed)
                        }
                        Err(e) => {
                            eprintln!("large push failed: {e}");
                            failures.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                    if once {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }));
        }
        while Instant::now() < phase_end {
            let metrics =
                tokio::task::spawn_blocking(move || http_get(metrics_addr, "/metrics", Duration::from_secs(5)))
                    .await?
                    .map(|r| r.1)
                    .unwrap_or_default();
            points.push(Point {
                t: started.elapsed().as_secs_f64(),
                phase,
                rss: rss_bytes(pid),
                ingester_retained: gauge(&metrics, "heddle_ingester_arena_retained_bytes"),
                distributor_retained: gauge(&metrics, "heddle_distributor_arena_retained_bytes"),
            });
            tokio::time::sleep(SAMPLE_EVERY).await;
        }
        for t in tasks {
            t.await?;
        }
    }

    let of = |p: Phase| points.iter().filter(move |x| x.phase == p);
    let second_half = |p: Phase| {
        let v: Vec<u64> = of(p).map(|x| x.rss).collect();
        median(v[v.len() / 2..].to_vec())
    };
    let baseline = second_half(Phase::Baseline);
    let steady = second_half(Phase::Recovery);
    let peak = of(Phase::Mixed).map(|x| x.rss).max().unwrap_or(0);
    let retained_end = points
        .last()
        .map_or(0, |p| p.ingester_retained + p.distributor_retained);
    let ratio = steady as f64 / baseline.max(1) as f64;
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let summary = format!(
        "large request: {LARGE_SERIES} series, {LABEL_VALUE_LEN}-byte label values, {:.1} MiB compressed; \
         sent {} large and {} small requests ({} failed)\n\
         baseline RSS (small requests only, median of the phase's second half): {:.1} MiB\n\
         peak RSS while large requests flow: {:.1} MiB\n\
         steady RSS after they stop (median of the recovery phase's second half): {:.1} MiB = {:.2}x baseline \
         (goal <= 1.2x)\n\
         retained arena bytes at the end (ingester + distributor): {:.1} MiB\n",
        large_bytes as f64 / (1024.0 * 1024.0),
        large_sent.load(Ordering::Relaxed),
        small_sent.load(Ordering::Relaxed),
        failures.load(Ordering::Relaxed),
        mib(baseline),
        mib(peak),
        mib(steady),
        ratio,
        mib(retained_end),
    );
    print!("{summary}");

    let mut csv = String::from("t_s,phase,rss_bytes,ingester_arena_retained_bytes,distributor_arena_retained_bytes\n");
    for p in &points {
        let _ = writeln!(
            csv,
            "{:.1},{},{},{},{}",
            p.t,
            p.phase.name(),
            p.rss,
            p.ingester_retained,
            p.distributor_retained
        );
    }
    if let Some(dir) = args.out.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)?;
    }
    let with_ext = |ext: &str| {
        let mut p = args.out.clone().into_os_string();
        p.push(ext);
        PathBuf::from(p)
    };
    std::fs::write(with_ext(".csv"), csv)?;
    std::fs::write(with_ext(".txt"), &summary)?;
    let svg_path = with_ext(".svg");
    std::fs::write(&svg_path, svg(&points, baseline))?;
    let png_path = with_ext(".png");
    let converted = std::process::Command::new("convert")
        .arg(&svg_path)
        .arg(&png_path)
        .status()
        .is_ok_and(|s| s.success());
    println!(
        "wrote {} {}",
        svg_path.display(),
        if converted {
            png_path.display().to_string()
        } else {
            "(no PNG: install imagemagick)".into()
        }
    );
    drop(heddle);
    Ok(())
}

/// Reads one plotted value from a sample.
type Metric = fn(&Point) -> u64;

/// A line chart of RSS and retained arena bytes over time, phases shaded, baseline and 1.2x lines dashed.
fn svg(points: &[Point], baseline: u64) -> String {
    let (w, h, left, right, top, bottom) = (960.0, 480.0, 70.0, 20.0, 40.0, 50.0);
    let t_max = points.last().map_or(1.0, |p| p.t).max(1.0);
    let y_max_bytes = points
        .iter()
        .map(|p| p.rss.max(p.ingester_retained + p.distributor_retained))
        .max()
        .unwrap_or(1)
        .max(baseline * 13 / 10) as f64
        * 1.1;
    let mib = 1024.0 * 1024.0;
    let y_max = (y_max_bytes / mib).ceil().max(1.0);
    let x = |t: f64| left + (w - left - right) * t / t_max;
    let y = |b: f64| top + (h - top - bottom) * (1.0 - (b / mib) / y_max);
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/>"##
    );
    let colors = [
        (Phase::Warmup, "#eeeeee"),
        (Phase::Baseline, "#e3f2fd"),
        (Phase::Mixed, "#ffebee"),
        (Phase::Recovery, "#e8f5e9"),
    ];
    for (phase, color) in colors {
        let ts: Vec<f64> = points.iter().filter(|p| p.phase == phase).map(|p| p.t).collect();
        if let (Some(a), Some(b)) = (ts.first(), ts.last()) {
            let _ = write!(
                s,
                r#"<rect x="{:.1}" y="{top}" width="{:.1}" height="{:.1}" fill="{color}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
                x(*a),
                (x(*b) - x(*a)).max(1.0),
                h - top - bottom,
                x(*a) + 4.0,
                top + 14.0,
                phase.name()
            );
        }
    }
    for i in 0..=5 {
        let v = y_max * f64::from(i) / 5.0;
        let yy = y(v * mib);
        let _ = write!(
            s,
            r##"<line x1="{left}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}" stroke="#cccccc"/><text x="{:.1}" y="{:.1}" text-anchor="end">{v:.0} MiB</text>"##,
            w - right,
            left - 6.0,
            yy + 4.0
        );
    }
    for i in 0..=6 {
        let t = t_max * f64::from(i) / 6.0;
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{t:.0} s</text>"#,
            x(t),
            h - bottom + 18.0
        );
    }
    for (factor, label) in [(1.0, "baseline"), (1.2, "1.2x baseline")] {
        let yy = y(baseline as f64 * factor);
        let _ = write!(
            s,
            r##"<line x1="{left}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}" stroke="#555555" stroke-dasharray="6,4"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#555555">{label}</text>"##,
            w - right,
            w - right - 4.0,
            yy - 4.0
        );
    }
    let series: [(&str, &str, Metric); 2] = [
        ("RSS", "#c62828", |p| p.rss),
        ("retained arena bytes (ingester + distributor)", "#1565c0", |p| {
            p.ingester_retained + p.distributor_retained
        }),
    ];
    for (i, (name, color, f)) in series.iter().enumerate() {
        let path: Vec<String> = points
            .iter()
            .map(|p| format!("{:.1},{:.1}", x(p.t), y(f(p) as f64)))
            .collect();
        let _ = write!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/><text x="{:.1}" y="{:.1}" fill="{color}">{name}</text>"#,
            path.join(" "),
            left + 10.0 + 380.0 * i as f64,
            h - 12.0
        );
    }
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="22" font-size="15" text-anchor="middle">heddle RSS while {LARGE_SERIES}-series requests alternate with small ones</text></svg>"#,
        w / 2.0
    );
    s
}
