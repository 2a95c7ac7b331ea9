//! Helpers shared by the head's test modules.

use super::{Head, SeriesChunks};
use crate::chunkenc::decode_xor;

/// Every sample of every series in the head, as (labels text, [(t, value bits)]), sorted by labels.
pub(super) fn all_samples(head: &Head) -> Vec<(String, Vec<(i64, u64)>)> {
    samples_of(head.select(i64::MIN, i64::MAX, &[]))
}

/// The samples of selected series (a head's or a block's), as [`all_samples`] lists them.
pub(super) fn samples_of(series: Vec<SeriesChunks>) -> Vec<(String, Vec<(i64, u64)>)> {
    series
        .into_iter()
        .map(|s| {
            let v = s
                .chunks
                .iter()
                .flat_map(|c| decode_xor(&c.data).unwrap())
                .map(|x| (x.t, x.v.to_bits()))
                .collect();
            (s.labels.to_string(), v)
        })
        .collect()
}
