//! Metric metadata (`/prometheus/api/v1/metadata`): every ingester's answer merged, as Prometheus merges its
//! targets' metadata.
//!
//! Metadata is sharded by family, so a family's entries are on its replicas only; the querier asks the whole
//! read set, keeps each distinct entry once (replicas hold the same ones) and applies `limit_per_metric` and
//! `limit` to the merged answer. Ingesters hold metadata in memory only: the bucket has none.

use super::Querier;
use crate::error::QuerierError;
use crate::fetch;
use heddle_model::{MetricType, TenantId};
use heddle_proto::ingester::MetricsMetadataRequest;
use std::collections::BTreeMap;

/// One metadata entry of a family, as Prometheus' API answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyMetadata {
    pub kind: MetricType,
    pub help: String,
    pub unit: String,
}

/// What a metadata request asks for (Prometheus' parameters).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetadataRequest {
    /// Most families answered, the first in name order; `None`: all.
    pub limit: Option<usize>,
    /// Most entries per family; `None`: all.
    pub limit_per_metric: Option<usize>,
    /// Only this family.
    pub metric: Option<String>,
}

impl Querier {
    /// The tenant's metric metadata per family (in name order), each family's distinct entries in the order
    /// the ingesters answered them.
    pub async fn metadata(
        &self,
        tenant: &TenantId,
        request: &MetadataRequest,
    ) -> Result<BTreeMap<String, Vec<FamilyMetadata>>, QuerierError> {
        let as_wire = |n: Option<usize>| n.map_or(-1, |n| i32::try_from(n).unwrap_or(i32::MAX));
        let req = MetricsMetadataRequest {
            limit: as_wire(request.limit),
            limit_per_metric: as_wire(request.limit_per_metric),
            metric: request.metric.clone().unwrap_or_default(),
        };
        self.with_timeout(tenant, async {
            let set = self.read_set()?;
            let answers = fetch::metrics_metadata(&set, tenant, &req).await?;
            let mut out: BTreeMap<String, Vec<FamilyMetadata>> = BTreeMap::new();
            for m in answers.into_iter().flatten() {
                let entry = FamilyMetadata {
                    kind: MetricType::from_wire(u64::try_from(m.r#type).unwrap_or(0)),
                    help: m.help,
                    unit: m.unit,
                };
                let entries = out.entry(m.metric_family_name).or_default();
                if !entries.contains(&entry) && request.limit_per_metric.is_none_or(|n| entries.len() < n) {
                    entries.push(entry);
                }
            }
            if let Some(limit) = request.limit {
                // Each ingester answered its first `limit` families; the first `limit` of their union are the
                // first of the tenant's.
                while out.len() > limit {
                    out.pop_last();
                }
            }
            Ok(out)
        })
        .await
    }
}
