//! What parsing a PromQL query allocates, against the bound the querier reserves for it before parsing
//! (`heddle_querier::promql_parse_bytes`). The parser runs on a thread of its own, so the counting allocator
//! counts every thread; this file holds a single test so that nothing else allocates meanwhile.

use heddle_promql::{Query, QueryOptions, QueryTime};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    let live = LIVE.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to `System` unchanged; the counters only read the sizes.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Counted as a new block beside the old one, as a moving realloc holds both for a moment.
        grew(new_size);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded with the caller's pointer, layout and size.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The most bytes parsing `text` had allocated at once (on any thread), beyond what was live before.
fn peak_of_parse(text: &str) -> (usize, bool) {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let parsed = Query::new(text, QueryTime::Instant(0), &QueryOptions::default());
    let peak = PEAK.load(Ordering::Relaxed) - before;
    let ok = parsed.is_ok();
    if let Err(e) = &parsed {
        eprintln!("not parsed: {e}");
    }
    drop(parsed);
    (peak, ok)
}

/// The query `build(n)` for the largest `n` (a power of two) the engine's limits on operators, nesting and
/// length accept.
fn largest(build: impl Fn(usize) -> String) -> String {
    let mut n = 1 << 14;
    loop {
        let text = build(n);
        if n == 1 || Query::new(&text, QueryTime::Instant(0), &QueryOptions::default()).is_ok() {
            return text;
        }
        n /= 2;
    }
}

/// The leaves `leaf(0..n)` joined by `op` in a balanced tree.
fn balanced_with(n: usize, leaf: &dyn Fn(usize) -> String, op: &str) -> String {
    fn go(from: usize, n: usize, leaf: &dyn Fn(usize) -> String, op: &str) -> String {
        if n <= 1 {
            return leaf(from);
        }
        format!(
            "({}){op}({})",
            go(from, n / 2, leaf, op),
            go(from + n / 2, n - n / 2, leaf, op)
        )
    }
    go(0, n, leaf, op)
}

/// `n` copies of `leaf` joined by `op` in a balanced tree of parentheses, so the nesting stays shallow.
fn balanced(leaf: &str, op: &str, n: usize) -> String {
    if n <= 1 {
        return leaf.to_owned();
    }
    format!("({}){op}({})", balanced(leaf, op, n / 2), balanced(leaf, op, n - n / 2))
}

#[test]
fn parsing_allocates_within_the_reserved_bound() {
    // Near the engine's 512 KiB limit, shapes that cost most per byte: many tiny nodes, deep nesting, many
    // selectors with many matchers, long strings, many distinct selections.
    // The engine refuses more than 4096 operators, 512 KiB of text and 256 levels of nesting: each case goes
    // near one of those limits with the nodes that cost most per byte, binary operators in balanced trees.
    let cases: Vec<(&str, String)> = vec![
        ("sums of numbers", largest(|n| balanced("1", "+", n))),
        ("sums of selectors", largest(|n| balanced("a", "+", n))),
        (
            "selectors with matchers",
            largest(|n| balanced(r#"a{b="c",d="e",g="h",i="j"}"#, " or ", n)),
        ),
        (
            "selectors with regexes",
            largest(|n| balanced(r#"a{f=~"g"}"#, " or ", n)),
        ),
        (
            "distinct selections",
            largest(|n| balanced_with(n, &|i| format!("m{i}"), " or ")),
        ),
        (
            "nested parentheses",
            largest(|n| format!("{}1{}", "(".repeat(n), ")".repeat(n))),
        ),
        (
            "functions of functions",
            largest(|n| format!("{}x{}", "abs(".repeat(n), ")".repeat(n))),
        ),
        (
            "aggregations",
            largest(|n| balanced("sum by (a,b,c,d,e,f) (x)", "+", n)),
        ),
        (
            "subqueries and offsets",
            largest(|n| balanced("max_over_time(x[5m:1m] offset 1m)", "+", n)),
        ),
        (
            "calls with many arguments",
            largest(|n| balanced(r#"label_join(x,"a",",","b","c","d","e")"#, "+", n)),
        ),
        ("numbers in calls", largest(|n| balanced("clamp(x,1,2)", "+", n))),
        (
            "a long string",
            format!("label_replace(x, \"a\", \"{}\", \"b\", \"c\")", "v".repeat(500_000)),
        ),
        ("a long regex", format!("x{{a=~\"{}\"}}", "v|".repeat(30_000))),
        (
            "binary with vector matching",
            largest(|n| balanced("a * on(b) group_left(c) d", " + ", n)),
        ),
        ("a tiny query", "up".to_string()),
    ];
    let mut failures = Vec::new();
    for (name, text) in &cases {
        let (peak, ok) = peak_of_parse(text);
        let bound = heddle_querier::promql_parse_bytes(text);
        eprintln!(
            "{name}: {} bytes, parsed {ok}, peak {peak} ({:.1} per byte), bound {bound}",
            text.len(),
            peak as f64 / text.len() as f64
        );
        assert!(ok, "case {name} parses");
        if peak > bound {
            failures.push(format!(
                "{name}: {} bytes of query allocated {peak} at peak; the bound is {bound}",
                text.len()
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
