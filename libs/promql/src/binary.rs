//! Binary operators: arithmetic, comparisons (filtering, or `bool`), `and`/`or`/`unless`, and vector matching
//! with `on`/`ignoring` and `group_left`/`group_right`, as Prometheus 2 defines them.
//!
//! Matching signatures and result label sets depend only on the series, so they are computed once per
//! series (or pair of series); only the values are looked at per step.

use crate::PromqlError;
use crate::error::execution;
use crate::eval::{Evaluator, Grid, Out, Point, StepSeries, dedupe_per_step, drop_name, drop_own_name};
use heddle_model::{FloatHistogram, Labels, METRIC_NAME};
use promql_parser::parser::token::{
    T_ADD, T_ATAN2, T_DIV, T_EQLC, T_GTE, T_GTR, T_LAND, T_LOR, T_LSS, T_LTE, T_LUNLESS, T_MOD, T_MUL, T_NEQ, T_POW,
    T_SUB, TokenId,
};
use promql_parser::parser::{BinaryExpr, LabelModifier, VectorMatchCardinality};
use std::collections::HashMap;

pub(crate) fn eval(ev: &Evaluator<'_>, b: &BinaryExpr, g: Grid) -> Result<Out, PromqlError> {
    let op = b.op.id();
    let return_bool = b.return_bool();
    let lhs = ev.eval(&b.lhs, g)?;
    let rhs = ev.eval(&b.rhs, g)?;
    match (lhs, rhs) {
        (Out::Scalar(l), Out::Scalar(r)) => Ok(Out::Scalar({
            ev.work(l.len(), PHASE)?;
            l.into_iter()
                .zip(r)
                .map(|(a, b)| {
                    let (v, keep) = apply(op, a, b)?;
                    Ok(if is_comparison(op) {
                        if keep { 1.0 } else { 0.0 }
                    } else {
                        v
                    })
                })
                .collect::<Result<_, PromqlError>>()?
        })),
        (Out::Vector(v), Out::Scalar(s)) => vector_scalar(ev, op, v, &s, false, return_bool),
        (Out::Scalar(s), Out::Vector(v)) => vector_scalar(ev, op, v, &s, true, return_bool),
        (Out::Vector(l), Out::Vector(r)) => {
            let matching = Matching::of(b);
            if is_set(op) {
                Ok(Out::Vector(set_op(ev, op, l, r, &matching, g)?))
            } else {
                Ok(Out::Vector(vector_vector(ev, op, l, r, &matching, return_bool, g)?))
            }
        }
        _ => Err(PromqlError::BadData(format!(
            "binary expression must contain only scalar and instant vector types (operator {})",
            b.op
        ))),
    }
}

/// The phase a timed-out binary operation reports.
const PHASE: &str = "binary operation";

fn is_comparison(op: TokenId) -> bool {
    matches!(op, T_EQLC | T_NEQ | T_GTR | T_LSS | T_GTE | T_LTE)
}

fn is_set(op: TokenId) -> bool {
    matches!(op, T_LAND | T_LOR | T_LUNLESS)
}

/// Arithmetic operators drop the metric name; comparisons (unless `bool`) and `atan2` keep it, as in
/// Prometheus 2.
fn drops_name(op: TokenId) -> bool {
    matches!(op, T_ADD | T_SUB | T_MUL | T_DIV | T_MOD | T_POW)
}

/// `lhs op rhs`: the value and, for comparisons, whether it holds.
fn apply(op: TokenId, l: f64, r: f64) -> Result<(f64, bool), PromqlError> {
    Ok(match op {
        T_ADD => (l + r, true),
        T_SUB => (l - r, true),
        T_MUL => (l * r, true),
        T_DIV => (l / r, true),
        T_POW => (l.powf(r), true),
        T_MOD => (l % r, true),
        T_ATAN2 => (l.atan2(r), true),
        T_EQLC => (l, l == r),
        T_NEQ => (l, l != r),
        T_GTR => (l, l > r),
        T_LSS => (l, l < r),
        T_GTE => (l, l >= r),
        T_LTE => (l, l <= r),
        _ => {
            return Err(execution(format!(
                "operator {op} is not an arithmetic or comparison operator"
            )));
        }
    })
}

fn vector_scalar(
    ev: &Evaluator<'_>,
    op: TokenId,
    series: Vec<StepSeries>,
    scalar: &[f64],
    scalar_left: bool,
    return_bool: bool,
) -> Result<Out, PromqlError> {
    let mut out = Vec::with_capacity(series.len());
    for s in series {
        ev.work(s.vals.len() + s.hists.len(), PHASE)?;
        let labels = if drops_name(op) || return_bool {
            drop_own_name(s.labels)
        } else {
            s.labels
        };
        let mut vals = Vec::with_capacity(s.vals.len());
        for (v, &k) in s.vals.into_iter().zip(scalar) {
            vals.push(match v {
                None => None,
                Some(v) => {
                    let (l, r) = if scalar_left { (k, v) } else { (v, k) };
                    let (mut value, keep) = apply(op, l, r)?;
                    // A comparison keeps the vector's value, whichever side it is on.
                    if is_comparison(op) && scalar_left {
                        value = r;
                    }
                    match (return_bool, keep) {
                        (true, k) => Some(if k { 1.0 } else { 0.0 }),
                        (false, true) => Some(value),
                        (false, false) => None,
                    }
                }
            });
        }
        let hists = s
            .hists
            .into_iter()
            .zip(scalar)
            .map(|(h, &k)| h.and_then(|h| histogram_scalar(op, h, k, scalar_left)))
            .collect();
        out.push(StepSeries { labels, vals, hists });
    }
    Ok(Out::Vector(dedupe_per_step(ev, out)?))
}

/// A histogram and a scalar, as Prometheus 3: `h * k`, `k * h` and `h / k` scale it; anything else has no
/// result.
fn histogram_scalar(op: TokenId, mut h: FloatHistogram, k: f64, scalar_left: bool) -> Option<FloatHistogram> {
    match op {
        T_MUL => h.mul(k),
        T_DIV if !scalar_left => h.div(k),
        _ => return None,
    }
    Some(h)
}

/// A result value of an operation between two vector elements.
enum Res {
    F(f64),
    H(FloatHistogram),
}

/// An operation with a histogram on either side, as Prometheus 3: `+` and `-` of two histograms (no result if
/// they cannot be combined), `*` by a float on either side, `/` by a float, `==` and `!=` of two histograms
/// (filtering, or 1/0 with `bool`); anything else has no result.
fn histogram_binop(op: TokenId, l: Point<'_>, r: Point<'_>, return_bool: bool) -> Option<Res> {
    match (l, r) {
        (Point::H(a), Point::H(b)) => match op {
            T_ADD => a.add(b).ok().map(Res::H),
            T_SUB => a.sub(b).ok().map(Res::H),
            T_EQLC | T_NEQ => {
                let keep = a.same_as(b) == (op == T_EQLC);
                if return_bool {
                    Some(Res::F(if keep { 1.0 } else { 0.0 }))
                } else {
                    keep.then(|| Res::H(a.clone()))
                }
            }
            _ => None,
        },
        (Point::H(h), Point::F(k)) => histogram_scalar(op, h.clone(), k, false).map(Res::H),
        (Point::F(k), Point::H(h)) => histogram_scalar(op, h.clone(), k, true).map(Res::H),
        (Point::F(_), Point::F(_)) => None,
    }
}

/// How the two sides of a vector operation are matched.
struct Matching {
    /// `on(...)`: match on these labels only; otherwise on all but these (`ignoring(...)`) and `__name__`.
    on: bool,
    labels: Vec<String>,
    card: Card,
    /// `group_left(...)`/`group_right(...)`: labels copied from the "one" side.
    include: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Card {
    OneToOne,
    ManyToOne,
    OneToMany,
}

impl Matching {
    fn of(b: &BinaryExpr) -> Self {
        let (on, labels) = match b.modifier.as_ref().and_then(|m| m.matching.as_ref()) {
            Some(LabelModifier::Include(l)) => (true, l.labels.clone()),
            Some(LabelModifier::Exclude(l)) => (false, l.labels.clone()),
            None => (false, Vec::new()),
        };
        let (card, include) = match b.modifier.as_ref().map(|m| &m.card) {
            Some(VectorMatchCardinality::ManyToOne(l)) => (Card::ManyToOne, l.labels.clone()),
            Some(VectorMatchCardinality::OneToMany(l)) => (Card::OneToMany, l.labels.clone()),
            _ => (Card::OneToOne, Vec::new()),
        };
        Self {
            on,
            labels,
            card,
            include,
        }
    }

    fn signature(&self, labels: &Labels) -> Labels {
        if self.on {
            labels.filtered(|n| self.labels.iter().any(|l| l == n))
        } else {
            labels.filtered(|n| n != METRIC_NAME && !self.labels.iter().any(|l| l == n))
        }
    }
}

/// Gives each distinct signature a small id.
type SignatureIds = (Vec<usize>, Vec<usize>, Vec<Labels>);

fn signature_ids(
    ev: &Evaluator<'_>,
    matching: &Matching,
    sides: [&[StepSeries]; 2],
) -> Result<SignatureIds, PromqlError> {
    let mut ids: HashMap<Labels, usize> = HashMap::new();
    let mut sigs = Vec::new();
    let mut of = |s: &StepSeries| {
        // A label set is copied and hashed: a few units per label.
        ev.work(4 * s.labels.len() + 1, PHASE)?;
        let sig = matching.signature(&s.labels);
        if let Some(&id) = ids.get(&sig) {
            return Ok(id);
        }
        ids.insert(sig.clone(), sigs.len());
        sigs.push(sig);
        Ok(sigs.len() - 1)
    };
    let left = sides[0].iter().map(&mut of).collect::<Result<_, PromqlError>>()?;
    let right = sides[1].iter().map(&mut of).collect::<Result<_, PromqlError>>()?;
    Ok((left, right, sigs))
}

fn set_op(
    ev: &Evaluator<'_>,
    op: TokenId,
    lhs: Vec<StepSeries>,
    rhs: Vec<StepSeries>,
    matching: &Matching,
    g: Grid,
) -> Result<Vec<StepSeries>, PromqlError> {
    let (lsig, rsig, sigs) = signature_ids(ev, matching, [&lhs, &rhs])?;
    // present[sig][step]: whether the other side has a series of that signature at the step.
    let presence = |series: &[StepSeries], ids: &[usize]| {
        ev.work(sigs.len().saturating_mul(g.len), PHASE)?;
        let mut p = vec![vec![false; g.len]; sigs.len()];
        for (s, &id) in series.iter().zip(ids) {
            ev.work(g.len, PHASE)?;
            for (i, present) in p[id].iter_mut().enumerate() {
                *present |= s.has(i);
            }
        }
        Ok::<_, PromqlError>(p)
    };
    let out = match op {
        T_LAND | T_LUNLESS => {
            let right = presence(&rhs, &rsig)?;
            let want = op == T_LAND;
            let mut out = Vec::with_capacity(lhs.len());
            for (mut s, id) in lhs.into_iter().zip(lsig) {
                ev.work(g.len, PHASE)?;
                for (i, &present) in right[id].iter().enumerate() {
                    if present != want {
                        s.clear(i);
                    }
                }
                out.push(s);
            }
            out
        }
        _ => {
            let left = presence(&lhs, &lsig)?;
            let mut out = lhs;
            for (mut s, id) in rhs.into_iter().zip(rsig) {
                ev.work(g.len, PHASE)?;
                for (i, &present) in left[id].iter().enumerate() {
                    if present {
                        s.clear(i);
                    }
                }
                out.push(s);
            }
            out
        }
    };
    dedupe_per_step(ev, out)
}

fn vector_vector(
    ev: &Evaluator<'_>,
    op: TokenId,
    lhs: Vec<StepSeries>,
    rhs: Vec<StepSeries>,
    matching: &Matching,
    return_bool: bool,
    g: Grid,
) -> Result<Vec<StepSeries>, PromqlError> {
    // The "many" side drives; for one-to-many the sides swap and values are swapped back when applied.
    let swapped = matching.card == Card::OneToMany;
    let (many, one) = if swapped { (rhs, lhs) } else { (lhs, rhs) };
    let (many_sig, one_sig, sigs) = signature_ids(ev, matching, [&many, &one])?;
    let mut one_by_sig: Vec<Vec<usize>> = vec![Vec::new(); sigs.len()];
    for (i, &id) in one_sig.iter().enumerate() {
        one_by_sig[id].push(i);
    }
    let one_side = if swapped { "left" } else { "right" };

    let mut out: Vec<StepSeries> = Vec::new();
    let mut out_by_labels: HashMap<Labels, usize> = HashMap::new();
    let mut pair_out: HashMap<(usize, usize), usize> = HashMap::new();
    // Per signature, the last step it matched at (one-to-one), or the result series matched at this step
    // (many-to-one): to refuse ambiguous matches as Prometheus does.
    let mut matched_at: Vec<usize> = vec![usize::MAX; sigs.len()];
    let mut matched_outputs: HashMap<(usize, usize), usize> = HashMap::new();

    for step in 0..g.len {
        // Each step looks at every series of both sides.
        ev.work(many.len() + one.len() + 1, PHASE)?;
        let many_present = many.iter().any(|s| s.has(step));
        let one_present = one.iter().any(|s| s.has(step));
        if !many_present || !one_present {
            continue;
        }
        // The "one" side must be unique per signature at each step.
        let mut one_at: Vec<Option<usize>> = vec![None; sigs.len()];
        for (sig, members) in one_by_sig.iter().enumerate() {
            let mut present = members.iter().filter(|&&m| one[m].has(step));
            if let Some(&first) = present.next() {
                if let Some(&second) = present.next() {
                    return Err(execution(format!(
                        "found duplicate series for the match group {} on the {one_side} hand-side of the \
                         operation: [{}, {}];many-to-many matching not allowed: matching labels must be unique \
                         on one side",
                        sigs[sig], one[second].labels, one[first].labels
                    )));
                }
                one_at[sig] = Some(first);
            }
        }
        for (m, series) in many.iter().enumerate() {
            let Some(mv) = series.at(step) else { continue };
            let sig = many_sig[m];
            let Some(o) = one_at[sig] else { continue };
            let Some(ov) = one[o].at(step) else { continue };
            let (l, r) = if swapped { (ov, mv) } else { (mv, ov) };
            let value = match (l, r) {
                (Point::F(l), Point::F(r)) => {
                    let (value, keep) = apply(op, l, r)?;
                    match (return_bool, keep) {
                        (true, k) => Res::F(if k { 1.0 } else { 0.0 }),
                        (false, true) => Res::F(value),
                        (false, false) => continue,
                    }
                }
                _ => match histogram_binop(op, l, r, return_bool) {
                    Some(v) => v,
                    None => continue,
                },
            };
            let idx = match pair_out.get(&(m, o)) {
                Some(&idx) => idx,
                None => {
                    let labels = result_labels(op, &series.labels, &one[o].labels, matching, return_bool)?;
                    let idx = *out_by_labels.entry(labels.clone()).or_insert_with(|| {
                        out.push(StepSeries::floats(labels, vec![None; g.len]));
                        out.len() - 1
                    });
                    pair_out.insert((m, o), idx);
                    idx
                }
            };
            if matching.card == Card::OneToOne {
                if matched_at[sig] == step {
                    return Err(execution(
                        "multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)",
                    ));
                }
                matched_at[sig] = step;
            } else if matched_outputs.insert((sig, idx), step) == Some(step) {
                return Err(execution(
                    "multiple matches for labels: grouping labels must ensure unique matches",
                ));
            }
            let into = &mut out[idx];
            if into.has(step) {
                return Err(execution("vector cannot contain metrics with the same labelset"));
            }
            match value {
                Res::F(v) => into.vals[step] = Some(v),
                Res::H(h) => into.set_hist(step, h),
            }
        }
    }
    Ok(out.into_iter().filter(|s| !s.is_empty()).collect())
}

/// The labels of `many op one`'s result (Prometheus' `resultMetric`).
fn result_labels(
    op: TokenId,
    many: &Labels,
    one: &Labels,
    matching: &Matching,
    return_bool: bool,
) -> Result<Labels, PromqlError> {
    let mut labels = if drops_name(op) || return_bool {
        drop_name(many)
    } else {
        many.clone()
    };
    if matching.card == Card::OneToOne {
        labels = if matching.on {
            labels.filtered(|n| matching.labels.iter().any(|l| l == n))
        } else {
            labels.filtered(|n| !matching.labels.iter().any(|l| l == n))
        };
    }
    for name in &matching.include {
        labels = labels
            .with(name, one.get(name).unwrap_or(""))
            .map_err(|e| execution(e.to_string()))?;
    }
    Ok(labels)
}
