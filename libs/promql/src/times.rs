//! Time arithmetic of a query, checked: an evaluation time moved by `offset` or `@`, the start of a range or
//! lookback window, a subquery's aligned steps. Each is an i64 of milliseconds, and each operation that could
//! leave i64 fails with [`PromqlError::TimeOutOfRange`] (400, `bad_data`) instead of wrapping in a release
//! build or panicking in a debug one.
//!
//! The planner ([`crate::query`]) derives every such time for the whole span of the query's steps before
//! anything is fetched, so a query that would leave i64 is refused up front; evaluation repeats the same
//! operations through these functions per step, so that it cannot wrap even where the planner's bounds would
//! not have covered it. Differences between two times of one window (`last - first` of a rate) need no check:
//! both lie in a window whose ends are valid, so the difference is at most the range.

use crate::PromqlError;
use promql_parser::parser::{AtModifier, Offset};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds of a duration of the query (a range, an offset, a subquery step).
pub(crate) fn duration_ms(d: &Duration, what: &str) -> Result<i64, PromqlError> {
    i64::try_from(d.as_millis()).map_err(|_| PromqlError::TimeOutOfRange(format!("{what} of {} s", d.as_secs())))
}

/// The signed milliseconds of an `offset` (0 without one).
pub(crate) fn offset_ms(o: &Option<Offset>) -> Result<i64, PromqlError> {
    match o {
        None => Ok(0),
        Some(Offset::Pos(d)) => duration_ms(d, "offset"),
        // -i64::MAX is the most negative offset: i64::MIN has no positive counterpart as a duration.
        Some(Offset::Neg(d)) => duration_ms(d, "offset").map(|ms| -ms),
    }
}

/// The fixed evaluation time an `@` modifier sets, if any.
pub(crate) fn at_ms(at: &Option<AtModifier>, query_start: i64, query_end: i64) -> Result<Option<i64>, PromqlError> {
    Ok(match at {
        None => None,
        Some(AtModifier::Start) => Some(query_start),
        Some(AtModifier::End) => Some(query_end),
        Some(AtModifier::At(t)) => Some(system_time_ms(*t)?),
    })
}

fn system_time_ms(t: SystemTime) -> Result<i64, PromqlError> {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => duration_ms(&d, "@ time"),
        Err(e) => duration_ms(&e.duration(), "@ time").map(|ms| -ms),
    }
}

/// `t - d`, where `d` is an offset, range or lookback named by `what`.
pub(crate) fn back(t: i64, d: i64, what: &str) -> Result<i64, PromqlError> {
    t.checked_sub(d)
        .ok_or_else(|| PromqlError::TimeOutOfRange(format!("{t} ms minus the {what} of {d} ms")))
}

/// The first multiple of `step` (positive) at or after `t`: where a subquery's steps start.
pub(crate) fn align_up(t: i64, step: i64) -> Result<i64, PromqlError> {
    // From the remainder: the multiple below `t` can be below i64::MIN when the one above is not.
    let past = t.rem_euclid(step);
    if past == 0 {
        return Ok(t);
    }
    t.checked_add(step - past)
        .ok_or_else(|| PromqlError::TimeOutOfRange(format!("the subquery step after {t} ms at a step of {step} ms")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_operation_fails_where_i64_ends_and_is_exact_inside() {
        assert_eq!(back(0, 5, "range"), Ok(-5));
        assert_eq!(back(i64::MIN + 5, 5, "range"), Ok(i64::MIN));
        assert!(matches!(
            back(i64::MIN + 4, 5, "range"),
            Err(PromqlError::TimeOutOfRange(_))
        ));
        assert!(matches!(
            back(i64::MAX, -1, "offset"),
            Err(PromqlError::TimeOutOfRange(_))
        ));
        assert_eq!(back(i64::MAX, i64::MAX, "offset"), Ok(0));

        assert_eq!(align_up(7, 5), Ok(10));
        assert_eq!(align_up(-7, 5), Ok(-5));
        assert_eq!(align_up(10, 5), Ok(10));
        assert_eq!(align_up(i64::MIN, 3), Ok(i64::MIN + 2));
        assert_eq!(align_up(i64::MAX, 1), Ok(i64::MAX));
        assert!(matches!(align_up(i64::MAX, 2), Err(PromqlError::TimeOutOfRange(_))));

        let huge = Duration::from_millis(u64::MAX);
        assert!(matches!(
            duration_ms(&huge, "range"),
            Err(PromqlError::TimeOutOfRange(_))
        ));
        assert_eq!(
            duration_ms(&Duration::from_millis(i64::MAX as u64), "range"),
            Ok(i64::MAX)
        );
        assert_eq!(
            offset_ms(&Some(Offset::Neg(Duration::from_millis(i64::MAX as u64)))),
            Ok(-i64::MAX)
        );
        assert_eq!(offset_ms(&None), Ok(0));

        let err = back(i64::MIN, 1, "lookback").unwrap_err();
        assert_eq!(err.http_status(), 400);
        assert_eq!(err.error_type(), "bad_data");
        let msg = err.to_string();
        assert!(msg.starts_with("err-heddle-query-timestamp-out-of-range: "), "{msg}");
        assert!(msg.contains("lookback"), "{msg}");
    }
}
