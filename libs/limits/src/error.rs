//! Why limits or the runtime config file were refused.

/// Why a runtime config file was refused (the previous overrides stay in force).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeConfigError {
    #[error("cannot read runtime config file {path}: {detail}")]
    Read { path: String, detail: String },
    #[error("runtime config is not valid YAML of the form `overrides: {{<tenant>: {{<limit>: <value>}}}}`: {detail}")]
    Parse { detail: String },
    #[error("runtime config overrides of tenant {tenant} are invalid: {detail}")]
    Tenant { tenant: String, detail: String },
    #[error("runtime config file is empty (a partial write?); write `overrides: {{}}` to remove every override")]
    Empty,
}
