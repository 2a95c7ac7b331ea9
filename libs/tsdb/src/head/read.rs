//! Queries on the head: series with their chunks, series labels, label names and values.
//!
//! A query takes the index lock shared while it selects series (appends of existing series do not take it
//! exclusively), then each selected series' own lock just long enough to copy its chunk references.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use heddle_model::{Labels, Matcher};

use super::series::MemSeries;
use super::{Head, lock, read};
use crate::chunkenc::Encoding;

/// One encoded chunk of a series.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkData {
    /// Timestamp of its first sample.
    pub min_time: i64,
    /// Timestamp of its last sample.
    pub max_time: i64,
    /// How `data` is encoded: XOR floats, integer or float native histograms.
    pub encoding: Encoding,
    /// Chunk bytes in Prometheus' format, header included; decode with [`crate::chunkenc::XorIter`],
    /// [`crate::chunkenc::HistogramIter`] or [`crate::chunkenc::FloatHistogramIter`] by `encoding`.
    pub data: Bytes,
}

/// A selected series and its chunks that overlap the queried range, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesChunks {
    /// The series' labels.
    pub labels: Labels,
    /// Chunks overlapping the range. They may hold samples outside it: callers trim.
    pub chunks: Vec<ChunkData>,
}

/// Counters of a head.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeadStats {
    /// Series in memory.
    pub series: u64,
    /// Samples stored since the head was opened, replayed ones included.
    pub samples_appended: u64,
    /// Oldest sample timestamp stored since opening.
    pub min_time: Option<i64>,
    /// Newest sample timestamp stored since opening.
    pub max_time: Option<i64>,
}

impl Head {
    /// Series matching all `matchers` with samples in [mint, maxt], sorted by labels, with their chunks that
    /// overlap the range. The open chunk is included as a copy of its current bytes.
    pub fn select(&self, mint: i64, maxt: i64, matchers: &[Matcher]) -> Vec<SeriesChunks> {
        let selected = read(&self.index).select(matchers);
        let with_chunks: Vec<(Arc<MemSeries>, Vec<ChunkData>)> = selected
            .into_iter()
            .filter_map(|s| {
                let chunks = lock(&s.state).chunks(mint, maxt, &self.chunks);
                (!chunks.is_empty()).then_some((s, chunks))
            })
            .collect();
        let mut out: Vec<SeriesChunks> = {
            let index = read(&self.index);
            with_chunks
                .into_iter()
                .map(|(s, chunks)| SeriesChunks {
                    labels: index.labels_of(&s),
                    chunks,
                })
                .collect()
        };
        out.sort_unstable_by(|a, b| a.labels.cmp(&b.labels));
        out
    }

    /// Labels of the series matching all `matchers` with samples in [mint, maxt], sorted.
    pub fn series(&self, mint: i64, maxt: i64, matchers: &[Matcher]) -> Vec<Labels> {
        let selected = self.select_in_range(mint, maxt, matchers);
        let mut out: Vec<Labels> = {
            let index = read(&self.index);
            selected.iter().map(|s| index.labels_of(s)).collect()
        };
        out.sort_unstable();
        out
    }

    /// Label names, sorted. Without matchers: every name in the head, if the head has samples in
    /// [mint, maxt] (as Prometheus' head index does). With matchers: the names of the matching series
    /// that have samples in the range.
    pub fn label_names(&self, mint: i64, maxt: i64, matchers: &[Matcher]) -> Vec<String> {
        if matchers.is_empty() {
            if !self.overlaps(mint, maxt) {
                return Vec::new();
            }
            let index = read(&self.index);
            let mut names: Vec<String> = index
                .postings
                .names()
                .map(|n| index.symbols.resolve(n).to_owned())
                .collect();
            names.sort_unstable();
            return names;
        }
        let selected = self.select_in_range(mint, maxt, matchers);
        let index = read(&self.index);
        let ids: BTreeSet<u32> = selected.iter().flat_map(|s| s.labels.iter().map(|(n, _)| n)).collect();
        let names: BTreeSet<&str> = ids.into_iter().map(|n| index.symbols.resolve(n)).collect();
        names.into_iter().map(str::to_owned).collect()
    }

    /// Values of label `name`, sorted, under the same rules as [`Head::label_names`].
    pub fn label_values(&self, name: &str, mint: i64, maxt: i64, matchers: &[Matcher]) -> Vec<String> {
        if matchers.is_empty() {
            if !self.overlaps(mint, maxt) {
                return Vec::new();
            }
            let index = read(&self.index);
            let Some(name) = index.symbols.id(name) else {
                return Vec::new();
            };
            let mut values: Vec<String> = index
                .postings
                .values(name)
                .map(|(v, _)| index.symbols.resolve(v).to_owned())
                .collect();
            values.sort_unstable();
            return values;
        }
        let selected = self.select_in_range(mint, maxt, matchers);
        let index = read(&self.index);
        let Some(name) = index.symbols.id(name) else {
            return Vec::new();
        };
        let values: BTreeSet<&str> = selected
            .iter()
            .filter_map(|s| s.value_of(name))
            .map(|v| index.symbols.resolve(v))
            .collect();
        values.into_iter().map(str::to_owned).collect()
    }

    /// Counters: series, samples, time range.
    pub fn stats(&self) -> HeadStats {
        let min = self.min_time.load(Ordering::Relaxed);
        let max = self.max_time.load(Ordering::Relaxed);
        let has = min <= max;
        HeadStats {
            series: self.num_series.load(Ordering::Relaxed),
            samples_appended: self.samples_appended.load(Ordering::Relaxed),
            min_time: has.then_some(min),
            max_time: has.then_some(max),
        }
    }

    fn overlaps(&self, mint: i64, maxt: i64) -> bool {
        let s = self.stats();
        matches!((s.min_time, s.max_time), (Some(lo), Some(hi)) if lo <= maxt && hi >= mint)
    }

    fn select_in_range(&self, mint: i64, maxt: i64, matchers: &[Matcher]) -> Vec<Arc<MemSeries>> {
        let mut selected = read(&self.index).select(matchers);
        selected.retain(|s| lock(&s.state).overlaps(mint, maxt));
        selected
    }
}
