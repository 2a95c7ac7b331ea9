//! Self-contained HTML reports (no scripts, no external files): a run's figures and plots over time, and a
//! comparison of two targets.

use crate::compare::CompareResult;
use crate::run::RunResult;
use crate::svg::{Line, bar_chart, escape, line_chart};
use std::fmt::Write as _;

const STYLE: &str = "body{font-family:sans-serif;max-width:1340px;margin:20px auto;padding:0 10px}\
table{border-collapse:collapse;margin:10px 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}\
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}.ok{color:#080}.bad{color:#b00}\
.plots{display:flex;flex-wrap:wrap;gap:10px}";

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.digits$}"))
}

fn mib(v: Option<u64>) -> String {
    opt(v.map(|b| b as f64 / 1048576.0), 1)
}

/// The report of one run.
pub fn run_html(r: &RunResult) -> String {
    let mut s = String::new();
    let status = if r.checks_passed {
        "<b class=ok>PASSED</b>".to_owned()
    } else {
        format!("<b class=bad>FAILED</b>: {}", escape(&r.failed_checks.join("; ")))
    };
    let _ = write!(
        s,
        "<!DOCTYPE html><html><head><meta charset=utf-8><title>loadtest {} on {}</title><style>{STYLE}</style>\
         </head><body><h1>Scenario <code>{}</code> on {}</h1><p>{}</p><p>{status}; verified: <b>{}</b></p>",
        escape(&r.scenario.name),
        escape(&r.target),
        escape(&r.scenario.name),
        escape(&r.target),
        escape(&r.scenario.description),
        r.verified
    );
    let v = r.verify.as_ref();
    let rows: Vec<(&str, String)> = vec![
        ("samples acknowledged", r.samples_acknowledged.to_string()),
        ("samples/s", format!("{:.0}", r.samples_per_second)),
        ("push duration (s)", format!("{:.1}", r.duration_s)),
        ("rounds", r.rounds.to_string()),
        ("active series", r.series_active.to_string()),
        ("series created", r.series_created.to_string()),
        ("tenants", r.tenants.to_string()),
        (
            "requests / errors / retries",
            format!("{} / {} / {}", r.requests, r.errors, r.retries),
        ),
        (
            "push latency p50 / p90 / p99 / max (ms)",
            format!(
                "{:.1} / {:.1} / {:.1} / {:.1}",
                r.latency_ms.p50, r.latency_ms.p90, r.latency_ms.p99, r.latency_ms.max
            ),
        ),
        ("target CPU seconds", opt(r.cpu_seconds, 2)),
        (
            "CPU seconds per million samples",
            opt(r.cpu_seconds_per_million_samples, 3),
        ),
        (
            "RSS idle / end / peak (MiB)",
            format!(
                "{} / {} / {}",
                mib(r.rss_bytes_idle),
                mib(r.rss_bytes_end),
                mib(r.rss_bytes_peak)
            ),
        ),
        ("RSS bytes per active series", opt(r.rss_bytes_per_series, 0)),
        ("restart time on the same data (s)", opt(r.restart_seconds, 2)),
        (
            "verified samples found / expected",
            v.map_or("not verified".to_owned(), |v| {
                format!("{} / {}", v.samples_found, v.samples_expected)
            }),
        ),
        (
            "missing / unexpected / inexact",
            v.map_or("-".to_owned(), |v| {
                format!("{} / {} / {}", v.missing, v.unexpected, v.inexact)
            }),
        ),
    ];
    s.push_str("<table>");
    for (k, val) in rows {
        let _ = write!(s, "<tr><td>{}</td><td>{}</td></tr>", escape(k), escape(&val));
    }
    s.push_str("</table><div class=plots>");
    let tl = &r.timeline;
    let series = |name: &str, f: &dyn Fn(&crate::run::TimelinePoint) -> Option<f64>| Line {
        name: name.to_owned(),
        points: tl.iter().filter_map(|p| f(p).map(|y| (p.t_s, y))).collect(),
    };
    s.push_str(&line_chart(
        "Throughput",
        "seconds",
        "samples/s",
        &[series("acknowledged", &|p| Some(p.samples_per_second))],
    ));
    s.push_str(&line_chart(
        "Push latency",
        "seconds",
        "ms",
        &[
            series("p50", &|p| Some(p.latency_ms.p50)),
            series("p90", &|p| Some(p.latency_ms.p90)),
            series("p99", &|p| Some(p.latency_ms.p99)),
        ],
    ));
    s.push_str(&line_chart(
        "Target CPU",
        "seconds",
        "cores",
        &[series("cpu", &|p| p.cpu_cores)],
    ));
    s.push_str(&line_chart(
        "Target RSS",
        "seconds",
        "MiB",
        &[series("rss", &|p| p.rss_bytes.map(|b| b as f64 / 1048576.0))],
    ));
    let _ = writeln!(
        s,
        "</div><details><summary>scenario</summary><pre>{}</pre></details></body></html>",
        escape(&serde_json::to_string_pretty(&r.scenario).unwrap_or_default())
    );
    s
}

/// The report of a comparison.
pub fn compare_html(c: &CompareResult) -> String {
    let mut s = String::new();
    let names = c.targets.join(" vs ");
    let first = &c.targets[0];
    let _ = write!(
        s,
        "<!DOCTYPE html><html><head><meta charset=utf-8><title>loadtest compare {names}</title><style>{STYLE}</style>\
         </head><body><h1>{names}: scenario <code>{}</code></h1><p>{} runs of each target, the order reversed every \
         other round; medians. A ratio is {first}'s median over the other target's: below 1 means {first} uses less \
         CPU / memory or has the lower p99; above 1 means more samples/s.</p>",
        escape(&c.scenario),
        c.repeat
    );
    s.push_str("<table><tr><th>figure</th>");
    for t in &c.targets {
        let _ = write!(s, "<th>{t}</th>");
    }
    for t in &c.targets[1..] {
        let _ = write!(s, "<th>{first} / {t}</th>");
    }
    s.push_str("</tr>");
    for f in &c.figures {
        let _ = write!(s, "<tr><td>{} ({})</td>", escape(&f.name), escape(&f.unit));
        for v in f.medians.iter().chain(&f.ratios) {
            let _ = write!(s, "<td>{}</td>", opt(*v, 3));
        }
        s.push_str("</tr>");
    }
    s.push_str(
        "</table><h2>Runs</h2><table><tr><th>run</th><th>verified</th><th>samples/s</th><th>CPU s / M samples</th>\
         <th>RSS B / series</th><th>p99 ms</th><th>restart s</th><th>report</th></tr>",
    );
    for r in &c.runs {
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{:.0}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{}</td>\
             <td><a href=\"{}/report.html\">{}</a></td></tr>",
            escape(&r.dir),
            r.verified,
            r.samples_per_second,
            opt(r.cpu_seconds_per_million_samples, 3),
            opt(r.rss_bytes_per_series, 0),
            r.p99_ms,
            opt(r.restart_seconds, 2),
            escape(&r.dir),
            escape(&r.dir)
        );
    }
    s.push_str("</table><div class=plots>");
    for f in &c.figures {
        let bars: Vec<(String, f64)> = c
            .runs
            .iter()
            .filter_map(|r| (f.of_run)(r).map(|v| (r.dir.clone(), v)))
            .collect();
        s.push_str(&bar_chart(&f.name, &f.unit, &bars));
    }
    s.push_str("</div></body></html>\n");
    s
}
