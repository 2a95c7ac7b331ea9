//! How hard the bucket tries: per-object retries with exponential backoff, multipart thresholds, timeouts.

use std::future::Future;
use std::time::Duration;

use crate::error::store_error_is_retryable;

/// Tuning of a [`crate::Bucket`]. The defaults suit production; tests shrink the retry bounds.
#[derive(Debug, Clone)]
pub struct BucketOptions {
    /// Retries of each object operation.
    pub retry: RetryOptions,
    /// Files larger than this are uploaded with a multipart upload.
    pub multipart_threshold: u64,
    /// Size of each multipart part (S3 needs at least 5 MiB for every part but the last).
    pub part_size: usize,
    /// Upper bound on one HTTP request to an S3 endpoint (a part upload included).
    pub request_timeout: Duration,
    /// Upper bound on opening a connection to an S3 endpoint.
    pub connect_timeout: Duration,
    /// Retries of a single HTTP request inside the S3 client (a multipart part cannot be retried from
    /// outside), on top of the per-object `retry`.
    pub client_retries: usize,
}

impl Default for BucketOptions {
    fn default() -> Self {
        Self {
            retry: RetryOptions::default(),
            multipart_threshold: 16 * 1024 * 1024,
            part_size: 8 * 1024 * 1024,
            request_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(5),
            client_retries: 3,
        }
    }
}

/// Exponential backoff for one object operation: at most `max_attempts` calls, and no new attempt once
/// `max_elapsed` has passed since the first. Only retryable errors are retried.
#[derive(Debug, Clone)]
pub struct RetryOptions {
    /// Calls in total, the first included (at least 1).
    pub max_attempts: u32,
    /// Wait before the second attempt; doubles each time.
    pub initial_backoff: Duration,
    /// Longest wait between two attempts.
    pub max_backoff: Duration,
    /// No attempt starts after this much time since the first.
    pub max_elapsed: Duration,
}

impl Default for RetryOptions {
    fn default() -> Self {
        Self {
            max_attempts: 6,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(10),
            max_elapsed: Duration::from_secs(60),
        }
    }
}

impl RetryOptions {
    /// The wait after failed attempt number `attempt` (1-based): `initial * 2^(attempt-1)` capped at
    /// `max_backoff`, with up to 25% random jitter taken off so concurrent shippers spread out.
    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(20);
        let base = self.initial_backoff.saturating_mul(1 << exp).min(self.max_backoff);
        let jitter = rand::random::<f64>() * 0.25;
        base.mul_f64(1.0 - jitter)
    }

    /// Runs `op` until it succeeds, fails with a non-retryable error, or the bounds are reached. Returns the
    /// last result and the number of calls made.
    pub(crate) async fn run<T, F, Fut>(&self, mut op: F) -> (Result<T, object_store::Error>, u32)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, object_store::Error>>,
    {
        let start = tokio::time::Instant::now();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = op().await;
            match &result {
                Ok(_) => return (result, attempt),
                Err(e) if !store_error_is_retryable(e) || attempt >= self.max_attempts.max(1) => {
                    return (result, attempt);
                }
                Err(e) => {
                    let wait = self.backoff(attempt);
                    if start.elapsed() + wait > self.max_elapsed {
                        return (result, attempt);
                    }
                    tracing::debug!(attempt, wait_ms = wait.as_millis() as u64, error = %e, "bucket call failed, retrying");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn transient() -> object_store::Error {
        object_store::Error::Generic {
            store: "test",
            source: "connection refused".into(),
        }
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let r = RetryOptions {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(350),
            ..RetryOptions::default()
        };
        let cases = [(1, 100), (2, 200), (3, 350), (30, 350)];
        for (attempt, full_ms) in cases {
            let got = r.backoff(attempt);
            let full = Duration::from_millis(full_ms);
            assert!(got <= full && got >= full.mul_f64(0.75), "attempt {attempt}: {got:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_transient_errors_up_to_the_bound() {
        let r = RetryOptions {
            max_attempts: 4,
            ..RetryOptions::default()
        };
        let calls = AtomicU32::new(0);
        let (res, attempts) = r
            .run(|| async {
                calls.fetch_add(1, Ordering::Relaxed);
                Err::<(), _>(transient())
            })
            .await;
        assert!(res.is_err());
        assert_eq!((attempts, calls.load(Ordering::Relaxed)), (4, 4));

        calls.store(0, Ordering::Relaxed);
        let (res, attempts) = r
            .run(|| async {
                if calls.fetch_add(1, Ordering::Relaxed) < 2 {
                    Err(transient())
                } else {
                    Ok(7)
                }
            })
            .await;
        assert_eq!((res.ok(), attempts), (Some(7), 3));
    }

    #[tokio::test(start_paused = true)]
    async fn does_not_retry_definite_answers_or_past_the_time_bound() {
        let r = RetryOptions {
            max_attempts: 100,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(1),
            max_elapsed: Duration::from_secs(3),
        };
        let (_, attempts) = r
            .run(|| async {
                Err::<(), _>(object_store::Error::NotFound {
                    path: "x".into(),
                    source: "gone".into(),
                })
            })
            .await;
        assert_eq!(attempts, 1, "not found is final");
        let (_, attempts) = r.run(|| async { Err::<(), _>(transient()) }).await;
        assert!((3..=5).contains(&attempts), "time-bounded: {attempts} attempts");
    }
}
