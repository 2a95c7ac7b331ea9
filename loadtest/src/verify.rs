//! `verify`: reads back what `push` sent and checks every sample, bit for bit, and that nothing else is there.
//!
//! One remote-read query per metric name (`__name__` and `job` matchers) over the pushed time range; several
//! queries can share a request. Every series of the metric must be present with exactly the pushed samples;
//! any other series or sample the query returns in that range is unexpected.

use crate::LoadtestError;
use crate::args::VerifyArgs;
use futures::StreamExt;
use heddle_model::{Labels, METRIC_NAME, Sample};
use heddle_testkit::{ReadClient, ReadMode, SeriesGen, SeriesSamples, eq, http_client, query};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

/// The JSON summary of a verify run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// True when every pushed sample was found and nothing unexpected was, with no read error.
    pub verified: bool,
    /// Pushed series checked.
    pub series_checked: u64,
    pub samples_expected: u64,
    /// Expected samples found with the same timestamp and value bits.
    pub samples_found: u64,
    /// Expected samples not found (including those of series missing entirely, value mismatches and metrics
    /// whose read failed).
    pub missing: u64,
    /// Samples found that were not pushed (including value mismatches and unknown series).
    pub unexpected: u64,
    /// Samples whose timestamp matched but whose value bits differ (counted in `missing` and `unexpected` too).
    pub mismatched: u64,
    /// Pushed series absent from the answer.
    pub series_missing: u64,
    /// Series in the answer that were never pushed.
    pub series_unexpected: u64,
    /// Remote-read requests that failed.
    pub read_errors: u64,
    /// Samples accepted as equal although their bits differ (only with [`ValueMatch::Relative`]).
    pub inexact: u64,
}

impl VerifyReport {
    /// Adds another report's counts (not `verified`).
    pub fn add(&mut self, o: &VerifyReport) {
        self.series_checked += o.series_checked;
        self.samples_expected += o.samples_expected;
        self.samples_found += o.samples_found;
        self.missing += o.missing;
        self.unexpected += o.unexpected;
        self.mismatched += o.mismatched;
        self.series_missing += o.series_missing;
        self.series_unexpected += o.series_unexpected;
        self.read_errors += o.read_errors;
        self.inexact += o.inexact;
    }
}

/// Runs `verify`. Discrepancies are counted in the report (with examples on stderr); only unusable flags are
/// errors.
pub async fn run_verify(args: &VerifyArgs) -> Result<VerifyReport, LoadtestError> {
    if args.generate.start_ms.is_none() {
        return Err(LoadtestError::Flags(
            "--start-ms is required: pass the start_ms that push printed".to_owned(),
        ));
    }
    if args.metrics_per_request == 0 || args.concurrency == 0 {
        return Err(LoadtestError::Flags(
            "--metrics-per-request and --concurrency must be at least 1".to_owned(),
        ));
    }
    let generator = args.generate.generator(SystemTime::now())?;
    let http = http_client(Duration::from_millis(args.timeout_ms))?;
    let reader = ReadClient::new(http, &args.read_url, args.generate.tenant.as_deref());
    let rounds = args.generate.rounds;
    let mode = ReadMode::from(args.mode);
    let metrics: Vec<usize> = (0..generator.metrics.min(generator.series)).collect();
    let groups: Vec<Vec<usize>> = metrics
        .chunks(args.metrics_per_request)
        .map(<[usize]>::to_vec)
        .collect();
    let mut examples = Examples::new(args.max_examples);
    let mut total = VerifyReport::default();
    let mut results = futures::stream::iter(groups)
        .map(|group| {
            let (reader, generator) = (&reader, &generator);
            async move {
                let (lo, hi) = generator.time_range(rounds);
                let queries = group
                    .iter()
                    .map(|m| {
                        let name = generator.metric_name(*m);
                        query(lo, hi, vec![eq(METRIC_NAME, &name), eq("job", &generator.job)])
                    })
                    .collect();
                (group.clone(), reader.read(mode, queries).await)
            }
        })
        .buffer_unordered(args.concurrency);
    while let Some((group, res)) = results.next().await {
        match res {
            Ok(per_query) => {
                for (metric, found) in group.iter().zip(&per_query) {
                    total.add(&compare_metric(&generator, rounds, *metric, found, &mut examples));
                }
            }
            Err(e) => {
                eprintln!("verify: read of metrics {group:?} failed: {e}");
                total.read_errors += 1;
                for metric in &group {
                    let series = generator.series_of_metric(*metric).count() as u64;
                    total.series_checked += series;
                    total.samples_expected += series * u64::from(rounds);
                    total.missing += series * u64::from(rounds);
                }
            }
        }
    }
    examples.finish();
    total.verified = total.missing == 0 && total.unexpected == 0 && total.read_errors == 0;
    Ok(total)
}

/// Prints the first problems, then only counts them.
#[derive(Debug)]
pub struct Examples {
    max: usize,
    printed: usize,
    suppressed: usize,
}

impl Examples {
    /// Prints at most `max` examples.
    pub fn new(max: usize) -> Self {
        Self {
            max,
            printed: 0,
            suppressed: 0,
        }
    }

    pub(crate) fn note(&mut self, what: impl FnOnce() -> String) {
        if self.printed < self.max {
            self.printed += 1;
            eprintln!("verify: {}", what());
        } else {
            self.suppressed += 1;
        }
    }

    pub(crate) fn finish(&self) {
        if self.suppressed > 0 {
            eprintln!("verify: {} more problems not shown", self.suppressed);
        }
    }
}

/// How a value read back is compared with the value pushed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueMatch {
    /// Same bits (Prometheus, heddle: they store float64 as is).
    Exact,
    /// Within this relative difference; values that are close but not bit-equal are counted in
    /// [`VerifyReport::inexact`] (for stores that round values, such as VictoriaMetrics).
    Relative(f64),
}

impl ValueMatch {
    fn matches(self, want: f64, got: f64) -> bool {
        match self {
            ValueMatch::Exact => want.to_bits() == got.to_bits(),
            ValueMatch::Relative(tol) => {
                want.to_bits() == got.to_bits() || (want - got).abs() <= tol * want.abs().max(got.abs())
            }
        }
    }
}

/// Compares what one metric's query returned with what was pushed for that metric.
pub fn compare_metric(
    generator: &SeriesGen,
    rounds: u32,
    metric: usize,
    found: &[SeriesSamples],
    examples: &mut Examples,
) -> VerifyReport {
    let expected = generator
        .series_of_metric(metric)
        .map(|i| {
            let samples = (0..rounds).map(|r| (generator.sample(i, r), true)).collect();
            (generator.model_labels(i), samples)
        })
        .collect();
    compare_expected(expected, found, ValueMatch::Exact, examples)
}

/// Compares what one query returned with the series it must return. Each expected sample carries whether it is
/// required: an optional one (from a refused request) is neither missing when absent nor unexpected when found.
pub fn compare_expected(
    expected: Vec<(Labels, Vec<(Sample, bool)>)>,
    found: &[SeriesSamples],
    value_match: ValueMatch,
    examples: &mut Examples,
) -> VerifyReport {
    let mut report = VerifyReport::default();
    let index: HashMap<&Labels, usize> = expected.iter().enumerate().map(|(k, (l, _))| (l, k)).collect();
    let mut seen = HashSet::new();
    for series in found {
        match index.get(&series.labels) {
            // A series returned twice is as wrong as a series never pushed.
            Some(&k) if seen.insert(k) => {
                compare_samples(
                    &series.labels,
                    &expected[k].1,
                    &series.samples,
                    value_match,
                    &mut report,
                    examples,
                );
            }
            _ => {
                report.series_unexpected += 1;
                report.unexpected += series.samples.len() as u64;
                examples.note(|| {
                    format!(
                        "unexpected series {} with {} samples",
                        series.labels,
                        series.samples.len()
                    )
                });
            }
        }
    }
    report.series_checked = expected.len() as u64;
    for (k, (labels, want)) in expected.iter().enumerate() {
        let required = want.iter().filter(|(_, req)| *req).count() as u64;
        report.samples_expected += required;
        if !seen.contains(&k) && required > 0 {
            report.series_missing += 1;
            report.missing += required;
            examples.note(|| format!("missing series {labels} ({required} samples)"));
        }
    }
    report
}

/// Merges two time-ordered sample lists. `want` has strictly increasing timestamps; `got` is what came back.
fn compare_samples(
    labels: &Labels,
    want: &[(Sample, bool)],
    got: &[Sample],
    value_match: ValueMatch,
    report: &mut VerifyReport,
    ex: &mut Examples,
) {
    let (mut w, mut g) = (0, 0);
    while w < want.len() || g < got.len() {
        match (want.get(w), got.get(g)) {
            (Some((a, required)), Some(b)) if a.t == b.t => {
                if value_match.matches(a.v, b.v) {
                    if *required {
                        report.samples_found += 1;
                    }
                    if a.v.to_bits() != b.v.to_bits() {
                        report.inexact += 1;
                    }
                } else {
                    report.mismatched += 1;
                    report.missing += u64::from(*required);
                    report.unexpected += 1;
                    ex.note(|| {
                        format!(
                            "{labels} at t={}: want {:?} ({:#018x}), got {:?} ({:#018x})",
                            a.t,
                            a.v,
                            a.v.to_bits(),
                            b.v,
                            b.v.to_bits()
                        )
                    });
                }
                w += 1;
                g += 1;
            }
            (Some((a, required)), Some(b)) if a.t < b.t => {
                missing(labels, a, *required, report, ex);
                w += 1;
            }
            (Some((a, required)), None) => {
                missing(labels, a, *required, report, ex);
                w += 1;
            }
            (_, Some(b)) => {
                report.unexpected += 1;
                ex.note(|| format!("{labels}: unexpected sample t={} v={:?}", b.t, b.v));
                g += 1;
            }
            (None, None) => break,
        }
    }
}

fn missing(labels: &Labels, a: &Sample, required: bool, report: &mut VerifyReport, ex: &mut Examples) {
    if required {
        report.missing += 1;
        ex.note(|| format!("{labels}: missing sample t={} v={:?}", a.t, a.v));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (SeriesGen, Vec<SeriesSamples>) {
        let g = SeriesGen::new(3, 20, 4, 1_000_000);
        let found = g
            .series_of_metric(1)
            .map(|i| SeriesSamples {
                labels: g.model_labels(i),
                samples: (0..5).map(|r| g.sample(i, r)).collect(),
            })
            .collect();
        (g, found)
    }

    fn check(g: &SeriesGen, found: &[SeriesSamples]) -> VerifyReport {
        compare_metric(g, 5, 1, found, &mut Examples::new(0))
    }

    #[test]
    fn exact_answer_verifies() {
        let (g, found) = setup();
        let r = check(&g, &found);
        assert_eq!((r.series_checked, r.samples_expected, r.samples_found), (5, 25, 25));
        assert_eq!((r.missing, r.unexpected, r.mismatched), (0, 0, 0));
    }

    #[test]
    fn each_kind_of_discrepancy_is_counted() {
        let (g, found) = setup();
        // (name, mutation, (samples_found, missing, unexpected, mismatched, series_missing))
        type Case = (
            &'static str,
            Box<dyn Fn(&mut Vec<SeriesSamples>)>,
            (u64, u64, u64, u64, u64),
        );
        let cases: Vec<Case> = vec![
            (
                "drop one sample",
                Box::new(|f| {
                    f[0].samples.remove(2);
                }),
                (24, 1, 0, 0, 0),
            ),
            (
                "drop one series",
                Box::new(|f| {
                    f.remove(3);
                }),
                (20, 5, 0, 0, 1),
            ),
            (
                "flip one value bit",
                Box::new(|f| {
                    let v = f[1].samples[0].v;
                    f[1].samples[0].v = f64::from_bits(v.to_bits() ^ 1);
                }),
                (24, 1, 1, 1, 0),
            ),
            (
                "extra sample",
                Box::new(|f| {
                    let last = f[2].samples[4];
                    f[2].samples.push(Sample::new(last.t + 1, 0.0));
                }),
                (25, 0, 1, 0, 0),
            ),
            (
                "duplicated sample",
                Box::new(|f| {
                    let s = f[2].samples[1];
                    f[2].samples.insert(1, s);
                }),
                (25, 0, 1, 0, 0),
            ),
            (
                "foreign series",
                Box::new(|f| {
                    let labels = Labels::from_sorted([("__name__", "other"), ("job", "node")]).expect("labels");
                    f.push(SeriesSamples {
                        labels,
                        samples: vec![Sample::new(1, 1.0), Sample::new(2, 2.0)],
                    });
                }),
                (25, 0, 2, 0, 0),
            ),
            (
                "series twice",
                Box::new(|f| {
                    let dup = f[0].clone();
                    f.push(dup);
                }),
                (25, 0, 5, 0, 0),
            ),
        ];
        for (name, mutate, (found_n, missing, unexpected, mismatched, series_missing)) in cases {
            let mut f = found.clone();
            mutate(&mut f);
            let r = check(&g, &f);
            assert_eq!(
                (r.samples_found, r.missing, r.unexpected, r.mismatched, r.series_missing),
                (found_n, missing, unexpected, mismatched, series_missing),
                "case {name}: {r:?}"
            );
        }
    }
}
