//! Helpers shared by the head's test modules.

use super::{AppendSeries, Head, SeriesChunks};
use crate::chunkenc::decode_xor;
use heddle_model::{LabelRef, Sample};
use std::path::Path;

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

/// Appends one batch: series `i` gets `labels[i]` and `samples[i]`.
pub(super) fn append_each<'a, L: AsRef<[LabelRef<'a>]>, S: AsRef<[Sample]>>(
    head: &Head,
    labels: &'a [L],
    samples: &'a [S],
) {
    let batch: Vec<AppendSeries<'_>> = labels
        .iter()
        .zip(samples)
        .map(|(l, s)| AppendSeries {
            labels: l.as_ref(),
            samples: s.as_ref(),
            created: None,
            histograms: &[],
        })
        .collect();
    head.append(&batch).unwrap();
}

/// Copies a directory tree (a head directory, to open it twice).
pub(super) fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}
