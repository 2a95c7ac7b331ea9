//! What [`super::translate`] allocates, counted before it runs and without allocating in proportion to the
//! request: the walk below follows the translation resource by resource, metric by metric and point by
//! point, and adds up what each series it would make holds (its slot, its label list, each label's two
//! strings, its sample, exemplars and histogram), plus the most that the translation holds for a while and
//! frees (a point's label map and list, a resource's labels, a metric's name).
//!
//! Each count is an upper bound because the translation builds what it keeps at known capacities: label
//! values and `le`/`quantile` texts at their exact length ([`super::text::exact`]), label names at most
//! [`LABEL_NAME_GROWTH`] past their key, a point's labels in a list of exactly their number, and the series
//! and metadata lists allocated once at the numbers counted here. Where the translation may refuse a point
//! (an unusable attribute, a point without a value), the bound counts it anyway.

use super::names::LABEL_NAME_GROWTH;
use super::text::{float_len, value_len};
use super::{
    Data, MAX_REFUSAL_MESSAGES, METRIC_NAME, SERVICE_INSTANCE_ID, SERVICE_NAME, SERVICE_NAMESPACE, Settings,
    metric_kind, metric_name, prometheus_unit,
};
use crate::otlp::measure::ALLOCATION_OVERHEAD;
use heddle_proto::prometheus::{BucketSpan, Exemplar, Histogram, Label, MetricMetadata, Sample, TimeSeries};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::{Exemplar as OtlpExemplar, Metric};
use std::mem::size_of;

/// One node of a `BTreeMap<String, String>`, its largest kind (an internal node: eleven keys and values and
/// twelve edges, with its header).
const MAP_NODE: usize = 11 * 2 * size_of::<String>() + 12 * size_of::<usize>() + 16;
/// A refusal message, as `format!` grows it: its template and at most two quoted names (a metric's and an
/// attribute's) of at most `QUOTED_CHARS` characters each, each character escaped to at most ten bytes.
const MESSAGE: usize = 8192;
/// What naming one metric holds for a while, per byte of its name and unit (a word of each character
/// between separators, in a list of owned strings) and in all.
const NAMING_PER_BYTE: usize = 128;
const NAMING: usize = 4096;

/// What the translation of one request takes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Bound {
    /// The most bytes it holds at once.
    pub(crate) bytes: usize,
    /// The most series it makes.
    pub(crate) series: usize,
    /// The most metadata entries it makes.
    pub(crate) metadata: usize,
}

fn block(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        n.saturating_add(ALLOCATION_OVERHEAD)
    }
}

/// A `Vec` of `n` elements of `size` bytes allocated at once.
fn list(n: usize, size: usize) -> usize {
    block(n.saturating_mul(size))
}

/// A `Vec` of `n` elements of `size` bytes pushed one at a time, at its peak (two blocks while it grows).
fn grown(n: usize, size: usize) -> usize {
    if n == 0 {
        0
    } else {
        (3 * n + 1).saturating_mul(size).saturating_add(2 * ALLOCATION_OVERHEAD)
    }
}

/// A `BTreeMap<String, String>` of `n` entries (strings not included): every node but the root holds at
/// least five, and an insert may split one into a new node.
fn map(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        (n / 5 + 2).saturating_mul(block(MAP_NODE))
    }
}

/// Labels: how many, and what their strings take.
#[derive(Debug, Clone, Copy, Default)]
struct Labels {
    count: usize,
    text: usize,
}

impl Labels {
    fn add(&mut self, name: usize, value: usize) {
        self.count += 1;
        self.text = self.text.saturating_add(block(name)).saturating_add(block(value));
    }

    fn with(mut self, other: Labels) -> Labels {
        self.count += other.count;
        self.text = self.text.saturating_add(other.text);
        self
    }

    /// The list of these labels and their strings.
    fn held(self) -> usize {
        list(self.count, size_of::<Label>()).saturating_add(self.text)
    }
}

/// Attributes as `attribute_labels` makes them: a label each (collisions make fewer, joined values no longer
/// than the two labels were), and what building them holds for a while (the sorted list of attributes, the
/// map, joined values growing).
fn attributes<'a>(attrs: impl Iterator<Item = &'a KeyValue>) -> (Labels, usize) {
    let mut labels = Labels::default();
    let mut values = 0usize;
    for kv in attrs.filter(|kv| !kv.key.is_empty()) {
        let len = value_len(kv.value.as_ref());
        labels.add(kv.key.len() + LABEL_NAME_GROWTH, len);
        values = values.saturating_add(block(len + 1));
    }
    let building = grown(labels.count, size_of::<&KeyValue>())
        .saturating_add(map(labels.count))
        .saturating_add(values.saturating_mul(3));
    (labels, building)
}

/// The length of the value `value_string` gives the first attribute named `key`.
fn lookup(resource: &[KeyValue], key: &str) -> Option<usize> {
    resource
        .iter()
        .find(|kv| kv.key == key)
        .map(|kv| value_len(kv.value.as_ref()))
}

/// `job` and `instance`, and what making `job` holds for a while.
fn identity(resource: &[KeyValue]) -> (Labels, usize) {
    let mut labels = Labels::default();
    let mut building = 0;
    if let Some(name) = lookup(resource, SERVICE_NAME) {
        match lookup(resource, SERVICE_NAMESPACE) {
            Some(ns) => {
                labels.add("job".len(), ns + 1 + name);
                building = block(name).saturating_add(block(ns));
            }
            None => labels.add("job".len(), name),
        }
    }
    if let Some(instance) = lookup(resource, SERVICE_INSTANCE_ID) {
        labels.add("instance".len(), instance);
    }
    (labels, building)
}

/// What one series holds beyond its slot: its labels, one sample, its exemplars and histograms.
fn series(labels: Labels, exemplars: usize, histograms: usize) -> usize {
    labels
        .held()
        .saturating_add(list(1, size_of::<Sample>()))
        .saturating_add(exemplars)
        .saturating_add(histograms)
}

/// One exemplar's labels, as `exemplar` builds them, and its temporary list of attribute labels.
fn exemplar(e: &OtlpExemplar) -> (usize, usize) {
    let mut ids = Labels::default();
    for (name, id) in [("trace_id", &e.trace_id), ("span_id", &e.span_id)] {
        if id.iter().any(|&b| b != 0) {
            ids.add(name.len(), 2 * id.len());
        }
    }
    let mut attrs = Labels::default();
    for kv in &e.filtered_attributes {
        attrs.add(kv.key.len(), value_len(kv.value.as_ref()));
    }
    let labels = list(2 + attrs.count, size_of::<Label>())
        .saturating_add(ids.text)
        .saturating_add(attrs.text);
    (labels, list(attrs.count, size_of::<Label>()))
}

/// Exemplars of one point spread over series: their slots (each list allocated at once) and labels, and
/// what building them holds for a while.
fn exemplars(es: &[OtlpExemplar], lists: usize) -> (usize, usize) {
    let mut held = list(es.len(), size_of::<Exemplar>()).saturating_add(lists.min(es.len()) * ALLOCATION_OVERHEAD);
    let mut building = 0usize;
    for e in es {
        let (labels, temporary) = exemplar(e);
        held = held.saturating_add(labels);
        building = building.max(temporary);
    }
    (held, building)
}

/// What the walk has counted so far.
#[derive(Debug, Default)]
struct Count {
    /// Bytes kept until the translation is dropped.
    kept: usize,
    series: usize,
    metadata: usize,
    /// The most held for a while by one resource, one metric and one point (they nest).
    resource: usize,
    metric: usize,
    point: usize,
}

impl Count {
    fn keep(&mut self, n: usize) {
        self.kept = self.kept.saturating_add(n);
    }

    fn series(&mut self, bytes: usize) {
        self.series += 1;
        self.keep(bytes);
    }
}

/// What translating `req` under `settings` takes at most.
pub(crate) fn bound(req: &ExportMetricsServiceRequest, settings: Settings<'_>) -> Bound {
    let mut c = Count::default();
    for rm in &req.resource_metrics {
        let resource: &[KeyValue] = rm.resource.as_ref().map_or(&[], |r| &r.attributes);
        let (promoted, promoting) = attributes(resource.iter().filter(|kv| settings.promote.contains(&kv.key)));
        let (id, naming) = identity(resource);
        let base = promoted.with(id);
        c.resource = c.resource.max(
            base.text
                .saturating_add(map(base.count))
                .saturating_add(promoting.max(naming)),
        );
        for metric in rm.scope_metrics.iter().flat_map(|sm| &sm.metrics) {
            metric_bound(metric, base, settings, &mut c);
        }
        let identifying = [SERVICE_NAME, SERVICE_NAMESPACE, SERVICE_INSTANCE_ID];
        let rest = resource.iter().filter(|kv| !identifying.contains(&kv.key.as_str()));
        if rest.clone().next().is_some() {
            let (mut labels, building) = attributes(rest.clone());
            let (id, naming) = identity(resource);
            labels = labels.with(id);
            labels.add(METRIC_NAME.len(), "target_info".len());
            c.series(series(labels, 0, 0));
            let held = grown(rest.count(), size_of::<&KeyValue>())
                .saturating_add(building)
                .saturating_add(map(labels.count))
                .saturating_add(naming);
            c.resource = c.resource.max(held);
        }
    }
    let lists = list(c.series, size_of::<TimeSeries>())
        .saturating_add(list(c.series, size_of::<i64>()))
        .saturating_add(list(c.metadata, size_of::<MetricMetadata>()));
    let messages = (MAX_REFUSAL_MESSAGES + 1) * block(MESSAGE) + grown(MAX_REFUSAL_MESSAGES, size_of::<String>());
    let bytes = c
        .kept
        .saturating_add(lists)
        .saturating_add(messages)
        .saturating_add(c.resource)
        .saturating_add(c.metric)
        .saturating_add(c.point);
    Bound {
        bytes,
        series: c.series,
        metadata: c.metadata,
    }
}

fn metric_bound(metric: &Metric, base: Labels, settings: Settings<'_>, c: &mut Count) {
    let Some(data) = &metric.data else { return };
    if metric.name.is_empty() {
        return;
    }
    let Ok((kind, _)) = metric_kind(data) else { return };
    // Naming is not in proportion to the points: it is done here as the translation does it.
    let Some(name) = metric_name(&metric.name, &metric.unit, kind, settings.strategy) else {
        return;
    };
    let unit = prometheus_unit(&metric.unit, settings.strategy.escapes());
    c.metadata += 1;
    c.keep(
        block(name.len())
            .saturating_add(block(metric.description.len()))
            .saturating_add(block(unit.capacity())),
    );
    let naming = (metric.name.len() + metric.unit.len())
        .saturating_mul(NAMING_PER_BYTE)
        .saturating_add(NAMING);
    c.metric = c.metric.max(block(name.capacity()).saturating_add(naming));
    let name = name.len();
    // A point's labels: its attributes, the resource's, and `__name__`; without `__name__`'s value, which
    // each series of a histogram or summary point has a suffixed copy of.
    let point = |attrs: &[KeyValue], c: &mut Count| {
        let (labels, building) = attributes(attrs.iter());
        let mut labels = labels.with(base);
        labels.add(METRIC_NAME.len(), 0);
        c.point = c.point.max(building.saturating_add(map(labels.count)));
        labels
    };
    let named = |labels: Labels, suffix: &str| Labels {
        count: labels.count,
        text: labels.text.saturating_add(block(name + suffix.len())),
    };
    let extra = |labels: Labels, key: &str, value: usize| {
        let mut labels = labels;
        labels.add(key.len(), value);
        labels
    };
    match data {
        Data::Gauge(g) => number_points(&g.data_points, &point, named, c),
        Data::Sum(s) => number_points(&s.data_points, &point, named, c),
        Data::Histogram(h) => {
            for p in &h.data_points {
                if !p.bucket_counts.is_empty() && p.bucket_counts.len() != p.explicit_bounds.len() + 1 {
                    continue;
                }
                let labels = point(&p.attributes, c);
                let buckets = p.explicit_bounds.len().min(p.bucket_counts.len());
                // The point's list is held while its series are made, each with a copy of every label.
                let e = p.exemplars.len();
                let placing = list(buckets, size_of::<f64>())
                    .saturating_add(list(e, size_of::<Option<usize>>()))
                    .saturating_add(list(e, size_of::<(usize, &OtlpExemplar)>()));
                let (exemplars, building) = exemplars(&p.exemplars, buckets + 1);
                c.point = c.point.max(
                    named(labels, "")
                        .held()
                        .saturating_add(placing)
                        .saturating_add(building),
                );
                c.keep(exemplars);
                for bound in &p.explicit_bounds[..buckets] {
                    c.series(series(named(extra(labels, "le", float_len(*bound)), "_bucket"), 0, 0));
                }
                c.series(series(named(extra(labels, "le", "+Inf".len()), "_bucket"), 0, 0));
                if p.sum.is_some() {
                    c.series(series(named(labels, "_sum"), 0, 0));
                }
                c.series(series(named(labels, "_count"), 0, 0));
            }
        }
        Data::ExponentialHistogram(h) => {
            for p in &h.data_points {
                let labels = point(&p.attributes, c);
                let layout = |counts: usize| {
                    if counts == 0 {
                        0
                    } else {
                        list(counts, size_of::<i64>()).saturating_add(grown(counts + 1, size_of::<BucketSpan>()))
                    }
                };
                let histogram = list(1, size_of::<Histogram>())
                    .saturating_add(layout(p.positive.as_ref().map_or(0, |b| b.bucket_counts.len())))
                    .saturating_add(layout(p.negative.as_ref().map_or(0, |b| b.bucket_counts.len())));
                let (exemplars, building) = exemplars(&p.exemplars, 1);
                c.point = c.point.max(building);
                c.series(series(named(labels, ""), exemplars, histogram));
            }
        }
        Data::Summary(s) => {
            for p in &s.data_points {
                let labels = point(&p.attributes, c);
                c.point = c.point.max(named(labels, "").held());
                for q in &p.quantile_values {
                    c.series(series(
                        named(extra(labels, "quantile", float_len(q.quantile)), ""),
                        0,
                        0,
                    ));
                }
                c.series(series(named(labels, "_sum"), 0, 0));
                c.series(series(named(labels, "_count"), 0, 0));
            }
        }
    }
}

fn number_points(
    points: &[opentelemetry_proto::tonic::metrics::v1::NumberDataPoint],
    point: &impl Fn(&[KeyValue], &mut Count) -> Labels,
    named: impl Fn(Labels, &str) -> Labels,
    c: &mut Count,
) {
    for p in points {
        let labels = point(&p.attributes, c);
        let (exemplars, building) = exemplars(&p.exemplars, 1);
        c.point = c.point.max(building);
        c.series(series(named(labels, ""), exemplars, 0));
    }
}

#[cfg(test)]
mod tests;
