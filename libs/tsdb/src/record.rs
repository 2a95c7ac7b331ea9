//! WAL record encoding (being written).
