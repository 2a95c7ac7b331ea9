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
        let mut out: BTreeMap<Labels, Vec<ExemplarSample>> = BTreeMap::new();
        if selectors.is_empty() {
            return Ok(out);
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
            for answer in fetch::exemplars(&set, tenant, &req).await? {
                for series in answer {
                    let labels = labels_from_proto(&series.labels)?;
                    let merged = out.entry(labels).or_default();
                    for e in series.exemplars {
                        let e = ExemplarSample {
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
                        };
                        let same = |x: &ExemplarSample| {
                            x.t == e.t && x.value.to_bits() == e.value.to_bits() && x.labels == e.labels
                        };
                        if !merged.iter().any(same) {
                            merged.push(e);
                        }
                    }
                }
            }
            for exemplars in out.values_mut() {
                exemplars.sort_by_key(|e| e.t);
            }
            out.retain(|_, e| !e.is_empty());
            Ok(out)
        })
        .await
    }
}
