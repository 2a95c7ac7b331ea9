//! The surfaces a soak drives beside remote write 1.0 floats, so that a leak on any of them shows in the
//! resource slopes: OTLP/HTTP (gzip protobuf gauges), remote write 2.0 with native histograms and exemplars,
//! PromQL instant and range queries, and exemplar queries. Every `surfaces_every` rounds each active tenant
//! sends one request of each kind after its float push. Answers are counted per surface; a PromQL count of the
//! tenant's float series must equal the series it pushes, and an exemplar query must find the exemplars the
//! round's histograms carried, so a surface that answers 200 with the wrong data counts as wrong.

use super::{METRIC, SoakConfig};
use heddle_model::{HistogramSample, HistogramValue, METRIC_NAME};
use heddle_proto::prometheus::{Exemplar, Label, TimeSeries, WriteRequest};
use heddle_testkit::client::error_chain;
use heddle_testkit::otlp::{encode_otlp_request, push_otlp};
use heddle_testkit::{RemoteWriteProtocol, push_body_as};
use serde::Serialize;

/// The OTLP gauge every soak tenant sends.
const OTLP_METRIC: &str = "soak_otlp";
/// The native histogram every soak tenant sends over remote write 2.0.
const HISTOGRAM_METRIC: &str = "soak_histogram";

/// What one surface answered over a run.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct SurfaceCounts {
    pub requests: u64,
    /// Answers other than 200 (or a refused part of an OTLP request), and transport errors.
    pub errors: u64,
    /// 200 answers whose data is not what was pushed.
    pub wrong: u64,
}

impl SurfaceCounts {
    fn record(&mut self, outcome: &Outcome, examples: &mut Vec<String>, what: &str) {
        self.requests += 1;
        let message = match outcome {
            Outcome::Ok => return,
            Outcome::Error(m) => {
                self.errors += 1;
                m
            }
            Outcome::Wrong(m) => {
                self.wrong += 1;
                m
            }
        };
        if examples.len() < 10 {
            examples.push(format!("{what}: {message}"));
        }
    }
}

/// Every surface's counts.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Surfaces {
    pub otlp: SurfaceCounts,
    pub remote_write_2: SurfaceCounts,
    pub promql: SurfaceCounts,
    pub exemplars: SurfaceCounts,
    /// The first few errors and wrong answers.
    pub examples: Vec<String>,
}

impl Surfaces {
    /// Adds `other`'s counts (and examples, up to ten) to these.
    pub(super) fn absorb(&mut self, other: Surfaces) {
        for (mine, theirs) in [
            (&mut self.otlp, other.otlp),
            (&mut self.remote_write_2, other.remote_write_2),
            (&mut self.promql, other.promql),
            (&mut self.exemplars, other.exemplars),
        ] {
            mine.requests += theirs.requests;
            mine.errors += theirs.errors;
            mine.wrong += theirs.wrong;
        }
        let room = 10usize.saturating_sub(self.examples.len());
        self.examples.extend(other.examples.into_iter().take(room));
    }

    /// No error and no wrong answer on any surface.
    pub fn clean(&self) -> bool {
        [self.otlp, self.remote_write_2, self.promql, self.exemplars]
            .iter()
            .all(|c| c.errors == 0 && c.wrong == 0)
    }
}

enum Outcome {
    Ok,
    Error(String),
    Wrong(String),
}

/// Where one soak target answers.
pub(super) struct Urls {
    pub(super) push: String,
    pub(super) otlp: String,
    /// The Prometheus API prefix (`.../prometheus`).
    pub(super) prometheus: String,
}

impl Urls {
    pub(super) fn new(write_url: &str, read_base: &str) -> Self {
        let origin = write_url.strip_suffix("/api/v1/push").unwrap_or(write_url);
        Self {
            push: write_url.to_owned(),
            otlp: format!("{origin}/otlp/v1/metrics"),
            prometheus: read_base.trim_end_matches('/').to_owned(),
        }
    }
}

fn label(name: &str, value: &str) -> Label {
    Label {
        name: name.to_owned(),
        value: value.to_owned(),
    }
}

/// The histogram series `i` of a tenant holds at round `round`: a counter that grows with the round, so every
/// round's sample is newer and not smaller than the last.
fn histogram(round: u64, ts: i64) -> heddle_proto::prometheus::Histogram {
    heddle_proto::histogram_to_proto(&HistogramSample {
        t: ts,
        value: HistogramValue::Int(heddle_testkit::histogram::growing_counter(round, u64::MAX)),
    })
}

fn histogram_request(cfg: &SoakConfig, job: &str, round: u64, ts: i64) -> WriteRequest {
    let timeseries = (0..cfg.histogram_series())
        .map(|i| TimeSeries {
            labels: vec![
                label(METRIC_NAME, HISTOGRAM_METRIC),
                label("job", job),
                label("series", &i.to_string()),
            ],
            histograms: vec![histogram(round, ts)],
            exemplars: vec![Exemplar {
                labels: vec![label("trace_id", &format!("{round:08x}{i:08x}"))],
                value: round as f64,
                timestamp: ts,
            }],
            ..TimeSeries::default()
        })
        .collect();
    WriteRequest {
        timeseries,
        ..WriteRequest::default()
    }
}

fn otlp_request(cfg: &SoakConfig, job: &str, round: u64, ts: i64) -> WriteRequest {
    let timeseries = (0..cfg.otlp_series())
        .map(|i| {
            heddle_testkit::timeseries(
                &[
                    (METRIC_NAME, OTLP_METRIC),
                    ("job", job),
                    ("instance", "soak"),
                    ("series", &i.to_string()),
                ],
                &[(ts, round as f64)],
            )
        })
        .collect();
    WriteRequest {
        timeseries,
        ..WriteRequest::default()
    }
}

async fn get_json(
    http: &reqwest::Client,
    url: &str,
    tenant: &str,
    params: &[(&str, String)],
) -> Result<serde_json::Value, String> {
    let url = reqwest::Url::parse_with_params(url, params).map_err(|e| format!("{url}: {e}"))?;
    let resp = http
        .get(url)
        .header(heddle_model::TENANT_HEADER, tenant)
        .send()
        .await
        .map_err(|e| error_chain(&e))?;
    let status = resp.status().as_u16();
    let text = resp.text().await.map_err(|e| error_chain(&e))?;
    if status != 200 {
        return Err(format!("{status} {}", text.trim()));
    }
    serde_json::from_str(&text).map_err(|e| format!("not JSON ({e}): {text}"))
}

/// Sends one request of every surface for `tenant` and counts what they answered.
pub(super) async fn exercise(
    http: &reqwest::Client,
    urls: &Urls,
    cfg: &SoakConfig,
    (tenant, job): (&str, &str),
    (round, ts): (u64, i64),
    out: &mut Surfaces,
) {
    let otlp = match encode_otlp_request(&otlp_request(cfg, job, round, ts)) {
        Err(e) => Outcome::Error(e.to_string()),
        Ok(body) => match push_otlp(http, &urls.otlp, Some(tenant), body).await {
            Ok(o) if o.status == 200 && o.body.is_empty() => Outcome::Ok,
            Ok(o) => Outcome::Error(format!("{} {}", o.status, o.body.trim())),
            Err(e) => Outcome::Error(e.to_string()),
        },
    };
    out.otlp
        .record(&otlp, &mut out.examples, &format!("{tenant} round {round} otlp"));

    let rw2 = match heddle_testkit::codec::encode_write_request_v2(&histogram_request(cfg, job, round, ts)) {
        Err(e) => Outcome::Error(e.to_string()),
        Ok(body) => match push_body_as(http, &urls.push, Some(tenant), RemoteWriteProtocol::V2, body).await {
            Ok(o) if o.status == 200 => Outcome::Ok,
            Ok(o) => Outcome::Error(format!("{} {}", o.status, o.body.trim())),
            Err(e) => Outcome::Error(e.to_string()),
        },
    };
    let histograms_stored = matches!(rw2, Outcome::Ok);
    out.remote_write_2.record(
        &rw2,
        &mut out.examples,
        &format!("{tenant} round {round} remote write 2.0"),
    );

    let time = format!("{:.3}", ts as f64 / 1000.0);
    let count = format!("count({METRIC}{{job=\"{job}\"}})");
    let instant = match get_json(
        http,
        &format!("{}/api/v1/query", urls.prometheus),
        tenant,
        &[("query", count), ("time", time.clone())],
    )
    .await
    {
        Err(e) => Outcome::Error(e),
        Ok(v) => {
            let got = v["data"]["result"][0]["value"][1]
                .as_str()
                .and_then(|s| s.parse::<f64>().ok());
            if got == Some(cfg.series as f64) {
                Outcome::Ok
            } else {
                Outcome::Wrong(format!(
                    "count of the float series is {got:?}, {} were pushed",
                    cfg.series
                ))
            }
        }
    };
    out.promql.record(
        &instant,
        &mut out.examples,
        &format!("{tenant} round {round} instant query"),
    );
    let rate = format!("sum(rate({HISTOGRAM_METRIC}{{job=\"{job}\"}}[1m]))");
    let start = format!("{:.3}", (ts - 60_000) as f64 / 1000.0);
    let range = get_json(
        http,
        &format!("{}/api/v1/query_range", urls.prometheus),
        tenant,
        &[
            ("query", rate),
            ("start", start.clone()),
            ("end", time.clone()),
            ("step", "15".into()),
        ],
    )
    .await
    .map_or_else(Outcome::Error, |v| match v["status"].as_str() {
        Some("success") => Outcome::Ok,
        other => Outcome::Wrong(format!("status {other:?}")),
    });
    out.promql.record(
        &range,
        &mut out.examples,
        &format!("{tenant} round {round} range query"),
    );

    let selector = format!("{HISTOGRAM_METRIC}{{job=\"{job}\"}}");
    let exemplars = get_json(
        http,
        &format!("{}/api/v1/query_exemplars", urls.prometheus),
        tenant,
        &[("query", selector), ("start", time.clone()), ("end", time)],
    )
    .await
    .map_or_else(Outcome::Error, |v| {
        let found: usize = v["data"]
            .as_array()
            .map(|series| {
                series
                    .iter()
                    .map(|s| s["exemplars"].as_array().map_or(0, Vec::len))
                    .sum()
            })
            .unwrap_or(0);
        let want = if histograms_stored {
            cfg.histogram_series()
        } else {
            found
        };
        if found == want {
            Outcome::Ok
        } else {
            Outcome::Wrong(format!("{found} exemplars at the round's time, {want} were pushed"))
        }
    });
    out.exemplars.record(
        &exemplars,
        &mut out.examples,
        &format!("{tenant} round {round} exemplar query"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_come_from_the_push_url() {
        let u = Urls::new("http://127.0.0.1:9/api/v1/push", "http://127.0.0.1:9/prometheus/");
        assert_eq!(u.otlp, "http://127.0.0.1:9/otlp/v1/metrics");
        assert_eq!(u.prometheus, "http://127.0.0.1:9/prometheus");
    }

    #[test]
    fn an_error_or_a_wrong_answer_makes_a_surface_unclean() {
        let mut s = Surfaces::default();
        let mut examples = Vec::new();
        s.promql.record(&Outcome::Ok, &mut examples, "q");
        assert!(s.clean());
        s.exemplars.record(&Outcome::Wrong("none".into()), &mut examples, "e");
        assert!(!s.clean());
        assert_eq!((s.exemplars.requests, s.exemplars.wrong), (1, 1));
        assert_eq!(examples, ["e: none"]);
    }

    #[test]
    fn histograms_grow_with_the_round() {
        let (a, b) = (histogram(3, 1), histogram(4, 2));
        let count = |h: &heddle_proto::prometheus::Histogram| match h.count {
            Some(heddle_proto::prometheus::histogram::Count::CountInt(c)) => c,
            _ => 0,
        };
        assert!(count(&b) > count(&a));
    }
}
