//! Markers the compactor leaves beside blocks, in Thanos' and Mimir's formats, so their tools read a Heddle
//! bucket and Heddle reads theirs.
//!
//! `<tenant>/<ULID>/deletion-mark.json` (Thanos `metadata.DeletionMark`): the block is replaced (its samples are
//! in a compacted block) or past retention, and is deleted once the mark is older than the compactor's
//! deletion delay. Until then queriers may still read it; after their own, shorter delay they stop.
//! ```json
//! {"id": "<ULID>", "deletion_time": <unix seconds>, "version": 1}
//! ```

use serde::{Deserialize, Serialize};

/// Name of a block's deletion mark inside its directory.
pub const DELETION_MARK_FILENAME: &str = "deletion-mark.json";
/// The only deletion mark version Thanos and Mimir write.
pub const DELETION_MARK_VERSION: u32 = 1;

/// `deletion-mark.json` of a block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletionMark {
    /// The block's ULID.
    pub id: String,
    /// When the block was marked, in seconds since the Unix epoch.
    pub deletion_time: i64,
    /// Always [`DELETION_MARK_VERSION`].
    pub version: u32,
}

impl DeletionMark {
    /// A mark for block `ulid` made at `now_secs`.
    pub fn new(ulid: &str, now_secs: i64) -> Self {
        Self {
            id: ulid.to_owned(),
            deletion_time: now_secs,
            version: DELETION_MARK_VERSION,
        }
    }

    /// Whether the mark is at least `delay` old at `now_secs`.
    pub fn older_than(&self, delay: std::time::Duration, now_secs: i64) -> bool {
        now_secs.saturating_sub(self.deletion_time) >= i64::try_from(delay.as_secs()).unwrap_or(i64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_thanos_writes() {
        let thanos = br#"{"id":"01FXW5ZRJ8M0G0AW1Z2QK8VRGZ","deletion_time":1646400000,"version":1}"#;
        let m: DeletionMark = serde_json::from_slice(thanos).unwrap();
        assert_eq!(m, DeletionMark::new("01FXW5ZRJ8M0G0AW1Z2QK8VRGZ", 1_646_400_000));
        let back: serde_json::Value = serde_json::to_value(&m).unwrap();
        assert_eq!(back["version"], 1);
        assert_eq!(back["deletion_time"], 1_646_400_000);
    }

    #[test]
    fn age_against_a_delay() {
        let m = DeletionMark::new("x", 1000);
        let hour = std::time::Duration::from_secs(3600);
        assert!(!m.older_than(hour, 1000 + 3599), "a second short");
        assert!(m.older_than(hour, 1000 + 3600), "exactly the delay");
        assert!(m.older_than(std::time::Duration::ZERO, 1000), "no delay");
        assert!(!m.older_than(hour, 0), "a mark from the future is young");
    }
}
