//! A process-wide budget of bytes held by requests in flight.
//!
//! A request reserves what it is about to hold (a body as it arrives, a decompressed copy, a decoded view)
//! *before* allocating it, and gives everything back when its [`Reservation`] drops, whatever path the
//! request leaves by. When a reservation would take the total past the limit it is refused at once: the
//! request fails (the caller answers 503 and the sender retries later) instead of waiting, because a queue of
//! waiting requests is itself unbounded memory.
//!
//! The in-flight total is the gauge the budget exports, so the metric and the check can never disagree.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use std::sync::Arc;

/// Bytes held by in-flight requests against a limit. Share it behind an [`Arc`].
#[derive(Debug)]
pub struct InflightBytes {
    limit: usize,
    in_flight: Gauge,
    refused: Counter,
}

/// A reservation would take the in-flight bytes past the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InflightRefused {
    /// Bytes this request asked for in the refused step.
    pub requested: usize,
    /// Bytes this request already held before the step.
    pub held: usize,
    /// Bytes all in-flight requests held, this one included, when it was refused.
    pub in_flight: usize,
    /// The limit.
    pub limit: usize,
}

impl InflightBytes {
    /// A budget of `limit` bytes (0: no limit, the gauge still counts) exporting the in-flight total in
    /// `in_flight` and counting refused requests in `refused`; the caller registers both.
    pub fn new(limit: usize, in_flight: Gauge, refused: Counter) -> Arc<Self> {
        Arc::new(Self {
            limit,
            in_flight,
            refused,
        })
    }

    /// The limit (0: none).
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held by in-flight requests now.
    pub fn in_flight(&self) -> usize {
        usize::try_from(self.in_flight.get()).unwrap_or(0)
    }

    /// An empty reservation for one request, to [`Reservation::grow`] as it goes.
    pub fn reserve(self: &Arc<Self>) -> Reservation {
        Reservation {
            budget: Arc::clone(self),
            held: 0,
        }
    }
}

/// What one request holds of an [`InflightBytes`] budget; returned in full when dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<InflightBytes>,
    held: usize,
}

impl Reservation {
    /// Takes `bytes` more, or refuses (counting the refusal) when that would take the in-flight total past the
    /// limit; on refusal nothing more is held. One atomic add: no lock, no waiting.
    pub fn grow(&mut self, bytes: usize) -> Result<(), InflightRefused> {
        if bytes == 0 {
            return Ok(());
        }
        let add = i64::try_from(bytes).unwrap_or(i64::MAX);
        let before = self.budget.in_flight.inc_by(add);
        let after = usize::try_from(before.saturating_add(add)).unwrap_or(usize::MAX);
        let limit = self.budget.limit;
        if limit > 0 && after > limit {
            self.budget.in_flight.dec_by(add);
            self.budget.refused.inc();
            return Err(InflightRefused {
                requested: bytes,
                held: self.held,
                in_flight: after - bytes.min(after),
                limit,
            });
        }
        self.held += bytes;
        Ok(())
    }

    /// Bytes this reservation holds.
    pub fn held(&self) -> usize {
        self.held
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.held > 0 {
            self.budget
                .in_flight
                .dec_by(i64::try_from(self.held).unwrap_or(i64::MAX));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(limit: usize) -> Arc<InflightBytes> {
        InflightBytes::new(limit, Gauge::default(), Counter::default())
    }

    #[test]
    fn reservations_are_refused_past_the_limit_and_returned_on_drop() {
        let b = budget(100);
        let mut first = b.reserve();
        first.grow(60).unwrap();
        let mut second = b.reserve();
        second.grow(30).unwrap();
        assert_eq!(b.in_flight(), 90);
        let err = second.grow(20).unwrap_err();
        assert_eq!(
            err,
            InflightRefused {
                requested: 20,
                held: 30,
                in_flight: 90,
                limit: 100
            }
        );
        assert_eq!(b.in_flight(), 90, "a refused step holds nothing");
        assert_eq!(b.refused.get(), 1);
        drop(first);
        assert_eq!(b.in_flight(), 30);
        second.grow(70).expect("the freed bytes are available again");
        drop(second);
        assert_eq!(b.in_flight(), 0);
    }

    #[test]
    fn zero_is_no_limit_but_still_counts() {
        let b = budget(0);
        let mut r = b.reserve();
        r.grow(usize::MAX / 2).unwrap();
        assert_eq!(b.in_flight(), usize::MAX / 2);
        drop(r);
        assert_eq!(b.in_flight(), 0);
    }

    #[test]
    fn concurrent_reservations_never_overshoot() {
        let b = budget(1000);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        let mut r = b.reserve();
                        if r.grow(300).is_ok() {
                            assert!(b.in_flight() <= 1000, "{}", b.in_flight());
                        }
                    }
                });
            }
        });
        assert_eq!(b.in_flight(), 0);
    }
}
