//! Prometheus-format write-ahead log (`tsdb/wlog`), byte for byte.
//!
//! Owns the byte log: numbered segment files of 32 KiB pages holding CRC32C-checked, optionally
//! snappy-compressed record fragments ([`segment`] documents the layout); the writer ([`Wal`]), readers that
//! report each record's position ([`Reader`], [`SegmentReader`]), and [`replay`], which reads a WAL at startup and
//! repairs a torn or corrupt tail; and [`checkpoint`]s, which fold old segments into `checkpoint.N`.
//!
//! It deliberately knows nothing of what records mean: series and sample encoding lives in `heddle-tsdb`
//! (`record`), as does deciding which records a checkpoint keeps and when to take one.

pub mod checkpoint;
mod error;
pub mod file;
mod reader;
mod replay;
pub mod segment;
mod writer;

pub use checkpoint::{
    CheckpointStats, Keep, checkpoint_path, delete_checkpoints_before, delete_segments_before, last_checkpoint,
    list_checkpoints, write_checkpoint,
};
pub use error::WalError;
pub use reader::{Position, Reader, Record, SegmentReader};
pub use replay::{Corruption, ReplayReport, repair, replay, replay_from};
pub use segment::{DEFAULT_SEGMENT_SIZE, HEADER_SIZE, PAGE_SIZE, list_segments, segment_path, segment_range};
pub use writer::{Wal, WalOptions};

#[cfg(test)]
mod tests {
    /// The writer and readers move into `spawn_blocking` and across threads.
    #[test]
    fn types_are_send() {
        fn send<T: Send>() {}
        send::<crate::Wal>();
        send::<crate::Reader>();
        send::<crate::SegmentReader<std::fs::File>>();
        send::<crate::WalError>();
    }
}
