//! Evaluation: every node is evaluated once for all the steps of the query, into one row of values per
//! series ([`StepSeries`]). A range query therefore walks each selected series once (a cursor that only moves
//! forward as the steps advance) instead of selecting again at every step, and label work (grouping, matching
//! signatures, dropping `__name__`) is done once per series, not once per step.

use crate::PromqlError;
use crate::error::execution;
use crate::query::{Series, Stats, align_up, at_ms, duration_ms, node_key, offset_ms};
use crate::value::{InstantSample, RangeSeries, Value};
use heddle_model::{Labels, METRIC_NAME, Sample, is_stale_nan};
use promql_parser::parser::{Expr, MatrixSelector, SubqueryExpr, VectorSelector};
use std::borrow::Cow;
use std::cell::Cell;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::time::Instant;

/// The evaluation times of a node: `start`, `start + step`, ..., `len` of them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grid {
    pub start: i64,
    pub step: i64,
    pub len: usize,
}

impl Grid {
    pub fn instant(t: i64) -> Self {
        Self {
            start: t,
            step: 1,
            len: 1,
        }
    }

    pub fn range(start: i64, end: i64, step: i64) -> Self {
        // `end - start` can pass i64 at the edges of time: the distance is taken unsigned.
        let steps = end.abs_diff(start) / step.unsigned_abs().max(1);
        let len = usize::try_from(steps).unwrap_or(usize::MAX).saturating_add(1);
        Self { start, step, len }
    }

    pub fn time(&self, i: usize) -> i64 {
        self.start + i as i64 * self.step
    }

    pub fn times(&self) -> impl Iterator<Item = i64> + '_ {
        (0..self.len).map(|i| self.time(i))
    }
}

/// A series' value at each step of a grid (`None`: no value at that step).
#[derive(Debug, Clone)]
pub(crate) struct StepSeries {
    pub labels: Labels,
    pub vals: Vec<Option<f64>>,
}

impl StepSeries {
    pub fn is_empty(&self) -> bool {
        self.vals.iter().all(Option::is_none)
    }
}

/// A node's value over a grid.
#[derive(Debug)]
pub(crate) enum Out {
    Scalar(Vec<f64>),
    Str(String),
    Vector(Vec<StepSeries>),
    /// A range vector: only at the top of an instant query.
    Matrix(Vec<Series>),
}

pub(crate) struct Evaluator<'q> {
    fetched: Vec<Vec<Series>>,
    index: &'q HashMap<usize, usize>,
    pub lookback: i64,
    pub default_step: i64,
    max_samples: usize,
    deadline: Option<Instant>,
    pub query_start: i64,
    pub query_end: i64,
    fetched_samples: usize,
    peak: Cell<usize>,
}

impl<'q> Evaluator<'q> {
    pub fn new(
        fetched: Vec<Vec<Series>>,
        index: &'q HashMap<usize, usize>,
        opts: &crate::QueryOptions,
        query_start: i64,
        query_end: i64,
    ) -> Result<Self, PromqlError> {
        let fetched_samples = fetched.iter().flatten().map(|s| s.samples.len()).sum();
        let eval = Self {
            fetched,
            index,
            lookback: opts.lookback_delta_ms,
            default_step: opts.default_subquery_step_ms,
            max_samples: opts.max_samples,
            deadline: opts.deadline,
            query_start,
            query_end,
            fetched_samples,
            peak: Cell::new(0),
        };
        eval.hold(0)?;
        Ok(eval)
    }

    pub fn stats(&self) -> Stats {
        Stats {
            total_queryable_samples: self.fetched_samples as u64,
            peak_samples: self.peak.get() as u64,
        }
    }

    /// Accounts for a node's result of `points` values held beside the fetched samples.
    pub fn hold(&self, points: usize) -> Result<(), PromqlError> {
        let now = self.fetched_samples + points;
        if now > self.peak.get() {
            self.peak.set(now);
        }
        if now > self.max_samples {
            return Err(PromqlError::TooManySamples {
                limit: self.max_samples,
            });
        }
        Ok(())
    }

    /// Fails once the query's deadline has passed; called once per series or step of work.
    pub fn check_deadline(&self, phase: &'static str) -> Result<(), PromqlError> {
        match self.deadline {
            Some(d) if Instant::now() >= d => Err(PromqlError::Timeout(phase)),
            _ => Ok(()),
        }
    }

    fn selected(&self, vs: &VectorSelector) -> Result<&[Series], PromqlError> {
        self.index
            .get(&node_key(vs))
            .and_then(|&i| self.fetched.get(i))
            .map(Vec::as_slice)
            .ok_or_else(|| execution("selector evaluated without a selection"))
    }

    /// The evaluation time of step `i` of `g` for a node with `at` and `offset`.
    pub fn eval_times(&self, g: Grid, at: Option<i64>, offset: i64) -> Vec<i64> {
        match at {
            Some(at) => vec![at - offset; g.len],
            None => g.times().map(|t| t - offset).collect(),
        }
    }

    /// The result of the whole query.
    pub fn top(&self, expr: &Expr, g: Grid, range: bool) -> Result<Value, PromqlError> {
        let out = self.eval(expr, g)?;
        let value = match out {
            Out::Scalar(v) if !range => Value::Scalar { t: g.start, v: v[0] },
            Out::Scalar(v) => Value::Matrix(vec![RangeSeries {
                labels: Labels::default(),
                samples: g.times().zip(v).map(|(t, v)| Sample::new(t, v)).collect(),
            }]),
            Out::Str(s) => Value::String { t: g.start, s },
            Out::Vector(series) if !range => Value::Vector(
                series
                    .into_iter()
                    .filter_map(|s| {
                        s.vals[0].map(|v| InstantSample {
                            labels: s.labels,
                            t: g.start,
                            v,
                        })
                    })
                    .collect(),
            ),
            Out::Vector(series) => {
                let mut out: Vec<RangeSeries> = series
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .map(|s| RangeSeries {
                        samples: g
                            .times()
                            .zip(s.vals)
                            .filter_map(|(t, v)| v.map(|v| Sample::new(t, v)))
                            .collect(),
                        labels: s.labels,
                    })
                    .collect();
                out.sort_by(|a, b| a.labels.cmp(&b.labels));
                Value::Matrix(out)
            }
            Out::Matrix(series) => {
                let mut out: Vec<RangeSeries> = series
                    .into_iter()
                    .filter(|s| !s.samples.is_empty())
                    .map(|s| RangeSeries {
                        labels: s.labels,
                        samples: s.samples,
                    })
                    .collect();
                out.sort_by(|a, b| a.labels.cmp(&b.labels));
                Value::Matrix(out)
            }
        };
        Ok(value)
    }

    pub fn eval(&self, expr: &Expr, g: Grid) -> Result<Out, PromqlError> {
        self.check_deadline("query evaluation")?;
        let out = match expr {
            Expr::NumberLiteral(n) => Out::Scalar(vec![n.val; g.len]),
            Expr::StringLiteral(s) => Out::Str(s.val.clone()),
            Expr::Paren(p) => self.eval(&p.expr, g)?,
            Expr::VectorSelector(vs) => Out::Vector(self.vector_selector(vs, g, false)?),
            Expr::MatrixSelector(ms) => Out::Matrix(self.range_source_of_matrix(ms, g)?.into_top()),
            Expr::Subquery(sq) => Out::Matrix(self.range_source_of_subquery(sq, g)?.into_top()),
            Expr::Unary(u) => match self.eval(&u.expr, g)? {
                Out::Scalar(v) => Out::Scalar(v.into_iter().map(|x| -x).collect()),
                Out::Vector(series) => Out::Vector(dedupe_per_step(
                    series
                        .into_iter()
                        .map(|s| StepSeries {
                            labels: drop_own_name(s.labels),
                            vals: s.vals.into_iter().map(|v| v.map(|x| -x)).collect(),
                        })
                        .collect(),
                )?),
                _ => return Err(execution("unary minus on a value that is not a scalar or vector")),
            },
            Expr::Binary(b) => crate::binary::eval(self, b, g)?,
            Expr::Aggregate(a) => crate::aggregate::eval(self, a, g)?,
            Expr::Call(c) => crate::functions::eval(self, c, g)?,
            Expr::Extension(_) => return Err(PromqlError::BadData("unknown expression".into())),
        };
        if let Out::Vector(series) = &out {
            self.hold(series.iter().map(|s| s.vals.iter().flatten().count()).sum())?;
        }
        Ok(out)
    }

    /// An instant vector selector: at each step, each series' latest sample within the lookback window
    /// `[t - lookback, t]`, unless it is a staleness marker. With `timestamps`, the value is the sample's
    /// timestamp in seconds instead (`timestamp(x)`).
    pub fn vector_selector(
        &self,
        vs: &VectorSelector,
        g: Grid,
        timestamps: bool,
    ) -> Result<Vec<StepSeries>, PromqlError> {
        let times = self.eval_times(
            g,
            at_ms(&vs.at, self.query_start, self.query_end),
            offset_ms(&vs.offset),
        );
        let mut out = Vec::new();
        for series in self.selected(vs)? {
            self.check_deadline("selecting series")?;
            let samples = &series.samples;
            let mut vals = Vec::with_capacity(g.len);
            // Number of samples at or before the current time: moves forward only while times increase.
            let mut upto = 0;
            let mut prev_t = i64::MIN;
            for &t in &times {
                if t < prev_t {
                    upto = samples.partition_point(|s| s.t <= t);
                } else {
                    while upto < samples.len() && samples[upto].t <= t {
                        upto += 1;
                    }
                }
                prev_t = t;
                let v = match upto.checked_sub(1).map(|i| samples[i]) {
                    Some(s) if s.t >= t - self.lookback && !is_stale_nan(s.v) => {
                        Some(if timestamps { s.t as f64 / 1000.0 } else { s.v })
                    }
                    _ => None,
                };
                vals.push(v);
            }
            let s = StepSeries {
                labels: series.labels.clone(),
                vals,
            };
            if !s.is_empty() {
                out.push(s);
                // Counted as it grows: a selector over many steps must fail before it has allocated them all.
                self.hold(out.len().saturating_mul(g.len))?;
            }
        }
        Ok(out)
    }

    /// The samples a range function reads for a matrix selector.
    pub fn range_source_of_matrix(&self, ms: &MatrixSelector, g: Grid) -> Result<RangeSource<'_>, PromqlError> {
        // Staleness markers are no values in a range; most series have none and are read in place.
        let series = self
            .selected(&ms.vs)?
            .iter()
            .map(|s| {
                if s.samples.iter().any(|x| is_stale_nan(x.v)) {
                    Cow::Owned(Series {
                        labels: s.labels.clone(),
                        samples: s.samples.iter().copied().filter(|x| !is_stale_nan(x.v)).collect(),
                    })
                } else {
                    Cow::Borrowed(s)
                }
            })
            .collect();
        let times = self.eval_times(
            g,
            at_ms(&ms.vs.at, self.query_start, self.query_end),
            offset_ms(&ms.vs.offset),
        );
        Ok(RangeSource {
            series,
            times,
            range: duration_ms(&ms.range),
        })
    }

    /// The samples a range function reads for a subquery: the inner expression evaluated at steps aligned to
    /// the subquery's step, over every window the outer steps read.
    pub fn range_source_of_subquery(&self, sq: &SubqueryExpr, g: Grid) -> Result<RangeSource<'_>, PromqlError> {
        let at = at_ms(&sq.at, self.query_start, self.query_end);
        let offset = offset_ms(&sq.offset);
        let range = duration_ms(&sq.range);
        let times = self.eval_times(g, at, offset);
        let step = sq.step.as_ref().map_or(self.default_step, duration_ms);
        let (first, last) = match (times.iter().min(), times.iter().max()) {
            (Some(&a), Some(&b)) => (a, b),
            _ => return Err(execution("subquery without steps")),
        };
        let inner_start = align_up(first - range, step);
        let series = if inner_start > last {
            Vec::new()
        } else {
            let inner = Grid::range(inner_start, last, step);
            // A subquery's steps are allocated per series: `x[1y:1ms]` must fail, not allocate.
            self.hold(inner.len)?;
            match self.eval(&sq.expr, inner)? {
                Out::Vector(series) => series
                    .into_iter()
                    .map(|s| {
                        Cow::Owned(Series {
                            samples: inner
                                .times()
                                .zip(s.vals)
                                .filter_map(|(t, v)| v.map(|v| Sample::new(t, v)))
                                .collect(),
                            labels: s.labels,
                        })
                    })
                    .collect(),
                Out::Scalar(v) => vec![Cow::Owned(Series {
                    labels: Labels::default(),
                    samples: inner.times().zip(v).map(|(t, v)| Sample::new(t, v)).collect(),
                })],
                _ => return Err(execution("subquery of a value that is not an instant vector")),
            }
        };
        Ok(RangeSource { series, times, range })
    }
}

/// Series and the window each step of a range function reads: the samples in `[t - range, t]` for each
/// evaluation time `t` (inclusive at both ends, as Prometheus 2).
pub(crate) struct RangeSource<'a> {
    /// Borrowed from the fetched series where they need no change.
    pub series: Vec<Cow<'a, Series>>,
    /// Evaluation time of each step, offset and `@` applied.
    pub times: Vec<i64>,
    pub range: i64,
}

impl RangeSource<'_> {
    /// Calls `f(step, window)` for each step of each series, windows found by cursors moving forward.
    pub fn for_each_window(&self, series: &Series, mut f: impl FnMut(usize, &[Sample])) {
        let samples = &series.samples;
        let (mut lo, mut hi) = (0usize, 0usize);
        let mut prev_t = i64::MIN;
        for (i, &t) in self.times.iter().enumerate() {
            let from = t - self.range;
            if t < prev_t {
                lo = samples.partition_point(|s| s.t < from);
                hi = samples.partition_point(|s| s.t <= t);
            } else {
                while lo < samples.len() && samples[lo].t < from {
                    lo += 1;
                }
                if hi < lo {
                    hi = lo;
                }
                while hi < samples.len() && samples[hi].t <= t {
                    hi += 1;
                }
            }
            prev_t = t;
            f(i, &samples[lo..hi]);
        }
    }

    /// A range vector at the top of an instant query: each series' samples in the one window.
    fn into_top(self) -> Vec<Series> {
        let t = self.times.first().copied().unwrap_or_default();
        let from = t - self.range;
        self.series
            .into_iter()
            .map(|s| Series {
                samples: s.samples.iter().copied().filter(|x| x.t >= from && x.t <= t).collect(),
                labels: s.labels.clone(),
            })
            .collect()
    }
}

pub(crate) fn drop_name(labels: &Labels) -> Labels {
    if labels.get(METRIC_NAME).is_none() {
        return labels.clone();
    }
    labels.filtered(|n| n != METRIC_NAME)
}

/// [`drop_name`] of a label set the caller owns, in place.
pub(crate) fn drop_own_name(labels: Labels) -> Labels {
    labels.without(METRIC_NAME)
}

/// Merges series that ended up with the same labels (after dropping `__name__`, `label_replace`...) into
/// one, failing as Prometheus does when two of them have a value at the same step.
pub(crate) fn dedupe_per_step(series: Vec<StepSeries>) -> Result<Vec<StepSeries>, PromqlError> {
    merge_same_labels(series, true)
}

/// Like [`dedupe_per_step`], but two series with the same labels fail even at different steps: what
/// Prometheus 2 does for the results of range functions (`rate({__name__=~"a|b"}[5m])`).
pub(crate) fn dedupe_whole_range(series: Vec<StepSeries>) -> Result<Vec<StepSeries>, PromqlError> {
    merge_same_labels(series, false)
}

fn merge_same_labels(series: Vec<StepSeries>, per_step: bool) -> Result<Vec<StepSeries>, PromqlError> {
    // Usually every label set is distinct (they come from distinct series): found by sorting, without copying.
    let mut order: Vec<usize> = (0..series.len()).collect();
    order.sort_unstable_by(|&a, &b| series[a].labels.cmp(&series[b].labels));
    if order.windows(2).all(|w| series[w[0]].labels != series[w[1]].labels) {
        return Ok(series.into_iter().filter(|s| !s.is_empty()).collect());
    }
    let mut out: Vec<StepSeries> = Vec::with_capacity(series.len());
    let mut at: HashMap<Labels, usize> = HashMap::with_capacity(series.len());
    for s in series {
        if s.is_empty() {
            continue;
        }
        match at.entry(s.labels.clone()) {
            Entry::Vacant(e) => {
                e.insert(out.len());
                out.push(s);
            }
            Entry::Occupied(e) => {
                let into = &mut out[*e.get()];
                for (a, b) in into.vals.iter_mut().zip(s.vals) {
                    match (&a, b) {
                        (_, None) => {}
                        (None, Some(v)) if per_step => *a = Some(v),
                        _ => return Err(execution("vector cannot contain metrics with the same labelset")),
                    }
                }
            }
        }
    }
    Ok(out)
}
