//! The `heddle-loadtest` binary: `push`, `verify`, `run` and `compare`. `push` and `verify` print a JSON summary
//! on stdout; `run` writes `result.json` and `report.html` and prints a one-line summary; `compare` prints a
//! table of ratios and writes `compare.json` and `compare.html`. Progress goes to stderr.
//! Exit status: 0 on success, 1 when a request failed, verification found a difference or an end check failed,
//! 2 on unusable flags or a target that could not start.

use clap::Parser;
use heddle_loadtest::args::{Cli, Command, CompareArgs, ProbeArgs, ReadApi, RunArgs, SoakArgs};
use heddle_loadtest::compare::{StartedRun, run_compare, run_started, text_table, write_run};
use heddle_loadtest::readback::ReadBackend;
use heddle_loadtest::run::{RunResult, run_scenario};
use heddle_loadtest::target::StartOptions;
use heddle_loadtest::{run_push, run_verify};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("heddle-loadtest: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn exit(ok: bool) -> ExitCode {
    if ok { ExitCode::SUCCESS } else { ExitCode::from(1) }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let (json, ok) = match cli.command {
        Command::Push(args) => {
            let report = runtime.block_on(run_push(&args))?;
            (serde_json::to_string(&report)?, report.errors == 0)
        }
        Command::Verify(args) => {
            let report = runtime.block_on(run_verify(&args))?;
            (serde_json::to_string(&report)?, report.verified)
        }
        Command::Run(args) => return runtime.block_on(run_cmd(&args)),
        Command::Compare(args) => return runtime.block_on(compare_cmd(&args)),
        Command::Soak(args) => return runtime.block_on(soak_cmd(&args)),
        Command::Probe(args) => return runtime.block_on(probe_cmd(&args)),
    };
    println!("{json}");
    Ok(exit(ok))
}

fn summary_line(r: &RunResult) -> String {
    format!(
        "{} on {}: verified={} checks_passed={} samples_acknowledged={} samples/s={:.0} p99={:.1}ms \
         cpu_s_per_M_samples={} rss_B_per_series={} restart_s={}",
        r.scenario.name,
        r.target,
        r.verified,
        r.checks_passed,
        r.samples_acknowledged,
        r.samples_per_second,
        r.latency_ms.p99,
        r.cpu_seconds_per_million_samples
            .map_or("n/a".into(), |v| format!("{v:.3}")),
        r.rss_bytes_per_series.map_or("n/a".into(), |v| format!("{v:.0}")),
        r.restart_seconds.map_or("n/a".into(), |v| format!("{v:.2}")),
    )
}

async fn run_cmd(args: &RunArgs) -> anyhow::Result<ExitCode> {
    let scenario = args.scenario.load()?;
    let result = match args.start {
        Some(kind) => {
            let spec = StartedRun {
                kind,
                start: StartOptions {
                    binary: args.bin.clone(),
                    multitenancy: args.scenario.sends_tenant(&scenario),
                    extra_args: Vec::new(),
                },
                run: args
                    .scenario
                    .run_options(&scenario, String::new(), ReadBackend::VmExport { base: String::new() }),
            };
            run_started(&scenario, &spec, &args.scenario.out).await?
        }
        None => {
            let (url, base) = (
                args.url.clone().unwrap_or_default(),
                args.read_url.clone().unwrap_or_default(),
            );
            let read = match args.read_api {
                ReadApi::RemoteRead => ReadBackend::RemoteRead {
                    base,
                    mode: args.read_mode.into(),
                },
                ReadApi::VmExport => ReadBackend::VmExport { base },
            };
            let mut opts = args.scenario.run_options(&scenario, url, read);
            opts.target_pid = args.target_pid;
            let result = run_scenario(&scenario, &opts).await?;
            write_run(&args.scenario.out, &result)?;
            result
        }
    };
    println!("{}", summary_line(&result));
    eprintln!("wrote {}/result.json and report.html", args.scenario.out.display());
    Ok(exit(result.checks_passed))
}

async fn soak_cmd(args: &SoakArgs) -> anyhow::Result<ExitCode> {
    let cfg = args.config();
    let r = heddle_loadtest::soak::run_soak(&cfg, args.bin.clone(), !args.no_progress).await?;
    std::fs::create_dir_all(&args.out)?;
    std::fs::write(args.out.join("soak.json"), serde_json::to_string_pretty(&r)?)?;
    let per_hour = |t: &heddle_loadtest::soak::Trend| {
        format!(
            "{:.0}->{:.0} (max {:.0}, {:+.1}/h)",
            t.first, t.last, t.max, t.slope_per_hour
        )
    };
    println!(
        "soak {}s: verified={} acknowledged={} read_back={} retries={} errors={} open_files={} deleted_open={} threads={} rss_MiB={} disk_MiB={} bucket_MiB={} metrics_KiB={} metrics_series={} surfaces={:?}",
        cfg.duration.as_secs(),
        r.verified,
        r.samples_acknowledged,
        r.samples_read_back,
        r.retries,
        r.errors,
        per_hour(&r.open_files),
        per_hour(&r.deleted_open_files),
        per_hour(&r.threads),
        per_hour(&scale(&r.rss_bytes, 1.0 / 1048576.0)),
        per_hour(&scale(&r.disk_bytes, 1.0 / 1048576.0)),
        per_hour(&scale(&r.bucket_bytes, 1.0 / 1048576.0)),
        per_hour(&scale(&r.metrics_bytes, 1.0 / 1024.0)),
        per_hour(&r.metrics_series),
        [
            ("otlp", r.surfaces.otlp),
            ("rw2", r.surfaces.remote_write_2),
            ("promql", r.surfaces.promql),
            ("exemplars", r.surfaces.exemplars)
        ],
    );
    for e in r.error_examples.iter().chain(&r.surfaces.examples) {
        eprintln!("error: {e}");
    }
    eprintln!("wrote {}/soak.json", args.out.display());
    Ok(exit(r.verified && r.errors == 0 && r.surfaces.clean()))
}

async fn probe_cmd(args: &ProbeArgs) -> anyhow::Result<ExitCode> {
    let bins: Vec<Option<std::path::PathBuf>> = if args.bin.is_empty() {
        vec![None]
    } else {
        args.bin.iter().cloned().map(Some).collect()
    };
    let mut runs = Vec::new();
    for bin in &bins {
        let name = bin
            .as_ref()
            .map_or_else(|| "heddle".to_owned(), |b| b.display().to_string());
        eprintln!("probing {name}");
        runs.push((name, heddle_loadtest::probe::run_probes(bin.clone()).await?));
    }
    println!(
        "| probe | body | {} |",
        runs.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(" | ")
    );
    println!("|---|---|{}", "---|".repeat(runs.len()));
    let rows = runs.iter().map(|(_, r)| r.len()).max().unwrap_or(0);
    for i in 0..rows {
        let first = runs.iter().find_map(|(_, r)| r.get(i));
        let Some(first) = first else { continue };
        let cells: Vec<String> = runs
            .iter()
            .map(|(_, r)| {
                r.get(i).map_or_else(
                    || "not run (the process died)".to_owned(),
                    |p| {
                        format!(
                            "{} in {:.2} s, peak +{} MiB{}: {}",
                            p.status,
                            p.seconds,
                            p.peak_growth_bytes >> 20,
                            if p.alive { "" } else { ", process died" },
                            p.answer.chars().take(90).collect::<String>()
                        )
                    },
                )
            })
            .collect();
        println!(
            "| {} | {} KiB | {} |",
            first.name,
            first.body_bytes >> 10,
            cells.join(" | ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn scale(t: &heddle_loadtest::soak::Trend, k: f64) -> heddle_loadtest::soak::Trend {
    heddle_loadtest::soak::Trend {
        first: t.first * k,
        last: t.last * k,
        max: t.max * k,
        slope_per_hour: t.slope_per_hour * k,
        late_growth: t.late_growth * k,
    }
}

async fn compare_cmd(args: &CompareArgs) -> anyhow::Result<ExitCode> {
    let scenario = args.scenario.load()?;
    let spec = |kind, binary| StartedRun {
        kind,
        start: StartOptions {
            binary,
            multitenancy: args.scenario.sends_tenant(&scenario),
            extra_args: Vec::new(),
        },
        run: args
            .scenario
            .run_options(&scenario, String::new(), ReadBackend::VmExport { base: String::new() }),
    };
    let mut targets = vec![spec(args.a, args.a_bin.clone()), spec(args.b, args.b_bin.clone())];
    if let Some(c) = args.c {
        targets.push(spec(c, args.c_bin.clone()));
    }
    std::fs::create_dir_all(&args.scenario.out)?;
    let result = run_compare(&scenario, &targets, args.repeat, &args.scenario.out).await?;
    print!("{}", text_table(&result));
    eprintln!(
        "wrote {}/compare.json and compare.html (all runs verified: {})",
        args.scenario.out.display(),
        result.verified
    );
    Ok(exit(result.verified))
}
