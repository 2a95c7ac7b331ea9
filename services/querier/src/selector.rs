//! A parser for PromQL series selectors, the `match[]` parameter of the series and label APIs.
//!
//! Accepts what Prometheus' `parser.ParseMetricSelector` accepts for a plain selector:
//! `metric`, `metric{a="b", c=~"d.*"}`, `{__name__=~"x"}`, trailing commas, the three string quotes (`"..."`,
//! `'...'` with Go escapes, and raw `` `...` ``), and Prometheus 3's quoted names (`{"my.metric", "a.b"="c"}`).
//! Range or offset modifiers, functions and operators are refused: they are not series selectors.

use crate::error::QuerierError;
use crate::matchers::MatcherCache;
use heddle_model::{METRIC_NAME, MatchType, Matcher};

/// A matcher as parsed, before it is built: kind, label name, value.
type RawMatcher = (MatchType, String, String);

/// Parses one series selector into its matchers. The metric name, if any, becomes an `__name__` equality
/// matcher (first). Applies Prometheus' rule that a selector needs at least one matcher that does not match the
/// empty string, so that it cannot select every series. Regular expressions are not limited in length here;
/// the querier's API bounds them (`querier.max_regex_length`).
pub fn parse_selector(input: &str) -> Result<Vec<Matcher>, QuerierError> {
    parse_selector_with(input, &mut MatcherCache::new(0, None))
}

/// [`parse_selector`] building the matchers through the request's `cache` (length limit, compiled once).
pub(crate) fn parse_selector_with(input: &str, cache: &mut MatcherCache) -> Result<Vec<Matcher>, QuerierError> {
    let err = |reason: String| QuerierError::BadData(format!("invalid series selector {input:?}: {reason}"));
    let raw = Parser { s: input, pos: 0 }.selector().map_err(err)?;
    let matchers = raw
        .iter()
        .map(|(kind, name, value)| {
            cache.get(*kind, name, value).map_err(|e| match e {
                QuerierError::BadData(reason) => err(reason),
                other => other,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if matchers.iter().all(Matcher::matches_empty) {
        return Err(err("vector selector must contain at least one non-empty matcher".into()));
    }
    Ok(matchers)
}

/// The quoted string (PromQL's three quotes, Go escapes) that starts at byte `pos` of `s`: its value and the
/// position after its closing quote.
pub(crate) fn quoted_string_at(s: &str, pos: usize) -> Result<(String, usize), String> {
    let mut p = Parser { s, pos };
    let value = p.string()?;
    Ok((value, p.pos))
}

struct Parser<'a> {
    s: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.s[self.pos..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn eat(&mut self, prefix: &str) -> bool {
        if self.s[self.pos..].starts_with(prefix) {
            self.pos += prefix.len();
            true
        } else {
            false
        }
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += self.peek().map_or(0, char::len_utf8);
        }
    }

    fn unexpected(&self, expected: &str) -> String {
        match self.peek() {
            Some(c) => format!("unexpected {c:?} at position {}, expected {expected}", self.pos),
            None => format!("unexpected end of input, expected {expected}"),
        }
    }

    /// Reads `[first][rest]*` where `first`/`rest` are byte classes; `None` when nothing matched.
    fn ident(&mut self, first: fn(u8) -> bool, rest: fn(u8) -> bool) -> Option<&str> {
        let bytes = self.s.as_bytes();
        let start = self.pos;
        if !bytes.get(start).copied().is_some_and(first) {
            return None;
        }
        let mut end = start + 1;
        while bytes.get(end).copied().is_some_and(rest) {
            end += 1;
        }
        self.pos = end;
        Some(&self.s[start..end])
    }

    fn selector(mut self) -> Result<Vec<RawMatcher>, String> {
        self.skip_ws();
        let name = self
            .ident(
                |b| b.is_ascii_alphabetic() || b == b'_' || b == b':',
                |b| b.is_ascii_alphanumeric() || b == b'_' || b == b':',
            )
            .map(str::to_owned);
        let mut matchers = Vec::new();
        if let Some(name) = &name {
            matchers.push((MatchType::Equal, METRIC_NAME.to_owned(), name.clone()));
        }
        self.skip_ws();
        if self.eat("{") {
            self.matchers(&mut matchers)?;
        } else if name.is_none() {
            return Err(self.unexpected("a metric name or \"{\""));
        }
        self.skip_ws();
        if self.pos < self.s.len() {
            return Err(self.unexpected("end of selector (only series selectors are allowed)"));
        }
        if let Some(name) = &name
            && let Some(other) = matchers.iter().skip(1).find(|m| m.1 == METRIC_NAME)
        {
            return Err(format!("metric name must not be set twice: {name:?} or {:?}", other.2));
        }
        Ok(matchers)
    }

    /// Parses the matchers after `{` up to and including `}`.
    fn matchers(&mut self, out: &mut Vec<RawMatcher>) -> Result<(), String> {
        loop {
            self.skip_ws();
            if self.eat("}") {
                return Ok(());
            }
            let (label, quoted) = if matches!(self.peek(), Some('"' | '\'' | '`')) {
                (self.string()?, true)
            } else {
                let ident = self.ident(
                    |b| b.is_ascii_alphabetic() || b == b'_',
                    |b| b.is_ascii_alphanumeric() || b == b'_',
                );
                match ident {
                    Some(i) => (i.to_owned(), false),
                    None => return Err(self.unexpected("a label name or \"}\"")),
                }
            };
            self.skip_ws();
            if quoted && matches!(self.peek(), Some(',' | '}')) {
                // Prometheus 3: a lone quoted string is the metric name.
                out.push((MatchType::Equal, METRIC_NAME.to_owned(), label));
            } else {
                let kind = if self.eat("=~") {
                    MatchType::RegexMatch
                } else if self.eat("!~") {
                    MatchType::RegexNoMatch
                } else if self.eat("!=") {
                    MatchType::NotEqual
                } else if self.eat("=") {
                    MatchType::Equal
                } else {
                    return Err(self.unexpected("one of =, !=, =~, !~"));
                };
                self.skip_ws();
                let value = self.string()?;
                out.push((kind, label, value));
            }
            self.skip_ws();
            if self.eat(",") {
                continue;
            }
            if self.eat("}") {
                return Ok(());
            }
            return Err(self.unexpected("\",\" or \"}\""));
        }
    }

    /// Parses a quoted string at the cursor and returns its unescaped value.
    fn string(&mut self) -> Result<String, String> {
        let open_at = self.pos;
        let quote = match self.bump() {
            Some(q @ ('"' | '\'' | '`')) => q,
            _ => {
                self.pos = open_at;
                return Err(self.unexpected("a quoted string"));
            }
        };
        let unterminated = || format!("unterminated quoted string starting at position {open_at}");
        if quote == '`' {
            let rest = &self.s[self.pos..];
            let end = rest.find('`').ok_or_else(unterminated)?;
            let value = rest[..end].to_owned();
            self.pos += end + 1;
            return Ok(value);
        }
        let mut buf = Vec::new();
        loop {
            let c = self.bump().ok_or_else(unterminated)?;
            match c {
                c if c == quote => break,
                '\n' => return Err(unterminated()),
                '\\' => self.escape(quote, &mut buf)?,
                c => buf.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            }
        }
        String::from_utf8(buf).map_err(|_| format!("string starting at position {open_at} is not valid UTF-8"))
    }

    /// Decodes one escape sequence (after the backslash) into `buf`, with Go's rules as PromQL's lexer applies
    /// them: only the string's own quote may be escaped; `\x` and octal escapes produce single bytes.
    fn escape(&mut self, quote: char, buf: &mut Vec<u8>) -> Result<(), String> {
        let at = self.pos - 1;
        let c = self
            .bump()
            .ok_or_else(|| format!("unterminated escape sequence at position {at}"))?;
        let simple = match c {
            'a' => Some(0x07),
            'b' => Some(0x08),
            'f' => Some(0x0c),
            'n' => Some(b'\n'),
            'r' => Some(b'\r'),
            't' => Some(b'\t'),
            'v' => Some(0x0b),
            '\\' => Some(b'\\'),
            c if c == quote => Some(c as u8),
            _ => None,
        };
        if let Some(b) = simple {
            buf.push(b);
            return Ok(());
        }
        let (digits, radix, max, is_byte) = match c {
            '0'..='7' => {
                self.pos -= 1;
                (3, 8, 255, true)
            }
            'x' => (2, 16, 255, true),
            'u' => (4, 16, u32::from(char::MAX), false),
            'U' => (8, 16, u32::from(char::MAX), false),
            other => return Err(format!("unknown escape sequence \\{other} at position {at}")),
        };
        let bad = || format!("invalid escape sequence at position {at}");
        let text = self.s.get(self.pos..self.pos + digits).ok_or_else(bad)?;
        let value = u32::from_str_radix(text, radix).map_err(|_| bad())?;
        if !text.bytes().all(|b| (b as char).is_digit(radix)) || value > max {
            return Err(bad());
        }
        self.pos += digits;
        if is_byte {
            buf.push(u8::try_from(value).map_err(|_| bad())?);
        } else {
            let ch = char::from_u32(value)
                .ok_or_else(|| format!("escape sequence at position {at} is an invalid Unicode code point"))?;
            buf.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(ms: &[Matcher]) -> Vec<String> {
        ms.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn valid_selectors() {
        let cases: &[(&str, &str, &[&str])] = &[
            ("bare name", "up", &[r#"__name__="up""#]),
            ("name with colon", "job:rate5m", &[r#"__name__="job:rate5m""#]),
            (
                "name and matchers",
                r#"up{job="a", instance=~"h.*"}"#,
                &[r#"__name__="up""#, r#"job="a""#, r#"instance=~"h.*""#],
            ),
            ("only name matcher", r#"{__name__=~"x"}"#, &[r#"__name__=~"x""#]),
            (
                "all operators",
                r#"{a="1",b!="2",c=~"3",d!~"4"}"#,
                &[r#"a="1""#, r#"b!="2""#, r#"c=~"3""#, r#"d!~"4""#],
            ),
            (
                "trailing comma and spaces",
                " up { job = \"a\" , } ",
                &[r#"__name__="up""#, r#"job="a""#],
            ),
            ("empty braces after name", "up{}", &[r#"__name__="up""#]),
            ("single quotes", r"{job='it\'s'}", &[r#"job="it's""#]),
            ("raw string keeps backslashes", r"{job=~`a\.b`}", &[r#"job=~"a\\.b""#]),
            ("escapes", r#"{a="\"q\"\n\t\\"}"#, &[r#"a="\"q\"\n\t\\""#]),
            (
                "hex octal unicode",
                r#"{a="\x41\101\u00e9\U0001F600"}"#,
                &[r#"a="AAé😀""#],
            ),
            ("utf-8 value", r#"{a="日本"}"#, &[r#"a="日本""#]),
            (
                "quoted metric and label names",
                r#"{"my.metric", "a.b"="c"}"#,
                &[r#"__name__="my.metric""#, r#"a.b="c""#],
            ),
            ("keyword-like label", r#"{on="x", by="y"}"#, &[r#"on="x""#, r#"by="y""#]),
            (
                "one empty-matching matcher is fine",
                r#"{a="x", b=""}"#,
                &[r#"a="x""#, r#"b="""#],
            ),
        ];
        for (name, input, want) in cases {
            let got = parse_selector(input).unwrap_or_else(|e| panic!("case {name}: {e}"));
            assert_eq!(show(&got), *want, "case {name}");
        }
    }

    #[test]
    fn invalid_selectors() {
        let cases: &[(&str, &str, &str)] = &[
            ("empty", "", "expected a metric name"),
            ("empty braces", "{}", "at least one non-empty matcher"),
            (
                "only empty matchers",
                r#"{a="", b=~".*"}"#,
                "at least one non-empty matcher",
            ),
            ("negative only", r#"{a!="x"}"#, "at least one non-empty matcher"),
            ("unterminated braces", r#"up{job="a""#, "expected \",\" or \"}\""),
            ("unterminated string", r#"up{job="a}"#, "unterminated quoted string"),
            ("newline in string", "up{job=\"a\nb\"}", "unterminated quoted string"),
            ("missing operator", r#"up{job "a"}"#, "one of =, !=, =~, !~"),
            ("unquoted value", "up{job=a}", "a quoted string"),
            ("range selector", "up[5m]", "only series selectors"),
            ("function", "rate(up[5m])", "only series selectors"),
            ("offset", "up offset 5m", "only series selectors"),
            ("bad regex", r#"{a=~"("}"#, "invalid regular expression"),
            ("name twice", r#"up{__name__="x"}"#, "metric name must not be set twice"),
            ("unknown escape", r#"{a="\q"}"#, "unknown escape sequence"),
            ("escaped other quote", r#"{a="\'"}"#, "unknown escape sequence"),
            ("short hex", r#"{a="\x4"}"#, "invalid escape sequence"),
            ("surrogate", r#"{a="\ud800"}"#, "invalid Unicode code point"),
            ("octal too big", r#"{a="\777"}"#, "invalid escape sequence"),
            ("bad utf-8 bytes", r#"{a="\xff"}"#, "not valid UTF-8"),
            ("label starting with digit", r#"{1a="x"}"#, "a label name"),
            ("number", "42", "expected a metric name"),
        ];
        for (name, input, want) in cases {
            match parse_selector(input) {
                Ok(m) => panic!("case {name}: parsed {input:?} into {m:?}"),
                Err(e) => {
                    let msg = e.to_string();
                    assert!(msg.contains(want), "case {name}: {msg:?} should contain {want:?}");
                    assert!(matches!(e, QuerierError::BadData(_)), "case {name}: bad data");
                }
            }
        }
    }
}
