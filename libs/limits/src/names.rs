//! Per-tenant settings about metric and label names: which names are valid ([`NameValidationScheme`]) and
//! how OTLP names become Prometheus names ([`OtelTranslationStrategy`]). Values and spellings are Mimir's
//! (`-validation.name-validation-scheme`, `-distributor.otel-translation-strategy`), which are Prometheus 3's.

use heddle_model::{is_valid_label_name, is_valid_metric_name};
use serde::{Deserialize, Serialize};

/// Which metric and label names the distributor accepts (Prometheus 3's `metric_name_validation_scheme`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NameValidationScheme {
    /// Prometheus 2's rules: metric names `[a-zA-Z_:][a-zA-Z0-9_:]*`, label names `[a-zA-Z_][a-zA-Z0-9_]*`.
    #[default]
    Legacy,
    /// Any non-empty UTF-8 name (a name that arrives as a Rust `str` is UTF-8 already); PromQL reads such
    /// names quoted: `{"http.server.duration", "service.name"="api"}`.
    Utf8,
}

impl NameValidationScheme {
    /// Whether `name` is a valid metric name under this scheme.
    pub fn is_valid_metric_name(self, name: &str) -> bool {
        match self {
            Self::Legacy => is_valid_metric_name(name),
            Self::Utf8 => !name.is_empty(),
        }
    }

    /// Whether `name` is a valid label name under this scheme.
    pub fn is_valid_label_name(self, name: &str) -> bool {
        match self {
            Self::Legacy => is_valid_label_name(name),
            Self::Utf8 => !name.is_empty(),
        }
    }

    /// The rule a name must follow, for messages.
    pub fn metric_name_rule(self) -> &'static str {
        match self {
            Self::Legacy => "metric names must match [a-zA-Z_:][a-zA-Z0-9_:]*",
            Self::Utf8 => "metric names must be non-empty UTF-8",
        }
    }

    /// The rule a label name must follow, for messages.
    pub fn label_name_rule(self) -> &'static str {
        match self {
            Self::Legacy => "label names must match [a-zA-Z_][a-zA-Z0-9_]*",
            Self::Utf8 => "label names must be non-empty UTF-8",
        }
    }
}

/// How the OTLP endpoint turns OTLP metric and attribute names into Prometheus names (Prometheus 3's
/// `otlp.translation_strategy`, the `otlptranslator` package's options).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum OtelTranslationStrategy {
    /// Characters outside the legacy rules become `_`; unit and type suffixes are added
    /// (`http.server.request.duration` -> `http_server_request_duration_seconds`). Prometheus' default.
    #[default]
    UnderscoreEscapingWithSuffixes,
    /// Characters outside the legacy rules become `_`; no suffixes (`http_server_request_duration`).
    UnderscoreEscapingWithoutSuffixes,
    /// Names are kept as sent, UTF-8 and all; unit and type suffixes are added
    /// (`http.server.request.duration_seconds`). Needs the `utf8` name validation scheme.
    #[serde(rename = "NoUTF8EscapingWithSuffixes")]
    NoUtf8EscapingWithSuffixes,
    /// Names are kept exactly as sent, without suffixes. Prometheus calls it experimental: a metric sent
    /// in two units becomes one series. Needs the `utf8` name validation scheme.
    NoTranslation,
}

impl OtelTranslationStrategy {
    /// Whether names are escaped to the legacy character set.
    pub fn escapes(self) -> bool {
        matches!(
            self,
            Self::UnderscoreEscapingWithSuffixes | Self::UnderscoreEscapingWithoutSuffixes
        )
    }

    /// Whether unit and type suffixes (`_seconds`, `_total`, `_ratio`) are added to metric names.
    pub fn adds_suffixes(self) -> bool {
        matches!(
            self,
            Self::UnderscoreEscapingWithSuffixes | Self::NoUtf8EscapingWithSuffixes
        )
    }

    /// The name users write in YAML and flags.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnderscoreEscapingWithSuffixes => "UnderscoreEscapingWithSuffixes",
            Self::UnderscoreEscapingWithoutSuffixes => "UnderscoreEscapingWithoutSuffixes",
            Self::NoUtf8EscapingWithSuffixes => "NoUTF8EscapingWithSuffixes",
            Self::NoTranslation => "NoTranslation",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_accept_what_prometheus_accepts() {
        for (name, legacy_label, legacy_metric) in [
            ("up", true, true),
            ("a:b", false, true),
            ("service.name", false, false),
            ("9x", false, false),
            ("é", false, false),
            ("\u{0}", false, false),
        ] {
            assert_eq!(
                NameValidationScheme::Legacy.is_valid_label_name(name),
                legacy_label,
                "{name:?}"
            );
            assert_eq!(
                NameValidationScheme::Legacy.is_valid_metric_name(name),
                legacy_metric,
                "{name:?}"
            );
            assert!(NameValidationScheme::Utf8.is_valid_label_name(name), "{name:?}");
            assert!(NameValidationScheme::Utf8.is_valid_metric_name(name), "{name:?}");
        }
        assert!(!NameValidationScheme::Utf8.is_valid_label_name(""));
        assert!(!NameValidationScheme::Utf8.is_valid_metric_name(""));
    }

    #[test]
    fn spellings_are_prometheus_and_mimir_ones() {
        for s in [
            OtelTranslationStrategy::UnderscoreEscapingWithSuffixes,
            OtelTranslationStrategy::UnderscoreEscapingWithoutSuffixes,
            OtelTranslationStrategy::NoUtf8EscapingWithSuffixes,
            OtelTranslationStrategy::NoTranslation,
        ] {
            let yaml = serde_norway::to_string(&s).unwrap();
            assert_eq!(yaml.trim(), s.as_str());
            assert_eq!(
                serde_norway::from_str::<OtelTranslationStrategy>(s.as_str()).unwrap(),
                s
            );
        }
        let scheme: NameValidationScheme = serde_norway::from_str("utf8").unwrap();
        assert_eq!(scheme, NameValidationScheme::Utf8);
        assert!(serde_norway::from_str::<NameValidationScheme>("UTF8").is_err());
        assert!(serde_norway::from_str::<OtelTranslationStrategy>("NoUtf8EscapingWithSuffixes").is_err());
    }
}
