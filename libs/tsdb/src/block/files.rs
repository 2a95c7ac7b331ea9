//! Where a block reader gets its bytes: a local block directory, or objects in a bucket read by range.
//!
//! The reader asks for byte ranges of the block's files by their name inside the block (`index`,
//! `chunks/000001`, `tombstones`), so the same reader serves a local directory (memory-mapped) and a bucket
//! (ranged GETs, implemented in `heddle-bucket`). Calls are blocking: run them off the async runtime.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use memmap2::Mmap;

use crate::error::TsdbError;

/// The files of one block, read by range.
pub trait BlockFiles: Send + Sync + std::fmt::Debug {
    /// Size in bytes of file `name` (a path relative to the block directory, e.g. `chunks/000001`).
    fn size(&self, name: &str) -> Result<u64, TsdbError>;
    /// Bytes `range` of file `name`. A range past the end of the file is an error naming the file.
    fn read(&self, name: &str, range: Range<u64>) -> Result<Bytes, TsdbError>;
}

/// The files of a block directory on local disk, each memory-mapped on first use and kept mapped.
///
/// Returned bytes borrow the map (no copy) and keep it alive. Block files are immutable once the block is
/// renamed into place, which is what makes the maps sound (see `map_readonly`).
#[derive(Debug)]
pub struct LocalBlockFiles {
    dir: PathBuf,
    maps: Mutex<HashMap<String, Arc<Mmap>>>,
}

impl LocalBlockFiles {
    /// The files of block directory `dir` (nothing is opened yet).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            maps: Mutex::new(HashMap::new()),
        }
    }

    /// The block directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn map(&self, name: &str) -> Result<Arc<Mmap>, TsdbError> {
        let path = self.dir.join(name);
        // Only plain relative names: a name from a corrupt index must not reach outside the block.
        let plain = Path::new(name)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !plain || name.is_empty() {
            return Err(TsdbError::Corruption {
                what: path.display().to_string(),
                reason: format!("{name:?} is not a file name inside the block"),
            });
        }
        let mut maps = self.maps.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(m) = maps.get(name) {
            return Ok(Arc::clone(m));
        }
        let io = |source| TsdbError::Io {
            path: path.clone(),
            source,
        };
        let file = std::fs::File::open(&path).map_err(io)?;
        let map = Arc::new(map_readonly(&file).map_err(io)?);
        maps.insert(name.to_owned(), Arc::clone(&map));
        Ok(map)
    }
}

impl BlockFiles for LocalBlockFiles {
    fn size(&self, name: &str) -> Result<u64, TsdbError> {
        Ok(self.map(name)?.len() as u64)
    }

    fn read(&self, name: &str, range: Range<u64>) -> Result<Bytes, TsdbError> {
        let map = self.map(name)?;
        let len = map.len() as u64;
        if range.start > range.end || range.end > len {
            return Err(TsdbError::Corruption {
                what: self.dir.join(name).display().to_string(),
                reason: format!("range {range:?} is outside the file of {len} bytes"),
            });
        }
        Ok(Bytes::from_owner(MapSlice {
            map,
            range: range.start as usize..range.end as usize,
        }))
    }
}

/// A range of a map, owned by `Bytes`.
struct MapSlice {
    map: Arc<Mmap>,
    range: Range<usize>,
}

impl AsRef<[u8]> for MapSlice {
    fn as_ref(&self) -> &[u8] {
        &self.map[self.range.clone()]
    }
}

// SAFETY: the maps are read-only and only of files of a finished block. Heddle never modifies such a file:
// a block is written under a temporary name and renamed into place complete, and afterwards only deleted as a
// whole (a deleted file stays valid while mapped). Another process modifying a block's files is outside this
// contract.
#[allow(unsafe_code)]
fn map_readonly(file: &std::fs::File) -> std::io::Result<Mmap> {
    unsafe { Mmap::map(file) }
}
