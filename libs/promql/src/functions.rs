//! PromQL functions, with Prometheus 2.42's semantics: functions over instant vectors, over range vectors
//! (matrix selectors and subqueries), and the few that make or read scalars.

use crate::PromqlError;
use crate::deadline::sort_cost;
use crate::error::execution;
use crate::eval::{
    Evaluator, Grid, Out, RangeSource, StepSeries, dedupe_per_step, dedupe_whole_range, drop_name, drop_own_name,
};
use crate::histogram;
use crate::value::HistogramPoint;
use heddle_model::civil::{civil_from_days, days_from_civil, days_in_month};
use heddle_model::{CounterResetHint, FloatHistogram, Labels, METRIC_NAME, Sample};
use promql_parser::label::MatchOp;
use promql_parser::parser::{Call, Expr, VectorSelector};
use regex::Regex;
use std::collections::HashMap;

/// Functions over a range vector, evaluated per series and step over the window's samples.
const RANGE_FUNCTIONS: &[&str] = &[
    "rate",
    "irate",
    "increase",
    "delta",
    "idelta",
    "deriv",
    "predict_linear",
    "holt_winters",
    "resets",
    "changes",
    "avg_over_time",
    "min_over_time",
    "max_over_time",
    "sum_over_time",
    "count_over_time",
    "quantile_over_time",
    "stddev_over_time",
    "stdvar_over_time",
    "last_over_time",
    "present_over_time",
];

/// Functions applied to each value of an instant vector.
const MATH_FUNCTIONS: &[&str] = &[
    "abs", "ceil", "floor", "exp", "sqrt", "ln", "log2", "log10", "sgn", "acos", "acosh", "asin", "asinh", "atan",
    "atanh", "cos", "cosh", "sin", "sinh", "tan", "tanh", "deg", "rad",
];

const DATE_FUNCTIONS: &[&str] = &[
    "day_of_month",
    "day_of_week",
    "day_of_year",
    "days_in_month",
    "hour",
    "minute",
    "month",
    "year",
];

const OTHER_FUNCTIONS: &[&str] = &[
    "absent",
    "absent_over_time",
    "clamp",
    "clamp_max",
    "clamp_min",
    "histogram_quantile",
    "histogram_count",
    "histogram_sum",
    "histogram_fraction",
    // Newer than 2.42, taken from Prometheus 3 with native histograms.
    "histogram_avg",
    "histogram_stddev",
    "histogram_stdvar",
    "label_replace",
    "label_join",
    "pi",
    "round",
    "scalar",
    "sort",
    "sort_desc",
    "time",
    "timestamp",
    "vector",
];

/// The functions Prometheus 2.42 has; newer ones are refused at parse time, as 2.42 would.
pub(crate) fn is_supported(name: &str) -> bool {
    [RANGE_FUNCTIONS, MATH_FUNCTIONS, DATE_FUNCTIONS, OTHER_FUNCTIONS]
        .iter()
        .any(|list| list.contains(&name))
}

fn unwrap_parens(mut e: &Expr) -> &Expr {
    while let Expr::Paren(p) = e {
        e = &p.expr;
    }
    e
}

fn arg(call: &Call, i: usize) -> Result<&Expr, PromqlError> {
    call.args
        .args
        .get(i)
        .map(|b| b.as_ref())
        .ok_or_else(|| PromqlError::BadData(format!("missing argument {} of {}", i + 1, call.func.name)))
}

fn vector_arg(ev: &Evaluator<'_>, e: &Expr, g: Grid) -> Result<Vec<StepSeries>, PromqlError> {
    match ev.eval(e, g)? {
        Out::Vector(v) => Ok(v),
        _ => Err(PromqlError::BadData("expected an instant vector argument".into())),
    }
}

fn scalar_arg(ev: &Evaluator<'_>, e: &Expr, g: Grid) -> Result<Vec<f64>, PromqlError> {
    match ev.eval(e, g)? {
        Out::Scalar(v) => Ok(v),
        _ => Err(PromqlError::BadData("expected a scalar argument".into())),
    }
}

fn string_arg(ev: &Evaluator<'_>, e: &Expr, g: Grid) -> Result<String, PromqlError> {
    match ev.eval(e, g)? {
        Out::Str(s) => Ok(s),
        _ => Err(PromqlError::BadData("expected a string argument".into())),
    }
}

/// Applies `f(value, step)` to every float value, dropping `__name__` when `drop` is set; histograms give no
/// value, as Prometheus' float functions ignore them.
fn map_values(
    ev: &Evaluator<'_>,
    series: Vec<StepSeries>,
    drop: bool,
    mut f: impl FnMut(f64, usize) -> Option<f64>,
) -> Result<Out, PromqlError> {
    let mut out = Vec::with_capacity(series.len());
    for s in series {
        ev.work(s.vals.len(), PHASE)?;
        out.push(StepSeries::floats(
            if drop { drop_own_name(s.labels) } else { s.labels },
            s.vals
                .into_iter()
                .enumerate()
                .map(|(i, v)| v.and_then(|v| f(v, i)))
                .collect(),
        ));
    }
    Ok(Out::Vector(dedupe_per_step(ev, out)?))
}

/// The phase a timed-out function reports.
const PHASE: &str = "function evaluation";

pub(crate) fn eval(ev: &Evaluator<'_>, call: &Call, g: Grid) -> Result<Out, PromqlError> {
    let name = call.func.name;
    if RANGE_FUNCTIONS.contains(&name) {
        return range_function(ev, call, g);
    }
    if MATH_FUNCTIONS.contains(&name) {
        let f = math_function(name);
        return map_values(ev, vector_arg(ev, arg(call, 0)?, g)?, true, |v, _| Some(f(v)));
    }
    if DATE_FUNCTIONS.contains(&name) {
        let series = match call.args.args.first() {
            Some(a) => vector_arg(ev, a, g)?,
            // Without an argument: the evaluation time, as `vector(time())`.
            None => vec![StepSeries::floats(
                Labels::default(),
                g.times().map(|t| Some(t as f64 / 1000.0)).collect(),
            )],
        };
        // A value that is no time (NaN, an infinity, past the range of seconds in an i64) has no date. Prometheus
        // 2.42 prints whatever Go's float-to-integer conversion gives on the CPU it runs on.
        return map_values(ev, series, true, |v, _| {
            Some(if v.is_finite() && v.abs() < 9.2e18 {
                date_part(name, v)
            } else {
                f64::NAN
            })
        });
    }
    match name {
        "time" => Ok(Out::Scalar(g.times().map(|t| t as f64 / 1000.0).collect())),
        "pi" => Ok(Out::Scalar(vec![std::f64::consts::PI; g.len])),
        "vector" => {
            let v = scalar_arg(ev, arg(call, 0)?, g)?;
            Ok(Out::Vector(vec![StepSeries::floats(
                Labels::default(),
                v.into_iter().map(Some).collect(),
            )]))
        }
        // One element of either kind, and a float: a histogram has no scalar value.
        "scalar" => {
            let series = vector_arg(ev, arg(call, 0)?, g)?;
            let mut out = Vec::with_capacity(g.len);
            for i in 0..g.len {
                ev.work(series.len() + 1, PHASE)?;
                let mut present = series.iter().filter(|s| s.has(i));
                out.push(match (present.next(), present.next()) {
                    (Some(s), None) => s.vals[i].unwrap_or(f64::NAN),
                    _ => f64::NAN,
                });
            }
            Ok(Out::Scalar(out))
        }
        "timestamp" => match unwrap_parens(arg(call, 0)?) {
            // A selector's own sample times, not the step's.
            Expr::VectorSelector(vs) => map_values(ev, ev.vector_selector(vs, g, true)?, true, |v, _| Some(v)),
            // The step's time for a value of either kind.
            other => {
                let mut series = Vec::new();
                for s in vector_arg(ev, other, g)? {
                    ev.work(g.len, PHASE)?;
                    let vals = (0..g.len)
                        .map(|i| s.has(i).then(|| g.time(i) as f64 / 1000.0))
                        .collect();
                    series.push(StepSeries::floats(drop_own_name(s.labels), vals));
                }
                Ok(Out::Vector(dedupe_per_step(ev, series)?))
            }
        },
        "absent" => {
            let series = vector_arg(ev, arg(call, 0)?, g)?;
            let mut vals = Vec::with_capacity(g.len);
            for i in 0..g.len {
                ev.work(series.len() + 1, PHASE)?;
                vals.push(series.iter().all(|s| !s.has(i)).then_some(1.0));
            }
            Ok(Out::Vector(vec![StepSeries::floats(
                absent_labels(arg(call, 0)?),
                vals,
            )]))
        }
        "absent_over_time" => {
            let source = range_source(ev, arg(call, 0)?, g)?;
            let mut any = vec![false; g.len];
            for s in &source.series {
                source.for_each_window(ev, PHASE, s, |i, w, hw| {
                    any[i] |= !w.is_empty() || !hw.is_empty();
                    1
                })?;
            }
            Ok(Out::Vector(vec![StepSeries::floats(
                absent_labels(arg(call, 0)?),
                any.into_iter().map(|a| (!a).then_some(1.0)).collect(),
            )]))
        }
        "round" => {
            let series = vector_arg(ev, arg(call, 0)?, g)?;
            let to = match call.args.args.get(1) {
                Some(a) => scalar_arg(ev, a, g)?,
                None => vec![1.0; g.len],
            };
            map_values(ev, series, true, |v, i| {
                let inverse = 1.0 / to[i];
                Some((v * inverse + 0.5).floor() / inverse)
            })
        }
        "clamp" => {
            let series = vector_arg(ev, arg(call, 0)?, g)?;
            let min = scalar_arg(ev, arg(call, 1)?, g)?;
            let max = scalar_arg(ev, arg(call, 2)?, g)?;
            map_values(ev, series, true, |v, i| {
                (max[i] >= min[i] || max[i].is_nan() || min[i].is_nan()).then(|| go_max(min[i], go_min(max[i], v)))
            })
        }
        "clamp_min" => {
            let series = vector_arg(ev, arg(call, 0)?, g)?;
            let min = scalar_arg(ev, arg(call, 1)?, g)?;
            map_values(ev, series, true, |v, i| Some(go_max(min[i], v)))
        }
        "clamp_max" => {
            let series = vector_arg(ev, arg(call, 0)?, g)?;
            let max = scalar_arg(ev, arg(call, 1)?, g)?;
            map_values(ev, series, true, |v, i| Some(go_min(max[i], v)))
        }
        // Histograms have no order: Prometheus 3 drops them.
        "sort" | "sort_desc" => {
            let mut series: Vec<StepSeries> = vector_arg(ev, arg(call, 0)?, g)?
                .into_iter()
                .map(|s| StepSeries::floats(s.labels, s.vals))
                .filter(|s| !s.is_empty())
                .collect();
            if g.len == 1 {
                let desc = name == "sort_desc";
                ev.work(sort_cost(series.len()), "sorting")?;
                series.sort_by(|a, b| {
                    let (x, y) = (a.vals[0].unwrap_or(f64::NAN), b.vals[0].unwrap_or(f64::NAN));
                    by_value_nan_last(x, y, desc)
                });
            }
            Ok(Out::Vector(series))
        }
        "label_replace" => {
            let series = vector_arg(ev, arg(call, 0)?, g)?;
            let dst = string_arg(ev, arg(call, 1)?, g)?;
            let replacement = string_arg(ev, arg(call, 2)?, g)?;
            let src = string_arg(ev, arg(call, 3)?, g)?;
            let pattern = string_arg(ev, arg(call, 4)?, g)?;
            let re = Regex::new(&format!("^(?s:{pattern})$"))
                .map_err(|_| execution(format!("invalid regular expression in label_replace(): {pattern}")))?;
            // Any non-empty name, as in Prometheus 3: a tenant with UTF-8 names relabels them too.
            if dst.is_empty() {
                return Err(execution(format!(
                    "invalid destination label name in label_replace(): {dst}"
                )));
            }
            let mut out = Vec::with_capacity(series.len());
            for s in series {
                let value = s.labels.get(&src).unwrap_or("");
                // A regex match over the value, a label set built: a few units per byte and label.
                ev.work(value.len() + 4 * s.labels.len() + 1, PHASE)?;
                let labels = match re.captures(value) {
                    None => s.labels,
                    Some(caps) => {
                        let mut res = String::new();
                        caps.expand(&replacement, &mut res);
                        s.labels.with(&dst, &res).map_err(|e| execution(e.to_string()))?
                    }
                };
                out.push(StepSeries {
                    labels,
                    vals: s.vals,
                    hists: s.hists,
                });
            }
            Ok(Out::Vector(dedupe_per_step(ev, out)?))
        }
        "label_join" => {
            let series = vector_arg(ev, arg(call, 0)?, g)?;
            let dst = string_arg(ev, arg(call, 1)?, g)?;
            let sep = string_arg(ev, arg(call, 2)?, g)?;
            let mut srcs = Vec::new();
            for a in call.args.args.iter().skip(3) {
                let src = string_arg(ev, a, g)?;
                if src.is_empty() {
                    return Err(execution(format!("invalid source label name in label_join(): {src}")));
                }
                srcs.push(src);
            }
            if dst.is_empty() {
                return Err(execution(format!(
                    "invalid destination label name in label_join(): {dst}"
                )));
            }
            let mut out = Vec::with_capacity(series.len());
            for s in series {
                ev.work(4 * (s.labels.len() + srcs.len()) + 1, PHASE)?;
                let joined: Vec<&str> = srcs.iter().map(|n| s.labels.get(n).unwrap_or("")).collect();
                let labels = s
                    .labels
                    .with(&dst, &joined.join(&sep))
                    .map_err(|e| execution(e.to_string()))?;
                out.push(StepSeries {
                    labels,
                    vals: s.vals,
                    hists: s.hists,
                });
            }
            Ok(Out::Vector(dedupe_per_step(ev, out)?))
        }
        // Classic buckets (float series with an `le` label) and native histograms, each on its own.
        "histogram_quantile" => {
            let q = scalar_arg(ev, arg(call, 0)?, g)?;
            let series = vector_arg(ev, arg(call, 1)?, g)?;
            let mut out = Vec::new();
            for s in series.iter().filter(|s| !s.hists.is_empty()) {
                let mut vals = Vec::with_capacity(g.len);
                for (i, &q) in q.iter().enumerate() {
                    vals.push(match s.hist(i) {
                        Some(h) => {
                            ev.work(histogram_cost(h), PHASE)?;
                            Some(histogram::quantile(q, h))
                        }
                        None => None,
                    });
                }
                out.push(StepSeries::floats(drop_name(&s.labels), vals));
            }
            out.extend(histogram_quantile(ev, &q, series, g)?);
            Ok(Out::Vector(dedupe_per_step(ev, out)?))
        }
        "histogram_fraction" => {
            let lower = scalar_arg(ev, arg(call, 0)?, g)?;
            let upper = scalar_arg(ev, arg(call, 1)?, g)?;
            let series = vector_arg(ev, arg(call, 2)?, g)?;
            let mut out = Vec::new();
            for s in series.into_iter().filter(|s| !s.hists.is_empty()) {
                let mut vals = Vec::with_capacity(g.len);
                for i in 0..g.len {
                    vals.push(match s.hist(i) {
                        Some(h) => {
                            ev.work(histogram_cost(h), PHASE)?;
                            Some(histogram::fraction(lower[i], upper[i], h))
                        }
                        None => None,
                    });
                }
                out.push(StepSeries::floats(drop_own_name(s.labels), vals));
            }
            Ok(Out::Vector(dedupe_per_step(ev, out)?))
        }
        "histogram_count" | "histogram_sum" | "histogram_avg" | "histogram_stddev" | "histogram_stdvar" => {
            let series = vector_arg(ev, arg(call, 0)?, g)?;
            let f: fn(&FloatHistogram) -> f64 = match name {
                "histogram_count" => |h| h.count,
                "histogram_sum" => |h| h.sum,
                "histogram_avg" => |h| h.sum / h.count,
                "histogram_stddev" => |h| histogram::stdvar(h).sqrt(),
                _ => histogram::stdvar,
            };
            // One pass over values already held, counted before it.
            let cost = series
                .iter()
                .flat_map(|s| s.hists.iter())
                .map(|h| h.as_ref().map_or(1, histogram_cost))
                .fold(0usize, usize::saturating_add);
            ev.work(cost, PHASE)?;
            Ok(Out::Vector(dedupe_per_step(ev, histogram::per_histogram(series, f))?))
        }
        other => Err(PromqlError::BadData(format!("unknown function with name {other:?}"))),
    }
}

fn math_function(name: &str) -> fn(f64) -> f64 {
    match name {
        "abs" => f64::abs,
        "ceil" => f64::ceil,
        "floor" => f64::floor,
        "exp" => f64::exp,
        "sqrt" => f64::sqrt,
        "ln" => f64::ln,
        "log2" => f64::log2,
        "log10" => f64::log10,
        "sgn" => |v| {
            if v < 0.0 {
                -1.0
            } else if v > 0.0 {
                1.0
            } else {
                v
            }
        },
        "acos" => f64::acos,
        "acosh" => f64::acosh,
        "asin" => f64::asin,
        "asinh" => f64::asinh,
        "atan" => f64::atan,
        "atanh" => f64::atanh,
        "cos" => f64::cos,
        "cosh" => f64::cosh,
        "sin" => f64::sin,
        "sinh" => f64::sinh,
        "tan" => f64::tan,
        "tanh" => f64::tanh,
        "deg" => f64::to_degrees,
        _ => f64::to_radians,
    }
}

/// Go's `math.Max`: NaN wins over everything but +Inf... as Go orders its special cases.
pub(crate) fn go_max(a: f64, b: f64) -> f64 {
    if a == f64::INFINITY || b == f64::INFINITY {
        f64::INFINITY
    } else if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == 0.0 && b == 0.0 {
        if a.is_sign_negative() { b } else { a }
    } else if a > b {
        a
    } else {
        b
    }
}

/// Go's `math.Min`.
pub(crate) fn go_min(a: f64, b: f64) -> f64 {
    if a == f64::NEG_INFINITY || b == f64::NEG_INFINITY {
        f64::NEG_INFINITY
    } else if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == 0.0 && b == 0.0 {
        if a.is_sign_negative() { a } else { b }
    } else if a < b {
        a
    } else {
        b
    }
}

/// A float as Go's `strconv.FormatFloat(v, 'f', -1, 64)` writes it (the shortest text that reads back).
pub fn go_format_float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

/// The `q`-quantile of `vals` by linear interpolation between closest ranks (Prometheus' `quantile`).
pub(crate) fn quantile(q: f64, mut vals: Vec<f64>) -> f64 {
    if vals.is_empty() || q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    vals.sort_by(|a, b| nan_first(*a, *b));
    let n = vals.len() as f64;
    let rank = q * (n - 1.0);
    let lower = rank.floor().max(0.0);
    let upper = (lower + 1.0).min(n - 1.0);
    let weight = rank - rank.floor();
    vals[lower as usize] * (1.0 - weight) + vals[upper as usize] * weight
}

/// Go's `sort.Float64s` and `cmp.Compare` order, which Prometheus sorts values and bucket bounds by: NaN before
/// every number. A total order, unlike `partial_cmp` with NaN taken as equal to everything (with which a sort
/// may panic or leave the values unordered).
pub(crate) fn nan_first(a: f64, b: f64) -> std::cmp::Ordering {
    match (a.is_nan(), b.is_nan()) {
        (false, false) => a.total_cmp(&b),
        // `true` (NaN) first.
        (x, y) => y.cmp(&x),
    }
}

/// The order of `sort`, `sort_desc`, `topk` and `bottomk`: by value, ascending or `descending`, NaN after every
/// number either way, as Prometheus orders them. A total order.
pub(crate) fn by_value_nan_last(a: f64, b: f64, descending: bool) -> std::cmp::Ordering {
    match (a.is_nan(), b.is_nan()) {
        (false, false) if descending => b.total_cmp(&a),
        (false, false) => a.total_cmp(&b),
        // `false` (a number) first.
        (x, y) => x.cmp(&y),
    }
}

/// The work of reading a native histogram, in [`Evaluator::work`] units: about one per bucket or span.
pub(crate) fn histogram_cost(h: &FloatHistogram) -> usize {
    h.size_bytes() / 16 + 1
}

/// The labels `absent(sel)` reports: the selector's equality matchers, a name matched twice left out.
fn absent_labels(e: &Expr) -> Labels {
    let vs: &VectorSelector = match unwrap_parens(e) {
        Expr::VectorSelector(vs) => vs,
        Expr::MatrixSelector(ms) => &ms.vs,
        _ => return Labels::default(),
    };
    let mut seen: HashMap<&str, Option<&str>> = HashMap::new();
    for m in &vs.matchers.matchers {
        if m.name == METRIC_NAME || !matches!(m.op, MatchOp::Equal) {
            continue;
        }
        seen.entry(m.name.as_str())
            .and_modify(|v| *v = None)
            .or_insert(Some(m.value.as_str()));
    }
    Labels::from_unsorted(seen.into_iter().filter_map(|(n, v)| v.map(|v| (n, v)))).unwrap_or_default()
}

/// The samples a range function reads: a matrix selector or a subquery.
fn range_source<'e>(ev: &'e Evaluator<'_>, e: &Expr, g: Grid) -> Result<RangeSource<'e>, PromqlError> {
    match unwrap_parens(e) {
        Expr::MatrixSelector(ms) => ev.range_source_of_matrix(ms, g),
        Expr::Subquery(sq) => ev.range_source_of_subquery(sq, g),
        _ => Err(PromqlError::BadData("expected a range vector argument".into())),
    }
}

fn range_function(ev: &Evaluator<'_>, call: &Call, g: Grid) -> Result<Out, PromqlError> {
    let name = call.func.name;
    // The range vector is the first argument, except for quantile_over_time (second).
    let (matrix_at, scalars): (usize, Vec<usize>) = match name {
        "quantile_over_time" => (1, vec![0]),
        "predict_linear" => (0, vec![1]),
        "holt_winters" => (0, vec![1, 2]),
        _ => (0, vec![]),
    };
    let params: Vec<Vec<f64>> = scalars
        .iter()
        .map(|&i| scalar_arg(ev, arg(call, i)?, g))
        .collect::<Result<_, _>>()?;
    let source = range_source(ev, arg(call, matrix_at)?, g)?;
    if name == "holt_winters" {
        for (&sf, &tf) in params[0].iter().zip(&params[1]) {
            if !(sf > 0.0 && sf < 1.0) {
                return Err(execution(format!(
                    "invalid smoothing factor. Expected: 0 < sf < 1, got: {sf:.6}"
                )));
            }
            if !(tf > 0.0 && tf < 1.0) {
                return Err(execution(format!(
                    "invalid trend factor. Expected: 0 < tf < 1, got: {tf:.6}"
                )));
            }
        }
    }
    // Sorting each window costs more than reading it.
    let sorts = name == "quantile_over_time";
    let mut out = Vec::with_capacity(source.series.len());
    for series in &source.series {
        // last_over_time acts like an offset and keeps the metric name.
        let labels = if name == "last_over_time" {
            series.labels.clone()
        } else {
            drop_name(&series.labels)
        };
        let mut s = StepSeries::floats(labels, vec![None; g.len]);
        source.for_each_window(ev, "range function", series, |i, window, hists| {
            let t = source.times[i];
            // Exact: the range source checked the earliest time minus the range.
            let from = t.saturating_sub(source.range);
            if !hists.is_empty() {
                match over_histogram_window(name, window, hists, from, t, source.range) {
                    Some(Outcome::Float(v)) => s.vals[i] = Some(v),
                    Some(Outcome::Histogram(h)) => s.set_hist(i, h),
                    Some(Outcome::Nothing) => {}
                    // A function of floats: the window's floats alone.
                    None if window.is_empty() => {}
                    None => s.vals[i] = over_window(name, window, from, t, source.range, g.time(i), &params, i),
                }
            } else if !window.is_empty() {
                s.vals[i] = over_window(name, window, from, t, source.range, g.time(i), &params, i);
            }
            let floats = if sorts { sort_cost(window.len()) } else { window.len() };
            1 + floats + hists.iter().map(|p| histogram_cost(&p.h)).sum::<usize>()
        })?;
        out.push(s);
        ev.hold(out.len().saturating_mul(g.len))?;
    }
    Ok(Out::Vector(dedupe_whole_range(ev, out)?))
}

/// What a range function gives for a window holding histograms.
enum Outcome {
    Float(f64),
    Histogram(FloatHistogram),
    /// No value: too few samples, floats and histograms mixed where they cannot be, histograms that cannot be
    /// combined.
    Nothing,
}

/// A sample of either kind (a histogram with its time).
enum Point<'a> {
    F,
    H(&'a FloatHistogram, i64),
}

/// The last two samples of a window of both kinds, oldest first, as Prometheus 3's `irate` and `idelta` pick
/// them; `None` when both are floats (the float functions answer then) or there are fewer than two.
fn last_two<'a>(w: &[Sample], hw: &'a [HistogramPoint]) -> Option<(Point<'a>, Point<'a>)> {
    let mut all: Vec<(i64, Point<'a>)> = w[w.len().saturating_sub(2)..].iter().map(|s| (s.t, Point::F)).collect();
    all.extend(
        hw[hw.len().saturating_sub(2)..]
            .iter()
            .map(|p| (p.t, Point::H(&p.h, p.t))),
    );
    all.sort_by_key(|(t, _)| *t);
    let mut newest = all.into_iter().rev();
    let (last, prev) = (newest.next()?.1, newest.next()?.1);
    if matches!((&prev, &last), (Point::F, Point::F)) {
        return None;
    }
    Some((prev, last))
}

/// A range function over a window `w` of floats and `hw` (not empty) of histograms, as Prometheus 3; `None` for
/// the functions that read floats only and ignore histograms.
fn over_histogram_window(
    name: &str,
    w: &[Sample],
    hw: &[HistogramPoint],
    start: i64,
    end: i64,
    range: i64,
) -> Option<Outcome> {
    let outcome = |h: Option<FloatHistogram>| h.map_or(Outcome::Nothing, Outcome::Histogram);
    Some(match name {
        "rate" | "increase" | "delta" => {
            if !w.is_empty() || hw.len() < 2 {
                return Some(Outcome::Nothing);
            }
            let counter = name != "delta";
            let Some(mut h) = histogram::change(hw, counter) else {
                return Some(Outcome::Nothing);
            };
            let (first, last) = (&hw[0], &hw[hw.len() - 1]);
            // Prometheus 3 bounds a histogram counter's extrapolation by its count reaching zero.
            let to_zero = (counter && h.count > 0.0 && first.h.count >= 0.0)
                .then(|| ZeroClamp::AfterThreshold((last.t - first.t) as f64 / 1000.0 * (first.h.count / h.count)));
            h.mul(extrapolation(
                first.t,
                last.t,
                hw.len(),
                start,
                end,
                range,
                name == "rate",
                to_zero.unwrap_or(ZeroClamp::None),
            ));
            Outcome::Histogram(h)
        }
        "irate" | "idelta" => {
            let (prev, last) = last_two(w, hw)?;
            match (prev, last) {
                (Point::H(a, ta), Point::H(b, tb)) if tb > ta => {
                    let rate = name == "irate";
                    let mut h = if !rate || !b.detect_reset(a) {
                        match b.sub(a) {
                            Ok(h) => h,
                            Err(_) => return Some(Outcome::Nothing),
                        }
                    } else {
                        b.clone()
                    };
                    h.counter_reset_hint = CounterResetHint::Gauge;
                    h.compact(0);
                    if rate {
                        h.div((tb - ta) as f64 / 1000.0);
                    }
                    Outcome::Histogram(h)
                }
                _ => Outcome::Nothing,
            }
        }
        "last_over_time" => match w.last() {
            Some(f) if f.t > hw[hw.len() - 1].t => Outcome::Float(f.v),
            _ => Outcome::Histogram(hw[hw.len() - 1].h.clone()),
        },
        "count_over_time" => Outcome::Float((w.len() + hw.len()) as f64),
        "present_over_time" => Outcome::Float(1.0),
        "sum_over_time" | "avg_over_time" if !w.is_empty() => Outcome::Nothing,
        "sum_over_time" => outcome(histogram::sum(hw.iter().map(|p| &p.h))),
        "avg_over_time" => outcome(histogram::mean(hw.iter().map(|p| &p.h))),
        // Each kind counted on its own.
        "resets" => Outcome::Float(
            (w.windows(2).filter(|p| p[1].v < p[0].v).count()
                + hw.windows(2).filter(|p| p[1].h.detect_reset(&p[0].h)).count()) as f64,
        ),
        "changes" => Outcome::Float(
            (w.windows(2)
                .filter(|p| p[1].v != p[0].v && !(p[1].v.is_nan() && p[0].v.is_nan()))
                .count()
                + hw.windows(2).filter(|p| !p[1].h.same_as(&p[0].h)).count()) as f64,
        ),
        _ => return None,
    })
}

/// One range function over one window `w` (not empty) ending at `end`, starting at `start`.
#[allow(clippy::too_many_arguments)]
fn over_window(
    name: &str,
    w: &[Sample],
    start: i64,
    end: i64,
    range: i64,
    step_time: i64,
    params: &[Vec<f64>],
    i: usize,
) -> Option<f64> {
    let last = w[w.len() - 1];
    match name {
        "rate" => extrapolated_rate(w, start, end, range, true, true),
        "increase" => extrapolated_rate(w, start, end, range, true, false),
        "delta" => extrapolated_rate(w, start, end, range, false, false),
        "irate" | "idelta" => {
            if w.len() < 2 {
                return None;
            }
            let prev = w[w.len() - 2];
            let rate = name == "irate";
            let value = if rate && last.v < prev.v {
                last.v
            } else {
                last.v - prev.v
            };
            let interval = last.t - prev.t;
            if interval == 0 {
                return None;
            }
            Some(if rate {
                value / (interval as f64 / 1000.0)
            } else {
                value
            })
        }
        "deriv" => {
            if w.len() < 2 {
                return None;
            }
            Some(linear_regression(w, w[0].t).0)
        }
        "predict_linear" => {
            if w.len() < 2 {
                return None;
            }
            let (slope, intercept) = linear_regression(w, step_time);
            Some(slope * params[0][i] + intercept)
        }
        "holt_winters" => holt_winters(w, params[0][i], params[1][i]),
        "resets" => Some(w.windows(2).filter(|p| p[1].v < p[0].v).count() as f64),
        "changes" => Some(
            w.windows(2)
                .filter(|p| p[1].v != p[0].v && !(p[1].v.is_nan() && p[0].v.is_nan()))
                .count() as f64,
        ),
        "avg_over_time" => Some(avg_over_time(w)),
        "min_over_time" => Some(
            w.iter()
                .skip(1)
                .fold(w[0].v, |m, s| if s.v < m || m.is_nan() { s.v } else { m }),
        ),
        "max_over_time" => Some(
            w.iter()
                .skip(1)
                .fold(w[0].v, |m, s| if s.v > m || m.is_nan() { s.v } else { m }),
        ),
        "sum_over_time" => Some(kahan_sum(w.iter().map(|s| s.v))),
        "count_over_time" => Some(w.len() as f64),
        "quantile_over_time" => Some(quantile(params[0][i], w.iter().map(|s| s.v).collect())),
        "stddev_over_time" => Some(stdvar_over_time(w).sqrt()),
        "stdvar_over_time" => Some(stdvar_over_time(w)),
        "last_over_time" => Some(last.v),
        "present_over_time" => Some(1.0),
        _ => None,
    }
}

/// `rate`, `increase` and `delta`: the change over the window, corrected for counter resets, extrapolated to
/// the window's edges unless the series starts or ends well inside it (Prometheus' `extrapolatedRate`).
fn extrapolated_rate(w: &[Sample], start: i64, end: i64, range: i64, counter: bool, rate: bool) -> Option<f64> {
    if w.len() < 2 {
        return None;
    }
    let (first, last) = (w[0], w[w.len() - 1]);
    let mut result = last.v - first.v;
    if counter {
        let mut prev = first.v;
        for s in &w[1..] {
            if s.v < prev {
                result += prev;
            }
            prev = s.v;
        }
    }
    // A counter is not extrapolated below zero: the time it would take to rise from zero bounds the start.
    let to_zero = (counter && result > 0.0 && first.v >= 0.0)
        .then(|| ZeroClamp::BeforeThreshold((last.t - first.t) as f64 / 1000.0 * (first.v / result)));
    Some(
        result
            * extrapolation(
                first.t,
                last.t,
                w.len(),
                start,
                end,
                range,
                rate,
                to_zero.unwrap_or(ZeroClamp::None),
            ),
    )
}

/// How a counter's extrapolation before its first sample is bounded by the time it would take to rise from
/// zero (seconds).
enum ZeroClamp {
    None,
    /// Prometheus 2 (floats): the bound applies before the start is compared with the threshold.
    BeforeThreshold(f64),
    /// Prometheus 3 (histograms): the bound applies to what the threshold rule gave.
    AfterThreshold(f64),
}

/// The factor that extrapolates the change between samples at `first` and `last` (of `n`) to the window
/// `[start, end]`: to each edge if the samples come within 1.1 average intervals of it, else half an interval
/// beyond them; per second of the window when `rate`.
#[allow(clippy::too_many_arguments)]
fn extrapolation(
    first: i64,
    last: i64,
    n: usize,
    start: i64,
    end: i64,
    range: i64,
    rate: bool,
    zero: ZeroClamp,
) -> f64 {
    let mut to_start = (first - start) as f64 / 1000.0;
    let to_end = (end - last) as f64 / 1000.0;
    let sampled = (last - first) as f64 / 1000.0;
    let average_interval = sampled / (n - 1) as f64;
    if let ZeroClamp::BeforeThreshold(to_zero) = zero {
        to_start = to_start.min(to_zero);
    }
    let threshold = average_interval * 1.1;
    if to_start >= threshold {
        to_start = average_interval / 2.0;
    }
    if let ZeroClamp::AfterThreshold(to_zero) = zero {
        to_start = to_start.min(to_zero);
    }
    let mut extrapolate_to = sampled + to_start;
    extrapolate_to += if to_end < threshold {
        to_end
    } else {
        average_interval / 2.0
    };
    let mut factor = extrapolate_to / sampled;
    if rate {
        factor /= range as f64 / 1000.0;
    }
    factor
}

pub(crate) fn kahan_add(v: f64, sum: f64, c: f64) -> (f64, f64) {
    let t = sum + v;
    let c = if sum.abs() >= v.abs() {
        c + ((sum - t) + v)
    } else {
        c + ((v - t) + sum)
    };
    (t, c)
}

fn kahan_sum(vals: impl Iterator<Item = f64>) -> f64 {
    let (mut sum, mut c) = (0.0, 0.0);
    for v in vals {
        (sum, c) = kahan_add(v, sum, c);
    }
    if sum.is_infinite() { sum } else { sum + c }
}

/// Least-squares slope and intercept of the window against time in seconds from `intercept_time`.
fn linear_regression(w: &[Sample], intercept_time: i64) -> (f64, f64) {
    let init = w[0].v;
    if w.iter().all(|s| s.v == init) {
        return if init.is_infinite() {
            (f64::NAN, f64::NAN)
        } else {
            (0.0, init)
        };
    }
    let n = w.len() as f64;
    let (mut sx, mut cx, mut sy, mut cy, mut sxy, mut cxy, mut sx2, mut cx2) = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    for s in w {
        // In 128 bits: `predict_linear` takes the step's time, which an offset can put farther than i64 from
        // the window's samples.
        let x = (i128::from(s.t) - i128::from(intercept_time)) as f64 / 1000.0;
        (sx, cx) = kahan_add(x, sx, cx);
        (sy, cy) = kahan_add(s.v, sy, cy);
        (sxy, cxy) = kahan_add(x * s.v, sxy, cxy);
        (sx2, cx2) = kahan_add(x * x, sx2, cx2);
    }
    let (sx, sy, sxy, sx2) = (sx + cx, sy + cy, sxy + cxy, sx2 + cx2);
    let cov = sxy - sx * sy / n;
    let var = sx2 - sx * sx / n;
    let slope = cov / var;
    (slope, sy / n - slope * sx / n)
}

fn holt_winters(w: &[Sample], sf: f64, tf: f64) -> Option<f64> {
    if w.len() < 2 {
        return None;
    }
    let (mut s0, mut s1, mut b) = (0.0, w[0].v, w[1].v - w[0].v);
    for (i, s) in w.iter().enumerate().skip(1) {
        let x = sf * s.v;
        if i > 1 {
            b = tf * (s1 - s0) + (1.0 - tf) * b;
        }
        let y = (1.0 - sf) * (s1 + b);
        (s0, s1) = (s1, x + y);
    }
    Some(s1)
}

fn avg_over_time(w: &[Sample]) -> f64 {
    let (mut mean, mut c, mut count) = (0.0f64, 0.0f64, 0.0f64);
    for s in w {
        count += 1.0;
        if mean.is_infinite() {
            if s.v.is_infinite() && (mean > 0.0) == (s.v > 0.0) {
                continue;
            }
            if !s.v.is_infinite() && !s.v.is_nan() {
                continue;
            }
        }
        (mean, c) = kahan_add(s.v / count - mean / count, mean, c);
    }
    if mean.is_infinite() { mean } else { mean + c }
}

fn stdvar_over_time(w: &[Sample]) -> f64 {
    let (mut count, mut mean, mut c_mean, mut aux, mut c_aux) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for s in w {
        count += 1.0;
        let delta = s.v - (mean + c_mean);
        (mean, c_mean) = kahan_add(delta / count, mean, c_mean);
        (aux, c_aux) = kahan_add(delta * (s.v - (mean + c_mean)), aux, c_aux);
    }
    (aux + c_aux) / count
}

/// `histogram_quantile` over classic buckets: series grouped by their labels without `le` and `__name__`.
fn histogram_quantile(
    ev: &Evaluator<'_>,
    q: &[f64],
    series: Vec<StepSeries>,
    g: Grid,
) -> Result<Vec<StepSeries>, PromqlError> {
    let mut index: HashMap<Labels, usize> = HashMap::new();
    let mut groups: Vec<(Labels, Vec<(f64, usize)>)> = Vec::new();
    for (i, s) in series.iter().enumerate() {
        ev.work(4 * s.labels.len() + 1, PHASE)?;
        let Some(upper) = s.labels.get("le").and_then(|le| le.trim().parse::<f64>().ok()) else {
            continue;
        };
        let key = s.labels.filtered(|n| n != "le" && n != METRIC_NAME);
        let gi = *index.entry(key.clone()).or_insert_with(|| {
            groups.push((key, Vec::new()));
            groups.len() - 1
        });
        groups[gi].1.push((upper, i));
    }
    let mut out = Vec::with_capacity(groups.len());
    let mut buckets = Vec::new();
    for (labels, members) in groups {
        let mut vals = Vec::with_capacity(g.len);
        for (step, &q) in q.iter().enumerate() {
            // The buckets of a group are sorted at every step.
            ev.work(sort_cost(members.len()) + 1, PHASE)?;
            buckets.clear();
            buckets.extend(
                members
                    .iter()
                    .filter_map(|&(upper, i)| series[i].vals[step].map(|c| (upper, c))),
            );
            vals.push((!buckets.is_empty()).then(|| bucket_quantile(q, &mut buckets)));
        }
        out.push(StepSeries::floats(labels, vals));
    }
    Ok(out)
}

/// The quantile of classic buckets `(upper bound, cumulative count)` (Prometheus' `bucketQuantile`).
pub(crate) fn bucket_quantile(q: f64, buckets: &mut Vec<(f64, f64)>) -> f64 {
    if q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    // An `le` of "NaN" parses to a NaN bound: ordered first, as Prometheus 3 orders bounds (`cmp.Compare`).
    buckets.sort_by(|a, b| nan_first(a.0, b.0));
    if buckets.last().is_none_or(|b| b.0 != f64::INFINITY) {
        return f64::NAN;
    }
    // Buckets with the same bound are merged.
    buckets.dedup_by(|next, kept| {
        if next.0 == kept.0 {
            kept.1 += next.1;
            true
        } else {
            false
        }
    });
    // Counts must not decrease (they can, when buckets are scraped at slightly different times).
    let mut max = f64::NEG_INFINITY;
    for b in buckets.iter_mut() {
        if b.1 > max {
            max = b.1;
        } else if b.1 < max {
            b.1 = max;
        }
    }
    if buckets.len() < 2 {
        return f64::NAN;
    }
    let observations = buckets[buckets.len() - 1].1;
    if observations == 0.0 {
        return f64::NAN;
    }
    let mut rank = q * observations;
    let b = buckets[..buckets.len() - 1].partition_point(|b| b.1 < rank);
    if b == buckets.len() - 1 {
        return buckets[buckets.len() - 2].0;
    }
    if b == 0 && buckets[0].0 <= 0.0 {
        return buckets[0].0;
    }
    let (mut start, end, mut count) = (0.0, buckets[b].0, buckets[b].1);
    if b > 0 {
        start = buckets[b - 1].0;
        count -= buckets[b - 1].1;
        rank -= buckets[b - 1].1;
    }
    start + (end - start) * (rank / count)
}

/// A calendar field of the UTC time `secs` seconds after the epoch.
fn date_part(name: &str, secs: f64) -> f64 {
    let secs = secs as i64;
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    match name {
        "hour" => (of_day / 3600) as f64,
        "minute" => (of_day % 3600 / 60) as f64,
        "day_of_week" => (days + 4).rem_euclid(7) as f64,
        "day_of_month" => day as f64,
        "day_of_year" => (days - days_from_civil(year, 1, 1) + 1) as f64,
        "days_in_month" => days_in_month(year, month) as f64,
        "month" => month as f64,
        _ => year as f64,
    }
}
