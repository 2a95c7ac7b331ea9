//! The deadline and the caller's cancellation stop a query inside the loop it spends its time in: one series of
//! many steps, one group of many series, one step over many series. Time is a test clock that passes the
//! deadline at a chosen read, so nothing here depends on how fast the machine is.

use super::{run_with, series};
use crate::{DeadlineClock, PromqlError, QueryOptions, QueryTime, Series};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const S: i64 = 1000;

/// A clock read by the engine at each check: before read `expire_at` it is before the deadline, from that read
/// on past it (and the caller's flag is set too when `cancel` is given).
#[derive(Debug)]
struct ExpiresAt {
    start: Instant,
    expire_at: usize,
    reads: AtomicUsize,
    cancel: Option<Arc<AtomicBool>>,
}

impl DeadlineClock for ExpiresAt {
    fn now(&self) -> Instant {
        let n = self.reads.fetch_add(1, Ordering::SeqCst) + 1;
        if n < self.expire_at {
            return self.start;
        }
        match &self.cancel {
            // The flag is looked at before the clock: set now, seen at the next check.
            Some(flag) => {
                flag.store(true, Ordering::SeqCst);
                self.start
            }
            None => self.start + Duration::from_secs(3600),
        }
    }
}

/// Runs `text` with the deadline passing at clock read `expire_at`: the outcome and how many reads were made.
fn run_expiring(
    text: &str,
    time: QueryTime,
    data: &[Series],
    expire_at: usize,
    cancel: bool,
) -> (Result<(), PromqlError>, usize) {
    let start = Instant::now();
    let flag = cancel.then(|| Arc::new(AtomicBool::new(false)));
    let clock = Arc::new(ExpiresAt {
        start,
        expire_at,
        reads: AtomicUsize::new(0),
        cancel: flag.clone(),
    });
    let opts = QueryOptions {
        deadline: Some(start + Duration::from_secs(1)),
        cancel: flag,
        clock: clock.clone(),
        ..QueryOptions::default()
    };
    let out = run_with(text, time, data, &opts).map(|_| ());
    (out, clock.reads.load(Ordering::SeqCst))
}

/// The phase each check of `text` reports, in order: the query is run with the deadline passing at read 1, 2,
/// ... up to `limit` reads or until it completes. Each run must stop at the very check that saw the deadline.
fn phases(name: &str, text: &str, time: QueryTime, data: &[Series], limit: usize) -> Vec<&'static str> {
    let mut out = Vec::new();
    for k in 1..=limit {
        let (result, reads) = run_expiring(text, time, data, k, false);
        match result {
            Err(PromqlError::Timeout(phase)) => {
                assert_eq!(reads, k, "{name}: no check after the one that saw the deadline");
                out.push(phase);
            }
            Ok(()) => break,
            Err(e) => panic!("{name}: {e}"),
        }
    }
    out
}

/// One series sampled every second over `[from, to]`, values varying so that sorts do work.
fn every_second(name: &str, extra: &[(&str, &str)], from: i64, to: i64) -> Series {
    let mut pairs = vec![("__name__", name)];
    pairs.extend_from_slice(extra);
    let samples: Vec<(i64, f64)> = (from / S..=to / S)
        .map(|s| (s * S, ((s * 7919) % 1000) as f64))
        .collect();
    series(&pairs, &samples)
}

fn range(start: i64, steps: i64, step: i64) -> QueryTime {
    QueryTime::Range {
        start,
        end: start + (steps - 1) * step,
        step,
    }
}

#[test]
fn a_query_stops_inside_the_loop_that_holds_its_work() {
    // Each query's work is in one loop of one series, one group or one step, several times the work between two
    // checks: checked only per series or group (as before), it would see its loop's phase once.
    let one_series = vec![every_second("m", &[], 0, 1200 * S)];
    let eight: Vec<Series> = (0..8)
        .map(|i| every_second("m", &[("i", &i.to_string())], 0, 1200 * S))
        .collect();
    let buckets: Vec<Series> = ["0.1", "0.5", "1", "5", "10", "50", "100", "+Inf"]
        .iter()
        .map(|le| every_second("b", &[("le", le)], 0, 1200 * S))
        .collect();
    let cases: &[(&str, &str, QueryTime, &[Series], &str)] = &[
        (
            "quantile_over_time over one series",
            "quantile_over_time(0.5, m[10m])",
            range(600 * S, 600, S),
            &one_series,
            "range function",
        ),
        (
            "a subquery of one series at a fine step",
            "max_over_time(m[10m:5ms])",
            QueryTime::Instant(1200 * S),
            &one_series,
            "selecting series",
        ),
        (
            "sum of one group over many steps",
            "sum(m)",
            range(0, 11_000, 100),
            &eight,
            "aggregation",
        ),
        (
            "topk over many steps",
            "topk(3, m)",
            range(0, 11_000, 100),
            &eight,
            "aggregation",
        ),
        (
            "count_values over many steps",
            "count_values(\"v\", floor(m / 250))",
            range(0, 11_000, 100),
            &eight,
            "aggregation",
        ),
        (
            "vector matching over many steps",
            "m + on(i) m",
            range(0, 11_000, 100),
            &eight,
            "binary operation",
        ),
        (
            "histogram_quantile over many steps",
            "histogram_quantile(0.9, b)",
            range(0, 11_000, 100),
            &buckets,
            "function evaluation",
        ),
    ];
    for (name, text, time, data, phase) in cases {
        let seen = phases(name, text, *time, data, 40);
        let inside = seen.iter().filter(|p| *p == phase).count();
        assert!(
            inside >= 2,
            "{name}: the deadline is checked {inside} times in {phase:?}; checks seen: {seen:?}"
        );
    }
}

#[test]
fn a_canceled_query_stops_at_its_next_check() {
    let data = vec![every_second("m", &[], 0, 1200 * S)];
    let text = "quantile_over_time(0.5, m[10m])";
    let time = range(600 * S, 600, S);
    // The flag is set at the 5th read and seen at the 6th check, inside the range function's loop.
    let (result, reads) = run_expiring(text, time, &data, 5, true);
    assert_eq!(result, Err(PromqlError::Canceled("range function")));
    assert_eq!(reads, 5, "the check that saw the flag read no clock");
    let err = result.unwrap_err();
    assert_eq!((err.http_status(), err.error_type()), (499, "canceled"));

    // Already set: refused at the first check.
    let flag = Arc::new(AtomicBool::new(true));
    let opts = QueryOptions {
        cancel: Some(flag),
        ..QueryOptions::default()
    };
    let err = run_with(text, time, &data, &opts).unwrap_err();
    assert!(matches!(err, PromqlError::Canceled(_)), "{err}");
}

#[test]
fn a_query_that_meets_its_deadline_is_untouched_by_the_checks() {
    // The same answer with a deadline far away and without one.
    let data = vec![
        every_second("m", &[("i", "0")], 0, 1200 * S),
        every_second("m", &[("i", "1")], 0, 1200 * S),
    ];
    let text = "sum(quantile_over_time(0.5, m[10m])) / count(m)";
    let time = range(600 * S, 100, 5 * S);
    let far = QueryOptions {
        deadline: Some(Instant::now() + Duration::from_secs(3600)),
        cancel: Some(Arc::new(AtomicBool::new(false))),
        ..QueryOptions::default()
    };
    let with = run_with(text, time, &data, &far).unwrap();
    let without = run_with(text, time, &data, &QueryOptions::default()).unwrap();
    assert_eq!(with, without);
}
