//! Label matchers with Prometheus semantics.
//!
//! - Regexes are fully anchored: `=~"foo"` matches only `foo`, as in PromQL.
//! - A label that is absent has the value `""`: `{job=""}` selects series without `job`, and
//!   `{job!~".+"}` does too.

use regex::Regex;
use std::fmt;

/// The four matcher kinds of PromQL and remote read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MatchType {
    Equal,
    NotEqual,
    RegexMatch,
    RegexNoMatch,
}

impl MatchType {
    pub fn as_str(self) -> &'static str {
        match self {
            MatchType::Equal => "=",
            MatchType::NotEqual => "!=",
            MatchType::RegexMatch => "=~",
            MatchType::RegexNoMatch => "!~",
        }
    }
}

/// A matcher that could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid regular expression {pattern:?} for label {name:?}: {reason}")]
pub struct MatcherError {
    pub name: String,
    pub pattern: String,
    pub reason: String,
}

/// One label matcher; regexes are compiled once at construction.
#[derive(Clone)]
pub struct Matcher {
    name: String,
    kind: MatchType,
    value: String,
    re: Option<Regex>,
}

impl Matcher {
    pub fn new(kind: MatchType, name: impl Into<String>, value: impl Into<String>) -> Result<Self, MatcherError> {
        let name = name.into();
        let value = value.into();
        let re = match kind {
            MatchType::RegexMatch | MatchType::RegexNoMatch => {
                Some(Regex::new(&format!("^(?s:{value})$")).map_err(|e| MatcherError {
                    name: name.clone(),
                    pattern: value.clone(),
                    reason: e.to_string(),
                })?)
            }
            MatchType::Equal | MatchType::NotEqual => None,
        };
        Ok(Self { name, kind, value, re })
    }

    pub fn equal(name: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            kind: MatchType::Equal,
            value: value.into(),
            re: None,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn kind(&self) -> MatchType {
        self.kind
    }

    pub fn value(&self) -> &str {
        &self.value
    }

    /// Whether a label value (`""` when the label is absent) satisfies the matcher.
    pub fn matches(&self, value: &str) -> bool {
        match self.kind {
            MatchType::Equal => value == self.value,
            MatchType::NotEqual => value != self.value,
            MatchType::RegexMatch => self.re.as_ref().is_some_and(|re| re.is_match(value)),
            MatchType::RegexNoMatch => !self.re.as_ref().is_some_and(|re| re.is_match(value)),
        }
    }

    /// Whether the matcher selects series that lack the label entirely.
    pub fn matches_empty(&self) -> bool {
        self.matches("")
    }
}

impl fmt::Display for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}{:?}", self.name, self.kind.as_str(), self.value)
    }
}

impl fmt::Debug for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_semantics() {
        use MatchType::*;
        let cases: &[(&str, MatchType, &str, &str, bool)] = &[
            ("eq", Equal, "a", "a", true),
            ("eq other", Equal, "a", "b", false),
            ("eq empty selects absent", Equal, "", "", true),
            ("neq", NotEqual, "a", "b", true),
            ("re anchored", RegexMatch, "fo", "foo", false),
            ("re full", RegexMatch, "fo.*", "foo", true),
            ("re alternation anchored", RegexMatch, "a|b", "ab", false),
            ("nre", RegexNoMatch, "a.*", "b", true),
            ("nre .+ selects absent", RegexNoMatch, ".+", "", true),
            ("re dot matches newline", RegexMatch, "a.b", "a\nb", true),
        ];
        for (name, kind, pattern, value, want) in cases {
            let m = Matcher::new(*kind, "l", *pattern).unwrap();
            assert_eq!(m.matches(value), *want, "case {name}");
        }
    }

    #[test]
    fn bad_regex_is_an_error() {
        let err = Matcher::new(MatchType::RegexMatch, "job", "(").unwrap_err();
        assert_eq!(err.name, "job");
    }
}
