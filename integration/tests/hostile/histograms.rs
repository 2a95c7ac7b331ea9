//! Native histograms: bodies that are small on the wire but huge once decoded (40 million empty buckets in
//! a few MB of snappy), the tenant's bucket limit (reduced or refused), the hard ceiling no limit raises, and a
//! query over big histograms, which counts each by its size before decoding it.
//!
//! The cases use tenants of their own, so the other surfaces' scans of the attacker's series never meet these
//! histograms. `hostile.rs` gives two of them runtime overrides ([`STRICT`], [`WIDE`]) and the process a
//! fetch sample limit of [`MAX_SAMPLES_PER_QUERY`].

use super::case::*;
use heddle_proto::prometheus::{BucketSpan, Histogram, histogram};
use prost::Message;

/// Default limits: 160 buckets, reduced when over.
pub(crate) const PLAIN: &str = "hist-plain";
/// `reduce_native_histogram_over_max_buckets: false`.
pub(crate) const STRICT: &str = "hist-strict";
/// `max_native_histogram_buckets: 16384`, the ceiling itself.
pub(crate) const WIDE: &str = "hist-wide";
/// `--querier.max-samples-per-query` of the process.
pub(crate) const MAX_SAMPLES_PER_QUERY: usize = 200_000;
/// The ceiling (`heddle_model::histogram::MAX_BUCKETS_CEILING`).
const CEILING: usize = 16_384;
/// Histograms the query case stores: 30 of the ceiling's size weigh 30 x 8,203 samples, more than
/// [`MAX_SAMPLES_PER_QUERY`], while they are only 30 samples by count. (Few: an ingester of a debug build takes
/// about a second to append them, and the distributor waits 2 s.)
const BIG_HISTOGRAMS: i64 = 30;

/// The runtime config the process starts with.
pub(crate) fn runtime_config() -> String {
    format!(
        "overrides:\n  {STRICT}:\n    reduce_native_histogram_over_max_buckets: false\n  {WIDE}:\n    \
         max_native_histogram_buckets: {CEILING}\n"
    )
}

/// The encoded `Histogram` message of a counter histogram with `buckets` positive buckets at `schema` in one
/// span from index 1, the first holding `first` observations and each later one `step` more than the one
/// before (its delta), written by hand so that 40 million buckets cost 40 MB here, not 320.
fn histogram_bytes(schema: i32, buckets: usize, first: u64, step: u64, t: i64) -> Vec<u8> {
    // Absolute counts first, first + step, ...: their sum.
    let n = buckets as u64;
    let count = if n == 0 { 0 } else { n * first + step * n * (n - 1) / 2 };
    let mut out = Histogram {
        count: Some(histogram::Count::CountInt(count)),
        sum: count as f64,
        schema,
        positive_spans: vec![BucketSpan {
            offset: 1,
            length: buckets as u32,
        }],
        timestamp: t,
        ..Histogram::default()
    }
    .encode_to_vec();
    // Field 12, positive_deltas, packed sint64 (zigzag: 2v), after the other fields: field order is free.
    let mut deltas = Vec::with_capacity(buckets + 10);
    if buckets > 0 {
        prost::encoding::encode_varint(first << 1, &mut deltas);
        for _ in 1..buckets {
            prost::encoding::encode_varint(step << 1, &mut deltas);
        }
    }
    out.push(12 << 3 | 2);
    prost::encoding::encode_varint(deltas.len() as u64, &mut out);
    out.extend_from_slice(&deltas);
    out
}

/// Appends field `tag` (wire type 2) holding `bytes`.
fn field(tag: u8, bytes: &[u8], out: &mut Vec<u8>) {
    out.push(tag << 3 | 2);
    prost::encoding::encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// A remote write 1.0 body of one series `name` with the encoded histograms `histograms`.
fn write_v1(name: &str, histograms: &[Vec<u8>]) -> Vec<u8> {
    let mut label = Vec::new();
    field(1, b"__name__", &mut label);
    field(2, name.as_bytes(), &mut label);
    let mut series = Vec::new();
    field(1, &label, &mut series);
    for h in histograms {
        field(4, h, &mut series);
    }
    let mut req = Vec::new();
    field(1, &series, &mut req);
    snappy(&req)
}

/// The same series as a remote write 2.0 body (symbols "", "__name__", `name`).
fn write_v2(name: &str, histograms: &[Vec<u8>]) -> Vec<u8> {
    let mut req = Vec::new();
    for symbol in ["", "__name__", name] {
        field(4, symbol.as_bytes(), &mut req);
    }
    let mut series = Vec::new();
    field(1, &[1, 2], &mut series);
    for h in histograms {
        field(3, h, &mut series);
    }
    field(5, &series, &mut req);
    snappy(&req)
}

fn push_v2(name: &'static str, body: Vec<u8>) -> Case {
    Case::push(name, body)
        .header(
            "Content-Type",
            "application/x-protobuf;proto=io.prometheus.write.v2.Request",
        )
        .header("X-Prometheus-Remote-Write-Version", "2.0.0")
}

fn instant(name: &'static str, query: &str, now: i64) -> Case {
    Case::get(
        name,
        &format!("/prometheus/api/v1/query?query={query}&time={}", now as f64 / 1000.0),
    )
}

pub(crate) fn cases(now: i64) -> Vec<Case> {
    const HUGE: usize = 40_000_000;
    let huge = histogram_bytes(8, HUGE, 0, 0, now);
    // 1,000 buckets of one observation each at schema 8 (256 a power of two), from index 1: over the default
    // limit of 160, it is halved to schema 7 (500), 6 (250), then 5 (125). Schema 8's first bound is
    // 2^(1/256) = 1.0027112750502025, schema 5's 2^(1/32) = 1.0218971486541166.
    let thousand = histogram_bytes(8, 1000, 1, 0, now);
    let big: Vec<Vec<u8>> = (0..BIG_HISTOGRAMS)
        .map(|i| histogram_bytes(8, CEILING, 0, 0, now - 1000 * (BIG_HISTOGRAMS - i)))
        .collect();
    vec![
        // Before: 200 (or 503 when the ingester took longer than its 2 s deadline), 1.3 GB peak, stored.
        // The decompressed body (38 MiB) is all it may cost: 64 MiB, a sixteenth of the 1 GiB push budget.
        Case::push(
            "40 million empty buckets, remote write 1.0",
            write_v1("huge_v1", std::slice::from_ref(&huge)),
        )
        .tenants(&[PLAIN])
        .want(
            400,
            &[
                "err-heddle-native-histogram-too-large",
                "40000000 buckets",
                "16384",
                "resolution",
            ],
        )
        .peak_growth_below(64 << 20),
        push_v2(
            "40 million empty buckets, remote write 2.0",
            write_v2("huge_v2", &[huge]),
        )
        .tenants(&[PLAIN])
        .want(
            400,
            &[
                "err-heddle-native-histogram-too-large",
                "40000000 buckets",
                "16384",
                "resolution",
            ],
        )
        .peak_growth_below(64 << 20),
        instant(
            "nothing of the huge histograms was stored",
            "count({__name__=~\"huge_.*\"})",
            now,
        )
        .tenants(&[PLAIN])
        .want(200, &[r#""result":[]"#]),
        Case::push(
            "over the default limit of 160 buckets: reduced",
            write_v1("reduced", std::slice::from_ref(&thousand)),
        )
        .tenants(&[PLAIN])
        .want(200, &[]),
        instant(
            "the reduced histogram lost resolution, not observations",
            "reduced",
            now,
        )
        .tenants(&[PLAIN])
        .want(200, &["1.0218971486541166", r#""count":"1000""#])
        .lacks(&["1.0027112750502025"]),
        Case::push(
            "over the limit with reduction off: refused",
            write_v1("strict", &[thousand]),
        )
        .tenants(&[STRICT])
        .want(
            400,
            &[
                "err-heddle-max-native-histogram-buckets",
                "1000 buckets, more than 160",
                "reduce_native_histogram_over_max_buckets` is off",
                "--validation.max-native-histogram-buckets",
            ],
        ),
        Case::push(
            "one bucket over the ceiling is refused, not reduced, whatever the limit",
            write_v1("ceiling", &[histogram_bytes(8, CEILING + 1, 0, 0, now)]),
        )
        .tenants(&[WIDE])
        .want(
            400,
            &[
                "err-heddle-native-histogram-too-large",
                "16385 buckets",
                "no limit raises",
            ],
        ),
        // The 30 histograms of the ceiling's size decode to 30 x 2 x 128 KiB (integer, then float for the
        // engine), about 8 MiB, before any check on main; refused by their weight, they are never decoded.
        Case::push("thirty histograms at the ceiling", write_v1("big", &big))
            .tenants(&[WIDE])
            .want(200, &[]),
        instant("a query counts each histogram by its size", "big", now)
            .tenants(&[WIDE])
            .want(
                422,
                &[
                    "err-heddle-max-samples-per-query",
                    "246090 fetched so far and the limit is 200000",
                    "--querier.max-samples-per-query",
                ],
            )
            .peak_growth_below(8 << 20),
    ]
}
