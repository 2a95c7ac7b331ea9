//! Token generation and the tokens file that keeps an ingester's tokens across restarts.
//!
//! File format (dskit's): `{"tokens":[12,345,...]}`, tokens ascending. Written to a temporary file in the
//! same directory, fsynced, then renamed over the old one, so a crash leaves either the old or the new file.

use crate::error::RingError;
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;

#[derive(Serialize, Deserialize)]
struct TokensFile {
    tokens: Vec<u32>,
}

/// Picks `n` random tokens that are in neither `taken` nor each other, sorted ascending.
pub fn generate_tokens(n: usize, taken: &BTreeSet<u32>, rng: &mut impl Rng) -> Result<Vec<u32>, RingError> {
    let available = (1u64 << 32) - taken.len() as u64;
    if n as u64 > available {
        return Err(RingError::TokenSpaceExhausted { wanted: n, available });
    }
    let mut picked = BTreeSet::new();
    // Each draw succeeds with probability available/2^32 minus what we picked; with the ring's sizes
    // (thousands of tokens in 4 billion) collisions are rare, so this loop ends after ~n draws.
    while picked.len() < n {
        let t: u32 = rng.random();
        if !taken.contains(&t) {
            picked.insert(t);
        }
    }
    Ok(picked.into_iter().collect())
}

/// Reads a tokens file. `Ok(None)` when it does not exist (a first start).
pub fn load_tokens(path: &Path) -> Result<Option<Vec<u32>>, RingError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(RingError::TokensFileIo {
                path: path.to_owned(),
                source,
            });
        }
    };
    let file: TokensFile = serde_json::from_slice(&bytes).map_err(|e| RingError::TokensFileFormat {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    let mut tokens = file.tokens;
    tokens.sort_unstable();
    tokens.dedup();
    Ok(Some(tokens))
}

/// Writes `tokens` to `path` atomically (temp file, fsync, rename, fsync of the directory).
pub fn store_tokens(path: &Path, tokens: &[u32]) -> Result<(), RingError> {
    let io_err = |source| RingError::TokensFileIo {
        path: path.to_owned(),
        source,
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir).map_err(io_err)?;
    let body = serde_json::to_vec(&TokensFile {
        tokens: tokens.to_vec(),
    })
    .map_err(|e| RingError::TokensFileFormat {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    let mut tmp_name = path.file_name().unwrap_or_default().to_owned();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    {
        let mut f = std::fs::File::create(&tmp).map_err(io_err)?;
        f.write_all(&body).map_err(io_err)?;
        f.sync_all().map_err(io_err)?;
    }
    std::fs::rename(&tmp, path).map_err(io_err)?;
    // Make the rename durable; failing to open a directory for sync is not fatal on every platform.
    if let Ok(d) = std::fs::File::open(dir) {
        d.sync_all().map_err(io_err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;

    #[test]
    fn generated_tokens_avoid_taken_ones_and_are_sorted() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let taken: BTreeSet<u32> = generate_tokens(1000, &BTreeSet::new(), &mut rng)
            .unwrap()
            .into_iter()
            .collect();
        let fresh = generate_tokens(1000, &taken, &mut rng).unwrap();
        assert_eq!(fresh.len(), 1000);
        assert!(fresh.windows(2).all(|w| w[0] < w[1]), "sorted and distinct");
        assert!(fresh.iter().all(|t| !taken.contains(t)));
    }

    #[test]
    fn missing_file_is_none_and_garbage_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.json");
        assert_eq!(load_tokens(&path).unwrap(), None);
        std::fs::write(&path, b"{\"tokens\": \"nope\"}").unwrap();
        let err = load_tokens(&path).unwrap_err().to_string();
        assert!(err.contains("not a tokens file"), "{err}");
    }

    #[test]
    fn file_is_dskit_shaped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/tokens.json");
        store_tokens(&path, &[3, 1000, 4_000_000_000]).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            r#"{"tokens":[3,1000,4000000000]}"#
        );
        // dskit writes the same shape with other whitespace; we read it.
        std::fs::write(&path, "{ \"tokens\": [ 9, 2 ] }\n").unwrap();
        assert_eq!(load_tokens(&path).unwrap(), Some(vec![2, 9]));
    }

    proptest! {
        #[test]
        fn store_then_load_round_trips(mut tokens in proptest::collection::vec(any::<u32>(), 0..300)) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("tokens.json");
            tokens.sort_unstable();
            tokens.dedup();
            store_tokens(&path, &tokens).unwrap();
            prop_assert_eq!(load_tokens(&path).unwrap(), Some(tokens));
        }
    }
}
