//! OTLP metrics to Prometheus series, by the rules of Prometheus' OTLP receiver (the `otlptranslator`
//! package) under the tenant's translation strategy (`limits.otel_translation_strategy`).
//!
//! - Metric names, `UnderscoreEscapingWithSuffixes` (the default): split on every character outside
//!   `[a-zA-Z0-9:]` and joined with `_` (so runs of invalid characters and underscores become one `_`), the
//!   unit appended as suffix words (`s` -> `seconds`, `By` -> `bytes`, `m/s` -> `meters_per_second`, units in
//!   braces dropped), `total` for monotonic sums, `ratio` for gauges of unit `1`, and a leading digit prefixed
//!   with `_`. A suffix word already in the name is not added twice.
//! - `UnderscoreEscapingWithoutSuffixes`: each run of characters outside `[a-zA-Z0-9:_]` becomes one `_`
//!   (underscores are kept as they are), a leading digit gets `_`; no suffixes.
//! - `NoUTF8EscapingWithSuffixes`: the name as sent, then the same suffixes as words joined with `_`
//!   (`http.server.request.duration` of unit `s` -> `http.server.request.duration_seconds`): a name already
//!   ending in the unit word gets no second one, and one ending in `total` or `ratio` has it moved to the end.
//! - `NoTranslation`: the name as sent, no suffixes.
//! - An escaped name left with no character but `_` (`...`), or empty, is refused with its points.
//! - Label names, escaping strategies: characters outside `[a-zA-Z0-9_]` become `_` (each one), a leading
//!   digit gets `key_` and a single leading `_` gets `key` (`__x` is kept); attributes that collide after that
//!   are joined with `;` in the order of their original keys; a name left with nothing but `_` refuses the
//!   point. The UTF-8 strategies keep attribute keys as label names.
//! - `job` = `service.namespace/service.name` (or `service.name`), `instance` = `service.instance.id`; the other
//!   resource attributes go to a `target_info` gauge of value 1 at the latest timestamp of the resource's points;
//!   the tenant's `promote_otel_resource_attributes` are also copied onto every series. These names are the
//!   same under every strategy; so are the `_bucket`, `_sum` and `_count` series and the `le` and `quantile`
//!   labels of histograms and summaries, which are part of the Prometheus type, not suffixes.
//! - Gauges and non-monotonic sums are gauges, monotonic cumulative sums counters; explicit-bucket histograms
//!   become cumulative `_bucket{le}` series (the `+Inf` bucket is the count), `_sum` and `_count`; summaries
//!   `{quantile}`, `_sum` and `_count`. A point flagged `NoRecordedValue` becomes the staleness marker.
//! - Exponential histograms become native histograms ([`exponential`]), one series per point.
//! - Refused, counted in the response's `partial_success`: delta temporality (Prometheus has no delta type,
//!   and its OTLP receiver refuses it unless an experimental feature is on).
//! - The start time of a cumulative sum's, histogram's or summary's point is the created timestamp of each
//!   series it makes ([`Translated::created`]); the endpoint forwards it when the tenant has OTLP
//!   created-timestamp zero ingestion on. Gauges and non-monotonic sums have none.
//! - Each translated metric gets one metadata entry: its Prometheus name as family, its description as help,
//!   its unit as the suffix words (`seconds`, `bytes_per_second`), its type from the kind above.
//! - A point's exemplars ride on its series (a histogram's on the first bucket whose bound holds the value):
//!   `trace_id` and `span_id` as hex labels, then the exemplar's filtered attributes unless they would take
//!   the labels past Prometheus' 128 characters.
//!
//! Each Prometheus sample is its own series entry in the produced `WriteRequest`, so a series the write path
//! refuses is exactly one refused sample.
//!
//! The labels of a resource and of a point are copied onto every series the point makes (a histogram of a
//! thousand buckets makes a thousand copies), so a small request can translate into gigabytes. [`bound`]
//! counts, without allocating, what [`translate`] will allocate at its peak, and the endpoint holds that in
//! the in-flight budget before translating. For the count to be exact, every string the translation keeps
//! is built at its final capacity (see [`text`]), and the series and metadata lists are allocated once at
//! the sizes [`bound`] counted.

use heddle_limits::OtelTranslationStrategy;
use heddle_model::{EXEMPLAR_MAX_LABEL_SET_LENGTH, MetricType, STALE_NAN_BITS};
use heddle_proto::prometheus::{Exemplar, Label, MetricMetadata, Sample, TimeSeries, WriteRequest};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, DataPointFlags, Exemplar as OtlpExemplar, HistogramDataPoint, NumberDataPoint,
    SummaryDataPoint, exemplar, metric::Data, number_data_point,
};
use std::collections::BTreeMap;
use text::{exact, float_text, value_string};

mod bound;
mod exponential;
mod names;
mod text;

pub(crate) use bound::{Bound, bound};
pub(crate) use names::{Kind, label_name, metric_name, prometheus_unit};

const SERVICE_NAME: &str = "service.name";
const SERVICE_NAMESPACE: &str = "service.namespace";
const SERVICE_INSTANCE_ID: &str = "service.instance.id";

/// Most distinct refusal messages kept for `partial_success.error_message`; the rest are only counted.
const MAX_REFUSAL_MESSAGES: usize = 8;
/// Characters of a name or key a refusal message quotes; a longer one is cut (its start names it well
/// enough, and the message stays small).
const QUOTED_CHARS: usize = 128;

/// The translation of one export request.
#[derive(Debug, Default)]
pub(crate) struct Translated {
    pub(crate) request: WriteRequest,
    /// OTLP data points refused by the translation (not sent on).
    pub(crate) refused_points: i64,
    /// Why, one message per kind of refusal and metric, at most [`MAX_REFUSAL_MESSAGES`].
    pub(crate) messages: Vec<String>,
    /// Per series of `request`: its created timestamp (the point's start time, ms), 0 for none.
    pub(crate) created: Vec<i64>,
    /// The created timestamp of the series being pushed now.
    start: i64,
    /// Bytes of label text and samples the series hold so far, and the most they may: the labels of a
    /// resource are copied onto every series of each of its points, so a small request can expand a
    /// thousandfold. Translation stops at the first series past the limit.
    bytes: usize,
    limit: usize,
}

impl Translated {
    /// An empty translation with room for `series` series and `metadata` entries, stopping past `limit`.
    fn new(limit: usize, series: usize, metadata: usize) -> Self {
        Self {
            request: WriteRequest {
                timeseries: Vec::with_capacity(series),
                metadata: Vec::with_capacity(metadata),
            },
            created: Vec::with_capacity(series),
            limit,
            ..Self::default()
        }
    }

    /// Whether the series passed the limit: the request is refused whole.
    pub(crate) fn too_large(&self) -> bool {
        self.bytes > self.limit
    }

    fn push(&mut self, series: TimeSeries) {
        let text = |labels: &[Label]| labels.iter().map(|l| l.name.len() + l.value.len() + 4).sum::<usize>();
        let exemplars: usize = series.exemplars.iter().map(|e| text(&e.labels) + 24).sum();
        // A histogram's fixed fields, and 8 bytes per span and bucket.
        let histograms: usize = series
            .histograms
            .iter()
            .map(|h| {
                64 + 8
                    * (h.positive_spans.len()
                        + h.negative_spans.len()
                        + h.positive_deltas.len()
                        + h.negative_deltas.len())
            })
            .sum();
        self.bytes = self
            .bytes
            .saturating_add(text(&series.labels) + 24 + exemplars + histograms);
        debug_assert!(
            self.request.timeseries.len() < self.request.timeseries.capacity(),
            "more series than bound::bound counted"
        );
        self.request.timeseries.push(series);
        self.created.push(self.start);
    }

    fn push_metadata(&mut self, family: String, kind: MetricType, help: &str, unit: String) {
        self.bytes = self.bytes.saturating_add(family.len() + help.len() + unit.len() + 24);
        debug_assert!(self.request.metadata.len() < self.request.metadata.capacity());
        self.request.metadata.push(MetricMetadata {
            r#type: kind.wire(),
            metric_family_name: family,
            help: help.to_owned(),
            unit,
        });
    }

    fn refuse(&mut self, points: usize, message: String) {
        self.refused_points += i64::try_from(points).unwrap_or(i64::MAX);
        if self.messages.len() < MAX_REFUSAL_MESSAGES && !self.messages.contains(&message) {
            self.messages.push(message);
        }
    }
}

/// What the tenant's limits decide about the translation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings<'a> {
    /// `limits.otel_translation_strategy`.
    pub(crate) strategy: OtelTranslationStrategy,
    /// `limits.promote_otel_resource_attributes`: resource attributes also copied onto every series as labels.
    pub(crate) promote: &'a [String],
}

/// Translates `req` under `settings`, with `sizes` from [`bound`]`(req, settings)`. Stops once the series take
/// more than `limit` bytes ([`Translated::too_large`]).
pub(crate) fn translate(
    req: &ExportMetricsServiceRequest,
    settings: Settings<'_>,
    sizes: &Bound,
    limit: usize,
) -> Translated {
    let strategy = settings.strategy;
    let mut out = Translated::new(limit, sizes.series, sizes.metadata);
    for rm in &req.resource_metrics {
        let resource: &[KeyValue] = rm.resource.as_ref().map_or(&[], |r| &r.attributes);
        let metrics = rm.scope_metrics.iter().flat_map(|sm| &sm.metrics);
        let base = match resource_labels(resource, settings.promote, strategy) {
            Ok(base) => base,
            Err(e) => {
                let points = metrics.filter_map(|m| m.data.as_ref()).map(data_points).sum();
                out.refuse(points, format!("a resource's promoted {e}"));
                continue;
            }
        };
        let first = out.request.timeseries.len();
        for metric in metrics {
            if out.too_large() {
                return out;
            }
            translate_metric(metric, &base, strategy, &mut out);
            out.start = 0;
        }
        let latest = out.request.timeseries[first..]
            .iter()
            .flat_map(|s| {
                let histograms = s.histograms.iter().map(|h| h.timestamp);
                s.samples.iter().map(|x| x.timestamp).chain(histograms)
            })
            .max();
        let Some(ts) = latest else { continue };
        match target_info_labels(resource, strategy) {
            Ok(Some(labels)) => out.push(one_sample(into_labels(labels), ts, 1.0)),
            Ok(None) => {}
            // No data point is lost: only the resource's `target_info` is not written.
            Err(e) => out.refuse(0, format!("target_info of a resource is not written: its {e}")),
        }
    }
    out
}

/// `job`, `instance` and the promoted resource attributes: the labels every series of the resource carries.
fn resource_labels(
    resource: &[KeyValue],
    promote: &[String],
    strategy: OtelTranslationStrategy,
) -> Result<BTreeMap<String, String>, String> {
    let promoted = resource.iter().filter(|kv| promote.contains(&kv.key));
    let mut labels = attribute_labels(promoted, strategy)?;
    let get = |key: &str| {
        resource
            .iter()
            .find(|kv| kv.key == key)
            .map(|kv| value_string(kv.value.as_ref()))
    };
    if let Some(name) = get(SERVICE_NAME) {
        let job = match get(SERVICE_NAMESPACE) {
            Some(ns) => exact(|out| {
                let _ = write!(out, "{ns}/{name}");
            }),
            None => name,
        };
        labels.insert("job".to_owned(), job);
    }
    if let Some(instance) = get(SERVICE_INSTANCE_ID) {
        labels.insert("instance".to_owned(), instance);
    }
    Ok(labels)
}

/// `target_info`'s labels: `job`, `instance` and every other resource attribute; `None` when there is no
/// other attribute (Prometheus writes no `target_info` then).
fn target_info_labels(
    resource: &[KeyValue],
    strategy: OtelTranslationStrategy,
) -> Result<Option<BTreeMap<String, String>>, String> {
    let identifying = [SERVICE_NAME, SERVICE_NAMESPACE, SERVICE_INSTANCE_ID];
    let rest: Vec<&KeyValue> = resource
        .iter()
        .filter(|kv| !identifying.contains(&kv.key.as_str()))
        .collect();
    if rest.is_empty() {
        return Ok(None);
    }
    let mut labels = attribute_labels(rest.into_iter(), strategy)?;
    labels.extend(resource_labels(resource, &[], strategy)?);
    labels.insert("__name__".to_owned(), "target_info".to_owned());
    Ok(Some(labels))
}

/// Attributes as label names under `strategy`; values of keys that collide once escaped are joined with `;`
/// in the order of their original keys. Fails, naming the attribute, when a key escapes to no usable name.
fn attribute_labels<'a>(
    attrs: impl Iterator<Item = &'a KeyValue>,
    strategy: OtelTranslationStrategy,
) -> Result<BTreeMap<String, String>, String> {
    let mut sorted: Vec<&KeyValue> = attrs.filter(|kv| !kv.key.is_empty()).collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));
    let mut labels: BTreeMap<String, String> = BTreeMap::new();
    for kv in sorted {
        let Some(name) = label_name(&kv.key, strategy) else {
            return Err(format!(
                "attribute {:?} has no character a label name can keep (escaping leaves only underscores); \
                 rename it, or use a UTF-8 translation strategy (`limits.otel_translation_strategy`)",
                quoted(&kv.key)
            ));
        };
        let value = value_string(kv.value.as_ref());
        labels
            .entry(name)
            .and_modify(|v| {
                v.push(';');
                v.push_str(&value);
            })
            .or_insert(value);
    }
    // Joined values grew by doubling; the series keep them at their length, as `bound` counts them.
    for v in labels.values_mut() {
        if v.capacity() > v.len() {
            v.shrink_to_fit();
        }
    }
    Ok(labels)
}

/// `s` as a refusal message quotes it: at most [`QUOTED_CHARS`] characters.
fn quoted(s: &str) -> &str {
    match s.char_indices().nth(QUOTED_CHARS) {
        Some((cut, _)) => &s[..cut],
        None => s,
    }
}

/// What a metric's data becomes: its naming kind and Prometheus type, or, for delta temporality (which
/// Prometheus has no type for), what the refusal calls it.
fn metric_kind(data: &Data) -> Result<(Kind, MetricType), &'static str> {
    let cumulative = |t: i32| t == AggregationTemporality::Cumulative as i32;
    match data {
        Data::Gauge(_) => Ok((Kind::Gauge, MetricType::Gauge)),
        Data::Sum(s) if s.is_monotonic && !cumulative(s.aggregation_temporality) => Err("a monotonic sum"),
        Data::Sum(s) if s.is_monotonic => Ok((Kind::Counter, MetricType::Counter)),
        // A non-monotonic sum is a gauge whatever its temporality: each point is the current value.
        Data::Sum(_) => Ok((Kind::UpDownCounter, MetricType::Gauge)),
        Data::Histogram(h) if !cumulative(h.aggregation_temporality) => Err("a histogram"),
        Data::Histogram(_) => Ok((Kind::Histogram, MetricType::Histogram)),
        Data::ExponentialHistogram(h) if !cumulative(h.aggregation_temporality) => Err("an exponential histogram"),
        Data::ExponentialHistogram(_) => Ok((Kind::Histogram, MetricType::Histogram)),
        Data::Summary(_) => Ok((Kind::Summary, MetricType::Summary)),
    }
}

fn translate_metric(
    metric: &opentelemetry_proto::tonic::metrics::v1::Metric,
    base: &BTreeMap<String, String>,
    strategy: OtelTranslationStrategy,
    out: &mut Translated,
) {
    let Some(data) = &metric.data else {
        return;
    };
    if metric.name.is_empty() {
        out.refuse(data_points(data), "a metric has an empty name".to_owned());
        return;
    }
    let (kind, prometheus_kind) = match metric_kind(data) {
        Ok(kinds) => kinds,
        Err(what) => {
            out.refuse(
                data_points(data),
                format!(
                    "metric {:?}: {what} with delta temporality is not supported (Prometheus has no delta type); \
                     send cumulative temporality (OTel SDK: temporality preference cumulative; Collector: the \
                     deltatocumulative processor)",
                    quoted(&metric.name)
                ),
            );
            return;
        }
    };
    let Some(name) = metric_name(&metric.name, &metric.unit, kind, strategy) else {
        out.refuse(
            data_points(data),
            format!(
                "metric {:?}: escaping leaves no usable metric name (only underscores); rename it, or use a \
                 UTF-8 translation strategy (`limits.otel_translation_strategy`)",
                quoted(&metric.name)
            ),
        );
        return;
    };
    out.push_metadata(
        name.clone(),
        prometheus_kind,
        &metric.description,
        prometheus_unit(&metric.unit, strategy.escapes()),
    );
    let ctx = PointContext { base, strategy };
    match data {
        Data::Gauge(g) => {
            for p in &g.data_points {
                if out.too_large() {
                    return;
                }
                number_point(&name, p, ctx, out);
            }
        }
        Data::Sum(s) => {
            for p in &s.data_points {
                if out.too_large() {
                    return;
                }
                if s.is_monotonic {
                    out.start = millis(p.start_time_unix_nano);
                }
                number_point(&name, p, ctx, out);
            }
        }
        Data::Histogram(h) => {
            for p in &h.data_points {
                if out.too_large() {
                    return;
                }
                out.start = millis(p.start_time_unix_nano);
                histogram_point(&metric.name, &name, p, ctx, out);
            }
        }
        Data::ExponentialHistogram(h) => {
            for p in &h.data_points {
                if out.too_large() {
                    return;
                }
                out.start = millis(p.start_time_unix_nano);
                exponential::exponential_point(&metric.name, &name, p, ctx, out);
            }
        }
        Data::Summary(s) => {
            for p in &s.data_points {
                if out.too_large() {
                    return;
                }
                out.start = millis(p.start_time_unix_nano);
                summary_point(&name, p, ctx, out);
            }
        }
    }
}

fn data_points(data: &Data) -> usize {
    match data {
        Data::Gauge(g) => g.data_points.len(),
        Data::Sum(s) => s.data_points.len(),
        Data::Histogram(h) => h.data_points.len(),
        Data::ExponentialHistogram(h) => h.data_points.len(),
        Data::Summary(s) => s.data_points.len(),
    }
}

/// What every point of a metric is translated with.
#[derive(Debug, Clone, Copy)]
struct PointContext<'a> {
    /// The resource's labels.
    base: &'a BTreeMap<String, String>,
    strategy: OtelTranslationStrategy,
}

/// The labels of a data point's series, sorted by name: its attributes under the resource's labels (which
/// win, as `job` and `instance` do in Prometheus), and the metric name. When an attribute has no usable
/// label name, the point is refused (as Prometheus drops it) and `None` returned.
fn point_labels(name: &str, attrs: &[KeyValue], ctx: PointContext<'_>, out: &mut Translated) -> Option<Vec<Label>> {
    let mut labels = match attribute_labels(attrs.iter(), ctx.strategy) {
        Ok(labels) => labels,
        Err(e) => {
            out.refuse(1, format!("metric {:?}: a data point's {e}", quoted(name)));
            return None;
        }
    };
    labels.extend(ctx.base.iter().map(|(k, v)| (k.clone(), v.clone())));
    labels.insert(METRIC_NAME.to_owned(), name.to_owned());
    Some(into_labels(labels))
}

const METRIC_NAME: &str = "__name__";

/// Sorted labels from a map of them, in a list of exactly their number.
fn into_labels(labels: BTreeMap<String, String>) -> Vec<Label> {
    labels.into_iter().map(|(name, value)| Label { name, value }).collect()
}

fn stale(flags: u32) -> bool {
    flags & DataPointFlags::NoRecordedValueMask as u32 != 0
}

fn millis(nanos: u64) -> i64 {
    i64::try_from(nanos / 1_000_000).unwrap_or(i64::MAX)
}

fn value_or_stale(flags: u32, v: f64) -> f64 {
    if stale(flags) {
        f64::from_bits(STALE_NAN_BITS)
    } else {
        v
    }
}

fn number_point(name: &str, p: &NumberDataPoint, ctx: PointContext<'_>, out: &mut Translated) {
    let v = match p.value {
        Some(number_data_point::Value::AsDouble(d)) => d,
        Some(number_data_point::Value::AsInt(i)) => i as f64,
        None if stale(p.flags) => 0.0,
        None => {
            out.refuse(1, format!("metric {:?}: a data point has no value", quoted(name)));
            return;
        }
    };
    let Some(labels) = point_labels(name, &p.attributes, ctx, out) else {
        return;
    };
    let mut series = one_sample(labels, millis(p.time_unix_nano), value_or_stale(p.flags, v));
    series.exemplars = p.exemplars.iter().map(exemplar).collect();
    out.push(series);
}

/// An OTLP exemplar as Prometheus' translator writes it: `trace_id` and `span_id` (hex) when set, then the
/// filtered attributes, left out whole if they would take the labels past
/// [`EXEMPLAR_MAX_LABEL_SET_LENGTH`] characters.
fn exemplar(e: &OtlpExemplar) -> Exemplar {
    let mut labels = Vec::with_capacity(2 + e.filtered_attributes.len());
    // An all-zero id is OTLP's "not set".
    for (name, id) in [("trace_id", &e.trace_id), ("span_id", &e.span_id)] {
        if id.iter().any(|&b| b != 0) {
            labels.push(Label {
                name: name.to_owned(),
                value: exact(|out| {
                    for b in id.iter() {
                        let _ = write!(out, "{b:02x}");
                    }
                }),
            });
        }
    }
    let mut runes: usize = labels
        .iter()
        .map(|l| l.name.chars().count() + l.value.chars().count())
        .sum();
    let attributes: Vec<Label> = e
        .filtered_attributes
        .iter()
        .map(|kv| Label {
            name: kv.key.clone(),
            value: value_string(kv.value.as_ref()),
        })
        .collect();
    runes += attributes
        .iter()
        .map(|l| l.name.chars().count() + l.value.chars().count())
        .sum::<usize>();
    if runes <= EXEMPLAR_MAX_LABEL_SET_LENGTH {
        labels.extend(attributes);
    }
    Exemplar {
        labels,
        value: exemplar_value(e),
        timestamp: millis(e.time_unix_nano),
    }
}

fn exemplar_value(e: &OtlpExemplar) -> f64 {
    match e.value {
        Some(exemplar::Value::AsDouble(d)) => d,
        Some(exemplar::Value::AsInt(i)) => i as f64,
        None => 0.0,
    }
}

/// The bucket of `bounds` each of `values` goes to: the first whose bound holds it (`value <= bound`), or
/// `bounds.len()` (the `+Inf` bucket) when none does; a NaN goes to none (`None`), as no bound holds it.
///
/// O(N + E log N): the running maximum of the bounds is non-decreasing and reaches `value` first at the
/// first bound that holds it, so a binary search on it finds that bucket whatever order the bounds are in.
fn buckets_of(bounds: &[f64], values: impl Iterator<Item = f64>) -> Vec<Option<usize>> {
    // NaN until the first bound that is a number: a NaN bound holds nothing, and `f64::max` ignores it.
    let mut running = Vec::with_capacity(bounds.len());
    let mut max = f64::NAN;
    for &b in bounds {
        max = if max.is_nan() { b } else { max.max(b) };
        running.push(max);
    }
    values
        .map(|v| (!v.is_nan()).then(|| running.partition_point(|&m| m.partial_cmp(&v).is_none_or(|o| o.is_lt()))))
        .collect()
}

fn histogram_point(otel_name: &str, name: &str, p: &HistogramDataPoint, ctx: PointContext<'_>, out: &mut Translated) {
    if !p.bucket_counts.is_empty() && p.bucket_counts.len() != p.explicit_bounds.len() + 1 {
        out.refuse(
            1,
            format!(
                "metric {:?}: a histogram point has {} bucket counts for {} bounds; it must have one more \
                 count than bounds",
                quoted(otel_name),
                p.bucket_counts.len(),
                p.explicit_bounds.len()
            ),
        );
        return;
    }
    let ts = millis(p.time_unix_nano);
    let Some(labels) = point_labels(name, &p.attributes, ctx, out) else {
        return;
    };
    let series = |suffix: &str, extra: Option<(&str, String)>, v: f64| {
        component(name, &labels, suffix, extra, ts, value_or_stale(p.flags, v))
    };
    // Each exemplar goes to the first bucket whose bound holds its value (the +Inf bucket holds every value
    // but NaN), in the order they were sent: sorted by bucket (a stable sort), each bucket takes its run.
    let buckets = p.explicit_bounds.len().min(p.bucket_counts.len());
    let places = buckets_of(&p.explicit_bounds[..buckets], p.exemplars.iter().map(exemplar_value));
    let mut placed: Vec<(usize, &OtlpExemplar)> = places
        .iter()
        .zip(&p.exemplars)
        .filter_map(|(place, e)| place.map(|b| (b.min(buckets), e)))
        .collect();
    placed.sort_by_key(|(bucket, _)| *bucket);
    let mut next = placed.iter().peekable();
    let mut take = |bucket: usize| -> Vec<Exemplar> {
        let mut run = 0;
        while next.peek().is_some_and(|(b, _)| *b == bucket) {
            next.next();
            run += 1;
        }
        let start = placed.len() - next.len() - run;
        placed[start..start + run].iter().map(|(_, e)| exemplar(e)).collect()
    };
    let mut cumulative = 0u64;
    for (i, (bound, count)) in p.explicit_bounds.iter().zip(&p.bucket_counts).enumerate() {
        if out.too_large() {
            return;
        }
        cumulative = cumulative.saturating_add(*count);
        let mut bucket = series("_bucket", Some(("le", float_text(*bound))), cumulative as f64);
        bucket.exemplars = take(i);
        out.push(bucket);
    }
    let mut inf = series("_bucket", Some(("le", "+Inf".to_owned())), p.count as f64);
    inf.exemplars = take(buckets);
    out.push(inf);
    if let Some(sum) = p.sum {
        out.push(series("_sum", None, sum));
    }
    out.push(series("_count", None, p.count as f64));
}

fn summary_point(name: &str, p: &SummaryDataPoint, ctx: PointContext<'_>, out: &mut Translated) {
    let ts = millis(p.time_unix_nano);
    let Some(labels) = point_labels(name, &p.attributes, ctx, out) else {
        return;
    };
    let series = |suffix: &str, extra: Option<(&str, String)>, v: f64| {
        component(name, &labels, suffix, extra, ts, value_or_stale(p.flags, v))
    };
    for q in &p.quantile_values {
        if out.too_large() {
            return;
        }
        out.push(series("", Some(("quantile", float_text(q.quantile))), q.value));
    }
    out.push(series("_sum", None, p.sum));
    out.push(series("_count", None, p.count as f64));
}

/// One series of a histogram or summary point: `name` with `suffix` (`_bucket`, `_sum`...), the point's
/// sorted `labels` plus `extra` (`le`, `quantile`, which replaces a point label of that name), every string
/// copied at its length into a list of exactly the labels' number.
fn component(name: &str, labels: &[Label], suffix: &str, extra: Option<(&str, String)>, ts: i64, v: f64) -> TimeSeries {
    let metric = exact(|out| {
        let _ = out.write_str(name);
        let _ = out.write_str(suffix);
    });
    let extra_name = extra.as_ref().map(|(k, _)| *k);
    let replaced = extra_name.is_some_and(|k| labels.iter().any(|l| l.name == k));
    let mut out = Vec::with_capacity(labels.len() + usize::from(extra.is_some() && !replaced));
    let mut extra = extra;
    let mut metric = Some(metric);
    for l in labels {
        if let Some((k, _)) = &extra
            && *k < l.name.as_str()
            && let Some((k, value)) = extra.take()
        {
            out.push(Label {
                name: k.to_owned(),
                value,
            });
        }
        if l.name == METRIC_NAME {
            out.push(Label {
                name: METRIC_NAME.to_owned(),
                value: metric.take().unwrap_or_default(),
            });
        } else if extra_name == Some(l.name.as_str()) {
            // The point's own label of the extra's name gives way to it.
            if let Some((k, value)) = extra.take() {
                out.push(Label {
                    name: k.to_owned(),
                    value,
                });
            }
        } else {
            out.push(l.clone());
        }
    }
    if let Some((k, value)) = extra {
        out.push(Label {
            name: k.to_owned(),
            value,
        });
    }
    debug_assert!(out.windows(2).all(|w| w[0].name < w[1].name), "labels sorted");
    one_sample(out, ts, v)
}

/// A series of one sample; `labels` is sorted by name, as the write path requires.
fn one_sample(labels: Vec<Label>, timestamp: i64, value: f64) -> TimeSeries {
    TimeSeries {
        labels,
        samples: vec![Sample { value, timestamp }],
        ..TimeSeries::default()
    }
}

#[cfg(test)]
mod tests;
