//! Reading what `promtool tsdb dump` prints, and comparing it with what a test sent.

use heddle_model::Labels;
use std::collections::BTreeMap;

/// Samples of one series as `(timestamp, value bits)`, in the order they were listed.
pub type Points = Vec<(i64, u64)>;
/// Series to samples: what a dump lists, or what a test expects.
pub type Dump = BTreeMap<Labels, Points>;

/// Parses promtool's dump: one `{name="value", ...} value timestamp` line per sample (Go's `%s %g %d`; `%g`
/// prints the shortest decimal that reads back to the same float, so values compare bit for bit).
pub fn parse_dump(text: &str) -> Result<Dump, String> {
    let mut dump = Dump::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let at = |e: String| format!("line {}: {e}: {line}", n + 1);
        let (labels, rest) = parse_labels(line).map_err(at)?;
        let mut fields = rest.split_ascii_whitespace();
        let (Some(v), Some(t), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(at("expected `value timestamp` after the labels".into()));
        };
        let v: f64 = v.parse().map_err(|e| at(format!("value {v:?}: {e}")))?;
        let t: i64 = t.parse().map_err(|e| at(format!("timestamp {t:?}: {e}")))?;
        dump.entry(labels).or_default().push((t, v.to_bits()));
    }
    Ok(dump)
}

/// Parses a leading `{a="b", c="d"}` (values quoted as Go's `strconv.Quote` does) and returns the rest.
fn parse_labels(line: &str) -> Result<(Labels, &str), String> {
    let mut rest = line.strip_prefix('{').ok_or("no opening brace")?;
    let mut pairs: Vec<(String, String)> = Vec::new();
    loop {
        if let Some(r) = rest.strip_prefix('}') {
            let labels = Labels::from_unsorted(pairs.iter().map(|(n, v)| (n.as_str(), v.as_str())))
                .map_err(|e| format!("invalid label set: {e}"))?;
            return Ok((labels, r));
        }
        if !pairs.is_empty() {
            rest = rest.strip_prefix(", ").ok_or("expected `, ` between labels")?;
        }
        let (name, r) = rest.split_once("=\"").ok_or("expected name=\"value\"")?;
        let (value, r) = go_unquote(r)?;
        pairs.push((name.to_owned(), value));
        rest = r;
    }
}

/// Reads a Go-quoted string body up to its closing quote (the opening one already consumed).
fn go_unquote(s: &str) -> Result<(String, &str), String> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((out, &s[i + 1..])),
            '\\' => {
                let (_, e) = chars.next().ok_or("dangling backslash")?;
                let simple = match e {
                    'a' => Some('\u{7}'),
                    'b' => Some('\u{8}'),
                    'f' => Some('\u{c}'),
                    'n' => Some('\n'),
                    'r' => Some('\r'),
                    't' => Some('\t'),
                    'v' => Some('\u{b}'),
                    '\\' | '"' | '\'' => Some(e),
                    _ => None,
                };
                if let Some(c) = simple {
                    out.push(c);
                    continue;
                }
                let digits = match e {
                    'x' => 2,
                    'u' => 4,
                    'U' => 8,
                    _ => return Err(format!("unknown escape \\{e}")),
                };
                let hex: String = (0..digits).filter_map(|_| chars.next().map(|(_, c)| c)).collect();
                let code = u32::from_str_radix(&hex, 16).map_err(|_| format!("bad escape \\{e}{hex}"))?;
                // `\xNN` is a raw byte in Go; label values are UTF-8, so only ASCII bytes can appear alone.
                out.push(char::from_u32(code).ok_or(format!("bad code point \\{e}{hex}"))?);
            }
            c => out.push(c),
        }
    }
    Err("unterminated quoted value".into())
}

/// Adds `more` to `base`, keeping each series in time order.
pub fn union(mut base: Dump, more: Dump) -> Dump {
    for (labels, points) in more {
        let all = base.entry(labels).or_default();
        all.extend(points);
        all.sort_unstable();
    }
    base
}

/// Checks that `got` holds every sample of `must`, nothing outside `must` ∪ `may`, and no sample twice.
/// Returns a description of the first differences (empty when it holds).
pub fn check(got: &Dump, must: &Dump, may: &Dump) -> Vec<String> {
    let mut problems = Vec::new();
    let none = Points::new();
    for (labels, want) in must {
        let have = got.get(labels).unwrap_or(&none);
        let missing = want.iter().filter(|p| !have.contains(p)).count();
        if missing > 0 {
            problems.push(format!(
                "{labels}: {missing} of {} acknowledged samples missing",
                want.len()
            ));
        }
    }
    for (labels, have) in got {
        let want = must.get(labels).unwrap_or(&none);
        let allowed = may.get(labels).unwrap_or(&none);
        let stray: Vec<_> = have
            .iter()
            .filter(|p| !want.contains(p) && !allowed.contains(p))
            .collect();
        if !stray.is_empty() {
            problems.push(format!(
                "{labels}: {} samples never sent, first {:?}",
                stray.len(),
                stray[0]
            ));
        }
        if have.windows(2).any(|w| w[0].0 >= w[1].0) {
            problems.push(format!("{labels}: timestamps not strictly increasing (duplicates?)"));
        }
    }
    problems
}
