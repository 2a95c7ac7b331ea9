//! Aggregations: `sum`, `avg`, `count`, `min`, `max`, `group`, `stddev`, `stdvar`, `topk`, `bottomk`,
//! `quantile`, `count_values`, with `by` and `without`, as Prometheus 2.42 computes them.
//!
//! Each input series is assigned its group once; per step only the values are folded.

use crate::PromqlError;
use crate::deadline::sort_cost;
use crate::error::execution;
use crate::eval::{Evaluator, Grid, Out, StepSeries};
use crate::functions::{by_value_nan_last, go_format_float, quantile};
use crate::histogram;
use heddle_model::{FloatHistogram, Labels, METRIC_NAME};
use promql_parser::parser::token::{
    T_AVG, T_BOTTOMK, T_COUNT, T_COUNT_VALUES, T_GROUP, T_MAX, T_MIN, T_QUANTILE, T_STDDEV, T_STDVAR, T_SUM, T_TOPK,
    TokenType,
};
use promql_parser::parser::{AggregateExpr, LabelModifier};
use std::collections::HashMap;

/// The aggregations Prometheus 2.42 has (newer ones such as `limitk` are refused at parse time).
pub(crate) fn is_supported(op: TokenType) -> bool {
    matches!(
        op.id(),
        T_SUM
            | T_AVG
            | T_COUNT
            | T_MIN
            | T_MAX
            | T_GROUP
            | T_STDDEV
            | T_STDVAR
            | T_TOPK
            | T_BOTTOMK
            | T_QUANTILE
            | T_COUNT_VALUES
    )
}

/// Which labels a series keeps in its group's label set.
struct Grouping<'a> {
    without: bool,
    names: &'a [String],
}

impl Grouping<'_> {
    fn group_labels(&self, labels: &Labels) -> Labels {
        if self.without {
            labels.filtered(|n| n != METRIC_NAME && !self.names.iter().any(|l| l == n))
        } else {
            labels.filtered(|n| self.names.iter().any(|l| l == n))
        }
    }
}

pub(crate) fn eval(ev: &Evaluator<'_>, a: &AggregateExpr, g: Grid) -> Result<Out, PromqlError> {
    let op = a.op.id();
    let param = match &a.param {
        Some(p) => Some(ev.eval(p, g)?),
        None => None,
    };
    let Out::Vector(input) = ev.eval(&a.expr, g)? else {
        return Err(PromqlError::BadData(format!(
            "expected an instant vector in aggregation {}",
            a.op
        )));
    };
    let empty = Vec::new();
    let grouping = match &a.modifier {
        Some(LabelModifier::Include(l)) => Grouping {
            without: false,
            names: &l.labels,
        },
        Some(LabelModifier::Exclude(l)) => Grouping {
            without: true,
            names: &l.labels,
        },
        None => Grouping {
            without: false,
            names: &empty,
        },
    };
    match (op, param) {
        (T_COUNT_VALUES, Some(Out::Str(label))) => count_values(ev, input, &grouping, &label, g),
        (T_TOPK | T_BOTTOMK, Some(Out::Scalar(k))) => {
            Ok(Out::Vector(top_k(ev, input, &grouping, &k, op == T_TOPK, g)?))
        }
        (T_QUANTILE, Some(Out::Scalar(q))) => Ok(Out::Vector(fold(ev, &input, &grouping, g, |vals, i| {
            quantile(q[i], vals.to_vec())
        })?)),
        (T_SUM, None) => {
            let floats = fold(ev, &input, &grouping, g, |vals, _| vals.iter().sum())?;
            Ok(Out::Vector(with_histograms(
                ev,
                &input,
                &grouping,
                floats,
                histogram::sum,
            )?))
        }
        (T_AVG, None) => {
            let floats = fold(ev, &input, &grouping, g, |vals, _| mean(vals))?;
            Ok(Out::Vector(with_histograms(
                ev,
                &input,
                &grouping,
                floats,
                histogram::mean,
            )?))
        }
        // Values of either kind count.
        (T_COUNT, None) => Ok(Out::Vector(fold(
            ev,
            &presence(ev, &input)?,
            &grouping,
            g,
            |vals, _| vals.len() as f64,
        )?)),
        (T_GROUP, None) => Ok(Out::Vector(fold(ev, &presence(ev, &input)?, &grouping, g, |_, _| 1.0)?)),
        (T_MIN, None) => Ok(Out::Vector(fold(ev, &input, &grouping, g, |vals, _| {
            vals.iter()
                .skip(1)
                .fold(vals[0], |m, &v| if m > v || m.is_nan() { v } else { m })
        })?)),
        (T_MAX, None) => Ok(Out::Vector(fold(ev, &input, &grouping, g, |vals, _| {
            vals.iter()
                .skip(1)
                .fold(vals[0], |m, &v| if m < v || m.is_nan() { v } else { m })
        })?)),
        (T_STDVAR, None) => Ok(Out::Vector(fold(ev, &input, &grouping, g, |vals, _| variance(vals))?)),
        (T_STDDEV, None) => Ok(Out::Vector(fold(ev, &input, &grouping, g, |vals, _| {
            variance(vals).sqrt()
        })?)),
        _ => Err(PromqlError::BadData(format!(
            "invalid parameter for aggregation {}",
            a.op
        ))),
    }
}

/// Prometheus' running mean, which keeps an infinite mean instead of turning it into NaN.
fn mean(vals: &[f64]) -> f64 {
    let mut mean = vals[0];
    for (i, &v) in vals.iter().enumerate().skip(1) {
        let count = (i + 1) as f64;
        if mean.is_infinite() {
            if v.is_infinite() && (mean > 0.0) == (v > 0.0) {
                continue;
            }
            if !v.is_infinite() && !v.is_nan() {
                continue;
            }
        }
        mean += v / count - mean / count;
    }
    mean
}

/// Welford's population variance, as Prometheus' `stdvar`.
fn variance(vals: &[f64]) -> f64 {
    let (mut mean, mut acc) = (vals[0], 0.0);
    for (i, &v) in vals.iter().enumerate().skip(1) {
        let delta = v - mean;
        mean += delta / (i + 1) as f64;
        acc += delta * (v - mean);
    }
    acc / vals.len() as f64
}

/// Assigns each series its group (in order of first appearance) by its group labels.
fn groups(
    ev: &Evaluator<'_>,
    input: &[StepSeries],
    grouping: &Grouping<'_>,
) -> Result<(Vec<Labels>, Vec<usize>), PromqlError> {
    let mut ids: HashMap<Labels, usize> = HashMap::new();
    let mut labels = Vec::new();
    let mut member_of = Vec::with_capacity(input.len());
    for s in input {
        // A label set is copied and hashed: a few units per label.
        ev.work(4 * s.labels.len() + 1, "aggregation")?;
        let l = grouping.group_labels(&s.labels);
        let id = match ids.get(&l) {
            Some(&id) => id,
            None => {
                ids.insert(l.clone(), labels.len());
                labels.push(l);
                labels.len() - 1
            }
        };
        member_of.push(id);
    }
    Ok((labels, member_of))
}

/// Each series with 0 at the steps where it has a value of either kind: what `count` and `group` read.
fn presence(ev: &Evaluator<'_>, input: &[StepSeries]) -> Result<Vec<StepSeries>, PromqlError> {
    let mut out = Vec::with_capacity(input.len());
    for s in input {
        ev.work(s.vals.len(), "aggregation")?;
        out.push(StepSeries::floats(
            s.labels.clone(),
            (0..s.vals.len()).map(|i| s.has(i).then_some(0.0)).collect(),
        ));
    }
    Ok(out)
}

/// Adds to `out` (what [`fold`] made of the floats, one series per group) the histograms of each group and
/// step, combined by `combine`, as Prometheus 3's `sum` and `avg`: a group with floats and histograms at one
/// step, or with histograms that cannot be combined, has no value there.
fn with_histograms<'a>(
    ev: &Evaluator<'_>,
    input: &'a [StepSeries],
    grouping: &Grouping<'_>,
    mut out: Vec<StepSeries>,
    combine: impl Fn(std::vec::IntoIter<&'a FloatHistogram>) -> Option<FloatHistogram>,
) -> Result<Vec<StepSeries>, PromqlError> {
    if input.iter().all(|s| s.hists.is_empty()) {
        return Ok(out);
    }
    let (_, member_of) = groups(ev, input, grouping)?;
    let mut members: Vec<Vec<&StepSeries>> = vec![Vec::new(); out.len()];
    for (s, &gid) in input.iter().zip(&member_of) {
        members[gid].push(s);
    }
    for (series, members) in out.iter_mut().zip(members) {
        for step in 0..series.vals.len() {
            ev.work(members.len() + 1, "aggregation")?;
            let hs: Vec<&FloatHistogram> = members.iter().filter_map(|s| s.hist(step)).collect();
            if hs.is_empty() {
                continue;
            }
            if members.iter().any(|s| s.vals[step].is_some()) {
                series.clear(step);
                continue;
            }
            // Combining costs about one unit per bucket of each histogram.
            ev.work(hs.iter().map(|h| h.size_bytes() / 16).sum(), "aggregation")?;
            match combine(hs.into_iter()) {
                Some(h) => series.set_hist(step, h),
                None => series.clear(step),
            }
        }
    }
    Ok(out)
}

/// One output series per group: `f(float values present at the step, step)` where the group has any.
fn fold(
    ev: &Evaluator<'_>,
    input: &[StepSeries],
    grouping: &Grouping<'_>,
    g: Grid,
    f: impl Fn(&[f64], usize) -> f64,
) -> Result<Vec<StepSeries>, PromqlError> {
    let (labels, member_of) = groups(ev, input, grouping)?;
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); labels.len()];
    for (i, &gid) in member_of.iter().enumerate() {
        members[gid].push(i);
    }
    let mut out = Vec::with_capacity(labels.len());
    let mut vals_at = Vec::new();
    for (labels, members) in labels.into_iter().zip(members) {
        let mut vals = Vec::with_capacity(g.len);
        for step in 0..g.len {
            // One group of every series (`sum(x)`) is all the work in one loop: checked per step.
            ev.work(members.len() + 1, "aggregation")?;
            vals_at.clear();
            vals_at.extend(members.iter().filter_map(|&m| input[m].vals[step]));
            vals.push(if vals_at.is_empty() {
                None
            } else {
                Some(f(&vals_at, step))
            });
        }
        out.push(StepSeries::floats(labels, vals));
    }
    Ok(out)
}

/// `topk`/`bottomk`: per group and step, the `k` largest (smallest) values, NaN last; the series keep their
/// labels. In an instant query the result is in Prometheus' order: group by group, best first.
fn top_k(
    ev: &Evaluator<'_>,
    input: Vec<StepSeries>,
    grouping: &Grouping<'_>,
    k: &[f64],
    top: bool,
    g: Grid,
) -> Result<Vec<StepSeries>, PromqlError> {
    let (labels, member_of) = groups(ev, &input, grouping)?;
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); labels.len()];
    for (i, &gid) in member_of.iter().enumerate() {
        members[gid].push(i);
    }
    let mut keep = vec![vec![false; g.len]; input.len()];
    // Instant query: the output order, group by group.
    let mut order = Vec::new();
    for step in 0..g.len {
        ev.work(1, "aggregation")?;
        let kf = k[step];
        if kf.is_nan() || kf.abs() >= 9.223_372_036_854_776e18 {
            return Err(execution(format!(
                "Scalar value {} overflows int64",
                go_format_float(kf)
            )));
        }
        let k = kf.trunc() as i64;
        if k < 1 {
            continue;
        }
        for members in &members {
            ev.work(members.len(), "aggregation")?;
            let mut present: Vec<(usize, f64)> = members
                .iter()
                .filter_map(|&m| input[m].vals[step].map(|v| (m, v)))
                .collect();
            ev.work(sort_cost(present.len()), "aggregation")?;
            present.sort_by(|a, b| rank(a.1, b.1, top));
            for &(m, _) in present.iter().take(usize::try_from(k).unwrap_or(usize::MAX)) {
                keep[m][step] = true;
                if g.len == 1 {
                    order.push(m);
                }
            }
        }
    }
    let mut input: Vec<Option<StepSeries>> = input.into_iter().map(Some).collect();
    let take = |m: usize, input: &mut Vec<Option<StepSeries>>| {
        input[m].take().map(|mut s| {
            // Histograms have no rank.
            s.hists = Vec::new();
            for (v, &kept) in s.vals.iter_mut().zip(&keep[m]) {
                if !kept {
                    *v = None;
                }
            }
            s
        })
    };
    let out = if g.len == 1 {
        order.into_iter().filter_map(|m| take(m, &mut input)).collect()
    } else {
        (0..input.len())
            .filter_map(|m| take(m, &mut input))
            .filter(|s: &StepSeries| !s.is_empty())
            .collect()
    };
    Ok(out)
}

/// Best first: largest for `topk`, smallest for `bottomk`; NaN after every number, as Prometheus ranks them.
fn rank(a: f64, b: f64, top: bool) -> std::cmp::Ordering {
    by_value_nan_last(a, b, top)
}

/// `count_values("label", v)`: per group and step, how many series have each value; the value (as Go
/// formats it) becomes the label.
fn count_values(
    ev: &Evaluator<'_>,
    input: Vec<StepSeries>,
    grouping: &Grouping<'_>,
    label: &str,
    g: Grid,
) -> Result<Out, PromqlError> {
    // Any non-empty name, as in Prometheus 3, so that a tenant with UTF-8 names can count into one.
    if label.is_empty() {
        return Err(execution(format!("invalid label name {label:?}")));
    }
    let mut names = grouping.names.to_vec();
    if !grouping.without {
        names.push(label.to_owned());
    }
    let grouping = Grouping {
        without: grouping.without,
        names: &names,
    };
    let mut out: Vec<StepSeries> = Vec::new();
    let mut index: HashMap<Labels, usize> = HashMap::new();
    for s in &input {
        for (step, v) in s.vals.iter().enumerate() {
            let Some(v) = v else {
                ev.work(1, "aggregation")?;
                continue;
            };
            // Formatting the value and building and hashing a label set: some tens of units.
            ev.work(8 * s.labels.len() + 16, "aggregation")?;
            let with_value = s
                .labels
                .with(label, &go_format_float(*v))
                .map_err(|e| execution(e.to_string()))?;
            let key = grouping.group_labels(&with_value);
            let idx = match index.get(&key) {
                Some(&idx) => idx,
                None => {
                    // Each new value is a series of every step: counted before it is allocated, as the series
                    // of a selector are.
                    ev.hold(out.len().saturating_add(1).saturating_mul(g.len))?;
                    index.insert(key.clone(), out.len());
                    out.push(StepSeries::floats(key, vec![None; g.len]));
                    out.len() - 1
                }
            };
            let slot = &mut out[idx].vals[step];
            *slot = Some(slot.unwrap_or(0.0) + 1.0);
        }
    }
    Ok(Out::Vector(out))
}
