//! Exemplars (`/prometheus/api/v1/query_exemplars`): the series a query's selectors match, every ingester's
//! exemplars of them merged.
//!
//! Exemplars live in the ingesters' rings only (blocks hold none, as in Prometheus and Mimir). A series'
//! replicas hold the same exemplars, or a subset when one missed a push or its ring evicted more: the answers
//! are merged series by series, each exemplar kept once (same labels, value and time) in time order.

use super::Querier;
use crate::convert::{labels_from_proto, matcher_to_proto};
use crate::error::QuerierError;
use crate::fetch;
use heddle_model::{Label, Labels, Matcher, TenantId};
use heddle_proto::ingester::{ExemplarQueryRequest, Selector};
use heddle_proto::prometheus::TimeSeries;
use std::collections::BTreeMap;

/// One exemplar as the API answers it.
#[derive(Debug, Clone, PartialEq)]
pub struct ExemplarSample {
    pub labels: Vec<Label>,
    pub value: f64,
    pub t: i64,
}

impl Querier {
    /// The exemplars in `[start, end]` of the series matching any of `selectors`, by series labels (in label
    /// order), each series' exemplars in time order, replicas de-duplicated.
    pub async fn exemplars(
        &self,
        tenant: &TenantId,
        start: i64,
        end: i64,
        selectors: &[Vec<Matcher>],
    ) -> Result<BTreeMap<Labels, Vec<ExemplarSample>>, QuerierError> {
        if selectors.is_empty() {
            return Ok(BTreeMap::new());
        }
        let req = ExemplarQueryRequest {
            start_timestamp_ms: start,
            end_timestamp_ms: end,
            selectors: selectors
                .iter()
                .map(|ms| Selector {
                    matchers: ms.iter().map(matcher_to_proto).collect(),
                })
                .collect(),
        };
        self.with_timeout(tenant, async {
            let set = self.read_set()?;
            let answers = fetch::exemplars(&set, tenant, &req).await?;
            let total: usize = answers.iter().flatten().map(|s| s.exemplars.len()).sum();
            // Sorting is CPU work in proportion to the answers: off the async runtime when they are large.
            if total < MERGE_ON_RUNTIME {
                merge(answers)
            } else {
                crate::budget::off_runtime(move || merge(answers)).await?
            }
        })
        .await
    }
}

/// Exemplars from which on the merge runs off the async runtime.
const MERGE_ON_RUNTIME: usize = 4096;

/// Every ingester's answer merged by series labels: each series' exemplars sorted by time (then value and
/// labels, so replicas' copies of one exemplar are neighbours) and each kept once. O(n log n) in the
/// exemplars of all answers together.
fn merge(answers: Vec<Vec<TimeSeries>>) -> Result<BTreeMap<Labels, Vec<ExemplarSample>>, QuerierError> {
    let mut out: BTreeMap<Labels, Vec<ExemplarSample>> = BTreeMap::new();
    for series in answers.into_iter().flatten() {
        if series.exemplars.is_empty() {
            continue;
        }
        let labels = labels_from_proto(&series.labels)?;
        out.entry(labels)
            .or_default()
            .extend(series.exemplars.into_iter().map(|e| {
                ExemplarSample {
                    labels: e
                        .labels
                        .into_iter()
                        .map(|l| Label {
                            name: l.name,
                            value: l.value,
                        })
                        .collect(),
                    value: e.value,
                    t: e.timestamp,
                }
            }));
    }
    for exemplars in out.values_mut() {
        exemplars.sort_unstable_by(|a, b| {
            (a.t, a.value.to_bits())
                .cmp(&(b.t, b.value.to_bits()))
                .then_with(|| a.labels.cmp(&b.labels))
        });
        exemplars.dedup_by(|a, b| a.t == b.t && a.value.to_bits() == b.value.to_bits() && a.labels == b.labels);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use heddle_proto::prometheus as pb;

    fn series(name: &str, exemplars: &[(i64, f64, &str)]) -> TimeSeries {
        TimeSeries {
            labels: vec![pb::Label {
                name: "__name__".into(),
                value: name.into(),
            }],
            exemplars: exemplars
                .iter()
                .map(|&(t, v, trace)| pb::Exemplar {
                    labels: vec![pb::Label {
                        name: "trace_id".into(),
                        value: trace.into(),
                    }],
                    value: v,
                    timestamp: t,
                })
                .collect(),
            ..TimeSeries::default()
        }
    }

    /// A series' metric name and its exemplars' time, value and trace.
    type Shown = (String, Vec<(i64, f64, String)>);

    fn shown(merged: &BTreeMap<Labels, Vec<ExemplarSample>>) -> Vec<Shown> {
        merged
            .iter()
            .map(|(l, e)| {
                let e = e.iter().map(|e| (e.t, e.value, e.labels[0].value.clone())).collect();
                (l.get("__name__").unwrap_or("").to_owned(), e)
            })
            .collect()
    }

    #[test]
    fn replicas_are_merged_in_time_order_each_exemplar_once() {
        let answers = vec![
            vec![
                series("a", &[(1, 1.0, "x"), (3, 3.0, "z")]),
                series("b", &[(2, 2.0, "y")]),
            ],
            vec![series("a", &[(1, 1.0, "x"), (2, 2.0, "y"), (3, 3.0, "z")])],
            // Same time, another value or trace: another exemplar. No exemplars: no series.
            vec![series("a", &[(3, 3.5, "z"), (3, 3.0, "w")]), series("c", &[])],
        ];
        let merged = merge(answers).unwrap();
        assert_eq!(
            shown(&merged),
            vec![
                (
                    "a".to_owned(),
                    vec![
                        (1, 1.0, "x".into()),
                        (2, 2.0, "y".into()),
                        (3, 3.0, "w".into()),
                        (3, 3.0, "z".into()),
                        (3, 3.5, "z".into()),
                    ]
                ),
                ("b".to_owned(), vec![(2, 2.0, "y".into())]),
            ]
        );
    }
}
