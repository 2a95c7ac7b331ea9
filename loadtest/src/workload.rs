//! The data of a scenario run: which series each tenant sends in each round, and so what a reader must find.
//!
//! Each tenant has `slots` series slots. A slot sends one sample per round. Without churn, slot `s` is always
//! series `s` of the tenant's [`SeriesGen`]. With churn, a deterministic share of the slots get a new series
//! every `every_rounds` rounds: in round `r` such a slot sends series `s + slots * (r / every_rounds)`, which
//! has labels no earlier series had. Everything is a pure function of the scenario, the job label and
//! `start_ms`, so the verifier recomputes it.

use crate::scenario::{Churn, Scenario};
use heddle_model::Sample;
use heddle_proto::prometheus::{Sample as ProtoSample, TimeSeries, WriteRequest};
use heddle_testkit::{SeriesGen, splitmix64};
use std::collections::HashSet;
use std::ops::Range;

/// One tenant's share of the load.
#[derive(Debug, Clone)]
pub struct TenantLoad {
    /// `X-Scope-OrgID`, or none.
    pub tenant: Option<String>,
    /// Active series of this tenant in every round.
    pub slots: usize,
    /// Generator over every series the tenant may ever send (slots times churn generations).
    pub generator: SeriesGen,
}

/// Requests that were finally refused: `(tenant index, round, first slot of the batch)`. Their samples may or
/// may not be stored, so the verifier neither requires nor rejects them.
pub type FailedBatches = HashSet<(usize, u32, usize)>;

/// What a scenario sends.
#[derive(Debug, Clone)]
pub struct Workload {
    pub tenants: Vec<TenantLoad>,
    /// Series per request.
    pub batch: usize,
    /// Upper bound on rounds.
    pub max_rounds: u32,
    churn: Option<Churn>,
    seed: u64,
}

impl Workload {
    /// The workload of `scenario`. `tenant` names the only tenant, or is the name prefix of a multi-tenant
    /// scenario's tenants (`<prefix>-<k>`, default `tenant`). Each tenant's series carry `job=<job>` (one
    /// tenant) or `job=<job>-t<k>`, so tenants stay apart even on a target that ignores `X-Scope-OrgID`.
    pub fn new(scenario: &Scenario, tenant: Option<&str>, job: &str, start_ms: i64) -> Self {
        let sizes = scenario.tenant_sizes();
        let generations = match scenario.churn {
            Some(c) => scenario.max_rounds.div_ceil(c.every_rounds) as usize,
            None => 1,
        };
        let multi = scenario.tenants.is_some();
        let tenants = sizes
            .iter()
            .enumerate()
            .map(|(k, &slots)| {
                let (tenant, job) = if multi {
                    (
                        Some(format!("{}-{k}", tenant.unwrap_or("tenant"))),
                        format!("{job}-t{k}"),
                    )
                } else {
                    (tenant.map(str::to_owned), job.to_owned())
                };
                TenantLoad {
                    tenant,
                    slots,
                    generator: SeriesGen {
                        seed: scenario.seed.wrapping_add(k as u64),
                        series: slots * generations,
                        metrics: scenario.metrics.min(slots),
                        job,
                        start_ms,
                        interval_ms: scenario.interval.as_millis() as i64,
                    },
                }
            })
            .collect();
        Self {
            tenants,
            batch: scenario.batch,
            max_rounds: scenario.max_rounds,
            churn: scenario.churn,
            seed: scenario.seed,
        }
    }

    /// Active series per round, over all tenants.
    pub fn active_series(&self) -> usize {
        self.tenants.iter().map(|t| t.slots).sum()
    }

    fn churns(&self, slot: usize) -> Option<u32> {
        let c = self.churn?;
        let draw = splitmix64(self.seed ^ (slot as u64).wrapping_mul(0x9e37_79b9)) % 1_000_000;
        ((draw as f64) < c.share * 1e6).then_some(c.every_rounds)
    }

    /// The series index that slot `slot` of tenant `t` sends in round `round`.
    pub fn series_at(&self, t: usize, slot: usize, round: u32) -> usize {
        match self.churns(slot) {
            Some(every) => slot + self.tenants[t].slots * (round / every) as usize,
            None => slot,
        }
    }

    /// Rounds (within `0..rounds`) in which tenant `t` sends series `i`, and the slot that sends it.
    pub fn rounds_of(&self, t: usize, i: usize, rounds: u32) -> (usize, Range<u32>) {
        let slots = self.tenants[t].slots;
        let (slot, generation) = (i % slots, (i / slots) as u32);
        let range = match self.churns(slot) {
            Some(every) => (generation * every).min(rounds)..((generation + 1) * every).min(rounds),
            None if generation == 0 => 0..rounds,
            None => 0..0,
        };
        (slot, range)
    }

    /// Distinct series sent in rounds `0..rounds`, over all tenants.
    pub fn series_created(&self, rounds: u32) -> u64 {
        let mut n = 0u64;
        for load in &self.tenants {
            for slot in 0..load.slots {
                n += match self.churns(slot) {
                    Some(every) => u64::from(rounds.div_ceil(every)),
                    None => 1,
                };
            }
        }
        n
    }

    /// First slots of the batches of tenant `t`.
    pub fn batch_starts(&self, t: usize) -> impl Iterator<Item = usize> + use<> {
        (0..self.tenants[t].slots).step_by(self.batch)
    }

    /// The slots of the batch starting at `first`.
    pub fn batch_slots(&self, t: usize, first: usize) -> Range<usize> {
        first..(first + self.batch).min(self.tenants[t].slots)
    }

    /// The request of tenant `t` for slots `slots` in round `round` (one sample per series).
    pub fn request(&self, t: usize, slots: Range<usize>, round: u32) -> WriteRequest {
        let g = &self.tenants[t].generator;
        WriteRequest {
            timeseries: slots
                .map(|slot| {
                    let i = self.series_at(t, slot, round);
                    let s = g.sample(i, round);
                    TimeSeries {
                        labels: g.proto_labels(i),
                        samples: vec![ProtoSample {
                            value: s.v,
                            timestamp: s.t,
                        }],
                        ..Default::default()
                    }
                })
                .collect(),
            ..Default::default()
        }
    }

    /// What metric `metric` of tenant `t` must hold after rounds `0..rounds`: per series, its samples, each
    /// with whether it is required (`false` for samples of refused requests, which may or may not be stored).
    pub fn expected(
        &self,
        t: usize,
        metric: usize,
        rounds: u32,
        failed: &FailedBatches,
    ) -> Vec<(heddle_model::Labels, Vec<(Sample, bool)>)> {
        let g = &self.tenants[t].generator;
        g.series_of_metric(metric)
            .filter_map(|i| {
                let (slot, range) = self.rounds_of(t, i, rounds);
                if range.is_empty() {
                    return None;
                }
                let first = slot - slot % self.batch;
                let samples = range
                    .map(|r| (g.sample(i, r), !failed.contains(&(t, r, first))))
                    .collect();
                Some((g.model_labels(i), samples))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(extra: &str) -> Scenario {
        Scenario::parse(&format!(
            "name: t\nduration: 1s\nseries: 200\nmetrics: 7\nbatch: 30\nmax_rounds: 12\n{extra}"
        ))
        .expect("scenario")
    }

    #[test]
    fn steady_sends_the_same_series_every_round() {
        let w = Workload::new(&scenario(""), None, "j", 0);
        assert_eq!(w.series_created(12), 200);
        let r0 = w.request(0, 0..200, 0);
        let r5 = w.request(0, 0..200, 5);
        let labels = |r: &WriteRequest| r.timeseries.iter().map(|t| t.labels.clone()).collect::<Vec<_>>();
        assert_eq!(labels(&r0), labels(&r5));
        let total: usize = (0..7).map(|m| w.expected(0, m, 12, &FailedBatches::new()).len()).sum();
        assert_eq!(total, 200);
    }

    #[test]
    fn churn_replaces_a_share_and_expectations_follow() {
        let w = Workload::new(&scenario("churn: {share: 0.25, every_rounds: 4}\n"), None, "j", 0);
        let churning = (0..200)
            .filter(|s| w.series_at(0, *s, 0) != w.series_at(0, *s, 4))
            .count();
        assert!((30..70).contains(&churning), "{churning}");
        // 10 rounds: generations cover rounds 0-3, 4-7, 8-9.
        assert_eq!(w.series_created(10), (200 + 2 * churning) as u64);
        let mut samples = 0;
        let mut series = 0;
        for m in 0..7 {
            for (_, s) in w.expected(0, m, 10, &FailedBatches::new()) {
                series += 1;
                samples += s.len();
            }
        }
        assert_eq!((series, samples), (200 + 2 * churning, 200 * 10));
    }

    #[test]
    fn failed_batches_are_optional() {
        let w = Workload::new(&scenario(""), None, "j", 0);
        let failed: FailedBatches = [(0, 1, 30)].into();
        let optional: usize = (0..7)
            .flat_map(|m| w.expected(0, m, 3, &failed))
            .map(|(_, s)| s.iter().filter(|(_, req)| !req).count())
            .sum();
        assert_eq!(optional, 30);
    }

    #[test]
    fn tenants_get_their_own_names_and_jobs() {
        let w = Workload::new(&scenario("tenants: {count: 3, skew: 1.0}\n"), Some("acme"), "j", 0);
        let names: Vec<_> = w.tenants.iter().map(|t| t.tenant.clone().unwrap_or_default()).collect();
        assert_eq!(names, ["acme-0", "acme-1", "acme-2"]);
        assert_eq!(w.tenants[2].generator.job, "j-t2");
        assert_eq!(w.active_series(), 200);
    }
}
