//! What became of a forwarded request: per-series rejections, quorum failures, and the one HTTP status
//! and body that summarise them (the worst outcome wins).

use http::StatusCode;

/// Most bytes of messages in a response body; the rest is summarised as "and N more".
pub const MAX_RESPONSE_BODY: usize = 8 * 1024;

/// One series refused for good (the sender must not retry it): by validation or by an ingester.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// Stable id, e.g. `err-heddle-label-value-too-long` or the ingester's `err-heddle-sample-out-of-order`.
    pub reason: String,
    /// Full message naming tenant, series, the limit and what to change.
    pub message: String,
}

/// Series that did not reach quorum because ingesters failed or were unreachable (the sender should retry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardFailure {
    /// Series that failed.
    pub series: usize,
    /// Their samples.
    pub samples: u64,
    /// Every failure was an availability problem (unreachable, overloaded, timed out, no ingesters): 503.
    /// Otherwise 500.
    pub unavailable: bool,
    /// The message, naming tenant, counts and the ingesters' errors.
    pub message: String,
}

/// The result of a request that was decoded and forwarded (possibly partly).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PushOutcome {
    /// Series in the request.
    pub series_received: usize,
    /// The request came from a non-elected replica of a Prometheus HA pair and was dropped (202): why.
    pub deduplicated: Option<String>,
    /// Float samples of series that a quorum of replicas acknowledged.
    pub samples_ingested: u64,
    /// Native histogram samples of series that a quorum of replicas acknowledged.
    pub histograms_ingested: u64,
    /// Exemplars of series that a quorum of replicas acknowledged.
    pub exemplars_ingested: u64,
    /// Series refused for good, in request order (validation first, then ingesters' refusals).
    pub rejections: Vec<Rejection>,
    /// Series that failed for lack of quorum, if any.
    pub failure: Option<ForwardFailure>,
}

impl PushOutcome {
    /// 202 for a deduplicated HA request (as Mimir: the sender must not retry it). Otherwise the worst
    /// outcome across series: any quorum failure => 503/500 (so the sender retries the whole
    /// request; samples already written come back as duplicates, which ingesters accept), else any
    /// rejection => 400, else 200.
    pub fn status(&self) -> StatusCode {
        if self.deduplicated.is_some() {
            return StatusCode::ACCEPTED;
        }
        match &self.failure {
            Some(f) if f.unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Some(_) => StatusCode::INTERNAL_SERVER_ERROR,
            None if !self.rejections.is_empty() => StatusCode::BAD_REQUEST,
            None => StatusCode::OK,
        }
    }

    /// Response body: empty on success, else one message per line, capped at [`MAX_RESPONSE_BODY`] bytes.
    pub fn body(&self) -> String {
        if let Some(m) = &self.deduplicated {
            return format!("{m}\n");
        }
        let messages = self
            .failure
            .iter()
            .map(|f| f.message.as_str())
            .chain(self.rejections.iter().map(|r| r.message.as_str()));
        join_capped(
            messages,
            self.rejections.len() + usize::from(self.failure.is_some()),
            MAX_RESPONSE_BODY,
        )
    }
}

/// Joins messages with newlines until `cap` bytes, then says how many were left out. A single message longer
/// than the cap is still shown whole (it is bounded by construction).
pub(crate) fn join_capped<'a>(messages: impl Iterator<Item = &'a str>, total: usize, cap: usize) -> String {
    let mut out = String::new();
    for (shown, m) in messages.enumerate() {
        if shown > 0 && out.len() + m.len() + 1 > cap {
            out.push_str(&format!("and {} more\n", total - shown));
            return out;
        }
        out.push_str(m);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejection(i: usize) -> Rejection {
        Rejection {
            reason: "err-heddle-invalid-label".into(),
            message: format!("err-heddle-invalid-label: message number {i:04} {}", "x".repeat(80)),
        }
    }

    #[test]
    fn status_is_the_worst_outcome() {
        let failure = |unavailable| ForwardFailure {
            series: 1,
            samples: 1,
            unavailable,
            message: "f".into(),
        };
        let cases: Vec<(&str, PushOutcome, StatusCode)> = vec![
            ("all good", PushOutcome::default(), StatusCode::OK),
            (
                "rejections",
                PushOutcome {
                    rejections: vec![rejection(0)],
                    ..Default::default()
                },
                StatusCode::BAD_REQUEST,
            ),
            (
                "unavailable beats rejections",
                PushOutcome {
                    rejections: vec![rejection(0)],
                    failure: Some(failure(true)),
                    ..Default::default()
                },
                StatusCode::SERVICE_UNAVAILABLE,
            ),
            (
                "other failure",
                PushOutcome {
                    failure: Some(failure(false)),
                    ..Default::default()
                },
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
        ];
        for (name, outcome, status) in cases {
            assert_eq!(outcome.status(), status, "case {name}");
        }
        assert_eq!(PushOutcome::default().body(), "");
    }

    #[test]
    fn body_is_capped_with_a_count() {
        let o = PushOutcome {
            rejections: (0..1000).map(rejection).collect(),
            ..Default::default()
        };
        let body = o.body();
        assert!(body.len() <= MAX_RESPONSE_BODY + 32, "{}", body.len());
        assert!(body.contains("message number 0000"), "the first messages are kept");
        let shown = body.lines().count() - 1;
        assert!(body.ends_with(&format!("and {} more\n", 1000 - shown)), "{body}");
    }
}
