//! Reading a scenario's data back after the run: through Prometheus remote read (heddle, Prometheus), or
//! through VictoriaMetrics' `/api/v1/export` (JSON lines), which 1.79 serves instead of remote read.
//!
//! One query per tenant and metric name (`__name__` and `job` matchers) over the time range of the rounds sent;
//! every acknowledged sample must be found and nothing else may be.

use crate::verify::{Examples, ValueMatch, compare_expected};
use crate::workload::{FailedBatches, Workload};
use crate::{LoadtestError, VerifyReport};
use futures::StreamExt;
use heddle_model::{Labels, METRIC_NAME, Sample, TENANT_HEADER};
use heddle_testkit::client::error_chain;
use heddle_testkit::{ReadClient, ReadMode, SeriesSamples, eq, http_client, query};
use serde::Deserialize;
use std::time::Duration;

/// Where and how to read back.
#[derive(Debug, Clone, PartialEq)]
pub enum ReadBackend {
    /// Prometheus remote read at `<base>/api/v1/read`.
    RemoteRead { base: String, mode: ReadMode },
    /// VictoriaMetrics' `<base>/api/v1/export`. Values are compared with a relative tolerance because
    /// VictoriaMetrics stores floats as decimals with limited precision.
    VmExport { base: String },
}

/// Relative tolerance of values read through [`ReadBackend::VmExport`]: VictoriaMetrics keeps about 12
/// significant decimal digits (`89.32894323758933` comes back as `89.3289432375`), a relative error up to 1e-11.
pub const VM_TOLERANCE: f64 = 1e-10;

/// Reads back what `workload` sent in rounds `0..rounds` (except `failed` batches, which are optional).
pub async fn verify_workload(
    workload: &Workload,
    rounds: u32,
    failed: &FailedBatches,
    backend: &ReadBackend,
    concurrency: usize,
    max_examples: usize,
) -> Result<VerifyReport, LoadtestError> {
    let http = http_client(Duration::from_secs(120))?;
    let mut examples = Examples::new(max_examples);
    let mut total = VerifyReport::default();
    if rounds == 0 {
        total.verified = true;
        return Ok(total);
    }
    let jobs: Vec<(usize, usize)> = workload
        .tenants
        .iter()
        .enumerate()
        .flat_map(|(t, load)| (0..load.generator.metrics.min(load.slots)).map(move |m| (t, m)))
        .collect();
    let mut results = futures::stream::iter(jobs)
        .map(|(t, m)| {
            let http = http.clone();
            async move { ((t, m), read_one(&http, workload, t, m, rounds, backend).await) }
        })
        .buffer_unordered(concurrency.max(1));
    let value_match = match backend {
        ReadBackend::RemoteRead { .. } => ValueMatch::Exact,
        ReadBackend::VmExport { .. } => ValueMatch::Relative(VM_TOLERANCE),
    };
    while let Some(((t, m), res)) = results.next().await {
        let expected = workload.expected(t, m, rounds, failed);
        match res {
            Ok(found) => total.add(&compare_expected(expected, &found, value_match, &mut examples)),
            Err(e) => {
                eprintln!("verify: read of tenant {t} metric {m} failed: {e}");
                total.read_errors += 1;
                total.series_checked += expected.len() as u64;
                let required = expected.iter().flat_map(|(_, s)| s).filter(|(_, r)| *r).count() as u64;
                total.samples_expected += required;
                total.missing += required;
            }
        }
    }
    examples.finish();
    total.verified = total.missing == 0 && total.unexpected == 0 && total.read_errors == 0;
    Ok(total)
}

async fn read_one(
    http: &reqwest::Client,
    workload: &Workload,
    t: usize,
    metric: usize,
    rounds: u32,
    backend: &ReadBackend,
) -> Result<Vec<SeriesSamples>, String> {
    let load = &workload.tenants[t];
    let g = &load.generator;
    let (lo, hi) = g.time_range(rounds);
    let name = g.metric_name(metric);
    match backend {
        ReadBackend::RemoteRead { base, mode } => {
            let reader = ReadClient::new(http.clone(), base, load.tenant.as_deref());
            let q = query(lo, hi, vec![eq(METRIC_NAME, &name), eq("job", &g.job)]);
            let mut res = reader.read(*mode, vec![q]).await.map_err(|e| e.to_string())?;
            Ok(res.pop().unwrap_or_default())
        }
        ReadBackend::VmExport { base } => {
            let selector = format!("{{__name__=\"{name}\",job=\"{}\"}}", g.job);
            let url = format!(
                "{}/api/v1/export?match[]={}&start={:.3}&end={:.3}",
                base.trim_end_matches('/'),
                percent_encode(&selector),
                lo as f64 / 1000.0,
                hi as f64 / 1000.0
            );
            let mut req = http.get(&url);
            if let Some(tenant) = &load.tenant {
                req = req.header(TENANT_HEADER, tenant);
            }
            let resp = req.send().await.map_err(|e| format!("{url}: {}", error_chain(&e)))?;
            let status = resp.status().as_u16();
            let text = resp.text().await.map_err(|e| format!("{url}: {}", error_chain(&e)))?;
            if status != 200 {
                return Err(format!("{url}: status {status}: {}", text.trim()));
            }
            parse_vm_export(&text, lo, hi)
        }
    }
}

#[derive(Debug, Deserialize)]
struct ExportLine {
    metric: std::collections::BTreeMap<String, String>,
    values: Vec<f64>,
    timestamps: Vec<i64>,
}

/// Parses `/api/v1/export` JSON lines into series with samples in `[lo, hi]`, in time order.
pub fn parse_vm_export(text: &str, lo: i64, hi: i64) -> Result<Vec<SeriesSamples>, String> {
    let mut out: std::collections::BTreeMap<Labels, Vec<Sample>> = Default::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let l: ExportLine = serde_json::from_str(line).map_err(|e| format!("export line {line:?}: {e}"))?;
        if l.values.len() != l.timestamps.len() {
            return Err(format!(
                "export line with {} values and {} timestamps",
                l.values.len(),
                l.timestamps.len()
            ));
        }
        let labels = Labels::from_sorted(l.metric.iter().map(|(n, v)| (n.as_str(), v.as_str())))
            .map_err(|e| format!("export labels {:?}: {e}", l.metric))?;
        let samples = out.entry(labels).or_default();
        samples.extend(
            l.timestamps
                .iter()
                .zip(&l.values)
                .filter(|(t, _)| (lo..=hi).contains(*t))
                .map(|(t, v)| Sample::new(*t, *v)),
        );
    }
    Ok(out
        .into_iter()
        .map(|(labels, mut samples)| {
            samples.sort_by_key(|s| s.t);
            SeriesSamples { labels, samples }
        })
        .collect())
}

/// Percent-encodes everything but unreserved characters (RFC 3986).
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_export_lines_parse_and_filter() {
        let text = r#"{"metric":{"__name__":"up","job":"j"},"values":[1,2.5,3],"timestamps":[10,20,30]}
{"metric":{"__name__":"up","job":"j"},"values":[4],"timestamps":[5]}

{"metric":{"job":"j","__name__":"down"},"values":[7],"timestamps":[20]}
"#;
        let series = parse_vm_export(text, 5, 20).expect("parse");
        assert_eq!(series.len(), 2);
        let up = series
            .iter()
            .find(|s| s.labels.get("__name__") == Some("up"))
            .expect("up");
        let got: Vec<(i64, f64)> = up.samples.iter().map(|s| (s.t, s.v)).collect();
        assert_eq!(got, vec![(5, 4.0), (10, 1.0), (20, 2.5)]);
        assert!(parse_vm_export("{\"metric\":{},\"values\":[1],\"timestamps\":[]}", 0, 9).is_err());
    }

    #[test]
    fn vm_rounding_is_inexact_but_wrong_values_are_not() {
        let labels = Labels::from_sorted([("__name__", "g")]).expect("labels");
        let want = vec![(Sample::new(1, 89.32894323758933), true), (Sample::new(2, 5.0), true)];
        let found = |v: f64| {
            vec![SeriesSamples {
                labels: labels.clone(),
                samples: vec![Sample::new(1, v), Sample::new(2, 5.0)],
            }]
        };
        let check = |v: f64| {
            let expected = vec![(labels.clone(), want.clone())];
            compare_expected(
                expected,
                &found(v),
                ValueMatch::Relative(VM_TOLERANCE),
                &mut Examples::new(0),
            )
        };
        let rounded = check(89.3289432375);
        assert_eq!((rounded.samples_found, rounded.inexact, rounded.mismatched), (2, 1, 0));
        let wrong = check(89.3289);
        assert_eq!((wrong.samples_found, wrong.missing, wrong.mismatched), (1, 1, 1));
        let exact = compare_expected(
            vec![(labels.clone(), want.clone())],
            &found(89.3289432375),
            ValueMatch::Exact,
            &mut Examples::new(0),
        );
        assert_eq!(exact.mismatched, 1);
    }

    #[test]
    fn percent_encoding() {
        assert_eq!(percent_encode("{a=\"b c\"}"), "%7Ba%3D%22b%20c%22%7D");
    }
}
