//! Memory under a flood of maximum-size degenerate pushes: peak RSS of `heddle` while clients loop one large
//! snappy body of series made of empty labels, the shape that decodes to the most memory per byte.
//!
//! Each `--heddle name=path` binary is started in turn (single process, default configuration apart from the
//! ingestion rate limit, which would otherwise refuse the flood before it is decoded), flooded for `--secs`
//! by `--clients` concurrent senders, sampled every 100 ms (`/proc/<pid>/status` VmHWM and VmRSS), and
//! stopped; one Markdown table compares them. A run whose RSS passes `--max-rss-mib` is stopped early and
//! marked so, to protect the machine.
//!
//! ```text
//! cargo build --release -p heddle -p heddle-loadtest
//! target/release/push-flood --heddle before=/tmp/heddle-before --heddle after=target/release/heddle \
//!     [--clients 8 --secs 30 --compressed-mib 1.9 --max-rss-mib 8192]
//! ```

use anyhow::{Context, bail};
use heddle_testkit::{HeddleOptions, HeddleProcess, http_client, push_body};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

struct Args {
    binaries: Vec<(String, PathBuf)>,
    clients: usize,
    secs: u64,
    compressed_bytes: usize,
    max_rss_mib: u64,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut a = Args {
        binaries: Vec::new(),
        clients: 8,
        secs: 30,
        compressed_bytes: 1_900_000,
        max_rss_mib: 8192,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--heddle" => {
                let (name, path) = value.split_once('=').context("--heddle takes name=path")?;
                a.binaries.push((name.to_owned(), path.into()));
            }
            "--clients" => a.clients = value.parse()?,
            "--secs" => a.secs = value.parse()?,
            "--compressed-mib" => a.compressed_bytes = (value.parse::<f64>()? * 1_000_000.0) as usize,
            "--max-rss-mib" => a.max_rss_mib = value.parse()?,
            _ => bail!("unknown flag {flag}"),
        }
    }
    if a.binaries.is_empty() {
        bail!("give at least one --heddle name=path");
    }
    Ok(a)
}

/// `(VmRSS, VmHWM)` of `pid`, in KiB.
fn rss_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

fn varint(mut v: usize, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The largest decompressed body the default `distributor.max_decompressed_size` accepts.
const MAX_DECOMPRESSED: usize = 100 * 1024 * 1024;

/// A snappy body of about `compressed` bytes (at most [`MAX_DECOMPRESSED`] decompressed): a `WriteRequest` of
/// series each holding 1,000 empty labels (`0a 00`, two bytes on the wire each). Returns it with its
/// decompressed size.
fn degenerate_body(compressed: usize) -> anyhow::Result<(Vec<u8>, usize)> {
    let mut series = Vec::new();
    for _ in 0..1000 {
        series.extend([0x0a, 0x00]);
    }
    let mut framed = vec![0x0a];
    varint(series.len(), &mut framed);
    framed.extend(&series);
    let probe = framed.repeat(64);
    let ratio = probe.len() as f64 / heddle_testkit::codec::snappy_compress(&probe)?.len() as f64;
    let copies = ((compressed as f64 * ratio) / framed.len() as f64).ceil() as usize;
    let raw = framed.repeat(copies.clamp(1, MAX_DECOMPRESSED / framed.len()));
    Ok((heddle_testkit::codec::snappy_compress(&raw)?, raw.len()))
}

struct Outcome {
    idle_rss_mib: f64,
    peak_rss_mib: f64,
    statuses: BTreeMap<String, u64>,
    aborted: bool,
}

async fn flood(name: &str, binary: &std::path::Path, args: &Args, body: &Arc<Vec<u8>>) -> anyhow::Result<Outcome> {
    let mut heddle = HeddleProcess::start(HeddleOptions {
        binary: Some(binary.to_path_buf()),
        args: vec![
            "--distributor.ingestion-rate-limit=100000000".into(),
            "--distributor.ingestion-burst-size=100000000".into(),
            "--log.level=warn".into(),
        ],
        ..HeddleOptions::default()
    })
    .with_context(|| format!("starting {name}: {}", binary.display()))?;
    let pid = heddle.pid().context("heddle has no pid")?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (idle, _) = rss_kib(pid).context("reading RSS")?;
    let url = heddle.push_url();
    let client = http_client(Duration::from_secs(120))?;
    let stop = Arc::new(AtomicBool::new(false));
    let end = Instant::now() + Duration::from_secs(args.secs);
    let mut tasks = Vec::new();
    for _ in 0..args.clients {
        let (client, url, body, stop) = (client.clone(), url.clone(), body.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut statuses: BTreeMap<String, u64> = BTreeMap::new();
            while Instant::now() < end && !stop.load(Ordering::Relaxed) {
                let status = match push_body(&client, &url, None, body.to_vec()).await {
                    Ok(o) => o.status.to_string(),
                    Err(_) => "error".to_owned(),
                };
                *statuses.entry(status).or_default() += 1;
            }
            statuses
        }));
    }
    let mut peak = idle;
    let mut aborted = false;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let Some((rss, hwm)) = rss_kib(pid) else {
            break;
        };
        peak = peak.max(rss).max(hwm);
        if peak / 1024 > args.max_rss_mib {
            aborted = true;
            stop.store(true, Ordering::Relaxed);
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    if aborted {
        heddle.kill9()?;
    }
    let mut statuses: BTreeMap<String, u64> = BTreeMap::new();
    for t in tasks {
        for (k, v) in t.await? {
            *statuses.entry(k).or_default() += v;
        }
    }
    if let Some((rss, hwm)) = rss_kib(pid) {
        peak = peak.max(rss).max(hwm);
    }
    if !aborted {
        let _ = heddle.sigterm_and_wait();
    }
    Ok(Outcome {
        idle_rss_mib: idle as f64 / 1024.0,
        peak_rss_mib: peak as f64 / 1024.0,
        statuses,
        aborted,
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let (body, decompressed) = degenerate_body(args.compressed_bytes)?;
    println!(
        "body: {} bytes compressed, {} decompressed, {} clients for {} s",
        body.len(),
        decompressed,
        args.clients,
        args.secs
    );
    let body = Arc::new(body);
    println!("| binary | idle RSS | peak RSS | responses |");
    println!("|---|---|---|---|");
    for (name, binary) in &args.binaries {
        let o = flood(name, binary, &args, &body).await?;
        let statuses: Vec<String> = o.statuses.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        println!(
            "| {name} | {:.1} MiB | {:.1} MiB{} | {} |",
            o.idle_rss_mib,
            o.peak_rss_mib,
            if o.aborted {
                " (stopped at the safety limit)"
            } else {
                ""
            },
            statuses.join(", ")
        );
    }
    Ok(())
}
