//! A churn of tenants on a manual clock: the exposition holds the tenants active within the timeout and
//! nobody else, however many came and went.

use super::*;
use crate::metrics::{DiscardedSamples, encode_metrics};
use heddle_model::ManualClock;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

const MIN: i64 = 60_000;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Tenant {
    tenant: String,
}

impl TenantLabelSet for Tenant {
    fn tenant(&self) -> &str {
        &self.tenant
    }
}

struct Env {
    clock: Arc<ManualClock>,
    tenants: TenantMetrics,
    registry: Registry,
    received: TenantFamily<Tenant, Counter>,
    discarded: DiscardedSamples,
}

fn env(timeout: Duration) -> Env {
    let clock = Arc::new(ManualClock::new(1_000 * MIN));
    let tenants = TenantMetrics::with_clock(timeout, clock.clone());
    let mut registry = Registry::default();
    let received = TenantFamily::new(&tenants, Family::default());
    registry.register("test_received_samples", "Samples", received.family().clone());
    let discarded = DiscardedSamples::register_with(&mut registry, &tenants);
    Env {
        clock,
        tenants,
        registry,
        received,
        discarded,
    }
}

impl Env {
    fn push(&self, tenant: &str) {
        self.received.with(&Tenant { tenant: tenant.into() }, |c| {
            c.inc_by(10);
        });
        self.discarded.add(tenant, "err-heddle-sample-out-of-order", 1);
        self.discarded.add(tenant, "err-heddle-sample-out-of-bounds", 2);
    }

    /// The tenants named anywhere in the exposition, sorted.
    fn exposed(&self) -> Vec<String> {
        let text = encode_metrics(&self.registry);
        let mut out: Vec<String> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split("tenant=\"").nth(1))
            .filter_map(|rest| rest.split('"').next())
            .map(str::to_owned)
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

#[test]
fn a_churn_of_tenants_leaves_only_the_active_ones() {
    let e = env(Duration::from_secs(15 * 60));
    // 60 days; every day 50 new tenants push for an hour and are never seen again, while "steady" pushes all
    // along. Without removal the exposition would end with 3,001 tenants and 9,003 series.
    for day in 0..60 {
        for _ in 0..60 {
            e.push("steady");
            for t in 0..50 {
                e.push(&format!("day{day}-tenant{t}"));
            }
            e.clock.advance(MIN);
            e.tenants.sweep();
        }
        // The rest of the day only "steady" pushes, once a minute.
        for _ in 0..(24 * 60 - 60) {
            e.push("steady");
            e.clock.advance(MIN);
            e.tenants.sweep();
        }
        assert_eq!(e.exposed(), vec!["steady".to_owned()], "day {day}");
        assert_eq!(e.tenants.tracked(), 1, "day {day}");
    }
    assert_eq!(
        e.discarded.get("steady", "err-heddle-sample-out-of-bounds"),
        2 * 60 * 24 * 60
    );
    let text = encode_metrics(&e.registry);
    let series = text.lines().filter(|l| !l.starts_with('#')).count();
    assert_eq!(series, 3, "one received and two discarded series of steady:\n{text}");
}

#[test]
fn a_tenant_stays_until_the_timeout_and_comes_back_from_zero() {
    let e = env(Duration::from_secs(15 * 60));
    e.push("a");
    e.push("b");
    e.clock.advance(14 * MIN);
    e.push("b");
    assert!(e.tenants.sweep().is_empty(), "nobody idle for 15 minutes yet");
    e.clock.advance(MIN);
    assert_eq!(e.tenants.sweep(), vec!["a".to_owned()], "a idle for exactly 15 minutes");
    assert_eq!(e.exposed(), vec!["b".to_owned()]);
    assert_eq!(e.discarded.get("a", "err-heddle-sample-out-of-order"), 0);
    // A push without any series of its own keeps a tenant (the ingester touches every push's tenant).
    e.tenants.touch("b");
    e.clock.advance(14 * MIN);
    assert!(e.tenants.sweep().is_empty(), "b was touched 14 minutes ago");
    assert_eq!(e.exposed(), vec!["b".to_owned()]);
    // a comes back: its counters start again.
    e.push("a");
    assert_eq!(e.discarded.get("a", "err-heddle-sample-out-of-order"), 1);
    assert_eq!(e.exposed(), vec!["a".to_owned(), "b".to_owned()]);
}

#[test]
fn a_zero_timeout_keeps_everything() {
    let e = env(Duration::ZERO);
    e.push("a");
    e.clock.advance(1_000_000 * MIN);
    assert!(e.tenants.sweep().is_empty());
    assert_eq!(e.exposed(), vec!["a".to_owned()]);
    assert_eq!(e.tenants.tracked(), 0, "nothing is tracked");
}

/// An update that lands between the sweep's decision and the removal keeps its tenant: the series stays
/// with its count (the removal checks again under the family's lock).
#[test]
fn an_update_between_the_decision_and_the_removal_keeps_the_tenant() {
    let e = env(Duration::from_secs(60));
    e.push("a");
    e.clock.advance(MIN);
    let idle = e.tenants.take_idle();
    assert_eq!(idle, vec!["a".to_owned()]);
    e.push("a");
    e.tenants.forget(&idle);
    assert_eq!(e.exposed(), vec!["a".to_owned()], "a pushed after the decision");
    assert_eq!(
        e.discarded.get("a", "err-heddle-sample-out-of-bounds"),
        4,
        "no count lost"
    );
    assert_eq!(e.tenants.tracked(), 1);
    // Without the update the removal goes ahead.
    e.clock.advance(MIN);
    let idle = e.tenants.take_idle();
    e.tenants.forget(&idle);
    assert!(e.exposed().is_empty());
}
