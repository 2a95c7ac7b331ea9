//! The `tombstones` file of a block (Prometheus `tsdb/tombstones/tombstones.go`):
//!
//! ```text
//! tombstones = magic u32 (0x0130BA30) | version u8 (1) | (uvarint ref, varint mint, varint maxt)* | crc u32
//! ```
//!
//! The CRC covers the stones only (not the version byte). Heddle never deletes series, so it writes the
//! file empty: 9 bytes.

/// Name of the file inside a block.
pub(crate) const TOMBSTONES_FILENAME: &str = "tombstones";
/// Magic number opening the file.
pub(crate) const MAGIC: u32 = 0x0130_BA30;

/// The bytes of a tombstones file without tombstones.
pub(crate) fn empty() -> Vec<u8> {
    let mut out = MAGIC.to_be_bytes().to_vec();
    out.push(1);
    out.extend_from_slice(&crc32c::crc32c(&[]).to_be_bytes());
    out
}

/// Number of deletion intervals in a tombstones file.
#[cfg(test)]
pub(crate) fn count(bytes: &[u8]) -> Result<usize, String> {
    if bytes.len() < 9 {
        return Err(format!("tombstones file of {} bytes is too short", bytes.len()));
    }
    use super::encoding::{Dec, check_crc};
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    let mut d = Dec::new(body);
    let magic = d.be32()?;
    if magic != MAGIC {
        return Err(format!("bad magic {magic:#010x}, want {MAGIC:#010x}"));
    }
    let version = d.u8()?;
    if version != 1 {
        return Err(format!("unsupported tombstones version {version}"));
    }
    check_crc(&body[5..], crc)?;
    let mut n = 0;
    while d.len() > 0 {
        d.uvarint()?;
        d.varint()?;
        d.varint()?;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_what_prometheus_writes() {
        assert_eq!(empty(), vec![0x01, 0x30, 0xBA, 0x30, 1, 0, 0, 0, 0]);
        assert_eq!(count(&empty()), Ok(0));
        let mut bad = empty();
        bad[0] = 9;
        assert!(count(&bad).is_err());
    }
}
