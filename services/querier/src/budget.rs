//! The querier's in-flight budget (`querier.max_inflight_requests_bytes`): what a request is about to allocate
//! in proportion to its input is reserved in a [`Reservation`] of the querier's [`heddle_server::InflightBytes`]
//! before it is allocated, and given back when the reservation drops.
//!
//! Reserved, in the order a request allocates them: its body as it arrives ([`read_body`], within
//! `querier.max_body_size`); for remote read the decompressed copy (its declared length) and the decoded
//! `ReadRequest` (measured before prost decodes it, `remote_read::measure`), then the parsed queries and
//! matchers the answer keeps; for the JSON API the URL-encoded form ([`form_bytes`]), its `match[]`
//! selectors ([`selectors_bytes`]) and its PromQL query ([`promql_parse_bytes`]); and for each regular
//! expression what compiling it takes ([`regex_bytes`]), found on the text before anything compiles it. The
//! bounds count what the decoders really allocate (struct sizes, a `Vec`'s growth, allocator headroom), not
//! the wire size; the unit tests hold them against a counting allocator.
//!
//! Not reserved here: what an answer holds in proportion to the data it finds, which the fetch limits bound
//! (`limits.max_fetched_*`, `querier.max_samples_per_query`, `querier.max_samples`).

use crate::error::QuerierError;
use crate::params::Form;
use axum::body::Body;
use axum::http::{HeaderMap, header};
use futures::StreamExt;
use heddle_model::{MatchType, Matcher};
use heddle_server::{InflightRefused, Reservation};
use std::mem::size_of;
use std::time::Duration;

/// What a reservation for the body itself is called in messages (and how an error tells it was refused before
/// the body was read).
pub(crate) const BODY: &str = "the request body";

/// Heap bytes an allocation may take beyond what it asked for (allocator rounding and header).
pub(crate) const ALLOCATION_HEADROOM: usize = 16;

/// Reserves `bytes` more in `r` for `what` (words for the message: "the decoded remote read request"), or
/// the error to answer: 413 when the request could not fit even in the whole budget, 503 when the requests
/// in flight hold too much of it now.
pub(crate) fn grow(r: &mut Reservation, bytes: usize, what: &'static str) -> Result<(), QuerierError> {
    r.grow(bytes).map_err(|e| refused(e, what))
}

fn refused(e: InflightRefused, what: &'static str) -> QuerierError {
    if e.requested.saturating_add(e.held) > e.limit {
        QuerierError::RequestTooLarge {
            what,
            requested: e.requested,
            held: e.held,
            limit: e.limit,
        }
    } else {
        QuerierError::InflightBytes {
            what,
            requested: e.requested,
            held: e.held,
            in_flight: e.in_flight,
            limit: e.limit,
        }
    }
}

/// The most a `Vec` of `n` elements of `size` bytes grown one push at a time holds at once: its capacity (the
/// power of two at or above `n`, at least 4, as `Vec` doubles) and, while it last grew, the old block of half
/// that beside it.
pub(crate) fn vec_bytes(n: usize, size: usize) -> usize {
    if n == 0 || size == 0 {
        return 0;
    }
    let capacity = n.checked_next_power_of_two().unwrap_or(usize::MAX).max(4);
    capacity
        .saturating_mul(size)
        .saturating_add(capacity.saturating_mul(size) / 2)
        .saturating_add(2 * ALLOCATION_HEADROOM)
}

/// The most a hash map of `n` entries of `size` bytes holds at once: hashbrown keeps at least an eighth of its
/// buckets free (so up to about 2.3 buckets per entry just after it doubled), one control byte per bucket,
/// and the old table beside the new one while it grows.
pub(crate) fn map_bytes(n: usize, size: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let buckets = n
        .saturating_mul(8)
        .div_ceil(7)
        .checked_next_power_of_two()
        .unwrap_or(usize::MAX)
        .max(4);
    buckets
        .saturating_mul(size + 1)
        .saturating_mul(3)
        .div_ceil(2)
        .saturating_add(2 * ALLOCATION_HEADROOM)
}

/// What [`Form::parse`] allocates at most for `query` and `body`: a pair of strings per `&`-separated part (a
/// percent-decoded part can take twice its text while it is decoded, and its text again as a temporary).
pub(crate) fn form_bytes(query: &str, body: &[u8]) -> usize {
    let amps = |b: &[u8]| b.iter().filter(|&&c| c == b'&').count() + 1;
    let pairs = amps(query.as_bytes()) + amps(body);
    let text = query.len() + body.len();
    vec_bytes(pairs, size_of::<(String, String)>())
        .saturating_add(pairs.saturating_mul(2 * ALLOCATION_HEADROOM))
        .saturating_add(text.saturating_mul(4))
}

/// The request's form as [`Form::parse`] builds it, its bound reserved in `r` first.
pub(crate) fn parse_form(query: Option<&str>, body: &[u8], r: &mut Reservation) -> Result<Form, QuerierError> {
    grow(r, form_bytes(query.unwrap_or(""), body), "the request's form")?;
    Ok(Form::parse(query, body))
}

/// What parsing the series selectors `values` through one request's `MatcherCache` allocates at most, beyond
/// compiling their regular expressions: per selector its raw and built matchers, per matcher its strings
/// (as parsed, as the cache's key, as built, as handed out) and its place in the cache.
///
/// A selector of `n` bytes holds at most `n / 3 + 1` matchers: a matcher takes at least three characters
/// (`"a"`, or `a=""` and its separator), a bare metric name counts as one.
pub(crate) fn selectors_bytes<'a>(values: impl IntoIterator<Item = &'a str>) -> usize {
    let raw = size_of::<(MatchType, String, String)>();
    let built = size_of::<Matcher>();
    let mut total = 0usize;
    let mut matchers = 0usize;
    let mut selectors = 0usize;
    for v in values {
        let n = v.len() / 3 + 1;
        matchers = matchers.saturating_add(n);
        selectors += 1;
        total = total
            .saturating_add(vec_bytes(n, raw))
            .saturating_add(vec_bytes(n, built))
            // The strings: parsed (a decoded string grows as it is read: twice its text), the key, built,
            // handed out; each with its allocator headroom.
            .saturating_add(v.len().saturating_mul(6))
            .saturating_add(n.saturating_mul(8 * ALLOCATION_HEADROOM));
    }
    total
        .saturating_add(map_bytes(matchers, raw + built))
        .saturating_add(vec_bytes(selectors, size_of::<Vec<Matcher>>()))
}

/// What compiling the regular expression `pattern` into a matcher may allocate at most, transient peak
/// included: a base and a share per byte of the pattern (a long alternation), a share per Unicode class,
/// whose UTF-8 automata are large (`.`, `\w`, `\pL`, a negated class...), all doubled for `(?i)`, times the
/// counted repetitions (`{n}`, `{n,m}`) that copy what they repeat; at most what the regex crate's size
/// limit lets one compilation reach. Measured against a counting allocator on the shapes that cost most (the
/// unit tests): a 64 KiB alternation of host names peaks near 35 MB, `\w{100}` near 23 MB, `\w+` at 0.4 MB.
pub(crate) fn regex_bytes(pattern: &str) -> usize {
    let b = pattern.as_bytes();
    let mut classes = 0usize;
    let mut repeat = 1usize;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => {
                if let Some(c) = b.get(i + 1)
                    && b"wWdDsSpPbB".contains(c)
                {
                    classes += 1;
                }
                i += 2;
                continue;
            }
            b'.' => classes += 1,
            b'[' if b.get(i + 1) == Some(&b'^') => classes += 1,
            b'{' => {
                // The largest count of `{n}`, `{n,}` or `{n,m}`.
                let counts = b[i + 1..]
                    .iter()
                    .take_while(|c| c.is_ascii_digit() || **c == b',')
                    .count();
                if b.get(i + 1 + counts) == Some(&b'}') {
                    let n = pattern[i + 1..i + 1 + counts]
                        .split(',')
                        .filter_map(|n| n.parse::<usize>().ok())
                        .max()
                        .unwrap_or(1);
                    repeat = repeat.saturating_mul(n.max(1));
                }
            }
            _ => {}
        }
        i += 1;
    }
    let folded = if pattern.contains("(?i") { 2 } else { 1 };
    REGEX_BASE_BYTES
        .saturating_add(pattern.len().saturating_mul(REGEX_BYTES_PER_BYTE))
        .saturating_add(classes.saturating_mul(REGEX_CLASS_BYTES))
        .saturating_mul(folded)
        .saturating_mul(repeat)
        .min(REGEX_MAX_BYTES)
}

const REGEX_BASE_BYTES: usize = 32 << 10;
const REGEX_BYTES_PER_BYTE: usize = 600;
const REGEX_CLASS_BYTES: usize = 512 << 10;
/// The regex crate refuses a program past its size limit (10 MiB); compiling one up to there peaks near
/// 36 MB (measured).
const REGEX_MAX_BYTES: usize = 48 << 20;

/// What parsing and planning the PromQL query `text` may allocate at most: the parser's tokens, stack and
/// syntax tree in proportion to its tokens, its strings in proportion to their bytes, and each regular
/// expression compiled twice (by the parser, which keeps it in the tree, and for the selection). Measured
/// against a counting allocator over the shapes of query that cost most (`tests/parse_memory.rs`): about
/// 170 bytes per token for the densest, 6 per byte of a long string.
pub fn promql_parse_bytes(text: &str) -> usize {
    // No length limit here: the caller has refused long regexes already.
    let regexes = crate::matchers::MatcherCache::new(0, None)
        .check_query(text)
        .unwrap_or(0);
    promql_tokens(text)
        .saturating_mul(PROMQL_BYTES_PER_TOKEN)
        .saturating_add(text.len().saturating_mul(PROMQL_BYTES_PER_BYTE))
        .saturating_add(PROMQL_PARSE_ALLOWANCE)
        .saturating_add(regexes.saturating_mul(2))
}

/// The tokens of `text` as PromQL's lexer reads them, or more: each string, each run of identifier or
/// number characters, each other character outside strings and comments.
fn promql_tokens(text: &str) -> usize {
    let b = text.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':' || c == b'.';
    let (mut tokens, mut i) = (0usize, 0usize);
    while i < b.len() {
        match b[i] {
            b'"' | b'\'' | b'`' => match crate::selector::quoted_string_at(text, i) {
                Ok((_, end)) => i = end,
                // The lexer stops at an unterminated string.
                Err(_) => return tokens + 1,
            },
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            c if c.is_ascii_whitespace() => {
                i += 1;
                continue;
            }
            c if word(c) => {
                while i < b.len() && word(b[i]) {
                    i += 1;
                }
            }
            _ => i += 1,
        }
        tokens += 1;
    }
    tokens
}

const PROMQL_BYTES_PER_TOKEN: usize = 512;
const PROMQL_BYTES_PER_BYTE: usize = 16;
/// What the smallest query costs to parse.
const PROMQL_PARSE_ALLOWANCE: usize = 64 << 10;

/// Input from which on parsing or decoding it is done off the async runtime ([`off_runtime`]): below it, the
/// work takes less time than handing it to another thread would be worth.
pub(crate) const LARGE_INPUT_BYTES: usize = 64 << 10;

/// Runs `f` on tokio's blocking pool, so CPU work in proportion to a request's input does not hold a
/// runtime thread.
pub(crate) async fn off_runtime<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, QuerierError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| QuerierError::Internal(format!("a blocking task failed: {e}")))
}

/// Reads the whole body within `limit` bytes (413 from `Content-Length` before anything is kept, or as soon
/// as more has arrived) and `timeout` (503), its buffer reserved in `r` before it grows.
///
/// A body refused for its size is read on and dropped up to as much again (within [`DRAIN_TIMEOUT`]), as Go's
/// server does, so that a client still writing it reads the 413 instead of a broken pipe; a larger one is
/// cut off with the connection.
pub(crate) async fn read_body(
    body: Body,
    headers: &HeaderMap,
    limit: usize,
    timeout: Duration,
    r: &mut Reservation,
) -> Result<Vec<u8>, QuerierError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<u64>().ok());
    let mut stream = body.into_data_stream();
    if let Some(len) = declared
        && len > limit as u64
    {
        if len <= 2 * limit as u64 {
            drain(&mut stream, 2 * limit).await;
        }
        return Err(QuerierError::BodyTooLarge { size: len, limit });
    }
    let initial = declared.map_or(0, |l| usize::try_from(l).unwrap_or(limit).min(limit));
    grow(r, initial, BODY)?;
    let mut buf = Vec::with_capacity(initial);
    let read = async {
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| QuerierError::BodyRead { detail: e.to_string() })?;
            let needed = buf.len() + chunk.len();
            if needed > limit {
                return Err(QuerierError::BodyTooLarge {
                    size: needed as u64,
                    limit,
                });
            }
            if needed > buf.capacity() {
                // Grown as a Vec grows (doubling), the new capacity reserved before it is allocated.
                let capacity = needed.max(buf.capacity().saturating_mul(2)).min(limit);
                grow(r, capacity - buf.capacity(), BODY)?;
                buf.reserve_exact(capacity - buf.len());
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(())
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(())) => Ok(buf),
        Ok(Err(e @ QuerierError::BodyTooLarge { .. })) => {
            drop(buf);
            drain(&mut stream, limit).await;
            Err(e)
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(QuerierError::BodyReadTimeout {
            timeout_ms: timeout.as_millis(),
            received: buf.len(),
        }),
    }
}

/// How long a refused body is read on and dropped, at most.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// Reads and drops up to `max` more bytes of `stream` (one chunk held at a time), within [`DRAIN_TIMEOUT`].
async fn drain(stream: &mut axum::body::BodyDataStream, max: usize) {
    let mut left = max;
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while let Some(Ok(chunk)) = stream.next().await {
            left = left.saturating_sub(chunk.len());
            if left == 0 {
                break;
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests;
