//! [`SeriesBatch`]: series and their samples, owned in a few flat buffers, for handing a validated write from
//! one stage to another in the same process without encoding it.
//!
//! A remote-write request decoded into an arena borrows from its body and dies with it; a batch owns copies of
//! what it holds, so it can cross a task boundary. It costs one buffer of label text, one of label spans and one
//! of samples per batch, not an allocation per series, and reading it back ([`SeriesBatch::label_refs`],
//! [`SeriesBatch::series`]) gives borrowed [`LabelRef`]s again without parsing or checking anything: the text is
//! a `String` (UTF-8 by construction) and every span starts and ends where a pushed string did.

use crate::{LabelRef, Sample};
use std::mem::size_of;
use std::ops::Range;

/// Series (labels in the order given, and samples) owned in flat buffers; see the module docs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SeriesBatch {
    /// Every label name and value, back to back.
    text: String,
    /// Per label: where its name ends and where its value ends in `text` (each starts where the one before
    /// it ended).
    labels: Vec<(u32, u32)>,
    /// Per series: where its labels and its samples end (each starts where the previous series' ended).
    series: Vec<(u32, u32)>,
    samples: Vec<Sample>,
}

/// Why a series could not be added to a [`SeriesBatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchFull;

impl std::fmt::Display for BatchFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a series batch holds at most 4 GiB of label text and 2^32 labels or samples")
    }
}

impl std::error::Error for BatchFull {}

impl SeriesBatch {
    /// An empty batch with room for `series` series of `labels` labels and `samples` samples in all, and
    /// `text` bytes of label names and values.
    pub fn with_capacity(series: usize, labels: usize, samples: usize, text: usize) -> Self {
        Self {
            text: String::with_capacity(text),
            labels: Vec::with_capacity(labels),
            series: Vec::with_capacity(series),
            samples: Vec::with_capacity(samples),
        }
    }

    /// Appends a series. Offsets are 32-bit, so a batch holds at most 4 GiB of text and 2^32 labels and
    /// samples; past that nothing is added and [`BatchFull`] is returned (a request that large was refused
    /// long before).
    pub fn push<'l>(
        &mut self,
        labels: impl IntoIterator<Item = LabelRef<'l>>,
        samples: impl IntoIterator<Item = Sample>,
    ) -> Result<(), BatchFull> {
        let (text, nlabels, nsamples) = (self.text.len(), self.labels.len(), self.samples.len());
        let ok = self.push_parts(labels, samples).is_some();
        if !ok {
            self.text.truncate(text);
            self.labels.truncate(nlabels);
            self.samples.truncate(nsamples);
            return Err(BatchFull);
        }
        Ok(())
    }

    fn push_parts<'l>(
        &mut self,
        labels: impl IntoIterator<Item = LabelRef<'l>>,
        samples: impl IntoIterator<Item = Sample>,
    ) -> Option<()> {
        for l in labels {
            self.text.push_str(l.name);
            let name_end = u32::try_from(self.text.len()).ok()?;
            self.text.push_str(l.value);
            let value_end = u32::try_from(self.text.len()).ok()?;
            self.labels.push((name_end, value_end));
        }
        self.samples.extend(samples);
        let entry = (
            u32::try_from(self.labels.len()).ok()?,
            u32::try_from(self.samples.len()).ok()?,
        );
        self.series.push(entry);
        Some(())
    }

    /// Number of series.
    pub fn len(&self) -> usize {
        self.series.len()
    }

    /// True when the batch holds no series.
    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }

    /// Number of labels, all series together.
    pub fn labels_len(&self) -> usize {
        self.labels.len()
    }

    /// Number of samples, all series together.
    pub fn samples_len(&self) -> usize {
        self.samples.len()
    }

    /// Bytes the batch holds in its buffers (their used length), for memory accounting.
    pub fn bytes(&self) -> usize {
        self.text.len()
            + self.labels.len() * size_of::<(u32, u32)>()
            + self.series.len() * size_of::<(u32, u32)>()
            + self.samples.len() * size_of::<Sample>()
    }

    /// Every label of every series, in order, borrowing the batch's text; slice it with the label ranges of
    /// [`SeriesBatch::series`].
    pub fn label_refs(&self) -> Vec<LabelRef<'_>> {
        let mut start = 0usize;
        self.labels
            .iter()
            .map(|&(name_end, value_end)| {
                let (name_end, value_end) = (name_end as usize, value_end as usize);
                // Every offset is where a pushed `&str` ended, so on a char boundary: never panics.
                let l = LabelRef {
                    name: &self.text[start..name_end],
                    value: &self.text[name_end..value_end],
                };
                start = value_end;
                l
            })
            .collect()
    }

    /// Per series, in order: the range of its labels in [`SeriesBatch::label_refs`] and its samples.
    pub fn series(&self) -> impl ExactSizeIterator<Item = (Range<usize>, &[Sample])> + '_ {
        let mut labels_start = 0usize;
        let mut samples_start = 0usize;
        self.series.iter().map(move |&(labels_end, samples_end)| {
            let labels = labels_start..labels_end as usize;
            let samples = &self.samples[samples_start..samples_end as usize];
            labels_start = labels_end as usize;
            samples_start = samples_end as usize;
            (labels, samples)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn l<'a>(name: &'a str, value: &'a str) -> LabelRef<'a> {
        LabelRef { name, value }
    }

    #[test]
    fn series_come_back_as_pushed() {
        let mut b = SeriesBatch::default();
        b.push(
            [l("__name__", "up"), l("job", "näive ✓")],
            [Sample::new(1, 1.0), Sample::new(2, f64::NAN)],
        )
        .unwrap();
        b.push([], []).unwrap();
        b.push([l("", ""), l("a", "")], [Sample::new(3, -0.0)]).unwrap();
        assert_eq!((b.len(), b.samples_len()), (3, 3));
        let refs = b.label_refs();
        let got: Vec<(Vec<LabelRef<'_>>, Vec<u64>)> = b
            .series()
            .map(|(r, s)| (refs[r].to_vec(), s.iter().map(|s| s.v.to_bits()).collect()))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    vec![l("__name__", "up"), l("job", "näive ✓")],
                    vec![1f64.to_bits(), f64::NAN.to_bits()]
                ),
                (vec![], vec![]),
                (vec![l("", ""), l("a", "")], vec![(-0.0f64).to_bits()]),
            ]
        );
        assert_eq!(b.bytes(), "__name__upjobnäive ✓a".len() + 4 * 8 + 3 * 8 + 3 * 16);
    }

    proptest! {
        #[test]
        fn any_series_round_trip(
            series in proptest::collection::vec(
                (
                    proptest::collection::vec((".{0,8}", ".{0,8}"), 0..6),
                    proptest::collection::vec((any::<i64>(), any::<u64>()), 0..4),
                ),
                0..12,
            )
        ) {
            let mut b = SeriesBatch::default();
            for (labels, samples) in &series {
                b.push(
                    labels.iter().map(|(n, v)| l(n, v)),
                    samples.iter().map(|&(t, bits)| Sample::new(t, f64::from_bits(bits))),
                ).unwrap();
            }
            let refs = b.label_refs();
            prop_assert_eq!(b.len(), series.len());
            for ((r, samples), (want_labels, want_samples)) in b.series().zip(&series) {
                let got: Vec<(&str, &str)> = refs[r].iter().map(|l| (l.name, l.value)).collect();
                let want: Vec<(&str, &str)> = want_labels.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
                prop_assert_eq!(got, want);
                let got: Vec<(i64, u64)> = samples.iter().map(|s| (s.t, s.v.to_bits())).collect();
                prop_assert_eq!(&got, want_samples);
            }
        }
    }
}
