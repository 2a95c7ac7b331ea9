//! Building a request's label matchers: regular expressions bounded in length and compiled once per request.
//!
//! A remote-read request may repeat one selector in every query (Prometheus sends one query per selector of a
//! PromQL expression, and nothing stops a client from sending fifty copies); the [`MatcherCache`] of the
//! request compiles each distinct matcher once and hands out clones sharing the compiled program. A regular
//! expression longer than `querier.max_regex_length` is refused before it is compiled, so a hostile pattern
//! cannot make the querier spend its time and memory compiling it (the `regex` crate's own limit on the
//! compiled size bounds what is left).

use crate::error::QuerierError;
use crate::metrics::Metrics;
use heddle_model::{MatchType, Matcher};
use std::collections::HashMap;

/// The matchers of one request, each distinct one built once.
pub(crate) struct MatcherCache {
    max_regex_length: usize,
    built: HashMap<(MatchType, String, String), Matcher>,
    compiled: usize,
    metrics: Option<Metrics>,
}

impl MatcherCache {
    /// A cache refusing regular expressions longer than `max_regex_length` bytes (0: no limit), counting
    /// refusals in `metrics` when given.
    pub(crate) fn new(max_regex_length: usize, metrics: Option<Metrics>) -> Self {
        Self {
            max_regex_length,
            built: HashMap::new(),
            compiled: 0,
            metrics,
        }
    }

    /// The matcher `name kind value`, built (and its regex compiled) the first time the request names it.
    pub(crate) fn get(&mut self, kind: MatchType, name: &str, value: &str) -> Result<Matcher, QuerierError> {
        let regex = matches!(kind, MatchType::RegexMatch | MatchType::RegexNoMatch);
        if regex && self.max_regex_length > 0 && value.len() > self.max_regex_length {
            if let Some(m) = &self.metrics {
                m.refused_query(heddle_model::error_id::REGEX_TOO_LONG);
            }
            return Err(QuerierError::RegexTooLong {
                name: name.to_owned(),
                len: value.len(),
                limit: self.max_regex_length,
            });
        }
        let key = (kind, name.to_owned(), value.to_owned());
        if let Some(m) = self.built.get(&key) {
            return Ok(m.clone());
        }
        let m = Matcher::new(kind, name, value).map_err(|e| QuerierError::BadData(e.to_string()))?;
        if regex {
            self.compiled += 1;
        }
        self.built.insert(key, m.clone());
        Ok(m)
    }

    /// Regular expressions compiled so far.
    #[cfg(test)]
    pub(crate) fn compiled(&self) -> usize {
        self.compiled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_matchers_are_compiled_once() {
        let mut c = MatcherCache::new(100, None);
        let a = c.get(MatchType::RegexMatch, "__name__", ".+").unwrap();
        for _ in 0..49 {
            let b = c.get(MatchType::RegexMatch, "__name__", ".+").unwrap();
            assert!(b.matches("up") && !b.matches(""));
        }
        assert!(a.matches("up"));
        assert_eq!(c.compiled(), 1);
        c.get(MatchType::RegexNoMatch, "__name__", ".+").unwrap();
        c.get(MatchType::Equal, "job", "a").unwrap();
        assert_eq!(
            c.compiled(),
            2,
            "another kind is another regex; equality compiles nothing"
        );
    }

    #[test]
    fn long_regexes_are_refused_before_compiling() {
        let mut c = MatcherCache::new(8, None);
        c.get(MatchType::RegexMatch, "job", "a|b|c|d").unwrap();
        let err = c.get(MatchType::RegexMatch, "job", "a|b|c|d|e").unwrap_err();
        assert_eq!(err.status().as_u16(), 400);
        let msg = err.to_string();
        assert!(
            msg.starts_with("err-heddle-regex-too-long:")
                && msg.contains("is 9 bytes; the limit is 8")
                && msg.contains("--querier.max-regex-length"),
            "{msg}"
        );
        c.get(MatchType::Equal, "job", "a long value is no regex").unwrap();
        assert_eq!(c.compiled(), 1);
        assert!(matches!(
            c.get(MatchType::RegexMatch, "job", "("),
            Err(QuerierError::BadData(m)) if m.contains("invalid regular expression")
        ));
    }
}
