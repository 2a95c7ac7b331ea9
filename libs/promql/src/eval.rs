//! Evaluation: every node is evaluated once for all the steps of the query, into one row of values per
//! series ([`StepSeries`]). A range query therefore walks each selected series once (a cursor that only moves
//! forward as the steps advance) instead of selecting again at every step, and label work (grouping, matching
//! signatures, dropping `__name__`) is done once per series, not once per step.

use crate::PromqlError;
use crate::deadline::{Watch, sort_cost};
use crate::error::execution;
use crate::query::{Series, Stats, node_key};
use crate::times::{align_up, at_ms, back, duration_ms, offset_ms};
use crate::value::{HistogramPoint, InstantSample, RangeSeries, Value};
use heddle_model::{FloatHistogram, Labels, METRIC_NAME, Sample, is_stale_nan};
use promql_parser::parser::{Expr, MatrixSelector, SubqueryExpr, VectorSelector};
use std::borrow::Cow;
use std::cell::Cell;
use std::collections::HashMap;
use std::collections::hash_map::Entry;

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
        // Unsigned: `i * step` can pass i64 between the extreme times even where `start + i * step` does not.
        // Exact for every step of the grid (they lie between `start` and `end`).
        self.start
            .saturating_add_unsigned((i as u64).saturating_mul(self.step.unsigned_abs()))
    }

    pub fn times(&self) -> impl Iterator<Item = i64> + '_ {
        (0..self.len).map(|i| self.time(i))
    }
}

/// A series' value at each step of a grid: a float in `vals`, a native histogram in `hists`, or neither (no
/// value at that step), never both.
#[derive(Debug, Clone)]
pub(crate) struct StepSeries {
    pub labels: Labels,
    pub vals: Vec<Option<f64>>,
    /// Empty when the series has no histogram at any step (most series): float-only work never sees it.
    pub hists: Vec<Option<FloatHistogram>>,
}

/// A value at one step, borrowed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Point<'a> {
    F(f64),
    H(&'a FloatHistogram),
}

impl StepSeries {
    /// A series of floats only.
    pub fn floats(labels: Labels, vals: Vec<Option<f64>>) -> Self {
        Self {
            labels,
            vals,
            hists: Vec::new(),
        }
    }

    /// The histogram at step `i`, if that step holds one.
    pub fn hist(&self, i: usize) -> Option<&FloatHistogram> {
        self.hists.get(i).and_then(Option::as_ref)
    }

    /// The value at step `i`, of either kind.
    pub fn at(&self, i: usize) -> Option<Point<'_>> {
        match self.vals[i] {
            Some(v) => Some(Point::F(v)),
            None => self.hist(i).map(Point::H),
        }
    }

    /// Whether step `i` holds a value of either kind.
    pub fn has(&self, i: usize) -> bool {
        self.vals[i].is_some() || self.hist(i).is_some()
    }

    /// Removes the value at step `i`, of either kind.
    pub fn clear(&mut self, i: usize) {
        self.vals[i] = None;
        if let Some(h) = self.hists.get_mut(i) {
            *h = None;
        }
    }

    /// Sets step `i` to histogram `h`.
    pub fn set_hist(&mut self, i: usize, h: FloatHistogram) {
        if self.hists.is_empty() {
            self.hists = vec![None; self.vals.len()];
        }
        self.vals[i] = None;
        self.hists[i] = Some(h);
    }

    pub fn is_empty(&self) -> bool {
        self.vals.iter().all(Option::is_none) && self.hists.iter().all(Option::is_none)
    }

    /// The samples this series holds for the sample limit: one per float, [`histogram_weight`] per histogram.
    pub fn weight(&self) -> usize {
        self.vals.iter().flatten().count() + self.hists.iter().flatten().map(histogram_weight).sum::<usize>()
    }
}

/// What a histogram counts for against the sample limit, as in Prometheus 3: one sample per 16 bytes of its
/// size ([`FloatHistogram::size_bytes`], rounded), so 11 for the smallest histogram and one more per two
/// buckets or spans.
pub(crate) fn histogram_weight(h: &FloatHistogram) -> usize {
    (h.size_bytes() + 8) / 16
}

/// Whether a histogram sample is a staleness marker.
pub(crate) fn is_stale_histogram(p: &HistogramPoint) -> bool {
    is_stale_nan(p.h.sum)
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
    watch: Watch,
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
        let fetched_samples = fetched
            .iter()
            .flatten()
            .map(|s| s.samples.len() + s.histograms.iter().map(|p| histogram_weight(&p.h)).sum::<usize>())
            .sum();
        let eval = Self {
            fetched,
            index,
            lookback: opts.lookback_delta_ms,
            default_step: opts.default_subquery_step_ms,
            max_samples: opts.max_samples,
            watch: Watch::new(opts.deadline, opts.cancel.clone(), opts.clock.clone()),
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

    /// Fails once the query's deadline has passed or its caller gave up: a check now.
    pub fn check_deadline(&self, phase: &'static str) -> Result<(), PromqlError> {
        self.watch.check(phase)
    }

    /// Counts `units` of work (about one per value or sample touched) done in `phase`, failing as
    /// [`Evaluator::check_deadline`] does once in a while: called in every loop whose length grows with the
    /// query.
    #[inline]
    pub fn work(&self, units: usize, phase: &'static str) -> Result<(), PromqlError> {
        self.watch.work(units, phase)
    }

    fn selected(&self, vs: &VectorSelector) -> Result<&[Series], PromqlError> {
        self.index
            .get(&node_key(vs))
            .and_then(|&i| self.fetched.get(i))
            .map(Vec::as_slice)
            .ok_or_else(|| execution("selector evaluated without a selection"))
    }

    /// The evaluation time of each step of `g` for a node with `at` and `offset`.
    pub fn eval_times(&self, g: Grid, at: Option<i64>, offset: i64) -> Result<Vec<i64>, PromqlError> {
        match at {
            Some(at) => Ok(vec![back(at, offset, "offset")?; g.len]),
            // The times increase: the first and last bound the others.
            None => {
                back(g.time(0), offset, "offset")?;
                back(g.time(g.len.saturating_sub(1)), offset, "offset")?;
                self.work(g.len, "query evaluation")?;
                Ok(g.times().map(|t| t.saturating_sub(offset)).collect())
            }
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
                histograms: Vec::new(),
            }]),
            Out::Str(s) => Value::String { t: g.start, s },
            Out::Vector(series) if !range => Value::Vector(
                series
                    .into_iter()
                    .filter_map(|mut s| {
                        let (v, h) = match (s.vals[0], s.hists.get_mut(0).and_then(Option::take)) {
                            (Some(v), _) => (v, None),
                            (None, Some(h)) => (0.0, Some(Box::new(h))),
                            (None, None) => return None,
                        };
                        Some(InstantSample {
                            labels: s.labels,
                            t: g.start,
                            v,
                            h,
                        })
                    })
                    .collect(),
            ),
            Out::Vector(series) => {
                let mut out: Vec<RangeSeries> = Vec::with_capacity(series.len());
                for s in series {
                    self.work(2 * s.vals.len(), "preparing the result")?;
                    if s.is_empty() {
                        continue;
                    }
                    let (samples, histograms) = step_points(g, s.vals, s.hists);
                    out.push(RangeSeries {
                        labels: s.labels,
                        samples,
                        histograms,
                    });
                }
                self.sort_by_labels(&mut out, |s| &s.labels)?;
                Value::Matrix(out)
            }
            Out::Matrix(series) => {
                let mut out: Vec<RangeSeries> = series
                    .into_iter()
                    .filter(|s| !s.samples.is_empty() || !s.histograms.is_empty())
                    .map(|s| RangeSeries {
                        labels: s.labels,
                        samples: s.samples,
                        histograms: s.histograms,
                    })
                    .collect();
                self.sort_by_labels(&mut out, |s| &s.labels)?;
                Value::Matrix(out)
            }
        };
        Ok(value)
    }

    /// Sorts `items` by their labels. A sort cannot stop half-way: the deadline is checked before it, with its
    /// cost counted, and after.
    pub fn sort_by_labels<T>(&self, items: &mut [T], labels: impl Fn(&T) -> &Labels) -> Result<(), PromqlError> {
        self.work(sort_cost(items.len()), "sorting")?;
        items.sort_by(|a, b| labels(a).cmp(labels(b)));
        self.check_deadline("sorting")
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
                // A histogram is negated as `h * -1`, as in Prometheus 3.
                Out::Vector(series) => {
                    let mut out = Vec::with_capacity(series.len());
                    for s in series {
                        self.work(s.vals.len() + s.hists.len(), "unary minus")?;
                        out.push(StepSeries {
                            labels: drop_own_name(s.labels),
                            vals: s.vals.into_iter().map(|v| v.map(|x| -x)).collect(),
                            hists: s
                                .hists
                                .into_iter()
                                .map(|h| {
                                    h.map(|mut h| {
                                        h.mul(-1.0);
                                        h
                                    })
                                })
                                .collect(),
                        });
                    }
                    Out::Vector(dedupe_per_step(self, out)?)
                }
                _ => return Err(execution("unary minus on a value that is not a scalar or vector")),
            },
            Expr::Binary(b) => crate::binary::eval(self, b, g)?,
            Expr::Aggregate(a) => crate::aggregate::eval(self, a, g)?,
            Expr::Call(c) => crate::functions::eval(self, c, g)?,
            Expr::Extension(_) => return Err(PromqlError::BadData("unknown expression".into())),
        };
        if let Out::Vector(series) = &out {
            self.hold(series.iter().map(StepSeries::weight).sum())?;
        }
        Ok(out)
    }

    /// An instant vector selector: at each step, each series' latest sample within the lookback window
    /// `[t - lookback, t]`, float or histogram, unless it is a staleness marker. With `timestamps`, the value is
    /// the sample's timestamp in seconds instead (`timestamp(x)`), for histograms too.
    pub fn vector_selector(
        &self,
        vs: &VectorSelector,
        g: Grid,
        timestamps: bool,
    ) -> Result<Vec<StepSeries>, PromqlError> {
        let times = self.eval_times(
            g,
            at_ms(&vs.at, self.query_start, self.query_end)?,
            offset_ms(&vs.offset)?,
        )?;
        // The earliest time any step looks back to: every `t - lookback` below is at or after it.
        if let Some(&first) = times.iter().min() {
            back(first, self.lookback, "lookback")?;
        }
        let mut out = Vec::new();
        let mut held = 0usize;
        for series in self.selected(vs)? {
            let (samples, histograms) = (&series.samples, &series.histograms);
            self.work(samples.len() + histograms.len(), "selecting series")?;
            let mut s = StepSeries::floats(series.labels.clone(), vec![None; g.len]);
            // Number of samples of each kind at or before the current time: move forward only while times
            // increase.
            let (mut upto, mut upto_h) = (0, 0);
            let mut prev_t = i64::MIN;
            for (i, &t) in times.iter().enumerate() {
                if i % WORK_BATCH == WORK_BATCH - 1 {
                    self.work(WORK_BATCH, "selecting series")?;
                }
                let oldest = t.saturating_sub(self.lookback);
                if t < prev_t {
                    upto = samples.partition_point(|s| s.t <= t);
                    upto_h = histograms.partition_point(|p| p.t <= t);
                } else {
                    while upto < samples.len() && samples[upto].t <= t {
                        upto += 1;
                    }
                    while upto_h < histograms.len() && histograms[upto_h].t <= t {
                        upto_h += 1;
                    }
                }
                prev_t = t;
                let float = upto.checked_sub(1).map(|i| samples[i]);
                let hist = upto_h.checked_sub(1).map(|i| &histograms[i]);
                // The newest sample of either kind; a storage never holds both at one time.
                let newest_hist = match (float, hist) {
                    (Some(f), Some(h)) => (h.t > f.t).then_some(h),
                    (None, h) => h,
                    (Some(_), None) => None,
                };
                match (newest_hist, float) {
                    (Some(h), _) if h.t >= oldest && !is_stale_histogram(h) => {
                        if timestamps {
                            s.vals[i] = Some(h.t as f64 / 1000.0);
                        } else {
                            s.set_hist(i, h.h.clone());
                        }
                    }
                    (None, Some(f)) if f.t >= oldest && !is_stale_nan(f.v) => {
                        s.vals[i] = Some(if timestamps { f.t as f64 / 1000.0 } else { f.v });
                    }
                    _ => {}
                }
            }
            if !s.is_empty() {
                // Counted as it grows: a selector over many steps must fail before it has allocated them all.
                held = held.saturating_add(g.len.max(s.weight()));
                out.push(s);
                self.hold(held)?;
            }
        }
        Ok(out)
    }

    /// The samples a range function reads for a matrix selector.
    pub fn range_source_of_matrix(&self, ms: &MatrixSelector, g: Grid) -> Result<RangeSource<'_>, PromqlError> {
        let times = self.eval_times(
            g,
            at_ms(&ms.vs.at, self.query_start, self.query_end)?,
            offset_ms(&ms.vs.offset)?,
        )?;
        let range = duration_ms(&ms.range, "range")?;
        if let Some(&first) = times.iter().min() {
            back(first, range, "range")?;
        }
        // Staleness markers are no values in a range; most series have none and are read in place.
        let selected = self.selected(&ms.vs)?;
        let mut series = Vec::with_capacity(selected.len());
        for s in selected {
            self.work(s.samples.len() + s.histograms.len(), "selecting series")?;
            series.push(
                if s.samples.iter().any(|x| is_stale_nan(x.v)) || s.histograms.iter().any(is_stale_histogram) {
                    Cow::Owned(Series {
                        labels: s.labels.clone(),
                        samples: s.samples.iter().copied().filter(|x| !is_stale_nan(x.v)).collect(),
                        histograms: s
                            .histograms
                            .iter()
                            .filter(|p| !is_stale_histogram(p))
                            .cloned()
                            .collect(),
                    })
                } else {
                    Cow::Borrowed(s)
                },
            );
        }
        Ok(RangeSource { series, times, range })
    }

    /// The samples a range function reads for a subquery: the inner expression evaluated at steps aligned to
    /// the subquery's step, over every window the outer steps read.
    pub fn range_source_of_subquery(&self, sq: &SubqueryExpr, g: Grid) -> Result<RangeSource<'_>, PromqlError> {
        let at = at_ms(&sq.at, self.query_start, self.query_end)?;
        let offset = offset_ms(&sq.offset)?;
        let range = duration_ms(&sq.range, "subquery range")?;
        let times = self.eval_times(g, at, offset)?;
        let step = match &sq.step {
            Some(d) => duration_ms(d, "subquery step")?,
            None => self.default_step,
        };
        if step <= 0 {
            return Err(PromqlError::BadData("subquery step must be positive".into()));
        }
        let (first, last) = match (times.iter().min(), times.iter().max()) {
            (Some(&a), Some(&b)) => (a, b),
            _ => return Err(execution("subquery without steps")),
        };
        let inner_start = align_up(back(first, range, "subquery range")?, step)?;
        let series = if inner_start > last {
            Vec::new()
        } else {
            let inner = Grid::range(inner_start, last, step);
            // A subquery's steps are allocated per series: `x[1y:1ms]` must fail, not allocate.
            self.hold(inner.len)?;
            match self.eval(&sq.expr, inner)? {
                Out::Vector(series) => {
                    let mut out = Vec::with_capacity(series.len());
                    for s in series {
                        self.work(2 * inner.len, "subquery")?;
                        let (samples, histograms) = step_points(inner, s.vals, s.hists);
                        out.push(Cow::Owned(Series {
                            labels: s.labels,
                            samples,
                            histograms,
                        }));
                    }
                    out
                }
                Out::Scalar(v) => {
                    self.work(2 * inner.len, "subquery")?;
                    vec![Cow::Owned(Series::floats(
                        Labels::default(),
                        inner.times().zip(v).map(|(t, v)| Sample::new(t, v)).collect(),
                    ))]
                }
                _ => return Err(execution("subquery of a value that is not an instant vector")),
            }
        };
        Ok(RangeSource { series, times, range })
    }
}

/// Units of work the tightest loops count locally before handing them to [`Evaluator::work`]: far below
/// [`crate::deadline::CHECK_EVERY`], so checks come about as often.
pub(crate) const WORK_BATCH: usize = 256;

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
    /// Calls `f(step, floats, histograms)` for each step of each series with the samples of each kind in its
    /// window, found by cursors moving forward. `f` answers the work it did, in [`Evaluator::work`] units (the
    /// cost of a window depends on the function), which is counted against the deadline in `phase`: one series
    /// of 11,000 steps can hold all of a query's work.
    pub fn for_each_window(
        &self,
        ev: &Evaluator<'_>,
        phase: &'static str,
        series: &Series,
        mut f: impl FnMut(usize, &[Sample], &[HistogramPoint]) -> usize,
    ) -> Result<(), PromqlError> {
        let mut floats = Cursor::default();
        let mut hists = Cursor::default();
        let mut prev_t = i64::MIN;
        // Counted here and handed over in batches: a window of a few samples costs a few nanoseconds.
        let mut pending = 0usize;
        for (i, &t) in self.times.iter().enumerate() {
            // Exact: the constructors checked the earliest time minus the range.
            let (from, back) = (t.saturating_sub(self.range), t < prev_t);
            let w = floats.window(&series.samples, |s| s.t, from, t, back);
            let hw = hists.window(&series.histograms, |p| p.t, from, t, back);
            prev_t = t;
            pending = pending.saturating_add(f(i, &series.samples[w], &series.histograms[hw]));
            if pending >= WORK_BATCH {
                ev.work(pending, phase)?;
                pending = 0;
            }
        }
        ev.work(pending, phase)
    }

    /// A range vector at the top of an instant query: each series' samples in the one window.
    fn into_top(self) -> Vec<Series> {
        let t = self.times.first().copied().unwrap_or_default();
        let from = t.saturating_sub(self.range);
        self.series
            .into_iter()
            .map(|s| Series {
                samples: s.samples.iter().copied().filter(|x| x.t >= from && x.t <= t).collect(),
                histograms: s
                    .histograms
                    .iter()
                    .filter(|p| p.t >= from && p.t <= t)
                    .cloned()
                    .collect(),
                labels: s.labels.clone(),
            })
            .collect()
    }
}

/// The samples of one kind in a window `[from, to]`, as indices moving forward while the windows do.
#[derive(Default)]
struct Cursor {
    lo: usize,
    hi: usize,
}

impl Cursor {
    fn window<T>(
        &mut self,
        items: &[T],
        time: impl Fn(&T) -> i64,
        from: i64,
        to: i64,
        back: bool,
    ) -> std::ops::Range<usize> {
        if back {
            self.lo = items.partition_point(|x| time(x) < from);
            self.hi = items.partition_point(|x| time(x) <= to);
        } else {
            while self.lo < items.len() && time(&items[self.lo]) < from {
                self.lo += 1;
            }
            self.hi = self.hi.max(self.lo);
            while self.hi < items.len() && time(&items[self.hi]) <= to {
                self.hi += 1;
            }
        }
        self.lo..self.hi.max(self.lo)
    }
}

/// A step series' values as points at the grid's times: floats and histograms apart.
pub(crate) fn step_points(
    g: Grid,
    vals: Vec<Option<f64>>,
    hists: Vec<Option<FloatHistogram>>,
) -> (Vec<Sample>, Vec<HistogramPoint>) {
    let samples = g
        .times()
        .zip(vals)
        .filter_map(|(t, v)| v.map(|v| Sample::new(t, v)))
        .collect();
    let histograms = g
        .times()
        .zip(hists)
        .filter_map(|(t, h)| h.map(|h| HistogramPoint::new(t, h)))
        .collect();
    (samples, histograms)
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
pub(crate) fn dedupe_per_step(ev: &Evaluator<'_>, series: Vec<StepSeries>) -> Result<Vec<StepSeries>, PromqlError> {
    merge_same_labels(ev, series, true)
}

/// Like [`dedupe_per_step`], but two series with the same labels fail even at different steps: what
/// Prometheus 2 does for the results of range functions (`rate({__name__=~"a|b"}[5m])`).
pub(crate) fn dedupe_whole_range(ev: &Evaluator<'_>, series: Vec<StepSeries>) -> Result<Vec<StepSeries>, PromqlError> {
    merge_same_labels(ev, series, false)
}

fn merge_same_labels(
    ev: &Evaluator<'_>,
    series: Vec<StepSeries>,
    per_step: bool,
) -> Result<Vec<StepSeries>, PromqlError> {
    const PHASE: &str = "merging series";
    // Usually every label set is distinct (they come from distinct series): found by sorting, without copying.
    let mut order: Vec<usize> = (0..series.len()).collect();
    ev.work(sort_cost(order.len()), PHASE)?;
    order.sort_unstable_by(|&a, &b| series[a].labels.cmp(&series[b].labels));
    ev.work(series.len(), PHASE)?;
    if order.windows(2).all(|w| series[w[0]].labels != series[w[1]].labels) {
        let mut out = Vec::with_capacity(series.len());
        for s in series {
            ev.work(s.vals.len(), PHASE)?;
            if !s.is_empty() {
                out.push(s);
            }
        }
        return Ok(out);
    }
    let mut out: Vec<StepSeries> = Vec::with_capacity(series.len());
    let mut at: HashMap<Labels, usize> = HashMap::with_capacity(series.len());
    for s in series {
        ev.work(s.vals.len(), PHASE)?;
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
                let mut s = s;
                for i in 0..s.vals.len() {
                    if !s.has(i) {
                        continue;
                    }
                    if !per_step || into.has(i) {
                        return Err(execution("vector cannot contain metrics with the same labelset"));
                    }
                    match (s.vals[i], s.hists.get_mut(i).and_then(Option::take)) {
                        (Some(v), _) => into.vals[i] = Some(v),
                        (None, Some(h)) => into.set_hist(i, h),
                        (None, None) => {}
                    }
                }
            }
        }
    }
    Ok(out)
}
