//! When evaluation stops early: the query's deadline passed, or its caller no longer wants the answer.
//!
//! A query can spend all its time inside one series (a `quantile_over_time` over 11,000 steps, a subquery of a
//! million steps) or one step (a `sum` over every series), so the deadline is checked inside every loop whose
//! length grows with the query, not once per series. Loops report the work they do (roughly: values, samples or
//! series touched) to a [`Watch`], which reads the clock and the cancellation flag once per [`CHECK_EVERY`]
//! units: a timed-out query stops within microseconds of its deadline, and a cheap loop pays an addition per
//! iteration, not a clock read.

use crate::PromqlError;
use std::cell::Cell;
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// The clock a query's deadline is compared with: the monotonic clock ([`MonotonicClock`]), or one a test
/// drives.
pub trait DeadlineClock: Send + Sync + Debug {
    fn now(&self) -> Instant;
}

/// [`Instant::now`].
#[derive(Debug, Clone, Copy, Default)]
pub struct MonotonicClock;

impl DeadlineClock for MonotonicClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// Units of work between two looks at the clock and the cancellation flag. A unit is about one value or sample
/// touched (a few nanoseconds), so a check comes every few tens of microseconds of evaluation; a clock read
/// costs about as much as twenty units.
pub(crate) const CHECK_EVERY: usize = 1 << 14;

/// A query's deadline and cancellation flag, and the work done since they were last looked at.
#[derive(Debug)]
pub(crate) struct Watch {
    deadline: Option<Instant>,
    cancel: Option<Arc<AtomicBool>>,
    clock: Arc<dyn DeadlineClock>,
    /// Units of work since the last check.
    since_check: Cell<usize>,
}

impl Watch {
    pub fn new(deadline: Option<Instant>, cancel: Option<Arc<AtomicBool>>, clock: Arc<dyn DeadlineClock>) -> Self {
        Self {
            deadline,
            cancel,
            clock,
            since_check: Cell::new(0),
        }
    }

    /// Counts `units` of work done in `phase`, and checks the deadline and the flag once [`CHECK_EVERY`] units
    /// were done since the last check. Called inside loops, with each iteration's cost.
    #[inline]
    pub fn work(&self, units: usize, phase: &'static str) -> Result<(), PromqlError> {
        let done = self.since_check.get().saturating_add(units);
        if done < CHECK_EVERY {
            self.since_check.set(done);
            return Ok(());
        }
        self.check(phase)
    }

    /// Fails once the deadline has passed (`timeout`) or the caller gave up (`canceled`).
    pub fn check(&self, phase: &'static str) -> Result<(), PromqlError> {
        self.since_check.set(0);
        if self.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) {
            return Err(PromqlError::Canceled(phase));
        }
        match self.deadline {
            Some(d) if self.clock.now() >= d => Err(PromqlError::Timeout(phase)),
            _ => Ok(()),
        }
    }
}

/// The work of sorting `n` items, in [`Watch::work`] units: `n log2 n` comparisons.
pub(crate) fn sort_cost(n: usize) -> usize {
    n.saturating_mul(usize::BITS as usize - n.leading_zeros() as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;

    /// A clock that counts its reads and answers `now` with what the test set.
    #[derive(Debug)]
    struct Counting {
        now: Mutex<Instant>,
        reads: Mutex<usize>,
    }

    impl DeadlineClock for Counting {
        fn now(&self) -> Instant {
            *self.reads.lock().unwrap() += 1;
            *self.now.lock().unwrap()
        }
    }

    #[test]
    fn the_clock_is_read_once_per_check_every_units_and_fails_past_the_deadline() {
        let start = Instant::now();
        let clock = Arc::new(Counting {
            now: Mutex::new(start),
            reads: Mutex::new(0),
        });
        let cancel = Arc::new(AtomicBool::new(false));
        let watch = Watch::new(
            Some(start + Duration::from_secs(1)),
            Some(Arc::clone(&cancel)),
            clock.clone(),
        );
        for _ in 0..CHECK_EVERY - 1 {
            watch.work(1, "test").unwrap();
        }
        assert_eq!(*clock.reads.lock().unwrap(), 0, "below CHECK_EVERY units no clock read");
        watch.work(1, "test").unwrap();
        assert_eq!(
            *clock.reads.lock().unwrap(),
            1,
            "the CHECK_EVERY-th unit reads the clock"
        );
        // One costly iteration is checked at once.
        watch.work(CHECK_EVERY * 3, "test").unwrap();
        assert_eq!(*clock.reads.lock().unwrap(), 2);

        *clock.now.lock().unwrap() = start + Duration::from_secs(1);
        assert_eq!(watch.work(1, "test"), Ok(()), "the counter restarted after the check");
        assert_eq!(watch.work(CHECK_EVERY, "a loop"), Err(PromqlError::Timeout("a loop")));
        cancel.store(true, Ordering::Relaxed);
        assert_eq!(watch.check("a loop"), Err(PromqlError::Canceled("a loop")));
    }

    #[test]
    fn without_a_deadline_or_flag_nothing_fails_and_the_clock_is_not_read() {
        let clock = Arc::new(Counting {
            now: Mutex::new(Instant::now()),
            reads: Mutex::new(0),
        });
        let watch = Watch::new(None, None, clock.clone());
        for _ in 0..4 {
            watch.work(CHECK_EVERY, "test").unwrap();
        }
        assert_eq!(*clock.reads.lock().unwrap(), 0);
    }

    #[test]
    fn sort_cost_is_n_log_n() {
        assert_eq!(sort_cost(0), 0);
        assert_eq!(sort_cost(1), 1);
        assert_eq!(sort_cost(1024), 1024 * 11);
        assert_eq!(sort_cost(usize::MAX), usize::MAX);
    }
}
