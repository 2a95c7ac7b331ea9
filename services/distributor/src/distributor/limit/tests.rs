//! Limit tests: the token bucket, the stage, and rate limiting through the whole push path.

use super::*;
use crate::distributor::tests::{distributor_with, push};
use crate::testutil::*;
use http::StatusCode;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Duration;

/// A limiter with fixed rate and burst, as the old API had.
struct Limiter {
    inner: IngestionRateLimiter,
    rate: f64,
    burst: usize,
}

impl Limiter {
    fn allow(&self, tenant: &TenantId, samples: u64, now: Instant) -> bool {
        self.inner.allow(tenant, samples, now, self.rate, self.burst)
    }
}

#[test]
fn lowering_the_burst_caps_the_tokens() {
    let l = IngestionRateLimiter::new();
    let now = Instant::now();
    let a = t("a");
    assert!(l.allow(&a, 1, now, 10.0, 100));
    assert!(
        !l.allow(&a, 11, now, 10.0, 10),
        "an override to burst 10 applies at once"
    );
    assert!(l.allow(&a, 10, now, 10.0, 10));
}

fn t(id: &str) -> TenantId {
    TenantId::new(id).unwrap()
}

#[test]
fn bucket_starts_full_and_refills_at_rate() {
    let l = Limiter {
        inner: IngestionRateLimiter::new(),
        rate: 100.0,
        burst: 1000,
    };
    let t0 = Instant::now();
    let a = t("a");
    assert!(l.allow(&a, 1000, t0), "a full bucket admits the whole burst");
    assert!(!l.allow(&a, 1, t0), "an empty bucket refuses");
    assert!(
        !l.allow(&a, 101, t0 + Duration::from_secs(1)),
        "one second refills 100, not 101"
    );
    assert!(
        l.allow(&a, 100, t0 + Duration::from_secs(1)),
        "the refused request took nothing"
    );
    assert!(!l.allow(&a, 1, t0 + Duration::from_secs(1)));
    // Refill is capped at the burst however long the tenant was idle.
    assert!(!l.allow(&a, 1001, t0 + Duration::from_secs(3600)));
    assert!(l.allow(&a, 1000, t0 + Duration::from_secs(3600)));
}

#[test]
fn tenants_are_independent_and_zero_is_free() {
    let l = Limiter {
        inner: IngestionRateLimiter::new(),
        rate: 1.0,
        burst: 10,
    };
    let now = Instant::now();
    assert!(l.allow(&t("a"), 10, now));
    assert!(!l.allow(&t("a"), 1, now));
    assert!(l.allow(&t("b"), 10, now), "tenant b has its own bucket");
    assert!(l.allow(&t("a"), 0, now), "an empty request never waits");
}

#[test]
fn request_larger_than_burst_is_always_refused() {
    let l = Limiter {
        inner: IngestionRateLimiter::new(),
        rate: 1e9,
        burst: 10,
    };
    let now = Instant::now();
    assert!(!l.allow(&t("a"), 11, now));
    assert!(!l.allow(&t("a"), 11, now + Duration::from_secs(100)));
    assert!(l.allow(&t("a"), 10, now + Duration::from_secs(100)));
}

#[test]
fn time_going_backwards_does_not_add_tokens() {
    let l = Limiter {
        inner: IngestionRateLimiter::new(),
        rate: 10.0,
        burst: 10,
    };
    let t0 = Instant::now() + Duration::from_secs(10);
    assert!(l.allow(&t("a"), 10, t0));
    assert!(!l.allow(&t("a"), 1, t0 - Duration::from_secs(5)));
    assert!(l.allow(&t("a"), 10, t0 + Duration::from_secs(1)));
}

#[tokio::test(start_paused = true)]
async fn paused_clock_drives_refill() {
    let l = Limiter {
        inner: IngestionRateLimiter::new(),
        rate: 5.0,
        burst: 5,
    };
    let a = t("a");
    assert!(l.allow(&a, 5, Instant::now()));
    assert!(!l.allow(&a, 5, Instant::now()));
    tokio::time::advance(Duration::from_millis(999)).await;
    assert!(!l.allow(&a, 5, Instant::now()), "4.995 tokens after 999 ms");
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(l.allow(&a, 5, Instant::now()));
}

#[test]
fn admit_refuses_whole_requests_and_counts_them() {
    let mut registry = Registry::default();
    let discarded = DiscardedSamples::register(&mut registry);
    let limiter = IngestionRateLimiter::new();
    let limits = Limits {
        ingestion_rate: 1.0,
        ingestion_burst_size: 5,
        ..Limits::default()
    };
    let now = Instant::now();
    let a = t("team-a");
    assert_eq!(admit(&limiter, &a, &limits, 5, now, &discarded), Ok(()));
    let err = admit(&limiter, &a, &limits, 3, now, &discarded).unwrap_err();
    assert_eq!(
        err,
        PushError::RateLimited {
            tenant: "team-a".into(),
            samples: 3,
            rate: 1.0,
            burst: 5
        }
    );
    let text = exposition(&registry);
    assert!(
        text.contains(
            r#"heddle_discarded_samples_total{tenant="team-a",reason="err-heddle-ingestion-rate-limited"} 3"#
        ),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn rate_limit_refuses_whole_request_and_recovers() {
    let fake = fake(Behavior::Accept);
    let limits = Limits {
        ingestion_rate: 2.0,
        ingestion_burst_size: 3,
        ..Limits::default()
    };
    let (d, registry) = distributor_with(Arc::new(single(fake.clone())), limits);
    assert!(push(&d, vec![up("a"), up("b")]).await.is_ok());
    let err = push(&d, vec![up("c"), up("d")]).await.unwrap_err();
    assert_eq!(err.status(), StatusCode::TOO_MANY_REQUESTS);
    let msg = err.to_string();
    for w in [
        "err-heddle-ingestion-rate-limited",
        "tenant=team-a",
        "2 samples/s",
        "burst of 3",
        "limits.ingestion_rate",
    ] {
        assert!(msg.contains(w), "{w:?} not in {msg}");
    }
    assert_eq!(
        fake.pushed_series().len(),
        2,
        "nothing of the refused request was forwarded"
    );
    tokio::time::advance(Duration::from_millis(500)).await;
    assert!(
        push(&d, vec![up("c"), up("d")]).await.is_ok(),
        "1 + 0.5 s * 2/s = 2 tokens"
    );
    let text = exposition(&registry);
    assert!(
        text.contains(
            r#"heddle_discarded_samples_total{tenant="team-a",reason="err-heddle-ingestion-rate-limited"} 2"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"heddle_distributor_requests_total{status="429"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"heddle_distributor_requests_total{status="200"} 2"#),
        "{text}"
    );
}

#[tokio::test]
async fn invalid_samples_do_not_consume_rate() {
    let limits = Limits {
        ingestion_rate: 1.0,
        ingestion_burst_size: 1,
        ..Limits::default()
    };
    let fake = fake(Behavior::Accept);
    let (d, _r) = distributor_with(Arc::new(single(fake)), limits);
    let many_bad = series(&[("job", "a")], &[(NOW_MS, 1.0), (NOW_MS + 1, 1.0), (NOW_MS + 2, 1.0)]);
    let outcome = push(&d, vec![many_bad, up("ok")]).await.unwrap();
    assert_eq!(outcome.samples_ingested, 1);
}

#[test]
fn buckets_of_tenants_gone_quiet_are_dropped_once_refilled() {
    let l = IngestionRateLimiter::new();
    let t0 = Instant::now();
    // Many tenants send once each and go quiet; one keeps sending past its burst.
    for i in 0..SWEEP_EVERY - 2 {
        assert!(l.allow(&t(&format!("once-{i}")), 10, t0, 100.0, 1000));
    }
    assert!(l.allow(&t("busy"), 1000, t0, 100.0, 1000));
    assert_eq!(l.tracked(), SWEEP_EVERY as usize - 1);
    // A second later every quiet bucket has refilled (10 tokens at 100/s); the busy one has 100 of 1000.
    let later = t0 + std::time::Duration::from_secs(1);
    assert!(
        !l.allow(&t("busy"), 200, later, 100.0, 1000),
        "the sweep call still sees the busy bucket"
    );
    assert_eq!(l.tracked(), 1, "only the bucket that has not refilled is kept");
    assert!(l.allow(&t("busy"), 100, later, 100.0, 1000), "and it kept its tokens");
    assert!(!l.allow(&t("busy"), 1, later, 100.0, 1000));
}
