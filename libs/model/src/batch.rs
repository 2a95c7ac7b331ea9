//! [`SeriesBatch`]: series with their samples, native histogram samples and exemplars, and metric metadata, owned in a few flat buffers, for handing a validated write from
//! one stage to another in the same process without encoding it.
//!
//! A remote-write request decoded into an arena borrows from its body and dies with it; a batch owns copies of
//! what it holds, so it can cross a task boundary. It costs one buffer of label text, one of label spans and one
//! of samples per batch, not an allocation per series, and reading it back ([`SeriesBatch::label_refs`],
//! [`SeriesBatch::series`]) gives borrowed [`LabelRef`]s again without parsing or checking anything: the text is
//! a `String` (UTF-8 by construction) and every span starts and ends where a pushed string did.

use crate::{ExemplarRef, HistogramSample, LabelRef, MetadataRef, MetricMetadata, Sample};
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
    /// Per series: where its exemplars end in `exemplars`.
    series_exemplars: Vec<u32>,
    /// Per exemplar: where its labels end in `exemplar_labels`, and its value and timestamp.
    exemplars: Vec<(u32, Sample)>,
    /// Exemplar labels and their text, as `labels` and `text`.
    exemplar_labels: Vec<(u32, u32)>,
    exemplar_text: String,
    /// Metric metadata, not tied to a series.
    metadata: Vec<MetricMetadata>,
    /// Created timestamps, by series index in increasing order: only the few series that have one.
    created: Vec<(u32, i64)>,
    /// Native histogram samples, by series index in increasing order (timestamp order within a series):
    /// only the series that have some.
    histograms: Vec<(u32, HistogramSample)>,
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
            series_exemplars: Vec::with_capacity(series),
            ..Self::default()
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
        self.push_with_exemplars(labels, samples, [])
    }

    /// [`SeriesBatch::push`] for a series that carries exemplars too.
    pub fn push_with_exemplars<'l, 'e>(
        &mut self,
        labels: impl IntoIterator<Item = LabelRef<'l>>,
        samples: impl IntoIterator<Item = Sample>,
        exemplars: impl IntoIterator<Item = ExemplarRef<'e>>,
    ) -> Result<(), BatchFull> {
        let lens = (
            self.text.len(),
            self.labels.len(),
            self.samples.len(),
            self.exemplars.len(),
            self.exemplar_labels.len(),
            self.exemplar_text.len(),
        );
        let ok = self.push_parts(labels, samples, exemplars).is_some();
        if !ok {
            self.text.truncate(lens.0);
            self.labels.truncate(lens.1);
            self.samples.truncate(lens.2);
            self.exemplars.truncate(lens.3);
            self.exemplar_labels.truncate(lens.4);
            self.exemplar_text.truncate(lens.5);
            return Err(BatchFull);
        }
        Ok(())
    }

    fn push_labels<'l>(
        text: &mut String,
        out: &mut Vec<(u32, u32)>,
        labels: impl IntoIterator<Item = LabelRef<'l>>,
    ) -> Option<()> {
        for l in labels {
            text.push_str(l.name);
            let name_end = u32::try_from(text.len()).ok()?;
            text.push_str(l.value);
            let value_end = u32::try_from(text.len()).ok()?;
            out.push((name_end, value_end));
        }
        Some(())
    }

    fn push_parts<'l, 'e>(
        &mut self,
        labels: impl IntoIterator<Item = LabelRef<'l>>,
        samples: impl IntoIterator<Item = Sample>,
        exemplars: impl IntoIterator<Item = ExemplarRef<'e>>,
    ) -> Option<()> {
        Self::push_labels(&mut self.text, &mut self.labels, labels)?;
        self.samples.extend(samples);
        for e in exemplars {
            Self::push_labels(
                &mut self.exemplar_text,
                &mut self.exemplar_labels,
                e.labels.iter().copied(),
            )?;
            let end = u32::try_from(self.exemplar_labels.len()).ok()?;
            self.exemplars.push((end, e.sample()));
        }
        let entry = (
            u32::try_from(self.labels.len()).ok()?,
            u32::try_from(self.samples.len()).ok()?,
        );
        let exemplars_end = u32::try_from(self.exemplars.len()).ok()?;
        self.series.push(entry);
        self.series_exemplars.push(exemplars_end);
        Some(())
    }

    /// Gives the series pushed last the created timestamp `t` (when its counter started, ms).
    pub fn set_created(&mut self, t: i64) {
        if let Some(last) = self.series.len().checked_sub(1).and_then(|i| u32::try_from(i).ok()) {
            match self.created.last_mut() {
                Some(entry) if entry.0 == last => entry.1 = t,
                _ => self.created.push((last, t)),
            }
        }
    }

    /// Gives the series pushed last the native histogram samples `histograms` (in timestamp order), after any
    /// it was given before.
    pub fn push_histograms(&mut self, histograms: impl IntoIterator<Item = HistogramSample>) {
        if let Some(last) = self.series.len().checked_sub(1).and_then(|i| u32::try_from(i).ok()) {
            self.histograms.extend(histograms.into_iter().map(|h| (last, h)));
        }
    }

    /// The native histogram samples of series `index`, in timestamp order.
    pub fn histograms(&self, index: usize) -> impl ExactSizeIterator<Item = &HistogramSample> + '_ {
        let index = u32::try_from(index).unwrap_or(u32::MAX);
        let start = self.histograms.partition_point(|(i, _)| *i < index);
        let end = self.histograms.partition_point(|(i, _)| *i <= index);
        self.histograms[start..end].iter().map(|(_, h)| h)
    }

    /// Number of native histogram samples, all series together.
    pub fn histograms_len(&self) -> usize {
        self.histograms.len()
    }

    /// The created timestamp of series `index`, if it was given one.
    pub fn created(&self, index: usize) -> Option<i64> {
        let index = u32::try_from(index).ok()?;
        let at = self.created.binary_search_by_key(&index, |&(i, _)| i).ok()?;
        Some(self.created[at].1)
    }

    /// Adds a metric metadata entry (copied).
    pub fn push_metadata(&mut self, metadata: MetadataRef<'_>) {
        self.metadata.push(metadata.to_owned());
    }

    /// The metadata entries, in the order pushed.
    pub fn metadata(&self) -> &[MetricMetadata] {
        &self.metadata
    }

    /// Number of exemplars, all series together.
    pub fn exemplars_len(&self) -> usize {
        self.exemplars.len()
    }

    /// Number of series.
    pub fn len(&self) -> usize {
        self.series.len()
    }

    /// True when the batch holds no series and no metadata.
    pub fn is_empty(&self) -> bool {
        self.series.is_empty() && self.metadata.is_empty()
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
            + self.series_exemplars.len() * size_of::<u32>()
            + self.exemplars.len() * size_of::<(u32, Sample)>()
            + self.exemplar_labels.len() * size_of::<(u32, u32)>()
            + self.exemplar_text.len()
            + self.metadata.iter().map(|m| m.as_ref().text_len()).sum::<usize>()
            + self.metadata.len() * size_of::<MetricMetadata>()
            + self.created.len() * size_of::<(u32, i64)>()
            + self.histograms.iter().map(|(_, h)| histogram_bytes(h)).sum::<usize>()
    }

    /// Every label of every series, in order, borrowing the batch's text; slice it with the label ranges of
    /// [`SeriesBatch::series`].
    pub fn label_refs(&self) -> Vec<LabelRef<'_>> {
        refs(&self.text, &self.labels)
    }

    /// Every label of every exemplar, in order; slice it with the ranges of [`SeriesBatch::exemplars`].
    pub fn exemplar_label_refs(&self) -> Vec<LabelRef<'_>> {
        refs(&self.exemplar_text, &self.exemplar_labels)
    }

    /// Per exemplar, in order: the index of its series, the range of its labels in
    /// [`SeriesBatch::exemplar_label_refs`], and its value and timestamp.
    pub fn exemplars(&self) -> impl Iterator<Item = (usize, Range<usize>, Sample)> + '_ {
        let mut labels_start = 0usize;
        let mut series = 0usize;
        self.exemplars
            .iter()
            .enumerate()
            .map(move |(i, &(labels_end, sample))| {
                while self.series_exemplars[series] as usize <= i {
                    series += 1;
                }
                let labels = labels_start..labels_end as usize;
                labels_start = labels_end as usize;
                (series, labels, sample)
            })
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

/// Bytes a histogram sample holds: its fixed part and its spans, buckets and bounds.
fn histogram_bytes(h: &HistogramSample) -> usize {
    use crate::HistogramValue;
    let vectors = match &h.value {
        HistogramValue::Int(h) => {
            (h.positive_spans.len() + h.negative_spans.len()) * size_of::<crate::Span>()
                + (h.positive_buckets.len() + h.negative_buckets.len()) * size_of::<i64>()
                + h.custom_values.len() * size_of::<f64>()
        }
        HistogramValue::Float(h) => {
            (h.positive_spans.len() + h.negative_spans.len()) * size_of::<crate::Span>()
                + (h.positive_buckets.len() + h.negative_buckets.len() + h.custom_values.len()) * size_of::<f64>()
        }
    };
    size_of::<(u32, HistogramSample)>() + vectors
}

/// The labels of `spans` over `text`, each starting where the one before it ended.
fn refs<'t>(text: &'t str, spans: &[(u32, u32)]) -> Vec<LabelRef<'t>> {
    let mut start = 0usize;
    spans
        .iter()
        .map(|&(name_end, value_end)| {
            let (name_end, value_end) = (name_end as usize, value_end as usize);
            // Every offset is where a pushed `&str` ended, so on a char boundary: never panics.
            let l = LabelRef {
                name: &text[start..name_end],
                value: &text[name_end..value_end],
            };
            start = value_end;
            l
        })
        .collect()
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
        assert_eq!(
            b.bytes(),
            "__name__upjobnäive ✓a".len() + 4 * 8 + 3 * 8 + 3 * 16 + 3 * 4,
            "text, labels, series, samples, exemplar ends"
        );
    }

    #[test]
    fn histograms_belong_to_the_series_they_were_pushed_on() {
        use crate::{Histogram, HistogramValue};
        let h = |t| HistogramSample {
            t,
            value: HistogramValue::Int(Histogram::default()),
        };
        let mut b = SeriesBatch::default();
        b.push_histograms([h(1)]);
        assert_eq!(b.histograms_len(), 0, "no series yet: nothing to give them to");
        for i in 0..4 {
            b.push([l("__name__", "h")], []).unwrap();
            if i % 2 == 1 {
                b.push_histograms([h(10 * i), h(10 * i + 1)]);
            }
        }
        let got: Vec<Vec<i64>> = (0..5).map(|i| b.histograms(i).map(|h| h.t).collect()).collect();
        assert_eq!(got, [vec![], vec![10, 11], vec![], vec![30, 31], vec![]]);
        assert_eq!(b.histograms_len(), 4);
    }

    #[test]
    fn created_timestamps_belong_to_the_series_they_were_set_on() {
        let mut b = SeriesBatch::default();
        b.set_created(5);
        assert_eq!(b.created(0), None, "no series yet: nothing to set");
        for i in 0..4 {
            b.push([l("__name__", "c")], [Sample::new(10, 1.0)]).unwrap();
            if i % 2 == 1 {
                b.set_created(i);
            }
        }
        b.set_created(-7);
        let got: Vec<Option<i64>> = (0..5).map(|i| b.created(i)).collect();
        assert_eq!(got, [None, Some(1), None, Some(-7), None], "the last set wins");
    }

    #[test]
    fn exemplars_and_metadata_come_back_as_pushed() {
        let mut b = SeriesBatch::default();
        let trace = [l("trace_id", "abc")];
        b.push([l("__name__", "a")], [Sample::new(1, 1.0)]).unwrap();
        b.push_with_exemplars(
            [l("__name__", "b")],
            [],
            [
                ExemplarRef {
                    labels: &trace,
                    value: 2.0,
                    t: 5,
                },
                ExemplarRef {
                    labels: &[],
                    value: 3.0,
                    t: 6,
                },
            ],
        )
        .unwrap();
        b.push([l("__name__", "c")], []).unwrap();
        b.push_metadata(MetadataRef {
            family: "a",
            kind: crate::MetricType::Counter,
            help: "h",
            unit: "",
        });
        let refs = b.exemplar_label_refs();
        let got: Vec<(usize, Vec<LabelRef<'_>>, i64)> = b
            .exemplars()
            .map(|(s, r, sample)| (s, refs[r].to_vec(), sample.t))
            .collect();
        assert_eq!(got, vec![(1, trace.to_vec(), 5), (1, vec![], 6)]);
        assert_eq!(b.exemplars_len(), 2);
        assert_eq!(b.metadata()[0].help, "h");
        assert_eq!(b.label_refs()[1], l("__name__", "b"), "series labels unaffected");
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
