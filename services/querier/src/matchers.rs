//! Building a request's label matchers: regular expressions bounded in length and compiled once per request.
//!
//! A remote-read request may repeat one selector in every query (Prometheus sends one query per selector of a
//! PromQL expression, and nothing stops a client from sending fifty copies); the [`MatcherCache`] of the
//! request compiles each distinct matcher once and hands out clones sharing the compiled program. A regular
//! expression longer than `querier.max_regex_length` is refused before it is compiled, so a hostile pattern
//! cannot make the querier spend its time and memory compiling it (the `regex` crate's own limit on the
//! compiled size bounds what is left).

use crate::budget;
use crate::error::QuerierError;
use crate::metrics::Metrics;
use crate::selector::quoted_string_at;
use heddle_model::{MatchType, Matcher};
use heddle_promql::{MatcherBuilder, PromqlError};
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
        if regex && let Some(err) = self.too_long(name, value.len()) {
            return Err(err);
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

    /// The refusal of a regular expression of `len` bytes on label `name`, if it is too long (counted).
    fn too_long(&self, name: &str, len: usize) -> Option<QuerierError> {
        if self.max_regex_length == 0 || len <= self.max_regex_length {
            return None;
        }
        if let Some(m) = &self.metrics {
            m.refused_query(heddle_model::error_id::REGEX_TOO_LONG);
        }
        Some(QuerierError::RegexTooLong {
            name: name.to_owned(),
            len,
            limit: self.max_regex_length,
        })
    }

    /// Refuses a PromQL query (or series selector) with a regular-expression matcher longer than the limit
    /// before anything parses or compiles it: PromQL's parser compiles each regex as it reads it, so the
    /// length is checked on the text, by a scan for the quoted string after each `=~` and `!~` (strings and
    /// comments skipped as the lexer skips them). A query this scan cannot follow is left to the parser to
    /// refuse. Returns what compiling every regex found once may allocate ([`budget::regex_bytes`]), for the
    /// caller to reserve.
    pub(crate) fn check_query(&self, text: &str) -> Result<usize, QuerierError> {
        let mut compiled = 0usize;
        if !text.contains('~') {
            return Ok(compiled);
        }
        let b = text.as_bytes();
        let mut i = 0;
        // The label name just read, and the name whose `=~`/`!~` was just read.
        let mut name: Option<String> = None;
        let mut regex_of: Option<String> = None;
        while i < b.len() {
            match b[i] {
                b'#' => {
                    while i < b.len() && b[i] != b'\n' {
                        i += 1;
                    }
                }
                b'"' | b'\'' | b'`' => {
                    let Ok((value, end)) = quoted_string_at(text, i) else {
                        return Ok(compiled);
                    };
                    if let Some(label) = regex_of.take() {
                        if let Some(err) = self.too_long(&label, value.len()) {
                            return Err(err);
                        }
                        compiled = compiled.saturating_add(budget::regex_bytes(&value));
                    }
                    // A quoted label name (Prometheus 3) may come before an operator.
                    name = Some(value);
                    i = end;
                }
                b'=' | b'!' if b.get(i + 1) == Some(&b'~') => {
                    regex_of = Some(name.take().unwrap_or_default());
                    i += 2;
                }
                c if c.is_ascii_whitespace() => i += 1,
                c if c.is_ascii_alphabetic() || c == b'_' || c == b':' => {
                    let start = i;
                    while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':') {
                        i += 1;
                    }
                    name = Some(text[start..i].to_owned());
                    regex_of = None;
                }
                _ => {
                    name = None;
                    regex_of = None;
                    i += 1;
                }
            }
        }
        Ok(compiled)
    }

    /// Regular expressions compiled so far.
    #[cfg(test)]
    pub(crate) fn compiled(&self) -> usize {
        self.compiled
    }
}

/// The PromQL planner builds a query's matchers through the request's cache: each distinct one compiled once
/// however many selectors repeat it, and a long regex refused by the same rule as everywhere else.
impl MatcherBuilder for MatcherCache {
    fn matcher(&mut self, kind: MatchType, name: &str, value: &str) -> Result<Matcher, PromqlError> {
        self.get(kind, name, value)
            .map_err(|e| PromqlError::BadData(e.to_string()))
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
    fn long_regexes_in_a_query_are_found_on_its_text() {
        let c = MatcherCache::new(8, None);
        let ok = [
            ("short regexes", r#"up{job=~"a|b|c|d"} / x{a!~"abcdefgh"}"#),
            ("a long equality", r#"up{job="a very long value indeed"}"#),
            (
                "a long string elsewhere",
                r#"label_replace(up, "dst", "a very long replacement", "src", "(.*)")"#,
            ),
            (
                "a long regex in a comment",
                "up # {job=~\"a very long regex in here\"}\n",
            ),
            (
                "an unterminated string, left to the parser",
                r#"up{job=~"a very long and unterminated"#,
            ),
            (
                "an operator inside a string",
                r#"up{job="=~", x="aaaaaaaaaaaaaaaaaaaa"}"#,
            ),
        ];
        for (name, text) in ok {
            assert!(c.check_query(text).is_ok(), "case {name}");
        }
        let refused = [
            ("double quotes", r#"up{job=~"a|b|c|d|e"}"#, "job", 9),
            (
                "negated, single quotes",
                r#"sum(rate(x{instance!~'aaaaaaaaaa'}[5m]))"#,
                "instance",
                10,
            ),
            ("raw string, spaces", "x{ job =~ `aaaaaaaaaaaa` }", "job", 12),
            ("quoted label name", r#"{"my.label"=~"aaaaaaaaaaaa"}"#, "my.label", 12),
            (
                "escapes count as what they decode to",
                r#"x{a=~"\u00e9\u00e9\u00e9\u00e9\u00e9"}"#,
                "a",
                10,
            ),
        ];
        for (name, text, label, len) in refused {
            match c.check_query(text) {
                Err(QuerierError::RegexTooLong {
                    name: got,
                    len: got_len,
                    limit: 8,
                }) => {
                    assert_eq!((got.as_str(), got_len), (label, len), "case {name}");
                }
                other => panic!("case {name}: {other:?}"),
            }
        }
        assert!(
            MatcherCache::new(0, None)
                .check_query(r#"x{a=~"aaaaaaaaaaaaaaaaaa"}"#)
                .is_ok(),
            "0 is no limit"
        );
        let two = c.check_query(r#"x{a=~"abc"} / y{b!~"a.*"}"#).unwrap();
        assert_eq!(
            two,
            budget::regex_bytes("abc") + budget::regex_bytes("a.*"),
            "each regex's compilation counted"
        );
        assert_eq!(c.check_query(r#"x{a="abc"}"#).unwrap(), 0);
        assert!(
            c.check_query(r#"x{a=~"\u00e9\u00e9\u00e9\u00e9"}"#).is_ok(),
            "8 bytes decoded: at the limit"
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
