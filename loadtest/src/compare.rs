//! `compare`: the same scenario against two targets that the driver starts itself, alternating (a b, b a, ...)
//! so slow drifts of a shared machine hit both, and the ratios of the medians. Absolute figures on a noisy
//! machine move; the ratios of interleaved runs are what is stable.

use crate::run::{RunOptions, RunResult, run_scenario};
use crate::scenario::Scenario;
use crate::target::{StartOptions, StartedTarget, TargetKind};
use crate::{LoadtestError, report};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// One run of a comparison, as listed in `compare.json`.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    pub target: String,
    /// Sub-directory of the output holding its `result.json` and `report.html`.
    pub dir: String,
    pub verified: bool,
    pub samples_per_second: f64,
    pub cpu_seconds_per_million_samples: Option<f64>,
    pub rss_bytes_per_series: Option<f64>,
    pub p99_ms: f64,
    pub restart_seconds: Option<f64>,
}

/// One compared figure: the median of each target (in target order) and the ratios of the first target's
/// median to each other target's (`ratios[k]` is `targets[0] / targets[k + 1]`).
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub name: String,
    pub unit: String,
    pub medians: Vec<Option<f64>>,
    pub ratios: Vec<Option<f64>>,
    #[serde(skip)]
    pub of_run: fn(&RunSummary) -> Option<f64>,
}

/// `compare.json`.
#[derive(Debug, Clone, Serialize)]
pub struct CompareResult {
    pub scenario: String,
    /// Target names; ratios are the first over each other.
    pub targets: Vec<String>,
    pub repeat: u32,
    /// True when every run verified.
    pub verified: bool,
    pub figures: Vec<Figure>,
    pub runs: Vec<RunSummary>,
}

/// How to run one started target.
#[derive(Debug, Clone)]
pub struct StartedRun {
    pub kind: TargetKind,
    pub start: StartOptions,
    /// Options of the run; the URLs, pid and target name are filled in from the started target.
    pub run: RunOptions,
}

/// Starts the target, runs the scenario, stops the target, writes `dir/result.json` and `dir/report.html`.
pub async fn run_started(scenario: &Scenario, spec: &StartedRun, dir: &Path) -> Result<RunResult, LoadtestError> {
    let (kind, start) = (spec.kind, spec.start.clone());
    let mut target = tokio::task::block_in_place(|| StartedTarget::start(kind, &start))?;
    let mut opts = spec.run.clone();
    opts.write_url = target.write_url.clone();
    opts.read = target.read.clone();
    opts.target_pid = target.pid();
    opts.target_name = kind.name().to_owned();
    eprintln!(
        "{}: started (pid {}, data in {})",
        kind.name(),
        opts.target_pid.unwrap_or(0),
        target.dir().display()
    );
    let mut result = run_scenario(scenario, &opts).await;
    if let Ok(r) = result.as_mut() {
        match tokio::task::block_in_place(|| target.restart()) {
            Ok(took) => r.restart_seconds = Some(took.as_secs_f64()),
            Err(e) => eprintln!("{}: restart failed: {e}", kind.name()),
        }
    }
    if let Err(e) = tokio::task::block_in_place(|| target.stop()) {
        eprintln!("{}: stopping: {e}", kind.name());
    }
    let result = result?;
    write_run(dir, &result)?;
    Ok(result)
}

/// Writes `dir/result.json` and `dir/report.html`.
pub fn write_run(dir: &Path, result: &RunResult) -> Result<(), LoadtestError> {
    let io = |what: &Path, e: std::io::Error| LoadtestError::Output(format!("writing {}: {e}", what.display()));
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let json = serde_json::to_string_pretty(result).map_err(|e| LoadtestError::Output(e.to_string()))?;
    let path = dir.join("result.json");
    std::fs::write(&path, json).map_err(|e| io(&path, e))?;
    let path = dir.join("report.html");
    std::fs::write(&path, report::run_html(result)).map_err(|e| io(&path, e))?;
    Ok(())
}

/// Runs the comparison: `repeat` rounds of every target, the order reversed every other round (a b c, c b a,
/// ...); writes each run to `out/<target>-<k>/` and the comparison to `out/compare.json` and `out/compare.html`.
pub async fn run_compare(
    scenario: &Scenario,
    targets: &[StartedRun],
    repeat: u32,
    out: &Path,
) -> Result<CompareResult, LoadtestError> {
    let mut runs = Vec::new();
    let names: Vec<&str> = targets.iter().map(|t| t.kind.name()).collect();
    let labels = target_labels(&names);
    for k in 0..repeat {
        let mut order: Vec<(&StartedRun, &String)> = targets.iter().zip(&labels).collect();
        if k % 2 == 1 {
            order.reverse();
        }
        for (spec, label) in order {
            let dir = format!("{label}-{k}");
            eprintln!("compare: run {dir}");
            let r = run_started(scenario, spec, &out.join(&dir)).await?;
            eprintln!(
                "compare: {dir}: verified={} {:.0} samples/s, {} CPU s/M samples, {} B/series, p99 {:.1} ms",
                r.verified,
                r.samples_per_second,
                r.cpu_seconds_per_million_samples
                    .map_or("n/a".into(), |v| format!("{v:.3}")),
                r.rss_bytes_per_series.map_or("n/a".into(), |v| format!("{v:.0}")),
                r.latency_ms.p99
            );
            runs.push(RunSummary {
                target: label.clone(),
                dir,
                verified: r.verified,
                samples_per_second: r.samples_per_second,
                cpu_seconds_per_million_samples: r.cpu_seconds_per_million_samples,
                rss_bytes_per_series: r.rss_bytes_per_series,
                p99_ms: r.latency_ms.p99,
                restart_seconds: r.restart_seconds,
            });
        }
    }
    let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
    let result = summarize(scenario, &labels, repeat, runs);
    let io = |p: PathBuf, e: std::io::Error| LoadtestError::Output(format!("writing {}: {e}", p.display()));
    let json = serde_json::to_string_pretty(&result).map_err(|e| LoadtestError::Output(e.to_string()))?;
    std::fs::write(out.join("compare.json"), json).map_err(|e| io(out.join("compare.json"), e))?;
    std::fs::write(out.join("compare.html"), report::compare_html(&result))
        .map_err(|e| io(out.join("compare.html"), e))?;
    Ok(result)
}

/// The name each target's runs are reported and stored under: its kind, with its slot (`-a`, `-b`, `-c`)
/// when another slot runs the same kind (two builds of heddle side by side).
fn target_labels(kinds: &[&str]) -> Vec<String> {
    kinds
        .iter()
        .zip(["a", "b", "c"].iter().chain(std::iter::repeat(&"x")))
        .map(|(kind, slot)| {
            if kinds.iter().filter(|k| *k == kind).count() > 1 {
                format!("{kind}-{slot}")
            } else {
                (*kind).to_owned()
            }
        })
        .collect()
}

/// Median of the values present.
fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Medians per target and ratios of the first target to each other.
pub fn summarize(scenario: &Scenario, targets: &[&str], repeat: u32, runs: Vec<RunSummary>) -> CompareResult {
    type Getter = fn(&RunSummary) -> Option<f64>;
    let specs: [(&str, &str, Getter); 5] = [
        ("samples/s", "samples/s", |r| Some(r.samples_per_second)),
        ("CPU seconds per million samples", "s", |r| {
            r.cpu_seconds_per_million_samples
        }),
        ("RSS per active series", "bytes", |r| r.rss_bytes_per_series),
        ("p99 push latency", "ms", |r| Some(r.p99_ms)),
        ("restart time", "s", |r| r.restart_seconds),
    ];
    let figures = specs
        .iter()
        .map(|(name, unit, get)| {
            let of = |t: &str| median(runs.iter().filter(|r| r.target == t).filter_map(get).collect());
            let medians: Vec<Option<f64>> = targets.iter().map(|t| of(t)).collect();
            let ratios = medians[1..]
                .iter()
                .map(|m| medians[0].zip(*m).filter(|(_, b)| *b != 0.0).map(|(a, b)| a / b))
                .collect();
            Figure {
                name: (*name).to_owned(),
                unit: (*unit).to_owned(),
                medians,
                ratios,
                of_run: *get,
            }
        })
        .collect();
    CompareResult {
        scenario: scenario.name.clone(),
        targets: targets.iter().map(|t| (*t).to_owned()).collect(),
        repeat,
        verified: runs.iter().all(|r| r.verified),
        figures,
        runs,
    }
}

/// The comparison as a plain-text table (stdout).
pub fn text_table(c: &CompareResult) -> String {
    let first = &c.targets[0];
    let mut s = format!("{:<40}", "figure (median)");
    for t in &c.targets {
        s.push_str(&format!(" {t:>16}"));
    }
    for t in &c.targets[1..] {
        s.push_str(&format!(" {:>10}", format!("{}/{}", initial(first), initial(t))));
    }
    s.push('\n');
    let f = |v: Option<f64>| v.map_or("n/a".to_owned(), |v| format!("{v:.3}"));
    for fig in &c.figures {
        s.push_str(&format!("{:<40}", format!("{} ({})", fig.name, fig.unit)));
        for m in &fig.medians {
            s.push_str(&format!(" {:>16}", f(*m)));
        }
        for r in &fig.ratios {
            s.push_str(&format!(" {:>10}", f(*r)));
        }
        s.push('\n');
    }
    s
}

fn initial(name: &str) -> String {
    name.split('-').filter_map(|w| w.chars().next()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(target: &str, sps: f64, cpu: Option<f64>) -> RunSummary {
        RunSummary {
            target: target.into(),
            dir: format!("{target}-x"),
            verified: true,
            samples_per_second: sps,
            cpu_seconds_per_million_samples: cpu,
            rss_bytes_per_series: Some(100.0),
            p99_ms: 10.0,
            restart_seconds: None,
        }
    }

    /// Two builds of one target keep their runs apart (directories and medians); distinct kinds keep their
    /// names.
    #[test]
    fn a_kind_in_two_slots_is_told_apart_by_slot() {
        assert_eq!(
            target_labels(&["heddle", "heddle", "victoria-metrics"]),
            ["heddle-a", "heddle-b", "victoria-metrics"]
        );
        assert_eq!(target_labels(&["heddle", "prometheus"]), ["heddle", "prometheus"]);
        assert_eq!(target_labels(&["x", "y", "x"]), ["x-a", "y", "x-c"]);
    }

    #[test]
    fn medians_and_ratios() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
        let s = Scenario::parse("name: s\nduration: 1s\nseries: 1\n").expect("scenario");
        let runs = vec![
            run("heddle", 100.0, Some(1.0)),
            run("prometheus", 50.0, Some(4.0)),
            run("heddle", 300.0, Some(3.0)),
            run("prometheus", 150.0, None),
            run("victoria-metrics", 400.0, Some(0.5)),
        ];
        let c = summarize(&s, &["heddle", "prometheus", "victoria-metrics"], 2, runs);
        let by = |n: &str| c.figures.iter().find(|f| f.name == n).expect(n).clone();
        assert_eq!(by("samples/s").ratios, vec![Some(2.0), Some(0.5)]);
        assert_eq!(by("samples/s").medians, vec![Some(200.0), Some(100.0), Some(400.0)]);
        assert_eq!(by("CPU seconds per million samples").ratios, vec![Some(0.5), Some(4.0)]);
        assert_eq!(by("RSS per active series").ratios, vec![Some(1.0), Some(1.0)]);
        assert!(c.verified);
        let table = text_table(&c);
        assert!(table.contains("h/p") && table.contains("h/vm"), "{table}");
    }
}
