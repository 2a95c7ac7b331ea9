//! Native histograms in PromQL, with Prometheus 3's semantics: the `histogram_*` functions, the change of a
//! histogram counter over a range (`rate`, `increase`, `delta`), and the rules for combining histograms.
//!
//! Functions that read floats (`abs`, `max_over_time`, `topk`...) ignore histogram samples, as Prometheus does;
//! the evaluator keeps histograms beside floats ([`crate::eval::StepSeries`]) so that float-only work never
//! sees them.
//!
//! Where Prometheus 2.42 (which had native histograms behind a feature flag) differs, Heddle answers as 3.x:
//! - `histogram_quantile` and `histogram_fraction` interpolate exponentially within exponential buckets (2.42:
//!   linearly everywhere), and a quantile of 0.5 or more is found from the highest bucket down.
//! - `histogram_avg`, `histogram_stddev` and `histogram_stdvar` exist (2.42 lacks them).
//! - Operators: `h * k`, `k * h`, `h / k`, `h + h`, `h - h`, `h == h`, `h != h` and `-h` (2.42: `+` only);
//!   every other operator with a histogram operand, comparisons with a float included, has no result.
//! - `sum` and `avg` of a group with floats and histograms at one step have no value there (2.42 returned the
//!   histograms' sum); `count` and `group` count both kinds.
//! - `sum_over_time` and `avg_over_time` of histograms, `resets` and `changes` over them.
//! - A histogram sample counts against the sample limit by its size, as Prometheus 3 does
//!   ([`crate::eval::histogram_weight`]); 2.42 counts it as one sample.
//! - Custom-bucket histograms (schema -53, which 2.42 does not know) combine only with the same bounds, never
//!   with exponential ones: such a `rate` or `sum` has no result.
//!
//! Windows stay closed at both ends for histograms as for floats (Prometheus 2's ranges; 3.x opens them at the
//! start), so a query's floats and histograms see the same samples.

use crate::eval::{StepSeries, drop_own_name};
use crate::value::HistogramPoint;
use heddle_model::histogram::Bucket;
use heddle_model::{CounterResetHint, FloatHistogram};

/// `histogram_count`, `histogram_sum`, `histogram_avg`, `histogram_stddev`, `histogram_stdvar`: one float per
/// histogram, the metric name dropped; float samples give nothing.
pub(crate) fn per_histogram(series: Vec<StepSeries>, f: impl Fn(&FloatHistogram) -> f64) -> Vec<StepSeries> {
    series
        .into_iter()
        .filter(|s| !s.hists.is_empty())
        .map(|s| {
            let vals = s.hists.iter().map(|h| h.as_ref().map(&f)).collect();
            StepSeries::floats(drop_own_name(s.labels), vals)
        })
        .filter(|s| !s.is_empty())
        .collect()
}

/// The estimated population variance of the observations (Prometheus' `histogram_stdvar`): each bucket's
/// observations are taken to lie at its geometric mean (0 for the zero bucket), around the mean `sum / count`.
pub(crate) fn stdvar(h: &FloatHistogram) -> f64 {
    let mean = h.sum / h.count;
    let (mut variance, mut c) = (0.0, 0.0);
    for b in h.all_buckets() {
        let val = if b.lower <= 0.0 && 0.0 <= b.upper {
            0.0
        } else {
            let v = (b.upper * b.lower).sqrt();
            if b.upper < 0.0 { -v } else { v }
        };
        let delta = val - mean;
        (variance, c) = crate::functions::kahan_add(b.count * delta * delta, variance, c);
    }
    (variance + c) / h.count
}

/// The buckets a quantile or fraction walks, lowest first, with Prometheus' treatment of the zero bucket: when
/// the histogram has buckets on one side only, the zero bucket ends at 0 on the other.
fn walked_buckets(h: &FloatHistogram) -> Vec<(Bucket<f64>, bool)> {
    h.all_buckets()
        .into_iter()
        .map(|mut b| {
            let zero = !h.uses_custom_buckets() && b.lower < 0.0 && b.upper > 0.0;
            // The first custom bucket starts at 0 unless it ends below, as the lowest classic bucket does.
            if h.uses_custom_buckets() && b.lower == f64::NEG_INFINITY && b.upper > 0.0 {
                b.lower = 0.0;
            }
            if zero {
                if h.negative_buckets.is_empty() && !h.positive_buckets.is_empty() {
                    b.lower = 0.0;
                } else if h.positive_buckets.is_empty() && !h.negative_buckets.is_empty() {
                    b.upper = 0.0;
                }
            }
            (b, zero)
        })
        .collect()
}

/// The `q`-quantile of a native histogram (Prometheus 3's `HistogramQuantile`): the bucket holding the rank is
/// found from the low end (`q` < 0.5, or NaN observations) or from the high end, and the value interpolated
/// within it: exponentially within exponential buckets (linear on a logarithmic scale, where their bounds are
/// evenly spaced), linearly within the zero bucket and custom buckets. A custom-bucket quantile in the `+Inf`
/// bucket is its lower bound, and in a first bucket ending at or below 0 its upper bound, as for classic
/// buckets.
pub(crate) fn quantile(q: f64, h: &FloatHistogram) -> f64 {
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    if h.count == 0.0 || q.is_nan() {
        return f64::NAN;
    }
    let mut buckets = walked_buckets(h);
    let forward = h.sum.is_nan() || q < 0.5;
    let mut rank = if forward { q * h.count } else { (1.0 - q) * h.count };
    if !forward {
        buckets.reverse();
    }
    let mut count = 0.0;
    let mut found = None;
    for (b, zero) in &buckets {
        count += b.count;
        found = Some((*b, *zero));
        if count >= rank {
            break;
        }
    }
    let Some((bucket, zero)) = found else {
        return f64::NAN;
    };
    if h.uses_custom_buckets() {
        if bucket.upper == f64::INFINITY {
            return bucket.lower;
        }
        if bucket.lower == f64::NEG_INFINITY {
            return bucket.upper;
        }
    }
    // Rounding can make the buckets' sum pass the count.
    if count > h.count {
        count = h.count;
    }
    // Only NaN observations leave the rank unreached.
    if count < rank {
        return bucket.upper;
    }
    if forward {
        rank -= count - bucket.count;
    } else {
        rank = count - rank;
    }
    let fraction = rank / bucket.count;
    if h.uses_custom_buckets() || zero || bucket.lower <= 0.0 && bucket.upper >= 0.0 {
        return bucket.lower + (bucket.upper - bucket.lower) * fraction;
    }
    let (log_lower, log_upper) = (bucket.lower.abs().log2(), bucket.upper.abs().log2());
    if bucket.lower > 0.0 {
        (log_lower + (log_upper - log_lower) * fraction).exp2()
    } else {
        // A negative bucket: mirrored.
        -(log_upper + (log_lower - log_upper) * (1.0 - fraction)).exp2()
    }
}

/// The fraction of observations between `lower` and `upper` (Prometheus 3's `HistogramFraction`), interpolated
/// within the buckets holding the bounds as [`quantile`] does.
pub(crate) fn fraction(lower: f64, upper: f64, h: &FloatHistogram) -> f64 {
    if h.count == 0.0 || lower.is_nan() || upper.is_nan() {
        return f64::NAN;
    }
    if lower >= upper {
        return 0.0;
    }
    let linear = h.uses_custom_buckets();
    let mut rank = 0.0;
    let (mut lower_rank, mut upper_rank) = (None, None);
    for (b, zero) in walked_buckets(h) {
        let at = |v: f64| {
            let share = if linear || zero {
                (v - b.lower) / (b.upper - b.lower)
            } else {
                let (lo, up, x) = (b.lower.abs().log2(), b.upper.abs().log2(), v.abs().log2());
                if v > 0.0 {
                    (x - lo) / (up - lo)
                } else {
                    1.0 - (x - up) / (lo - up)
                }
            };
            rank + b.count * share
        };
        if lower_rank.is_none() && b.lower >= lower {
            lower_rank = Some(rank);
        }
        if upper_rank.is_none() && b.lower >= upper {
            upper_rank = Some(rank);
        }
        if lower_rank.is_some() && upper_rank.is_some() {
            break;
        }
        if lower_rank.is_none() && b.lower < lower && b.upper > lower {
            lower_rank = Some(at(lower));
        }
        if upper_rank.is_none() && b.lower < upper && b.upper > upper {
            upper_rank = Some(at(upper));
        }
        if lower_rank.is_some() && upper_rank.is_some() {
            break;
        }
        rank += b.count;
    }
    let clamp = |r: Option<f64>| r.filter(|r| *r <= h.count).unwrap_or(h.count);
    (clamp(upper_rank) - clamp(lower_rank)) / h.count
}

/// The change of a histogram over a window's points, before extrapolation (Prometheus 3's `histogramRate`): the
/// last minus the first, at the lowest schema among them, with the histogram before each counter reset added
/// back when `counter`. A reset right after the first point makes the first count as empty, so that its layout
/// does not matter. `None` when the histograms cannot be combined (exponential and custom buckets mixed, custom
/// bounds differing). The result is a gauge histogram, compacted.
pub(crate) fn change(points: &[HistogramPoint], counter: bool) -> Option<FloatHistogram> {
    let last = &points[points.len() - 1].h;
    let reset_first;
    let mut first = &points[0].h;
    if counter && points.len() > 1 && points[1].h.detect_reset(first) {
        reset_first = FloatHistogram {
            schema: points[1].h.schema,
            custom_values: points[1].h.custom_values.clone(),
            ..Default::default()
        };
        first = &reset_first;
    }
    let custom = first.uses_custom_buckets();
    let middle = &points[1..points.len() - 1];
    if last.uses_custom_buckets() != custom || (counter && middle.iter().any(|p| p.h.uses_custom_buckets() != custom)) {
        return None;
    }
    let mut min_schema = first.schema.min(last.schema);
    if counter {
        min_schema = middle.iter().map(|p| p.h.schema).fold(min_schema, i32::min);
    }
    let mut h = last.clone();
    if h.schema > min_schema {
        h.reduce_resolution(min_schema).ok()?;
    }
    h = h.sub(first).ok()?;
    if counter {
        let mut prev = first;
        for p in &points[1..] {
            if p.h.detect_reset(prev) {
                h = h.add(prev).ok()?;
            }
            prev = &p.h;
        }
    }
    h.counter_reset_hint = CounterResetHint::Gauge;
    h.compact(0);
    Some(h)
}

/// The sum of histograms (`sum`, `sum_over_time`); `None` when they cannot be combined.
pub(crate) fn sum<'a>(mut hs: impl Iterator<Item = &'a FloatHistogram>) -> Option<FloatHistogram> {
    let mut acc = hs.next()?.clone();
    for h in hs {
        acc = acc.add(h).ok()?;
    }
    acc.compact(0);
    Some(acc)
}

/// The mean of histograms (`avg`, `avg_over_time`), as Prometheus' running mean: `mean += h/n - mean/n`.
pub(crate) fn mean<'a>(mut hs: impl Iterator<Item = &'a FloatHistogram>) -> Option<FloatHistogram> {
    let mut mean = hs.next()?.clone();
    for (i, h) in hs.enumerate() {
        let n = (i + 2) as f64;
        let mut left = h.clone();
        left.div(n);
        let mut right = mean.clone();
        right.div(n);
        mean = mean.add(&left.sub(&right).ok()?).ok()?;
    }
    mean.compact(0);
    Some(mean)
}
