//! The configuration plumbing every Heddle component shares, and nothing more.
//!
//! Owns the flag table ([`FlagSpec`]: one flag per YAML key), loading a config from defaults, a YAML file and
//! flags ([`load`]), the generated configuration reference, and duration parsing/formatting in Prometheus'
//! notation (`90s`, `2h`, `1h30m`). Each library declares its own config struct and flag table with these
//! types, so a library needs this small crate rather than the server scaffolding.
//! Does not own: any component's config struct or defaults, validation of values (each config's `validate()`),
//! or the command-line entry point (the binary).

mod duration;
mod error;
mod flags;

pub use duration::{format_duration, parse_duration, serde_duration};
pub use error::{ConfigError, InvalidKey};
pub use flags::{ConfigSource, FlagKind, FlagSpec, LoadError, load, render_reference, uncovered_keys};
