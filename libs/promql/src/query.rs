//! A query from text to answer: parse and check it, say which series it needs ([`Query::selections`]), then
//! evaluate it over what the caller fetched ([`Query::evaluate`]).
//!
//! The engine does no I/O: the caller (the querier) fetches each [`Selection`] once, over the whole time range
//! every step of the query needs, and hands the series back in the same order. A range query therefore reads
//! each series once, however many steps it has.

use crate::PromqlError;
use crate::deadline::{DeadlineClock, MonotonicClock};
use crate::eval::{Evaluator, Grid};
use crate::times::{align_up, at_ms, back, duration_ms, offset_ms};
use crate::value::{HistogramPoint, Value};
use heddle_model::{Labels, MatchType, Matcher, Sample};
use promql_parser::label::MatchOp;
use promql_parser::parser::{self, Expr, VectorSelector, value::ValueType};
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Once};
use std::time::Instant;

/// How a query is evaluated and what it may cost.
#[derive(Debug, Clone)]
pub struct QueryOptions {
    /// How far back an instant selector looks for a sample (Prometheus' `--query.lookback-delta`, 5 minutes).
    pub lookback_delta_ms: i64,
    /// The step of a subquery that names none (Prometheus' default evaluation interval, 1 minute).
    pub default_subquery_step_ms: i64,
    /// Most samples the query may hold at once: fetched samples plus the points of the step being built
    /// (Mimir's `-querier.max-samples`). A native histogram counts as Prometheus 3 counts it: one sample per
    /// 16 bytes of its size (11 for the smallest, one more per two buckets or spans).
    pub max_samples: usize,
    /// When evaluation gives up (`timeout`), read from `clock`.
    pub deadline: Option<Instant>,
    /// Set by the caller when it no longer wants the answer (its client went away): evaluation stops at its
    /// next check (`canceled`).
    pub cancel: Option<Arc<AtomicBool>>,
    /// The clock `deadline` is compared with.
    pub clock: Arc<dyn DeadlineClock>,
}

impl Default for QueryOptions {
    fn default() -> Self {
        Self {
            lookback_delta_ms: 5 * 60 * 1000,
            default_subquery_step_ms: 60 * 1000,
            max_samples: 50_000_000,
            deadline: None,
            cancel: None,
            clock: Arc::new(MonotonicClock),
        }
    }
}

/// When a query is evaluated, in milliseconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryTime {
    Instant(i64),
    /// Evaluated at `start`, `start + step`, ... up to `end`.
    Range {
        start: i64,
        end: i64,
        step: i64,
    },
}

/// Series a query needs: those matching `matchers`, with their samples in `[start, end]` (inclusive).
#[derive(Debug, Clone)]
pub struct Selection {
    pub matchers: Vec<Matcher>,
    pub start: i64,
    pub end: i64,
}

/// A selected series, as the caller hands it back for a [`Selection`]: float samples and native histogram
/// samples side by side, as Prometheus' `Series {Floats, Histograms}`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Series {
    pub labels: Labels,
    /// Float samples, sorted by time, one per timestamp; staleness markers included.
    pub samples: Vec<Sample>,
    /// Native histogram samples, sorted by time, one per timestamp and at none of the float samples' times.
    /// Integer histograms are handed in converted ([`heddle_model::Histogram::to_float`]); a staleness marker
    /// is a histogram whose sum is the stale NaN ([`heddle_model::is_stale_nan`]).
    pub histograms: Vec<HistogramPoint>,
}

impl Series {
    /// A series of float samples only.
    pub fn floats(labels: Labels, samples: Vec<Sample>) -> Self {
        Self {
            labels,
            samples,
            histograms: Vec::new(),
        }
    }
}

/// What evaluation cost, for Prometheus' `stats` block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Samples handed to the engine by the selections, histograms counted as for [`QueryOptions::max_samples`].
    pub total_queryable_samples: u64,
    /// The most samples held at once.
    pub peak_samples: u64,
}

/// Builds the label matchers of a query's selectors as they are planned. [`Query::new`] compiles each one it
/// meets; a caller with a cache of its own (each distinct matcher of a request compiled once, its own limits)
/// passes it to [`Query::with_matchers`].
pub trait MatcherBuilder {
    /// The matcher `name kind value`.
    fn matcher(&mut self, kind: MatchType, name: &str, value: &str) -> Result<Matcher, PromqlError>;
}

/// Compiles every matcher it is asked for.
struct Compile;

impl MatcherBuilder for Compile {
    fn matcher(&mut self, kind: MatchType, name: &str, value: &str) -> Result<Matcher, PromqlError> {
        Matcher::new(kind, name, value).map_err(|e| PromqlError::BadData(e.to_string()))
    }
}

/// A parsed, checked query and the selections it needs.
#[derive(Debug)]
pub struct Query {
    /// Boxed and never changed after planning: selections are keyed by the address of their selector node.
    expr: Box<Expr>,
    time: QueryTime,
    selections: Vec<Selection>,
    /// Address of a `VectorSelector` node -> index into `selections`.
    index: HashMap<usize, usize>,
}

/// Functions of Prometheus 2.42 that the parser knows under another name or no longer knows.
fn register_functions() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // `holt_winters` became `double_exponential_smoothing` in Prometheus 3; 2.42 names it `holt_winters`.
        let _ = parser::register_extra_functions(vec![parser::Function::new(
            "holt_winters",
            vec![ValueType::Matrix, ValueType::Scalar, ValueType::Scalar],
            0,
            ValueType::Vector,
            false,
        )]);
    });
}

/// Parses `text` into Prometheus' syntax tree, refusing what Prometheus 2.42 does not know.
pub fn parse(text: &str) -> Result<Expr, PromqlError> {
    register_functions();
    if text.len() > MAX_QUERY_BYTES {
        return Err(PromqlError::BadData(format!(
            "the query is {} bytes; the limit is {MAX_QUERY_BYTES}",
            text.len()
        )));
    }
    prescan(text)?;
    check_number_durations(text)?;
    // The parser recurses once per nesting level while it builds the tree (about 200 bytes of stack each in a
    // debug build): it parses on a thread of its own with room for the deepest text the prescan lets through,
    // and only trees shallow enough for evaluation on a runtime thread come back.
    let parsed = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("promql-parse".into())
            .stack_size(PARSE_STACK_BYTES)
            .spawn_scoped(scope, || {
                let expr = parser::parse(text).map_err(|e| PromqlError::BadData(format!("1:1: parse error: {e}")))?;
                let depth = depth(&expr);
                if depth > MAX_DEPTH {
                    drop_iteratively(expr);
                    return Err(PromqlError::BadData(format!(
                        "the expression is nested {depth} levels deep; the limit is {MAX_DEPTH}"
                    )));
                }
                Ok(expr)
            })
            .map_err(|e| PromqlError::Execution(format!("cannot start the parser thread: {e}")))?
            .join()
            .map_err(|_| PromqlError::Execution("the parser failed".into()))?
    })?;
    check_supported(&parsed)?;
    Ok(parsed)
}

/// The longest query text accepted (Prometheus has no limit; half a MiB holds a regex of thousands of values).
pub const MAX_QUERY_BYTES: usize = 512 * 1024;

/// Stack of the parsing thread: room for [`MAX_OPERATORS`] levels many times over. Reserved, not committed,
/// until used.
const PARSE_STACK_BYTES: usize = 64 * 1024 * 1024;

/// The deepest an expression may nest (parentheses, operands, arguments). Evaluation recurses once per level
/// on a thread's stack, so a query of a million nested parentheses must be refused, not crash the process;
/// real queries, even long chains of `or`, stay far below.
pub const MAX_DEPTH: usize = 256;

/// How deep `expr` nests, without recursing.
fn depth<'e>(expr: &'e Expr) -> usize {
    let mut max = 0;
    let mut stack = vec![(expr, 1usize)];
    while let Some((e, d)) = stack.pop() {
        max = max.max(d);
        let mut push = |c: &'e Expr| stack.push((c, d + 1));
        match e {
            Expr::Aggregate(a) => {
                if let Some(p) = &a.param {
                    push(p);
                }
                push(&a.expr);
            }
            Expr::Unary(u) => push(&u.expr),
            Expr::Binary(b) => {
                push(&b.lhs);
                push(&b.rhs);
            }
            Expr::Paren(p) => push(&p.expr),
            Expr::Subquery(s) => push(&s.expr),
            Expr::Call(c) => c.args.args.iter().for_each(|a| push(a)),
            _ => {}
        }
    }
    max
}

/// Drops an expression of any depth without recursing (the derived drop recurses once per level).
fn drop_iteratively(expr: Expr) {
    let mut stack = vec![expr];
    while let Some(e) = stack.pop() {
        match e {
            Expr::Aggregate(a) => {
                stack.extend(a.param.map(|p| *p));
                stack.push(*a.expr);
            }
            Expr::Unary(u) => stack.push(*u.expr),
            Expr::Binary(b) => {
                stack.push(*b.lhs);
                stack.push(*b.rhs);
            }
            Expr::Paren(p) => stack.push(*p.expr),
            Expr::Subquery(s) => stack.push(*s.expr),
            Expr::Call(c) => stack.extend(c.args.args.into_iter().map(|a| *a)),
            _ => {}
        }
    }
}

/// Prometheus' canonical text of a query (`/api/v1/format_query`).
pub fn format_query(text: &str) -> Result<String, PromqlError> {
    Ok(parse(text)?.prettify())
}

/// Most operators and brackets a query may have. The parser's work grows with the square of a chain's length
/// (`1 + 1 + ...`: 20,000 terms take seconds), so a hostile query is refused before it is parsed; a
/// generated query with a hundred `or`s stays far below.
pub const MAX_OPERATORS: usize = 4096;

/// Refuses a text with more than [`MAX_OPERATORS`] operators and brackets outside string literals, before
/// it is parsed.
///
/// Prometheus 3's quoted names inside a selector (`{"http.server.duration", "service.name"="api"}`,
/// `sum by ("service.name")`) are accepted although 2.42 has no such syntax: names that only the `utf8` name
/// validation scheme lets in cannot be selected otherwise, and for legacy names the quoted form means the
/// same as the bare one.
fn prescan(text: &str) -> Result<(), PromqlError> {
    let mut operators = 0usize;
    let mut word = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' | '`' => {
                // Skip the literal; only backquoted strings have no escapes.
                let mut escaped = false;
                for d in chars.by_ref() {
                    if escaped {
                        escaped = false;
                    } else if d == '\\' && c != '`' {
                        escaped = true;
                    } else if d == c {
                        break;
                    }
                }
            }
            '#' => {
                // A comment runs to the end of the line.
                for d in chars.by_ref() {
                    if d == '\n' {
                        break;
                    }
                }
            }
            '{' | '(' | '[' => operators += 1,
            c if "+-*/%^=!<>".contains(c) => operators += 1,
            _ => {}
        }
        // Keyword operators: a word ends where an identifier character does not follow.
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            if matches!(word.as_str(), "and" | "or" | "unless" | "atan2") {
                operators += 1;
            }
            word.clear();
        }
        if operators > MAX_OPERATORS {
            return Err(PromqlError::BadData(format!(
                "the query has more than {MAX_OPERATORS} operators and brackets"
            )));
        }
    }
    Ok(())
}

/// Refuses a number written where the parser takes a duration in seconds (Prometheus 3's `x[300]`,
/// `x offset 1e3`, `x[5m:10]`) that no duration of i64 milliseconds holds: the parser converts it with
/// `Duration::from_secs_f64`, which panics on NaN, an infinity or more than u64 seconds.
fn check_number_durations(text: &str) -> Result<(), PromqlError> {
    use lrpar::{Lexeme, Lexer, NonStreamingLexer};
    use promql_parser::parser::token::{T_ADD, T_COLON, T_LEFT_BRACKET, T_NUMBER, T_OFFSET, T_SUB};
    // A text that does not lex fails in the parser, with the parser's message.
    let Ok(lexer) = parser::lex::lexer(text) else {
        return Ok(());
    };
    // The two tokens before the current one.
    let (mut prev, mut before) = (None, None);
    for lexeme in lexer.iter().flatten() {
        let id = lexeme.tok_id();
        let duration_at = matches!(prev, Some(T_LEFT_BRACKET | T_COLON | T_OFFSET))
            || (matches!(prev, Some(T_ADD | T_SUB)) && before == Some(T_OFFSET));
        if id == T_NUMBER && duration_at {
            let number = lexer.span_str(lexeme.span());
            // A number that does not parse fails in the parser before any conversion.
            if let Ok(secs) = promql_parser::util::parse_str_radix(number)
                && !(secs.is_finite() && (0.0..MAX_DURATION_SECS).contains(&secs))
            {
                return Err(PromqlError::TimeOutOfRange(format!("a duration of {number} s")));
            }
        }
        (before, prev) = (prev, Some(id));
    }
    Ok(())
}

/// Seconds from which a duration's milliseconds pass i64.
const MAX_DURATION_SECS: f64 = i64::MAX as f64 / 1000.0;

/// Refuses syntax and functions newer than the Prometheus version Heddle answers like (2.42).
fn check_supported(expr: &Expr) -> Result<(), PromqlError> {
    let mut err = None;
    walk(expr, &mut |e| {
        if err.is_some() {
            return;
        }
        match e {
            Expr::Call(call) if !crate::functions::is_supported(call.func.name) => {
                err = Some(PromqlError::BadData(format!(
                    "1:1: parse error: unknown function with name {:?}",
                    call.func.name
                )));
            }
            Expr::Aggregate(agg) if !crate::aggregate::is_supported(agg.op) => {
                err = Some(PromqlError::BadData(format!(
                    "1:1: parse error: unknown aggregation {:?}",
                    agg.op.to_string()
                )));
            }
            Expr::VectorSelector(vs) if !vs.matchers.or_matchers.is_empty() => {
                err = Some(PromqlError::BadData(
                    "1:1: parse error: `or` inside a selector is not supported".into(),
                ));
            }
            Expr::MatrixSelector(ms) if !ms.vs.matchers.or_matchers.is_empty() => {
                err = Some(PromqlError::BadData(
                    "1:1: parse error: `or` inside a selector is not supported".into(),
                ));
            }
            Expr::Binary(b)
                if b.modifier
                    .as_ref()
                    .is_some_and(|m| m.fill_values.lhs.is_some() || m.fill_values.rhs.is_some()) =>
            {
                err = Some(PromqlError::BadData(
                    "1:1: parse error: `fill` modifiers are not supported".into(),
                ));
            }
            Expr::Extension(_) => err = Some(PromqlError::BadData("1:1: parse error: unknown expression".into())),
            _ => {}
        }
    });
    err.map_or(Ok(()), Err)
}

/// Calls `f` on every node of `expr`, parents first.
pub(crate) fn walk<'e>(expr: &'e Expr, f: &mut impl FnMut(&'e Expr)) {
    f(expr);
    match expr {
        Expr::Aggregate(a) => {
            if let Some(p) = &a.param {
                walk(p, f);
            }
            walk(&a.expr, f);
        }
        Expr::Unary(u) => walk(&u.expr, f),
        Expr::Binary(b) => {
            walk(&b.lhs, f);
            walk(&b.rhs, f);
        }
        Expr::Paren(p) => walk(&p.expr, f),
        Expr::Subquery(s) => walk(&s.expr, f),
        Expr::Call(c) => c.args.args.iter().for_each(|a| walk(a, f)),
        Expr::NumberLiteral(_)
        | Expr::StringLiteral(_)
        | Expr::VectorSelector(_)
        | Expr::MatrixSelector(_)
        | Expr::Extension(_) => {}
    }
}

/// The key of a selector node.
pub(crate) fn node_key(vs: &VectorSelector) -> usize {
    vs as *const VectorSelector as usize
}

impl Query {
    /// Parses and checks `text` for evaluation at `time`, and works out its selections.
    pub fn new(text: &str, time: QueryTime, opts: &QueryOptions) -> Result<Self, PromqlError> {
        Self::with_matchers(text, time, opts, &mut Compile)
    }

    /// [`Query::new`] building the selectors' matchers with `matchers` (a request's cache, say).
    pub fn with_matchers(
        text: &str,
        time: QueryTime,
        opts: &QueryOptions,
        matchers: &mut dyn MatcherBuilder,
    ) -> Result<Self, PromqlError> {
        let expr = Box::new(parse(text)?);
        Self::from_expr(expr, time, opts, matchers)
    }

    fn from_expr(
        expr: Box<Expr>,
        time: QueryTime,
        opts: &QueryOptions,
        matchers: &mut dyn MatcherBuilder,
    ) -> Result<Self, PromqlError> {
        let (start, end) = match time {
            QueryTime::Instant(t) => (t, t),
            QueryTime::Range { start, end, step } => {
                if step <= 0 {
                    return Err(PromqlError::BadData(
                        "zero or negative query resolution step widths are not accepted. Try a positive integer".into(),
                    ));
                }
                if end < start {
                    return Err(PromqlError::BadData(
                        "end timestamp must not be before start time".into(),
                    ));
                }
                let ty = expr.value_type();
                if !matches!(ty, ValueType::Scalar | ValueType::Vector) {
                    return Err(PromqlError::BadData(format!(
                        "invalid expression type {:?} for range query, must be Scalar or instant Vector",
                        type_word(ty)
                    )));
                }
                (start, end)
            }
        };
        let mut planner = Planner {
            opts,
            matchers,
            query_start: start,
            query_end: end,
            selections: Vec::new(),
            index: HashMap::new(),
        };
        planner.plan(&expr, start, end)?;
        let Planner { selections, index, .. } = planner;
        Ok(Self {
            expr,
            time,
            selections,
            index,
        })
    }

    /// The series the query reads, each to be fetched once; [`Query::evaluate`] takes them back in this order.
    pub fn selections(&self) -> &[Selection] {
        &self.selections
    }

    /// The query's expression.
    pub fn expr(&self) -> &Expr {
        &self.expr
    }

    /// Evaluates the query over `fetched`, one entry per [`Query::selections`] entry, in order.
    pub fn evaluate(&self, fetched: Vec<Vec<Series>>, opts: &QueryOptions) -> Result<(Value, Stats), PromqlError> {
        if fetched.len() != self.selections.len() {
            return Err(PromqlError::Execution(format!(
                "{} selections fetched for a query of {}",
                fetched.len(),
                self.selections.len()
            )));
        }
        let (start, end, grid) = match self.time {
            QueryTime::Instant(t) => (t, t, Grid::instant(t)),
            QueryTime::Range { start, end, step } => (start, end, Grid::range(start, end, step)),
        };
        let eval = Evaluator::new(fetched, &self.index, opts, start, end)?;
        eval.hold(grid.len)?;
        let value = eval.top(&self.expr, grid, matches!(self.time, QueryTime::Range { .. }))?;
        Ok((value, eval.stats()))
    }
}

fn type_word(ty: ValueType) -> &'static str {
    match ty {
        ValueType::Vector => "instant vector",
        ValueType::Scalar => "scalar",
        ValueType::Matrix => "range vector",
        ValueType::String => "string",
    }
}

/// Works out each selector's time range from the steps that evaluate it.
struct Planner<'o> {
    opts: &'o QueryOptions,
    matchers: &'o mut dyn MatcherBuilder,
    query_start: i64,
    query_end: i64,
    selections: Vec<Selection>,
    index: HashMap<usize, usize>,
}

impl Planner<'_> {
    /// Plans `expr` evaluated at times from `first` to `last`.
    fn plan(&mut self, expr: &Expr, first: i64, last: i64) -> Result<(), PromqlError> {
        match expr {
            Expr::VectorSelector(vs) => self.select(vs, first, last, self.opts.lookback_delta_ms, "lookback"),
            Expr::MatrixSelector(ms) => self.select(&ms.vs, first, last, duration_ms(&ms.range, "range")?, "range"),
            // The same times as `Evaluator::range_source_of_subquery` derives, for the first and last step.
            Expr::Subquery(sq) => {
                let (first, last) = match at_ms(&sq.at, self.query_start, self.query_end)? {
                    Some(at) => (at, at),
                    None => (first, last),
                };
                let step = match &sq.step {
                    Some(d) => duration_ms(d, "subquery step")?,
                    None => self.opts.default_subquery_step_ms,
                };
                if step <= 0 {
                    return Err(PromqlError::BadData("subquery step must be positive".into()));
                }
                let offset = offset_ms(&sq.offset)?;
                let range = duration_ms(&sq.range, "subquery range")?;
                let inner_first = align_up(back(back(first, offset, "offset")?, range, "subquery range")?, step)?;
                self.plan(&sq.expr, inner_first, back(last, offset, "offset")?)
            }
            Expr::Aggregate(a) => {
                if let Some(p) = &a.param {
                    self.plan(p, first, last)?;
                }
                self.plan(&a.expr, first, last)
            }
            Expr::Unary(u) => self.plan(&u.expr, first, last),
            Expr::Binary(b) => {
                self.plan(&b.lhs, first, last)?;
                self.plan(&b.rhs, first, last)
            }
            Expr::Paren(p) => self.plan(&p.expr, first, last),
            Expr::Call(c) => c.args.args.iter().try_for_each(|a| self.plan(a, first, last)),
            Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => Ok(()),
        }
    }

    /// A selection for `vs` evaluated from `first` to `last`, reaching `reach` (the `what`: range or lookback)
    /// back from each evaluation time.
    fn select(
        &mut self,
        vs: &VectorSelector,
        first: i64,
        last: i64,
        reach: i64,
        what: &str,
    ) -> Result<(), PromqlError> {
        let (first, last) = match at_ms(&vs.at, self.query_start, self.query_end)? {
            Some(at) => (at, at),
            None => (first, last),
        };
        let offset = offset_ms(&vs.offset)?;
        let mut matchers = Vec::with_capacity(vs.matchers.matchers.len() + 1);
        if let Some(name) = &vs.name {
            matchers.push(Matcher::equal(heddle_model::METRIC_NAME, name.clone()));
        }
        for m in &vs.matchers.matchers {
            let kind = match m.op {
                MatchOp::Equal => MatchType::Equal,
                MatchOp::NotEqual => MatchType::NotEqual,
                MatchOp::Re(_) => MatchType::RegexMatch,
                MatchOp::NotRe(_) => MatchType::RegexNoMatch,
            };
            matchers.push(self.matchers.matcher(kind, &m.name, &m.value)?);
        }
        let (start, end) = (
            back(back(first, offset, "offset")?, reach, what)?,
            back(last, offset, "offset")?,
        );
        // The same series over the same span (`x / x`, `rate(x[5m]) / rate(x[5m] offset 0s)`) are fetched once.
        let same = |m: &[Matcher]| {
            m.len() == matchers.len()
                && m.iter()
                    .zip(&matchers)
                    .all(|(a, b)| a.kind() == b.kind() && a.name() == b.name() && a.value() == b.value())
        };
        let at = match self
            .selections
            .iter()
            .position(|s| s.start == start && s.end == end && same(&s.matchers))
        {
            Some(i) => i,
            None => {
                self.selections.push(Selection { matchers, start, end });
                self.selections.len() - 1
            }
        };
        self.index.insert(node_key(vs), at);
        Ok(())
    }
}
