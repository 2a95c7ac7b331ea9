//! Config errors.

/// Why a configuration could not be loaded. Every variant names the YAML key or flag that is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("config file {path} is not valid YAML: {source}")]
    Yaml { path: String, source: serde_norway::Error },
    #[error("invalid configuration: {0}")]
    Invalid(String),
    #[error("invalid value {value:?} for flag --{flag} (YAML key {key}): {reason}")]
    BadFlag {
        flag: String,
        key: String,
        value: String,
        reason: String,
    },
}

/// An invalid value of one config key, naming its dotted YAML key: what each component's `validate()` returns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid `{key}`: {reason}")]
pub struct InvalidKey {
    /// Dotted YAML key, e.g. `limits.ingestion_rate`.
    pub key: &'static str,
    pub reason: String,
}
