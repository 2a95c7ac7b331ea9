//! Metric metadata (a metric family's type, help and unit) and exemplars, as remote write carries them.
//!
//! The borrowed forms ([`MetadataRef`], [`ExemplarRef`]) are what the request decoders produce, pointing into a
//! request's arena; the owned [`MetricMetadata`] is what an ingester keeps after the request is gone.

use crate::{LabelRef, Sample};

/// A metric family's type, numbered as remote write 1.0's `MetricMetadata.MetricType` and 2.0's
/// `Metadata.MetricType` both number it (2.0's `UNSPECIFIED` is 1.0's `UNKNOWN`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum MetricType {
    #[default]
    Unknown,
    Counter,
    Gauge,
    Histogram,
    GaugeHistogram,
    Summary,
    Info,
    StateSet,
}

impl MetricType {
    /// The type of wire number `n`; numbers no version defines read as [`MetricType::Unknown`], as Prometheus
    /// reads them.
    pub fn from_wire(n: u64) -> Self {
        match n {
            1 => Self::Counter,
            2 => Self::Gauge,
            3 => Self::Histogram,
            4 => Self::GaugeHistogram,
            5 => Self::Summary,
            6 => Self::Info,
            7 => Self::StateSet,
            _ => Self::Unknown,
        }
    }

    /// The wire number.
    pub fn wire(self) -> i32 {
        self as i32
    }

    /// The name Prometheus' `/api/v1/metadata` answers with.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Counter => "counter",
            Self::Gauge => "gauge",
            Self::Histogram => "histogram",
            Self::GaugeHistogram => "gaugehistogram",
            Self::Summary => "summary",
            Self::Info => "info",
            Self::StateSet => "stateset",
        }
    }
}

/// Metadata of one metric family, borrowing its text (from a request arena or an owned [`MetricMetadata`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MetadataRef<'a> {
    /// The metric family name (`http_requests_total`; for a histogram, without `_bucket`).
    pub family: &'a str,
    pub kind: MetricType,
    pub help: &'a str,
    pub unit: &'a str,
}

impl MetadataRef<'_> {
    /// An owned copy.
    pub fn to_owned(&self) -> MetricMetadata {
        MetricMetadata {
            family: self.family.to_owned(),
            kind: self.kind,
            help: self.help.to_owned(),
            unit: self.unit.to_owned(),
        }
    }

    /// Bytes of text it holds.
    pub fn text_len(&self) -> usize {
        self.family.len() + self.help.len() + self.unit.len()
    }
}

/// Owned metadata of one metric family.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MetricMetadata {
    pub family: String,
    pub kind: MetricType,
    pub help: String,
    pub unit: String,
}

impl MetricMetadata {
    /// The borrowed form.
    pub fn as_ref(&self) -> MetadataRef<'_> {
        MetadataRef {
            family: &self.family,
            kind: self.kind,
            help: &self.help,
            unit: &self.unit,
        }
    }
}

/// One exemplar of a series: its own labels (`trace_id`, ...), value and timestamp in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExemplarRef<'a> {
    pub labels: &'a [LabelRef<'a>],
    pub value: f64,
    pub t: i64,
}

impl ExemplarRef<'_> {
    /// Its value and timestamp as a sample.
    pub fn sample(&self) -> Sample {
        Sample::new(self.t, self.value)
    }
}

/// The most UTF-8 characters an exemplar's label names and values may hold together (Prometheus'
/// `ExemplarMaxLabelSetLength`).
pub const EXEMPLAR_MAX_LABEL_SET_LENGTH: usize = 128;

/// Characters (not bytes) of an exemplar's label names and values together, as Prometheus counts them
/// against [`EXEMPLAR_MAX_LABEL_SET_LENGTH`].
pub fn exemplar_label_set_length(labels: &[LabelRef<'_>]) -> usize {
    labels
        .iter()
        .map(|l| l.name.chars().count() + l.value.chars().count())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_numbers_round_trip_and_unknown_numbers_read_as_unknown() {
        for n in 0..8 {
            assert_eq!(MetricType::from_wire(n).wire() as u64, n, "type {n}");
        }
        assert_eq!(MetricType::from_wire(8), MetricType::Unknown);
        assert_eq!(MetricType::from_wire(u64::MAX), MetricType::Unknown);
        assert_eq!(MetricType::GaugeHistogram.as_str(), "gaugehistogram");
    }

    #[test]
    fn label_set_length_counts_characters() {
        let l = [LabelRef {
            name: "trace_id",
            value: "é",
        }];
        assert_eq!(exemplar_label_set_length(&l), 9, "é is one character, two bytes");
    }
}
