//! OTLP metric names, attribute keys and units as Prometheus names, under each translation strategy: the
//! rules of Prometheus' `otlptranslator` (`MetricNamer`, `LabelNamer`, `UnitNamer`).

use heddle_limits::OtelTranslationStrategy;

/// What a metric becomes, which decides its name's suffixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Gauge,
    Counter,
    /// A non-monotonic sum: a gauge, without the `ratio` suffix.
    UpDownCounter,
    Histogram,
    Summary,
}

/// The Prometheus metric name of an OTLP metric `name` of `unit` and `kind` under `strategy`; `None` when
/// escaping leaves nothing usable (empty, or only underscores from characters that were not), which
/// Prometheus refuses too.
pub(crate) fn metric_name(name: &str, unit: &str, kind: Kind, strategy: OtelTranslationStrategy) -> Option<String> {
    let out = match (strategy.escapes(), strategy.adds_suffixes()) {
        (true, true) => escaped_with_suffixes(name, unit, kind),
        (true, false) => escaped(name),
        (false, true) => utf8_with_suffixes(name, unit, kind),
        (false, false) => name.to_owned(),
    };
    let only_underscores = out != name && out.bytes().all(|b| b == b'_');
    (!out.is_empty() && !only_underscores).then_some(out)
}

/// `UnderscoreEscapingWithSuffixes`: the name as words of `[a-zA-Z0-9:]` joined with `_` (a run of other
/// characters, underscores included, is one separator), then the unit words, `total`, `ratio`.
fn escaped_with_suffixes(name: &str, unit: &str, kind: Kind) -> String {
    let mut tokens: Vec<String> = name
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == ':'))
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect();
    let (main, per) = unit_words(unit);
    let mut main = clean_unit(&main);
    let mut per = clean_unit(&per);
    if tokens.contains(&main) {
        main.clear();
    }
    if per == "per_" {
        per.clear();
    } else {
        if per.ends_with('_') {
            per.pop();
        }
        if tokens.contains(&per) {
            per.clear();
        }
    }
    if !per.is_empty() && main.ends_with('_') {
        main.pop();
    }
    tokens.extend([main, per].into_iter().filter(|t| !t.is_empty()));
    if kind == Kind::Counter {
        tokens.retain(|t| t != "total");
        tokens.push("total".to_owned());
    }
    if unit == "1" && kind == Kind::Gauge {
        tokens.retain(|t| t != "ratio");
        tokens.push("ratio".to_owned());
    }
    let mut out = tokens.join("_");
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// `UnderscoreEscapingWithoutSuffixes`: each run of characters outside `[a-zA-Z0-9:_]` is one `_`; a leading
/// digit gets `_`.
fn escaped(name: &str) -> String {
    let tokens: Vec<&str> = name
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == ':' || c == '_'))
        .filter(|t| !t.is_empty())
        .collect();
    let mut out = tokens.join("_");
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// `NoUTF8EscapingWithSuffixes`: the name as sent, then `_<unit>`, `_per_<unit>`, `_total` and `_ratio` as
/// they apply, in that order. The unit word is not added when the name already ends with it; a name already
/// ending in the per-unit word, `total` or `ratio` (after any one-character separator: `a.total`, `a_total`)
/// has it taken off first, so that it is not doubled and lands in its place.
fn utf8_with_suffixes(name: &str, unit: &str, kind: Kind) -> String {
    let mut name = name.to_owned();
    let ratio = unit == "1" && kind == Kind::Gauge;
    let total = kind == Kind::Counter;
    if ratio {
        trim_suffix_and_separator(&mut name, "ratio");
    }
    if total {
        trim_suffix_and_separator(&mut name, "total");
    }
    let (main, per) = unit_words(unit);
    if !per.is_empty() {
        trim_suffix_and_separator(&mut name, &per);
    }
    if !main.is_empty() && !name.ends_with(main.as_str()) {
        name.push('_');
        name.push_str(&main);
    }
    for (add, word) in [(!per.is_empty(), per.as_str()), (total, "total"), (ratio, "ratio")] {
        if add {
            name.push('_');
            name.push_str(word);
        }
    }
    name
}

/// Takes `suffix` and the one character before it off `name`, when `name` ends with it and is longer than
/// both (Prometheus' `trimSuffixAndDelimiter`, which counts the separator as one byte).
fn trim_suffix_and_separator(name: &mut String, suffix: &str) {
    if name.ends_with(suffix) && name.len() > suffix.len() + 1 {
        let mut cut = name.len() - suffix.len() - 1;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name.truncate(cut);
    }
}

/// A label name from an attribute key under `strategy`; `None` when escaping leaves only underscores from
/// characters that were not (Prometheus refuses the point then). The UTF-8 strategies keep the key.
///
/// The name's capacity is at most [`LABEL_NAME_GROWTH`] bytes past the key's length, which the translation's
/// bound counts on: escaping turns each character into one byte, and the prefix adds at most four.
pub(crate) fn label_name(key: &str, strategy: OtelTranslationStrategy) -> Option<String> {
    if !strategy.escapes() {
        return (!key.is_empty()).then(|| key.to_owned());
    }
    let mut name = String::with_capacity(key.len() + LABEL_NAME_GROWTH);
    let escaped = key
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' });
    if key.starts_with(|c: char| c.is_ascii_digit()) {
        name.push_str("key_");
    } else if key.starts_with(|c: char| !(c.is_ascii_alphanumeric())) && !escaped.clone().take(2).eq(['_', '_']) {
        name.push_str("key");
    }
    name.extend(escaped);
    debug_assert!(name.capacity() <= key.len() + LABEL_NAME_GROWTH);
    let only_underscores = name != key && name.bytes().all(|b| b == b'_');
    (!name.is_empty() && !only_underscores).then_some(name)
}

/// Bytes a label name escaped from an attribute key may take beyond the key (the `key_` prefix).
pub(crate) const LABEL_NAME_GROWTH: usize = 4;

/// The Prometheus unit of an OTLP unit: its suffix words as the metric name gets them (`s` -> `seconds`,
/// `By/s` -> `bytes_per_second`), empty for `1` and annotations; cleaned to `[a-zA-Z0-9:_]` when `escape`.
pub(crate) fn prometheus_unit(unit: &str, escape: bool) -> String {
    let (mut main, mut per) = unit_words(unit);
    if escape {
        main = clean_unit(&main);
        per = clean_unit(&per);
    }
    let joined = match (main.is_empty(), per.is_empty()) {
        (false, false) => format!("{main}_{per}"),
        (false, true) => main,
        _ => per,
    };
    let trimmed = joined.strip_prefix('_').unwrap_or(&joined);
    trimmed.strip_suffix('_').unwrap_or(trimmed).to_owned()
}

/// The suffix words of an OTLP (UCUM) unit, not yet cleaned: the main unit and `per_<unit>` for what follows
/// a `/`. Units in braces (annotations such as `{request}`) and `1` give none.
fn unit_words(unit: &str) -> (String, String) {
    let (main, per) = match unit.split_once('/') {
        Some((m, p)) => (m.trim(), p.trim()),
        None => (unit.trim(), ""),
    };
    let usable = |u: &str| !u.is_empty() && !u.contains(['{', '}']);
    let main = if usable(main) {
        main_unit_word(main).to_owned()
    } else {
        String::new()
    };
    let per = if usable(per) {
        format!("per_{}", per_unit_word(per))
    } else {
        String::new()
    };
    (main, per)
}

fn main_unit_word(unit: &str) -> &str {
    match unit {
        "d" => "days",
        "h" => "hours",
        "min" => "minutes",
        "s" => "seconds",
        "ms" => "milliseconds",
        "us" => "microseconds",
        "ns" => "nanoseconds",
        "By" => "bytes",
        "KiBy" => "kibibytes",
        "MiBy" => "mebibytes",
        "GiBy" => "gibibytes",
        "TiBy" => "tibibytes",
        "KBy" => "kilobytes",
        "MBy" => "megabytes",
        "GBy" => "gigabytes",
        "TBy" => "terabytes",
        "m" => "meters",
        "V" => "volts",
        "A" => "amperes",
        "J" => "joules",
        "W" => "watts",
        "g" => "grams",
        "Cel" => "celsius",
        "Hz" => "hertz",
        "1" => "",
        "%" => "percent",
        other => other,
    }
}

fn per_unit_word(unit: &str) -> &str {
    match unit {
        "s" => "second",
        "m" => "minute",
        "h" => "hour",
        "d" => "day",
        "w" => "week",
        "mo" => "month",
        "y" => "year",
        other => other,
    }
}

/// A unit word with characters outside `[a-zA-Z0-9:]` as `_`, runs of `_` as one, and no leading `_`.
fn clean_unit(word: &str) -> String {
    let mut out = String::with_capacity(word.len());
    for c in word.chars() {
        let c = if c.is_ascii_alphanumeric() || c == ':' { c } else { '_' };
        if !(c == '_' && out.ends_with('_')) {
            out.push(c);
        }
    }
    match out.strip_prefix('_') {
        Some(rest) => rest.to_owned(),
        None => out,
    }
}

#[cfg(test)]
mod tests;
