//! The compactor (`--target=compactor`, and part of the single process): per tenant, merges the blocks the
//! replicas shipped for one range into one block with their samples de-duplicated, then compacts blocks into
//! longer ranges, marks what it replaced for deletion and deletes it after a delay, applies the tenant's
//! bucket retention, and writes the tenant's bucket index for queriers.
//!
//! Owns the planner (which blocks go together), the merge of N blocks into one, the compaction loop and the
//! tenant lock that keeps compactors off each other's tenants. It does not own block formats (`heddle-tsdb`),
//! the bucket layout and its markers (`heddle-bucket`), or the retention values (`heddle-limits`).

mod compactor;
mod config;
mod error;
mod lock;
pub mod merge;
mod metrics;
pub mod planner;

pub use compactor::{Compactor, RunReport};
pub use config::{COMPACTOR_FLAGS, CompactorConfig};
pub use error::CompactorError;
pub use lock::LOCK_DIR;
