//! What to do after a failed remote-write attempt, following the remote-write spec and Prometheus' queue
//! manager: retry 5xx, 429 and transport errors with exponential backoff; never retry other 4xx.

use std::time::Duration;

/// Retry policy of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// Delay before the first retry.
    pub min: Duration,
    /// Cap on any delay.
    pub max: Duration,
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// 2xx.
    Success,
    /// 5xx, 429 or transport failure; `retry_after` from the response header when given.
    Retryable { retry_after: Option<Duration> },
    /// Any other status: the data is refused and sending it again cannot help.
    Permanent,
}

/// Classifies an HTTP status.
pub fn classify(status: u16, retry_after: Option<Duration>) -> Attempt {
    match status {
        200..=299 => Attempt::Success,
        429 | 500..=599 => Attempt::Retryable { retry_after },
        _ => Attempt::Permanent,
    }
}

impl Backoff {
    /// The delay before retry number `retry` (0-based), or `None` when retries are exhausted. The server's
    /// `Retry-After` wins over the computed delay but is still capped at `max`.
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Option<Duration> {
        if retry >= self.max_retries {
            return None;
        }
        let exp = self
            .min
            .saturating_mul(1u32.checked_shl(retry.min(31)).unwrap_or(u32::MAX));
        Some(retry_after.unwrap_or(exp).min(self.max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses() {
        for (status, want) in [
            (200, Attempt::Success),
            (204, Attempt::Success),
            (400, Attempt::Permanent),
            (401, Attempt::Permanent),
            (413, Attempt::Permanent),
            (429, Attempt::Retryable { retry_after: None }),
            (500, Attempt::Retryable { retry_after: None }),
            (503, Attempt::Retryable { retry_after: None }),
            (302, Attempt::Permanent),
        ] {
            assert_eq!(classify(status, None), want, "status {status}");
        }
    }

    #[test]
    fn doubles_caps_and_stops() {
        let b = Backoff {
            max_retries: 4,
            min: Duration::from_millis(30),
            max: Duration::from_millis(100),
        };
        let delays: Vec<_> = (0..5).map(|r| b.delay(r, None)).collect();
        let ms = |m| Some(Duration::from_millis(m));
        assert_eq!(delays, vec![ms(30), ms(60), ms(100), ms(100), None]);
        assert_eq!(b.delay(0, Some(Duration::from_secs(9))), ms(100));
        assert_eq!(b.delay(1, Some(Duration::from_millis(5))), ms(5));
        let huge = Backoff {
            max_retries: u32::MAX,
            ..b
        };
        assert_eq!(huge.delay(200, None), ms(100));
    }
}
