//! Per-tenant limits: what one tenant may send and store, read by every role that enforces a limit.
//!
//! Owns the [`Limits`] struct (`limits:` in YAML, the defaults of every tenant) with its defaults, flag table
//! and validation, and the runtime config file ([`Overrides`]: per-tenant overrides reloaded without a
//! restart, with their metrics). The distributor reads the ingestion rate, label and timestamp limits, the
//! name validation scheme, the OTLP translation settings and the HA settings; the ingester reads the series
//! limits. It does not enforce anything itself: token buckets, validation and series counting stay with the
//! role that applies them.

mod error;
mod limits;
mod names;
mod overrides;

pub use error::RuntimeConfigError;
pub use limits::{LIMITS_FLAGS, Limits, MAX_NATIVE_HISTOGRAM_BUCKETS_CEILING};
pub use names::{NameValidationScheme, OtelTranslationStrategy};
pub use overrides::{Overrides, RUNTIME_CONFIG_FLAGS, RuntimeConfigConfig};
