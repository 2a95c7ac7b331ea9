//! Label sets.

use std::fmt;

/// The label holding the metric name.
pub const METRIC_NAME: &str = "__name__";

/// Why a label set was refused at construction.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelsError {
    #[error("label names are not sorted: {prev:?} comes before {next:?}")]
    Unsorted { prev: String, next: String },
    #[error("duplicate label name {0:?}")]
    Duplicate(String),
    #[error("empty label name")]
    EmptyName,
}

/// An owned label.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Label {
    pub name: String,
    pub value: String,
}

/// A borrowed label, typically pointing into a request arena or a symbol table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LabelRef<'a> {
    pub name: &'a str,
    pub value: &'a str,
}

/// An owned label set, sorted by name with unique, non-empty names (checked at construction).
/// Labels with an empty value are dropped: in Prometheus an empty value means "label absent".
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Labels(Vec<Label>);

impl Labels {
    /// Builds a label set from pairs that must already be sorted by name and unique.
    pub fn from_sorted<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self, LabelsError> {
        let mut out: Vec<Label> = Vec::new();
        for (name, value) in pairs {
            if name.is_empty() {
                return Err(LabelsError::EmptyName);
            }
            if let Some(prev) = out.last() {
                match prev.name.as_str().cmp(name) {
                    std::cmp::Ordering::Less => {}
                    std::cmp::Ordering::Equal => return Err(LabelsError::Duplicate(name.to_owned())),
                    std::cmp::Ordering::Greater => {
                        return Err(LabelsError::Unsorted {
                            prev: prev.name.clone(),
                            next: name.to_owned(),
                        });
                    }
                }
            }
            if value.is_empty() {
                continue;
            }
            out.push(Label {
                name: name.to_owned(),
                value: value.to_owned(),
            });
        }
        Ok(Self(out))
    }

    /// Builds a label set from pairs in any order; fails only on duplicate or empty names.
    pub fn from_unsorted<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self, LabelsError> {
        let mut v: Vec<(&str, &str)> = pairs.into_iter().collect();
        v.sort_unstable_by(|a, b| a.0.cmp(b.0));
        Self::from_sorted(v)
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .binary_search_by(|l| l.name.as_str().cmp(name))
            .ok()
            .map(|i| self.0[i].value.as_str())
    }

    /// The metric name (`__name__`), if any.
    pub fn metric_name(&self) -> Option<&str> {
        self.get(METRIC_NAME)
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = LabelRef<'_>> + '_ {
        self.0.iter().map(|l| LabelRef {
            name: &l.name,
            value: &l.value,
        })
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn as_slice(&self) -> &[Label] {
        &self.0
    }

    /// The labels for which `keep(name)` holds, still sorted (PromQL's `by`, `on` and dropping `__name__`).
    pub fn filtered(&self, mut keep: impl FnMut(&str) -> bool) -> Labels {
        Labels(self.0.iter().filter(|l| keep(&l.name)).cloned().collect())
    }

    /// This set without the label `name`, reusing its storage (PromQL dropping `__name__`).
    pub fn without(mut self, name: &str) -> Labels {
        if let Ok(i) = self.0.binary_search_by(|l| l.name.as_str().cmp(name)) {
            self.0.remove(i);
        }
        self
    }

    /// This set with `name` set to `value`, or removed when `value` is empty (PromQL's `label_replace`,
    /// `count_values`, `group_left` copying a label).
    pub fn with(&self, name: &str, value: &str) -> Result<Labels, LabelsError> {
        if name.is_empty() {
            return Err(LabelsError::EmptyName);
        }
        let mut out = self.0.clone();
        match out.binary_search_by(|l| l.name.as_str().cmp(name)) {
            Ok(i) if value.is_empty() => {
                out.remove(i);
            }
            Ok(i) => value.clone_into(&mut out[i].value),
            Err(_) if value.is_empty() => {}
            Err(i) => out.insert(
                i,
                Label {
                    name: name.to_owned(),
                    value: value.to_owned(),
                },
            ),
        }
        Ok(Labels(out))
    }
}

/// Longest label name or value quoted whole in a message; longer ones are cut (a hostile series must not make
/// a huge error message or log line).
const MAX_QUOTED: usize = 128;
/// Past this many bytes a message's series text lists no more labels, only how many are left.
const MAX_SERIES_TEXT: usize = 1024;

/// A series in Prometheus' text form (`{__name__="up", job="a"}`, labels in the given order, empty values
/// left out) for messages and logs, bounded: names and values over 128 bytes are cut and marked, and past
/// 1 KiB the rest of the labels are only counted.
pub fn series_text(labels: &[LabelRef<'_>]) -> String {
    use std::fmt::Write as _;
    let mut out = String::from("{");
    let kept: Vec<&LabelRef<'_>> = labels.iter().filter(|l| !l.value.is_empty()).collect();
    for (i, l) in kept.iter().enumerate() {
        if out.len() > MAX_SERIES_TEXT {
            let _ = write!(out, ", …{} more labels", kept.len() - i);
            break;
        }
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{}={:?}", quoted(l.name), quoted(l.value));
    }
    out.push('}');
    out
}

/// `s` cut to at most 128 bytes on a character boundary, marked with `…` when cut: a label name or value
/// quoted in a message.
pub fn quoted(s: &str) -> String {
    if s.len() <= MAX_QUOTED {
        return s.to_owned();
    }
    let mut end = MAX_QUOTED;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

impl fmt::Display for Labels {
    /// Prometheus' text form: `{__name__="up", job="a"}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, l) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}={:?}", l.name, l.value)?;
        }
        f.write_str("}")
    }
}

impl fmt::Debug for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Prometheus' legacy label-name rule: `[a-zA-Z_][a-zA-Z0-9_]*`.
#[inline]
pub fn is_valid_label_name(name: &str) -> bool {
    is_valid_name(name.as_bytes(), LABEL_FIRST, LABEL_REST)
}

/// Prometheus' legacy metric-name rule: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
#[inline]
pub fn is_valid_metric_name(name: &str) -> bool {
    is_valid_name(name.as_bytes(), METRIC_FIRST, METRIC_REST)
}

/// Bits of [`NAME_BYTES`]: which positions of which name a byte may take.
const LABEL_FIRST: u8 = 1;
const LABEL_REST: u8 = 2;
const METRIC_FIRST: u8 = 4;
const METRIC_REST: u8 = 8;

/// Per byte, the [`LABEL_FIRST`]... bits it satisfies: one table load per byte instead of range compares.
static NAME_BYTES: [u8; 256] = name_bytes();

const fn name_bytes() -> [u8; 256] {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        table[i] = if b.is_ascii_alphabetic() || b == b'_' {
            LABEL_FIRST | LABEL_REST | METRIC_FIRST | METRIC_REST
        } else if b.is_ascii_digit() {
            LABEL_REST | METRIC_REST
        } else if b == b':' {
            METRIC_FIRST | METRIC_REST
        } else {
            0
        };
        i += 1;
    }
    table
}

/// A non-empty name whose first byte has bit `first` and every other byte bit `rest`. The rest are folded
/// without a branch per byte (names are short; a bad byte is rare).
#[inline]
fn is_valid_name(name: &[u8], first: u8, rest: u8) -> bool {
    let Some((&head, tail)) = name.split_first() else {
        return false;
    };
    let mut all = NAME_BYTES[usize::from(head)] & first != 0;
    let mut classes = rest;
    for &b in tail {
        classes &= NAME_BYTES[usize::from(b)];
    }
    all &= classes & rest != 0;
    all
}

#[cfg(test)]
mod tests {
    fn refs_of<'a>(pairs: &[(&'a str, &'a str)]) -> Vec<LabelRef<'a>> {
        pairs.iter().map(|&(name, value)| LabelRef { name, value }).collect()
    }

    #[test]
    fn series_text_is_bounded_and_skips_empty_values() {
        assert_eq!(
            series_text(&refs_of(&[("__name__", "up"), ("e", ""), ("job", "a\"b")])),
            r#"{__name__="up", job="a\"b"}"#
        );
        let long = "é".repeat(200);
        let text = series_text(&refs_of(&[("__name__", &long)]));
        assert!(text.len() < 200, "{text}");
        assert!(text.ends_with("…\"}"), "{text}");
        let many: Vec<(String, String)> = (0..500).map(|i| (format!("l{i:03}"), "v".repeat(20))).collect();
        let refs: Vec<LabelRef<'_>> = many.iter().map(|(n, v)| LabelRef { name: n, value: v }).collect();
        let text = series_text(&refs);
        assert!(text.len() < MAX_SERIES_TEXT + 200, "{}", text.len());
        assert!(text.contains("more labels"), "{text}");
    }

    use super::*;

    #[test]
    fn with_and_filtered_keep_the_set_sorted_and_drop_empty_values() {
        let base = Labels::from_sorted([("__name__", "up"), ("job", "a")]).unwrap();
        let set = base.with("instance", "x").unwrap().with("zone", "z").unwrap();
        assert_eq!(set.to_string(), r#"{__name__="up", instance="x", job="a", zone="z"}"#);
        assert_eq!(set.with("job", "b").unwrap().get("job"), Some("b"));
        assert_eq!(set.with("job", "").unwrap().get("job"), None);
        assert_eq!(base.with("absent", "").unwrap(), base);
        assert!(base.with("", "v").is_err());
        let kept = set.filtered(|n| n != METRIC_NAME && n != "zone");
        assert_eq!(kept.to_string(), r#"{instance="x", job="a"}"#);
        assert_eq!(
            set.clone().without("zone").without("absent"),
            set.filtered(|n| n != "zone")
        );
    }

    #[test]
    fn construction_checks_order_and_uniqueness() {
        assert!(Labels::from_sorted([("__name__", "up"), ("job", "a")]).is_ok());
        assert_eq!(
            Labels::from_sorted([("job", "a"), ("__name__", "up")]),
            Err(LabelsError::Unsorted {
                prev: "job".into(),
                next: "__name__".into()
            })
        );
        assert_eq!(
            Labels::from_sorted([("a", "1"), ("a", "2")]),
            Err(LabelsError::Duplicate("a".into()))
        );
        assert_eq!(Labels::from_sorted([("", "1")]), Err(LabelsError::EmptyName));
        let l = Labels::from_unsorted([("job", "a"), ("__name__", "up"), ("empty", "")]).unwrap();
        assert_eq!(l.to_string(), r#"{__name__="up", job="a"}"#);
        assert_eq!(l.metric_name(), Some("up"));
        assert_eq!(l.get("empty"), None);
    }

    #[test]
    fn name_rules() {
        for (name, label_ok, metric_ok) in [
            ("up", true, true),
            ("_x9", true, true),
            ("a:b", false, true),
            ("9a", false, false),
            ("", false, false),
            ("a-b", false, false),
        ] {
            assert_eq!(is_valid_label_name(name), label_ok, "label {name:?}");
            assert_eq!(is_valid_metric_name(name), metric_ok, "metric {name:?}");
        }
    }

    #[test]
    fn name_rules_match_their_regular_expressions_for_every_byte() {
        let label = regex::Regex::new("^[a-zA-Z_][a-zA-Z0-9_]*$").unwrap();
        let metric = regex::Regex::new("^[a-zA-Z_:][a-zA-Z0-9_:]*$").unwrap();
        // Every byte first, every byte later (including non-ASCII, as whole UTF-8 strings).
        for b in 0u8..=255 {
            for name in [vec![b], vec![b'a', b], vec![b'a', b, b'z'], vec![b; 9]] {
                let Ok(name) = String::from_utf8(name) else {
                    continue;
                };
                assert_eq!(is_valid_label_name(&name), label.is_match(&name), "label {name:?}");
                assert_eq!(is_valid_metric_name(&name), metric.is_match(&name), "metric {name:?}");
            }
        }
        for name in ["é", "aé", "a\u{0}", "node_cpu_seconds_total", "a:b:c", ":", "_", "A9_:"] {
            assert_eq!(is_valid_label_name(name), label.is_match(name), "label {name:?}");
            assert_eq!(is_valid_metric_name(name), metric.is_match(name), "metric {name:?}");
        }
    }
}
